"""The embedded event log: one SQLite file.

Events live in one append-only table, a row per commit::

    commits(position INTEGER PRIMARY KEY, stream, version, count, at,
            correlation_id, causation_id, data, UNIQUE(stream, version))

``position`` and ``version`` are those of the commit's first event; its
``count`` events take the positions and versions that follow, so positions
are dense and global as ever. ``data`` is the msgpack of the event when the
commit holds one, else of the list of its events (`steward.events.encode`).
A row per commit rather than per event: an append of a step's three events
inserts one row and one index entry instead of three, and a replay fetches
and decodes a row per commit (a third of the cost per event, measured). The
event id (``stream/version``) is derived, never stored; no row is ever
updated or deleted. A log written with the earlier row-per-event table
(``events``) is moved into ``commits`` when it is first opened. A file with
tables, none of them steward's, is another program's database: it is refused
(`check_file`, `steward.errors.NotALogError`) and left as it was.

Throughput comes from group commit: one writer task owns the write
connection, and every append waiting when it wakes goes into the same
``BEGIN IMMEDIATE`` transaction, run as one call (begin, version check,
insert, commit). Each append still succeeds or fails on its own (a stale
expected version fails that append only). ``BEGIN IMMEDIATE`` also serialises
writers in other processes sharing the file, and positions are assigned
inside that lock, so position order is commit order everywhere.

Group commit costs a lone appender two turns of the event loop per append
(one for the writer task, one for the answer), a fifth of a lone run step.
So while the writer's batches hold one append each, an append commits in its
caller's task, at once: the first append of a turn of the loop, and further
ones of the same task up to a bound (a run stepping on an instant model).
Appends of other tasks in that turn queue for the writer as usual, and the
log batches again until a batch of one shows the appender alone
(`SqliteEventLog._may_commit_now`).

Where the transaction runs depends on ``synchronous``. With ``NORMAL`` (and
``OFF``) a WAL commit writes to the OS and does not wait for the disk, a
hundred microseconds or so: it runs right on the event loop, since a hop to a
thread and back cost more than the commit and, under load, the two threads
only took turns at the GIL. Checkpoints, the part that waits for the disk,
run on a thread of their own with a connection of their own (SQLite's
automatic ones are off). A commit that finds another process holding the
write lock does not wait on the loop: it is retried on that thread with the
busy timeout. With ``FULL`` every commit waits for the disk, so every
transaction runs on the thread.

Reads use connections of their own, so they never wait on the writer (WAL
lets readers and one writer work side by side). They run on the event loop
too: reading and decoding a page of 1,000 events takes about a millisecond,
and through a thread every row handed the GIL over and back (reads measured
1.3x faster on the loop). A read that meets a lock instead of reading (another
process recovering the file after a crash, say) is retried on aiosqlite's
thread, where it may wait the busy timeout without stopping the loop.
Subscribers in the same process get this log's commits from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import aiosqlite
import msgspec

from steward.bus.base import Commit, check_append, envelopes
from steward.bus.pages import decode_page
from steward.errors import ConcurrencyError, LogReadError, LogWriteError, NotALogError
from steward.events import UNION, Event, EventUnion, Recorded, encode_blob

__all__ = ["SqliteEventLog", "Synchronous", "check_file"]

Synchronous = Literal["NORMAL", "FULL", "OFF"]
_SYNCHRONOUS: frozenset[str] = frozenset({"NORMAL", "FULL", "OFF"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS commits (
    position INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    version INTEGER NOT NULL,
    count INTEGER NOT NULL,
    at REAL NOT NULL,
    correlation_id TEXT,
    causation_id TEXT,
    data BLOB NOT NULL,
    UNIQUE (stream, version)
)
"""

# The row-per-event table of logs written before `commits`: each of its rows
# becomes a commit of one event (its ``data`` is that event), in one
# transaction, the first time such a log is opened.
_MIGRATE = """
INSERT INTO commits
SELECT position, stream, version, 1, at, correlation_id, causation_id, data
FROM events;
DROP TABLE events;
"""

# What makes a file steward's: one of these tables with at least these
# columns (the log's; an earlier steward's row-per-event table; the
# checkpoint of the projections, which is all a nats:// log's projections
# file holds). A file with tables, none of them one of these, is another
# program's, and steward adds nothing to it (nor moves its `events`).
_OWN_TABLES: dict[str, frozenset[str]] = {
    "commits": frozenset(
        ("position", "stream", "version", "count", "at", "correlation_id")
        + ("causation_id", "data")
    ),
    "events": frozenset(
        ("position", "stream", "version", "at", "correlation_id", "causation_id")
        + ("data",)
    ),
    "projection_checkpoint": frozenset(("name", "position")),
}
_SQLITE_HEADER = b"SQLite format 3\x00"

