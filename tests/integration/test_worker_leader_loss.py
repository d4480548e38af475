"""Workers when JetStream loses its leaders, or stops answering.

Two `steward worker`s share a log on the three-node cluster of
``deploy/nats``, and the node leading the cluster's metadata, the log's
stream and the workers' key-value bucket is SIGKILLed while runs are in
flight: every run completes, each model and tool call is answered once,
each sleep wakes once, versions are contiguous and every run replays; the
workers' membership recovers: every partition is held again, and `steward
workers` lists both. And a member whose heartbeat is stuck (its server
stopped) lets its partitions go before their leases lapse.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nats
import pytest
from nats_cluster import Node, cluster, open_log
from nats_server import NatsServer
from support import create_runs, stop_all, worker_process

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog
from steward.bus.jetstream.members import Membership, until_shared
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

RUNS = 60
STREAM = "LOSS"


def _script(path: Path) -> None:
    def reply(**command: object) -> dict[str, object]:
        return {"json": command, "delay": 0.15}  # runs left in flight at the kill

    replies = [
        reply(type="note", category="requirements", content="r"),
        reply(type="note", category="plan", content="p"),
        reply(
            type="tool_call", name="files.write", args={"path": "o.txt", "content": "x"}
        ),
        reply(type="sleep", delaySeconds=0.3),
        reply(type="finish", output="done"),
    ]
    path.write_text(json.dumps({"per_run": True, "replies": replies}))


async def _lead(raw: Any, stream: str, node: str) -> None:
    """Move the leadership of JetStream stream ``stream`` to ``node``."""
    js = raw.jetstream()
    for _ in range(20):
        info = await js.stream_info(stream)
        if info.cluster is not None and info.cluster.leader == node:
            return
        body = json.dumps({"placement": {"preferred": node}}).encode()
        await raw.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", body, timeout=5)
        await asyncio.sleep(0.5)
    raise AssertionError(f"{stream} is still led by {info.cluster}, not {node}")


async def _statuses(log: JetStreamEventLog) -> Counter[str]:
    counts: Counter[str] = Counter()
    for n in range(RUNS):
        records = await log.read(run_stream(f"l{n}"))
        counts[run_state.fold(r.event for r in records).status] += 1
    return counts


def _meta_leader(nodes: dict[str, Node]) -> str:
    for node in nodes.values():
        leader = node.meta_leader()
        if leader is not None:
            return leader
    raise AssertionError("no node says who leads the cluster")


async def test_workers_survive_the_loss_of_every_leader(tmp_path: Path) -> None:
    """SIGKILL the node leading the metadata, the log and the workers'
    bucket while runs are in flight: nothing is lost or done twice, and the
    two workers hold every partition again."""
    _script(tmp_path / "script.json")
    with cluster(tmp_path) as nodes:
        where = ",".join(n.url.removeprefix("nats://") for n in nodes.values())
        url = f"nats://{where}?stream={STREAM}&prefix=loss.ev&replicas=3"
        log = await open_log(url)
        raw = await nats.connect(
            [n.url for n in nodes.values()], max_reconnect_attempts=-1
        )
        workers = [worker_process(tmp_path, url, n) for n in range(2)]
        try:
            await until_shared(log, 2, timeout=60)
            await create_runs(log, [f"l{n}" for n in range(RUNS)])
            leader = await asyncio.to_thread(_meta_leader, nodes)
            await _lead(raw, STREAM, leader)
            await _lead(raw, f"KV_{STREAM}_WORKERS", leader)
            for _ in range(600):  # work under way, not done
                if (await _statuses(log))["completed"] >= 2:
                    break
                await asyncio.sleep(0.05)
            killed_at = await log.head()
            await asyncio.to_thread(nodes[leader].stop, kill=True)

            for _ in range(1200):
                await asyncio.sleep(0.1)
                if (await _statuses(log))["completed"] == RUNS:
                    break
            statuses = await _statuses(log)
            assert statuses["completed"] == RUNS, statuses
            assert await log.head() > killed_at, "killed too late to test anything"

            for n in range(RUNS):
                records = await log.read(run_stream(f"l{n}"))
                stream = records[0].stream
                assert [r.version for r in records] == list(range(1, len(records) + 1))
                requests = [
                    r.event.request_id
                    for r in records
                    if isinstance(r.event, events.LlmRequested | events.ToolRequested)
                ]
                answers = Counter(
                    r.event.request_id
                    for r in records
                    if isinstance(r.event, events.LlmResponded | events.ToolResulted)
                )
                assert len(requests) == len(set(requests)), stream
                assert set(answers) == set(requests), stream
                assert all(c == 1 for c in answers.values()), (stream, answers)
                wakes = [
                    r.event.timer_id
                    for r in records
                    if isinstance(r.event, events.WakeDue)
                ]
                sleeps = [
                    r.event.timer_id
                    for r in records
                    if isinstance(r.event, run_events.RunSlept)
                ]
                assert wakes == sleeps, stream
                assert replay.verify(records, kinds=KINDS) is None, stream

            await until_shared(log, 2, timeout=60)
            listed = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "steward",
                "--log",
                url,
                "workers",
                "-o",
                "json",
                cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await listed.communicate()
            assert listed.returncode == 0, err
            rows = [json.loads(line) for line in out.decode().splitlines()]
            assert len(rows) == 2, rows
            assert sorted(p for r in rows for p in r["partitions"]) == list(range(16))
        finally:
            errors = stop_all(workers)
            await log.close()
            await raw.close()
    assert [w.returncode for w in workers] == [0, 0], errors


async def test_a_member_whose_heartbeat_is_stuck_lets_go_within_its_lease(
    nats: NatsServer,
) -> None:
    """The server stops answering (SIGSTOP: the connection stays up, its
    requests go unanswered) while a member holds every partition: the member
    lets them go before a lease it last renewed could lapse, however long
    its stuck heartbeat waits; once the server answers again, it takes them
    back."""
    lease = 4.0
    log = await JetStreamEventLog.open(
        nats.url, stream="STUCK", prefix="stuck", union=KINDS.union
    )
    told: list[frozenset[int]] = []

    async def hold(held: frozenset[int]) -> None:
        told.append(held)

    membership = Membership(log, "w0", lease=lease)
    assert nats.process is not None
    try:
        await membership.join(hold)
        assert membership.held == frozenset(range(16))
        nats.process.send_signal(signal.SIGSTOP)
        try:
            async with asyncio.timeout(60):
                while membership.held:  # until it lets go
                    age = time.time() - membership.renewed
                    assert age < lease, f"holds leases renewed {age:.1f}s ago"
                    await asyncio.sleep(0.05)
        finally:
            nats.process.send_signal(signal.SIGCONT)
        assert told[-1] == frozenset()
        await until_shared(log, 1, timeout=60)
        assert membership.held == frozenset(range(16))
    finally:
        await membership.leave()
        await log.close()
