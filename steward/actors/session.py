"""The session decider: one chat's messages turned into turns (pure).

Spec 003 (Klaw's engine main loop), as an actor. Every message goes to its
chat's session stream. A command (text starting with ``/``) is answered at
once, without a model call. Any other message is buffered and (re)starts the
debounce timer: when the chat has been quiet for ``debounce_seconds``, the
buffered messages, merged in order, start a turn (a run whose result comes
back as `SubagentFinished` through its ``reply_to``). A message that arrives
while a turn runs waits for it: the next turn starts when the reply is in
and the debounce timer has come due.

``/new`` starts a segment: later turns' windows show only messages from
there on; the log keeps every message. A superseded debounce timer still
fires, and its `WakeDue` is refused here.
"""

from __future__ import annotations

from msgspec import Struct
from msgspec.structs import replace

from steward.events.base import Event
from steward.events.run import ChatMessage, SubagentFinished, WakeDue
from steward.events.session import (
    CommandAnswered,
    DebounceArmed,
    MessageReceived,
    ModelSwitched,
    ReplySent,
    SegmentStarted,
    SessionOpened,
    SessionSettings,
    TurnStarted,
)
from steward.isotime import duration, iso_time

__all__ = [
    "COMMANDS",
    "Session",
    "core_memory_text",
    "decide",
    "evolve",
    "initial",
    "is_command",
    "session_stream",
]

COMMANDS = (
    ("/new", "start a new segment: later turns see only messages from here on"),
    ("/model [NAME]", "show the session's model, or switch to NAME"),
    ("/models", "list the configured models and their context budgets"),
    ("/memory", "show the core memory"),
    ("/status", "uptime, model, segment start and model calls waiting"),
    ("/help", "this list"),
)


class Session(Struct, frozen=True, kw_only=True):
    """A chat session's state, folded from its events."""

    session_id: str = ""
    channel: str = ""
    chat_id: str = ""
    settings: SessionSettings = SessionSettings()
    opened_at: float = 0.0
    model: str = ""
    segment: int = 0
    segment_at: float = 0.0
    messages: tuple[ChatMessage, ...] = ()
    """The current segment's messages: each turn's merged input and reply."""
    buffer: tuple[MessageReceived, ...] = ()
    """Messages waiting for the debounce timer, oldest first."""
    timer: str | None = None
    """The debounce timer that starts the next turn; ``None``: none armed."""
    timers: int = 0
    turn: str | None = None
    """The run of the turn in flight."""
    turns: int = 0
    core_memory: tuple[tuple[str, str], ...] = ()
    summary: str | None = None


initial = Session()


def session_stream(session_id: str) -> str:
    """The stream of session ``session_id`` (``<channel>:<chat id>``)."""
    return f"session.{session_id}"


def core_memory_text(state: Session) -> str:
    """The core memory as the model and ``/memory`` show it: a line per key."""
    return "\n".join(f"{key}: {value}" for key, value in state.core_memory)


def is_command(text: str) -> bool:
    """Whether a message is a command (answered without a model call)."""
    return text.startswith("/")


def evolve(state: Session, event: Event) -> Session:
    match event:
        case SessionOpened():
            return replace(
                state,
                session_id=event.session_id,
                channel=event.channel,
                chat_id=event.chat_id,
                settings=event.settings,
                opened_at=event.at,
                segment_at=event.at,
                model=event.settings.model,
            )
        case MessageReceived(text=text) if not is_command(text):
            return replace(state, buffer=(*state.buffer, event))
        case DebounceArmed(timer_id=timer_id):
            return replace(state, timer=timer_id, timers=state.timers + 1)
        case WakeDue(timer_id=timer_id) if timer_id == state.timer:
            return replace(state, timer=None)
        case TurnStarted(run_id=run_id, text=text):
            asked = ChatMessage(role="user", content=text)
            return replace(
                state,
                turn=run_id,
                turns=state.turns + 1,
                buffer=(),
                messages=(*state.messages, asked),
            )
        case ReplySent(text=text):
            answer = ChatMessage(role="assistant", content=text)
            return replace(state, turn=None, messages=(*state.messages, answer))
        case SegmentStarted(segment=segment, at=at):
            return replace(state, segment=segment, segment_at=at, messages=())
        case ModelSwitched(model=model):
            return replace(state, model=model)
        case _:
            return state


def decide(input: Event, state: Session) -> list[Event] | None:
    """The decisions for ``input``; ``None`` refuses it (a session not open
    yet, a superseded timer, a result of no turn in flight)."""
    if isinstance(input, SessionOpened):
        return [] if not state.session_id else None
    if not state.session_id:
        return None
    match input:
        case MessageReceived(text=text) if is_command(text):
            return _command(input, state)
        case MessageReceived(at=at):
            timer_id = f"{state.session_id}/debounce/{state.timers + 1}"
            due = at + state.settings.debounce_seconds
            return [DebounceArmed(timer_id=timer_id, due=due)]
        case WakeDue(timer_id=timer_id) if timer_id == state.timer:
            if state.turn is not None or not state.buffer:
                return []  # the turn in flight starts the next one
            return [_turn(state)]
        case SubagentFinished(result=result) if result.run_id == state.turn:
            text = result.output
            if result.status != "completed":
                text = f"(the turn {result.status}: {result.output})"
            reply = ReplySent(run_id=result.run_id, text=text, status=result.status)
            after = evolve(state, reply)
            if after.buffer and after.timer is None:
                return [reply, _turn(after)]
            return [reply]
        case _:
            return None


def _turn(state: Session) -> TurnStarted:
    """The buffered messages, merged in order, as the next turn."""
    return TurnStarted(
        run_id=f"{state.session_id}-t{state.turns + 1}",
        message_ids=tuple(m.message_id for m in state.buffer),
        text="\n".join(m.text for m in state.buffer),
        sender=next((m.sender for m in reversed(state.buffer) if m.sender), None),
    )


def _command(input: MessageReceived, state: Session) -> list[Event]:
    """A command's answer (and the change it makes), never a model call."""
    name, _, arg = input.text.strip().partition(" ")
    arg = arg.strip()
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
        case "/help":
            reply = "commands:\n" + "\n".join(f"{c} - {what}" for c, what in COMMANDS)
        case _:
            known = ", ".join(c.split()[0] for c, _ in COMMANDS)
            reply = f"unknown command {name}; commands: {known}"
    answer = CommandAnswered(message_id=input.message_id, command=name, reply=reply)
    return [*changes, answer]


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
    return (
        f"uptime {duration(input.at - state.opened_at)} "
        f"(open since {iso_time(state.opened_at)})\n"
        f"model {state.model}\n"
        f"segment {state.segment} since {iso_time(state.segment_at)}\n"
        f"model calls waiting {waiting}\n"
        f"turn in flight {state.turn or 'none'}"
    )
