PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint typecheck demo bench docs reference clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check steward tests benchmarks scripts
	$(BIN)/ruff format --check steward tests benchmarks scripts

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite runs in 4 processes: most of its time is spent waiting on
# subprocesses (serve, workers, nats-server), so 4 beat 2 on two cores.
test: lint typecheck
	$(BIN)/pytest -q -n 4

demo: $(STAMP)
	$(BIN)/steward --db .steward/demo.db demo

bench: $(STAMP)
	$(BIN)/python -m benchmarks

DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

reference: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

docs: $(DOCS_STAMP)
	$(BIN)/python scripts/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .steward .pytest_cache .mypy_cache .ruff_cache site
