"""The events of a workflow run (the ``workflow`` actor kind, Alphred).

A workflow run is one stream, ``workflow.<id>``, that walks a graph of
phases, in a git worktree of its own when it has one (made and removed by
the ``git.*`` tools: `ToolRequested` and `ToolResulted`, shared with runs).
Each phase is a fresh run (a child stream) that answers the workflow
through ``reply_to`` with `ChildFinished`; the workflow records the
phase's report and routing decision, takes the first transition whose
``auto`` or guard holds, and starts the next phase, until no transition
matches (completed), a phase fails past its retries (failed) or someone
cancels it. Its definition is recorded in its first event, so a replay
decides as the live run did whatever the file now says.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from steward.actors.run.events import RunSettings
from steward.events.base import Event
from steward.events.protocol import (
    ChildFinished,
    EffectClaimed,
    ToolRequested,
    ToolResulted,
)

__all__ = [  # EVENT_TYPES and INPUT_TYPES are read from the module (as the run's)
    "Artifact",
    "DEFAULT_MAX_STEPS",
    "EdgeDef",
    "GitDef",
    "NodeDef",
    "PhaseCompleted",
    "PhaseFailed",
    "PhaseRequeued",
    "PhaseSkipped",
    "PhaseStarted",
    "TransitionTaken",
    "WorkflowCancelRequested",
    "WorkflowCancelled",
    "WorkflowCompleted",
    "WorkflowCreated",
    "WorkflowDef",
    "WorkflowFailed",
    "WorkflowPauseRequested",
    "WorkflowPaused",
    "WorkflowResumeRequested",
    "WorkflowResumed",
    "WorkflowStarted",
    "WORKFLOW_REVISION",
    "Worktree",
]

# -- the definition, as recorded ----------------------------------------------------


class NodeDef(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A phase of the graph (Alphred's ``tree_nodes`` row)."""

    key: str
    type: Literal["agent"] = "agent"
    provider: str | None = None
    """The ``[models.<name>]`` table the phase's agent talks to."""
    profile: str = "default"
    """The agent profile (``[agents.<name>]``): system prompt, protocol, tools."""
    prompt: str = ""
    """The phase's prompt template: ``{input.NAME}`` is the workflow input
    NAME; anything else is kept as written."""
    max_retries: int = 0
    """Fresh tries of a failed phase before the workflow fails."""
    settings: RunSettings | None = None
    """The settings of the phase's runs, resolved from ``provider`` and
    ``profile`` when the workflow run was created (``None`` in a file)."""


