"""The workflow decider: a run of a graph of phases (pure).

Spec 001 (Alphred), as an actor. `WorkflowCreated` records the definition
and its inputs; the run starts (``pending`` to ``running``) at the first
node. Each phase is a fresh run (a child stream, `PhaseStarted` asks for it)
whose result comes back as `ChildFinished` through its ``reply_to``:

- completed: `PhaseCompleted` records its report and its typed routing
  decision; the node's transitions are tried by priority, the first that is
  ``auto`` or whose guard holds is taken (`TransitionTaken`) and its target
  starts (requeued first when it ran before: loop backtrack, or was
  skipped: branch reactivation); the other targets still pending are
  skipped. No match: the run completes;
- failed: `PhaseFailed`; a fresh try while its retries last, else the run
  fails.

A run starts at most `max_steps` phase executions, retries included (from
revision 3): a transition that would start one more is recorded and the run
fails, naming the bound and the node, as does a retry that would; a loop
with no way out ends there.

A paused run records what its phase in flight returns and decides what
follows when it is resumed. Cancelling cancels the phase in flight (an
effect); what it returns later is still recorded.

A run with a worktree (`WorkflowCreated.worktree`) asks for it first
(``git.worktree_add``, a tool call the host carries out) and starts its
first phase when it is made (failing when it cannot be); its phases work
in it. When the run ends, its branch gets a pull request if one was asked
for (``git.pull_request``; a missing ``gh`` or ``az`` is said, not a
failure) and the worktree is removed (``git.worktree_remove``, which
commits what is left to the branch first) unless it is kept.

Every status move is checked against the spec's tables (`RUN_MOVES`,
`PHASE_MOVES`): an input that would need another move is refused.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct
from msgspec.structs import replace

from steward.actors.outstanding import Outstanding, folded
from steward.actors.run.state import run_stream
from steward.actors.workflow.events import (
    DEFAULT_MAX_STEPS,
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
    Worktree,
)
from steward.actors.workflow.graph import (
    choose,
    guard_context,
    handoff,
    node_of,
    problems,
    routing_decision,
)
from steward.events.base import Event
from steward.events.protocol import (
    ChildFinished,
    EffectClaimed,
    ToolRequested,
    ToolResulted,
)

__all__ = [
    "PHASE_MOVES",
    "RUN_MOVES",
    "Phase",
    "Workflow",
    "decide",
    "evolve",
    "initial",
    "max_steps",
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
    revision: int = 0
    """`WorkflowCreated.revision`: the form of the phase run ids."""
    reason: str | None = None
    worktree: Worktree | None = None
    workspace: str | None = None
    """The worktree's path, once it is made."""
    worktree_error: str | None = None
    tool: str | None = None
    """The git tool call in flight (its request id)."""
    tool_name: str | None = None
    tools: int = 0
    """Git tool calls asked for, for their ids."""
    outstanding: Outstanding = Outstanding()
    """The git tool call in flight, and the claim a worker holds on it."""


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
    return folded(_evolve(state, event), event)


