"""The run actor: Clifford's run processor as a pure decider.

A run answers one input with a loop of model calls. In the ``json`` protocol
each reply is one JSON command (tool_call, send_message, set_output, finish,
decision, note, spawn_subagent(s), sleep); in the ``native`` protocol the model
returns tool calls and the run ends on a reply without any. Everything here is
pure: ids are derived from the run id and counters, times arrive on inputs.

Read top to bottom: the state, ``initial``, ``evolve``, ``decide``, then the
helpers that turn a reply into decisions. A reply's JSON command is parsed in
`steward.actors.run.commands`, the prompt is built in `steward.actors.run.prompt`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

from steward.actors.cron import next_firing
from steward.actors.cron import valid as cron_valid
from steward.actors.outstanding import Outstanding
from steward.actors.prompt import Prompt, PromptCache, prompt_hash
from steward.actors.run import staged
from steward.actors.run.commands import (
    KNOWN_COMMANDS,
    InvalidCommand,
    args_field,
    mode_field,
    parse_command,
    text_field,
    timestamp,
)
from steward.actors.run.events import (
    AnswerDelivered,
    ApprovalDecided,
    ApprovalRequested,
    BudgetExceeded,
    ContextCompressed,
    DecisionRecorded,
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
    RunTaken,
    StageEntered,
    SubagentSpec,
    SubagentsSpawned,
    SystemNoteAdded,
)
from steward.actors.run.prompt import (
    FINISH_TOOL,
    JSON_PROTOCOL,
    build_prompt,
    native_tools,
    window_start,
)
from steward.actors.run.stages import ReasoningOutcome, interpolate, outcome_text
from steward.events.base import Event
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
    ToolCall,
    ToolRequested,
    ToolResulted,
    ToolSpec,
    WakeDue,
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

_GATED = frozenset({"tool_call", "set_output", "finish"})
_QUESTION = re.compile(r"bitte|please|could you|can you", re.IGNORECASE)


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
    approved = _find(s.approvals, event.request_id) if s.approvals else None
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
    done = _find(s.calls, event.request_id)
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
    if _will_retry(s, done, event):
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
        conversation=_conversation(event),
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
    denied = None if event.approved else _find(s.approvals, event.request_id)
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


# -- decide ---------------------------------------------------------------------


class Step(NamedTuple):
    """What one accepted input does to a run."""

    decisions: list[Event]
    state: Run
    """The state after the input and its decisions."""
    prompt: Prompt | None
    """The prompt of the model call the decisions request, ``None`` if none."""


def decide(input: Event, state: Run) -> list[Event] | None:
    """React to one input; ``None`` refuses it (nothing is recorded).

    An accepted input may cause no decision (a child finished while others are
    still running): then the input alone is recorded.
    """
    step = decide_and_fold(input, state)
    return None if step is None else step.decisions


def decide_and_fold(
    input: Event, state: Run, cache: PromptCache | None = None
) -> Step | None:
    """`decide`, with the state after the input and its decisions, and the
    prompt of the model call they request; ``None`` refuses the input.

    A requested model call records the hash of the prompt it will send: the
    prompt built from the state after the step (the request itself changes
    nothing a prompt shows). So the decisions are made first, folded, and
    the prompt is built from the result and hashed into the request.
    ``cache`` (the host's, see `PromptCache`) only saves work: the step is
    the same with none.
    """
    decisions = _react(input, state)
    if decisions is None:
        return None
    after = fold([input, *decisions], state)
    request = decisions[-1] if decisions else None
    if not isinstance(request, LlmRequested):
        return Step(decisions, after, None)
    prompt = build_prompt(after)
    hashed = replace(request, prompt_hash=prompt_hash(prompt, cache))
    return Step([*decisions[:-1], hashed], after, prompt)


def _react(input: Event, state: Run) -> list[Event] | None:
    """The decisions for ``input``, ``None`` to refuse it; a model call they
    request comes last, with its prompt hash left to `decide_and_fold`."""
    match input, state.status:
        case RunCreated(queued=True), "new":
            return []  # pending until a host takes it
        case RunCreated(settings=settings), "new" if (
            settings.policy == "staged" and not settings.prompts
        ):
            why = "a staged run needs its prompts in its settings (stage_prompts)"
            return [RunStarted(), RunFailed(reason=why)]
        case RunCreated(), "new":
            return [RunStarted(), *_next_call(fold([input, RunStarted()], state), [])]
        case RunTaken(), "pending":
            return [RunStarted(), *_next_call(evolve(state, RunStarted()), [])]
        case LlmResponded(request_id=rid), "running" if rid == state.llm_pending:
            after = evolve(state, input)
            if state.settings.policy == "staged":
                return _on_staged_reply(input, after)
            if state.settings.protocol == "native":
                return _on_native_reply(input, after)
            return _on_json_reply(input, after)
        case (
            LlmAttemptFailed(request_id=rid) | LlmStreamRecorded(request_id=rid),
            "running",
        ) if rid == state.llm_pending:
            return []  # recorded for people; changes nothing
        case EffectClaimed(), "running" | "waiting" if state.outstanding.accepts(input):
            return []
        case LlmFailed(request_id=rid), "running" if rid == state.llm_pending:
            return _stopped(state, f"model call failed: {input.kind}: {input.message}")
        case ToolResulted(request_id=rid), "running" | "waiting" if _find(
            state.calls, rid
        ):
            return _on_tool_result(input, state)
        case ApprovalDecided(request_id=rid), "waiting" if rid == state.budget_hold:
            if not input.approved:
                return _stopped(state, f"budget spent; denied: {input.reason}")
            resumed = RunResumed(reason="budget approved")
            after = evolve(evolve(state, input), resumed)
            return [resumed, *_next_call(after, [])]
        case ApprovalDecided(request_id=rid), "running" | "waiting" if _find(
            state.approvals, rid
        ):
            return _on_approval(input, state)
        case WakeDue(timer_id=tid), "waiting" if tid == state.timer_id:
            resumed = RunResumed(reason="wake")
            return [resumed, *_next_call(evolve(state, resumed), [])]
        case ChildFinished(), "waiting" if child_of(input) in state.children:
            after = evolve(state, input)
            if after.children:
                return []
            resumed = RunResumed(reason="subagents finished")
            return [resumed, *_next_call(evolve(after, resumed), [])]
        case CancelRequested(), "pending" | "running" | "waiting":
            if state.delivered is not None and state.settings.revision >= 5:
                # a delivered answer is authoritative (spec 004 §2.5)
                return [RunCompleted(output=state.delivered, reason="cancelled")]
            return [RunCancelled(reason=input.reason, children=state.children)]
        case _:
            return None


def _on_json_reply(reply: LlmResponded, state: Run) -> list[Event]:
    command = parse_command(reply.text, revision=state.settings.revision)
    if isinstance(command, str):
        return _invalid_reply(state, command)
    kind = command["type"]
    if kind in _GATED and state.settings.planning_gate:
        if not (state.has_requirements and state.has_plan):
            gate = SystemNoteAdded(
                reason="planning_gate",
                content=(
                    "Before calling tools, setting output or finishing, record "
                    'note(category="requirements") and note(category="plan").'
                ),
            )
            return _continue(state, [gate])
    try:
        match kind:
            case "tool_call":
                return _tool_call(
                    state, text_field(command, "name"), args_field(command)
                )
            case "send_message":
                return _send_message(state, text_field(command, "message"))
            case "set_output":
                update = OutputUpdated(
                    text=text_field(command, "output"), mode=mode_field(command)
                )
                return _continue(state, [update])
            case "finish":
                return _finish(state, command)
            case "decision":
                importance = command.get("importance")
                decision = DecisionRecorded(
                    content=text_field(command, "content"),
                    importance=None if importance is None else str(importance),
                )
                return _continue(state, [decision])
            case "note":
                note = NoteRecorded(
                    category=text_field(command, "category"),
                    content=text_field(command, "content"),
                )
                return _continue(state, [note])
            case "spawn_subagent":
                return _spawn(state, [command.get("subagent")])
            case "spawn_subagents":
                subagents = command.get("subagents")
                if not isinstance(subagents, list) or not subagents:
                    raise InvalidCommand("`subagents` must be a non-empty list")
                return _spawn(state, subagents)
            case "sleep":
                return [_sleep(state, command, reply.at)]
            case _:
                raise InvalidCommand(
                    f"unknown command type {kind!r}; use one of "
                    + ", ".join(KNOWN_COMMANDS)
                )
    except InvalidCommand as e:
        return _invalid_reply(state, str(e))


def _on_native_reply(reply: LlmResponded, state: Run) -> list[Event]:
    calls = reply.tool_calls
    if not calls:
        return [RunCompleted(output=reply.text or state.output, reason="finish")]
    finishing = state.settings.revision >= 3  # the run's own finish tool
    finishes = [c for c in calls if finishing and c.name == FINISH_TOOL.name]
    problem = "call finish alone, once your other calls have answered"
    if finishes and len(calls) == 1:
        done = _native_finish(reply, state, finishes[0])
        if isinstance(done, list):
            return done
        problem = done
    limit = state.settings.max_tool_call_rounds
    if state.rounds > limit:  # before revision 4 (`_next_call` stops it since)
        return [
            RunFailed(
                reason=f"tool-call loop limit reached: the model asked for tools in "
                f"more than {limit} rounds (max_tool_call_rounds)"
            )
        ]
    # finish calls that did not end the run are answered first, with what
    # is wrong with them; then the other calls are made
    decisions: list[Event] = [
        SystemNoteAdded(
            reason="tool_error",
            content=f"Not finished: {problem}.",
            call_id=call.id,
            tool=FINISH_TOOL.name,
        )
        for call in finishes
    ]
    after = fold(decisions, state)
    for call in calls:
        if call not in finishes:
            made = _tool_call(after, call.name, call.args, call_id=call.id)
            decisions += made
            after = fold(made, after)
    if after.calls or after.approvals:
        return decisions
    return _continue(state, decisions)


def _native_finish(
    reply: LlmResponded, state: Run, finish: ToolCall
) -> list[Event] | str:
    """A lone call of the `FINISH_TOOL` (revision 3): the decisions that end
    the run with its ``output`` (else the reply's text, else the output set
    so far) and ``metadata``, as a ``json`` finish does; or what is wrong
    with it, answered to the model as a tool error."""
    output, metadata = finish.args.get("output"), finish.args.get("metadata")
    if output is not None and not isinstance(output, str):
        return "finish's `output` must be a string"
    if metadata is not None and not isinstance(metadata, dict):
        return "finish's `metadata` must be a JSON object"
    done = [] if not output else [OutputUpdated(text=output, mode="replace")]
    final = fold(done, state).output or reply.text
    if not final:
        return "finish needs an `output`: your final answer"
    return [*done, RunCompleted(output=final, metadata=metadata or {})]


def _on_tool_result(result: ToolResulted, state: Run) -> list[Event]:
    call = _find(state.calls, result.request_id)
    assert call is not None
    after = evolve(state, result)
    if _will_retry(state, call, result):
        retry = ToolRequested(
            request_id=f"{state.run_id}/tool/{state.tool_requests + 1}",
            name=call.name,
            args=call.args,
            attempt=call.attempt + 1,
            call_id=call.call_id,
        )
        return [retry]
    if not result.ok and result.retryable:
        return _stopped(
            state,
            f"tool {call.name} failed after {call.attempt} attempt(s): "
            f"{result.error or 'unknown error'}",
        )
    if after.calls or after.approvals:
        return []
    # from revision 5 a failed call of the batch is followed up whichever
    # result came last (before, only when the last one had failed)
    failed = after.batch_failed if state.settings.revision >= 5 else not result.ok
    if failed and after.settings.policy == "staged":
        return _corrected(after, [], "recovery/tool_failure")
    return _continue(after, [])


def _on_staged_reply(reply: LlmResponded, state: Run) -> list[Event]:
    """A staged run's model answered (``state`` is after its answer): call
    the tools its stage offers (refusing the others, naming those it does),
    recover from an empty reply or one asking the user for files, move on
    to the delivery check with an answer, deliver it once it is done, and
    end after QA with the delivered answer, whatever QA says."""
    stage = state.stage
    said = staged.reading(reply.text, stage)
    decisions: list[Event] = []
    if said.outcome is not None and stage != "qa_review":
        outcome = said.outcome
        decisions.append(
            ReasoningRecorded(
                stage=stage,
                plan_delta=outcome.plan_delta,
                next_action=outcome.next_action,
                known_risks=outcome.known_risks,
                delivery_state=outcome.delivery_state,
            )
        )
    elif stage == "warmup":  # planned without a block: on to act all the same
        decisions.append(ReasoningRecorded(stage=stage))
    if reply.tool_calls:
        allowed = staged.stage_policy(state.settings, stage).tools
        after = fold(decisions, state)
        for call in reply.tool_calls:
            if call.name in allowed:
                made = _tool_call(after, call.name, call.args, call_id=call.id)
            else:
                names = ", ".join(allowed) or "none"
                made = [
                    SystemNoteAdded(
                        reason="tool_error",
                        content=f"{call.name} is not a tool of the {stage} stage; "
                        f"the tools you may call here: {names}.",
                        call_id=call.id,
                        tool=call.name,
                    )
                ]
            decisions += made
            after = fold(made, after)
        if after.calls or after.approvals:
            return decisions
        return _continue(state, decisions)
    if stage == "warmup":
        return _continue(state, decisions)
    # from revision 6 a delivery check that answers only its verdict
    # ("Delivery: DONE") delivers the act stage's answer
    verdict = said.done and stage == "delivery_check" and state.settings.revision >= 6
    if said.empty and not verdict:
        return _corrected(state, decisions, "recovery/empty_response")
    if stage == "qa_review":
        assert state.delivered is not None
        report = QaReported(report=said.report or {})
        return [*decisions, report, RunCompleted(output=state.delivered)]
    if stage in staged.ACTING:
        if said.asks_for_files:
            return _corrected(state, decisions, "recovery/asks_for_files")
        draft = OutputUpdated(text=said.visible, mode="replace")
        return _continue(state, [*decisions, draft])
    # the delivery check
    if not said.done or not (said.visible or state.output):
        return _corrected(state, decisions, "stages/delivery_gate")
    delivered = AnswerDelivered(output=said.visible or state.output)
    if state.settings.qa:
        return _continue(state, [*decisions, delivered])
    return [*decisions, delivered, RunCompleted(output=delivered.output)]


def _corrected(state: Run, decisions: list[Event], name: str) -> list[Event]:
    """``decisions``, then the stage's correction ``name`` told to the model
    and the next call; past `staged.MAX_RECOVERIES` of them (from revision 5
    since the run entered its stage; before, in the whole run), the run's
    end."""
    limit = staged.MAX_RECOVERIES
    per_stage = state.settings.revision >= 5
    if (state.stage_recoveries if per_stage else state.recoveries) >= limit:
        why = name.rpartition("/")[2].replace("_", " ")
        where = f" in its {state.stage} stage" if per_stage else ""
        reason = (
            f"a staged run took {limit} recoveries and corrections{where}, and "
            f"needed another: {why}"
        )
        return [*decisions, *_stopped(state, reason)]
    return _continue(state, [*decisions, _recovery(state, name)])


def _stopped(state: Run, reason: str) -> list[Event]:
    """The end of a run a limit or a failure stops: failed for ``reason``;
    but a staged run whose answer was delivered completes with it, as
    nothing after its delivery (QA, a retry) takes it back (spec 004 §2.5)."""
    if state.delivered is not None:
        return [RunCompleted(output=state.delivered)]
    return [RunFailed(reason=reason)]


def _recovery(state: Run, name: str) -> SystemNoteAdded:
    """The stage's correction ``name``, its variables filled."""
    tools = staged.stage_policy(state.settings, state.stage).tools
    values = staged.variables(
        state.settings, state.conversation, state.transcript, tools
    )
    if name == "recovery/tool_failure":  # the failure, whichever came last
        values["last_step_outcome"] = staged.last_failure(state.transcript)
    text = interpolate(state.settings.prompts.get(name, ""), values)
    if name == "stages/delivery_gate":
        return SystemNoteAdded(reason="delivery_gate", content=text.strip())
    return SystemNoteAdded(reason="recovery", content=text.strip())


def _on_approval(decision: ApprovalDecided, state: Run) -> list[Event]:
    call = _find(state.approvals, decision.request_id)
    assert call is not None
    decisions: list[Event] = []
    if len(state.approvals) == 1:
        reason = "approved" if decision.approved else "denied"
        decisions.append(RunResumed(reason=reason))
    if decision.approved:
        request = ToolRequested(
            request_id=call.request_id,
            name=call.name,
            args=call.args,
            call_id=call.call_id,
        )
        return [*decisions, request]
    after = fold(decisions, evolve(state, decision))
    if after.calls or after.approvals:
        return decisions
    return [*decisions, *_next_call(after, [])]


# -- commands -------------------------------------------------------------------


def _tool_call(
    state: Run, name: str, args: dict[str, Any], call_id: str | None = None
) -> list[Event]:
    spec = _tool(state, name)
    if spec is None:
        offered = state.offered or state.settings.tools  # native, else json
        known = ", ".join(sorted(t.name for t in offered)) or "none"
        note = SystemNoteAdded(
            reason="tool_error",
            content=f"Unknown tool {name!r}. Available tools: {known}.",
            call_id=call_id,
            tool=name,
        )
        return [note] if call_id is not None else _continue(state, [note])
    request_id = f"{state.run_id}/tool/{state.tool_requests + 1}"
    if spec.requires_approval:
        return [
            ApprovalRequested(
                request_id=request_id, name=name, args=args, call_id=call_id
            )
        ]
    return [ToolRequested(request_id=request_id, name=name, args=args, call_id=call_id)]


def _send_message(state: Run, message: str) -> list[Event]:
    sent = MessageSent(text=message)
    finishes = (
        state.kind == "subagent"
        or message == state.last_message
        or message.rstrip().endswith("?")
        or _QUESTION.search(message) is not None
        or (state.tool_calls == 0 and state.output_updates == 0 and not state.output)
        or state.tool_failed
    )
    if finishes:
        return [sent, RunCompleted(output=state.output or message, reason="message")]
    return _continue(state, [sent])


def _finish(state: Run, command: dict[str, Any]) -> list[Event]:
    decisions: list[Event] = []
    if command.get("output") is not None:
        decisions.append(
            OutputUpdated(text=text_field(command, "output"), mode=mode_field(command))
        )
    after = fold(decisions, state)
    metadata = command.get("metadata") if state.settings.revision >= 2 else None
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidCommand("a finish's `metadata` must be a JSON object")
    done = RunCompleted(output=after.output, reason="finish", metadata=metadata or {})
    return [*decisions, done]


def _spawn(state: Run, subagents: list[Any]) -> list[Event]:
    children = []
    for n, sub in enumerate(subagents, start=state.spawned + 1):
        if isinstance(sub, str):
            sub = {"task": sub}
        if not isinstance(sub, dict):
            raise InvalidCommand("each subagent must be an object with a `task`")
        task = next(
            (sub[k] for k in ("task", "input", "prompt", "message") if k in sub), None
        )
        if not isinstance(task, str) or not task:
            raise InvalidCommand("each subagent needs a `task` string")
        profile = sub.get("profile")
        known = state.settings.profiles
        if profile is not None and known is not None and profile not in known:
            raise InvalidCommand(
                f"a subagent's `profile` {profile!r} is not an agent profile; "
                f"known profiles: {', '.join(known) or 'none'}"
            )
        tools = sub.get("tools")
        children.append(
            SubagentSpec(
                run_id=f"{state.run_id}-{n}",
                input_text=task,
                profile=profile,
                allowed_tools=tuple(tools) if isinstance(tools, list) else None,
            )
        )
    return [SubagentsSpawned(children=tuple(children))]


def _sleep(state: Run, command: dict[str, Any], now: float) -> RunSlept:
    timer_id = f"{state.run_id}/wake/{state.sleeps + 1}"
    reason = str(command.get("reason", ""))
    if (cron := command.get("cron")) is not None:
        if not isinstance(cron, str) or not cron_valid(cron):
            raise InvalidCommand(f"`cron` {cron!r} is not a valid cron expression")
        wake = next_firing(cron, now)
        return RunSlept(timer_id=timer_id, wake_at=wake, reason=reason, cron=cron)
    if (delay := command.get("delaySeconds")) is not None:
        if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
            raise InvalidCommand("`delaySeconds` must be a number of seconds >= 0")
        return RunSlept(timer_id=timer_id, wake_at=now + float(delay), reason=reason)
    if (wake_at := command.get("wakeAt")) is not None:
        return RunSlept(timer_id=timer_id, wake_at=timestamp(wake_at), reason=reason)
    raise InvalidCommand("`sleep` needs `wakeAt`, `delaySeconds` or `cron`")


# -- the loop -------------------------------------------------------------------


def _continue(state: Run, decisions: list[Event]) -> list[Event]:
    """``decisions``, then the next model call (or the limit that stops it)."""
    return [*decisions, *_next_call(fold(decisions, state), decisions)]


def _next_call(state: Run, decisions: list[Event]) -> list[Event]:
    """The next model call from ``state``, or the limit that stops the loop.

    The request's prompt hash is left empty: `decide_and_fold` hashes the
    prompt built from the state after the whole step into it.
    """
    rounds = state.settings.max_tool_call_rounds
    if state.settings.revision >= 4 and state.rounds >= rounds:
        return _stopped(state, _loop_limit(rounds))
    limit = state.settings.max_iterations
    # a staged run completes only with an answer its delivery check passed;
    # its recoveries, not the stall count, bound the replies that make none
    if state.settings.policy == "staged":
        if state.iteration >= limit:
            return _stopped(state, _out_of_calls(limit))
    elif state.iteration >= limit:
        return [RunCompleted(output=_fallback(state, limit), reason="max_iterations")]
    elif state.stall >= max(min(5, limit - 1), 1):
        said = _stalled(state) if state.settings.revision >= 6 else None
        return [RunCompleted(output=_fallback(state, limit, said), reason="stalled")]
    if not state.budget_lifted and (spent := _spent_budget(state)) is not None:
        return spent
    request = LlmRequested(
        request_id=f"{state.run_id}/llm/{state.iteration + 1}",
        iteration=state.iteration + 1,
        prompt_hash="",
        priority="subagent" if state.kind == "subagent" else "interactive",
    )
    if state.settings.policy == "staged":
        stage = staged.stage_policy(state.settings, state.next_stage)
        entered = StageEntered(
            stage=stage.stage,
            mode=stage.mode,
            reasoning=stage.reasoning,
            tools=stage.tools,
            prompts=stage.prompts,
        )
        return [*_compressed(state), entered, request]
    return [request]


def _out_of_calls(limit: int) -> str:
    return (
        f"a staged run made {limit} model calls, the most a run makes "
        f"(max_iterations), and delivered no answer"
    )


def _compressed(state: Run) -> list[Event]:
    """A staged run's summary of the entries that left its window since the
    last one, if any did (spec 004 §7: by the window's entry and token
    limits, so the same at every replay)."""
    start = window_start(state)
    if start <= state.summarized:
        return []
    goal = staged.user_input(state.conversation)
    text = staged.summary(goal, state.transcript[:start], state.plans)
    return [ContextCompressed(summary=text, upto=start)]


def _loop_limit(rounds: int) -> str:
    return (
        f"tool-call loop limit reached: the model asked for tools in {rounds} "
        f"rounds, the most a run makes (max_tool_call_rounds)"
    )


def _spent_budget(state: Run) -> list[Event] | None:
    """The decisions for a spent budget, or ``None`` while it lasts."""
    settings = state.settings
    if settings.token_budget is None and settings.cost_budget_usd is None:
        return None  # most runs have no budget: nothing to build
    exceeded: BudgetExceeded | None = None
    request_id = f"{state.run_id}/budget/{state.iteration + 1}"
    tokens = state.input_tokens + state.output_tokens
    if settings.token_budget is not None and tokens >= settings.token_budget:
        exceeded = BudgetExceeded(
            request_id=request_id,
            kind="tokens",
            used=tokens,
            limit=settings.token_budget,
            policy=settings.budget_policy,
        )
    elif (
        settings.cost_budget_usd is not None
        and state.cost_usd >= settings.cost_budget_usd
    ):
        exceeded = BudgetExceeded(
            request_id=request_id,
            kind="cost",
            used=state.cost_usd,
            limit=settings.cost_budget_usd,
            policy=settings.budget_policy,
        )
    if exceeded is None:
        return None
    if exceeded.policy == "pause":
        return [exceeded]
    spent = f"{exceeded.kind} budget spent: {exceeded.used:g} of {exceeded.limit:g}"
    return [exceeded, *_stopped(state, spent)]


def _fallback(state: Run, limit: int, said: str | None = None) -> str:
    """What a run that stops unfinished answers: its output, else its last
    message, else ``said`` (or that ``limit`` steps were not enough)."""
    if state.output:
        return state.output
    if state.last_message:
        return state.last_message
    return said or f"I could not finish this within {limit} steps."


def _stalled(state: Run) -> str:
    """Why a run stalled, in its own counts (revision 6)."""
    calls = "call" if state.iteration == 1 else "calls"
    return (
        f"I could not finish this: I stopped after {state.iteration} model "
        f"{calls}, the last {state.stall} in a row making no progress (no tool "
        "call, message or answer)."
    )


def _invalid_reply(state: Run, problem: str) -> list[Event]:
    retries = state.settings.max_json_retries
    if state.invalid_replies >= retries:
        return [
            RunFailed(
                reason=f"the model's reply was not a valid command after {retries} "
                f"retr{'y' if retries == 1 else 'ies'}: {problem}"
            )
        ]
    note = SystemNoteAdded(
        reason="invalid_command",
        content=f"Your last reply was not a valid command: {problem}. Reply with "
        'exactly one JSON object, for example {"type": "finish", "output": "..."}.',
    )
    return _continue(state, [note])


def _will_retry(state: Run, call: PendingCall, result: ToolResulted) -> bool:
    if result.ok or not result.retryable:
        return False
    spec = _tool(state, call.name)
    limit = state.settings.max_tool_retries
    if spec is not None and spec.max_retries is not None:
        limit = spec.max_retries
    return call.attempt <= limit


# -- small helpers --------------------------------------------------------------


def _find(calls: tuple[PendingCall, ...], request_id: str) -> PendingCall | None:
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


def _tool(state: Run, name: str) -> ToolSpec | None:
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


def _conversation(created: RunCreated) -> tuple[ChatMessage, ...]:
    """The conversation a run starts from: the given one, or just its input."""
    return created.conversation or (
        ChatMessage(role="user", content=created.input_text),
    )


def child_created(parent: RunCreated, spec: SubagentSpec, at: float) -> RunCreated:
    """The ``RunCreated`` that starts child ``spec`` of ``parent``."""
    settings = parent.settings
    if spec.allowed_tools is not None:
        allowed = set(spec.allowed_tools)
        settings = replace(
            settings, tools=tuple(t for t in settings.tools if t.name in allowed)
        )
    limit = settings.subagent_conversation_limit
    history = _conversation(parent)[-limit:] if limit > 0 else ()
    return RunCreated(
        run_id=spec.run_id,
        input_text=spec.input_text,
        settings=settings,
        conversation=(*history, ChatMessage(role="user", content=spec.input_text)),
        agent_id=parent.agent_id,
        channel_id=parent.channel_id,
        user_id=parent.user_id,
        context_id=parent.context_id,
        parent_run_id=parent.run_id,
        root_run_id=parent.root_run_id or parent.run_id,
        reply_to=f"run.{parent.run_id}",
        kind="subagent",
        profile=spec.profile or parent.profile,
        allowed_tools=spec.allowed_tools,
        workspace=parent.workspace,  # a workflow phase's subagents share its tree
        at=at,
    )


__all__ = [
    "JSON_PROTOCOL",
    "KNOWN_COMMANDS",
    "PendingCall",
    "Run",
    "Step",
    "ToolCall",
    "build_prompt",
    "child_created",
    "decide",
    "decide_and_fold",
    "evolve",
    "fold",
    "initial",
    "parse_command",
]
