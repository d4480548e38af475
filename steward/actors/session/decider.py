"""The session decider: one chat's messages turned into turns (pure).

Spec 003 (Klaw's engine main loop), as an actor. Every message goes to its
chat's session stream. A command (``/`` and a name: `is_command`) is answered at
once, without a model call. Any other message is buffered and (re)starts the
debounce timer: when the chat has been quiet for ``debounce_seconds``, the
buffered messages, merged in order, start a turn (a run whose result comes
back as `ChildFinished` through its ``reply_to``). A message that arrives
while a turn runs waits for it: the next turn starts when the reply is in
and the debounce timer has come due.

``/new`` starts a segment: later turns' windows show only messages from
there on; the log keeps every message. A superseded debounce timer still
fires, and its `WakeDue` is refused here.

A turn's tools may start subagents (`SubagentAsked`) and keep cron
schedules (`ScheduleAsked`); each schedule firing starts one too. A
subagent is a run of its own answering the session; its answer goes to the
chat (`SubagentAnswered`) unless it is ``{"silent": true}`` (`is_silent`).
A schedule's next firing is computed from the time the input records
(never the clock; `steward.actors.cron`). The state and its fold are in
`steward.actors.session.state`.
"""

from __future__ import annotations

from typing import Literal

from steward.actors.cron import next_firing
from steward.actors.prompt import prompt_hash
from steward.actors.run.state import run_stream
from steward.actors.session.events import (
    CommandAnswered,
    ContextCompacted,
    CoreMemoryChanged,
    CoreMemorySet,
    DebounceArmed,
    MemoryWriteFailed,
    MemoryWritten,
    MessageReceived,
    MessageRefused,
    ModelSwitched,
    ModeSwitched,
    ReasoningSwitched,
    ReplySent,
    Schedule,
    ScheduleAsked,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SegmentStarted,
    SessionOpened,
    SubagentAnswered,
    SubagentAsked,
    SubagentStarted,
    TurnStarted,
)
from steward.actors.session.memory import write
from steward.actors.session.state import (
    Session,
    command_parts,
    commands,
    core_memory_text,
    core_set_problem,
    direct_call,
    direct_prompt,
    evolve,
    is_command,
    is_silent,
    refusal_of,
    schedule_problem,
    subagent_problem,
    switchable,
    window_turns,
    writer_id,
    writer_request,
)
from steward.events.base import Event
from steward.events.protocol import (
    ChildFinished,
    EffectClaimed,
    LlmAttemptFailed,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    LlmStreamRecorded,
    WakeDue,
)
from steward.isotime import duration, iso_time

__all__ = ["decide", "staged_switches"]