def _evolve(state: Workflow, event: Event) -> Workflow:
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
                worktree=event.worktree,
                revision=event.revision,
            )
        case ToolRequested(request_id=rid, name=name):
            return replace(state, tool=rid, tool_name=name, tools=state.tools + 1)
        case ToolResulted(request_id=rid, ok=ok, error=error) if rid == state.tool:
            after = replace(state, tool=None, tool_name=None)
            if state.tool_name != "git.worktree_add" or state.worktree is None:
                return after
            if ok:
                return replace(after, workspace=state.worktree.path)
            return replace(after, worktree_error=error or "the git tool failed")
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
            if input.worktree is not None:
                return [started, _git(after, "git.worktree_add")]
            return [started, *_start(after, definition.nodes[0].key, at)]
        case ToolResulted(request_id=rid, at=at), _ if rid == state.tool:
            after = evolve(state, input)
            if state.tool_name == "git.worktree_add":
                if state.status == "running":
                    return _follow(after, at)
                if state.status == "cancelled":
                    return _cleanup(after)  # made after the run was cancelled
                return []  # paused: followed on resume
            if state.tool_name == "git.pull_request":
                return _cleanup(after)
            return []
        case EffectClaimed(), _ if state.outstanding.accepts(input):
            return []
        case ChildFinished(at=at) as result, _ if _in_flight(state, result):
            outcome = _outcome(state, result, at)
            after = evolve(state, outcome)
            if state.status == "cancelled":  # its worktree waited for it
                return [outcome, *_cleanup(after)]
            if state.status != "running":
                return [outcome]  # paused: followed on resume
            return [outcome, *_follow(after, at)]
        case WorkflowPauseRequested(reason=reason), "running":
            _move_run("running", "paused")
            return [WorkflowPaused(reason=reason)]
        case WorkflowResumeRequested(at=at), "paused":
            _move_run("paused", "running")
            resumed = WorkflowResumed()
            return [resumed, *_follow(evolve(state, resumed), at)]
        case WorkflowCancelRequested(reason=reason), "running":
            _move_run("running", "cancelled")
            return _ending(state, [_cancelled(state, reason)])
        case WorkflowCancelRequested(reason=reason), "paused":
            # paused -> cancelled is no move of the spec's: paused -> running
            # -> cancelled, in one step, so nothing starts in between
            _move_run("paused", "running")
            _move_run("running", "cancelled")
            return _ending(state, [WorkflowResumed(), _cancelled(state, reason)])
        case _:
            return None


def _cancelled(state: Workflow, reason: str) -> WorkflowCancelled:
    """The run's cancel, naming the phase run in flight from revision 2."""
    phase = None
    if state.revision >= 2 and state.current is not None:
        phase = phase_of(state, state.current).run_id
    return WorkflowCancelled(reason=reason, phase_run_id=phase)


def _in_flight(state: Workflow, result: ChildFinished) -> bool:
    """Whether ``result`` is the phase run in flight's."""
    if state.current is None:
        return False
    run_id = phase_of(state, state.current).run_id
    return run_id is not None and run_stream(run_id) == result.stream


def _outcome(state: Workflow, result: ChildFinished, at: float) -> Event:
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
    """What follows the recorded outcome of phase ``state.ended``: a
    transition, a retry, or the run's end; before any phase, what follows
    the worktree: the first phase, or the run's failure."""
    assert state.definition is not None
    if state.ended is None:
        if state.runs or state.tool is not None or state.worktree is None:
            return []
        if state.worktree_error is not None:
            _move_run("running", "failed")
            why = f"its worktree could not be made: {state.worktree_error}"
            return [WorkflowFailed(reason=why)]
        return _start(state, state.definition.nodes[0].key, at)
    phase = phase_of(state, state.ended)
    node = node_of(state.definition, phase.node)
    if phase.status == "failed":
        if phase.retries <= node.max_retries:
            if (bound := _past_bound(state, phase.node, phase.attempt)) is not None:
                return _ending(state, [bound])
            return _start(state, phase.node, at)
        _move_run("running", "failed")
        tries = phase.retries
        failed = WorkflowFailed(
            reason=f"phase {phase.node} failed {tries} time"
            f"{'s' if tries != 1 else ''} (max_retries {node.max_retries})"
        )
        return _ending(state, [failed])
    context = guard_context(
        phase.node, phase.attempt, _guard_decision(state, phase), phase.metadata
    )
    edge = choose(state.definition, phase.node, context)
    if edge is None:
        _move_run("running", "completed")
        done = [*_skip_pending(state, None), WorkflowCompleted(last=phase.node)]
        return _ending(state, done)
    decisions: list[Event] = [
        TransitionTaken(
            source=edge.source,
            target=edge.target,
            priority=edge.priority,
            auto=edge.auto,
            when=edge.when,
        )
    ]
    target = phase_of(state, edge.target)
    again = target.status == "completed"  # a loop: its next attempt
    next_attempt = target.attempt + 1 if again else target.attempt
    if (bound := _past_bound(state, edge.target, next_attempt)) is not None:
        return _ending(state, [*decisions, bound])
    others = tuple(
        e.target
        for e in state.definition.edges
        if e.source == phase.node and e.target != edge.target
    )
    decisions += _skip_pending(state, others)
    if target.status == "completed":
        _move_phase(target, "pending")
        decisions.append(PhaseRequeued(node=target.node, attempt=target.attempt + 1))
    elif target.status == "skipped":
        _move_phase(target, "pending")
        decisions.append(PhaseRequeued(node=target.node, attempt=target.attempt))
    return decisions + _start(fold(decisions, state), edge.target, at)


