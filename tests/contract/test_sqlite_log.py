"""What the SQLite backend promises beyond the contract: files, durability, errors."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from steward import events
from steward.actors.run import events as run_events
from steward.bus import Commit, SqliteEventLog, open_log
from steward.bus import sqlite as sqlite_module
from steward.errors import (
    ConcurrencyError,
    ConfigError,
    LogReadError,
    LogWriteError,
    NotALogError,
)
from steward.events import Recorded
from steward.kinds import KINDS

TIMEOUT = 5.0


def note(n: int) -> events.Event:
    """A small event told apart by ``n``."""
    return run_events.NoteRecorded(category="test", content=str(n))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """Where the test's log file goes."""
    return tmp_path / "log.db"


@pytest.fixture
async def log(path: Path) -> AsyncIterator[SqliteEventLog]:
    """A fresh SQLite log, closed when the test ends."""
    opened = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        yield opened
    finally:
        await opened.close()


async def take(iterator: AsyncIterator[Recorded], n: int) -> list[Recorded]:
    """The next ``n`` records, failing after TIMEOUT seconds."""
    got: list[Recorded] = []
    async with asyncio.timeout(TIMEOUT):
        while len(got) < n:
            got.append(await anext(iterator))
    return got


async def stop(task: asyncio.Task[Any]) -> None:
    """Cancel a helper task (if still running) and wait for it to end."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def raw(path: Path) -> contextlib.closing[sqlite3.Connection]:
    """A plain sqlite3 connection to the log file, closed after the block."""
    return contextlib.closing(sqlite3.connect(path, isolation_level=None))


# -- the file ------------------------------------------------------------------


async def test_open_creates_directories_file_and_schema(tmp_path: Path) -> None:
    """open creates missing parent directories, the file, and the commits table:
    a row per commit, holding its one event or the list of its events."""
    path = tmp_path / "a" / "b" / "log.db"
    log = await SqliteEventLog.open(path, union=KINDS.union)
    await log.append("run.r1", [note(1)], 0)
    await log.append("run.r1", [note(2), note(3)], 1, correlation_id="c")
    await log.close()
    with raw(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(commits)")]
        assert columns == [
            "position",
            "stream",
            "version",
            "count",
            "at",
            "correlation_id",
            "causation_id",
            "data",
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        rows = conn.execute(
            "SELECT position, version, count, correlation_id, data FROM commits"
        ).fetchall()
    assert rows == [
        (1, 1, 1, None, events.encode(note(1))),
        (2, 2, 2, "c", msgspec.msgpack.encode([note(2), note(3)])),
    ]


async def test_a_log_of_rows_per_event_is_moved_into_commits(tmp_path: Path) -> None:
    """A file written with the earlier row-per-event table opens with every
    event where it was, and appends carry on after them."""
    path = tmp_path / "old.db"
    with raw(path) as conn:
        conn.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, stream TEXT NOT NULL,"
            " version INTEGER NOT NULL, at REAL NOT NULL, type TEXT NOT NULL,"
            " correlation_id TEXT, causation_id TEXT, data BLOB NOT NULL,"
            " UNIQUE (stream, version))"
        )
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, 'NoteRecorded', ?, NULL, ?)",
            [
                (1, "run.a", 1, 1.5, "c", events.encode(note(1))),
                (2, "run.b", 1, 2.5, None, events.encode(note(2))),
                (3, "run.a", 2, 3.5, "c", events.encode(note(3))),
            ],
        )
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        assert [
            (r.stream, r.version, r.position, r.at, r.event)
            for r in await log.read_all()
        ] == [
            ("run.a", 1, 1, 1.5, note(1)),
            ("run.b", 1, 2, 2.5, note(2)),
            ("run.a", 2, 3, 3.5, note(3)),
        ]
        assert (await log.read("run.a"))[1].correlation_id == "c"
        commit = await log.append("run.a", [note(4)], 2)
        assert (commit.first_version, commit.first_position) == (3, 4)
    with raw(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "events" not in tables


async def test_a_log_with_both_tables_at_the_same_positions_is_refused(
    tmp_path: Path,
) -> None:
    """Rows of the earlier table that clash with commits are not moved; the
    error says why, and nothing is lost."""
    path = tmp_path / "both.db"
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        await log.append("run.a", [note(1)], 0)
    with raw(path) as conn:  # an earlier steward wrote here afterwards
        conn.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, stream TEXT,"
            " version INTEGER, at REAL, type TEXT, correlation_id TEXT,"
            " causation_id TEXT, data BLOB)"
        )
        conn.execute(
            "INSERT INTO events VALUES (1, 'run.b', 1, 0, 'NoteRecorded', NULL,"
            " NULL, ?)",
            (events.encode(note(2)),),
        )
    with pytest.raises(LogWriteError, match="hold the same positions"):
        await SqliteEventLog.open(path, union=KINDS.union)
    with raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM commits").fetchone() == (1,)


async def test_reads_start_and_stop_inside_a_commit(log: SqliteEventLog) -> None:
    """read_all and read return events from within a commit of several."""
    await log.append("run.a", [note(1), note(2), note(3)], 0)
    await log.append("run.b", [note(4), note(5)], 0)
    await log.append("run.a", [note(6)], 3)
    everything = await log.read_all()
    assert [r.position for r in everything] == [1, 2, 3, 4, 5, 6]
    for after in range(7):
        for limit in range(1, 7):
            got = await log.read_all(after, limit)
            assert got == everything[after : after + limit], (after, limit)
    stream = await log.read("run.a")
    assert [r.version for r in stream] == [1, 2, 3, 4]
    for start in range(1, 6):
        assert await log.read("run.a", start) == stream[start - 1 :]
    assert await log.version("run.a") == 4
    assert await log.version("run.b") == 2
    assert await log.head() == 6


async def test_reopen_after_close_keeps_everything(path: Path) -> None:
    """A log closed and opened again has every event, and appends carry on."""
    first = await SqliteEventLog.open(path, union=KINDS.union)
    await first.append("run.r1", [note(1), note(2)], 0, correlation_id="c")
    await first.append("run.r2", [note(3)], 0)
    before = await first.read_all()
    await first.close()

    second = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        assert await second.read_all() == before
        commit = await second.append("run.r1", [note(4)], 2)
        assert (commit.last_version, commit.last_position) == (3, 4)
    finally:
        await second.close()


async def test_close_commits_appends_already_made(path: Path) -> None:
    """close waits for appends already made, and they are all stored."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    *commits, _ = await asyncio.gather(
        *(log.append(f"run.{i}", [note(i)], 0) for i in range(50)), log.close()
    )
    assert [c.stream for c in commits if isinstance(c, Commit)] == [
        f"run.{i}" for i in range(50)
    ]
    reopened = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        assert await reopened.head() == 50
    finally:
        await reopened.close()


