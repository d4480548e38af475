"""steward: an event-sourced actor runtime for LLM agents.

The few names most users need are here; the rest lives in its unit:
``steward.events``, ``steward.actors``, ``steward.bus``, ``steward.projections``,
``steward.config``. They are imported when first used, so that a command
that needs none of them (``steward --help``) starts at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.bus import EventLog, SqliteEventLog
    from steward.config import load_settings
    from steward.errors import StewardError
    from steward.events import Recorded
    from steward.host import Host

__all__ = [
    "EventLog",
    "Host",
    "Recorded",
    "SqliteEventLog",
    "StewardError",
    "load_settings",
]

_HOMES = {
    "EventLog": "steward.bus",
    "Host": "steward.host",
    "Recorded": "steward.events",
    "SqliteEventLog": "steward.bus",
    "StewardError": "steward.errors",
    "load_settings": "steward.config",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'steward' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