def _guard_decision(state: Workflow, phase: Phase) -> str | None:
    """The ``decision`` phase's guards read: its routing decision, or none
    (a missing path) when it gave none; runs before revision 3 read
    ``"no_route"`` then, and keep reading it."""
    if state.revision < 3:
        return phase.decision or "no_route"
    return None if phase.decision in (None, "no_route") else phase.decision


def max_steps(state: Workflow) -> int | None:
    """The phase executions the run may start, at most; ``None``: no bound
    (a run before revision 3, as it was decided)."""
    assert state.definition is not None
    if state.revision < 3:
        return None
    return state.definition.max_steps or DEFAULT_MAX_STEPS


def _past_bound(state: Workflow, node: str, attempt: int) -> WorkflowFailed | None:
    """The run's failure when starting ``node`` again (its ``attempt``)
    would pass `max_steps`; ``None`` while it would not."""
    limit = max_steps(state)
    if limit is None or state.runs < limit:
        return None
    _move_run("running", "failed")
    return WorkflowFailed(
        reason=f"max_steps {limit} reached: node {node} would run again "
        f"(attempt {attempt}) after {state.runs} phase executions; if the "
        "loop is meant to go on, raise max_steps"
    )


def _ending(state: Workflow, decisions: list[Event]) -> list[Event]:
    """``decisions``, which end the run, and what its worktree asks then: a
    pull request of its branch (when it completed and one is asked for),
    else its removal (unless kept; once a phase still in flight, cancelled,
    has answered)."""
    after = fold(decisions, state)
    if after.workspace is None or after.worktree is None or after.current:
        return decisions
    if after.status == "completed" and after.worktree.pull_request is not None:
        return [*decisions, _git(after, "git.pull_request")]
    return [*decisions, *_cleanup(after)]


def _cleanup(state: Workflow) -> list[Event]:
    """The worktree's removal, unless there is none or it is kept."""
    if state.workspace is None or state.worktree is None or state.worktree.keep:
        return []
    return [_git(state, "git.worktree_remove")]


def _git(state: Workflow, name: str) -> ToolRequested:
    """The git tool call ``name`` for the run's worktree."""
    tree = state.worktree
    assert tree is not None and state.definition is not None
    defn = state.definition
    where = {"repository": tree.repository, "path": tree.path, "branch": tree.branch}
    match name:
        case "git.worktree_add":
            args: dict[str, Any] = {**where, "base": tree.base}
        case "git.pull_request":
            title = f"{defn.name or defn.key}: workflow run {state.workflow_id}"
            args = {**where, "base": tree.base, "tool": tree.pull_request}
            args |= {"title": title, "body": _path_taken(state)}
        case _:
            message = f"steward: left by workflow run {state.workflow_id}"
            args = {**where, "message": message}
    rid = f"{state.workflow_id}/git/{state.tools + 1}"
    return ToolRequested(request_id=rid, name=name, args=args)


def _path_taken(state: Workflow) -> str:
    """The phases' last attempts and decisions, for a pull request's body."""
    lines = [
        f"- {p.node}: attempt {p.attempt}, {p.status}"
        + (f", {p.decision}" if p.decision else "")
        for p in state.phases
        if p.status != "pending"
    ]
    return "Phases of this workflow run:\n" + "\n".join(lines)


def _skip_pending(state: Workflow, only: tuple[str, ...] | None) -> list[Event]:
    """The pending phases of ``only`` (``None``: of every node) skipped."""
    return [
        PhaseSkipped(node=p.node)
        for p in state.phases
        if p.status == "pending" and (only is None or p.node in only)
    ]


def phase_run_id(state: Workflow, node: str) -> str:
    """The id of the next phase run, ``node``'s. Neither a workflow id nor a
    node key holds a ``:``, so no two runs' phases share one; runs recorded
    before revision 1 joined them with ``-``, and keep that."""
    sep = ":" if state.revision >= 1 else "-"
    return f"{state.workflow_id}{sep}{node}{sep}{state.runs + 1}"


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
            run_id=phase_run_id(state, node),
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
