"""Three `steward worker`s share a JetStream log; one worker is SIGKILLed, or
the NATS server restarted, mid-way.

Every run completes, versions are contiguous, every model and tool request has
exactly one recorded answer, every sleep wakes exactly once, and replay
verifies each run.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from nats_server import NatsServer
from support import create_runs, stop_all, worker_process

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog, open_log
from steward.bus.jetstream.members import until_shared
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

RUNS = 200
SAMPLE = 16
"""The runs looked at to see that work is under way."""


def _script(path: Path) -> None:
    def reply(**command: object) -> dict[str, object]:
        return {"json": command, "delay": 0.15}  # runs left to kill mid-way

    replies = [
        reply(type="note", category="requirements", content="r"),
        reply(type="note", category="plan", content="p"),
        reply(
            type="tool_call", name="files.write", args={"path": "o.txt", "content": "x"}
        ),
        reply(type="set_output", output="half"),
        reply(type="sleep", delaySeconds=0.3),
        reply(type="finish", output="done"),
    ]
    path.write_text(json.dumps({"per_run": True, "replies": replies}))


async def _statuses(log: JetStreamEventLog, runs: int | None = None) -> Counter[str]:
    """How many runs are in each status: of all, or of the first ``runs``."""
    counts: Counter[str] = Counter()
    streams = [run_stream(f"w{n}") for n in range(runs)] if runs else None
    for stream in streams or await log.streams("run."):
        state = run_state.fold(r.event for r in await log.read(stream))
        counts[state.status] += 1
    return counts


@pytest.mark.parametrize("victim", ["worker", "server"])
async def test_workers_share_runs_and_survive_a_sigkill(
    tmp_path: Path, victim: str
) -> None:
    """SIGKILL one worker, or restart the NATS server, mid-way: nothing lost."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    url = f"{server.url}?stream=WORK&prefix=work.ev"
    _script(tmp_path / "script.json")
    workers = [worker_process(tmp_path, url, n) for n in range(3)]
    log = await open_log(url, union=KINDS.union)
    assert isinstance(log, JetStreamEventLog)
    try:
        await until_shared(log, 3, timeout=30)
        await create_runs(log, [f"w{n}" for n in range(RUNS)])
        # until work is visibly under way (some of the first runs done: a
        # sample, so that looking takes no time the work would go on in)
        for _ in range(600):
            await asyncio.sleep(0.05)
            if (await _statuses(log, SAMPLE))["completed"] >= 2:
                break
        killed_at = await log.head()
        if victim == "worker":
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait(10)
        else:
            server.restart(kill=True)

        for _ in range(1200):
            await asyncio.sleep(0.1)
            if (await _statuses(log))["completed"] == RUNS:
                break
        statuses = await _statuses(log)
        assert statuses["completed"] == RUNS, statuses
        assert await log.head() > killed_at, "killed too late to test anything"

        claimed_by: Counter[str] = Counter()
        for stream in await log.streams("run."):
            records = await log.read(stream)
            assert [r.version for r in records] == list(range(1, len(records) + 1))
            answers = Counter(
                r.event.request_id
                for r in records
                if isinstance(r.event, events.LlmResponded | events.ToolResulted)
            )
            requests = [
                r.event.request_id
                for r in records
                if isinstance(r.event, events.LlmRequested | events.ToolRequested)
            ]
            assert len(requests) == len(set(requests)), stream
            wakes = [
                r.event.timer_id for r in records if isinstance(r.event, events.WakeDue)
            ]
            sleeps = [
                r.event.timer_id
                for r in records
                if isinstance(r.event, run_events.RunSlept)
            ]
            assert wakes == sleeps, stream  # every timer fired exactly once
            assert set(answers) == set(requests), stream
            assert all(n == 1 for n in answers.values()), (stream, answers)
            for r in records:
                if isinstance(r.event, events.EffectClaimed):
                    claimed_by[r.event.worker] += 1
            assert replay.verify(records, kinds=KINDS) is None, stream
        assert len(claimed_by) >= 2, claimed_by  # the work was shared
    finally:
        errors = stop_all(workers)
        await log.close()
        server.stop()
    survivors = workers[1:] if victim == "worker" else workers
    assert [w.returncode for w in survivors] == [0] * len(survivors), errors
