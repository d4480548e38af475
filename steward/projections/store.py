"""The projector: read models built from the log, in SQLite.

Each batch of recorded events is applied in one transaction together with the
checkpoint (the last position applied), so after a crash catch-up resumes
exactly where the last committed batch ended. Handlers use only what the
events carry (never the current time), so ``rebuild`` gives identical tables.

Tables:

- ``runs`` — one row per run, with the fields Clifford's API reads
  (``id, agent_id, channel_id, user_id, context_id, parent_run_id,
  root_run_id, kind, profile, input_text, input_json, output_text,
  allowed_tools, wake_at, wake_reason, status, created_at, updated_at``) plus
  ``reason``, ``iterations`` and token totals.
- ``run_steps`` — one row per recorded event of a run, ordered by ``seq`` (the
  stream version): kind, a one-line summary, tokens, and for answers the
  seconds since their request.
- ``pending`` — queued runs no host has taken yet, requested but unanswered
  effects (model and tool calls, approvals), armed timers, and deliveries to
  other runs (children to create, parents to tell, children to cancel). The
  host routes these again on start. For an actor of another kind, its model
  and tool calls (requested, not answered) are kept; its own timers and
  deliveries are not yet (issue #15).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from steward import events
from steward.bus import EventLog
from steward.events import Recorded

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    agent_id TEXT, channel_id TEXT, user_id TEXT, context_id TEXT,
    parent_run_id TEXT, root_run_id TEXT, kind TEXT, profile TEXT,
    input_text TEXT, input_json TEXT, output_text TEXT, allowed_tools TEXT,
    wake_at REAL, wake_reason TEXT, status TEXT NOT NULL, reason TEXT,
    iterations INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    cost_usd REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_parent ON runs(parent_run_id);
CREATE TABLE IF NOT EXISTS run_steps (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    summary TEXT NOT NULL, tokens INTEGER, duration REAL, created_at REAL NOT NULL,
    cost_usd REAL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS pending (
    key TEXT PRIMARY KEY, stream TEXT NOT NULL, version INTEGER NOT NULL,
    kind TEXT NOT NULL, due_at REAL, requested_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_stream ON pending(stream);
CREATE TABLE IF NOT EXISTS projection_checkpoint (
    name TEXT PRIMARY KEY, position INTEGER NOT NULL
);
"""
TABLES = ("runs", "run_steps", "pending", "projection_checkpoint")
SCHEMA_VERSION = 2
"""Bumped when the tables change; a file of another version is rebuilt from
the log (projections are derived, so nothing is lost)."""
_json = msgspec.json.Encoder()


