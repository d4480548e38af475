"""A session's state and how its events fold into it (pure): ``Session``,
``initial`` and ``evolve``; what a chat's commands and limits are; and what
the state says (its stream, its model, its windows, its prompts), which the
decider, the reactor and the session's tools read."""

from __future__ import annotations

import re
from typing import Literal

import msgspec
from msgspec import Struct
from msgspec.structs import replace

from steward.actors.cron import valid as cron_valid
from steward.actors.outstanding import Outstanding, folded
from steward.actors.prompt import Prompt, prompt_hash
from steward.actors.session.context import build_context
from steward.actors.session.events import (
    ContextCompacted,
    CoreMemoryChanged,
    DebounceArmed,
    Elsewhere,
    MemoryItem,
    MemoryWriteFailed,
    MemoryWritten,
    MessageReceived,
    ModelSwitched,
    ModeSwitched,
    ReasoningSwitched,
    ReplySent,
    Schedule,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SegmentStarted,
    SessionOpened,
    SessionSettings,
    SubagentAnswered,
    SubagentStarted,
    TurnStarted,
)
from steward.actors.session.memory import memory_block, writer_prompt
from steward.events.base import Event
from steward.events.protocol import (
    ChatMessage,
    LlmRequested,
    WakeDue,
)

CORE_MEMORY_CHARS = 2000
"""The characters core memory may hold, keys and values (Klaw's ~500 tokens)."""

MAX_SUBAGENTS = 4
"""A session's subagents running at once; a fifth is refused until one ends."""

MAX_SCHEDULES = 20
"""The schedules a session holds."""

SEEN_MESSAGES = 256
"""The newest message ids a session remembers: a message delivered again
with one of them (a service's redelivery) is refused, not taken twice."""

COMMANDS = (
    ("/new", "start a new segment: later turns see only messages from here on"),
    ("/model [NAME]", "show the session's model, or switch to NAME"),
    ("/models", "list the configured models and their context budgets"),
    ("/memory", "show the core memory"),
    ("/status", "uptime, model, segment start and model calls waiting"),
    ("/help", "this list"),
)
"""The commands of a session before revision 4."""

SWITCH_COMMANDS = (
    ("/mode [agent|chat]", "show the staged agent's mode, or set it (yours alone)"),
    ("/reasoning [on|off]", "show whether the staged agent reasons, or switch it"),
)
"""The commands a session whose turns are staged runs has from revision
4, beside `COMMANDS`: the user's switches of its staged turns, which no
model reply changes."""


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
    seen: tuple[str, ...] = ()
    """The ids of the newest messages taken (`SEEN_MESSAGES` at most)."""
    timer: str | None = None
    """The debounce timer that starts the next turn; ``None``: none armed."""
    timers: int = 0
    turn: str | None = None
    """The run of the turn in flight."""
    turns: int = 0
    core_memory: tuple[tuple[str, str], ...] = ()
    """Core memory (always in a turn's context), key and value, set by the
    ``memory.core_set`` tool."""
    summary: str | None = None
    """The memory writer's last summary of this segment."""
    memory: tuple[MemoryItem, ...] = ()
    """Memory items, archived ones too (they are searchable)."""
    memory_ids: int = 0
    """The memory item ids given so far (``m<n>``)."""
    writing: tuple[ChatMessage, ...] = ()
    """The messages the memory writer's call in flight reads."""
    writer: str | None = None
    """The memory writer's call in flight (its request id)."""
    writes: int = 0
    """The memory writer calls asked for so far."""
    outstanding: Outstanding = Outstanding()
    """The session's own model calls in flight (the memory writer's, a
    direct chat's), and the claims workers hold on them."""
    elsewhere: tuple[Elsewhere, ...] = ()
    """The sender's newest messages in other chats, as the newest message
    that brought any found them."""
    subagents: tuple[tuple[str, str], ...] = ()
    """The (run, name) of each subagent running, oldest first."""
    spawned: int = 0
    """The subagents started so far (their run ids are ``<session>-s<n>``)."""
    schedules: tuple[Schedule, ...] = ()
    """The session's cron schedules, oldest first."""
    schedule_timers: int = 0
    """The schedule timers armed so far."""
    writer_segment: int = 0
    """The segment the memory writer's call in flight was asked in."""
    forked_from: str | None = None
    """The session this one is a fork of (`SessionOpened.forked_from`)."""
    revision: int = 0
    """`SessionOpened.revision`: what a compaction does while the memory
    writer's call is in flight, and whether a call asked before `/new`
    gives the new segment its summary."""
    mode: Literal["agent", "chat"] | None = None
    """The mode of the session's staged turns as ``/mode`` set it
    (``None``: the profile's)."""
    reasoning: bool | None = None
    """The reasoning switch of its staged turns as ``/reasoning`` set it
    (``None``: the profile's)."""


