"""Workers of one JetStream log split it by partitions: each holds its share
of the actors (in memory too), and work goes on while workers join and
leave. Each worker here has its own connection, as a process would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from nats_server import NatsServer
from support import act

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.actors.session import events as session_events
from steward.bus import JetStreamEventLog
from steward.bus.jetstream.checkpoints import Checkpoints
from steward.bus.jetstream.inputs import Inputs
from steward.bus.jetstream.members import Membership, until_shared
from steward.bus.jetstream.reads import RemoteReads, answer_reads
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.errors import LogReadError, StewardError
from steward.host import Host
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

SETTINGS = run_events.RunSettings(
    tools=ToolRegistry.with_builtins().specs(), planning_gate=False
)
LEASE = 5.0  # heartbeats of four workers in one busy process may lag


async def _open(server: NatsServer, name: str) -> JetStreamEventLog:
    return await JetStreamEventLog.open(
        server.url, stream=name, prefix=name.lower(), union=KINDS.union
    )


FINISH = [act(type="finish", output="done")]


@asynccontextmanager
async def _worker(
    server: NatsServer, name: str, n: int, replies: list[str] = FINISH
) -> AsyncIterator[Host]:
    log = await _open(server, name)
    worker = f"w{n}"
    host = Host(
        log,
        provider=ScriptedProvider(replies, per_run=True),
        tools=ToolRegistry.with_builtins(),
        worker_id=worker,
        llm_concurrency=16,
        membership=Membership(log, worker, lease=LEASE),
        inputs=Inputs(log),
        checkpoints=Checkpoints(log),
        kinds=KINDS,
    )
    await host.start()
    try:
        yield host
    finally:
        await host.stop()
        await log.close()


async def _start(log: JetStreamEventLog, runs: range) -> None:
    starter = Host(log, kinds=KINDS)
    for chunk in range(runs.start, runs.stop, 100):
        await asyncio.gather(
            *(
                starter.submit(
                    run_stream(f"r{n}"),
                    run_events.RunCreated(
                        run_id=f"r{n}", input_text="go", settings=SETTINGS
                    ),
                )
                for n in range(chunk, min(chunk + 100, runs.stop))
            )
        )


async def _completed(log: JetStreamEventLog, runs: int, timeout: float) -> int:
    """How many runs completed once ``runs`` have ended (or ``timeout``
    seconds passed)."""
    ended: dict[str, bool] = {}

    async def watch() -> None:
        async for rec in log.subscribe():
            if isinstance(rec.event, run_events.RunCompleted | run_events.RunFailed):
                ended[rec.stream] = isinstance(rec.event, run_events.RunCompleted)
                if len(ended) == runs:
                    return

    try:
        await asyncio.wait_for(watch(), timeout)
    except TimeoutError:
        pass
    return sum(ended.values())


async def test_four_workers_each_hold_their_share_of_2000_actors(
    nats_server: NatsServer,
) -> None:
    name = "SHARES_MEMORY"
    log = await _open(nats_server, name)
    try:
        async with (
            _worker(nats_server, name, 0) as a,
            _worker(nats_server, name, 1) as b,
            _worker(nats_server, name, 2) as c,
            _worker(nats_server, name, 3) as d,
        ):
            hosts = [a, b, c, d]
            for _ in range(100):  # the four have found each other
                held = [len(h.dispatcher.held or ()) for h in hosts]
                if sorted(held) == [4, 4, 4, 4]:
                    break
                await asyncio.sleep(LEASE / 4)
            assert sorted(held) == [4, 4, 4, 4]
            await _start(log, range(2000))
            assert await _completed(log, 2000, timeout=240) == 2000
            for host in hosts:
                cached, known = host.states.sizes()
                # a share of about 500 actors each (partitions hold streams
                # by the hash of their names), never the whole log
                assert 250 <= known <= 800, known
                assert cached <= known
    finally:
        await log.close()


async def test_work_goes_on_while_workers_join_and_leave(
    nats_server: NatsServer,
) -> None:
    """A worker joins and one leaves while 200 runs are in flight: every run
    completes, once, and replays."""
    name = "SHARES_CHURN"
    log = await _open(nats_server, name)
    try:
        async with _worker(nats_server, name, 0), _worker(nats_server, name, 1):
            await _start(log, range(100))
            async with _worker(nats_server, name, 2):
                await _start(log, range(100, 200))
                await asyncio.sleep(LEASE)  # it takes its share, mid-way
            # w2 has left (its leases deleted): w0 and w1 take its partitions
            assert await _completed(log, 200, timeout=120) == 200
        for stream in await log.streams("run."):
            records = await log.read(stream)
            assert [r.version for r in records] == list(range(1, len(records) + 1))
            answers = [
                r.event.request_id
                for r in records
                if isinstance(r.event, events.LlmResponded)
            ]
            assert len(answers) == len(set(answers)) == 1, stream
            assert replay.verify(records, kinds=KINDS) is None, stream
        partitions = {log.partition_of(s) for s in await log.streams("run.")}
        assert len(partitions) == 16  # the runs were spread over all of them
    finally:
        await log.close()


async def test_a_workers_tools_read_the_projections_through_serve(
    nats_server: NatsServer,
) -> None:
    """`memory.search` on a worker asks `serve`, which keeps the projections;
    with no serve it fails in one line the tool records. A message a worker
    takes asks `serve` for its sender's other chats, and is taken without
    them when no serve answers."""
    log = await _open(nats_server, "SHARES_READS")
    asked: list[tuple[str, str, int]] = []
    other = session_events.Elsewhere(session_id="web:b", role="message", text="tea?")

    class Projections:
        async def search_memory(self, session_id: str, query: str, limit: int) -> Any:
            asked.append((session_id, query, limit))
            if query == "boom":
                raise ValueError("no such column")
            return [("message", f"{query} in {session_id}", 1.5)]

        async def elsewhere(self, sender: str, session_id: str, limit: int) -> Any:
            asked.append((sender, session_id, limit))
            return (other,)

    reads = RemoteReads(log, timeout=5)
    try:
        with pytest.raises(StewardError, match="none is running on this log"):
            await reads.search_memory("s1", "tea", 3)
        assert await reads.elsewhere("ann", "web:a", 5) == ()
        stop = await answer_reads(log, Projections())
        assert await reads.search_memory("s1", "tea", 3) == [
            ("message", "tea in s1", 1.5)
        ]
        with pytest.raises(StewardError, match="failed on `steward serve`: no such"):
            await reads.search_memory("s1", "boom", 3)
        assert await reads.elsewhere("ann", "web:a", 5) == (other,)
        assert asked == [("s1", "tea", 3), ("s1", "boom", 3), ("ann", "web:a", 5)]
        await stop()
    finally:
        await log.close()


async def test_a_share_that_cannot_be_read_is_taken_again_later(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker taking over a partition whose records it cannot read (the
    connection drops) lets it go and takes it at a later heartbeat; nothing
    it holds stops meanwhile."""
    name = "SHARES_RETRY"
    log = await _open(nats_server, name)
    try:
        async with _worker(nats_server, name, 0) as survivor:
            async with _worker(nats_server, name, 1):
                await until_shared(log, 2, timeout=30)
            shared_log = survivor.dispatcher._shared
            read_all = shared_log.read_all
            failures: list[int | None] = []

            async def flaky(*args: Any, **kw: Any) -> Any:
                if not failures:
                    failures.append(kw.get("partition"))
                    raise LogReadError("the connection dropped")
                return await read_all(*args, **kw)

            monkeypatch.setattr(shared_log, "read_all", flaky)
            await _start(log, range(64))
            assert await _completed(log, 64, timeout=60) == 64
            assert failures and survivor.dispatcher.held == frozenset(range(16))
    finally:
        await log.close()


