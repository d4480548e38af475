"""The events of a chat session (the ``session`` actor kind).

A session is one stream per chat, ``session.<channel>:<chat id>``. Its inputs
are the messages people send, the debounce timer coming due and the result
of the run a turn started; its decisions arm the timer, answer commands,
start turns and record the replies. Shared with the run kind: `WakeDue`
(any timer) and `SubagentFinished` (a run's result, delivered to its
``reply_to``).
"""

from __future__ import annotations

import msgspec

from steward.events.base import Event
from steward.events.run import RunSettings, SubagentFinished, WakeDue

__all__ = [  # EVENT_TYPES and INPUT_TYPES are read from the module (as the run's)
    "CommandAnswered",
    "DebounceArmed",
    "MessageReceived",
    "ModelBudget",
    "ModelSwitched",
    "ReplySent",
    "SegmentStarted",
    "SessionOpened",
    "SessionSettings",
    "TurnStarted",
]


class ModelBudget(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A model a session may use: its ``[models]`` name, the model id its
    provider is asked for, and its context budget in tokens (``None``: the
    session's default budget)."""

    name: str
    model: str = ""
    context_budget: int | None = None


class SessionSettings(msgspec.Struct, frozen=True, kw_only=True, gc=False):
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


# -- inputs -------------------------------------------------------------------


class SessionOpened(Event, frozen=True, kw_only=True):
    """A chat's session began (before its first message is taken)."""

    session_id: str
    channel: str
    chat_id: str
    settings: SessionSettings
    at: float = 0.0


class MessageReceived(Event, frozen=True, kw_only=True):
    """A person's message to the chat; text starting with ``/`` is a command.

    ``llm_waiting`` is how many model calls waited for a slot in the process
    that took the message, when it knows (for ``/status``: the decider sees
    no host).
    """

    message_id: str
    text: str
    sender: str | None = None
    llm_waiting: int | None = None
    at: float = 0.0


# -- decisions ----------------------------------------------------------------


class DebounceArmed(Event, frozen=True, kw_only=True):
    """The debounce timer was (re)started: at ``due`` the buffered messages
    start a turn, unless a newer message restarted it (a newer timer id)."""

    timer_id: str
    due: float


class TurnStarted(Event, frozen=True, kw_only=True):
    """The buffered messages, merged in order, went to run ``run_id``, whose
    result comes back to the session."""

    run_id: str
    message_ids: tuple[str, ...]
    text: str
    sender: str | None = None


class ReplySent(Event, frozen=True, kw_only=True):
    """The answer of turn ``run_id`` went to the chat."""

    run_id: str
    text: str
    status: str = "completed"


class CommandAnswered(Event, frozen=True, kw_only=True):
    """A command was answered without a model call."""

    message_id: str
    command: str
    reply: str


class SegmentStarted(Event, frozen=True, kw_only=True):
    """``/new``: later turns see only messages from here on. The log keeps
    every earlier one."""

    segment: int
    at: float = 0.0


class ModelSwitched(Event, frozen=True, kw_only=True):
    """``/model NAME``: the session's turns use model ``model`` from now on."""

    model: str


EVENT_TYPES: tuple[type[Event], ...] = (
    SessionOpened,
    MessageReceived,
    WakeDue,
    SubagentFinished,
    DebounceArmed,
    TurnStarted,
    ReplySent,
    CommandAnswered,
    SegmentStarted,
    ModelSwitched,
)
INPUT_TYPES: tuple[type[Event], ...] = (
    SessionOpened,
    MessageReceived,
    WakeDue,
    SubagentFinished,
)
