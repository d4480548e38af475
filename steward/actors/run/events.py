"""The events of a run actor: what arrives (inputs) and what it decides.

A run's stream is ``run.<run_id>``. Inputs carry everything non-deterministic a
decision may depend on (model replies, tool results, the time they arrived);
decisions are derived from inputs and state alone.
"""

from __future__ import annotations

import typing
from typing import Any, Literal

import msgspec

from steward.events.base import UPCASTERS, Event
from steward.events.protocol import (
    CancelRequested,
    ChatMessage,
    ChildFinished,
    EffectClaimed,
    LlmAttemptFailed,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    LlmStreamRecorded,
    Reasoning,
    ToolCall,
    ToolRequested,
    ToolResulted,
    ToolSpec,
    Usage,
    WakeDue,
)

__all__ = [
    "EVENT_TYPES",
    "RETIRED",
    "LATEST_REVISION",
    "AnswerDelivered",
    "ContextCompressed",
    "QaReported",
    "Reasoning",
    "ReasoningRecorded",
    "StageEntered",
    "ApprovalDecided",
    "ApprovalRequested",
    "BudgetExceeded",
    "CancelRequested",
    "ChildFinished",
    "ChatMessage",
    "DecisionRecorded",
    "INPUT_TYPES",
    "EffectClaimed",
    "LlmAttemptFailed",
    "LlmFailed",
    "LlmStreamRecorded",
    "LlmRequested",
    "LlmResponded",
    "MessageSent",
    "NoteRecorded",
    "OutputUpdated",
    "RunCancelled",
    "RunCompleted",
    "RunCreated",
    "RunDecision",
    "RunEvent",
    "RunFailed",
    "RunInput",
    "RunResumed",
    "RunSettings",
    "RunSlept",
    "RunStarted",
    "RunStatus",
    "RunTaken",
    "SubagentSpec",
    "SubagentsSpawned",
    "SystemNoteAdded",
    "TERMINAL",
    "UNFINISHED",
    "ToolCall",
    "ToolRequested",
    "ToolResulted",
    "ToolSpec",
    "Usage",
    "WakeDue",
]

