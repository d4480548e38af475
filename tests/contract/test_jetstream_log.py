"""What the JetStream backend promises beyond the contract: subjects, positions,
dedup, conflicts between processes, and surviving a server restart.

Every test talks to a real nats-server (see ``tests/nats_server.py``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats_server import NatsServer

from steward import events
from steward.actors.run import events as run_events
from steward.bus import JetStreamEventLog, open_log
from steward.bus.jetstream import POSITIONS_PER_COMMIT, stream_of, subject_of
from steward.errors import ConcurrencyError, ConfigError, LogReadError, LogWriteError
from steward.events import Recorded
from steward.kinds import KINDS

_names = itertools.count(1)

Opener = Callable[..., Awaitable[JetStreamEventLog]]


def note(n: int) -> events.Event:
    """A small event told apart by ``n``."""
    return run_events.NoteRecorded(category="test", content=str(n))


@pytest.fixture
async def open_js(nats_server: NatsServer) -> AsyncIterator[Opener]:
    """Open handles on one fresh stream of the session's server; all closed after."""
    n = next(_names)
    opened: list[JetStreamEventLog] = []

    async def make(**kw: Any) -> JetStreamEventLog:
        kw.setdefault("stream", f"JS_{n}")
        kw.setdefault("prefix", f"js.t{n}")
        log = await JetStreamEventLog.open(nats_server.url, **kw, union=KINDS.union)
        opened.append(log)
        return log

    try:
        yield make
    finally:
        for log in reversed(opened):
            await log.close()


@pytest.fixture
async def log(open_js: Opener) -> JetStreamEventLog:
    return await open_js()


@pytest.fixture
async def raw(nats_server: NatsServer) -> AsyncIterator[Any]:
    """A plain nats-py connection to the session's server."""
    nc = await nats.connect(nats_server.url)
    try:
        yield nc
    finally:
        await nc.close()


# -- subjects and positions ----------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "run.r1",
        "run_1/sub/é",
        "run%a",
        "a..b",
        "run.",
        ".x",
        "has space",
        "wild*.card>",
        "$SYS",
        "",
        "%",
        "%41",
        "tab\tand\nnewline",
    ],
)
def test_stream_names_map_to_subjects_and_back(name: str) -> None:
    """Any stream name has a valid subject tail that maps back to the same name."""
    tail = subject_of(name)
    assert stream_of(tail) == name
    assert all(token and not set(token) & set(" \t\r\n*>") for token in tail.split("."))


def test_plain_names_keep_their_dots_as_subject_tokens() -> None:
    """run.r1 is the subject run.r1, so wildcards like <prefix>.run.> work."""
    assert subject_of("run.r1") == "run.r1"
    assert subject_of("run.r1/sub/2") == "run.r1/sub/2"
    assert subject_of("run_1/sub/é") == "run_1/sub/%C3%A9"
    assert subject_of("a..b") == "a.%.b"


async def test_each_stream_has_its_own_subject(
    log: JetStreamEventLog, raw: Any
) -> None:
    """Commits are stored under <prefix>.<partition>.<stream>, one message
    per commit; the partition is the same in every process."""
    await log.append("run.r1", [note(1), note(2)], 0)
    await log.append("run_1/sub/é", [note(3)], 0)
    info = await raw.jetstream().stream_info(log.stream, subjects_filter=">")
    assert log.partitions == 16
    assert (log.partition_of("run.r1"), log.partition_of("run_1/sub/é")) == (2, 3)
    assert info.state.subjects == {
        f"{log.prefix}.2.run.r1": 1,
        f"{log.prefix}.3.run_1/sub/%C3%A9": 1,
    }
    assert info.config.metadata["steward_partitions"] == "16"
    assert info.config.allow_direct
    assert info.config.storage == "file"
    assert (info.config.deny_delete, info.config.deny_purge) == (True, True)


async def test_positions_are_sequence_times_a_million_plus_index(
    log: JetStreamEventLog,
) -> None:
    """Event i of the commit at JetStream sequence s has position s * 1e6 + i."""
    first = await log.append("run.a", [note(0)], 0)
    second = await log.append("run.b", [note(1), note(2), note(3)], 0)
    assert POSITIONS_PER_COMMIT == 1_000_000
    assert (first.first_position, first.last_position) == (1_000_000, 1_000_000)
    assert [r.position for r in second.records] == [2_000_000, 2_000_001, 2_000_002]
    assert await log.head() == 2_000_002
    assert [r.position for r in await log.read_all(2_000_000)] == [
        2_000_001,
        2_000_002,
    ]


