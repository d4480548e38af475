"""A run's state and how its events fold into it (pure): ``Run``,
``initial``, ``evolve`` and ``fold``, one small function per kind of event
that changes it; and a run's stream name. `steward.actors.run.decider`
decides on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from steward.actors.outstanding import Outstanding
from steward.actors.run import staged
from steward.actors.run.events import (
    AnswerDelivered,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    ContextCompressed,
    MessageSent,
    NoteRecorded,
    OutputUpdated,
    QaReported,
    ReasoningRecorded,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunResumed,
    RunSettings,
    RunSlept,
    RunStarted,
    StageEntered,
    SubagentsSpawned,
    SystemNoteAdded,
)
from steward.actors.run.prompt import (
    native_tools,
)
from steward.actors.run.stages import ReasoningOutcome, outcome_text
from steward.events.base import Event
from steward.events.protocol import (
    ChatMessage,
    ChildFinished,
    EffectClaimed,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolRequested,
    ToolResulted,
    ToolSpec,
    assistant_message,
)

replace = msgspec.structs.replace


class PendingCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool call requested (or awaiting approval) and not yet answered."""

    request_id: str
    name: str
    args: dict[str, Any]
    attempt: int = 1
    call_id: str | None = None


class Run(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything a run's decisions depend on, folded from its events."""

    status: str = "new"
    run_id: str = ""
    created: RunCreated | None = None
    kind: str = "coordinator"
    parent_run_id: str | None = None
    settings: RunSettings = RunSettings()
    offered: tuple[ToolSpec, ...] = ()
    """The tools a ``native`` run's model is offered (`native_tools`), made
    once when it is created, not for each prompt."""
    conversation: tuple[ChatMessage, ...] = ()
    transcript: tuple[ChatMessage, ...] = ()
    transcript_totals: tuple[int, ...] = ()
    """Running estimated tokens of the transcript: entry ``i`` is the sum over
    entries ``0..i``, so a prompt's window is a binary search."""
    iteration: int = 0
    llm_pending: str | None = None
    calls: tuple[PendingCall, ...] = ()
    approvals: tuple[PendingCall, ...] = ()
    children: tuple[str, ...] = ()
    results: tuple[ChildFinished, ...] = ()
    """The results of the children in ``children`` that have ended, kept
    until the last one's."""
    timer_id: str | None = None
    wake_at: float | None = None
    output: str = ""
    metadata: dict[str, Any] = {}
    """The finish's ``metadata`` (`RunCompleted.metadata`)."""
    last_message: str | None = None
    has_requirements: bool = False
    has_plan: bool = False
    stall: int = 0
    invalid_replies: int = 0
    tool_requests: int = 0
    tool_calls: int = 0
    output_updates: int = 0
    tool_failed: bool = False
    spawned: int = 0
    sleeps: int = 0
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    budget_hold: str | None = None
    """The `BudgetExceeded` request the run waits on, if it does."""
    budget_lifted: bool = False
    outstanding: Outstanding = Outstanding()
    """The model and tool calls asked for and not answered yet, and the
    claims workers hold on them."""
    stage: str = ""
    """A staged run's stage: of its last model call."""
    next_stage: str = ""
    """A staged run's stage for its next model call."""
    delivered: str | None = None
    """A staged run's answer once its delivery check passed (`AnswerDelivered`)."""
    qa_report: dict[str, Any] | None = None
    recoveries: int = 0
    """A staged run's recoveries and delivery-gate corrections so far."""
    stage_recoveries: int = 0
    """Those since it entered the stage it is in (from revision 5 what
    `staged.MAX_RECOVERIES` bounds)."""
    batch_failed: bool = False
    """A tool call the model's last reply asked for failed for good."""
    plans: tuple[str, ...] = ()
    """A staged run's plans, as its reasoning recorded them."""
    outcome: ReasoningOutcome | None = None
    """A staged run's reasoning outcome so far: each part as its reasoning
    last gave one, the delivery ``DONE`` once delivered. What its result
    hands a session's history (`ChildFinished.outcome`)."""
    summary: str = ""
    """A staged run's summary of the transcript entries before ``summarized``
    (`ContextCompressed`), shown in their place."""
    summarized: int = 0
    """(request id, worker, until) of effects a worker has claimed."""
    reason: str | None = None


initial = Run()


# -- evolve ---------------------------------------------------------------------
#
# Each event kind has one function that gives the state after it, found by the
# event's exact type (event classes are never subclassed) in `_APPLY`, the
# table after them. Each makes one new state: a single `replace` (msgspec's
# copy, in C) with every field the event changes, which is a seventh of what
# replaying an event costs. A dict lookup finds the function because a match
# over the event classes tries them in turn and cost more than the lookup and
# the call (both measured in docs/benchmarks.md).


def evolve(state: Run, event: Event) -> Run:
    """The state after one recorded event (input or decision)."""
    apply = _APPLY.get(type(event))
    return state if apply is None else apply(state, event)


def fold(events: Iterable[Event], state: Run = initial) -> Run:
    """The state after ``events``, as `evolve` gives it event by event (less
    its call per event: a replay folds millions)."""
    table = _APPLY
    for event in events:
        apply = table.get(type(event))
        if apply is not None:
            state = apply(state, event)
    return state


def _llm_requested(s: Run, event: LlmRequested) -> Run:
    return replace(
        s,
        llm_pending=event.request_id,
        iteration=event.iteration,
        outstanding=s.outstanding.asked(event.request_id),
    )


def _llm_responded(s: Run, event: LlmResponded) -> Run:
    native = s.settings.protocol == "native"
    text = event.text
    if s.settings.policy == "staged":  # its reasoning only as its outcome
        said = staged.reading(text, s.stage)
        text = said.visible
        if said.outcome is not None:
            text = f"{text}\n\n{outcome_text(said.outcome)}".strip()
    # the provider's reasoning stays with the message: the provider sends it
    # back within this tool loop if it must (`llm._wire.echoed`)
    message = assistant_message(
        text, event.tool_calls if native else (), event.reasoning
    )
    transcript, totals = _said(s, message)
    return replace(
        s,
        transcript=transcript,
        transcript_totals=totals,
        llm_pending=None,
        batch_failed=False,
        outstanding=s.outstanding.answered(event.request_id),
        stall=s.stall + 1,
        rounds=s.rounds + 1 if event.tool_calls else s.rounds,
        input_tokens=s.input_tokens + event.usage.input_tokens,
        output_tokens=s.output_tokens + event.usage.output_tokens,
        cost_usd=s.cost_usd + event.cost_usd,
    )


def _tool_requested(s: Run, event: ToolRequested) -> Run:
    call = PendingCall(
        request_id=event.request_id,
        name=event.name,
        args=event.args,
        attempt=event.attempt,
        call_id=event.call_id,
    )
    approved = find_call(s.approvals, event.request_id) if s.approvals else None
    return replace(
        s,
        calls=(*s.calls, call),
        outstanding=s.outstanding.asked(event.request_id),
        approvals=_without(s.approvals, approved),
        # an approved call keeps the id its ApprovalRequested already took
        tool_requests=s.tool_requests + 1 if approved is None else s.tool_requests,
        tool_calls=s.tool_calls + 1 if event.attempt == 1 else s.tool_calls,
        stall=0,
    )


def _tool_resulted(s: Run, event: ToolResulted) -> Run:
    done = find_call(s.calls, event.request_id)
    if done is None:
        return s
    calls = _without(s.calls, done)
    outstanding = s.outstanding.answered(event.request_id)
    if s.stage in staged.ACTING:  # a staged run's next call follows it up
        s = replace(s, next_stage=staged.followup_stage(s.settings))
    if event.ok:
        transcript, totals = _said(s, _tool_message(s, done, event.output))
        return replace(
            s,
            transcript=transcript,
            transcript_totals=totals,
            calls=calls,
            outstanding=outstanding,
        )
    if will_retry(s, done, event):
        return replace(s, calls=calls, outstanding=outstanding, tool_failed=True)
    text = f"Tool {done.name} failed: {event.error or 'unknown error'}"
    transcript, totals = _said(s, _tool_message(s, done, text))
    return replace(
        s,
        transcript=transcript,
        transcript_totals=totals,
        calls=calls,
        outstanding=outstanding,
        tool_failed=True,
        batch_failed=True,
    )


def _output_updated(s: Run, event: OutputUpdated) -> Run:
    output = event.text if event.mode == "replace" else s.output + event.text
    next_stage = "delivery_check" if s.stage in staged.ACTING else s.next_stage
    return replace(
        s,
        output=output,
        output_updates=s.output_updates + 1,
        stall=0,
        next_stage=next_stage,
    )


def _system_note_added(s: Run, event: SystemNoteAdded) -> Run:
    if event.call_id is not None:
        said = ChatMessage(
            role="tool", content=event.content, tool_call_id=event.call_id
        )
    else:
        said = ChatMessage(role="user", content=f"[system] {event.content}")
    transcript, totals = _said(s, said)
    invalid = event.reason == "invalid_command"
    corrected = event.reason in ("recovery", "delivery_gate")
    next_stage = s.next_stage
    if event.reason == "delivery_gate":
        next_stage = "act"
    elif event.call_id is not None and s.stage in staged.ACTING:
        next_stage = staged.followup_stage(s.settings)
    return replace(
        s,
        transcript=transcript,
        transcript_totals=totals,
        invalid_replies=s.invalid_replies + 1 if invalid else s.invalid_replies,
        tool_failed=s.tool_failed or event.reason == "tool_error",
        recoveries=s.recoveries + 1 if corrected else s.recoveries,
        stage_recoveries=s.stage_recoveries + 1 if corrected else s.stage_recoveries,
        next_stage=next_stage,
    )


def _note_recorded(s: Run, event: NoteRecorded) -> Run:
    if event.category == "requirements":
        return replace(s, has_requirements=True)
    if event.category == "plan":
        return replace(s, has_plan=True)
    return s


def _message_sent(s: Run, event: MessageSent) -> Run:
    return replace(s, last_message=event.text, stall=0)


def _run_created(s: Run, event: RunCreated) -> Run:
    native = event.settings.protocol == "native"
    return replace(
        s,
        status="pending",
        run_id=event.run_id,
        created=event,
        kind=event.kind,
        parent_run_id=event.parent_run_id,
        settings=event.settings,
        offered=native_tools(event.settings) if native else (),
        conversation=conversation_of(event),
    )


def _run_started(s: Run, event: RunStarted) -> Run:
    if s.settings.policy == "staged":
        return replace(s, status="running", next_stage=staged.first_stage(s.settings))
    return replace(s, status="running")


def _stage_entered(s: Run, event: StageEntered) -> Run:
    kept = s.stage_recoveries if event.stage == s.stage else 0
    return replace(s, stage=event.stage, next_stage=event.stage, stage_recoveries=kept)


def _reasoning_recorded(s: Run, event: ReasoningRecorded) -> Run:
    plans = (*s.plans, event.plan_delta) if event.plan_delta else s.plans
    was = s.outcome or ReasoningOutcome()
    outcome = ReasoningOutcome(
        plan_delta=event.plan_delta or was.plan_delta,
        next_action=event.next_action or was.next_action,
        known_risks=event.known_risks or was.known_risks,
        delivery_state=event.delivery_state,
    )
    if event.stage == "warmup":
        return replace(s, next_stage="act", plans=plans, outcome=outcome)
    return replace(s, plans=plans, outcome=outcome)


def _context_compressed(s: Run, event: ContextCompressed) -> Run:
    return replace(s, summary=event.summary, summarized=event.upto)


def _answer_delivered(s: Run, event: AnswerDelivered) -> Run:
    outcome = s.outcome and replace(s.outcome, delivery_state="DONE")
    return replace(
        s,
        delivered=event.output,
        output=event.output,
        next_stage="qa_review",
        outcome=outcome,
    )


def _qa_reported(s: Run, event: QaReported) -> Run:
    return replace(s, qa_report=event.report)


def _llm_failed(s: Run, event: LlmFailed) -> Run:
    return replace(
        s,
        llm_pending=None,
        outstanding=s.outstanding.answered(event.request_id),
        input_tokens=s.input_tokens + event.usage.input_tokens,
        output_tokens=s.output_tokens + event.usage.output_tokens,
        cost_usd=s.cost_usd + event.cost_usd,
    )


def _effect_claimed(s: Run, event: EffectClaimed) -> Run:
    return replace(s, outstanding=s.outstanding.apply(event))


def _approval_requested(s: Run, event: ApprovalRequested) -> Run:
    call = PendingCall(
        request_id=event.request_id,
        name=event.name,
        args=event.args,
        call_id=event.call_id,
    )
    return replace(
        s,
        status="waiting",
        approvals=(*s.approvals, call),
        tool_requests=s.tool_requests + 1,
        stall=0,
    )


def _budget_exceeded(s: Run, event: BudgetExceeded) -> Run:
    if event.policy == "pause":
        return replace(s, status="waiting", budget_hold=event.request_id)
    return s


def _approval_decided(s: Run, event: ApprovalDecided) -> Run:
    if event.request_id == s.budget_hold:
        return replace(s, budget_hold=None, budget_lifted=event.approved)
    denied = None if event.approved else find_call(s.approvals, event.request_id)
    if denied is None:
        return s
    text = f"A person denied the call to {denied.name}: {event.reason}"
    transcript, totals = _said(s, _tool_message(s, denied, text))
    return replace(
        s,
        transcript=transcript,
        transcript_totals=totals,
        approvals=_without(s.approvals, denied),
    )


def _subagents_spawned(s: Run, event: SubagentsSpawned) -> Run:
    return replace(
        s,
        status="waiting",
        children=(*s.children, *(c.run_id for c in event.children)),
        spawned=s.spawned + len(event.children),
        stall=0,
    )


def _child_finished(s: Run, event: ChildFinished) -> Run:
    child = child_of(event)
    if child not in s.children:
        return s
    children = tuple([c for c in s.children if c != child])
    results = (*s.results, event)
    if children:
        return replace(s, children=children, results=results)
    transcript, totals = _said(s, _results_message(results))
    return replace(
        s,
        transcript=transcript,
        transcript_totals=totals,
        children=children,
        results=(),
    )


def _run_slept(s: Run, event: RunSlept) -> Run:
    return replace(
        s,
        status="waiting",
        timer_id=event.timer_id,
        wake_at=event.wake_at,
        sleeps=s.sleeps + 1,
        stall=0,
    )


def _run_resumed(s: Run, event: RunResumed) -> Run:
    return replace(s, status="running", timer_id=None, wake_at=None)


def _run_completed(s: Run, event: RunCompleted) -> Run:
    return replace(s, status="completed", output=event.output, metadata=event.metadata)


def _run_failed(s: Run, event: RunFailed) -> Run:
    return replace(s, status="failed", reason=event.reason)


def _run_cancelled(s: Run, event: RunCancelled) -> Run:
    return replace(s, status="cancelled", reason=event.reason)


_Apply = Callable[[Run, Any], Run]
_APPLY: Mapping[type[Event], _Apply] = MappingProxyType(
    {
        LlmRequested: _llm_requested,
        LlmResponded: _llm_responded,
        ToolRequested: _tool_requested,
        ToolResulted: _tool_resulted,
        OutputUpdated: _output_updated,
        SystemNoteAdded: _system_note_added,
        NoteRecorded: _note_recorded,
        MessageSent: _message_sent,
        RunCreated: _run_created,
        RunStarted: _run_started,
        LlmFailed: _llm_failed,
        EffectClaimed: _effect_claimed,
        ApprovalRequested: _approval_requested,
        BudgetExceeded: _budget_exceeded,
        ApprovalDecided: _approval_decided,
        SubagentsSpawned: _subagents_spawned,
        ChildFinished: _child_finished,
        RunSlept: _run_slept,
        RunResumed: _run_resumed,
        RunCompleted: _run_completed,
        RunFailed: _run_failed,
        RunCancelled: _run_cancelled,
        StageEntered: _stage_entered,
        ReasoningRecorded: _reasoning_recorded,
        AnswerDelivered: _answer_delivered,
        QaReported: _qa_reported,
        ContextCompressed: _context_compressed,
    }
)
"""The function that applies each kind of event that changes a run's state."""


def _said(
    s: Run, message: ChatMessage
) -> tuple[tuple[ChatMessage, ...], tuple[int, ...]]:
    """``s``'s transcript with ``message`` added, and its totals with the
    message's estimated tokens: given to the one `replace` of the event that
    says it (a ``**changes`` passed on costs more than the copy)."""
    totals = s.transcript_totals
    cost = len(message.content) // 4 + 1
    after = (*totals, totals[-1] + cost) if totals else (cost,)
    return (*s.transcript, message), after


# -- children -------------------------------------------------------------------


def run_stream(run_id: str) -> str:
    """The stream that holds run ``run_id``."""
    return f"run.{run_id}"


def run_id_of(stream: str) -> str:
    """The run id of run stream ``stream``."""
    return stream.removeprefix("run.")


def child_of(done: ChildFinished) -> str | None:
    """The run id of the child run whose result ``done`` is; ``None`` for a
    child of another kind (a run starts runs only)."""
    kind, _, child = done.stream.partition(".")
    return child if kind == "run" else None


def conversation_of(created: RunCreated) -> tuple[ChatMessage, ...]:
    """The conversation a run starts from: the given one, or just its input."""
    return created.conversation or (
        ChatMessage(role="user", content=created.input_text),
    )


# -- small helpers --------------------------------------------------------------


def find_call(calls: tuple[PendingCall, ...], request_id: str) -> PendingCall | None:
    for call in calls:
        if call.request_id == request_id:
            return call
    return None


def _without(
    calls: tuple[PendingCall, ...], call: PendingCall | None
) -> tuple[PendingCall, ...]:
    """``calls`` without ``call`` (by its request id, which no other pending
    call has)."""
    if call is None:
        return calls
    if len(calls) == 1:  # the usual case: one call at a time
        return ()
    return tuple([c for c in calls if c.request_id != call.request_id])


def tool_spec(state: Run, name: str) -> ToolSpec | None:
    for spec in state.settings.tools:
        if spec.name == name:
            return spec
    return None


def _tool_message(state: Run, call: PendingCall, text: str) -> ChatMessage:
    if state.settings.protocol == "native" and call.call_id is not None:
        return ChatMessage(role="tool", content=text, tool_call_id=call.call_id)
    return ChatMessage(role="user", content=f"[tool_result {call.name}]\n{text}")


def _results_message(results: tuple[ChildFinished, ...]) -> ChatMessage:
    lines = [f"- {child_of(r)} ({r.status}): {r.output}" for r in results]
    return ChatMessage(role="user", content="[subagents]\n" + "\n".join(lines))


def will_retry(state: Run, call: PendingCall, result: ToolResulted) -> bool:
    if result.ok or not result.retryable:
        return False
    spec = tool_spec(state, call.name)
    limit = state.settings.max_tool_retries
    if spec is not None and spec.max_retries is not None:
        limit = spec.max_retries
    return call.attempt <= limit


__all__ = [
    "PendingCall",
    "Run",
    "child_of",
    "conversation_of",
    "evolve",
    "find_call",
    "fold",
    "initial",
    "run_id_of",
    "run_stream",
    "tool_spec",
    "will_retry",
]
