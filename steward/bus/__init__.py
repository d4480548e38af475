"""Where events live and travel: the EventLog contract and its backends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.bus.base import Commit, EventLog, PartitionedLog
from steward.bus.jetstream.url import parse_url
from steward.bus.sqlite import SqliteEventLog
from steward.errors import ConfigError

if TYPE_CHECKING:
    from steward.bus.jetstream import JetStreamEventLog

__all__ = [
    "Commit",
    "EventLog",
    "JetStreamEventLog",
    "PartitionedLog",
    "SqliteEventLog",
    "log_file",
    "open_log",
]


async def open_log(url: str, **kw: Any) -> EventLog:
    """Open the event log ``url`` names; ``kw`` goes to the backend's ``open``.

    ``sqlite:///var/lib/steward.db`` (an absolute path, as in ``file://`` URLs),
    ``sqlite://steward.db`` (relative to the working directory) and a plain path
    all open a `SqliteEventLog`.

    ``nats://host:4222?stream=STEWARD&prefix=steward.ev&replicas=3`` (or
    ``tls://``; several servers of one cluster separated by commas; user and
    password or a token before the host) opens a `JetStreamEventLog`. The
    query may also name ``creds``, ``nkeys_seed``, ``name`` and
    ``tls_hostname``; ``kw`` overrides it.

    Raises:
        ConfigError: the scheme names no backend steward has.
    """
    file = log_file(url)
    if file is not None:
        return await SqliteEventLog.open(file, **kw)
    from steward.bus.jetstream import JetStreamEventLog  # nats-py, when used

    servers, options = parse_url(url)
    return await JetStreamEventLog.open(servers, **{**options, **kw})


def __getattr__(name: str) -> Any:
    # `JetStreamEventLog` is imported (with nats-py) by what uses it
    if name == "JetStreamEventLog":
        from steward.bus.jetstream import JetStreamEventLog

        return JetStreamEventLog
    raise AttributeError(f"module 'steward.bus' has no attribute {name!r}")


def log_file(url: str) -> Path | None:
    """The SQLite file of an embedded log's ``url`` (see `open_log`), or
    ``None`` for a JetStream one.

    Raises:
        ConfigError: the scheme names no backend steward has, or a
            ``sqlite://`` URL names no file.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return Path(url)
    if scheme == "sqlite":
        if not rest:
            raise ConfigError(
                "event log url", url, "it names no file; use sqlite:///path/to/log.db"
            )
        return Path(rest)
    if scheme in ("nats", "tls"):
        return None
    raise ConfigError(
        "event log url",
        url,
        f"there is no {scheme!r} backend; use sqlite:///abs/path, "
        "sqlite://rel/path, a plain path, nats://host:4222 or tls://host:4222",
    )
