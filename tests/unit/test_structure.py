"""steward's structure: no import runs from a lower layer to a higher one,
and no two modules import each other, directly or round a cycle.

The layers, lowest first (DESIGN §1: ``events`` <- ``actors`` <- ``host``
-> ``bus``; projections read events). A module may import its own layer's
and lower ones'. The imports are read with `ast`, at any depth (an import
inside a function counts too), so a deferred import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import steward

ROOT = Path(steward.__file__).parent

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "isotime", "clock", "logs"}),
    frozenset({"events"}),
    frozenset({"config", "bus", "metrics"}),
    frozenset({"actors", "effects"}),
    frozenset({"projections", "kinds", "replay", "hostlock"}),
    frozenset(
        {"host", "chats", "workflows", "tasks", "stage_prompts", "ingress", "egress"}
    ),
    frozenset({"cli", "console", "testing", "__main__", "steward"}),
)
"""Each unit of steward (a subpackage or top-level module; ``steward`` is
the package's own ``__init__``), in the layer it stands in."""


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


KIND_ROLES = {
    "events": "events",
    "projection": "projections",
    "cli": "cli",
    "chat": "cli",
    "grammar": "cli",
    "chats": "host",
    "definition": "host",
    "programs": "host",
    "stage_prompts": "host",
    "kind": "kinds",
}
"""A kind package's modules (``steward.actors.<kind>.<module>``) stand in
the layer of their part: its events beside the shared vocabulary, its read
models beside the projector, its definition files' loaders beside the host,
its commands in the command line; the rest (its decider and reactor) among
the actors. The package itself, which exports the kind (``KIND``, from its
``kind`` module), stands with the kind table."""


def _unit(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["steward", "actors"] and len(parts) > 2:
        if (ROOT / "actors" / parts[2]).is_dir():
            return KIND_ROLES.get(parts[3], "actors") if len(parts) > 3 else "kinds"
    return parts[1] if len(parts) > 1 else "steward"


def _layer(module: str) -> int:
    unit = _unit(module)
    found = [n for n, layer in enumerate(LAYERS) if unit in layer]
    assert found, f"{unit} (of {module}) is in no layer: add it to LAYERS"
    return found[0]


def _imports(module: str) -> Iterator[str]:
    """The steward modules ``module`` imports (a name imported from a
    package is the module of that name when there is one)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [  # the module of each name, or the one it is in
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                for a in node.names
            ]
        else:
            continue
        for name in names:
            if name in MODULES and name != module:
                yield name


GRAPH = {module: sorted(set(_imports(module))) for module in MODULES}


def test_no_import_runs_upward() -> None:
    upward = [
        f"{a} ({_unit(a)}) imports {b} ({_unit(b)})"
        for a, targets in GRAPH.items()
        for b in targets
        if _layer(b) > _layer(a)
    ]
    assert not upward, (
        "imports from a lower layer to a higher one (see LAYERS); move the "
        "shared part down, or hand the lower module what it needs:\n  "
        + "\n  ".join(upward)
    )


def _cycle() -> list[str] | None:
    """One import cycle among steward's modules, or ``None``. A package's
    ``__init__`` re-exporting its own modules is not a cycle of theirs."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done:
            return None
        for target in GRAPH[module]:
            if module.startswith(f"{target}.") or target.startswith(f"{module}."):
                continue  # a package and its own modules
            if (found := visit(target, [*path, module])) is not None:
                return found
        done.add(module)
        return None

    for module in GRAPH:
        if (found := visit(module, [])) is not None:
            return found
    return None


def test_no_import_cycle() -> None:
    cycle = _cycle()
    assert cycle is None, "an import cycle: " + " -> ".join(cycle or [])


def test_the_check_sees_an_upward_import_and_a_cycle(
    monkeypatch: object,
) -> None:
    """The checks above can fail: a graph with an upward import and a
    cycle is caught by each."""
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setitem(GRAPH, "steward.events.base", ["steward.host"])
    monkeypatch.setitem(GRAPH, "steward.host", ["steward.events.base"])
    with pytest.raises(AssertionError, match="steward.events.base"):
        test_no_import_runs_upward()
    with pytest.raises(AssertionError, match="an import cycle"):
        test_no_import_cycle()


GENERIC = (
    *(f"host/{path.name}" for path in sorted((ROOT / "host").glob("*.py"))),
    "replay.py",
    "events/codec.py",
    "projections/store.py",
    "egress.py",
    "cli/history.py",
    "cli/console.py",
    *(f"console/{path.name}" for path in sorted((ROOT / "console").glob("*.py"))),
)
"""The modules that serve every kind through the kind table, and name none."""


def test_the_generic_modules_name_no_kind() -> None:
    from steward.kinds import KINDS

    marks = [
        *(f'"{name}.' for name in KINDS.names),
        *(f"'{name}." for name in KINDS.names),
        *(f"{name}_stream(" for name in KINDS.names),
        "run_id_of(",
    ]
    found = [
        f"{module}:{n}: {line.strip()}"
        for module in GENERIC
        for n, line in enumerate((ROOT / module).read_text().splitlines(), start=1)
        if any(mark in line for mark in marks)
    ]
    assert not found, (
        "a module that serves every kind names one (ask the kind table "
        "instead):\n  " + "\n  ".join(found)
    )


ENTRY = "steward.cli"
"""The command's entry (`steward.cli.main`): the one module outside the kind
packages that hands steward's own table (`steward.kinds.KINDS`) to the
parts it runs, unless it is given another."""


def _in_a_kind(module: str) -> bool:
    parts = module.split(".")
    return (
        parts[:2] == ["steward", "actors"]
        and len(parts) > 2
        and ((ROOT / "actors" / parts[2]).is_dir())
    )


def test_the_core_takes_the_kinds_it_is_given() -> None:
    """The host, the projector, replay, the logs, the egress, the console and
    the command line's core serve the kinds they are handed (as temporalio's
    ``Worker(workflows=...)``): none defaults to steward's table."""
    defaulting = [
        module
        for module, targets in GRAPH.items()
        if "steward.kinds" in targets
        and module not in (ENTRY, "steward.kinds")
        and not _in_a_kind(module)
    ]
    assert not defaulting, (
        "modules outside the kind packages that import steward's kind table "
        "(take the kinds as an argument instead):\n  " + "\n  ".join(defaulting)
    )


def test_the_check_sees_a_core_module_defaulting_to_stewards_kinds(
    monkeypatch: object,
) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setitem(GRAPH, "steward.host.core", ["steward.kinds"])
    with pytest.raises(AssertionError, match="steward.host.core"):
        test_the_core_takes_the_kinds_it_is_given()
