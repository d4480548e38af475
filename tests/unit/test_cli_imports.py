"""The command answers at once: ``import steward.cli`` (all that ``steward
--help`` needs) loads no SDK or server library, and a command that reads
the log loads none that it does not use. Each is checked in a fresh
Python process, as a person's command line starts one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "mcp",
    "openai",
    "anthropic",
    "starlette",
    "uvicorn",
    "opentelemetry",
    "jinja2",
)
"""Libraries that take from tens of milliseconds to a second to import:
loaded only by the commands that use them (`steward.cli.parser`)."""


def _loaded(code: str) -> list[str]:
    """The `HEAVY` packages in ``sys.modules`` after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} "
        f"& set({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_command_line_loads_no_heavy_library() -> None:
    assert _loaded("import steward.cli") == []


def test_the_probe_sees_a_heavy_library_when_one_is_loaded() -> None:
    assert _loaded("import steward.cli, jinja2") == ["jinja2"]


@pytest.mark.parametrize(
    "module",
    [
        "steward.actors.run.cli",
        "steward.actors.session.cli",
        "steward.cli.history",
        "steward.actors.workflow.cli",
        "steward.actors.task.cli",
        "steward.cli.prompts",
        "steward.cli.workers",
    ],
)
def test_a_command_that_reads_the_log_loads_no_heavy_library(module: str) -> None:
    assert _loaded(f"import {module}") == []