initial = Session()


def switchable(state: Session) -> bool:
    """Whether the session has `SWITCH_COMMANDS`: its turns are staged runs
    and it was opened at revision 4 or later."""
    return state.revision >= 4 and state.settings.run.policy == "staged"


def commands(state: Session) -> tuple[tuple[str, str], ...]:
    """The commands (usage, what it does) of the session."""
    if not switchable(state):
        return COMMANDS
    return (*COMMANDS[:-1], *SWITCH_COMMANDS, COMMANDS[-1])


def session_stream(session_id: str) -> str:
    """The stream of session ``session_id`` (``<channel>:<chat id>``)."""
    return f"session.{session_id}"


def core_memory_text(state: Session) -> str:
    """The core memory as the model and ``/memory`` show it: a line per key,
    then the memory items a turn sees (`memory_block`)."""
    core = "\n".join(f"{key}: {value}" for key, value in state.core_memory)
    return "\n\n".join(part for part in (core, memory_block(state.memory)) if part)


def core_set_problem(state: Session, key: str, value: str | None) -> str | None:
    """Why core memory ``key`` cannot be set to ``value``, or ``None``."""
    if not key.strip() or len(key) > 64 or any(c in key for c in "\n\r:"):
        return "a core memory key is 1 to 64 characters, without ':' or line breaks"
    if value is None:
        if all(k != key for k, _ in state.core_memory):
            return f"core memory has no key {key!r}"
        return None
    others = sum(len(k) + len(v) for k, v in state.core_memory if k != key)
    if others + len(key) + len(value) > CORE_MEMORY_CHARS:
        return (
            f"core memory holds at most {CORE_MEMORY_CHARS} characters; it has "
            f"{others} besides {key!r}, and {len(key) + len(value)} more do not fit "
            "(remove a key, or keep the detail in memory items)"
        )
    return None


def model_id(state: Session, name: str | None = None) -> str:
    """The model id model ``name`` (default: the session's) is asked for."""
    settings = state.settings
    name = name or state.model
    return next(
        (m.model for m in settings.models if m.name == name and m.model),
        settings.run.model,
    )


def subagent_problem(
    state: Session, name: str, task: str, model: str | None
) -> str | None:
    """Why a subagent ``name`` cannot start on ``task``, or ``None``."""
    if (problem := _task_problem(state, name, task, model)) is not None:
        return problem
    if len(state.subagents) >= MAX_SUBAGENTS:
        running = ", ".join(name for _, name in state.subagents)
        return (
            f"{MAX_SUBAGENTS} subagents run already ({running}); wait for one to answer"
        )
    return None


def _task_problem(
    state: Session, name: str, task: str, model: str | None
) -> str | None:
    """What is wrong with a subagent's (or a schedule's) name, task or
    model, or ``None``."""
    if not name.strip() or len(name) > 64 or any(c in name for c in "\n\r"):
        return "a subagent's name is 1 to 64 characters, on one line"
    if not task.strip():
        return "a subagent needs a task: what it is to do, in words"
    if len(task) > state.settings.max_message_chars:
        return (
            f"a subagent's task is at most {state.settings.max_message_chars} "
            f"characters, not {len(task)}"
        )
    if model is not None and all(m.name != model for m in state.settings.models):
        names = ", ".join(m.name for m in state.settings.models) or "none"
        return f"unknown model {model!r}; configured models: {names}"
    return None


def schedule_problem(
    state: Session, name: str, cron: str | None, task: str, model: str | None
) -> str | None:
    """Why schedule ``name`` cannot be created with ``cron`` and ``task``
    (``cron`` ``None``: deleted), or ``None``."""
    known = any(s.name == name for s in state.schedules)
    if cron is None:
        return None if known else f"there is no schedule {name!r}"
    if not cron_valid(cron):
        return (
            f"{cron!r} is not a cron expression (five fields: minute hour day "
            "month weekday, as `0 9 * * 1-5`)"
        )
    if not known and len(state.schedules) >= MAX_SCHEDULES:
        return f"a session holds {MAX_SCHEDULES} schedules; delete one first"
    return _task_problem(state, name, task, model)