# One statement gives the batch everything it must know once the write lock is
# held: the log's head (the row whose stream is NULL, which no event row can
# have) and the current version of every stream the batch touches (0 for a new
# one). The streams arrive as one JSON array so the SQL text, and so its
# prepared statement, is the same for every batch; each stream's version is one
# seek on the (stream, version) index.
_HEAD = "SELECT position + count - 1 FROM commits ORDER BY position DESC LIMIT 1"
_LAST_VERSION = (
    "SELECT version + count - 1 FROM commits WHERE stream = {} "
    "ORDER BY version DESC LIMIT 1"
)
_VERSION = _LAST_VERSION.format("?")
_BATCH_STATE = f"""
SELECT NULL, coalesce(({_HEAD}), 0)
UNION ALL
SELECT s.value, coalesce(({_LAST_VERSION.format("s.value")}), 0)
FROM json_each(?) AS s
"""

_INSERT = "INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

_COLUMNS = "position, stream, version, count, at, correlation_id, causation_id, data"
# The commits holding the events at positions after :after, up to :upto: from
# the one holding :after + 1 (one seek on the primary key) on. Positions are
# dense, so the range holds exactly the events wanted, plus the rest of the
# commits at its two ends, which the caller trims.
_READ_ALL = f"""
SELECT {_COLUMNS} FROM commits
WHERE position >= coalesce(
        (SELECT max(position) FROM commits WHERE position <= :after + 1), 0)
  AND position + count > :after + 1
  AND position <= :upto
ORDER BY position
"""
_READ_NEXT = (
    f"SELECT {_COLUMNS} FROM commits WHERE position > ? ORDER BY position LIMIT 1"
)
_READ_STREAM = f"""
SELECT {_COLUMNS} FROM commits
WHERE stream = :stream AND version >= coalesce(
        (SELECT max(version) FROM commits WHERE stream = :stream AND version <= :from),
        0)
ORDER BY version
"""

# Stream names in [low, high): one index seek per stream (a loose index scan)
# rather than DISTINCT, which would visit every event. A range instead of LIKE,
# which would treat % and _ in a prefix as wildcards.
_STREAMS = """
WITH RECURSIVE names(stream) AS (
    SELECT min(stream) FROM commits WHERE stream >= :low AND stream < :high
    UNION ALL
    SELECT (SELECT min(stream) FROM commits WHERE stream > names.stream
            AND stream < :high)
    FROM names WHERE names.stream IS NOT NULL
)
SELECT stream FROM names WHERE stream IS NOT NULL
"""

# Appends per transaction at most: bounds how long one commit holds the write
# lock (and the event loop, while its rows are built) when a crowd is waiting.
_MAX_BATCH = 2_000
_RUN_NOW = 16
"""Appends one task may commit in its own task in one turn of the event loop
before the next waits for the writer (and lets other tasks run)."""
_CHECKPOINT_FRAMES = 1_000
"""Checkpoint in the background after about this many WAL frames (pages)
were written: SQLite's own automatic checkpoint threshold."""

# How many events a subscriber reads per query: big enough to replay fast,
# small enough that decoding one page does not stall the event loop for long.
_SUBSCRIBE_PAGE = 1_000
# Errors of a read that met a lock rather than a problem with the file.
_LOCKED = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_LONG_READ = 100  # rows after which a read lets other tasks run
_RECENT = 10_000  # records kept in memory for this process's subscribers
_KNOWN_STREAMS = 100_000  # stream versions the writer keeps before starting over

_json = msgspec.json.Encoder()


class _Append:
    """One append waiting for the writer."""

    __slots__ = (
        "stream",
        "events",
        "data",
        "expected",
        "correlation_id",
        "causation_id",
        "at",
        "future",
    )

    def __init__(
        self,
        stream: str,
        evs: Sequence[Event],
        data: bytearray,
        expected: int,
        correlation_id: str | None,
        causation_id: str | None,
        at: float,
        future: asyncio.Future[Commit],
    ) -> None:
        self.stream = stream
        self.events = evs
        self.data = data
        self.expected = expected
        self.correlation_id = correlation_id
        self.causation_id = causation_id
        self.at = at
        self.future = future