async def test_an_input_for_another_share_is_decided_by_its_holder(
    nats_server: NatsServer,
) -> None:
    """An input a worker has for a stream of another worker's share (a
    result to a parent, a child to create) is decided by that worker; and
    the sender's drain does not wait for it."""
    name = "SHARES_DRAIN"
    log = await _open(nats_server, name)
    try:
        async with (
            _worker(nats_server, name, 0) as a,
            _worker(nats_server, name, 1) as b,
        ):
            await until_shared(log, 2, timeout=30)
            held = a.dispatcher.held or frozenset()
            other = next(
                f"r{n}" for n in range(100) if log.partition_of(f"run.r{n}") not in held
            )
            created = run_events.RunCreated(
                run_id=other, input_text="go", settings=SETTINGS
            )
            assert await a.submit(run_stream(other), created) is not None
            # decided by the holder, on the state it keeps: not read here
            assert b.states.cached(run_stream(other)) is not None
            assert a.states.cached(run_stream(other)) is None
            assert await a.drain(timeout=10)
    finally:
        await log.close()


async def test_an_input_nobody_holds_is_decided_by_its_sender(
    nats_server: NatsServer,
) -> None:
    """With no holder answering (a partition between holders) the sender
    decides the input itself."""
    log = await _open(nats_server, "SHARES_NOBODY")
    try:
        created = run_events.RunCreated(run_id="n1", input_text="go", settings=SETTINGS)
        assert (
            await Inputs(log, timeout=5).send(run_stream("n1"), created, None) is False
        )
        sender = Host(log, membership=None, inputs=Inputs(log), kinds=KINDS)
        sender.mailboxes.forward = Inputs(log, timeout=5).send
        sender.states.follows = lambda stream: False
        commit = await sender.submit(run_stream("n1"), created)
        assert commit is not None and commit.last_version >= 1
        assert (await log.read(run_stream("n1")))[0].event == created
    finally:
        await log.close()