def is_silent(text: str) -> bool:
    """Whether a subagent's reply asks not to be sent: a JSON object with
    ``"silent": true``. Anything else, unparsable text included, is sent
    (the safe default)."""
    if not text.lstrip().startswith("{"):
        return False
    try:
        reply = msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeEncodeError):
        return False
    return isinstance(reply, dict) and reply.get("silent") is True


def writer_request(state: Session) -> LlmRequested:
    """The memory writer's call for the messages ``state`` hands it."""
    prompt = writer_prompt(model_id(state), state.writing, state.memory)
    return LlmRequested(
        request_id=writer_id(state),
        iteration=state.writes + 1,
        prompt_hash=prompt_hash(prompt),
        priority="subagent",
    )


def cross_channel(state: Session) -> tuple[Elsewhere, ...]:
    """The cross-channel blocks a turn's context shows (the newest
    ``cross_channel_limit``)."""
    limit = state.settings.cross_channel_limit
    return state.elsewhere[-limit:] if limit > 0 else ()


def direct_call(state: Session) -> str | None:
    """The request id of a direct chat's model call in flight, if any."""
    if state.turn is None or not state.settings.direct:
        return None
    return f"{state.turn}/llm"


def direct_prompt(state: Session) -> Prompt:
    """A direct chat turn's model call (Clifford's message processor): the
    system prompt and who talks where, then the turn's context (core memory,
    summary, cross-channel blocks, window), then the turn's input; no tools.
    ``state`` is the session's just after the turn started."""
    settings = state.settings
    asked = state.messages[-1]
    system = (
        f"{settings.direct_system_prompt}\n"
        f"Channel: {state.channel}. Chat: {state.chat_id}."
    )
    context = build_context(
        settings,
        model=state.model,
        system_prompt=system,
        core_memory=core_memory_text(state),
        summary=state.summary,
        segment=state.messages[:-1],
        pending=asked.content,
        elsewhere=cross_channel(state),
        whole_turns=state.revision >= 3,
    )
    return Prompt(
        model=model_id(state), system=system, messages=(*context.messages, asked)
    )


def window_turns(state: Session) -> int:
    """The finished turns the window holds (each a message of the user's,
    the turn in flight's not counted)."""
    asked = sum(1 for m in state.messages if m.role == "user")
    return asked - (state.turn is not None)


def writer_id(state: Session) -> str:
    """The request id of the session's next memory writer call."""
    return f"{state.session_id}/memory/{state.writes + 1}"


_COMMAND = re.compile(r"/[^\s/]*(?:\s|$)")


def is_command(text: str, revision: int) -> bool:
    """Whether a message is a command (answered without a model call) in a
    session of ``revision`` (`SessionOpened.revision`): from 2, ``/`` and
    a name without ``/``, then a blank or the end (``/etc/hosts`` is no
    command); before, any text starting with ``/``."""
    if revision < 2:
        return text.startswith("/")
    return _COMMAND.match(text) is not None


def command_parts(text: str, revision: int) -> tuple[str, str]:
    """A command's name and argument: from revision 2 split at the first
    run of blanks, before at the first space."""
    if revision < 2:
        name, _, arg = text.strip().partition(" ")
        return name, arg.strip()
    name, *rest = text.split(maxsplit=1)
    return name, rest[0].strip() if rest else ""


def evolve(state: Session, event: Event) -> Session:
    return folded(_evolve(state, event), event)


