"""The projector: read models built from the log, in SQLite.

Each batch of recorded events is applied in one transaction together with the
checkpoint (the last position applied), so after a crash catch-up resumes
exactly where the last committed batch ended. Handlers use only what the
events carry (never the current time), so ``rebuild`` gives identical tables.

A projection is a set of handlers per actor kind (its
`steward.actors.kind.Surface.projection`, a
`steward.projections.projection.Projection`), for the kinds of the table the
projector is given (`Projector.open(path, kinds)`). Besides them
the projector keeps the
``pending`` table for every kind (what a host routes again on start): the
model and tool calls each stream requested and has no answer to, and what
its kind's ``pending`` function says its events ask for and answer (timers,
deliveries, creations; `steward.actors.kind.Reactor.pending`), unless the
kind's projection keeps those rows itself (``keeps_pending``: the run's).

The file's ``user_version`` is a checksum of every table's schema: a file
written under other schemas is dropped and rebuilt from the log on open
(projections are derived, so nothing is lost).
"""

from __future__ import annotations

import asyncio
import sqlite3
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from steward.actors.effects import WantKind, calls_pending
from steward.actors.kind import Kinds, Views
from steward.actors.session.events import Elsewhere
from steward.actors.session.projection import elsewhere, search
from steward.bus import EventLog
from steward.events import Recorded
from steward.projections.projection import PENDING_SCHEMA, done, want

__all__ = ["Projector", "schema_version"]

R = TypeVar("R")

CHECKPOINT_SCHEMA = """
CREATE TABLE IF NOT EXISTS projection_checkpoint (
    name TEXT PRIMARY KEY, position INTEGER NOT NULL
);
"""

PENDING_LOGIC = 2
"""What the pending rows mean, beside their schema: a file written under
another (from 2, a debounce timer's row is answered by the next one armed)
is rebuilt from the log."""


def _projections(kinds: Kinds) -> dict[str, Views]:
    """The read models of each kind of ``kinds`` that has some, by name."""
    views = {k.name: k.surface.projection for k in kinds}
    return {name: v for name, v in views.items() if v is not None}


def _schema(kinds: Kinds) -> str:
    parts = [CHECKPOINT_SCHEMA, PENDING_SCHEMA, f"-- pending logic {PENDING_LOGIC}"]
    projections = _projections(kinds)
    parts += [projections[name].schema for name in sorted(projections)]
    return "".join(parts)


def _tables(kinds: Kinds) -> tuple[str, ...]:
    owned = (t for p in _projections(kinds).values() for t in p.tables)
    return ("projection_checkpoint", "pending", *owned)


def schema_version(kinds: Kinds) -> int:
    """The ``user_version`` of a projection file of today's schemas."""
    return zlib.crc32(_schema(kinds).encode()) & 0x7FFFFFFF


