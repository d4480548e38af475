"""Where events live and travel: the EventLog contract and its backends."""

from __future__ import annotations

from typing import Any

from steward.bus.base import Commit, EventLog
from steward.bus.sqlite import SqliteEventLog
from steward.errors import ConfigError

__all__ = ["Commit", "EventLog", "SqliteEventLog", "open_log"]


async def open_log(url: str, **kw: Any) -> EventLog:
    """Open the event log ``url`` names; ``kw`` goes to the backend's ``open``.

    ``sqlite:///var/lib/steward.db`` (an absolute path, as in ``file://`` URLs),
    ``sqlite://steward.db`` (relative to the working directory) and a plain path
    all open a `SqliteEventLog`.

    Raises:
        ConfigError: the scheme names no backend steward has.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return await SqliteEventLog.open(url, **kw)
    if scheme == "sqlite":
        if not rest:
            raise ConfigError(
                "event log url", url, "it names no file; use sqlite:///path/to/log.db"
            )
        return await SqliteEventLog.open(rest, **kw)
    raise ConfigError(
        "event log url",
        url,
        f"there is no {scheme!r} backend; use sqlite:///path/to/log.db "
        "or a plain file path",
    )