def decide(input: Event, state: Session) -> list[Event] | None:
    """The decisions for ``input``; ``None`` refuses it (a session not open
    yet, a message taken already, a superseded debounce timer, a result of
    no turn or subagent in flight, a subagent or schedule its ``*_problem``
    finds fault with)."""
    if isinstance(input, SessionOpened):
        return [] if not state.session_id else None
    if not state.session_id:
        return None
    match input:
        case MessageReceived(message_id=message_id) if message_id in state.seen:
            return None  # delivered again: taken once
        case MessageReceived() if (refusal := refusal_of(input, state)) is not None:
            return [MessageRefused(message_id=input.message_id, reply=refusal)]
        case MessageReceived(text=text) if is_command(text, state.revision):
            return _command(input, state)
        case MessageReceived(at=at):
            timer_id = f"{state.session_id}/debounce/{state.timers + 1}"
            due = at + state.settings.debounce_seconds
            return [DebounceArmed(timer_id=timer_id, due=due)]
        case WakeDue(timer_id=timer_id) if timer_id == state.timer:
            if state.turn is not None or not state.buffer:
                return []  # the turn in flight starts the next one
            return _turn(state)
        case WakeDue(timer_id=timer_id, at=at) if timer_id.startswith(
            f"{state.session_id}/schedule/"
        ):
            return _fire(state, timer_id, at)
        case SubagentAsked(name=name, task=task, model=model):
            if subagent_problem(state, name, task, model) is not None:
                return None
            return [_subagent(state, name, task, model)]
        case ScheduleAsked(name=name, cron=None):
            if schedule_problem(state, name, None, "", None) is not None:
                return None
            return [ScheduleDeleted(name=name)]
        case ScheduleAsked(name=name, cron=str(cron), task=task, model=model, at=at):
            if schedule_problem(state, name, cron, task, model) is not None:
                return None
            timer_id = f"{state.session_id}/schedule/{state.schedule_timers + 1}"
            schedule = Schedule(
                name=name,
                cron=cron,
                task=task,
                model=model,
                timer_id=timer_id,
                due=next_firing(cron, at),
            )
            return [ScheduleCreated(schedule=schedule)]
        case ChildFinished(stream=child) as result if any(
            run_stream(run_id) == child for run_id, _ in state.subagents
        ):
            run_id, name = next(s for s in state.subagents if run_stream(s[0]) == child)
            if result.status != "completed":
                text = f"(subagent {name} {result.status}: {result.output})"
                silent = False
            else:
                text, silent = result.output, is_silent(result.output)
            return [
                SubagentAnswered(
                    run_id=run_id,
                    name=name,
                    text=text,
                    status=result.status,
                    silent=silent,
                )
            ]
        case ChildFinished(stream=child) as result if state.turn is not None and (
            child == run_stream(state.turn)
        ):
            text = result.output
            if result.status != "completed":
                text = f"(the turn {result.status}: {result.output})"
            outcome = result.outcome if state.revision >= 4 else ""
            reply = ReplySent(
                run_id=state.turn, text=text, status=result.status, outcome=outcome
            )
            return _replied(state, reply)
        case LlmResponded(request_id=rid, text=text) if rid == direct_call(state):
            assert state.turn is not None
            return _replied(state, ReplySent(run_id=state.turn, text=text))
        case LlmFailed(request_id=rid) if rid == direct_call(state):
            assert state.turn is not None
            failure = f"the model call failed: {input.kind}: {input.message}"
            text = f"(the turn failed: {failure})"
            return _replied(
                state, ReplySent(run_id=state.turn, text=text, status="failed")
            )
        case CoreMemorySet(request_id=rid, key=key, value=value):
            if core_set_problem(state, key, value) is not None:
                return None
            return [CoreMemoryChanged(request_id=rid, key=key, value=value)]
        case LlmResponded(request_id=rid, text=text, at=at) if rid == state.writer:
            written = write(state.memory, text, at=at, next_id=state.memory_ids + 1)
            if written.error is not None:
                return _written(
                    state, MemoryWriteFailed(request_id=rid, reason=written.error)
                )
            return _written(
                state,
                MemoryWritten(
                    request_id=rid,
                    applied=written.applied,
                    rejected=written.rejected,
                    items=written.items,
                    summary=written.summary,
                ),
            )
        case LlmFailed(request_id=rid) if rid == state.writer:
            reason = f"the model call failed: {input.kind}: {input.message}"
            return _written(state, MemoryWriteFailed(request_id=rid, reason=reason))
        case LlmAttemptFailed(request_id=rid) | LlmStreamRecorded(request_id=rid) if (
            rid in (state.writer, direct_call(state))
        ):
            return []  # recorded for people; changes nothing
        case EffectClaimed() if state.outstanding.accepts(input):
            return []
        case _:
            return None


def _written(state: Session, ended: MemoryWritten | MemoryWriteFailed) -> list[Event]:
    """The memory writer's call ended, and from revision 1 the compaction
    that waited for it, if the window holds too many turns and no turn is
    in flight (else the turn's end compacts: its message stays in the
    window until then)."""
    if state.revision < 1:
        return [ended]
    after = evolve(state, ended)
    if (
        after.turn is None
        and window_turns(after) > state.settings.max_turns_per_context
    ):
        return [ended, *_compact(after)]
    return [ended]