async def test_a_takeover_reads_from_what_the_last_holder_saved(
    nats_server: NatsServer,
) -> None:
    """A worker that lets its partitions go saves what their streams wait
    for; the next holder starts from that, not from each partition's first
    record: it reads none of the runs that ended before, and carries out
    what the sleeping ones wait for (each sleep wakes once)."""
    name = "SHARES_SAVED"
    log = await _open(nats_server, name)
    sleep = [act(type="sleep", delaySeconds=4), act(type="finish", output="done")]
    try:
        async with _worker(nats_server, name, 0):
            await _start(log, range(300))
            assert await _completed(log, 300, timeout=120) == 300
        async with _worker(nats_server, name, 1, sleep):
            await _start(log, range(300, 320))
            slept: set[str] = set()
            async for rec in log.subscribe():
                if isinstance(rec.event, run_events.RunSlept):
                    slept.add(rec.stream)
                    if len(slept) == 20:
                        break
        # left while 20 runs sleep: the next worker wakes them
        async with _worker(nats_server, name, 2, sleep) as taker:
            assert await _completed(log, 320, timeout=60) == 320
            _, known = taker.states.sizes()
            assert known <= 40, known  # the sleepers, not the 300 ended runs
        for n in range(300, 320):
            records = await log.read(run_stream(f"r{n}"))
            wakes = [r for r in records if isinstance(r.event, events.WakeDue)]
            assert len(wakes) == 1, n
            assert replay.verify(records, kinds=KINDS) is None
    finally:
        await log.close()


async def test_wants_saved_for_a_stream_deleted_since_are_not_loaded(
    nats_server: NatsServer,
) -> None:
    """What was saved for a partition is loaded back by the next holder, but
    not once the stream was deleted and made again under its name: its
    positions name another log's records."""
    name = "SHARES_REMADE"
    log = await _open(nats_server, name)
    want = ("run.r1", "timer-1", 3, "timer")
    try:
        assert await Checkpoints(log).save(5, 4_000_000, [want])
        assert await Checkpoints(log).load(5) == (4_000_000, [want])
        await log.connection.jetstream().delete_stream(name)
    finally:
        await log.close()
    log = await _open(nats_server, name)
    try:
        assert await Checkpoints(log).load(5) is None
    finally:
        await log.close()
