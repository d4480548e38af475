"""Workflow runs on a JetStream log, carried by two `steward worker`s: their
phases are spread over the workers like any run, each phase's run completes
once, each transition is taken once, and every stream verifies."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from nats_server import NatsServer
from support import steward_process, stop_all

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.decider import workflow_stream
from steward.actors.workflow.definition import created
from steward.bus import JetStreamEventLog, open_log
from steward.bus.jetstream.members import until_shared
from steward.config import load_settings
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

WORKFLOWS = 12
CHAIN = ("plan", "build", "check")


def _definition() -> workflow_events.WorkflowDef:
    nodes = tuple(
        workflow_events.NodeDef(key=k, provider="default", prompt=f"{k} it")
        for k in CHAIN
    )
    edges = tuple(
        workflow_events.EdgeDef(source=a, target=b, priority=1, auto=True)
        for a, b in zip(CHAIN, CHAIN[1:], strict=False)
    )
    return workflow_events.WorkflowDef(key="chain", version=1, nodes=nodes, edges=edges)


async def _ended(log: JetStreamEventLog) -> int:
    ends = 0
    for stream in await log.streams("workflow."):
        kinds = [type(r.event) for r in await log.read(stream)]
        ends += (
            workflow_events.WorkflowCompleted in kinds
            or workflow_events.WorkflowFailed in kinds
        )
    return ends


async def test_two_workers_share_the_phases_of_workflow_runs(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats")
    server.start()
    url = f"{server.url}?stream=FLOWS&prefix=flows.ev"
    finish = {
        "type": "finish",
        "output": "done",
        "metadata": {"routingDecision": "approved"},
    }
    replies = [{"json": finish, "delay": 0.05}]
    (tmp_path / "s.json").write_text(json.dumps({"per_run": True, "replies": replies}))
    workers = [
        steward_process(
            tmp_path,
            "--log",
            url,
            "--db",
            str(tmp_path / f"projections-{n}.db"),
            "--script",
            str(tmp_path / "s.json"),
            "worker",
            STEWARD_RUN_PLANNING_GATE="false",
            STEWARD_LOG_LEASE_SECONDS="1",
        )
        for n in range(2)
    ]
    log = await open_log(url, union=KINDS.union)
    assert isinstance(log, JetStreamEventLog)
    try:
        await until_shared(log, 2, timeout=30)
        listing = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "steward", "--log", url, "workers", "-o", "json"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        members = [json.loads(line) for line in listing.stdout.splitlines()]
        assert sorted(m["role"] for m in members) == ["worker", "worker"]
        held = sorted(p for m in members for p in m["partitions"])
        assert held == list(range(16))  # each partition held once
        assert all(m["share"] == 0.5 for m in members)
        settings = load_settings(None, env={"STEWARD_RUN_PLANNING_GATE": "false"})
        specs = ToolRegistry.with_builtins().specs()
        starter = Host(log, kinds=KINDS)
        for n in range(WORKFLOWS):
            first = created(_definition(), settings, f"wf{n}", {}, specs)
            assert await starter.submit(workflow_stream(f"wf{n}"), first) is not None
        for _ in range(600):
            if await _ended(log) == WORKFLOWS:
                break
            await asyncio.sleep(0.1)
        claimed_by: Counter[str] = Counter()
        for stream in await log.streams("workflow."):
            records = await log.read(stream)
            kinds = [type(r.event) for r in records]
            assert kinds[-1] is workflow_events.WorkflowCompleted, (stream, kinds)
            assert kinds.count(workflow_events.PhaseStarted) == len(CHAIN), stream
            assert kinds.count(workflow_events.TransitionTaken) == len(CHAIN) - 1, (
                stream
            )
            assert replay.verify(records, kinds=KINDS) is None, stream
        for stream in await log.streams("run."):
            records = await log.read(stream)
            kinds = [type(r.event) for r in records]
            assert kinds.count(run_events.RunCompleted) == 1, stream
            assert kinds.count(events.LlmResponded) == 1, stream
            assert replay.verify(records, kinds=KINDS) is None, stream
            for r in records:
                if isinstance(r.event, events.EffectClaimed):
                    claimed_by[r.event.worker] += 1
        assert len(await log.streams("run.")) == WORKFLOWS * len(CHAIN)
        assert len(claimed_by) == 2, claimed_by  # the phases were shared
    finally:
        errors = stop_all(workers)
        await log.close()
        server.stop()
    assert [w.returncode for w in workers] == [0, 0], errors
