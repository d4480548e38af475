"""The events of a chat session (the ``session`` actor kind).

A session is one stream per chat, ``session.<channel>:<chat id>``. Its inputs
are the messages people send, the debounce timer coming due and the result
of the run a turn started; its decisions arm the timer, answer commands,
start turns and record the replies. Shared with the run kind: `WakeDue`
(any timer) and `ChildFinished` (a run's result, delivered to its
``reply_to``).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from steward.actors.run.events import RunSettings
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

__all__ = [  # EVENT_TYPES and INPUT_TYPES are read from the module (as the run's)
    "CommandAnswered",
    "ContextCompacted",
    "CoreMemoryChanged",
    "CoreMemorySet",
    "DebounceArmed",
    "Elsewhere",
    "MemoryItem",
    "MemoryOp",
    "MemoryWriteFailed",
    "MemoryWritten",
    "MessageRefused",
    "MessageReceived",
    "ModelBudget",
    "ModeSwitched",
    "ModelSwitched",
    "ReasoningSwitched",
    "RejectedOp",
    "ReplySent",
    "SESSION_REVISION",
    "Schedule",
    "ScheduleAsked",
    "ScheduleCreated",
    "ScheduleDeleted",
    "ScheduleFired",
    "SegmentStarted",
    "SessionOpened",
    "SessionSettings",
    "SubagentAnswered",
    "SubagentAsked",
    "SubagentStarted",
    "TurnStarted",
]


class ModelBudget(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """A model a session may use: its ``[models]`` name, the model id its
    provider is asked for, and its context budget in tokens (``None``: the
    session's default budget)."""

    name: str
    model: str = ""
    context_budget: int | None = None


class SessionSettings(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """Everything a session's decisions depend on, fixed when it opens, so a
    replay decides as the live session did whatever the configuration now
    says (as `RunSettings` is for a run)."""

    debounce_seconds: float = 1.5
    """Quiet time after a message before the buffered ones start a turn."""
    model: str = "default"
    """The model (a ``[models]`` name) a new session's turns use."""
    models: tuple[ModelBudget, ...] = ()
    """Every configured model, for ``/model`` and ``/models``."""
    default_budget_tokens: int = 8000
    """The context budget of a model that names none."""
    safety_margin: float = 0.1
    """The share of the budget kept free: token counts are estimates."""
    sliding_window: int = 20
    """The newest messages of the segment a turn's context shows, at most."""
    subagent_window: int = 5
    """The same for a subagent's context."""
    run: RunSettings = RunSettings()
    """The settings of a turn's run (its model is the session's)."""
    profile: str = "default"
    """The agent profile (``[agents]``) whose model the session's own model
    calls (the memory writer) go to, as its turns' runs do."""
    max_message_chars: int = 32_768
    """The longest message taken; a longer one is answered with an error."""
    max_turns_per_context: int = 60
    """Turns in the window before it is compacted (Clifford's
    ``maxTurnsPerContext``): the older half leaves it for the memory writer."""
    memory_writer_max_messages: int = 40
    """The newest of the compacted messages the memory writer reads."""
    cross_channel_limit: int = 12
    """Messages from the sender's other chats a turn's context shows."""
    subagent_model: str | None = None
    """The model (a ``[models]`` name) a subagent or schedule uses when it
    names none (Klaw's ``routing.tasks.subagent``); ``None``: the session's."""
    direct: bool = False
    """Direct chat (Clifford's message processor): each turn is one model
    call of the session's own, without tools, instead of a run."""
    direct_system_prompt: str = (
        "You are a helpful assistant in a chat. Reply to the user's last "
        "message in plain text."
    )
    """The system prompt of a direct chat's model calls."""


class Elsewhere(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """A message of the same sender in another chat (a cross-channel block),
    as the process that took a message found it."""

    session_id: str
    role: str
    text: str


class MemoryItem(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """One remembered fact (Clifford's ``memoryItems``): ``module.key`` at
    ``level`` 0 (durable: identity, constraints) to 5 (recent context).
    Archived items leave the context but stay searchable."""

    id: str
    module: str
    key: str
    level: int
    value: str
    confidence: float = 0.6
    seen_at: float = 0.0
    archived: bool = False


class MemoryOp(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One memory writer operation, as validated: ``add``, ``update``,
    ``delete`` or ``touch`` of an item named by ``id`` or ``module`` +
    ``key``."""

    op: str
    id: str | None = None
    module: str | None = None
    key: str | None = None
    level: int | None = None
    value: str | None = None
    confidence: float | None = None


class RejectedOp(msgspec.Struct, frozen=True, kw_only=True):
    """An operation the memory writer gave that was not applied: its place
    in the list, its JSON text (cut to 500 characters) and why."""

    index: int
    op: str
    reason: str


class Schedule(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """A cron schedule of a session: at each firing, ``task`` goes to a
    subagent (using ``model``, or the session's subagent model), whose reply
    goes to the chat unless it is silent. ``timer_id`` is the armed timer of
    its next firing, due at ``due``."""

    name: str
    cron: str
    task: str
    model: str | None = None
    timer_id: str
    due: float


# -- inputs -------------------------------------------------------------------


class SessionOpened(Event, frozen=True, kw_only=True):
    """A chat's session began (before its first message is taken)."""

    session_id: str
    channel: str
    chat_id: str
    settings: SessionSettings
    at: float = 0.0
    forked_from: str | None = None
    """The session this one is a fork of (`steward fork`), if it is one."""
    revision: int = 0
    """The decider behaviour the session was opened under
    (`SESSION_REVISION` for sessions opened now; 0 for logs written before
    it was recorded). From 1: a compaction due while the memory writer's
    call is in flight waits for that call to end (and for the turn in
    flight, if any), then asks the next call, so what leaves the window is
    never dropped without a call reading it (its newest
    ``memory_writer_max_messages``, as every call); and the summary of a
    call asked before ``/new`` is not the new segment's. From 2: a command
    is ``/`` and a name (no ``/`` in it) ending at a blank or the end, its
    argument after any blanks, so a message such as ``/etc/hosts is
    broken`` goes to the model (until 2, any text starting with ``/`` was a
    command, its name ending at the first space); and ``/status`` taken by
    a process that hosts nothing says the uptime is unknown (until 2, it
    gave the session's age as the uptime). From 3: a turn's window is whole
    exchanges: a compaction keeps the older half's last question with its
    answer, and a window cut by its budget or ``sliding_window`` never
    starts with an answer whose question it left out (until 3, the older
    half was the first ``len // 2`` messages, and a window could start with
    an answer). From 4: in a session whose turns are staged runs, the
    commands ``/mode`` and ``/reasoning`` set the mode and the reasoning
    switch of its turns (and ``/help`` lists them; until 4 they were
    unknown commands, as they are in a session of another agent), and a
    staged turn's reply keeps its run's compact reasoning outcome in the
    history after the answer (`ReplySent.outcome`; until 4, the answer
    alone)."""


SESSION_REVISION = 4
"""The `SessionOpened.revision` of sessions opened now."""


class MessageReceived(Event, frozen=True, kw_only=True):
    """A person's message to the chat; a command when it is one
    (`steward.actors.session.decider.is_command`).

    ``llm_waiting`` is how many model calls waited for a slot in the process
    that took the message, and ``host_since`` when that process began
    hosting, when it knows (for ``/status``: the decider sees no host).
    """

    message_id: str
    text: str
    sender: str | None = None
    llm_waiting: int | None = None
    host_since: float | None = None
    elsewhere: tuple[Elsewhere, ...] = ()
    """The sender's newest messages in other chats, oldest first, when the
    process that took this one looked (``[session] cross_channel``)."""
    at: float = 0.0


class CoreMemorySet(Event, frozen=True, kw_only=True):
    """A turn's ``memory.core_set`` tool call: set core memory ``key`` to
    ``value`` (``None`` removes it). ``request_id`` is the tool call's, so
    a call delivered twice changes memory once."""

    request_id: str
    key: str
    value: str | None = None
    run_id: str = ""


class SubagentAsked(Event, frozen=True, kw_only=True):
    """A turn's ``subagent_spawn`` tool call: run ``task`` as a subagent of
    the session (isolated context, ``model`` or the session's subagent
    model), whose reply goes to the chat unless it answers
    ``{"silent": true}``. ``request_id`` is the tool call's."""

    request_id: str
    name: str
    task: str
    model: str | None = None
    run_id: str = ""


class ScheduleAsked(Event, frozen=True, kw_only=True):
    """A turn's ``schedule.create`` (or, with ``cron`` ``None``,
    ``schedule.delete``) tool call on schedule ``name``; ``at`` is when it
    was made, the base of the first firing."""

    request_id: str
    name: str
    cron: str | None = None
    task: str = ""
    model: str | None = None
    run_id: str = ""
    at: float = 0.0


# -- decisions ----------------------------------------------------------------


class DebounceArmed(Event, frozen=True, kw_only=True):
    """The debounce timer was (re)started: at ``due`` the buffered messages
    start a turn, unless a newer message restarted it (a newer timer id)."""

    timer_id: str
    due: float


class TurnStarted(Event, frozen=True, kw_only=True):
    """The buffered messages, merged in order, went to run ``run_id``, whose
    result comes back to the session; with ``direct``, to the session's own
    model call ``<run_id>/llm`` instead (a direct chat)."""

    run_id: str
    message_ids: tuple[str, ...]
    text: str
    sender: str | None = None
    direct: bool = False


class ReplySent(Event, frozen=True, kw_only=True):
    """The answer of turn ``run_id`` went to the chat."""

    run_id: str
    text: str
    status: str = "completed"
    outcome: str = ""
    """The run's compact reasoning outcome (`ChildFinished.outcome`, from
    revision 4), kept in the history after the answer so the next turn's
    model sees it; the chat is sent the answer alone."""


class CommandAnswered(Event, frozen=True, kw_only=True):
    """A command was answered without a model call."""

    message_id: str
    command: str
    reply: str


class MessageRefused(Event, frozen=True, kw_only=True):
    """A message that cannot be taken (empty, or longer than the session's
    ``max_message_chars``), answered with why; the log keeps it."""

    message_id: str
    reply: str


class SegmentStarted(Event, frozen=True, kw_only=True):
    """``/new``: later turns see only messages from here on. The log keeps
    every earlier one."""

    segment: int
    at: float = 0.0


class ModelSwitched(Event, frozen=True, kw_only=True):
    """``/model NAME``: the session's turns use model ``model`` from now on."""

    model: str


class ModeSwitched(Event, frozen=True, kw_only=True):
    """``/mode MODE``: the session's staged turns run in ``mode`` from now
    on. Only the user sets it: no reply of a model does."""

    mode: Literal["agent", "chat"]


class ReasoningSwitched(Event, frozen=True, kw_only=True):
    """``/reasoning on|off``: the session's staged turns reason (or not)
    from now on. Only the user sets it: no reply of a model does."""

    reasoning: bool


class CoreMemoryChanged(Event, frozen=True, kw_only=True):
    """Core memory ``key`` is ``value`` from now on (``None``: removed)."""

    request_id: str
    key: str
    value: str | None = None


class ContextCompacted(Event, frozen=True, kw_only=True):
    """The window held more than ``max_turns_per_context`` turns: its older
    ``dropped`` messages left it (the log keeps them), and ``request_id``
    asks the memory writer to remember what they said (``None`` when a
    writer call was in flight already)."""

    dropped: int
    kept: int
    request_id: str | None = None


class MemoryWritten(Event, frozen=True, kw_only=True):
    """The memory writer's answer to ``request_id``, validated: the
    operations ``applied``, those ``rejected`` with their reasons, the memory
    items after them (within the caps), and the summary it gave, if any."""

    request_id: str
    applied: tuple[MemoryOp, ...] = ()
    rejected: tuple[RejectedOp, ...] = ()
    items: tuple[MemoryItem, ...] = ()
    summary: str | None = None


class MemoryWriteFailed(Event, frozen=True, kw_only=True):
    """The memory writer's call ``request_id`` gave nothing usable (the
    model failed, or its reply was no list of operations): memory is as it
    was."""

    request_id: str
    reason: str


class SubagentStarted(Event, frozen=True, kw_only=True):
    """Subagent ``name`` started as run ``run_id`` on ``task`` (asked by a
    turn, or fired by schedule ``schedule``); its result comes back to the
    session."""

    run_id: str
    name: str
    task: str
    model: str
    schedule: str | None = None


class SubagentAnswered(Event, frozen=True, kw_only=True):
    """Subagent run ``run_id`` finished: its reply ``text`` went to the chat,
    or not when ``silent`` (it answered ``{"silent": true}``)."""

    run_id: str
    name: str
    text: str
    status: str = "completed"
    silent: bool = False


class ScheduleCreated(Event, frozen=True, kw_only=True):
    """Schedule ``schedule.name`` was created (or replaced one of its name);
    its first firing's timer is armed."""

    schedule: Schedule


class ScheduleDeleted(Event, frozen=True, kw_only=True):
    """Schedule ``name`` was deleted; its armed timer fires to no effect."""

    name: str


class ScheduleFired(Event, frozen=True, kw_only=True):
    """Schedule ``name``'s timer came due: a subagent starts, and the next
    firing's timer ``timer_id`` is armed for ``due``."""

    name: str
    timer_id: str
    due: float


EVENT_TYPES: tuple[type[Event], ...] = (
    SessionOpened,
    MessageReceived,
    WakeDue,
    ChildFinished,
    DebounceArmed,
    TurnStarted,
    ReplySent,
    CommandAnswered,
    SegmentStarted,
    ModelSwitched,
    ModeSwitched,
    ReasoningSwitched,
    MessageRefused,
    CoreMemorySet,
    CoreMemoryChanged,
    ContextCompacted,
    LlmRequested,
    LlmResponded,
    LlmFailed,
    LlmAttemptFailed,
    LlmStreamRecorded,
    EffectClaimed,
    MemoryWritten,
    MemoryWriteFailed,
    SubagentAsked,
    ScheduleAsked,
    SubagentStarted,
    SubagentAnswered,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
)
INPUT_TYPES: tuple[type[Event], ...] = (
    SessionOpened,
    MessageReceived,
    WakeDue,
    ChildFinished,
    CoreMemorySet,
    LlmResponded,
    LlmFailed,
    LlmAttemptFailed,
    LlmStreamRecorded,
    EffectClaimed,
    SubagentAsked,
    ScheduleAsked,
)