class SqliteEventLog:
    """An `EventLog` in one SQLite file (WAL), safe to share between processes.

    Open it with `SqliteEventLog.open`; close it with `close`, which first
    commits every append already made.
    """

    def __init__(
        self,
        path: Path,
        writer: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        reader: aiosqlite.Connection,
        *,
        quick_reader: sqlite3.Connection,
        clock: Callable[[], float],
        poll_interval: float,
        checkpointer: sqlite3.Connection | None = None,
        busy_ms: int = 5000,
    ) -> None:
        """Wrap open connections; use `SqliteEventLog.open` instead.

        With a ``checkpointer`` (``synchronous`` is not FULL) transactions run
        on the event loop and checkpoints on the executor's thread; without
        one, transactions run on the executor's thread.
        """
        self.path = path
        self.union = UNION
        """The event types the log decodes into."""
        self._writer = writer
        self._executor = executor
        self._checkpointer = checkpointer
        self._busy_ms = busy_ms
        self._frames = 0  # WAL frames written since the last checkpoint began
        self._checkpoint: asyncio.Future[None] | None = None
        self._reader = reader
        self._quick_reader = quick_reader
        self._clock = clock
        self._poll_interval = poll_interval
        self._pending: list[_Append] = []
        self._wakeup = asyncio.Event()
        # Committing appends in their callers' tasks (see `_may_commit_now`):
        # whether the writer's batches hold one append each, the turn of the
        # loop in which appends committed so, by which task and how many.
        self._alone = False
        self._turn: asyncio.Handle | None = None
        self._turn_task: asyncio.Task[Any] | None = None
        self._turn_commits = 0
        self._on_thread_now = False  # a batch waits for the lock on the thread
        # Made when a subscriber reads, set and dropped by the next commit:
        # subscribers hold the one current when they last read, so a commit
        # they have not seen is never missed, and commits with no subscriber
        # reading in between (a run stepping in its own task) make none.
        self._committed: asyncio.Event | None = None
        # The newest records this log committed, contiguous in position, so
        # subscribers in this process follow without reading them back. A
        # commit from another process breaks the run and empties it.
        self._recent: list[Recorded] = []
        # What the writer knows of the file: each stream's version it has
        # read or written, and the head position. Valid while the writer's
        # PRAGMA data_version is `_data_version` (no other connection has
        # committed since), so a batch reads only the streams it has not seen.
        self._versions: dict[str, int] = {}
        self._head: int | None = None
        self._data_version: int | None = None
        self._closing = False
        self._closed = False
        self.batches = 0
        """Write transactions committed (each holds one or more appends)."""
        self._writer_task = asyncio.create_task(
            self._write_loop(), name=f"steward-log-writer:{path}"
        )

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        clock: Callable[[], float] = time.time,
        poll_interval: float = 0.05,
        busy_timeout: float = 5.0,
        union: EventUnion = UNION,
    ) -> SqliteEventLog:
        """Open (creating it, its schema and its parent directories) a log file.

        Args:
            path: the SQLite file.
            synchronous: ``"NORMAL"`` survives a crash of the process but may
                lose the last commits on power loss or an OS crash; ``"FULL"``
                survives power loss too, at the cost of an fsync per commit;
                ``"OFF"`` is for throwaway logs only.
            clock: gives ``at`` for appends that do not pass one.
            poll_interval: seconds between checks, while a subscriber is
                idle, for commits made by other processes.
            busy_timeout: seconds a write waits for another process holding
                the file's write lock before it fails.
            union: the event types the log holds (a kind table's
                `steward.actors.kind.Kinds.union`; default: the shared
                vocabulary alone).

        Raises:
            NotALogError: the file is another program's SQLite database (it
                has tables, none of them steward's); it is left as it was.
            LogWriteError: the file cannot be opened or is no SQLite file.
        """
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(
                f"synchronous must be one of NORMAL, FULL or OFF, not {synchronous!r}"
            )
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, not {poll_interval}")
        file = Path(path)
        if str(file) == ":memory:":
            raise ValueError(
                "an in-memory SQLite log cannot be shared by its reader and "
                "writer connections; give a file path (a temporary one for tests)"
            )
        busy_ms = int(busy_timeout * 1000)
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(1, thread_name_prefix="steward-log-writer")
        inline = synchronous != "FULL"
        writer: sqlite3.Connection | None = None
        checkpointer: sqlite3.Connection | None = None
        reader: aiosqlite.Connection | None = None
        quick_reader: sqlite3.Connection | None = None
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            writer = await loop.run_in_executor(
                executor, _open_writer, file, busy_ms, synchronous, inline
            )
            if inline:
                checkpointer = await loop.run_in_executor(
                    executor, _open_checkpointer, file, busy_ms
                )
            reader = await aiosqlite.connect(file, isolation_level=None)
            await reader.execute_fetchall(f"PRAGMA busy_timeout = {busy_ms}")
            await reader.execute_fetchall("PRAGMA query_only = ON")
            quick_reader = _open_quick_reader(file)
        except (sqlite3.Error, OSError, NotALogError) as e:
            if quick_reader is not None:
                quick_reader.close()
            if reader is not None:
                await reader.close()
            for conn in (writer, checkpointer):
                if conn is not None:
                    await loop.run_in_executor(executor, conn.close)
            executor.shutdown()
            if isinstance(e, NotALogError):
                raise
            raise LogWriteError(
                f"cannot open the event log at {file}: {e}; check that the "
                "directory is writable, the file is a steward SQLite log, and "
                "no other process keeps it locked"
            ) from e
        log = cls(
            file,
            writer,
            executor,
            reader,
            quick_reader=quick_reader,
            clock=clock,
            poll_interval=poll_interval,
            checkpointer=checkpointer,
            busy_ms=busy_ms,
        )
        log.union = union
        return log

    # -- writing ---------------------------------------------------------------

    async def append(
        self,
        stream: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        at: float | None = None,
    ) -> Commit:
        """Append ``events`` to ``stream`` if it is at ``expected_version``.

        Raises:
            ConcurrencyError: the stream is not at ``expected_version``.
            LogWriteError: the log is closed or SQLite failed the commit.
            ValueError: ``events`` is empty or the arguments are malformed.
        """
        check_append(stream, events, expected_version)
        if self._closing:
            raise LogWriteError(
                f"the event log at {self.path} is closed; open it again to append"
            )
        # Encoding here, in the caller's task, means an event that cannot be
        # encoded fails its own append and never reaches the shared batch.
        data = encode_blob(events[0] if len(events) == 1 else list(events))
        future: asyncio.Future[Commit] = asyncio.get_running_loop().create_future()
        request = _Append(
            stream,
            events,
            data,
            expected_version,
            correlation_id,
            causation_id,
            self._clock() if at is None else at,
            future,
        )
        if self._may_commit_now():
            if self._commit_on_loop([request]):
                return future.result()
        self._pending.append(request)
        self._wakeup.set()
        return await future

    def _may_commit_now(self) -> bool:
        """Whether an append may be committed at once, in its caller's task.

        Group commit pays for itself when appends arrive together; a lone
        writer would only wait a turn of the event loop for the writer task
        and another for its answer. So while the writer's batches hold one
        append each (`_alone`), appends commit in the caller's task: the
        first of a turn of the loop, and more of the same task (a run
        stepping without waiting) up to `_RUN_NOW` a turn, after which it
        waits for the writer like any append and lets other tasks run. The
        appends of other tasks in that turn queue for the writer, which
        commits them together, and the log batches until a batch of one
        says it is alone again (and none is queued).
        """
        if not self._alone or self._pending:
            return False  # the writer batches: join its queue
        if self._checkpointer is None or self._on_thread_now:
            return False  # commits run on the thread, in order
        task = asyncio.current_task()
        if self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._end_turn)
            self._turn_task, self._turn_commits = task, 1
            return True
        if self._turn_task is task and self._turn_commits < _RUN_NOW:
            self._turn_commits += 1
            return True
        return False

    def _end_turn(self) -> None:
        self._turn = self._turn_task = None

    async def _write_loop(self) -> None:
        batch: list[_Append] = []
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    batch = self._pending[:_MAX_BATCH]
                    del self._pending[:_MAX_BATCH]
                    # A caller that gave up before its turn came gets nothing
                    # written; once a batch has started, it is committed.
                    batch = [r for r in batch if not r.future.done()]
                    if batch:
                        self._alone = len(batch) == 1
                        await self._commit(batch)
                    batch = []
                if self._closing:
                    return
        finally:
            # Reached with appends unanswered only when the task is cancelled
            # (the loop is shutting down without `close`): callers must not
            # wait forever for an answer.
            for request in (*batch, *self._pending):
                if not request.future.done():
                    request.future.set_exception(
                        LogWriteError(
                            f"the event log at {self.path} stopped before it "
                            f"confirmed this append to {request.stream}; read the "
                            "stream to see whether it was stored"
                        )
                    )
            self._pending.clear()

    def _transaction(
        self, batch: list[_Append], guess: bool = True
    ) -> tuple[bool, list[Commit | ConcurrencyError]]:
        """Commit ``batch``; (anything written, outcomes). With ``guess``,
        streams that appends expect to be new are taken to be (see
        `_known_state`); if one was not, the batch is planned again unguessed."""
        conn = self._writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            versions, head, guessed = self._known_state(conn, batch, guess)
            rows, outcomes, head = self._plan(batch, versions, head)
            if rows:
                conn.executemany(_INSERT, rows)
            conn.execute("COMMIT")
        except sqlite3.IntegrityError:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if not guessed:
                raise
            return self._transaction(batch, guess=False)  # a guessed stream was not
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        self._versions.update(versions)
        self._head = head
        return bool(rows), outcomes

    def _known_state(
        self, conn: sqlite3.Connection, batch: list[_Append], guess: bool
    ) -> tuple[dict[str, int], int, set[str]]:
        """In the write transaction: the batch's streams' versions, the head,
        and the streams guessed to be new.

        Read from the file only for what the writer does not know already,
        and, with ``guess``, not for a stream whose first append in the batch
        expects it new (an opening: a child's first input, say): it is taken
        to be at version 0, and the insert at version 1 fails on ``UNIQUE
        (stream, version)`` if it is not.
        """
        (data_version,) = conn.execute("PRAGMA data_version").fetchone()
        if data_version != self._data_version or len(self._versions) > _KNOWN_STREAMS:
            # another connection committed: what we knew may be stale
            self._versions.clear()
            self._head = None
            self._data_version = data_version
        known = self._versions
        versions: dict[str, int] = {}
        unknown: list[str] = []
        guessed: set[str] = set()
        for r in batch:
            if r.stream in known:
                versions[r.stream] = known[r.stream]
            elif r.stream not in versions:
                versions[r.stream] = 0
                if guess and r.expected == 0:
                    guessed.add(r.stream)
                else:
                    unknown.append(r.stream)
        head = self._head
        if unknown or head is None:
            for name, value in conn.execute(_BATCH_STATE, (_json.encode(unknown),)):
                if name is None:
                    head = value
                else:
                    versions[name] = value
        assert head is not None
        return versions, head, guessed

    async def _commit(self, batch: list[_Append]) -> None:
        if self._checkpointer is not None:
            if self._commit_on_loop(batch):
                return
            # Another process holds the write lock: wait for it on the
            # thread, not here; appends queue behind this batch meanwhile.
            self._on_thread_now = True
            try:
                wrote, outcomes = await self._on_thread(self._waiting, batch)
            except asyncio.CancelledError:
                raise  # the thread may still hold the connection: stay off it
            except Exception as e:
                self._on_thread_now = False
                self._fail(batch, e)
                return
            self._on_thread_now = False
        else:
            try:
                wrote, outcomes = await self._on_thread(self._transaction, batch)
            except Exception as e:
                self._fail(batch, e)
                return
        self._settle(batch, wrote, outcomes)

    def _commit_on_loop(self, batch: list[_Append]) -> bool:
        """Commit ``batch`` here, on the event loop, and answer its appends;
        False (nothing done) when another process holds the write lock."""
        try:
            wrote, outcomes = self._transaction(batch)
        except sqlite3.OperationalError as e:
            if e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return False
            self._fail(batch, e)
            return True
        except Exception as e:
            self._fail(batch, e)
            return True
        self._settle(batch, wrote, outcomes)
        return True

    def _fail(self, batch: list[_Append], e: Exception) -> None:
        for request in batch:
            if not request.future.done():
                failure = LogWriteError(
                    f"could not commit to {request.stream} in {self.path}: {e}; "
                    "nothing was stored, retry the append (check disk space, "
                    "permissions, and processes holding the file's write lock)"
                )
                failure.__cause__ = e
                request.future.set_exception(failure)

    def _settle(
        self,
        batch: list[_Append],
        wrote: bool,
        outcomes: list[Commit | ConcurrencyError],
    ) -> None:
        """Answer the appends of a committed batch and tell subscribers."""
        if wrote and self._checkpointer is not None:
            self._count_frames(outcomes)
        self.batches += 1
        for request, outcome in zip(batch, outcomes, strict=True):
            if request.future.done():
                continue
            if isinstance(outcome, Commit):
                request.future.set_result(outcome)
            else:
                request.future.set_exception(outcome)
        if wrote:
            self._remember(outcomes)
            self._wake_subscribers()

    def _wake_subscribers(self) -> None:
        """Wake every subscriber waiting for a commit (they read what is new)."""
        committed, self._committed = self._committed, None
        if committed is not None:
            committed.set()

    async def _on_thread(
        self,
        fn: Callable[[list[_Append]], tuple[bool, list[Commit | ConcurrencyError]]],
        batch: list[_Append],
    ) -> tuple[bool, list[Commit | ConcurrencyError]]:
        loop = asyncio.get_running_loop()
        # Shielded: once a transaction runs on the thread it ends there,
        # committed or rolled back, whatever happens to this task.
        return await asyncio.shield(loop.run_in_executor(self._executor, fn, batch))

    def _waiting(
        self, batch: list[_Append]
    ) -> tuple[bool, list[Commit | ConcurrencyError]]:
        """On the thread: `_transaction`, waiting up to the busy timeout."""
        self._writer.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        try:
            return self._transaction(batch)
        finally:
            self._writer.execute("PRAGMA busy_timeout = 0")

    def _count_frames(self, outcomes: list[Commit | ConcurrencyError]) -> None:
        """Start a background checkpoint once enough of the WAL is new."""
        # A commit writes a page per table and index it touches, plus one per
        # page its rows fill: about two pages and a little for each event.
        for outcome in outcomes:
            if isinstance(outcome, Commit):
                events = outcome.last_version - outcome.first_version + 1
                self._frames += 2 + events // 16
        if self._frames < _CHECKPOINT_FRAMES:
            return
        if self._checkpoint is not None and not self._checkpoint.done():
            return
        self._frames = 0
        loop = asyncio.get_running_loop()
        self._checkpoint = loop.run_in_executor(self._executor, self._checkpoint_wal)

    def _checkpoint_wal(self) -> None:
        """On the thread: copy the WAL into the database without blocking writers."""
        assert self._checkpointer is not None
        try:
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            # A checkpoint that cannot run now runs next time; the WAL keeps
            # every commit meanwhile.
            pass

    def _remember(self, outcomes: list[Commit | ConcurrencyError]) -> None:
        recent = self._recent
        for outcome in outcomes:
            if not isinstance(outcome, Commit):
                continue
            if recent and recent[-1].position + 1 != outcome.first_position:
                recent.clear()  # another process committed in between
            recent.extend(outcome.records)
        if len(recent) > 2 * _RECENT:
            del recent[:-_RECENT]

    def _recent_after(self, position: int) -> list[Recorded]:
        """The remembered records after ``position``, if they follow it exactly."""
        recent = self._recent
        if not recent:
            return []
        start = position + 1 - recent[0].position
        if start < 0 or start >= len(recent):
            return []
        return recent[start : start + _SUBSCRIBE_PAGE]

    @staticmethod
    def _plan(
        batch: list[_Append], versions: dict[str, int], position: int
    ) -> tuple[list[tuple[Any, ...]], list[Commit | ConcurrencyError], int]:
        """The rows a batch inserts, what each of its appends gets back, and
        the head after it; ``versions`` (of the batch's streams, before it)
        is brought up to date."""
        rows: list[tuple[Any, ...]] = []
        outcomes: list[Commit | ConcurrencyError] = []
        for r in batch:
            stream = r.stream
            actual = versions.get(stream, 0)
            if actual != r.expected:
                outcomes.append(ConcurrencyError(stream, r.expected, actual))
                continue
            first_position = position + 1
            count = len(r.events)
            rows.append(
                (
                    first_position,
                    stream,
                    actual + 1,
                    count,
                    r.at,
                    r.correlation_id,
                    r.causation_id,
                    r.data,
                )
            )
            records = envelopes(
                stream,
                actual + 1,
                first_position,
                r.at,
                r.events,
                r.correlation_id,
                r.causation_id,
            )
            position += count
            versions[stream] = actual + count
            outcomes.append(
                Commit(
                    stream=stream,
                    first_version=actual + 1,
                    last_version=actual + count,
                    first_position=first_position,
                    last_position=position,
                    at=r.at,
                    records=tuple(records),
                )
            )
        return rows, outcomes, position

    # -- reading ---------------------------------------------------------------

    async def read(self, stream: str, from_version: int = 1) -> list[Recorded]:
        """The events of ``stream`` from ``from_version`` on, in version order."""
        rows = await self._fetch(_READ_STREAM, {"stream": stream, "from": from_version})
        records = decode_page(rows, union=self.union)
        # the first commit may begin before from_version; its versions follow
        # one another, so how many to drop is a difference
        skip = from_version - records[0].version if records else 0
        return records[skip:] if skip > 0 else records

    async def read_all(
        self, from_position: int = 0, limit: int = 10_000
    ) -> list[Recorded]:
        """At most ``limit`` events with ``position > from_position``, in order."""
        if limit < 1:
            raise ValueError(f"read_all needs a limit of 1 or more, not {limit}")
        after = max(from_position, 0)
        rows = await self._fetch(_READ_ALL, {"after": after, "upto": after + limit})
        if not rows:
            # Positions are dense, so nothing up to `upto` means nothing after
            # it either, unless a gap was made outside steward: look past it.
            rows = await self._fetch(_READ_NEXT, (after,))
        records = decode_page(rows, union=self.union)
        # the first commit may begin at or before `after`; its positions
        # follow one another, so how many to drop is a difference
        skip = max(after + 1 - records[0].position, 0) if records else 0
        return records[skip : skip + limit]

    async def version(self, stream: str) -> int:
        """The stream's current version; 0 when it has no events."""
        rows = await self._fetch(_VERSION, (stream,))
        return int(rows[0][0]) if rows else 0

    async def head(self) -> int:
        """The highest position in the log; 0 when it is empty."""
        rows = await self._fetch(_HEAD, ())
        return int(rows[0][0]) if rows else 0

    async def streams(self, prefix: str = "") -> list[str]:
        """The names of the streams starting with ``prefix``, sorted."""
        # SQLite orders every TEXT below every BLOB, so an empty blob is an
        # upper bound no stream name reaches.
        upper: str | bytes = _prefix_end(prefix) or b""
        rows = await self._fetch(_STREAMS, {"low": prefix, "high": upper})
        return [row[0] for row in rows]

    async def subscribe(self, from_position: int = 0) -> AsyncGenerator[Recorded, None]:
        """Every event with ``position > from_position``: stored ones, then live.

        Commits of this log wake a subscriber at once; commits of other
        processes on the same file are found by polling every
        ``poll_interval`` seconds while it is idle. The iteration ends when the
        log is closed.
        """
        position = from_position
        loop = asyncio.get_running_loop()
        while not self._closing:
            # Taken before reading: a commit landing during the read sets it,
            # so the wait below returns at once instead of missing the commit.
            committed = self._committed
            if committed is None:
                committed = self._committed = asyncio.Event()
            page = self._recent_after(position) or await self.read_all(
                position, _SUBSCRIBE_PAGE
            )
            for record in page:
                yield record
            if page:
                position = page[-1].position
            if len(page) < _SUBSCRIBE_PAGE:
                # Woken by a commit of this log, or after `poll_interval` to
                # look for other processes' commits: re-reading is the poll
                # (a read past the head is one seek on the primary key). A
                # plain timer, not `asyncio.timeout`, whose set-up per wait
                # cost a lone run 7% of its instructions per step.
                poll = loop.call_later(self._poll_interval, self._wake_subscribers)
                try:
                    await committed.wait()
                finally:
                    poll.cancel()

    async def _fetch(
        self, sql: str, params: tuple[Any, ...] | dict[str, Any]
    ) -> list[Any]:
        if self._closing:
            raise LogReadError(
                f"the event log at {self.path} is closed; open it again to read"
            )
        try:
            try:
                rows = self._quick_reader.execute(sql, params).fetchall()
            except sqlite3.OperationalError as e:
                if e.sqlite_errorcode & 0xFF not in _LOCKED:
                    raise
                # locked: wait for it on the reader's thread, not here
                return list(await self._reader.execute_fetchall(sql, params))
        except sqlite3.Error as e:
            raise LogReadError(
                f"cannot read the event log at {self.path}: {e}; check that the "
                "file is a steward SQLite log and readable"
            ) from e
        if len(rows) >= _LONG_READ:
            # Read on the loop: a loop of long reads (a catch-up) must still
            # let other tasks run between them.
            await asyncio.sleep(0)
        return rows

    # -- lifecycle -------------------------------------------------------------

    async def close(self) -> None:
        """Commit the appends already made, stop, and close the connections.

        Closing twice is harmless; subscribers end their iteration.
        """
        if self._closed:
            return
        self._closing = True
        self._wakeup.set()
        self._wake_subscribers()
        try:
            await self._writer_task
        finally:
            self._closed = True
            loop = asyncio.get_running_loop()
            if self._checkpoint is not None:
                with contextlib.suppress(Exception):
                    await self._checkpoint
            for conn in (self._checkpointer, self._writer):
                if conn is not None:
                    await loop.run_in_executor(self._executor, conn.close)
            self._executor.shutdown()
            self._quick_reader.close()
            await self._reader.close()

    async def __aenter__(self) -> SqliteEventLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<SqliteEventLog {self.path} {state}>"