# -- reading -------------------------------------------------------------------


async def test_reading_one_stream_reads_only_its_messages(
    log: JetStreamEventLog,
) -> None:
    """read(stream) gets that stream's messages from the server, no others."""
    await log.append("run.wanted", [note(0)], 0)
    await asyncio.gather(
        *(log.append(f"run.other.{i}", [note(i)] * 3, 0) for i in range(200))
    )
    await log.append("run.wanted", [note(1), note(2)], 1)
    stats = log.connection.stats
    before = stats["in_msgs"]
    got = await log.read("run.wanted")
    delivered = stats["in_msgs"] - before
    assert [r.event for r in got] == [note(0), note(1), note(2)]
    assert delivered == 3  # two commits and the end-of-batch status


async def test_reads_survive_a_page_boundary(log: JetStreamEventLog) -> None:
    """Streams and logs longer than one batch come back whole and in order."""
    await asyncio.gather(*(log.append(f"many.{i}", [note(i)], 0) for i in range(1500)))
    for version in range(1, 1201):
        await log.append("long", [note(version)], version - 1)
    assert [r.version for r in await log.read("long")] == list(range(1, 1201))
    assert [r.version for r in await log.read("long", 1150)] == list(range(1150, 1201))
    everything = await log.read_all(0, 5_000)
    assert len(everything) == 2700
    positions = [r.position for r in everything]
    assert positions == sorted(set(positions))


async def test_a_log_made_before_partitions_keeps_its_layout(
    open_js: Opener, raw: Any
) -> None:
    """A stream without steward's partitions in its metadata (a log of an
    earlier steward) is one unsplit partition: commits stay under
    <prefix>.<stream>, and a worker holding partition 0 follows them all."""
    n = next(_names)
    await raw.jetstream().add_stream(
        name=f"OLD_{n}",
        subjects=[f"old.t{n}.>"],
        allow_direct=True,
        deny_delete=True,
        deny_purge=True,
    )
    log = await open_js(stream=f"OLD_{n}", prefix=f"old.t{n}")
    assert log.partitions == 0
    assert {log.partition_of("run.r1"), log.partition_of("run.r2")} == {0}
    await log.append("run.r1", [note(1)], 0)
    await log.append("run.r2", [note(2)], 0)
    info = await raw.jetstream().stream_info(log.stream, subjects_filter=">")
    assert set(info.state.subjects) == {f"old.t{n}.run.r1", f"old.t{n}.run.r2"}
    assert [r.stream for r in await log.read_all(partition=0)] == ["run.r1", "run.r2"]
    assert await log.streams("run.") == ["run.r1", "run.r2"]
    followed = log.subscribe(0, partitions={0})
    assert (await anext(followed)).stream == "run.r1"
    await followed.aclose()


async def test_a_partition_is_read_and_followed_alone(open_js: Opener) -> None:
    """A worker reads and follows the partitions it holds, not the others'."""
    log = await open_js()
    names = [f"run.p{i}" for i in range(40)]
    for name in names:
        await log.append(name, [note(1)], 0)
    mine = {log.partition_of("run.p0"), log.partition_of("run.p1")}
    expected = [n for n in names if log.partition_of(n) in mine]
    assert len(expected) < len(names)
    read: list[str] = []
    for p in sorted(mine):
        read += [r.stream for r in await log.read_all(partition=p)]
    assert sorted(read) == sorted(expected)
    followed = log.subscribe(0, partitions=mine)
    seen = [(await anext(followed)).stream for _ in expected]
    await followed.aclose()
    assert seen == expected  # in the log's order
    assert await log.head(mine) == max(
        r.position for r in await log.read_all() if r.stream in expected
    )
    assert await log.head(frozenset()) == 0


async def test_an_undecodable_message_names_its_stream_and_position(
    log: JetStreamEventLog, raw: Any
) -> None:
    """Bytes that are not a steward commit raise LogReadError saying where."""
    await log.append("run.r1", [note(1)], 0)
    await raw.jetstream().publish(log.subject("run.r1"), b"\xc1 not msgpack")
    with pytest.raises(LogReadError, match=r"commit to run\.r1 at position 2000000"):
        await log.read("run.r1")
    with pytest.raises(LogReadError, match="not a steward commit"):
        await log.read_all()


