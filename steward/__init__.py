"""steward: an event-sourced actor runtime for LLM agents.

The few names most users need are here; the rest lives in its unit:
``steward.events``, ``steward.actors``, ``steward.bus``, ``steward.projections``,
``steward.config``.
"""

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
