"""What a projection is, and the pending table every projection may write.

A `Projection` is the read models of one actor kind: its tables and a
handler that applies one recorded event of that kind's streams to them, in
the projector's transaction (`steward.projections.store`). Handlers use only
what the events carry, never the current time, so a rebuild gives identical
tables.

The ``pending`` table is shared: it lists what a host must route again after
a crash (queued runs, unanswered model and tool calls, approvals, armed
timers, deliveries and creations), one row per effect key, with the
(stream, version) of the event that asked for it. `want` adds a row and
`done` removes one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from steward.actors.effects import WantKind
from steward.events import Event, Recorded

__all__ = ["PENDING_SCHEMA", "Projection", "done", "want"]

PENDING_SCHEMA = """
CREATE TABLE IF NOT EXISTS pending (
    key TEXT PRIMARY KEY, stream TEXT NOT NULL, version INTEGER NOT NULL,
    kind TEXT NOT NULL, due_at REAL, requested_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_stream ON pending(stream);
"""


@dataclass(frozen=True)
class Projection:
    """The read models of an actor kind (its `Surface.projection`):
    ``schema`` creates ``tables`` (idempotently), and ``apply`` applies one
    recorded event of a stream of that kind to them (and of another kind's,
    of a type it ``watches``).
    With ``keeps_pending``, ``apply`` also keeps the kind's rows in
    ``pending`` (the projector's generic rows are left out)."""

    tables: tuple[str, ...]
    schema: str
    apply: Callable[[sqlite3.Connection, Recorded], None]
    keeps_pending: bool = False
    watches: frozenset[type[Event]] = frozenset()
    """Event types of other kinds' streams ``apply`` is given too (the
    workflow's: its phases' recorded model streams)."""


def want(
    conn: sqlite3.Connection,
    key: str,
    rec: Recorded,
    kind: WantKind,
    due_at: float | None = None,
) -> None:
    """Record that ``rec`` asks for effect ``key`` (of ``kind``), not yet
    answered."""
    conn.execute(
        "INSERT OR REPLACE INTO pending VALUES (?,?,?,?,?,?)",
        (key, rec.stream, rec.version, kind, due_at, rec.at),
    )


def done(conn: sqlite3.Connection, key: str, at: float | None = None) -> float | None:
    """Record that effect ``key`` is answered; given the answer's time
    ``at``, the seconds since it was asked for (if it was)."""
    row = conn.execute(
        "SELECT requested_at FROM pending WHERE key=?", (key,)
    ).fetchone()
    conn.execute("DELETE FROM pending WHERE key=?", (key,))
    if row is None or at is None:
        return None
    return max(0.0, at - float(row[0]))
