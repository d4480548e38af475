"""The run actor: Clifford's run processor as a pure decider.

A run answers one input with a loop of model calls. In the ``json`` protocol
each reply is one JSON command (tool_call, send_message, set_output, finish,
decision, note, spawn_subagent(s), sleep); in the ``native`` protocol the model
returns tool calls and the run ends on a reply without any. Everything here is
pure: ids are derived from the run id and counters, times arrive on inputs.

The state, ``initial`` and its fold are in `steward.actors.run.state`; here,
``decide`` and the helpers that turn a reply into decisions. A reply's JSON
command is parsed in `steward.actors.run.commands`, the prompt is built in
`steward.actors.run.prompt`.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import msgspec

from steward.actors.cron import next_firing
from steward.actors.cron import valid as cron_valid
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
    window_start,
)
from steward.actors.run.stages import interpolate
from steward.actors.run.state import (
    PendingCall,
    Run,
    child_of,
    conversation_of,
    evolve,
    find_call,
    fold,
    initial,
    tool_spec,
    will_retry,
)
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
    WakeDue,
)

replace = msgspec.structs.replace

_GATED = frozenset({"tool_call", "set_output", "finish"})
_QUESTION = re.compile(r"bitte|please|could you|can you", re.IGNORECASE)


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
        case ToolResulted(request_id=rid), "running" | "waiting" if find_call(
            state.calls, rid
        ):
            return _on_tool_result(input, state)
        case ApprovalDecided(request_id=rid), "waiting" if rid == state.budget_hold:
            if not input.approved:
                return _stopped(state, f"budget spent; denied: {input.reason}")
            resumed = RunResumed(reason="budget approved")
            after = evolve(evolve(state, input), resumed)
            return [resumed, *_next_call(after, [])]
        case ApprovalDecided(request_id=rid), "running" | "waiting" if find_call(
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
    call = find_call(state.calls, result.request_id)
    assert call is not None
    after = evolve(state, result)
    if will_retry(state, call, result):
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
    call = find_call(state.approvals, decision.request_id)
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
    spec = tool_spec(state, name)
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


def child_created(parent: RunCreated, spec: SubagentSpec, at: float) -> RunCreated:
    """The ``RunCreated`` that starts child ``spec`` of ``parent``."""
    settings = parent.settings
    if spec.allowed_tools is not None:
        allowed = set(spec.allowed_tools)
        settings = replace(
            settings, tools=tuple(t for t in settings.tools if t.name in allowed)
        )
    limit = settings.subagent_conversation_limit
    history = conversation_of(parent)[-limit:] if limit > 0 else ()
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
