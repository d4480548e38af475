"""A workflow's cancel outlives the host that recorded it (on both logs).

A cancel is recorded, then its host dies before delivering it to the phase
in flight: the next host finds the delivery in the pending projection
(`WorkflowCancelled.phase_run_id`, from `WORKFLOW_REVISION` 2) and cancels
the phase, whose result then ends the workflow's phase.
"""

from __future__ import annotations

import asyncio
from typing import Any

from support import act

from steward import events
from steward.actors.run.events import LATEST_REVISION, RunSettings
from steward.actors.run.reactor import run_stream
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.decider import workflow_stream
from steward.actors.workflow.definition import created
from steward.actors.workflow.events import WORKFLOW_REVISION, NodeDef, WorkflowDef
from steward.clock import FakeClock
from steward.config import Settings
from steward.effects.llm import Reply, ScriptedProvider
from steward.host import Host
from steward.kinds import KINDS

TIMEOUT = 10.0


async def _until(log: Any, stream: str, test: Any) -> list[events.Recorded]:
    """The records of ``stream`` once ``test`` holds of them."""
    async with asyncio.timeout(TIMEOUT):
        while not test(records := await log.read(stream)):
            await asyncio.sleep(0.01)
    return records


def _types(records: list[events.Recorded]) -> list[str]:
    return [type(r.event).__name__ for r in records]


async def test_a_cancel_its_host_died_before_delivering_reaches_the_phase(
    make_host: Any, log: Any, clock: FakeClock
) -> None:
    settings = RunSettings(planning_gate=False, revision=LATEST_REVISION)
    node = NodeDef(key="design", provider="default", settings=settings)
    defn = WorkflowDef(key="k", version=1, nodes=(node,))
    opening = created(defn, Settings(), "w", {})
    assert opening.revision == WORKFLOW_REVISION >= 2
    # the phase's model never answers: the clock that would wake it stands
    # still; each host's script is its own, as each process's is
    slow = [Reply(text=act(type="finish", output="late"), delay=3600.0)]

    def model() -> ScriptedProvider:
        return ScriptedProvider(slow, per_run=True, sleep=clock.sleep)

    first = await make_host(model())
    stream = workflow_stream("w")
    await first.submit(stream, opening)
    phase = run_stream("w:design:1")
    await _until(log, phase, lambda rs: "LlmRequested" in _types(rs))
    await first.stop()

    # the cancel is recorded by a host that routes nothing (as one that died
    # right after its commit)
    cancel = workflow_events.WorkflowCancelRequested(reason="not needed")
    await Host(log, clock=clock, kinds=KINDS).submit(stream, cancel)
    cancelled = (await log.read(stream))[-1].event
    assert cancelled == workflow_events.WorkflowCancelled(
        reason="not needed", phase_run_id="w:design:1"
    )

    await make_host(model())  # projects the cancel, then routes what is pending
    ran = await _until(log, phase, lambda rs: "RunCancelled" in _types(rs))
    assert "CancelRequested" in _types(ran)
    done = await _until(log, stream, lambda rs: "PhaseFailed" in _types(rs))
    assert _types(done)[-2:] == ["ChildFinished", "PhaseFailed"]
