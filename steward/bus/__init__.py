"""Where events live and travel: the EventLog contract and its backends."""

from steward.bus.base import Commit, EventLog

__all__ = ["Commit", "EventLog"]