class Projector:
    """Keeps the read models current; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, position: int) -> None:
        self._conn = conn
        self.position = position
        self._lock = asyncio.Lock()
        self._queue: list[Recorded] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, path: str | Path) -> Projector:
        def connect() -> tuple[sqlite3.Connection, int]:
            conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA synchronous=NORMAL")
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version != SCHEMA_VERSION:
                for table in TABLES:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.executescript(SCHEMA)
            row = conn.execute(
                "SELECT position FROM projection_checkpoint WHERE name='main'"
            ).fetchone()
            return conn, row[0] if row else 0

        conn, position = await asyncio.to_thread(connect)
        return cls(conn, position)

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
                _handle(conn, rec)
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
        for table in TABLES:
            self._conn.execute(f"DROP TABLE IF EXISTS {table}")
        self._conn.executescript(SCHEMA)

    # -- reading ------------------------------------------------------------------

    async def pending_sources(self) -> list[tuple[str, int]]:
        """The (stream, version) of every event whose effect is still pending."""
        rows = await self.query(
            "SELECT DISTINCT stream, version FROM pending "
            "WHERE kind != 'approval' ORDER BY stream, version"
        )
        return [(str(s), int(v)) for s, v in rows]

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


# -- handlers -------------------------------------------------------------------


def _handle(conn: sqlite3.Connection, rec: Recorded) -> None:
    if not rec.stream.startswith("run."):
        _handle_requests(conn, rec)
        return
    run_id = rec.stream[4:]
    event = rec.event
    tokens: int | None = None
    duration: float | None = None
    cost: float | None = None
    match event:
        case events.RunCreated():
            conn.execute(
                "INSERT OR REPLACE INTO runs (id, agent_id, channel_id, user_id, "
                "context_id, parent_run_id, root_run_id, kind, profile, input_text, "
                "input_json, output_text, allowed_tools, status, created_at, "
                "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,'',?,'pending',?,?)",
                (
                    run_id,
                    event.agent_id,
                    event.channel_id,
                    event.user_id,
                    event.context_id,
                    event.parent_run_id,
                    event.root_run_id or run_id,
                    event.kind,
                    event.profile,
                    event.input_text,
                    None
                    if event.input_json is None
                    else _json.encode(event.input_json).decode(),
                    None
                    if event.allowed_tools is None
                    else _json.encode(event.allowed_tools).decode(),
                    rec.at,
                    rec.at,
                ),
            )
            if event.parent_run_id is not None:
                _done(conn, f"spawn:{run_id}")
            if event.queued:
                _want(conn, f"take:{run_id}", rec, "take")
        case events.RunTaken():
            _done(conn, f"take:{run_id}")
        case events.RunStarted() | events.RunResumed():
            _status(conn, run_id, rec, "running", wake_at=None, wake_reason=None)
            if isinstance(event, events.RunResumed):
                conn.execute(
                    "DELETE FROM pending WHERE stream=? AND kind='timer'", (rec.stream,)
                )
        case events.LlmRequested(request_id=rid):
            conn.execute(
                "UPDATE runs SET iterations=? WHERE id=?", (event.iteration, run_id)
            )
            _want(conn, rid, rec, "llm")
        case events.LlmResponded(request_id=rid) | events.LlmFailed(request_id=rid):
            duration = _done(conn, rid, rec.at)
            usage = event.usage
            if (
                isinstance(event, events.LlmResponded)
                or event.cost_usd
                or usage.input_tokens
                or usage.output_tokens
            ):
                tokens = usage.input_tokens + usage.output_tokens
                cost = event.cost_usd
                conn.execute(
                    "UPDATE runs SET input_tokens=input_tokens+?, "
                    "output_tokens=output_tokens+?, cost_usd=cost_usd+? WHERE id=?",
                    (usage.input_tokens, usage.output_tokens, cost, run_id),
                )
        case events.ToolRequested(request_id=rid):
            _done(conn, rid)  # an approved call: its approval row is answered
            _want(conn, rid, rec, "tool")
        case (
            events.ApprovalRequested(request_id=rid)
            | events.BudgetExceeded(request_id=rid, policy="pause")
        ):
            _want(conn, rid, rec, "approval")
            _status(conn, run_id, rec, "waiting")
        case (
            events.ApprovalDecided(request_id=rid) | events.ToolResulted(request_id=rid)
        ):
            if isinstance(event, events.ToolResulted):
                duration = _done(conn, rid, rec.at)
            else:
                _done(conn, rid)
        case events.OutputUpdated():
            conn.execute(
                "UPDATE runs SET output_text = CASE WHEN ?='append' "
                "THEN output_text || ? ELSE ? END, updated_at=? WHERE id=?",
                (event.mode, event.text, event.text, rec.at, run_id),
            )
        case events.SubagentsSpawned(children=children):
            for child in children:
                _want(conn, f"spawn:{child.run_id}", rec, "spawn")
            _status(conn, run_id, rec, "waiting")
        case events.SubagentFinished(result=result):
            _done(conn, f"notify:{result.run_id}")
            # a finished child needs no creating (a fork copies its result)
            _done(conn, f"spawn:{result.run_id}")
        case events.RunSlept():
            _want(conn, event.timer_id, rec, "timer", due_at=event.wake_at)
            _status(
                conn,
                run_id,
                rec,
                "waiting",
                wake_at=event.wake_at,
                wake_reason=event.reason or (event.cron and f"cron {event.cron}"),
            )
        case events.WakeDue(timer_id=tid):
            _done(conn, tid)
        case events.RunCompleted() | events.RunFailed() | events.RunCancelled():
            status = {
                events.RunCompleted: "completed",
                events.RunFailed: "failed",
                events.RunCancelled: "cancelled",
            }[type(event)]
            conn.execute(
                "DELETE FROM pending WHERE stream=? AND kind IN "
                "('take','llm','tool','approval','timer','spawn')",
                (rec.stream,),
            )
            _done(conn, f"cancel:{run_id}")
            if isinstance(event, events.RunCompleted):
                conn.execute(
                    "UPDATE runs SET output_text=? WHERE id=?", (event.output, run_id)
                )
            else:
                conn.execute(
                    "UPDATE runs SET reason=? WHERE id=?", (event.reason, run_id)
                )
            _status(conn, run_id, rec, status, wake_at=None, wake_reason=None)
            row = conn.execute(
                "SELECT parent_run_id FROM runs WHERE id=?", (run_id,)
            ).fetchone()
            if row and row[0]:
                _want(conn, f"notify:{run_id}", rec, "deliver")
            if isinstance(event, events.RunCancelled):
                for child_id in event.children:
                    _want(conn, f"cancel:{child_id}", rec, "deliver")
        case _:
            pass
    conn.execute(
        "INSERT OR REPLACE INTO run_steps VALUES (?,?,?,?,?,?,?,?)",
        (
            run_id,
            rec.version,
            events.type_name(event),
            summary(event),
            tokens,
            duration,
            rec.at,
            cost,
        ),
    )


def _handle_requests(conn: sqlite3.Connection, rec: Recorded) -> None:
    """The pending model and tool calls of an actor of any kind: the request
    and answer events are the same for every kind (a run's own timers,
    children and approvals are kept by the run handlers above)."""
    match rec.event:
        case events.LlmRequested(request_id=rid):
            _want(conn, rid, rec, "llm")
        case events.ToolRequested(request_id=rid):
            _want(conn, rid, rec, "tool")
        case (
            events.LlmResponded(request_id=rid)
            | events.LlmFailed(request_id=rid)
            | events.ToolResulted(request_id=rid)
        ):
            _done(conn, rid)
        case _:
            pass


def _want(
    conn: sqlite3.Connection,
    key: str,
    rec: Recorded,
    kind: str,
    due_at: float | None = None,
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO pending VALUES (?,?,?,?,?,?)",
        (key, rec.stream, rec.version, kind, due_at, rec.at),
    )


def _done(conn: sqlite3.Connection, key: str, at: float | None = None) -> float | None:
    row = conn.execute(
        "SELECT requested_at FROM pending WHERE key=?", (key,)
    ).fetchone()
    conn.execute("DELETE FROM pending WHERE key=?", (key,))
    if row is None or at is None:
        return None
    return max(0.0, at - float(row[0]))


def _status(
    conn: sqlite3.Connection, run_id: str, rec: Recorded, status: str, **extra: Any
) -> None:
    sets = ", ".join(f"{k}=?" for k in extra)
    conn.execute(
        f"UPDATE runs SET status=?, updated_at=?{', ' + sets if sets else ''} "
        "WHERE id=?",
        (status, rec.at, *extra.values(), run_id),
    )


def summary(event: events.Event, width: int = 160) -> str:
    """A one-line description of an event for timelines."""
    match event:
        case events.RunCreated():
            text = event.input_text
        case events.LlmRequested():
            text = f"iteration {event.iteration} ({event.priority})"
        case events.LlmResponded():
            calls = ", ".join(c.name for c in event.tool_calls)
            text = event.text + (f" [tools: {calls}]" if calls else "")
        case events.LlmFailed():
            text = f"{event.kind}: {event.message}"
        case events.LlmStreamRecorded():
            end = "complete" if event.complete else "cut off"
            text = f"attempt {event.attempt}: {len(event.events)} stream events, {end}"
        case events.BudgetExceeded():
            text = (
                f"{event.kind} budget spent ({event.used:g} of {event.limit:g}); "
                + ("waiting for approval" if event.policy == "pause" else "failing")
            )
        case events.LlmAttemptFailed():
            status = f" (HTTP {event.status})" if event.status else ""
            text = (
                f"attempt {event.attempt}, retry in {event.delay:.1f}s: "
                f"{event.kind}{status}: {event.message}"
            )
        case events.ToolRequested() | events.ApprovalRequested():
            attempt = getattr(event, "attempt", 1)
            args = _json.encode(event.args).decode()
            text = f"{event.name} {args}" + (
                f" (attempt {attempt})" if attempt > 1 else ""
            )
        case events.ToolResulted():
            text = ("ok: " + event.output) if event.ok else f"error: {event.error}"
        case events.ApprovalDecided():
            text = "approved" if event.approved else f"denied: {event.reason}"
        case events.SystemNoteAdded():
            text = f"{event.reason}: {event.content}"
        case events.NoteRecorded():
            text = f"{event.category}: {event.content}"
        case events.DecisionRecorded():
            text = event.content
        case events.OutputUpdated():
            text = f"{event.mode}: {event.text}"
        case events.MessageSent():
            text = event.text
        case events.SubagentsSpawned():
            text = ", ".join(c.run_id for c in event.children)
        case events.SubagentFinished():
            text = f"{event.result.run_id} {event.result.status}: {event.result.output}"
        case events.RunSlept():
            text = f"until {iso_time(event.wake_at)}" + (
                f" ({event.reason})" if event.reason else ""
            )
        case events.EffectClaimed():
            text = f"{event.request_id} by {event.worker} until {iso_time(event.until)}"
        case events.WakeDue():
            text = event.timer_id
        case events.RunResumed():
            text = event.reason
        case events.RunCompleted():
            text = f"{event.reason}: {event.output}"
        case events.RunFailed() | events.RunCancelled():
            text = event.reason
        case _:
            text = ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def iso_time(at: float) -> str:
    """Epoch seconds as people read them: ISO 8601 in UTC, to the millisecond
    (``2026-11-24T10:15:03.828Z``)."""
    try:
        moment = datetime.fromtimestamp(at, UTC)
    except (OverflowError, OSError, ValueError):  # beyond the calendar's years
        return f"{at:.3f}"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
