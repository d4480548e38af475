"""Workflow files written by tests: the example's paths and TOML tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).parent.parent / "examples" / "workflows"
EXAMPLE = EXAMPLES / "design-implement-review.toml"
SCRIPT = EXAMPLES / "design-implement-review.script.yaml"
HEAD = '[workflow]\nkey = "w"\nversion = 1\n'


def node(key: str, **fields: Any) -> str:
    """A ``[[nodes]]`` table; provider ``default`` unless given (None: none)."""
    return _table("nodes", key=key, **{"provider": "default", **fields})


def edge(source: str, target: str, priority: int = 1, **fields: Any) -> str:
    """An ``[[edges]]`` table; ``auto = true`` unless fields say otherwise."""
    fields = fields or {"auto": True}
    return _table("edges", source=source, target=target, priority=priority, **fields)


def _table(name: str, **fields: Any) -> str:
    lines = [f"{k} = {json.dumps(v)}" for k, v in fields.items() if v is not None]
    return f"\n[[{name}]]\n" + "\n".join(lines) + "\n"