class Projector:
    """Keeps the read models current; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, position: int, kinds: Kinds) -> None:
        self.kinds = kinds
        self._projections = _projections(kinds)
        self._conn = conn
        self.position = position
        self._lock = asyncio.Lock()
        self._queue: list[Recorded] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, path: str | Path, kinds: Kinds) -> Projector:
        """Open (creating it) the projection file at ``path`` for the read
        models of ``kinds``."""
        version = schema_version(kinds)

        def connect() -> tuple[sqlite3.Connection, int]:
            conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA synchronous=NORMAL")
            (found,) = conn.execute("PRAGMA user_version").fetchone()
            if found != version:
                for table in _tables(kinds):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute(f"PRAGMA user_version = {version}")
            conn.executescript(_schema(kinds))
            row = conn.execute(
                "SELECT position FROM projection_checkpoint WHERE name='main'"
            ).fetchone()
            return conn, row[0] if row else 0

        conn, position = await asyncio.to_thread(connect)
        return cls(conn, position, kinds)

    # -- feeding ------------------------------------------------------------------

    async def catch_up(
        self, log: EventLog, progress: Callable[[int], None] | None = None
    ) -> None:
        """Apply everything in ``log`` past the checkpoint; ``progress`` is
        called with the checkpoint's position after each batch."""
        await self.flush()
        while True:
            batch = await log.read_all(self.position, limit=5_000)
            if not batch:
                return
            await self.apply(batch)
            if progress is not None:
                progress(self.position)

    def offer(self, rec: Recorded) -> None:
        """Queue one live event; a background task applies queued events."""
        self._queue.append(rec)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await self.flush()

    async def flush(self) -> None:
        """Apply every queued event now."""
        while self._queue:
            batch, self._queue = self._queue, []
            await self.apply(batch)

    async def apply(self, batch: Sequence[Recorded]) -> None:
        """Apply ``batch`` (in position order) and the checkpoint atomically."""
        async with self._lock:
            todo = [r for r in batch if r.position > self.position]
            if todo:
                self.position = await asyncio.to_thread(self._apply, todo)

    def _apply(self, batch: list[Recorded]) -> int:
        """Apply what of ``batch`` lies past the stored checkpoint; the new
        checkpoint. The checkpoint is read inside the write transaction: a
        file may be shared (a ``serve`` projecting while ``runs list`` catches
        up in another process), and an event must be applied only once."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT position FROM projection_checkpoint WHERE name='main'"
            ).fetchone()
            done = row[0] if row else 0
            todo = [rec for rec in batch if rec.position > done]
            for rec in todo:
                self._handle(conn, rec)
            if todo:
                done = todo[-1].position
                conn.execute(
                    "INSERT OR REPLACE INTO projection_checkpoint VALUES ('main', ?)",
                    (done,),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return int(done)

    async def rebuild(
        self, log: EventLog, progress: Callable[[int], None] | None = None
    ) -> int:
        """Drop every table and replay the log from position 0 (``progress``:
        as for `catch_up`)."""
        async with self._lock:
            await asyncio.to_thread(self._reset)
            self.position = 0
        await self.catch_up(log, progress)
        return self.position

    def _reset(self) -> None:
        for table in _tables(self.kinds):
            self._conn.execute(f"DROP TABLE IF EXISTS {table}")
        self._conn.executescript(_schema(self.kinds))

    def _handle(self, conn: sqlite3.Connection, rec: Recorded) -> None:
        """Apply ``rec`` to its kind's read models and to ``pending``."""
        name = rec.stream.partition(".")[0]
        for other, projection in self._projections.items():
            if projection.watches and other != name:
                if type(rec.event) in projection.watches:
                    projection.apply(conn, rec)
        kind = self.kinds.get(name)
        if kind is None:
            return
        if kind.surface.projection is not None:
            kind.surface.projection.apply(conn, rec)
            if kind.surface.projection.keeps_pending:
                return
        asked = calls_pending(rec.event)
        if asked is None and kind.reactor.pending is not None:
            asked = kind.reactor.pending(rec)
        if asked is None:
            return
        if asked.ended:
            conn.execute("DELETE FROM pending WHERE stream=?", (rec.stream,))
        for key in asked.answers:
            done(conn, key)
        for effect in asked.wants:
            want(conn, effect.key, rec, effect.kind, effect.due_at)

    # -- reading ------------------------------------------------------------------

    async def pending_sources(self) -> list[tuple[str, int]]:
        """The (stream, version) of every event whose effect is still pending."""
        rows = await self.query(
            "SELECT DISTINCT stream, version FROM pending "
            f"WHERE kind != '{WantKind.APPROVAL}' ORDER BY stream, version"
        )
        return [(str(s), int(v)) for s, v in rows]

    async def read(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """``fn(connection)``, in the projector's thread, between batches."""
        async with self._lock:
            return await asyncio.to_thread(fn, self._conn)

    async def search_memory(
        self, session_id: str, query: str, limit: int
    ) -> list[tuple[str, str, float]]:
        """Session ``session_id``'s archival memory best matching ``query``
        (`steward.actors.session.projection.search`)."""
        return await self.read(lambda conn: search(conn, session_id, query, limit))

    async def elsewhere(
        self, sender: str, session_id: str, limit: int
    ) -> tuple[Elsewhere, ...]:
        """The newest ``limit`` messages of ``sender``'s chats other than
        ``session_id`` (`steward.actors.session.projection.elsewhere`)."""
        return await self.read(lambda conn: elsewhere(conn, sender, session_id, limit))

    async def query(
        self, sql: str, params: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        async with self._lock:
            return await asyncio.to_thread(
                lambda: self._conn.execute(sql, params).fetchall()
            )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self.flush()
        self._conn.close()