RunStatus = Literal["pending", "running", "waiting", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class RunSettings(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """Everything a run's prompts and limits depend on, fixed when it starts.

    Recording these once lets replay rebuild every prompt exactly, even after
    the configuration changed, without storing any prompt.
    """

    model: str = "scripted"
    system_prompt: str = ""
    protocol: Literal["json", "native"] = "json"
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    max_iterations: int = 20
    transcript_limit: int = 50
    transcript_token_limit: int = 1200
    max_json_retries: int = 1
    max_tool_retries: int = 1
    max_tool_call_rounds: int = 10
    planning_gate: bool = True
    subagent_conversation_limit: int = 40
    token_budget: int | None = None
    """Tokens (in + out) the run may use; checked before each model call."""
    cost_budget_usd: float | None = None
    """US dollars the run may spend on model calls; checked before each call."""
    budget_policy: Literal["fail", "pause"] = "fail"
    """When a budget is spent: fail the run, or wait for a person's approval."""
    profiles: tuple[str, ...] | None = None
    """The agent profiles (``[agents]``) a subagent may be spawned with; a
    spawn naming another is corrected. ``None`` (a run recorded before this
    field existed) checks none."""
    model_table: str | None = None
    """The ``[models.<name>]`` table the run's calls go to (a session's
    model, a workflow node's ``provider``); ``None``: its profile's."""
    policy: Literal["default", "staged"] = "default"
    """``staged``: the run goes through the stages of spec 004 (warmup, act,
    tool follow-up, micro step, delivery check, QA review), each owning its
    tools and prompt (`steward.actors.run.stages`); native protocol only."""
    mode: Literal["agent", "chat"] = "agent"
    """A staged run's mode, the user's: no stage changes it."""
    reasoning: bool = False
    """Whether a staged run reasons (macro in its warmup, micro between
    steps), the user's switch: no stage changes it."""
    qa: bool = True
    """Whether a staged run ends with its advisory QA review."""
    prompts: dict[str, str] = {}
    """A staged run's prompts (`steward.actors.run.stage_prompts`), by name, as they
    were when it started: a replay composes the same system prompts."""
    project_root: str = ""
    """``{{project_root}}`` in a staged run's prompts."""
    revision: int = 0
    """The decider behaviour the run was created under (`LATEST_REVISION` for
    new runs, 0 for runs recorded before revisions existed). A change to what
    a run decides is gated on it, so an old run still re-decides exactly as it
    was recorded (Temporal's ``patched``). Revision 1: the tool-name shortcut
    takes the keys beside the name as the call's arguments, and a reply whose
    JSON holds a lone surrogate (``"\\ud800"``) is read, the surrogate made
    U+FFFD (before, it was invalid JSON). Revision 2: a finish's ``metadata``
    object is its result's (`RunCompleted.metadata`), what a workflow reads
    a phase's routing decision and structured report from (before, it was
    ignored). Revision 3: a ``native`` run is offered a ``finish`` tool
    (`steward.actors.run.prompt.FINISH_TOOL`) whose call ends it with an
    output and ``metadata``, as the ``json`` protocol's finish does (before,
    a native run could only finish with plain text). Revision 4: a tool loop
    makes at most ``max_tool_call_rounds`` model calls (Klaw's bound): once
    that many replies asked for tools, their answers end the run failed
    instead of asking the model again (before, one more call was made, and
    the run failed only if it asked for tools too). Revision 5, of staged
    runs: the recoveries and corrections bounded by
    `steward.actors.run.staged.MAX_RECOVERIES` are counted from the run's
    entry into the stage it is in (before, over the whole run); a reply's
    batch of tool calls with one that failed is followed by the stage's
    recovery note whichever result came last (before, only when the last
    to arrive had failed); and a cancel after the answer was delivered
    completes the run with that answer (before, it was cancelled).
    Revision 6: a run that stalls with nothing to answer says how many
    model calls it made and how many in a row made no progress (before, "I
    could not finish this within N steps", N its ``max_iterations``); and
    a staged run's delivery check that answers only its verdict
    (``Delivery: DONE``) delivers the act stage's answer (before, it was
    an empty reply)."""


LATEST_REVISION = 6
"""The revision new runs are created with; see `RunSettings.revision`."""


class SubagentSpec(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """A child run a parent asked for."""

    run_id: str
    input_text: str
    profile: str | None = None
    allowed_tools: tuple[str, ...] | None = None


# -- inputs -------------------------------------------------------------------


class RunCreated(Event, frozen=True, kw_only=True):
    """A run was asked for (an inbound message, an operator, a parent run)."""

    run_id: str
    input_text: str
    settings: RunSettings
    conversation: tuple[ChatMessage, ...] = ()
    input_json: Any = None
    agent_id: str | None = None
    channel_id: str | None = None
    user_id: str | None = None
    context_id: str | None = None
    parent_run_id: str | None = None
    root_run_id: str | None = None
    kind: Literal["coordinator", "subagent"] = "coordinator"
    profile: str | None = None
    allowed_tools: tuple[str, ...] | None = None
    reply_to: str | None = None
    """The stream the run's result goes to as `ChildFinished` (a parent
    run's, a session's, a workflow's); ``None``: none, or for a run recorded
    before this field, its parent run's."""
    at: float = 0.0
    queued: bool = False
    """Recorded for a host to take (`steward runs start`, or `steward run`
    beside a `serve`): the run stays pending until a host records `RunTaken`.
    ``False`` (every run before this field) starts the run at once."""
    workspace: str | None = None
    """The directory the run's tools work in (a workflow run's worktree);
    ``None``: the host's workspace."""


class RunTaken(Event, frozen=True, kw_only=True):
    """A host took a queued run (``RunCreated.queued``): the run starts now."""

    at: float = 0.0


class ApprovalDecided(Event, frozen=True, kw_only=True):
    """A person approved or denied a tool call that needed approval."""

    request_id: str
    approved: bool
    reason: str = ""
    at: float = 0.0


# -- decisions ----------------------------------------------------------------


class RunStarted(Event, frozen=True, kw_only=True):
    """The run moved from pending to running."""


class BudgetExceeded(Event, frozen=True, kw_only=True):
    """The run spent its ``kind`` budget before its next model call.

    With policy ``pause`` the run waits: an `ApprovalDecided` for
    ``request_id`` lifts the budget for the rest of the run, a denial fails it.
    """

    request_id: str
    kind: Literal["tokens", "cost"]
    used: float
    limit: float
    policy: Literal["fail", "pause"]


class ApprovalRequested(Event, frozen=True, kw_only=True):
    """A tool call needs a person's approval; the run waits for it."""

    request_id: str
    name: str
    args: dict[str, Any] = {}
    call_id: str | None = None


class SystemNoteAdded(Event, frozen=True, kw_only=True):
    """The runtime told the model something (planning gate, JSON correction)."""

    reason: Literal[
        "planning_gate", "invalid_command", "tool_error", "recovery", "delivery_gate"
    ]
    """Why: the planning gate, a reply that is no command, a tool call that
    could not be made; in a staged run, a stage's recovery (an empty reply,
    one asking the user for files, a failed tool) or the delivery gate (the
    answer not done yet)."""
    content: str
    call_id: str | None = None
    tool: str | None = None


class NoteRecorded(Event, frozen=True, kw_only=True):
    """The model recorded a structured note (requirements, plan, ...)."""

    category: str
    content: str


class DecisionRecorded(Event, frozen=True, kw_only=True):
    """The model recorded a decision."""

    content: str
    importance: str | None = None


class OutputUpdated(Event, frozen=True, kw_only=True):
    """The output buffer changed (``replace`` or ``append``)."""

    text: str
    mode: Literal["replace", "append"] = "replace"


class MessageSent(Event, frozen=True, kw_only=True):
    """The run sent a message to the user."""

    text: str


class SubagentsSpawned(Event, frozen=True, kw_only=True):
    """Child runs were asked for; the parent waits for all of them."""

    children: tuple[SubagentSpec, ...]


class RunSlept(Event, frozen=True, kw_only=True):
    """The run waits until ``wake_at`` (epoch seconds)."""

    timer_id: str
    wake_at: float
    reason: str = ""
    cron: str | None = None


class RunResumed(Event, frozen=True, kw_only=True):
    """The run went from waiting back to running."""

    reason: str


UNFINISHED = frozenset({"stalled", "max_iterations"})
"""The `RunCompleted` reasons of a run that stopped without finishing: it
stalled (replies in a row that made no progress) or ran out of model
calls, and answered what it had."""


class RunCompleted(Event, frozen=True, kw_only=True):
    """The run finished with ``output``."""

    output: str
    reason: str = "finish"
    """Why: ``finish`` (the model's), ``message`` (a first message that
    answers), ``cancelled`` (after its answer was delivered), or one of
    `UNFINISHED`."""
    metadata: dict[str, Any] = {}
    """A finish's ``metadata`` object (from revision 2 on): the result's
    structured part, such as a workflow phase's routing decision."""


class StageEntered(Event, frozen=True, kw_only=True):
    """A staged run's next model call is of ``stage`` (spec 004): recorded
    before each of its requests with what the policy gave it, the user's
    ``mode`` and ``reasoning`` as they were set (never changed by a stage),
    the tools it is offered and the prompts its system prompt is made of."""

    stage: str
    mode: str
    reasoning: bool
    tools: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()


class ReasoningRecorded(Event, frozen=True, kw_only=True):
    """A staged run's reply held an ``<ide_reasoning>`` block: its compact
    outcome, all of it the run keeps (the block itself stays out of the
    history it shows the model next)."""

    stage: str
    plan_delta: str = ""
    next_action: str = ""
    known_risks: str = ""
    delivery_state: Literal["DONE", "NEEDS_WORK"] = "NEEDS_WORK"


class ContextCompressed(Event, frozen=True, kw_only=True):
    """A staged run's transcript entries before ``upto`` left its window:
    ``summary`` (goals, decisions, current plan, open issues, important tool
    outputs; never a reasoning block), built from them without a model, is
    shown in their place (spec 004 §7)."""

    summary: str
    upto: int


class AnswerDelivered(Event, frozen=True, kw_only=True):
    """A staged run's delivery check passed: ``output`` is its answer, which
    nothing after (QA, a retry) changes."""

    output: str


class QaReported(Event, frozen=True, kw_only=True):
    """A staged run's advisory QA report (``verdict``, ``findings``,
    ``guidance``), recorded beside the answer, never in its place."""

    report: dict[str, Any]


class RunFailed(Event, frozen=True, kw_only=True):
    """The run failed; ``reason`` says why in a sentence."""

    reason: str


class RunCancelled(Event, frozen=True, kw_only=True):
    """The run was cancelled; ``children`` still running are cancelled too."""

    reason: str
    children: tuple[str, ...] = ()


RunInput = (
    RunCreated
    | RunTaken
    | LlmResponded
    | LlmFailed
    | LlmAttemptFailed
    | LlmStreamRecorded
    | EffectClaimed
    | ToolResulted
    | WakeDue
    | ChildFinished
    | CancelRequested
    | ApprovalDecided
)
RunDecision = (
    RunStarted
    | LlmRequested
    | ToolRequested
    | ApprovalRequested
    | SystemNoteAdded
    | NoteRecorded
    | DecisionRecorded
    | OutputUpdated
    | MessageSent
    | SubagentsSpawned
    | BudgetExceeded
    | RunSlept
    | RunResumed
    | RunCompleted
    | RunFailed
    | RunCancelled
    | StageEntered
    | ReasoningRecorded
    | AnswerDelivered
    | QaReported
    | ContextCompressed
)
RunEvent = RunInput | RunDecision
EVENT_TYPES: tuple[type[Event], ...] = typing.get_args(RunEvent)
"""Every event type of the run actor, inputs and decisions."""

INPUT_TYPES: tuple[type[Event], ...] = (
    RunCreated,
    RunTaken,
    LlmResponded,
    LlmFailed,
    LlmAttemptFailed,
    LlmStreamRecorded,
    EffectClaimed,
    ToolResulted,
    WakeDue,
    ChildFinished,
    CancelRequested,
    ApprovalDecided,
)


def _subagent_finished(old: dict[str, Any]) -> dict[str, Any]:
    """A run's result as it was delivered before `ChildFinished`
    (``SubagentFinished`` with a ``result`` naming the child by its run id),
    as the `ChildFinished` it now is, naming the child by its stream."""
    result = old["result"]
    return {
        "type": "ChildFinished",
        "stream": f"run.{result['run_id']}",
        "status": result["status"],
        "output": result["output"],
        "metadata": result.get("metadata", {}),
        "outcome": result.get("outcome", ""),
        "at": old.get("at", 0.0),
    }


UPCASTERS["SubagentFinished"] = _subagent_finished
RETIRED = frozenset({"SubagentFinished", "SubagentResult"})
"""The types an upcaster retired (an old tag, and the Structs only it
held): no longer written, their recorded defaults live on in the upcaster
(``tests/golden/defaults.json`` keeps them pinned)."""