def _open_writer(
    file: Path, busy_ms: int, synchronous: str, inline: bool
) -> sqlite3.Connection:
    """On the thread: connect, set the pragmas, create the schema.

    ``inline``: the connection commits on the event loop, so it never waits
    for a lock (``busy_timeout`` 0) nor checkpoints (a thread does).
    """
    conn = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        _check_tables(conn, file)  # before anything is written, WAL mode included
        # Only takes effect on a new file. Events are a few hundred bytes:
        # 8 KiB pages made appends and replays ~20% faster than 4 KiB.
        conn.execute("PRAGMA page_size = 8192")
        _waiting_out_busy(conn, "PRAGMA journal_mode = WAL", busy_ms)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.executescript(_SCHEMA)
        _migrate(conn)
        if inline:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
    except BaseException:
        conn.close()
        raise
    return conn


def _waiting_out_busy(conn: sqlite3.Connection, sql: str, busy_ms: int) -> None:
    """Execute ``sql``, again while SQLite refuses it for a lock without
    waiting, up to ``busy_ms``. ``PRAGMA journal_mode`` does so while
    another process's last connection closes the file (checkpointing and
    removing its WAL): two processes starting on one log met it."""
    deadline = time.monotonic() + busy_ms / 1000
    pause = 0.001
    while True:
        try:
            conn.execute(sql)
            return
        except sqlite3.OperationalError as e:
            busy = e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(pause)  # on the log's thread, not the event loop
        pause = min(pause * 2, 0.05)