class EdgeDef(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A transition (Alphred's ``tree_edges`` row): taken after ``source``
    completes when it is ``auto`` or its ``when`` guard holds; the lowest
    ``priority`` that does wins."""

    source: str
    target: str
    priority: int
    auto: bool = False
    when: str | None = None


class GitDef(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A file's ``[git]`` table: the repository a run works in a worktree
    of, and how (each may be given on the command line instead)."""

    repository: str | None = None
    target_branch: str | None = None
    """The branch the worktree's branch starts from; ``None``: the
    repository's current branch."""
    branch_template: str | None = None
    """The worktree branch's name, with tokens (``{tree-key}``,
    ``{run-id}``, ...); ``None``: ``[workflow] branch_template``."""
    pull_request: Literal["gh", "az"] | None = None
    """Open a pull request with this command when the run completes."""
    keep: bool = False
    """Keep the worktree when the run ends (its branch is kept always)."""


class WorkflowDef(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """A versioned workflow: its nodes in order (the first is where a run
    starts), its edges, and its ``[git]`` table if it has one."""

    key: str
    version: int
    name: str = ""
    nodes: tuple[NodeDef, ...]
    edges: tuple[EdgeDef, ...] = ()
    git: GitDef | None = None
    max_steps: int | None = None
    """Phase executions (retries included) a run may start, at most: the
    file's ``[workflow] max_steps``; ``None`` in a file is ``[workflow]
    max_steps`` of the settings, resolved when a run is created. A run of
    `WorkflowCreated.revision` 3 or later that would start one more fails;
    ``None`` recorded is then `DEFAULT_MAX_STEPS`."""


class Worktree(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """Where a workflow run's phases work: a git worktree at ``path`` of
    ``repository`` (both absolute), on branch ``branch`` made from ``base``
    (its name resolved and sanitized when the run was created)."""

    repository: str
    path: str
    branch: str
    base: str
    pull_request: Literal["gh", "az"] | None = None
    keep: bool = False


class Artifact(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """One upstream report handed to a phase (a context-manifest entry):
    whose it is, its length, and how much of it was kept (``head`` and
    ``tail`` characters of it when ``truncated``, deterministic head-tail)."""

    node: str
    attempt: int
    run_id: str
    chars: int
    included: int
    truncated: bool = False
    head: int = 0
    tail: int = 0


# -- inputs --------------------------------------------------------------------------


class WorkflowCreated(Event, frozen=True, kw_only=True):
    """A workflow run was asked for: its definition and its inputs."""

    workflow_id: str
    definition: WorkflowDef
    inputs: dict[str, str] = {}
    file: str | None = None
    """The definition's file, for people (the definition is recorded whole)."""
    worktree: Worktree | None = None
    """The git worktree the phases work in; ``None``: the host's workspace."""
    revision: int = 0
    """The decider behaviour the run was created under (`WORKFLOW_REVISION`
    for new runs): from 1, phase run ids are ``<id>:<node>:<n>``; a run of
    0 (recorded before) keeps ``<id>-<node>-<n>``, which the runs of another
    id and node, both with dashes, could share. From 2, `WorkflowCancelled`
    names the phase run in flight, so a host that dies before delivering the
    cancel to it leaves the delivery to the next. From 3, a phase that gave
    no routing decision has no ``decision`` for its guards (a missing path:
    every comparison with it is false), where before it was ``"no_route"``;
    and a run fails once it would start more than ``max_steps`` phase
    executions (`WorkflowDef.max_steps`), where before it had no bound."""
    at: float = 0.0


WORKFLOW_REVISION = 3
"""The `WorkflowCreated.revision` of runs created now."""

DEFAULT_MAX_STEPS = 1000
"""A workflow run's bound on phase executions when neither its file nor the
settings give one (Alphred's ``executeRun`` ``maxSteps``)."""


class WorkflowPauseRequested(Event, frozen=True, kw_only=True):
    """Someone asked the run to start no more phases until resumed."""

    reason: str = "paused by operator"
    at: float = 0.0


class WorkflowResumeRequested(Event, frozen=True, kw_only=True):
    """Someone asked a paused run to go on."""

    at: float = 0.0


class WorkflowCancelRequested(Event, frozen=True, kw_only=True):
    """Someone asked the run to stop (its phase in flight is cancelled)."""

    reason: str = "cancelled by operator"
    at: float = 0.0


# -- decisions -----------------------------------------------------------------------


class WorkflowStarted(Event, frozen=True, kw_only=True):
    """The run went from ``pending`` to ``running``."""


class PhaseStarted(Event, frozen=True, kw_only=True):
    """Phase ``node`` (its ``attempt``; ``retry`` > 0 for a retry of a failed
    try) runs as run ``run_id``, handed the reports in ``upstream``."""

    node: str
    attempt: int
    retry: int = 0
    run_id: str
    upstream: tuple[Artifact, ...] = ()
    """The context manifest: the upstream reports the phase was given."""
    dropped: tuple[str, ...] = ()
    """Predecessors with a report that the caps left out."""
    at: float = 0.0


class PhaseCompleted(Event, frozen=True, kw_only=True):
    """Phase ``node`` finished: its report, and the typed routing decision of
    its result (``no_route`` when none was usable)."""

    node: str
    attempt: int
    run_id: str
    report: str
    decision: Literal["approved", "changes_requested", "blocked", "retry", "no_route"]
    decision_source: str | None = None
    """The metadata key the decision was read from (``routingDecision``, or
    ``routing_decision`` as the fallback); ``None`` for ``no_route``."""
    metadata: dict[str, Any] = {}
    """The structured report: the result's metadata, what guards read."""
    at: float = 0.0


class PhaseFailed(Event, frozen=True, kw_only=True):
    """Phase ``node``'s run ``run_id`` failed (or was cancelled)."""

    node: str
    attempt: int
    retry: int
    run_id: str
    reason: str
    at: float = 0.0


class PhaseRequeued(Event, frozen=True, kw_only=True):
    """A completed phase (loop backtrack: ``attempt`` is its next) or a
    skipped one (branch reactivation: ``attempt`` unchanged) is pending
    again."""

    node: str
    attempt: int


class PhaseSkipped(Event, frozen=True, kw_only=True):
    """A pending phase the run's path passed by."""

    node: str


class TransitionTaken(Event, frozen=True, kw_only=True):
    """The edge from ``source`` to ``target`` (its ``priority``; ``auto`` or
    its guard ``when``) was the first to match."""

    source: str
    target: str
    priority: int
    auto: bool = False
    when: str | None = None


class WorkflowPaused(Event, frozen=True, kw_only=True):
    """``running`` to ``paused``: no phase starts until resumed."""

    reason: str = ""


class WorkflowResumed(Event, frozen=True, kw_only=True):
    """``paused`` to ``running``."""


class WorkflowCompleted(Event, frozen=True, kw_only=True):
    """No transition matched after ``last``: the run is done."""

    last: str


class WorkflowFailed(Event, frozen=True, kw_only=True):
    """A phase failed past its retries; ``reason`` says which and why."""

    reason: str


class WorkflowCancelled(Event, frozen=True, kw_only=True):
    """The run was cancelled."""

    reason: str
    phase_run_id: str | None = None
    """The run of the phase in flight, which the cancel is delivered to
    (recorded from revision 2, so the pending projection keeps the delivery
    until that run ends; ``None`` before, and when no phase was in flight)."""


INPUT_TYPES: tuple[type[Event], ...] = (
    WorkflowCreated,
    ChildFinished,
    WorkflowPauseRequested,
    WorkflowResumeRequested,
    WorkflowCancelRequested,
    ToolResulted,
    EffectClaimed,
)

EVENT_TYPES: tuple[type[Event], ...] = (
    *INPUT_TYPES,
    ToolRequested,
    WorkflowStarted,
    PhaseStarted,
    PhaseCompleted,
    PhaseFailed,
    PhaseRequeued,
    PhaseSkipped,
    TransitionTaken,
    WorkflowPaused,
    WorkflowResumed,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
)
