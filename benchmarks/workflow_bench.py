"""A workflow run's own cost per phase transition (issue #17).

Target: the runtime's cost per phase transition <= 300 us, so a workflow's
overhead stays invisible next to its phases. Measured as the CPU time of
what a transition takes once a phase's run has answered: committing its
`ChildFinished` to the workflow (the workflow decides the phase's
outcome, its routing decision, the transition, the target's requeue and its
start, with the upstream hand-off), and routing its `PhaseStarted` as the
dispatcher does: the effect builds the next phase's prompt and context, and
its run decides its `RunCreated` into its start and first model request,
prompt hashed, in a commit of its own. The model is not called: the phase
runs' own steps are a run step each, measured by `runtime_bench`.

The workflow loops over two nodes (``a -> b -> a``, auto edges), each phase
handed the other's report of 2,000 characters, for `TRANSITIONS` steps.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from statistics import median

from benchmarks.common import REPEATS, Figure, route
from steward import events
from steward.actors.run.reactor import run_stream
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.decider import Workflow, phase_of, workflow_stream
from steward.bus import Commit, SqliteEventLog
from steward.config import Settings
from steward.host import Host
from steward.kinds import KINDS

TRANSITIONS = 500
REPORT = "A phase's report, as long as a real one. " * 50  # 2,000 characters


def _definition() -> workflow_events.WorkflowDef:
    settings = Settings().run_settings()
    nodes = tuple(
        workflow_events.NodeDef(
            key=k, provider="default", prompt=f"Do {k}.", settings=settings
        )
        for k in ("a", "b")
    )
    edges = (
        workflow_events.EdgeDef(source="a", target="b", priority=1, auto=True),
        workflow_events.EdgeDef(source="b", target="a", priority=1, auto=True),
    )
    return workflow_events.WorkflowDef(key="loop", version=1, nodes=nodes, edges=edges)


async def _per_transition_us(path: Path) -> float:
    """CPU microseconds per phase transition, child's start included."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    host = Host(log, kinds=KINDS)  # not started: the phases' answers are given here
    stream = workflow_stream("bench")
    created = workflow_events.WorkflowCreated(
        workflow_id="bench", definition=_definition()
    )
    commit = await host.submit(stream, created)
    assert commit is not None
    await _start_phase(host, commit)
    state: Workflow = (await host.state(stream))[0]
    phases = []
    started = time.process_time()
    for n in range(TRANSITIONS):
        assert state.current is not None
        run_id = phase_of(state, state.current).run_id
        assert run_id is not None
        phases.append(run_id)
        result = events.ChildFinished(
            stream=run_stream(run_id), status="completed", output=REPORT
        )
        commit = await host.submit(stream, result)
        assert commit is not None, n
        await _start_phase(host, commit)
        state = (await host.state(stream))[0]
    seconds = time.process_time() - started
    for run_id in phases:
        if await log.version(run_stream(run_id)) == 0:
            raise RuntimeError(f"phase run {run_id} did not start")
    await log.close()
    return seconds / TRANSITIONS * 1e6


async def _start_phase(host: Host, commit: Commit) -> None:
    """Start the phase run that ``commit`` decided, as the dispatcher does."""
    [phase] = [
        r for r in commit.records if isinstance(r.event, workflow_events.PhaseStarted)
    ]
    await route(host, phase)


async def run() -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_transition = median(
            [await _per_transition_us(root / f"wf{n}.db") for n in range(REPEATS)]
        )
    return [
        Figure(
            "workflow CPU per phase transition (child started)",
            per_transition,
            "us",
            300.0,
            higher_is_better=False,
        )
    ]