def _open_quick_reader(file: Path) -> sqlite3.Connection:
    """On the loop: the connection reads run on, never waiting for a lock."""
    conn = sqlite3.connect(file, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _open_checkpointer(file: Path, busy_ms: int) -> sqlite3.Connection:
    """On the thread: the connection that checkpoints for an inline writer."""
    conn = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    return conn


def check_file(file: str | os.PathLike[str]) -> None:
    """Refuse ``file`` unless steward may make it a log (or projections) file
    or it is one: it does not exist, is empty, or is an SQLite database with
    no tables or with steward's. Reads only; `SqliteEventLog.open` checks the
    same itself, this is for callers that write beside the file first.

    Raises:
        NotALogError: the file is another program's database, or no SQLite
            database at all.
    """
    path = Path(file)
    try:
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError):
        return  # nothing there (a directory is refused by whoever opens it)
    except OSError as e:
        raise NotALogError(str(path), f"it cannot be read ({e.strerror})") from e
    if not header:
        return
    if header != _SQLITE_HEADER:
        raise NotALogError(str(path), "it is not an SQLite database")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            conn.execute("PRAGMA busy_timeout = 5000")
            _check_tables(conn, path)
    except sqlite3.Error as e:
        raise NotALogError(str(path), f"it cannot be read as SQLite ({e})") from e


