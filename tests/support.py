"""Helpers shared by test modules (importable as ``support``)."""

from __future__ import annotations

import json
from typing import Any


def act(**command: Any) -> str:
    """A JSON-protocol reply, e.g. ``act(type="note", category="plan", ...)``."""
    return json.dumps(command)


PLAN = [
    act(type="note", category="requirements", content="what is asked"),
    act(type="note", category="plan", content="how to do it"),
]
