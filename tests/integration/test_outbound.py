"""What a service is owed is never lost: replies reach a durable consumer
once, whatever process dies.

`serve` and two workers share a log on the three-node cluster of
``deploy/nats``; a service sends six chats on ``steward.inbound.web`` and
reads ``steward.outbound.web`` with the durable consumer of
docs/operations.md (its very code, run here). A host is SIGKILLed while
the six turns' model calls are in flight and kept down while their replies
are recorded; a seventh message sent meanwhile is answered by the hosts
still up. The service's consumer is stopped during the turns. When the
host and the consumer are back, the consumer has had each of the seven
replies once, and the outbound stream holds each once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats as nats_client
import pytest
from doc_pages import DOCS
from nats_cluster import cluster, open_log
from nats_server import NatsServer
from support import act, steward_process, stop_all

from steward import events
from steward.actors.run import events as run_events
from steward.actors.run.state import run_stream
from steward.actors.session import events as session_events
from steward.actors.session.state import session_stream
from steward.bus import JetStreamEventLog
from steward.bus.jetstream.inputs import Inputs
from steward.bus.jetstream.members import Membership, until_shared
from steward.bus.jetstream.outbound import Told
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.egress import Egress
from steward.host import Host
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

CHATS = 6
SETTINGS = run_events.RunSettings(
    tools=ToolRegistry.with_builtins().specs(), planning_gate=False
)
STREAM = "OWED"
HOSTS = {
    "STEWARD_LOG_CLAIM_SECONDS": "5",
    "STEWARD_LOG_LEASE_SECONDS": "3",
    "STEWARD_MODELS_DEFAULT_TIMEOUT": "4",
    "STEWARD_MODELS_DEFAULT_MAX_RETRIES": "0",
    "STEWARD_LLM_MAX_CONCURRENCY": "8",
    "STEWARD_TOOLS_TIMEOUT": "4",
}
"""Short leases and claims, so a dead host's work is taken over in seconds
(a claim outlives the longest call)."""


def _consumer_code() -> dict[str, Any]:
    """The durable consumer docs/operations.md shows a service, defined."""
    page = (DOCS / "operations.md").read_text()
    section = page[page.index("### Receiving every reply, once") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None, "docs/operations.md shows no consumer"
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "docs/operations.md", "exec"), namespace)
    return namespace


def _host(tmp: Path, command: str, n: int) -> subprocess.Popen[bytes]:
    return steward_process(
        tmp,
        "--db",
        str(tmp / f"projections-{n}.db"),
        "--script",
        "script.json",
        command,
        **HOSTS,
    )


async def _sessions(log: JetStreamEventLog, chats: int) -> list[list[Any]]:
    return [await log.read(session_stream(f"web:u{n}")) for n in range(chats)]


async def _until(check: Any, what: str, timeout: float = 90.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:g}s: {what}") from None


@pytest.mark.parametrize("killed", ["serve", "worker"])
async def test_every_reply_reaches_a_durable_consumer_once(
    tmp_path: Path, killed: str
) -> None:
    receive = _consumer_code()["receive"]
    (tmp_path / "script.json").write_text(
        json.dumps(
            {
                "per_run": True,
                "replies": [
                    {"text": act(type="send_message", message="hi"), "delay": 2.5}
                ],
            }
        )
    )
    with cluster(tmp_path) as nodes:
        where = ",".join(n.url.removeprefix("nats://") for n in nodes.values())
        url = f"nats://{where}?stream={STREAM}&prefix=owed.ev&replicas=3"
        (tmp_path / "steward.toml").write_text(
            f'[log]\nurl = "{url}"\n\n[channels]\nweb = "default"\n\n'
            "[session]\ndebounce_ms = 10\n"
        )
        log = await open_log(url)
        service = await nats_client.connect([n.url for n in nodes.values()])
        first = nodes["n1"].url
        hosts = [_host(tmp_path, "serve", 0)] + [
            _host(tmp_path, "worker", n) for n in (1, 2)
        ]
        heard: list[tuple[dict[str, Any], str]] = []

        async def handle(message: dict[str, Any], msg_id: str) -> None:
            heard.append((message, msg_id))

        async def send(chat: int) -> None:
            body = {"version": 1, "text": "hello", "user_id": f"u{chat}"}
            reply = await service.request(
                "steward.inbound.web", json.dumps(body).encode(), timeout=30
            )
            assert json.loads(reply.data)["ok"] is True, reply.data

        try:
            await until_shared(log, 3, timeout=90)
            js = service.jetstream()
            # the service's consumer is made, then stopped during the turns
            consumer = asyncio.create_task(receive(first, handle))

            async def made() -> bool:
                try:
                    await js.consumer_info("STEWARD_OUTBOUND", "my-service")
                    return True
                except nats_client.js.errors.NotFoundError:
                    return False

            await _until(made, "the durable consumer")
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)

            await asyncio.gather(*(send(n) for n in range(CHATS)))

            async def in_flight() -> bool:
                turns = [await log.read(f"run.web:u{n}-t1") for n in range(CHATS)]
                return all(
                    any(isinstance(r.event, events.LlmRequested) for r in t)
                    for t in turns
                )

            await _until(in_flight, "six model calls in flight")
            victim = 0 if killed == "serve" else 1
            hosts[victim].kill()
            hosts[victim].communicate()
            await send(CHATS)  # answered by the hosts still up

            async def replied() -> bool:
                sessions = await _sessions(log, CHATS + 1)
                return all(
                    any(isinstance(r.event, session_events.ReplySent) for r in s)
                    for s in sessions
                )

            await _until(replied, "every reply recorded")
            hosts[victim] = _host(
                tmp_path, "serve" if killed == "serve" else "worker", victim
            )
            pid = hosts[victim].pid
            watcher = Membership(log, "-")

            async def back() -> bool:  # not the dead one's lapsing entry
                return any(m.pid == pid for m in await watcher.members())

            await _until(back, "the host started again joining")
            await until_shared(log, 3, timeout=90)

            consumer = asyncio.create_task(receive(first, handle))

            async def all_heard() -> bool:  # and acknowledged
                if len(heard) < CHATS + 1:
                    return False
                info = await js.consumer_info("STEWARD_OUTBOUND", "my-service")
                return info.num_ack_pending == 0

            await _until(all_heard, "every reply heard")
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)

            sent = {
                r.id: r.stream
                for s in await _sessions(log, CHATS + 1)
                for r in s
                if isinstance(r.event, session_events.ReplySent)
            }
            assert sorted(msg_id for _, msg_id in heard) == sorted(sent)
            assert sorted(m["session_id"] for m, _ in heard) == [
                f"web:u{n}" for n in range(CHATS + 1)
            ]
            assert all(m["type"] == "reply" and m["text"] == "hi" for m, _ in heard)
            stored = await js.stream_info("STEWARD_OUTBOUND")
            assert stored.state.messages == CHATS + 1
            info = await js.consumer_info("STEWARD_OUTBOUND", "my-service")
            assert info.num_pending == 0 and info.num_ack_pending == 0
            assert info.delivered.consumer_seq == CHATS + 1
        finally:
            errors = stop_all(hosts)
            print(*errors, sep="\n---\n")  # shown when the test fails
            await service.close()
            await log.close()
    assert [h.returncode for h in hosts] == [0, 0, 0], errors


async def test_a_partition_taken_publishes_what_its_last_holder_did_not(
    nats: NatsServer,
) -> None:
    """Runs on channel ``web`` end on a worker with no egress (a host that
    died before publishing): the next holder of their partitions stores
    what they told, once each, with their events' ids; when it lets them
    go, how far each partition told is saved for the next."""
    log = await JetStreamEventLog.open(
        nats.url, stream="TAKEN", prefix="taken", union=KINDS.union
    )
    raw = await nats_client.connect(nats.url)
    js = raw.jetstream()
    runs = [f"r{n}" for n in range(3)]
    try:
        assert await Told(log).origin() == 0  # egress began with the log
        async with _worker(log, "w0", egress=False) as first:
            starter = Host(log, kinds=KINDS)
            for run_id in runs:
                created = run_events.RunCreated(
                    run_id=run_id, input_text="go", settings=SETTINGS, channel_id="web"
                )
                await starter.submit(run_stream(run_id), created)
            assert await first.settle(timeout=30)
        ended = {
            r.id: r
            for run_id in runs
            for r in await log.read(run_stream(run_id))
            if isinstance(r.event, run_events.RunCompleted)
        }
        assert len(ended) == len(runs)
        with pytest.raises(nats_client.js.errors.NotFoundError):
            await js.stream_info("STEWARD_OUTBOUND")  # nobody published them

        async with _worker(log, "w1", egress=True):
            sub = await js.pull_subscribe("steward.outbound.web", durable="svc")
            got: list[Any] = []
            async with asyncio.timeout(30):
                while len(got) < len(runs):
                    try:
                        got += await sub.fetch(len(runs), timeout=1)
                    except nats_client.errors.TimeoutError:
                        continue
            for msg in got:
                await msg.ack()
        assert sorted(m.headers["Nats-Msg-Id"] for m in got) == sorted(ended)
        assert sorted(json.loads(m.data)["run_id"] for m in got) == runs
        assert {json.loads(m.data)["type"] for m in got} == {"completed"}
        assert (await js.stream_info("STEWARD_OUTBOUND")).state.messages == len(runs)
        told = Told(log)
        for rec in ended.values():
            assert await told.load(log.partition_of(rec.stream)) >= rec.position
    finally:
        await raw.close()
        await log.close()


@contextlib.asynccontextmanager
async def _worker(
    log: JetStreamEventLog, worker: str, *, egress: bool
) -> AsyncIterator[Host]:
    """A worker host on ``log`` holding every partition, with an egress
    when ``egress``; it lets them go on leaving."""
    host = Host(
        log,
        provider=ScriptedProvider([act(type="finish", output="done")], per_run=True),
        tools=ToolRegistry.with_builtins(),
        worker_id=worker,
        membership=Membership(log, worker, lease=5.0),
        inputs=Inputs(log),
        kinds=KINDS,
    )
    out = Egress(log.connection, host, told=Told(log)) if egress else None
    if out is not None:
        await out.start()
    await host.start()
    try:
        yield host
    finally:
        if out is not None:
            await out.close()
        await host.stop()


async def test_a_partitions_head_as_its_leader_has_it(nats: NatsServer) -> None:
    """What a catch-up reads up to: the partition's last position, from the
    stream's leader (0 for a partition with nothing)."""
    log = await JetStreamEventLog.open(
        nats.url, stream="HEADS", prefix="heads", union=KINDS.union
    )
    try:
        note = run_events.NoteRecorded(category="c", content="x")
        await log.append("run.a", [note, note], 0)
        await log.append("run.a", [note], 2)
        p = log.partition_of("run.a")
        assert await log.leader_head(p) == await log.head(frozenset({p})) > 0
        empty = next(q for q in range(log.partitions) if q != p)
        assert await log.leader_head(empty) == 0
    finally:
        await log.close()