def _check_tables(conn: sqlite3.Connection, file: Path) -> None:
    """Refuse a file with tables, none of them steward's (see `_OWN_TABLES`)."""
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "ORDER BY name"
        )
        if not name.startswith("sqlite_")
    ]
    if not tables or any(_is_own(conn, name) for name in tables):
        return
    shown = ", ".join(tables[:5])
    if tables[5:]:
        shown += f", … ({len(tables)} in all)"
    raise NotALogError(
        str(file), f"it is an SQLite database of another program (tables {shown})"
    )


def _is_own(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` is one of steward's, by its name and columns."""
    columns = _OWN_TABLES.get(table)
    if columns is None:
        return False
    found = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    return columns <= found


def _migrate(conn: sqlite3.Connection) -> None:
    """Move a row-per-event ``events`` table, if the file has one, into commits."""
    if not _is_own(conn, "events"):
        return  # none, or another program's table of that name: left alone
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _MIGRATE.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException as e:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        if isinstance(e, sqlite3.IntegrityError):
            raise sqlite3.DatabaseError(
                "its row-per-event `events` table (written by an earlier steward) "
                "and its `commits` table hold the same positions, so the events "
                f"cannot be moved ({e}); were two steward versions writing it?"
            ) from e
        raise


def _prefix_end(prefix: str) -> str | None:
    """The smallest string above every string starting with ``prefix``.

    SQLite compares text as UTF-8 bytes, which orders like code points, so
    bumping the last character that can be bumped gives the bound. None when
    there is no bound (empty prefix, or only U+10FFFF characters).
    """
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000  # surrogates cannot be stored as UTF-8
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None