def _compact(state: Session) -> list[Event]:
    """The window's older half leaves it, for the memory writer. Before
    revision 1, while a writer's call was in flight, the half only left;
    since, no compaction is decided then (`_replied`, `_written`). From
    revision 3 the half ends before a question (`_older_half`)."""
    dropped = _older_half(state)
    newer = state.messages[dropped:]
    kept = sum(1 for m in newer if m.role == "user")
    if state.writer is not None:
        return [ContextCompacted(dropped=dropped, kept=kept)]
    compacted = ContextCompacted(
        dropped=dropped, kept=kept, request_id=writer_id(state)
    )
    return [compacted, writer_request(evolve(state, compacted))]


def _older_half(state: Session) -> int:
    """How many of the window's messages a compaction drops: half of them;
    from revision 3 up to the first question at or after the middle (else
    the last before it), so the window left starts with a question, never
    with an answer whose question left."""
    messages = state.messages
    half = len(messages) // 2
    if state.revision < 3:
        return half
    questions = [n for n, m in enumerate(messages) if n > 0 and m.role == "user"]
    after = [n for n in questions if n >= half]
    return after[0] if after else questions[-1] if questions else len(messages)


def _subagent(
    state: Session, name: str, task: str, model: str | None, schedule: str | None = None
) -> SubagentStarted:
    """Subagent ``name`` on ``task``, as the session's next one."""
    return SubagentStarted(
        run_id=f"{state.session_id}-s{state.spawned + 1}",
        name=name,
        task=task,
        model=model or state.settings.subagent_model or state.model,
        schedule=schedule,
    )


def _fire(state: Session, timer_id: str, at: float) -> list[Event]:
    """A schedule timer came due: the schedule's subagent starts and its
    next firing is armed (once, however many firings a stopped host
    missed); the timer of a deleted or replaced schedule does nothing."""
    schedule = next((s for s in state.schedules if s.timer_id == timer_id), None)
    if schedule is None:
        return []
    fired = ScheduleFired(
        name=schedule.name,
        timer_id=f"{state.session_id}/schedule/{state.schedule_timers + 1}",
        due=next_firing(schedule.cron, max(at, schedule.due)),
    )
    return [
        fired,
        _subagent(state, schedule.name, schedule.task, schedule.model, schedule.name),
    ]


def _replied(state: Session, reply: ReplySent) -> list[Event]:
    """The turn in flight answered: its reply, a compaction when the window
    holds too many turns, and the next turn when messages wait for it."""
    decisions: list[Event] = [reply]
    after = evolve(state, reply)
    if window_turns(after) > state.settings.max_turns_per_context and (
        after.writer is None or after.revision < 1  # else once the writer ends
    ):
        decisions += _compact(after)
        for decision in decisions[1:]:
            after = evolve(after, decision)
    if after.buffer and after.timer is None:
        decisions += _turn(after)
    return decisions


def _turn(state: Session) -> list[Event]:
    """The buffered messages, merged in order, as the next turn: a run, or in
    a direct chat the session's own model call."""
    direct = state.settings.direct
    turn = TurnStarted(
        run_id=f"{state.session_id}-t{state.turns + 1}",
        message_ids=tuple(m.message_id for m in state.buffer),
        text="\n".join(m.text for m in state.buffer),
        sender=next((m.sender for m in reversed(state.buffer) if m.sender), None),
        direct=direct,
    )
    if not direct:
        return [turn]
    after = evolve(state, turn)
    ask = LlmRequested(
        request_id=f"{turn.run_id}/llm",
        iteration=1,
        prompt_hash=prompt_hash(direct_prompt(after)),
    )
    return [turn, ask]


