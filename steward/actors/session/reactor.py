"""What a session's committed decisions ask of the host, as effect values
(pure): its debounce and schedule timers, each turn's run and each
subagent's (created with their context and answering the session through
``reply_to``), and the memory writer's model call (`model_call`, its prompt
rebuilt from the state)."""

from __future__ import annotations

from msgspec.structs import replace

from steward.actors.effects import (
    ArmTimer,
    Create,
    Effect,
    ModelCall,
    Pending,
    Told,
    Want,
    WantKind,
    notify_key,
    spawn_key,
)
from steward.actors.prompt import Prompt, PromptCache
from steward.actors.run.events import RunCreated
from steward.actors.run.state import run_id_of, run_stream
from steward.actors.session.context import build_context
from steward.actors.session.decider import staged_switches
from steward.actors.session.events import (
    CommandAnswered,
    DebounceArmed,
    MessageRefused,
    ReplySent,
    ScheduleCreated,
    ScheduleFired,
    SessionOpened,
    SubagentAnswered,
    SubagentStarted,
    TurnStarted,
)
from steward.actors.session.memory import writer_prompt
from steward.actors.session.state import (
    Session,
    core_memory_text,
    cross_channel,
    direct_prompt,
    model_id,
)
from steward.events import Event, Recorded
from steward.events.protocol import ChatMessage, ChildFinished, LlmRequested, WakeDue

__all__ = [
    "ROUTED",
    "TOLD",
    "correlation",
    "detach",
    "effects",
    "model_call",
    "pending",
    "subagent_run",
    "turn_run",
    "tells",
]

ROUTED: frozenset[type[Event]] = frozenset(
    {DebounceArmed, TurnStarted, SubagentStarted, ScheduleCreated, ScheduleFired}
)

SESSION_TOOLS = frozenset(
    {"subagent_spawn", "schedule.create", "schedule.list", "schedule.delete"}
)
"""Tools of a session's turns that its subagents do not get: a subagent
starts no subagents and sets no schedules."""


def effects(rec: Recorded, at: Session, latest: Session) -> list[Effect]:
    """What committed event ``rec`` asks for, given the session's state at it."""
    match rec.event:
        case (
            DebounceArmed(timer_id=timer_id, due=due)
            | ScheduleFired(timer_id=timer_id, due=due)
        ):
            return [ArmTimer(timer_id=timer_id, due=due)]
        case ScheduleCreated(schedule=schedule):
            return [ArmTimer(timer_id=schedule.timer_id, due=schedule.due)]
        # A run whose result the session holds already (a fork copies history,
        # results included) is never started again.
        case SubagentStarted(run_id=run_id) if any(
            r == run_id for r, _ in latest.subagents
        ):
            return [
                Create(
                    key=spawn_key(run_id),
                    stream=run_stream(run_id),
                    input=subagent_run(at, rec.event, rec.stream),
                    stamp=True,
                )
            ]
        case TurnStarted(run_id=run_id, direct=False) if latest.turn == run_id:
            return [
                Create(
                    key=spawn_key(run_id),
                    stream=run_stream(run_id),
                    input=turn_run(at, rec.event, rec.stream),
                    stamp=True,
                )
            ]
        case _:
            return []


def turn_run(state: Session, turn: TurnStarted, stream: str) -> RunCreated:
    """The run of ``turn``, given the session's state just after it: its
    conversation is the context (spec 003: core memory, summary, the window
    of earlier messages), then the turn's merged messages, what the model
    answers; a staged run in the mode and with the reasoning switch the
    user set (`staged_switches`)."""
    settings = state.settings
    mode, reasoning = staged_switches(state)  # the user's, as the session holds
    run_settings = replace(
        settings.run,
        model=model_id(state),
        model_table=state.model,
        mode=mode,
        reasoning=reasoning,
    )
    context = build_context(
        settings,
        model=state.model,
        system_prompt=run_settings.system_prompt,
        core_memory=core_memory_text(state),
        summary=state.summary,
        segment=state.messages[:-1],  # the last one is the turn's own input
        pending=turn.text,
        tools=run_settings.tools,
        elsewhere=cross_channel(state),
        whole_turns=state.revision >= 3,
    )
    return RunCreated(
        run_id=turn.run_id,
        input_text=turn.text,
        settings=run_settings,
        conversation=(*context.messages, ChatMessage(role="user", content=turn.text)),
        channel_id=state.channel,
        user_id=turn.sender,
        context_id=state.session_id,
        reply_to=stream,
    )


def subagent_run(state: Session, started: SubagentStarted, stream: str) -> RunCreated:
    """The run of subagent ``started``, given the session's state just after
    it: an isolated context (core memory, summary and the newest
    ``subagent_window`` messages, then its task as the last message), its own
    model, and the turn's tools less the session's own (`SESSION_TOOLS`)."""
    settings = state.settings
    tools = tuple(t for t in settings.run.tools if t.name not in SESSION_TOOLS)
    mode, reasoning = staged_switches(state)
    run_settings = replace(
        settings.run,
        model=model_id(state, started.model),
        model_table=started.model or state.model,
        tools=tools,
        mode=mode,
        reasoning=reasoning,
    )
    context = build_context(
        settings,
        model=started.model,
        system_prompt=run_settings.system_prompt,
        core_memory=core_memory_text(state),
        summary=state.summary,
        segment=state.messages,
        pending=started.task,
        tools=tools,
        subagent=True,
        whole_turns=state.revision >= 3,
    )
    return RunCreated(
        run_id=started.run_id,
        input_text=started.task,
        settings=run_settings,
        conversation=(
            *context.messages,
            ChatMessage(role="user", content=started.task),
        ),
        channel_id=state.channel,
        context_id=state.session_id,
        reply_to=stream,
        kind="subagent",
    )