def _evolve(state: Session, event: Event) -> Session:
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
                revision=event.revision,
                forked_from=event.forked_from,
            )
        case MessageReceived(message_id=message_id, text=text):
            seen = (*state.seen[1 - SEEN_MESSAGES :], message_id)
            if is_command(text, state.revision) or refusal_of(event, state):
                return replace(state, seen=seen)
            return replace(
                state,
                seen=seen,
                buffer=(*state.buffer, event),
                elsewhere=event.elsewhere or state.elsewhere,
            )
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
        case ReplySent(run_id=run_id, text=text, outcome=outcome):
            # the history keeps a staged turn's reasoning as its outcome only
            shown = f"{text}\n\n{outcome}" if outcome else text
            answer = ChatMessage(role="assistant", content=shown)
            return replace(
                state,
                turn=None,
                messages=(*state.messages, answer),
                # a direct turn's call, answered or not, is awaited no more
                outstanding=state.outstanding.answered(f"{run_id}/llm"),
            )
        case SegmentStarted(segment=segment, at=at):
            return replace(
                state,
                segment=segment,
                segment_at=at,
                messages=(),
                summary=None,
            )
        case ModelSwitched(model=model):
            return replace(state, model=model)
        case ModeSwitched(mode=mode):
            return replace(state, mode=mode)
        case ReasoningSwitched(reasoning=reasoning):
            return replace(state, reasoning=reasoning)
        case CoreMemoryChanged(key=key, value=value):
            keys = [k for k, _ in state.core_memory]
            kept = tuple((k, v) for k, v in state.core_memory if k != key)
            if value is None:
                return replace(state, core_memory=kept)
            if key not in keys:
                return replace(state, core_memory=(*kept, (key, value)))
            at = keys.index(key)  # a changed key keeps its place
            return replace(state, core_memory=kept[:at] + ((key, value),) + kept[at:])
        case ContextCompacted(dropped=dropped, request_id=request_id):
            older, newer = state.messages[:dropped], state.messages[dropped:]
            if request_id is None:
                return replace(state, messages=newer)
            limit = state.settings.memory_writer_max_messages
            return replace(
                state, messages=newer, writing=older[-limit:] if limit > 0 else ()
            )
        case LlmRequested(request_id=request_id) if request_id == writer_id(state):
            return replace(
                state,
                writer=request_id,
                writes=state.writes + 1,
                writer_segment=state.segment,
            )
        case MemoryWritten(applied=applied, items=items, summary=summary):
            adds = sum(1 for op in applied if op.op == "add")
            if state.revision >= 1 and state.writer_segment != state.segment:
                summary = None  # of a segment `/new` ended: not this one's
            return replace(
                state,
                memory=items,
                memory_ids=state.memory_ids + adds,
                summary=summary or state.summary,
                writer=None,
                writing=(),
                outstanding=state.outstanding.answered(event.request_id),
            )
        case MemoryWriteFailed(request_id=request_id):
            return replace(
                state,
                writer=None,
                writing=(),
                outstanding=state.outstanding.answered(request_id),
            )
        case SubagentStarted(run_id=run_id, name=name):
            return replace(
                state,
                subagents=(*state.subagents, (run_id, name)),
                spawned=state.spawned + 1,
            )
        case SubagentAnswered(run_id=run_id, text=text, silent=silent):
            running = tuple(sub for sub in state.subagents if sub[0] != run_id)
            if silent:
                return replace(state, subagents=running)
            told = ChatMessage(role="assistant", content=text)
            return replace(state, subagents=running, messages=(*state.messages, told))
        case ScheduleCreated(schedule=schedule):
            others = tuple(s for s in state.schedules if s.name != schedule.name)
            return replace(
                state,
                schedules=(*others, schedule),
                schedule_timers=state.schedule_timers + 1,
            )
        case ScheduleDeleted(name=name):
            left = tuple(s for s in state.schedules if s.name != name)
            return replace(state, schedules=left)
        case ScheduleFired(name=name, timer_id=timer_id, due=due):
            fired = tuple(
                replace(s, timer_id=timer_id, due=due) if s.name == name else s
                for s in state.schedules
            )
            return replace(
                state, schedules=fired, schedule_timers=state.schedule_timers + 1
            )
        case _:
            return state


def refusal_of(input: MessageReceived, state: Session) -> str | None:
    """Why a message cannot be taken, or ``None``."""
    if not input.text.strip():
        return "an empty message was not taken: send some text, or /help"
    limit = state.settings.max_message_chars
    if len(input.text) > limit:
        return (
            f"a message of {len(input.text)} characters was not taken: the limit is "
            f"{limit} ([session] max_message_chars); send it in parts, or as a file"
        )
    return None


__all__ = [
    "COMMANDS",
    "CORE_MEMORY_CHARS",
    "MAX_SCHEDULES",
    "MAX_SUBAGENTS",
    "SEEN_MESSAGES",
    "SWITCH_COMMANDS",
    "Session",
    "command_parts",
    "commands",
    "core_memory_text",
    "core_set_problem",
    "cross_channel",
    "direct_call",
    "direct_prompt",
    "evolve",
    "initial",
    "is_command",
    "is_silent",
    "model_id",
    "refusal_of",
    "schedule_problem",
    "session_stream",
    "subagent_problem",
    "switchable",
    "window_turns",
    "writer_id",
    "writer_request",
]
