"""Deciders stay pure: they import nothing that does I/O or reads the clock."""

from __future__ import annotations

import ast
from pathlib import Path

import steward

DECIDERS = [
    "steward/actors/run.py",
    "steward/actors/prompt.py",
    "steward/events/base.py",
    "steward/events/run.py",
    "steward/events/codec.py",
]
FORBIDDEN = {
    "asyncio",
    "aiosqlite",
    "sqlite3",
    "nats",
    "anthropic",
    "openai",
    "time",
    "random",
    "uuid",
    "os",
    "secrets",
    "steward.bus",
    "steward.host",
    "steward.clock",
}
ROOT = Path(steward.__file__).parent.parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_deciders_import_nothing_impure() -> None:
    """A decider module importing I/O, time, randomness or the shell fails here."""
    problems = []
    for rel in DECIDERS:
        for name in _imports(ROOT / rel):
            if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN):
                problems.append(f"{rel} imports {name}")
    assert not problems, (
        "deciders must stay pure (DESIGN §2): "
        + "; ".join(problems)
        + ". Pass times and ids in on input events and do I/O in steward/host.py."
    )


def test_public_surface_is_pinned() -> None:
    """`steward.__all__` lists exactly the names a user needs, all importable."""
    assert sorted(steward.__all__) == [
        "EventLog",
        "Host",
        "Recorded",
        "SqliteEventLog",
        "StewardError",
        "load_settings",
    ]
    for name in steward.__all__:
        assert getattr(steward, name) is not None
