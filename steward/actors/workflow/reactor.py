"""What a workflow run's committed decisions ask of the host, as effect
values (pure): each phase's run, created with its prompt and upstream
reports and answering the workflow through ``reply_to``; a cancel to the
phase in flight when the workflow is cancelled."""

from __future__ import annotations

from steward.actors.effects import (
    Create,
    Deliver,
    Effect,
    Pending,
    Want,
    WantKind,
    cancel_key,
    notify_key,
    spawn_key,
)
from steward.actors.run.events import RunCreated, RunSettings
from steward.actors.run.state import run_id_of, run_stream
from steward.actors.workflow.decider import Workflow, phase_of, reports
from steward.actors.workflow.events import (
    PhaseStarted,
    WorkflowCancelled,
    WorkflowCancelRequested,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowFailed,
)
from steward.actors.workflow.graph import node_of, render_prompt, upstream_text
from steward.errors import StewardError
from steward.events import Event, Recorded
from steward.events.protocol import CancelRequested, ChildFinished

__all__ = [
    "RESULT_NOTE",
    "ROUTED",
    "correlation",
    "detach",
    "effects",
    "pending",
    "phase_run",
]

ROUTED: frozenset[type[Event]] = frozenset({PhaseStarted, WorkflowCancelled})

RESULT_NOTE = """\
## Your result
Finish with your report as the output. Put what the workflow routes on in
the finish's metadata: {"type": "finish", "output": "<report>", "metadata":
{"routingDecision": "approved" | "changes_requested" | "blocked" | "retry"}}
and any fields your instructions ask for beside it."""
"""Told to every phase after its prompt: routing reads the metadata only."""

NATIVE_RESULT_NOTE = """\
## Your result
Finish by calling the finish tool, alone, with your report as its output.
Put what the workflow routes on in its metadata: {"routingDecision":
"approved" | "changes_requested" | "blocked" | "retry"} and any fields your
instructions ask for beside it."""
"""`RESULT_NOTE` for a phase whose run calls tools natively (revision 3 on,
which offers it the finish tool)."""


def effects(rec: Recorded, at: Workflow, latest: Workflow) -> list[Effect]:
    """What committed event ``rec`` asks for, given the run's state at it."""
    match rec.event:
        case PhaseStarted(run_id=run_id) as started if _in_flight(latest, run_id):
            return [
                Create(
                    key=spawn_key(run_id),
                    stream=run_stream(run_id),
                    input=phase_run(at, started, rec.stream),
                    stamp=True,
                )
            ]
        case WorkflowCancelled() if at.current is not None:
            phase = phase_of(at, at.current).run_id
            assert phase is not None
            why = f"its workflow {at.workflow_id} was cancelled"
            return [
                Deliver(
                    key=cancel_key(phase),
                    stream=run_stream(phase),
                    input=CancelRequested(reason=why),
                    stamp=True,
                )
            ]
        case _:
            return []


def phase_run(state: Workflow, started: PhaseStarted, stream: str) -> RunCreated:
    """The run of phase ``started``, given the workflow's state just after
    it: the node's prompt with the workflow's inputs, the upstream reports
    its manifest names, and how to give its result."""
    assert state.definition is not None
    node = node_of(state.definition, started.node)
    settings = node.settings or RunSettings()
    native = settings.protocol == "native" and settings.revision >= 3
    parts = [
        render_prompt(node.prompt, state.inputs).strip(),
        upstream_text(started.upstream, reports(state)),
        NATIVE_RESULT_NOTE if native else RESULT_NOTE,
    ]
    return RunCreated(
        run_id=started.run_id,
        input_text="\n\n".join(p for p in parts if p),
        settings=settings,
        context_id=state.workflow_id,
        profile=node.profile,
        reply_to=stream,
        workspace=state.workspace,
    )


def _in_flight(state: Workflow, run_id: str) -> bool:
    """Whether phase run ``run_id`` is the one the workflow waits for: one
    whose result it holds already (a fork copies history) is never started
    again."""
    return state.current is not None and phase_of(state, state.current).run_id == run_id


def pending(rec: Recorded) -> Pending:
    """What a workflow's recorded event asks of a host that a crash must not
    lose."""
    match rec.event:
        case PhaseStarted(run_id=run_id):
            return Pending(wants=(Want(key=spawn_key(run_id), kind=WantKind.CREATE),))
        case WorkflowCancelled(phase_run_id=str(run_id)):
            # answered when that run ends (the runs projection), or by its result
            return Pending(wants=(Want(key=cancel_key(run_id), kind=WantKind.DELIVER),))
        case ChildFinished(stream=child):
            run_id = run_id_of(child)  # a finished run needs no creating (a fork)
            return Pending(
                answers=(notify_key(run_id), cancel_key(run_id), spawn_key(run_id))
            )
        case WorkflowCompleted() | WorkflowFailed():
            return Pending(ended=True)
        case _:
            return Pending()


def detach(event: Event, origin: str) -> Event:
    """A forked workflow run's first input, as it is (its ids are the fork's
    already); one in a git worktree cannot be forked, the worktree and its
    branch being the run's own."""
    if isinstance(event, WorkflowCreated) and event.worktree is not None:
        raise StewardError(
            "a workflow run in a git worktree cannot be forked: its worktree "
            "and branch are its own; start a new run of its file instead"
        )
    return event


def correlation(state: Workflow, input: Event) -> str | None:
    """A workflow run's commits correlate by the run."""
    if isinstance(input, WorkflowCreated):
        return input.workflow_id
    return state.workflow_id or None


def cancel(reason: str, at: float) -> WorkflowCancelRequested:
    """An operator's cancel of a workflow run (its `Surface.cancel`)."""
    return WorkflowCancelRequested(reason=reason, at=at)
