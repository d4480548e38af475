"""The task kind (spec 002): a program of model calls in a small Lisp,
its subtasks its children.

Its package holds all of it: its events, decider and reactor, its read
models, its commands and its definition files. `KIND` is its entry in a
kind table (`steward.kinds.KINDS`); it is loaded when asked for, so that
importing one of the package's modules (its events, say) loads no more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.actors.task.kind import KIND as KIND


def __getattr__(name: str) -> Any:
    if name == "KIND":
        from steward.actors.task.kind import KIND

        return KIND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
