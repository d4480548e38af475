"""The vocabulary every actor kind speaks with the host, owned by no kind.

Requests and answers: a model call requested, answered (or one attempt
failed, its stream recorded), failed for good; a tool call requested and
answered; an effect claimed by a worker; a timer due; a child's result
(`ChildFinished`, naming the child by its stream, whatever its kind); a
cancel. And the values they carry: messages, tool calls and specs, usage.
A run, a session, a workflow (and whatever kind comes next) import them
from here. Event tags are type names, so these types kept every stored tag
when they moved here from `steward.actors.run.events` (which still re-exports
them).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from steward.events.base import Event

__all__ = [
    "EVENT_TYPES",
    "CancelRequested",
    "ChatMessage",
    "ChildFinished",
    "EffectClaimed",
    "LlmAttemptFailed",
    "LlmFailed",
    "LlmRequested",
    "LlmResponded",
    "LlmStreamRecorded",
    "Reasoning",
    "ReasonedMessage",
    "ToolCall",
    "ToolRequested",
    "ToolResulted",
    "ToolSpec",
    "Usage",
    "WakeDue",
    "assistant_message",
]


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A tool as the model sees it, recorded once when a run starts."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    requires_approval: bool = False
    max_retries: int | None = None


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A native tool call the model asked for."""

    id: str
    name: str
    args: dict[str, Any] = {}


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True, gc=False, cache_hash=True):
    """One message of a conversation or of a run's transcript.

    ``tool_calls`` is set on an assistant message that asked for native tool
    calls; ``tool_call_id`` on the ``tool`` message that answers one.
    """

    role: Literal["user", "assistant", "system", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


class Reasoning(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """Reasoning a provider returned beside a reply, kept as it must be sent
    back: DeepSeek's ``reasoning_content`` (``text``), an Anthropic thinking
    block (``text`` and its ``signature``) or a redacted one (``redacted``,
    its opaque data)."""

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


class ReasonedMessage(
    ChatMessage, frozen=True, kw_only=True, gc=False, cache_hash=True
):
    """An assistant message with the reasoning its provider returned, which
    a provider that needs it sends back within the run's tool loop (a
    subclass, so a message without reasoning is a `ChatMessage` and encodes,
    for a prompt's hash, as it always has)."""

    reasoning: tuple[Reasoning, ...]


def assistant_message(
    content: str,
    tool_calls: tuple[ToolCall, ...] = (),
    reasoning: tuple[Reasoning, ...] = (),
) -> ChatMessage:
    """An assistant message, a `ReasonedMessage` when it has ``reasoning``."""
    if reasoning:
        return ReasonedMessage(
            role="assistant",
            content=content,
            tool_calls=tool_calls,
            reasoning=reasoning,
        )
    return ChatMessage(role="assistant", content=content, tool_calls=tool_calls)


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """Tokens one model call used."""

    input_tokens: int = 0
    output_tokens: int = 0


class LlmRequested(Event, frozen=True, kw_only=True):
    """Ask the model; the prompt is rebuilt from state, only its hash is kept."""

    request_id: str
    iteration: int
    prompt_hash: str
    """``steward.actors.prompt.prompt_hash`` of the prompt: ``m1:`` and a hash
    of the hashes of its parts; logs written before that prefix hold a hash
    of the whole encoded prompt, which replay still checks."""
    priority: Literal["interactive", "subagent"] = "interactive"


class LlmResponded(Event, frozen=True, kw_only=True):
    """The model answered request ``request_id``."""

    request_id: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    cost_usd: float = 0.0
    """What the call cost at the model's configured prices (0 when unpriced)."""
    attempts: int = 1
    """Attempts it took; each failed one is an `LlmAttemptFailed` before this."""
    at: float = 0.0
    reasoning: tuple[Reasoning, ...] = ()
    """The reasoning the provider returned beside the reply, if any, as it
    must be sent back (`Reasoning`); the reply's text holds none of it."""


class LlmAttemptFailed(Event, frozen=True, kw_only=True):
    """One attempt at model call ``request_id`` failed; it is tried again.

    Recorded so a timeline shows why a step took long: the failure, the
    status, and the ``delay`` before the next attempt (which honours the
    server's ``retry_after``).
    """

    request_id: str
    attempt: int
    kind: str
    message: str
    status: int | None = None
    retry_after: float | None = None
    delay: float = 0.0
    at: float = 0.0


class EffectClaimed(Event, frozen=True, kw_only=True):
    """Worker ``worker`` takes effect ``request_id`` (a model or tool call).

    With several workers on one log, the log is the lock: the decider accepts
    one claim per request, or a new one once the old claim's ``until`` has
    passed (its worker died), so exactly one live worker runs each effect.
    """

    request_id: str
    worker: str
    until: float
    at: float = 0.0


class LlmStreamRecorded(Event, frozen=True, kw_only=True):
    """Every normalized stream event of one attempt, when recording is on.

    ``events`` are in arrival order, each with ``seq`` (1, 2, ... without
    gaps) and its ``kind`` (system, assistant, tool_use, tool_result, usage,
    result); off by default (``[models.<name>] record_stream``), as the reply
    itself is recorded once in `LlmResponded`.
    """

    request_id: str
    attempt: int
    events: tuple[dict[str, Any], ...]
    complete: bool
    """Whether the stream reached its terminal ``result``."""
    at: float = 0.0


class LlmFailed(Event, frozen=True, kw_only=True):
    """The model call ``request_id`` failed for good (after its retries).

    ``usage`` and ``cost_usd`` are those of a reply that came but could not be
    recorded (too large for the log, say): a call paid for is always counted.
    """

    request_id: str
    kind: str
    message: str
    usage: Usage = Usage()
    cost_usd: float = 0.0
    at: float = 0.0


class ToolRequested(Event, frozen=True, kw_only=True):
    """Run tool ``name`` with ``args``; ``attempt`` counts from 1."""

    request_id: str
    name: str
    args: dict[str, Any] = {}
    attempt: int = 1
    call_id: str | None = None
    timeout: float | None = None


class ToolResulted(Event, frozen=True, kw_only=True):
    """Tool call ``request_id`` finished, well or badly."""

    request_id: str
    ok: bool
    output: str = ""
    error: str | None = None
    retryable: bool = True
    truncated: bool = False
    at: float = 0.0


class WakeDue(Event, frozen=True, kw_only=True):
    """Timer ``timer_id`` came due."""

    timer_id: str
    at: float = 0.0


class ChildFinished(Event, frozen=True, kw_only=True):
    """A child actor that answers this one (its ``reply_to``) ended.

    The child is named by its stream (``task.t1/sub/1``, ``run.r1/sub/2``),
    whatever its kind; ``status`` is how it ended (``completed``,
    ``failed``, ``cancelled``), ``output`` its result as text, ``metadata``
    the structured rest (a finish's metadata, a failed task's error). A
    run's result arrived as ``SubagentFinished`` before, and still reads
    as this (`steward.actors.run.events`'s upcaster)."""

    stream: str
    status: str
    output: str
    metadata: dict[str, Any] = {}
    at: float = 0.0
    outcome: str = ""
    """A staged run's compact reasoning outcome (``Reasoning outcome: plan:
    ...; next: ...; risks: ...; delivery: DONE``), what a session's history
    keeps of its reasoning; empty for a child that recorded none."""


class CancelRequested(Event, frozen=True, kw_only=True):
    """Someone asked the run to stop."""

    reason: str = "cancelled by operator"
    at: float = 0.0


EVENT_TYPES: tuple[type[Event], ...] = (
    LlmRequested,
    LlmResponded,
    LlmAttemptFailed,
    EffectClaimed,
    LlmStreamRecorded,
    LlmFailed,
    ToolRequested,
    ToolResulted,
    WakeDue,
    ChildFinished,
    CancelRequested,
)
"""The shared vocabulary's event types (any kind may record them)."""
