"""The provider contract: normalized stream events, ``Provider`` and ``collect``.

A provider turns a ``Prompt`` into a stream of normalized events (Alphred's
``system``, ``assistant``, ``tool_use``, ``tool_result``, ``usage``,
``result``). ``collect`` enforces the contract every provider must keep: the
stream ends with exactly one ``result`` event, nothing follows it, and a stream
without one fails deterministically. Usage is aggregated across the payload
variants providers send.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import AsyncGeneratorType
from typing import Any, Literal, Protocol

import msgspec

from steward.actors.prompt import Prompt
from steward.errors import ProviderError
from steward.events.protocol import Reasoning, ToolCall, Usage

__all__ = [
    "AssistantDelta",
    "Provider",
    "RequestInfo",
    "ResultEvent",
    "StreamEvent",
    "SystemEvent",
    "ToolResultEvent",
    "ToolUseEvent",
    "UsageEvent",
    "collect",
]


class SystemEvent(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="system"
):
    """The provider started (or reports on) a session: model, ids, warnings."""

    message: str = ""
    metadata: dict[str, Any] = {}


class AssistantDelta(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="assistant"
):
    """A piece of the model's text, in the order it was produced."""

    text: str


class ToolUseEvent(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="tool_use"
):
    """The model asked for tool ``name`` with ``args``."""

    id: str
    name: str
    args: dict[str, Any] = {}


class ToolResultEvent(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="tool_result"
):
    """A tool the provider ran itself (server-side) returned ``content``."""

    id: str
    content: str = ""
    is_error: bool = False


class UsageEvent(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="usage"
):
    """Token counts: an increment, or (``cumulative``) the total so far."""

    input_tokens: int = 0
    output_tokens: int = 0
    cumulative: bool = False


class ResultEvent(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", tag="result"
):
    """The terminal event: the whole reply, its tool calls and usage.

    ``text`` and ``tool_calls`` are authoritative: ``collect`` does not rebuild
    them from the deltas. ``reasoning`` is what the provider returned beside
    the text (DeepSeek's ``reasoning_content``, Anthropic's thinking blocks),
    kept to be sent back. ``metadata`` carries typed extras such as a routing
    decision.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    metadata: dict[str, Any] = {}
    reasoning: tuple[Reasoning, ...] = ()


StreamEvent = (
    SystemEvent
    | AssistantDelta
    | ToolUseEvent
    | ToolResultEvent
    | UsageEvent
    | ResultEvent
)
"""Any normalized event a provider streams."""


class RequestInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Who asks: lets a provider (and a script) tell actors and priorities
    apart."""

    stream: str
    """The stream of the actor that asks (``KIND.ID``)."""
    request_id: str
    priority: Literal["interactive", "subagent"] = "interactive"
    profile: str | None = None
    table: str | None = None
    """The ``[models.<name>]`` table the caller named; it goes there."""
    iteration: int = 0
    """Which of its actor's model calls this is (`LlmRequested.iteration`,
    1-based; 0: not known), from the log: a scripted run resumed by a new
    process goes on with its script from there."""

    @property
    def actor_id(self) -> str:
        """The id of the actor that asks (its stream's ID)."""
        return self.stream.partition(".")[2]


class Provider(Protocol):
    """A model provider: turns a prompt into a stream of normalized events.

    A provider must:

    - yield ``StreamEvent``s only, ending with exactly one ``ResultEvent`` and
      nothing after it (``collect`` rejects anything else as
      ``invalid_response``);
    - raise ``ProviderError`` with a ``kind`` from ``ProviderError.KINDS`` and
      ``retryable`` (and ``retry_after`` when the server said so) for every
      failure it can classify; SDK exceptions never escape untranslated;
    - keep secrets (keys, auth headers) out of every event and error message.

    A provider whose replies are whole before they are given (the scripted
    one) may also offer ``async result(prompt, info) -> ResultEvent``, which
    must return (or raise) what ``collect(stream(prompt, info))`` would: the
    host calls it instead of the stream when no one watches the stream's
    events (no delta listener, no recorded stream).

    Implementations do not inherit from this class.
    """

    name: str
    """The registry name the provider is known by (``scripted``, ...)."""

    def stream(self, prompt: Prompt, info: RequestInfo) -> AsyncIterator[StreamEvent]:
        """Ask the model ``prompt`` and stream its reply as normalized events."""
        ...


async def collect(
    events: AsyncIterator[StreamEvent],
    on_event: Callable[[StreamEvent], None] | None = None,
) -> ResultEvent:
    """Drain a provider stream and return its result, with aggregated usage.

    Usage follows Alphred's phase runner: incremental ``UsageEvent``s are
    summed, and the cumulative one with the largest total (input plus
    output) is kept; the usage is whichever of the two has the higher total
    (the cumulative one on a tie), never a maximum of each count, which
    could mix two payloads into more tokens than either reported. When the
    stream sent no ``UsageEvent`` the result's own usage stands.

    Args:
        events: the provider's stream; closed when this returns or raises.
        on_event: called with every event as it arrives (progress, logging).

    Raises:
        ProviderError: ``invalid_response`` when an event follows the result,
            an item is not a stream event, or the stream ends without a result;
            any ``ProviderError`` the stream raised passes through.
    """
    result: ResultEvent | None = None
    added = [0, 0]
    peak: UsageEvent | None = None
    saw_usage = False
    ended = False
    try:
        async for event in events:
            if on_event is not None:
                on_event(event)
            if result is not None:
                raise ProviderError(
                    "invalid_response",
                    f"the provider sent a {_kind(event)} event after its result "
                    "event; a stream must end with exactly one result",
                )
            if type(event) in _PASSING:  # most events: nothing to add up
                continue
            match event:
                case ResultEvent():
                    result = event
                case UsageEvent(cumulative=True):
                    saw_usage = True
                    if peak is None or _total(event) > _total(peak):
                        peak = event
                case UsageEvent():
                    saw_usage = True
                    added[0] += event.input_tokens
                    added[1] += event.output_tokens
                case (
                    SystemEvent()
                    | AssistantDelta()
                    | ToolUseEvent()
                    | ToolResultEvent()
                ):
                    pass
                case _:
                    raise ProviderError(
                        "invalid_response",
                        f"the provider sent {type(event).__name__!r}, which is not "
                        "a stream event",
                    )
        # an async generator that ran to its end has closed itself
        ended = isinstance(events, AsyncGeneratorType)
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None and not ended:
            await aclose()
    if result is None:
        raise ProviderError(
            "invalid_response",
            "the provider stream ended without a result event; a stream must end "
            "with exactly one result",
        )
    if not saw_usage:
        return result
    usage = Usage(input_tokens=added[0], output_tokens=added[1])
    if peak is not None and _total(peak) >= sum(added):
        usage = Usage(input_tokens=peak.input_tokens, output_tokens=peak.output_tokens)
    return msgspec.structs.replace(result, usage=usage)


def _total(usage: UsageEvent) -> int:
    return usage.input_tokens + usage.output_tokens


_PASSING = frozenset({SystemEvent, AssistantDelta, ToolUseEvent, ToolResultEvent})


def _kind(event: object) -> str:
    config = getattr(type(event), "__struct_config__", None)
    tag = getattr(config, "tag", None)
    return tag if isinstance(tag, str) else type(event).__name__
