"""The workflow decider: a run of a graph of phases (pure).

Spec 001 (Alphred), as an actor. `WorkflowCreated` records the definition
and its inputs; the run starts (``pending`` to ``running``) at the first
node. Each phase is a fresh run (a child stream, `PhaseStarted` asks for it)
whose result comes back as `SubagentFinished` through its ``reply_to``:

- completed: `PhaseCompleted` records its report and its typed routing
  decision; the node's transitions are tried by priority, the first that is
  ``auto`` or whose guard holds is taken (`TransitionTaken`) and its target
  starts (requeued first when it ran before: loop backtrack, or was
  skipped: branch reactivation); the other targets still pending are
  skipped. No match: the run completes;
- failed: `PhaseFailed`; a fresh try while its retries last, else the run
  fails.

A paused run records what its phase in flight returns and decides what
follows when it is resumed. Cancelling cancels the phase in flight (an
effect); what it returns later is still recorded.

Every status move is checked against the spec's tables (`RUN_MOVES`,
`PHASE_MOVES`): an input that would need another move is refused.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct
from msgspec.structs import replace

from steward.actors.workflow_graph import (
    choose,
    guard_context,
    handoff,
    node_of,
    problems,
    routing_decision,
)
from steward.events.base import Event
from steward.events.run import SubagentFinished, SubagentResult
from steward.events.workflow import (
    PhaseCompleted,
    PhaseFailed,
    PhaseRequeued,
    PhaseSkipped,
    PhaseStarted,
    TransitionTaken,
    WorkflowCancelled,
    WorkflowCancelRequested,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowDef,
    WorkflowFailed,
    WorkflowPaused,
    WorkflowPauseRequested,
    WorkflowResumed,
    WorkflowResumeRequested,
    WorkflowStarted,
)

__all__ = [
    "PHASE_MOVES",
    "RUN_MOVES",
    "Phase",
    "Workflow",
    "decide",
    "evolve",
    "initial",
    "phase_of",
    "reports",
    "workflow_stream",
]

RunStatus = Literal[
    "new", "pending", "running", "paused", "completed", "failed", "cancelled"
]
PhaseStatus = Literal["pending", "running", "completed", "failed", "skipped"]

RUN_MOVES: frozenset[tuple[str, str]] = frozenset(
    {
        ("pending", "running"),
        ("running", "completed"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("running", "paused"),
        ("paused", "running"),
    }
)
"""The run's status moves the spec allows; a run is ``pending`` from its
`WorkflowCreated` until its `WorkflowStarted`, in the same step."""

PHASE_MOVES: frozenset[tuple[str, str]] = frozenset(
    {
        ("pending", "running"),
        ("running", "completed"),
        ("running", "failed"),
        ("pending", "skipped"),
        ("failed", "running"),  # a retry
        ("completed", "pending"),  # loop backtrack: the next attempt
        ("skipped", "pending"),  # branch reactivation
    }
)
"""The phase status moves the spec allows."""


class Phase(Struct, frozen=True, kw_only=True):
    """One node's run state: its status, attempt (loop backtracks count it)
    and failed tries of this attempt, its run in flight, and its latest
    successful report."""

    node: str
    status: PhaseStatus = "pending"
    attempt: int = 1
    retries: int = 0
    run_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    report: tuple[int, str, str] | None = None
    """(attempt, run id, text) of its latest successful report."""
    decision: str | None = None
    metadata: dict[str, Any] = {}


class Workflow(Struct, frozen=True, kw_only=True):
    workflow_id: str = ""
    definition: WorkflowDef | None = None
    inputs: dict[str, str] = {}
    status: RunStatus = "new"
    phases: tuple[Phase, ...] = ()
    current: str | None = None
    """The node whose run is in flight."""
    ended: str | None = None
    """The node whose outcome is recorded but not yet followed (by a
    transition, a retry or the run's end): set while paused."""
    runs: int = 0
    """Phase runs started, for their ids."""
    reason: str | None = None


initial = Workflow()


class _Refused(Exception):
    """A move the spec's tables do not allow: the input is refused."""


def workflow_stream(workflow_id: str) -> str:
    """The stream of workflow run ``workflow_id``."""
    return f"workflow.{workflow_id}"


def phase_of(state: Workflow, node: str) -> Phase:
    return next(p for p in state.phases if p.node == node)


def reports(state: Workflow) -> dict[str, tuple[int, str, str]]:
    """The latest successful report of each node that has one."""
    return {p.node: p.report for p in state.phases if p.report is not None}


def _with_phase(state: Workflow, node: str, **changes: Any) -> Workflow:
    phases = tuple(replace(p, **changes) if p.node == node else p for p in state.phases)
    return replace(state, phases=phases)


def evolve(state: Workflow, event: Event) -> Workflow:
    match event:
        case WorkflowCreated(workflow_id=wid, definition=definition, inputs=inputs):
            phases = tuple(Phase(node=n.key) for n in definition.nodes)
            return replace(
                state,
                workflow_id=wid,
                definition=definition,
                inputs=inputs,
                status="pending",
                phases=phases,
            )
        case WorkflowStarted() | WorkflowResumed():
            return replace(state, status="running")
        case WorkflowPaused():
            return replace(state, status="paused")
        case PhaseStarted(node=node, attempt=attempt, run_id=run_id, at=at):
            after = _with_phase(
                state,
                node,
                status="running",
                attempt=attempt,
                run_id=run_id,
                started_at=at,
                completed_at=None,
            )
            return replace(after, current=node, ended=None, runs=state.runs + 1)
        case PhaseCompleted() as done:
            after = _with_phase(
                state,
                done.node,
                status="completed",
                completed_at=done.at,
                report=(done.attempt, done.run_id, done.report),
                decision=done.decision,
                metadata=done.metadata,
            )
            return replace(after, current=None, ended=done.node)
        case PhaseFailed(node=node, at=at):
            phase = phase_of(state, node)
            after = _with_phase(
                state, node, status="failed", completed_at=at, retries=phase.retries + 1
            )
            return replace(after, current=None, ended=node)
        case PhaseRequeued(node=node, attempt=attempt):
            return _with_phase(
                state,
                node,
                status="pending",
                attempt=attempt,
                retries=0,
                started_at=None,
                completed_at=None,
            )
        case PhaseSkipped(node=node):
            return _with_phase(state, node, status="skipped")
        case TransitionTaken():
            return replace(state, ended=None)
        case WorkflowCompleted():
            return replace(state, status="completed", ended=None)
        case WorkflowFailed(reason=reason):
            return replace(state, status="failed", ended=None, reason=reason)
        case WorkflowCancelled(reason=reason):
            return replace(state, status="cancelled", reason=reason)
        case _:
            return state


def fold(events: list[Event], state: Workflow) -> Workflow:
    for event in events:
        state = evolve(state, event)
    return state


def decide(input: Event, state: Workflow) -> list[Event] | None:
    """The decisions for ``input``; ``None`` refuses it."""
    try:
        return _decide(input, state)
    except _Refused:
        return None


def _decide(input: Event, state: Workflow) -> list[Event] | None:
    match input, state.status:
        case WorkflowCreated(definition=definition, at=at), "new":
            if problems(definition):
                return None  # the file's loader says what; a log never holds one
            started = WorkflowStarted()
            after = fold([input, started], state)
            _move_run("pending", "running")
            return [started, *_start(after, definition.nodes[0].key, at)]
        case SubagentFinished(result=result, at=at), _ if _in_flight(state, result):
            outcome = _outcome(state, result, at)
            if state.status != "running":
                return [outcome]  # paused: followed on resume; ended: recorded
            return [outcome, *_follow(evolve(state, outcome), at)]
        case WorkflowPauseRequested(reason=reason), "running":
            _move_run("running", "paused")
            return [WorkflowPaused(reason=reason)]
        case WorkflowResumeRequested(at=at), "paused":
            _move_run("paused", "running")
            resumed = WorkflowResumed()
            return [resumed, *_follow(evolve(state, resumed), at)]
        case WorkflowCancelRequested(reason=reason), "running":
            _move_run("running", "cancelled")
            return [WorkflowCancelled(reason=reason)]
        case WorkflowCancelRequested(reason=reason), "paused":
            # paused -> cancelled is no move of the spec's: paused -> running
            # -> cancelled, in one step, so nothing starts in between
            _move_run("paused", "running")
            _move_run("running", "cancelled")
            return [WorkflowResumed(), WorkflowCancelled(reason=reason)]
        case _:
            return None


def _in_flight(state: Workflow, result: SubagentResult) -> bool:
    """Whether ``result`` is the phase run in flight's."""
    if state.current is None:
        return False
    return phase_of(state, state.current).run_id == result.run_id


def _outcome(state: Workflow, result: SubagentResult, at: float) -> Event:
    """What the phase in flight's run ended with: completed, or failed."""
    assert state.current is not None
    phase = phase_of(state, state.current)
    assert phase.run_id is not None
    if result.status == "completed":
        _move_phase(phase, "completed")
        decision, source = routing_decision(result.metadata)
        return PhaseCompleted(
            node=phase.node,
            attempt=phase.attempt,
            run_id=phase.run_id,
            report=result.output,
            decision=decision,
            decision_source=source,
            metadata=result.metadata,
            at=at,
        )
    _move_phase(phase, "failed")
    return PhaseFailed(
        node=phase.node,
        attempt=phase.attempt,
        retry=phase.retries,
        run_id=phase.run_id,
        reason=result.output or f"its run ended {result.status}",
        at=at,
    )


def _follow(state: Workflow, at: float) -> list[Event]:
    """What follows the recorded outcome of phase ``state.ended`` (none:
    nothing): a transition, a retry, or the run's end."""
    if state.ended is None:
        return []
    assert state.definition is not None
    phase = phase_of(state, state.ended)
    node = node_of(state.definition, phase.node)
    if phase.status == "failed":
        if phase.retries <= node.max_retries:
            return _start(state, phase.node, at)
        _move_run("running", "failed")
        tries = phase.retries
        return [
            WorkflowFailed(
                reason=f"phase {phase.node} failed {tries} time"
                f"{'s' if tries != 1 else ''} (max_retries {node.max_retries})"
            )
        ]
    context = guard_context(
        phase.node, phase.attempt, phase.decision or "no_route", phase.metadata
    )
    edge = choose(state.definition, phase.node, context)
    if edge is None:
        _move_run("running", "completed")
        return [*_skip_pending(state, None), WorkflowCompleted(last=phase.node)]
    decisions: list[Event] = [
        TransitionTaken(
            source=edge.source,
            target=edge.target,
            priority=edge.priority,
            auto=edge.auto,
            when=edge.when,
        )
    ]
    others = tuple(
        e.target
        for e in state.definition.edges
        if e.source == phase.node and e.target != edge.target
    )
    decisions += _skip_pending(state, others)
    target = phase_of(state, edge.target)
    if target.status == "completed":
        _move_phase(target, "pending")
        decisions.append(PhaseRequeued(node=target.node, attempt=target.attempt + 1))
    elif target.status == "skipped":
        _move_phase(target, "pending")
        decisions.append(PhaseRequeued(node=target.node, attempt=target.attempt))
    return decisions + _start(fold(decisions, state), edge.target, at)


def _skip_pending(state: Workflow, only: tuple[str, ...] | None) -> list[Event]:
    """The pending phases of ``only`` (``None``: of every node) skipped."""
    return [
        PhaseSkipped(node=p.node)
        for p in state.phases
        if p.status == "pending" and (only is None or p.node in only)
    ]


def _start(state: Workflow, node: str, at: float) -> list[Event]:
    """Phase ``node`` starts as a fresh run, handed its upstream reports."""
    phase = phase_of(state, node)
    _move_phase(phase, "running")
    assert state.definition is not None
    upstream, dropped = handoff(state.definition, node, reports(state))
    return [
        PhaseStarted(
            node=node,
            attempt=phase.attempt,
            retry=phase.retries,
            run_id=f"{state.workflow_id}-{node}-{state.runs + 1}",
            upstream=upstream,
            dropped=dropped,
            at=at,
        )
    ]


def _move_run(before: str, after: str) -> None:
    if (before, after) not in RUN_MOVES:
        raise _Refused(f"a workflow run does not go from {before} to {after}")


def _move_phase(phase: Phase, to: str) -> None:
    if (phase.status, to) not in PHASE_MOVES:
        raise _Refused(f"phase {phase.node} does not go from {phase.status} to {to}")
