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
A schedule's next firing is computed here, by croniter, from the time the
input records (never the clock).
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec
from msgspec import Struct
from msgspec.structs import replace

from steward.actors.cron import next_firing
from steward.actors.cron import valid as cron_valid
from steward.actors.outstanding import Outstanding, folded
from steward.actors.prompt import Prompt, prompt_hash
from steward.actors.run.decider import run_stream
from steward.actors.session.context import build_context
from steward.actors.session.events import (
    CommandAnswered,
    ContextCompacted,
    CoreMemoryChanged,
    CoreMemorySet,
    DebounceArmed,
    Elsewhere,
    MemoryItem,
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
    SessionSettings,
    SubagentAnswered,
    SubagentAsked,
    SubagentStarted,
    TurnStarted,
)
from steward.actors.session.memory import memory_block, write, writer_prompt
from steward.events.base import Event
from steward.events.protocol import (
    ChatMessage,
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

__all__ = [
    "COMMANDS",
    "CORE_MEMORY_CHARS",
    "MAX_SCHEDULES",
    "MAX_SUBAGENTS",
    "SEEN_MESSAGES",
    "SWITCH_COMMANDS",
    "Session",
    "commands",
    "core_memory_text",
    "core_set_problem",
    "cross_channel",
    "decide",
    "direct_call",
    "direct_prompt",
    "evolve",
    "initial",
    "is_command",
    "is_silent",
    "model_id",
    "schedule_problem",
    "session_stream",
    "staged_switches",
    "subagent_problem",
    "switchable",
    "window_turns",
    "writer_request",
]

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
        request_id=_writer_id(state),
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


def _writer_id(state: Session) -> str:
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


def _command_parts(text: str, revision: int) -> tuple[str, str]:
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
            if is_command(text, state.revision) or _refusal(event, state):
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
        case LlmRequested(request_id=request_id) if request_id == _writer_id(state):
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
        case MessageReceived() if (refusal := _refusal(input, state)) is not None:
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


def _refusal(input: MessageReceived, state: Session) -> str | None:
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
        dropped=dropped, kept=kept, request_id=_writer_id(state)
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
    name, arg = _command_parts(input.text, state.revision)
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
