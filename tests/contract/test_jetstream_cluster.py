"""The three-node cluster of ``deploy/nats`` loses a node mid-run, and no commit.

The nodes are the deploy files themselves, started by `nats_cluster.cluster`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats_cluster import cluster

from steward import events
from steward.actors.run import events as run_events
from steward.bus import JetStreamEventLog
from steward.errors import ConcurrencyError, LogReadError, LogWriteError
from steward.events import Recorded
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

STREAM = "CLUSTER"

WRITERS = 8
STREAMS_PER_WRITER = 4
COMMITS = 12  # per stream; commit c holds 1 + c % 2 events


async def connect(urls: list[str]) -> JetStreamEventLog:
    """A handle on all three nodes, with short timeouts so an outage shows."""
    return await JetStreamEventLog.open(
        urls,
        stream=STREAM,
        prefix="cluster",
        replicas=3,
        connect_timeout=1.0,
        request_timeout=0.5,
        write_timeout=5.0,
        read_timeout=5.0,
        heartbeat=0.5,
        reconnect_wait=0.05,
        reconnect_max_wait=0.5,
        union=KINDS.union,
    )


async def open_when_elected(
    urls: list[str], timeout: float = 20.0
) -> JetStreamEventLog:
    """Open the log once the cluster has a JetStream leader and three peers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await connect(urls)
        except LogWriteError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


def batch(stream: str, first_version: int, size: int) -> list[events.Event]:
    """The events a commit at ``first_version`` of ``stream`` holds."""
    return [
        run_events.NoteRecorded(category="cluster", content=f"{stream}@{v}")
        for v in range(first_version, first_version + size)
    ]


def commits_of(stream: str) -> list[tuple[int, list[events.Event]]]:
    """(expected version, events) of each of ``stream``'s commits, in order."""
    out, version = [], 0
    for c in range(COMMITS):
        size = 1 + c % 2
        out.append((version, batch(stream, version + 1, size)))
        version += size
    return out


async def settled(
    read: Callable[[], Awaitable[list[Recorded]]], want: int, timeout: float = 5.0
) -> list[Recorded]:
    """A read repeated until it returns ``want`` records (a replica may lag)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await read()
        if len(got) >= want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.1)


async def test_a_cluster_losing_a_node_loses_nothing(tmp_path: Path) -> None:
    """Kill the stream's leader of three replicas mid-run: every commit is kept once.

    Writers keep appending through the election that follows; an append that
    fails is checked against the stream (it may have landed) and retried at
    the same version, and a subscription started before the kill sees every
    event in the log's order.
    """
    streams = [
        f"run.w{w}.s{s}" for w in range(WRITERS) for s in range(STREAMS_PER_WRITER)
    ]
    plan = {stream: commits_of(stream) for stream in streams}
    total_commits = len(streams) * COMMITS
    total_events = sum(len(b) for commits in plan.values() for _, b in commits)

    with cluster(tmp_path) as nodes:
        urls = [node.url for node in nodes.values()]
        opened: list[JetStreamEventLog] = []
        running: list[asyncio.Future[Any]] = []
        raw = None
        try:
            writer_log = await open_when_elected(urls)
            opened.append(writer_log)
            reader_log = await connect(urls)
            opened.append(reader_log)
            raw = await nats.connect(urls, max_reconnect_attempts=-1)

            live = reader_log.subscribe()
            seen: list[Recorded] = []
            done = 0
            halfway = asyncio.Event()
            failures: list[Exception] = []

            async def follow() -> None:
                async for record in live:
                    seen.append(record)
                    if len(seen) == total_events:
                        return

            async def put(stream: str, expected: int, sent: list[events.Event]) -> None:
                while True:
                    try:
                        await writer_log.append(stream, sent, expected)
                        return
                    except (LogWriteError, ConcurrencyError) as e:
                        failures.append(e)
                    # It may have landed after all: look before trying again.
                    with contextlib.suppress(LogReadError):
                        stored = await writer_log.read(stream, expected + 1)
                        if stored:
                            assert [r.event for r in stored] == sent, stream
                            return
                    await asyncio.sleep(0.05)

            async def write(w: int) -> None:
                nonlocal done
                mine = [s for s in streams if s.startswith(f"run.w{w}.")]
                for c in range(COMMITS):
                    for stream in mine:
                        await put(stream, *plan[stream][c])
                        done += 1
                        if done >= total_commits // 2:
                            halfway.set()

            following = asyncio.create_task(follow())
            writing = asyncio.gather(*(write(w) for w in range(WRITERS)))
            running += [following, writing]
            async with asyncio.timeout(40):
                await halfway.wait()
                info = await raw.jetstream().stream_info(STREAM)
                assert info.cluster is not None and info.cluster.leader in nodes
                leader = info.cluster.leader
                await asyncio.to_thread(nodes[leader].stop, kill=True)
                await writing
                await following
            await live.aclose()

            for stream in streams:
                want = [e for _, b in plan[stream] for e in b]
                got = await settled(
                    functools.partial(reader_log.read, stream), len(want)
                )
                assert [r.version for r in got] == list(range(1, len(want) + 1))
                assert [r.event for r in got] == want, stream
            everything = await settled(
                lambda: reader_log.read_all(0, 10_000), total_events
            )
            assert len(everything) == total_events
            assert sorted((r.stream, r.version) for r in everything) == sorted(
                (stream, v)
                for stream, commits in plan.items()
                for expected, b in commits
                for v in range(expected + 1, expected + len(b) + 1)
            )
            assert seen == everything
        finally:
            for task in running:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            for log in opened:
                await log.close()
            if raw is not None:
                await raw.close()