def pending(rec: Recorded) -> Pending:
    """What a session's recorded event asks of a host that a crash must not
    lose."""
    match rec.event:
        case DebounceArmed(timer_id=timer_id, due=due):
            # it supersedes the debounce timer before it, whose firing is
            # refused and so never recorded: that one is answered here
            want = Want(key=timer_id, kind=WantKind.TIMER, due_at=due)
            return Pending(wants=(want,), answers=_before(timer_id))
        case ScheduleFired(timer_id=timer_id, due=due):
            return Pending(wants=(Want(key=timer_id, kind=WantKind.TIMER, due_at=due),))
        case ScheduleCreated(schedule=schedule):
            want = Want(key=schedule.timer_id, kind=WantKind.TIMER, due_at=schedule.due)
            return Pending(wants=(want,))
        case WakeDue(timer_id=timer_id):
            return Pending(answers=(timer_id,))
        case SubagentStarted(run_id=run_id) | TurnStarted(run_id=run_id, direct=False):
            return Pending(wants=(Want(key=spawn_key(run_id), kind=WantKind.CREATE),))
        case ChildFinished(stream=child):
            # a finished run needs no creating (a fork copies its result)
            run_id = run_id_of(child)
            return Pending(answers=(notify_key(run_id), spawn_key(run_id)))
        case _:
            return Pending()


def _before(timer_id: str) -> tuple[str, ...]:
    """The debounce timer armed before ``timer_id`` (``<session>/debounce/<n>``),
    if any."""
    prefix, _, n = timer_id.rpartition("/")
    return (f"{prefix}/{int(n) - 1}",) if n.isdigit() and int(n) > 1 else ()


def correlation(state: Session, input: Event) -> str | None:
    """A session's commits correlate by the session."""
    if isinstance(input, SessionOpened):
        return input.session_id
    return state.session_id or None


def detach(event: Event, origin: str) -> Event:
    """A forked session's first input: a chat of its own on the same channel,
    its chat id the part of its (forked) session id after the channel, so
    its replies go to no one's chat, and forked from session ``origin`` (so
    neither shows the other's messages as the sender's in another chat)."""
    if isinstance(event, SessionOpened):
        chat_id = event.session_id.partition(":")[2]
        return replace(event, chat_id=chat_id, forked_from=origin)
    return event


def model_call(
    state: Session,
    request: LlmRequested,
    cache: PromptCache | None = None,
    prompt: Prompt | None = None,
) -> ModelCall:
    """The session's own model call (the memory writer's, or a direct
    chat's turn): the prompt its request hashed, rebuilt from the state at
    the request."""
    if prompt is None:
        if request.request_id == state.writer:
            prompt = writer_prompt(model_id(state), state.writing, state.memory)
        else:
            prompt = direct_prompt(state)
    return ModelCall(
        prompt=prompt,
        profile=state.settings.profile,
        table=state.model,
    )


TOLD: frozenset[type[Event]] = frozenset(
    {ReplySent, CommandAnswered, MessageRefused, SubagentAnswered}
)
"""The session events `tells` may tell its chat of."""


def tells(event: Event, state: Session) -> Told | None:
    """What a session's event tells its chat: a turn's reply, a command's
    answer, a refusal, a subagent's answer that is not silent; a fork of a
    chat (`steward fork`) is no one's, and tells it nothing."""
    match event:
        case ReplySent(run_id=run_id, text=text, status=status):
            told, ids = "reply", {"run_id": run_id, "status": status}
        case CommandAnswered(message_id=mid, reply=text):
            told, ids = "command", {"message_id": mid}
        case MessageRefused(message_id=mid, reply=text):
            told, ids = "refused", {"message_id": mid}
        case SubagentAnswered(run_id=run_id, text=text, name=name, silent=False):
            told, ids = "subagent", {"run_id": run_id, "name": name}
        case _:
            return None
    if state.forked_from is not None:
        return None
    message = {
        "session_id": state.session_id,
        "channel": state.channel,
        "chat_id": state.chat_id,
        "type": told,
        "text": text,
        **ids,
    }
    return Told(channel=state.channel, message=message)


def forked(stream: str, fork: str, at: int, state: Session) -> list[str]:
    """What `steward fork` prints of a session's fork: how to talk to it,
    and the schedules it keeps."""
    lines = [
        f"forked {stream} at version {at} as {fork}",
        f"talk to it: steward sessions send {state.session_id} TEXT",
    ]
    if state.schedules:
        names = ", ".join(f"{s.name} ({s.cron})" for s in state.schedules)
        lines.append(f"it keeps the schedules {names}, which a serve fires")
    return lines