@pytest.mark.parametrize(("mode", "pragma"), [("FULL", 2), ("NORMAL", 1), ("OFF", 0)])
async def test_synchronous_mode_is_applied(path: Path, mode: Any, pragma: int) -> None:
    """The synchronous mode asked for is the one the writer uses, and it works."""
    log = await SqliteEventLog.open(path, synchronous=mode, union=KINDS.union)
    try:
        writer = log._writer  # lives on the log's writer thread
        pragmas = await asyncio.get_running_loop().run_in_executor(
            log._executor, lambda: writer.execute("PRAGMA synchronous").fetchall()
        )
        assert pragmas == [(pragma,)]
        await log.append("run.r1", [note(1)], 0)
        assert await log.version("run.r1") == 1
    finally:
        await log.close()


async def test_bad_options_are_refused(path: Path) -> None:
    """An unknown synchronous mode or an in-memory path is refused, saying why."""
    with pytest.raises(ValueError, match="synchronous must be one of NORMAL, FULL"):
        await SqliteEventLog.open(path, synchronous="EXTRA", union=KINDS.union)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="give a file path"):
        await SqliteEventLog.open(":memory:", union=KINDS.union)


async def test_a_file_that_is_no_database_is_refused(tmp_path: Path) -> None:
    """Opening a non-SQLite file or a directory raises LogWriteError naming it."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, just text" * 100)
    with pytest.raises(LogWriteError, match=r"cannot open the event log at .*junk\.db"):
        await SqliteEventLog.open(junk, union=KINDS.union)
    with pytest.raises(LogWriteError, match="cannot open the event log"):
        await SqliteEventLog.open(tmp_path, union=KINDS.union)


async def test_another_programs_database_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    """A file with tables, none of them steward's (an ``events`` table of
    other columns is not the earlier steward's), is refused naming the file
    and its tables; it keeps its rows and journal mode, and gains no table."""
    path = tmp_path / "shop.db"
    with raw(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('Ada')")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, title TEXT)")
    said = (
        rf"^{re.escape(str(path))} is not a steward log: it is an SQLite database "
        r"of another program \(tables customers, events\); steward leaves it"
    )
    with pytest.raises(NotALogError, match=said):
        await SqliteEventLog.open(path, union=KINDS.union)
    with pytest.raises(NotALogError, match=said):
        sqlite_module.check_file(path)
    with raw(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
        assert names == ["customers", "events"]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert conn.execute("SELECT name FROM customers").fetchall() == [("Ada",)]


async def test_an_empty_file_or_database_becomes_a_log(tmp_path: Path) -> None:
    """An empty file, an SQLite database without tables and a steward file
    (a log, or the projections of a nats:// log) pass `check_file` and open."""
    empty = tmp_path / "empty.db"
    empty.touch()
    bare = tmp_path / "bare.db"
    with raw(bare) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("DROP TABLE t")
    views = tmp_path / "views.db"
    with raw(views) as conn:
        conn.execute(
            "CREATE TABLE projection_checkpoint (name TEXT PRIMARY KEY, "
            "position INTEGER NOT NULL)"
        )
        conn.execute("CREATE TABLE runs (id TEXT)")
    for path in (empty, bare, views, tmp_path / "absent.db"):
        sqlite_module.check_file(path)
        async with await SqliteEventLog.open(path, union=KINDS.union) as log:
            await log.append("run.r1", [note(1)], 0)
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database")
    with pytest.raises(
        NotALogError, match=r"notes\.txt is not a steward log: it is not"
    ):
        sqlite_module.check_file(junk)


# -- writing -------------------------------------------------------------------


async def test_appends_made_together_share_one_transaction(
    log: SqliteEventLog,
) -> None:
    """Group commit: appends waiting together are committed in one transaction."""
    commits = await asyncio.gather(
        *(log.append(f"run.{i}", [note(i), note(i)], 0) for i in range(100))
    )
    assert log.batches == 1
    assert [c.first_position for c in commits] == list(range(1, 200, 2))


async def test_a_lone_writer_commits_in_its_own_task(log: SqliteEventLog) -> None:
    """Once the writer's batches say an appender is alone, its appends commit
    in its own task: no turn of the loop for the writer task and another for
    the answer (other tasks run when it waits for anything else). After
    `_RUN_NOW` such commits in one turn it waits for the writer once."""
    await log.append("run.lone", [note(0)], 0)  # a batch of one: alone
    async with loop_turns() as turns:
        await asyncio.sleep(0)
        before = turns[0]
        commits = [
            await log.append("run.lone", [note(v)], v)
            for v in range(1, sqlite_module._RUN_NOW + 1)
        ]
        assert turns[0] == before  # not one turn of the loop was taken
        await log.append("run.lone", [note(99)], sqlite_module._RUN_NOW + 1)
        assert turns[0] > before  # the next one let the loop turn
    assert [c.first_version for c in commits] == list(
        range(2, sqlite_module._RUN_NOW + 2)
    )
    assert [r.event for r in await log.read("run.lone")][-1] == note(99)


async def test_appends_of_one_turn_share_a_transaction_after_a_lone_writer(
    log: SqliteEventLog,
) -> None:
    """A crowd arriving while the log commits appends in their callers' tasks
    (a lone writer before) takes two transactions: the first append's, in its
    own task, and one for all the others; then the log batches again."""
    await log.append("run.lone", [note(0)], 0)  # a batch of one: alone
    batches = log.batches
    await asyncio.gather(*(log.append(f"run.{i}", [note(i)], 0) for i in range(50)))
    assert log.batches - batches == 2
    await asyncio.gather(*(log.append(f"run.{i}", [note(i)], 1) for i in range(50)))
    assert log.batches - batches == 3


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
async def test_writers_on_one_file_see_each_others_commits(
    path: Path, mode: Any
) -> None:
    """A writer remembers versions it wrote, and forgets them once another
    connection commits: expected versions and positions stay right."""
    first = await SqliteEventLog.open(path, synchronous=mode, union=KINDS.union)
    second = await SqliteEventLog.open(path, synchronous=mode, union=KINDS.union)
    try:
        await first.append("run.a", [note(1)], 0)
        await first.append("run.b", [note(2)], 0)
        await second.append("run.a", [note(3)], 1)  # unseen by the first
        with pytest.raises(ConcurrencyError) as refused:
            await first.append("run.a", [note(4)], 1)
        assert refused.value.actual == 2
        later = await first.append("run.a", [note(4)], 2)
        assert (later.first_version, later.first_position) == (3, 4)
        with raw(path) as conn:  # a plain connection commits too
            conn.execute(
                "INSERT INTO commits VALUES (5, 'run.b', 2, 1, 0, NULL, NULL, x'')"
            )
        moved = await first.append("run.b", [note(5)], 2)
        assert (moved.first_version, moved.first_position) == (3, 6)
        again = await first.append("run.b", [note(6)], 3)  # from what it wrote
        assert (again.first_version, again.first_position) == (4, 7)
    finally:
        await first.close()
        await second.close()


async def test_append_cancelled_before_its_turn_is_not_stored(
    log: SqliteEventLog,
) -> None:
    """An append whose caller gave up before the writer took it stores nothing."""
    task = asyncio.create_task(log.append("run.r1", [note(1)], 0))
    await asyncio.sleep(0)  # the append is queued; the writer has not run yet
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await log.version("run.r1") == 0
    await log.append("run.r1", [note(2)], 0)
    assert [r.event for r in await log.read("run.r1")] == [note(2)]


@pytest.mark.parametrize("alone", [False, True], ids=["batched", "in_own_task"])
async def test_a_locked_file_gives_log_write_error_and_the_writer_recovers(
    path: Path, alone: bool
) -> None:
    """A write lock held too long fails the append cleanly; later appends work.
    So also when the append would commit in its caller's task (a lone writer)."""
    log = await SqliteEventLog.open(path, busy_timeout=0.05, union=KINDS.union)
    try:
        if alone:
            await log.append("run.warm", [note(0)], 0)
            assert log._alone
        with raw(path) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(
                LogWriteError, match=r"could not commit to run\.r1 .*database is locked"
            ) as caught:
                await log.append("run.r1", [note(1)], 0)
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            other.execute("ROLLBACK")
        commit = await log.append("run.r1", [note(2)], 0)
        assert commit.last_version == 1
    finally:
        await log.close()


@pytest.mark.parametrize("alone", [False, True], ids=["batched", "in_own_task"])
async def test_waiting_for_another_writer_does_not_block_the_loop(
    path: Path, alone: bool
) -> None:
    """A commit that meets another process's write lock waits off the loop,
    also one that would have committed in its caller's task."""
    log = await SqliteEventLog.open(path, busy_timeout=5.0, union=KINDS.union)
    try:
        if alone:
            await log.append("run.warm", [note(0)], 0)
            assert log._alone
        async with loop_turns(pause=0.001) as turns:
            with raw(path) as other:
                other.execute("BEGIN IMMEDIATE")
                append = asyncio.create_task(log.append("run.r1", [note(1)], 0))
                await asyncio.sleep(0.2)
                assert not append.done()  # waiting for the lock...
                before = turns[0]
                await asyncio.sleep(0.1)
                assert turns[0] > before  # ...while the loop goes on
                other.execute("COMMIT")
        commit = await asyncio.wait_for(append, TIMEOUT)
        assert commit.last_version == 1
        assert [r.event for r in await log.read("run.r1")] == [note(1)]
    finally:
        await log.close()


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
async def test_a_stream_another_writer_began_is_refused_as_a_conflict(
    path: Path, mode: Any
) -> None:
    """A stream this writer does not know, begun through another connection,
    is not taken to be new: an append expecting it to be gives
    ConcurrencyError, never LogWriteError, alone and in a crowd; and the
    writer carries on."""
    mine = await SqliteEventLog.open(path, synchronous=mode, union=KINDS.union)
    theirs = await SqliteEventLog.open(path, synchronous=mode, union=KINDS.union)
    try:
        await mine.append("run.mine", [note(0)], 0)
        await theirs.append("run.t1", [note(1), note(2)], 0)
        with pytest.raises(ConcurrencyError) as refused:
            await mine.append("run.t1", [note(3)], 0)
        assert (refused.value.stream, refused.value.expected, refused.value.actual) == (
            "run.t1",
            0,
            2,
        )

        await theirs.append("run.t2", [note(4)], 0)
        crowd = await asyncio.gather(
            mine.append("run.a", [note(5)], 0),
            mine.append("run.t2", [note(6)], 0),
            mine.append("run.b", [note(7)], 0),
            return_exceptions=True,
        )
        assert [type(r).__name__ for r in crowd] == [
            "Commit",
            "ConcurrencyError",
            "Commit",
        ]

        # the writer carries on, from what the file holds
        await theirs.append("run.t3", [note(8)], 0)
        later = await mine.append("run.t3", [note(12)], 1)
        assert later.first_version == 2
        assert later.first_position == await theirs.head()
        assert [r.event for r in await theirs.read("run.t3")] == [note(8), note(12)]
        assert [r.event for r in await mine.read("run.t1")] == [note(1), note(2)]
        assert [r.event for r in await mine.read("run.t2")] == [note(4)]
        everything = await mine.read_all()
        assert [r.position for r in everything] == list(range(1, len(everything) + 1))
    finally:
        await mine.close()
        await theirs.close()


async def test_a_stream_expected_new_is_inserted_without_a_lookup(
    path: Path,
) -> None:
    """An append expecting a stream the writer does not know to be new reads
    nothing from the file: ``UNIQUE (stream, version)`` checks it. When the
    stream was begun elsewhere, the insert fails, the batch is planned again
    with the lookup, and the append is refused as a conflict."""
    mine = await SqliteEventLog.open(path, union=KINDS.union)
    theirs = await SqliteEventLog.open(path, union=KINDS.union)
    statements: list[str] = []
    try:
        await mine.append("run.mine", [note(0)], 0)  # the head is known now
        await theirs.append("run.theirs", [note(1)], 0)
        await mine.append("run.mine", [note(2)], 1)  # and what theirs did
        mine._writer.set_trace_callback(statements.append)
        await mine.append("run.child", [note(3)], 0)
        inserts = [s for s in statements if s.startswith("INSERT")]
        assert len(inserts) == 1
        assert statements == [
            "BEGIN IMMEDIATE",
            "PRAGMA data_version",
            *inserts,
            "COMMIT",
        ]

        statements.clear()
        with pytest.raises(ConcurrencyError) as refused:
            await mine.append("run.theirs", [note(4)], 0)
        assert (refused.value.expected, refused.value.actual) == (0, 1)
        assert sum("json_each" in s for s in statements) == 1  # the redo's
        assert sum(s == "ROLLBACK" for s in statements) == 1
        assert (await mine.append("run.theirs", [note(4)], 1)).first_version == 2
        assert [r.event for r in await theirs.read("run.theirs")] == [note(1), note(4)]
    finally:
        mine._writer.set_trace_callback(None)
        await mine.close()
        await theirs.close()


async def test_a_stream_the_writer_forgot_is_refused_as_a_conflict(
    log: SqliteEventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream this writer wrote, then forgot (it keeps only so many), is
    not taken to be new either."""
    monkeypatch.setattr(sqlite_module, "_KNOWN_STREAMS", 1)
    await log.append("run.a", [note(1)], 0)
    await log.append("run.b", [note(2)], 0)  # two known: forgotten next time
    with pytest.raises(ConcurrencyError) as refused:
        await log.append("run.a", [note(3)], 0)
    assert refused.value.actual == 1
    assert (await log.append("run.a", [note(3)], 1)).first_version == 2


async def test_a_stream_expected_new_twice_in_a_batch_is_planned_on_the_file(
    path: Path,
) -> None:
    """Two appends of one batch to a stream this writer does not know, begun
    elsewhere, the first expecting it new: the guess fails the insert, and
    the batch planned again on the file refuses the first and writes the
    second, at the stream's true version."""
    theirs = await SqliteEventLog.open(path, union=KINDS.union)
    mine = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        await theirs.append("run.s", [note(1)], 0)
        assert not mine._alone  # both are queued for one batch
        batches = mine.batches
        refused, written = await asyncio.gather(
            mine.append("run.s", [note(2)], 0),
            mine.append("run.s", [note(3)], 1),
            return_exceptions=True,
        )
        assert mine.batches - batches == 1
        assert isinstance(refused, ConcurrencyError)
        assert (refused.stream, refused.actual) == ("run.s", 1)
        assert isinstance(written, Commit), written
        assert (written.stream, written.first_version) == ("run.s", 2)
        assert [r.event for r in await theirs.read("run.s")] == [note(1), note(3)]
    finally:
        await mine.close()
        await theirs.close()


@contextlib.asynccontextmanager
async def loop_turns(pause: float = 0.0) -> AsyncIterator[list[int]]:
    """``turns[0]`` counts the turns a task gets on the loop meanwhile."""
    turns = [0]

    async def tick() -> None:
        while True:
            turns[0] += 1
            await asyncio.sleep(pause)

    ticker = asyncio.create_task(tick())
    try:
        yield turns
    finally:
        ticker.cancel()


def locked_error(directory: Path) -> sqlite3.OperationalError:
    """The error SQLite gives a reader that meets a lock (a real one)."""
    file = directory / "locked.db"
    quick = sqlite3.connect(file, isolation_level=None, timeout=0)  # no waiting
    with raw(file) as holder, contextlib.closing(quick) as reader:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("CREATE TABLE t (x)")  # takes and keeps the lock
        try:
            reader.execute("SELECT * FROM t")
        except sqlite3.OperationalError as e:
            assert e.sqlite_errorcode == sqlite3.SQLITE_BUSY
            return e
    raise AssertionError("the reader was not locked out")


class _LockedOnce:
    """A reader connection whose next read meets ``error``, then reads."""

    def __init__(self, conn: sqlite3.Connection, error: Exception) -> None:
        self.conn, self.error = conn, error

    def execute(self, *args: Any) -> sqlite3.Cursor:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.conn.execute(*args)

    def close(self) -> None:
        self.conn.close()


class _BusyFirst:
    """A connection whose first ``busy`` statements meet ``error``."""

    def __init__(self, busy: int, error: Exception) -> None:
        self.busy, self.error = busy, error
        self.done: list[str] = []

    def execute(self, sql: str) -> None:
        if self.busy:
            self.busy -= 1
            raise self.error
        self.done.append(sql)


def test_opening_waits_out_a_lock_sqlite_does_not_wait_for(tmp_path: Path) -> None:
    """``PRAGMA journal_mode`` meets a lock without waiting while another
    process's last connection closes the file: opening tries again, up to
    the busy timeout, and gives up on other errors at once."""
    busy = locked_error(tmp_path)
    conn = _BusyFirst(3, busy)
    sqlite_module._waiting_out_busy(conn, "PRAGMA journal_mode = WAL", 1000)  # type: ignore[arg-type]
    assert conn.done == ["PRAGMA journal_mode = WAL"] and conn.busy == 0
    forever = _BusyFirst(10**9, busy)
    with pytest.raises(sqlite3.OperationalError):
        sqlite_module._waiting_out_busy(forever, "PRAGMA journal_mode = WAL", 30)  # type: ignore[arg-type]
    with raw(tmp_path / "other.db") as plain:
        try:
            plain.execute("SELECT * FROM no_such_table")
        except sqlite3.OperationalError as e:
            not_busy = e
    other = _BusyFirst(1, not_busy)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        sqlite_module._waiting_out_busy(other, "PRAGMA journal_mode = WAL", 1000)  # type: ignore[arg-type]
    assert other.done == []


async def test_a_read_that_meets_a_lock_is_read_on_the_thread(path: Path) -> None:
    """Reads run on the loop without waiting; one that meets a lock is read
    again where it may wait, and returns the same events."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        await log.append("run.r1", [note(1), note(2)], 0)
        log._quick_reader = _LockedOnce(log._quick_reader, locked_error(path.parent))
        assert [r.event for r in await log.read("run.r1")] == [note(1), note(2)]
        assert log._quick_reader.error is None  # the lock was met
        assert [r.event for r in await log.read_all()] == [note(1), note(2)]
    finally:
        await log.close()


async def test_a_read_that_fails_otherwise_is_a_log_read_error(path: Path) -> None:
    log = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        with contextlib.closing(sqlite3.connect(":memory:")) as other:
            with pytest.raises(sqlite3.OperationalError) as caught:
                other.execute("SELECT * FROM commits")
        log._quick_reader = _LockedOnce(log._quick_reader, caught.value)
        with pytest.raises(LogReadError, match=r"cannot read .*no such table"):
            await log.read("run.r1")
    finally:
        await log.close()


async def test_a_long_catch_up_lets_other_tasks_run(path: Path) -> None:
    """Reads run on the loop, so a subscriber reading page after page from
    the file gives the loop back between pages."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    other = await SqliteEventLog.open(
        path, union=KINDS.union
    )  # has none of the commits in memory
    try:
        for n in range(600):
            await log.append(f"run.r{n}", [note(i) for i in range(5)], 0)
        at_page: list[int] = []
        async with loop_turns() as turns:
            async for record in other.subscribe(0):
                if record.position % 1000 == 1:
                    at_page.append(turns[0])
                if record.position == 3000:
                    break
        assert len(at_page) == 3
        assert at_page[0] < at_page[1] < at_page[2]
    finally:
        await other.close()
        await log.close()


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
async def test_the_wal_is_checkpointed_as_it_grows(path: Path, mode: Any) -> None:
    """Commits reach the database file, not only the WAL, while the log is open."""
    log = await SqliteEventLog.open(path, synchronous=mode, union=KINDS.union)
    try:
        empty = path.stat().st_size
        for n in range(1500):
            await log.append(f"run.r{n}", [note(n)], 0)
        if log._checkpoint is not None:
            await log._checkpoint
        assert path.stat().st_size > empty + 500 * 100
        assert await log.head() == 1500
    finally:
        await log.close()


# -- reading -------------------------------------------------------------------


async def test_corrupt_event_names_its_stream_and_version(
    log: SqliteEventLog, path: Path
) -> None:
    """Bytes that are no event raise LogReadError naming the stream and version."""
    for version in range(3):
        await log.append("run.r1", [note(version + 1)], version)
    with raw(path) as conn:
        # The log never updates a row; a test may, to play a damaged disk.
        conn.execute(
            "UPDATE commits SET data = x'c1ff' WHERE stream = 'run.r1' AND version = 2"
        )
    match = r"cannot decode event run\.r1/2 at position 2: .*corrupt"
    with pytest.raises(LogReadError, match=match) as caught:
        await log.read("run.r1")
    assert isinstance(caught.value.__cause__, msgspec.DecodeError)
    with pytest.raises(LogReadError, match=match):
        await log.read_all()
    assert [r.version for r in await log.read("run.r1", 3)] == [3]
    # This log's own subscribers get its commits from memory; another
    # process's subscriber reads the damaged bytes.
    async with await SqliteEventLog.open(path, union=KINDS.union) as other:
        subscription = other.subscribe()
        try:
            with pytest.raises(LogReadError, match=match):
                await take(subscription, 3)
        finally:
            await subscription.aclose()


async def test_an_unreadable_event_inside_a_commit_is_named(
    log: SqliteEventLog, path: Path
) -> None:
    """In a commit of several events, the one that is not an event is named."""
    await log.append("run.r1", [note(1), note(2), note(3)], 0)
    with raw(path) as conn:
        conn.execute(
            "UPDATE commits SET data = ? WHERE stream = 'run.r1'",
            (msgspec.msgpack.encode([note(1), {"type": "Nope"}, note(3)]),),
        )
    with pytest.raises(LogReadError, match=r"event run\.r1/2 at position 2: "):
        await log.read("run.r1")


async def test_old_event_shapes_are_upcast_on_read(
    log: SqliteEventLog, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored event of a retired type is read through its upcaster."""
    monkeypatch.setitem(
        events.UPCASTERS,
        "NoteTaken",
        lambda old: {"type": "NoteRecorded", "category": "old", "content": old["text"]},
    )
    await log.append("run.r1", [note(1)], 0)
    with raw(path) as conn:
        legacy = {"type": "NoteTaken", "text": "legacy"}
        conn.execute(
            "INSERT INTO commits VALUES (2, 'run.r1', 2, 1, 0.0, NULL, NULL, ?)",
            (msgspec.msgpack.encode(legacy),),
        )
        conn.execute(  # and inside a commit of several events
            "INSERT INTO commits VALUES (3, 'run.r1', 3, 2, 0.0, NULL, NULL, ?)",
            (msgspec.msgpack.encode([note(3), legacy]),),
        )
    got = [r.event for r in await log.read("run.r1")]
    old = run_events.NoteRecorded(category="old", content="legacy")
    assert got == [note(1), old, note(3), old]


# -- subscribe -----------------------------------------------------------------


async def test_a_commit_wakes_a_subscriber_without_polling(path: Path) -> None:
    """A subscriber of the same log is woken by a commit, not by the next poll."""
    log = await SqliteEventLog.open(path, poll_interval=3600, union=KINDS.union)
    subscription = log.subscribe()
    waiting = asyncio.create_task(take(subscription, 1))
    try:
        await asyncio.sleep(0)  # let it find the log empty and start waiting
        await log.append("run.r1", [note(1)], 0)
        assert [r.event for r in await waiting] == [note(1)]
    finally:
        await stop(waiting)
        await subscription.aclose()
        await log.close()


async def test_close_ends_subscriptions(path: Path) -> None:
    """Closing the log ends the iteration of its subscribers."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    await log.append("run.r1", [note(1)], 0)

    async def drain() -> list[Recorded]:
        return [r async for r in log.subscribe()]

    draining = asyncio.create_task(drain())
    await asyncio.sleep(0)
    await log.close()
    async with asyncio.timeout(TIMEOUT):
        assert [r.event for r in await draining] == [note(1)]


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from steward.actors.run import events as run_events
    from steward.bus import SqliteEventLog
    from steward.kinds import KINDS

    async def main() -> None:
        log = await SqliteEventLog.open(sys.argv[1], union=KINDS.union)
        try:
            for i in range(3):
                note = run_events.NoteRecorded(category="far", content=str(i))
                await log.append("run.far", [note], i)
        finally:
            await log.close()

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_commits_of_another_process_reach_subscribe(
    log: SqliteEventLog, path: Path
) -> None:
    """A subscriber sees events another OS process appends to the same file."""
    subscription = log.subscribe()
    waiting = asyncio.create_task(take(subscription, 3))
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WRITER, str(path), stderr=asyncio.subprocess.PIPE
        )
        async with asyncio.timeout(30):
            _, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        got = await waiting
    finally:
        await stop(waiting)
        await subscription.aclose()
    assert [(r.stream, r.version) for r in got] == [("run.far", v) for v in (1, 2, 3)]


# -- open_log ------------------------------------------------------------------


async def test_open_log_opens_sqlite_urls_and_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///abs, sqlite://relative and a plain path all open a SQLite log."""
    monkeypatch.chdir(tmp_path)
    for url, file in (
        (f"sqlite://{tmp_path}/a.db", tmp_path / "a.db"),
        ("sqlite://rel/b.db", tmp_path / "rel" / "b.db"),
        (str(tmp_path / "c.db"), tmp_path / "c.db"),
    ):
        log = await open_log(url, poll_interval=0.1, union=KINDS.union)
        try:
            assert isinstance(log, SqliteEventLog)
            await log.append("run.r1", [note(1)], 0)
        finally:
            await log.close()
        assert file.exists(), url


async def test_open_log_refuses_unknown_schemes() -> None:
    """A URL naming a backend steward lacks raises ConfigError saying what works."""
    with pytest.raises(
        ConfigError, match=r"kafka://localhost:9092.*no 'kafka' backend; use sqlite:///"
    ):
        await open_log("kafka://localhost:9092", union=KINDS.union)
    with pytest.raises(ConfigError, match="names no file"):
        await open_log("sqlite://", union=KINDS.union)