async def test_old_event_shapes_are_upcast_on_read(
    log: JetStreamEventLog, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored event of a retired type is read, followed and paged through its
    upcaster, and an unreadable one beside it is named."""
    monkeypatch.setitem(
        events.UPCASTERS,
        "NoteTaken",
        lambda old: {"type": "NoteRecorded", "category": "old", "content": old["text"]},
    )
    legacy = {"type": "NoteTaken", "text": "legacy"}
    stored = [1, 2, 0.0, None, None, "c0ffee", [note(1), legacy]]
    await raw.jetstream().publish(log.subject("run.r1"), msgspec.msgpack.encode(stored))
    old = run_events.NoteRecorded(category="old", content="legacy")
    assert [r.event for r in await log.read("run.r1")] == [note(1), old]
    assert [r.event for r in await log.read_all(POSITIONS_PER_COMMIT, 1)] == [old]
    followed = log.subscribe()
    assert [(await anext(followed)).event for _ in range(2)] == [note(1), old]
    await followed.aclose()

    stored = [3, 1, 0.0, None, None, "c0ffee", [{"type": "Nope"}]]
    await raw.jetstream().publish(log.subject("run.r1"), msgspec.msgpack.encode(stored))
    with pytest.raises(LogReadError, match=r"event run\.r1/3 at position 2000000: "):
        await log.read("run.r1")


# -- writing -------------------------------------------------------------------


async def test_a_republished_commit_is_stored_once(
    log: JetStreamEventLog, raw: Any
) -> None:
    """The same commit published again (same Nats-Msg-Id) is deduplicated."""
    commit = await log.append("run.r1", [note(1)], 0)
    stored = await raw.jetstream().get_msg(log.stream, seq=1, direct=True)
    assert stored.headers["Nats-Msg-Id"] == "run.r1/1"
    assert stored.headers["Nats-Expected-Last-Subject-Sequence"] == "0"
    again = await raw.jetstream().publish(
        log.subject("run.r1"), stored.data, headers={"Nats-Msg-Id": "run.r1/1"}
    )
    assert (again.seq, again.duplicate) == (1, True)
    assert await log.read("run.r1") == list(commit.records)
    assert await log.head() == commit.last_position


async def test_an_append_whose_acknowledgement_is_lost_is_stored_once(
    open_js: Opener,
) -> None:
    """A commit stored but not acknowledged is published again and found: once."""
    log = await open_js(request_timeout=0.2)
    deliver = log.connection.inbox_deliver
    dropped: list[bytes] = []

    def lose_first_ack(msg: Any) -> None:
        if not dropped and msg.data.startswith(b'{"stream"'):
            dropped.append(msg.data)
            return
        deliver(msg)

    log.connection.inbox_deliver = lose_first_ack
    commit = await log.append("run.r1", [note(1), note(2)], 0)
    assert dropped, "no acknowledgement was lost; the test proves nothing"
    assert (commit.first_version, commit.last_version) == (1, 2)
    assert commit.first_position == 1 * POSITIONS_PER_COMMIT
    assert [r.event for r in await log.read("run.r1")] == [note(1), note(2)]
    assert await log.head() == commit.last_position


async def test_of_two_processes_racing_for_a_version_exactly_one_wins(
    open_js: Opener,
) -> None:
    """Handles (as separate processes) appending at one version: one commit wins."""
    first, second = await open_js(), await open_js()
    version = 0
    for round_ in range(20):
        results = await asyncio.gather(
            first.append("run.contested", [note(2 * round_)], version),
            second.append("run.contested", [note(2 * round_ + 1)], version),
            return_exceptions=True,
        )
        won = [r for r in results if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1 and len(lost) == 1, results
        assert isinstance(lost[0], ConcurrencyError)
        assert (lost[0].expected, lost[0].actual) == (version, version + 1)
        version += 1
    got = await first.read("run.contested")
    assert [r.version for r in got] == list(range(1, 21))
    assert await second.version("run.contested") == 20


async def test_close_waits_for_appends_in_flight(open_js: Opener) -> None:
    """close lets pipelined appends finish; each is stored."""
    log = await open_js()
    *commits, _ = await asyncio.gather(
        *(log.append(f"run.{i}", [note(i)], 0) for i in range(100)), log.close()
    )
    assert all(not isinstance(c, BaseException) for c in commits)
    reader = await open_js()
    assert len(await reader.read_all()) == 100


async def test_an_oversized_commit_is_refused_clearly(log: JetStreamEventLog) -> None:
    """A commit bigger than the server's max_payload raises LogWriteError."""
    huge = run_events.NoteRecorded(category="big", content="x" * 2_000_000)
    with pytest.raises(LogWriteError, match=r"could not publish the commit to run\.r1"):
        await log.append("run.r1", [huge], 0)
    assert await log.version("run.r1") == 0


# -- opening -------------------------------------------------------------------


async def test_open_log_opens_nats_urls(nats_server: NatsServer) -> None:
    """nats://host:port?stream=...&prefix=... opens a JetStreamEventLog on them."""
    n = next(_names)
    log = await open_log(
        f"{nats_server.url}?stream=URL_{n}&prefix=url.t{n}", union=KINDS.union
    )
    try:
        assert isinstance(log, JetStreamEventLog)
        assert (log.stream, log.prefix) == (f"URL_{n}", f"url.t{n}")
        await log.append("run.r1", [note(1)], 0)
        assert await log.version("run.r1") == 1
    finally:
        await log.close()


async def test_open_log_refuses_bad_nats_urls() -> None:
    """A NATS URL without a server or with an unknown option raises ConfigError."""
    with pytest.raises(ConfigError, match="names no server"):
        await open_log("nats://", union=KINDS.union)
    with pytest.raises(ConfigError, match=r"unknown option 'colour'; use stream"):
        await open_log("nats://127.0.0.1:4222?colour=blue", union=KINDS.union)
    with pytest.raises(ConfigError, match="replicas must be a number"):
        await open_log("nats://127.0.0.1:4222?replicas=three", union=KINDS.union)


async def test_an_unreachable_server_is_reported() -> None:
    """Opening a log where no server listens raises LogWriteError naming it."""
    with pytest.raises(LogWriteError, match=r"cannot connect to NATS at nats://127"):
        await JetStreamEventLog.open(
            "nats://127.0.0.1:1",
            connect_timeout=0.5,
            reconnect_wait=0.01,
            union=KINDS.union,
        )


async def test_a_stream_with_other_subjects_is_refused(
    nats_server: NatsServer, raw: Any
) -> None:
    """A same-named stream capturing other subjects is refused, saying how to fix it."""
    n = next(_names)
    await raw.jetstream().add_stream(
        name=f"FOREIGN_{n}", subjects=[f"foreign{n}.>"], allow_direct=True
    )
    with pytest.raises(LogWriteError, match=r"captures \['foreign\d+\.>'\], not"):
        await JetStreamEventLog.open(
            nats_server.url,
            stream=f"FOREIGN_{n}",
            prefix=f"steward{n}",
            union=KINDS.union,
        )
    with pytest.raises(LogWriteError, match="there is no JetStream stream MISSING"):
        await JetStreamEventLog.open(
            nats_server.url,
            stream=f"MISSING_{n}",
            prefix=f"m{n}",
            create=False,
            union=KINDS.union,
        )


# -- a server restart ----------------------------------------------------------


@pytest.mark.slow
async def test_a_server_restart_loses_nothing(tmp_path: Path) -> None:
    """Kill the server mid-run and start it again: appends resume, none is lost.

    Writers keep appending through the outage (their commits wait, are
    published again, and are recognised when they had landed), and a
    subscription started before it sees every event, in the log's order.
    """
    server = NatsServer(tmp_path / "nats")
    server.start()
    opened: list[JetStreamEventLog] = []
    try:

        async def connect() -> JetStreamEventLog:
            log = await JetStreamEventLog.open(
                server.url,
                stream="RESTART",
                prefix="restart",
                request_timeout=0.5,
                heartbeat=0.5,
                reconnect_wait=0.05,
                reconnect_max_wait=0.5,
                union=KINDS.union,
            )
            opened.append(log)
            return log

        writer_log, reader_log = await connect(), await connect()
        writers, commits = 10, 30
        total = writers * commits
        live = reader_log.subscribe()
        seen: list[Recorded] = []
        halfway = asyncio.Event()

        async def follow() -> None:
            async for record in live:
                seen.append(record)
                if len(seen) == total:
                    return

        async def write(w: int) -> None:
            for version in range(commits):
                await writer_log.append(f"run.{w}", [note(version)], version)
                if w == 0 and version == commits // 2:
                    halfway.set()

        following = asyncio.create_task(follow())
        writing = asyncio.gather(*(write(w) for w in range(writers)))
        await halfway.wait()
        await asyncio.to_thread(server.restart)
        async with asyncio.timeout(60):
            await writing
            await following
        await live.aclose()

        for w in range(writers):
            got = await reader_log.read(f"run.{w}")
            assert [r.version for r in got] == list(range(1, commits + 1))
            assert [r.event for r in got] == [note(v) for v in range(commits)]
        everything = await reader_log.read_all(0, 10_000)
        assert len(everything) == total
        assert seen == everything
    finally:
        for log in opened:
            await log.close()
        server.stop()