def _command(input: MessageReceived, state: Session) -> list[Event]:
    """A command's answer (and the change it makes), never a model call."""
    name, arg = command_parts(input.text, state.revision)
    changes: list[Event] = []
    match name:
        case "/new":
            changes.append(SegmentStarted(segment=state.segment + 1, at=input.at))
            reply = (
                f"Segment {state.segment + 1} started: later turns see only "
                "messages from here on (the log keeps every earlier one)."
            )
        case "/model" if not arg:
            reply = f"model: {state.model}"
        case "/model":
            names = [m.name for m in state.settings.models]
            if arg not in names:
                reply = f"unknown model {arg!r}; configured models: " + (
                    ", ".join(names) or "none"
                )
            else:
                changes.append(ModelSwitched(model=arg))
                reply = f"model switched to {arg}"
        case "/models":
            reply = _models(state)
        case "/memory":
            reply = core_memory_text(state) or "core memory is empty"
        case "/status":
            reply = _status(input, state)
        case "/mode" | "/reasoning" if switchable(state):
            reply = _switch(state, name, arg, changes)
        case "/help":
            reply = "commands:\n" + "\n".join(
                f"{c} - {what}" for c, what in commands(state)
            )
        case _:
            known = ", ".join(c.split()[0] for c, _ in commands(state))
            reply = f"unknown command {name}; commands: {known}"
    answer = CommandAnswered(message_id=input.message_id, command=name, reply=reply)
    return [*changes, answer]


def staged_switches(state: Session) -> tuple[Literal["agent", "chat"], bool]:
    """The mode and reasoning switch the session's staged turns run with:
    as the user set them (``/mode``, ``/reasoning``), else the profile's."""
    run = state.settings.run
    reasoning = run.reasoning if state.reasoning is None else state.reasoning
    return state.mode or run.mode, reasoning


def _switch(state: Session, name: str, arg: str, changes: list[Event]) -> str:
    """``/mode`` or ``/reasoning``: its answer, and into ``changes`` the
    switch it sets, if it sets one."""
    mode, reasoning = staged_switches(state)
    if name == "/mode":
        if not arg:
            return f"mode: {mode}"
        if arg not in ("agent", "chat"):
            return f"unknown mode {arg!r}; modes: agent, chat"
        changes.append(ModeSwitched(mode="agent" if arg == "agent" else "chat"))
        return f"mode set to {arg}: later turns run in it"
    if not arg:
        return f"reasoning: {'on' if reasoning else 'off'}"
    if arg not in ("on", "off"):
        return f"unknown reasoning switch {arg!r}; use on or off"
    changes.append(ReasoningSwitched(reasoning=arg == "on"))
    return f"reasoning {arg}: later turns run with it {arg}"


def _models(state: Session) -> str:
    settings = state.settings
    if not settings.models:
        return f"{state.model} (the only model; no [models] configured)"
    lines = []
    for model in settings.models:
        budget = model.context_budget or settings.default_budget_tokens
        mark = " (current)" if model.name == state.model else ""
        lines.append(f"{model.name}: context budget {budget} tokens{mark}")
    return "\n".join(lines)


def _status(input: MessageReceived, state: Session) -> str:
    waiting = "unknown" if input.llm_waiting is None else str(input.llm_waiting)
    if input.host_since is None and state.revision < 2:  # as it was recorded
        uptime = (
            f"uptime {duration(input.at - state.opened_at)} "
            f"(open since {iso_time(state.opened_at)})"
        )
    elif input.host_since is None:
        uptime = (
            "uptime unknown (the process that took this message hosts no model "
            f"calls); the session open since {iso_time(state.opened_at)}"
        )
    else:
        uptime = (
            f"uptime {duration(input.at - input.host_since)} "
            f"(hosting since {iso_time(input.host_since)}; the session open "
            f"since {iso_time(state.opened_at)})"
        )
    return (
        f"{uptime}\n"
        f"model {state.model}\n"
        f"segment {state.segment} since {iso_time(state.segment_at)}\n"
        f"model calls waiting {waiting}\n"
        f"turn in flight {state.turn or 'none'}"
    )
