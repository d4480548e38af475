"""The provider contract: one terminal result, usage aggregation, the registry."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from steward.actors.run.events import ToolCall, Usage
from steward.config import ModelConfig
from steward.effects.llm import (
    PROVIDERS,
    AssistantDelta,
    ResultEvent,
    ScriptedProvider,
    StreamEvent,
    SystemEvent,
    ToolResultEvent,
    ToolUseEvent,
    UnknownProviderError,
    UsageEvent,
    collect,
    make_provider,
)
from steward.errors import ProviderError


async def stream(*events: object) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event  # type: ignore[misc]


RESULT = ResultEvent(text="hi", usage=Usage(input_tokens=3, output_tokens=1))


# -- the terminal result ------------------------------------------------------


async def test_collect_returns_the_result() -> None:
    """A well-formed stream gives its result; text and tool calls come from it."""
    calls = (ToolCall(id="c1", name="files.list"),)
    result = ResultEvent(text="done", tool_calls=calls, metadata={"k": 1})
    got = await collect(
        stream(
            SystemEvent(message="start"),
            AssistantDelta(text="do"),
            AssistantDelta(text="ne"),
            ToolUseEvent(id="c1", name="files.list"),
            ToolResultEvent(id="c1", content="[]"),
            result,
        )
    )
    assert got == result


async def test_event_after_result_is_rejected() -> None:
    """Anything after the result is an invalid_response naming the late event."""
    with pytest.raises(
        ProviderError, match=r"invalid_response: .*assistant event after"
    ):
        await collect(stream(RESULT, AssistantDelta(text="late")))
    with pytest.raises(ProviderError, match=r"result event after its result") as info:
        await collect(stream(RESULT, RESULT))
    assert info.value.kind == "invalid_response"
    assert info.value.retryable is False


async def test_stream_without_result_fails_deterministically() -> None:
    """A stream that ends without a result fails with invalid_response."""
    with pytest.raises(
        ProviderError, match=r"^invalid_response: .* ended without a result event"
    ):
        await collect(stream(SystemEvent(), AssistantDelta(text="half")))
    with pytest.raises(ProviderError, match=r"ended without a result event"):
        await collect(stream())


async def test_non_event_items_are_rejected() -> None:
    """An item that is not a normalized stream event is an invalid_response."""
    with pytest.raises(
        ProviderError, match=r"invalid_response: .*'dict'.*not a stream"
    ):
        await collect(stream({"type": "result"}))


async def test_collect_closes_the_stream_when_it_stops_early() -> None:
    """On a contract violation the provider's generator is closed, not leaked."""
    closed = False

    async def provider() -> AsyncIterator[StreamEvent]:
        nonlocal closed
        try:
            yield RESULT
            yield AssistantDelta(text="late")
            yield AssistantDelta(text="never read")
        finally:
            closed = True

    with pytest.raises(ProviderError):
        await collect(provider())
    assert closed


async def test_collect_reports_every_event() -> None:
    """on_event sees each event in order, the result included."""
    seen: list[StreamEvent] = []
    events = (SystemEvent(), AssistantDelta(text="x"), RESULT)
    await collect(stream(*events), on_event=seen.append)
    assert seen == list(events)


async def test_provider_errors_pass_through() -> None:
    """A ProviderError raised mid-stream reaches the caller unchanged."""

    async def failing() -> AsyncIterator[StreamEvent]:
        yield SystemEvent()
        raise ProviderError("rate_limit", "slow down", retryable=True, retry_after=2.0)

    with pytest.raises(ProviderError) as info:
        await collect(failing())
    assert (info.value.kind, info.value.retryable, info.value.retry_after) == (
        "rate_limit",
        True,
        2.0,
    )


def test_stream_events_are_tagged_by_kind() -> None:
    """Stream events encode with a ``kind`` tag and decode back as the union."""
    events = [
        SystemEvent(message="s"),
        AssistantDelta(text="t"),
        ToolUseEvent(id="c", name="n", args={"a": 1}),
        ToolResultEvent(id="c", content="ok"),
        UsageEvent(input_tokens=1, output_tokens=2, cumulative=True),
        RESULT,
    ]
    encoded = msgspec.json.encode(events)
    assert b'"kind":"usage"' in encoded
    assert msgspec.json.decode(encoded, type=list[StreamEvent]) == events


# -- usage --------------------------------------------------------------------


async def test_incremental_usage_is_summed() -> None:
    """Incremental usage payloads add up."""
    got = await collect(
        stream(
            UsageEvent(input_tokens=10, output_tokens=1),
            UsageEvent(input_tokens=0, output_tokens=4),
            UsageEvent(input_tokens=5, output_tokens=2),
            ResultEvent(text="x"),
        )
    )
    assert got.usage == Usage(input_tokens=15, output_tokens=7)


async def test_cumulative_usage_takes_the_maximum() -> None:
    """Cumulative payloads are running totals: the largest one counts, not the sum."""
    got = await collect(
        stream(
            UsageEvent(input_tokens=10, output_tokens=2, cumulative=True),
            UsageEvent(input_tokens=10, output_tokens=9, cumulative=True),
            UsageEvent(input_tokens=10, output_tokens=5, cumulative=True),
            ResultEvent(text="x"),
        )
    )
    assert got.usage == Usage(input_tokens=10, output_tokens=9)


async def test_mixed_usage_takes_the_higher_total_of_sum_and_cumulative() -> None:
    """With both kinds, the usage is whichever has the higher total: the sum
    (8 + 2) or the largest cumulative payload (5 + 20), whole."""
    got = await collect(
        stream(
            UsageEvent(input_tokens=4, output_tokens=1),
            UsageEvent(input_tokens=4, output_tokens=1),
            UsageEvent(input_tokens=5, output_tokens=20, cumulative=True),
            ResultEvent(text="x", usage=Usage(input_tokens=999, output_tokens=999)),
        )
    )
    assert got.usage == Usage(input_tokens=5, output_tokens=20)


async def test_mixed_usage_is_never_a_maximum_of_each_count() -> None:
    """Spec 001's wording: increments of 10 + 15 input and 15 output tokens
    (40) against a cumulative 40 are 40 tokens, not the 48 that taking each
    count's maximum (33 input, 15 output) would make; a larger sum wins
    whole."""
    got = await collect(
        stream(
            UsageEvent(input_tokens=10, output_tokens=0),
            UsageEvent(input_tokens=33, output_tokens=7, cumulative=True),
            UsageEvent(input_tokens=15, output_tokens=15),
            UsageEvent(input_tokens=20, output_tokens=5, cumulative=True),
            ResultEvent(text="x"),
        )
    )
    assert got.usage.input_tokens + got.usage.output_tokens == 40
    assert got.usage == Usage(input_tokens=33, output_tokens=7)  # a tie: reported
    more = await collect(
        stream(
            UsageEvent(input_tokens=30, output_tokens=15),
            UsageEvent(input_tokens=33, output_tokens=7, cumulative=True),
            ResultEvent(text="x"),
        )
    )
    assert more.usage == Usage(input_tokens=30, output_tokens=15)


async def test_result_usage_stands_when_the_stream_sent_none() -> None:
    """Without usage events the result's own usage is kept."""
    got = await collect(stream(AssistantDelta(text="hi"), RESULT))
    assert got.usage == Usage(input_tokens=3, output_tokens=1)


# -- the registry -------------------------------------------------------------


def test_scripted_is_registered() -> None:
    """`scripted` is in the registry and builds a ScriptedProvider."""
    assert "scripted" in PROVIDERS
    provider = make_provider("scripted", ModelConfig())
    assert isinstance(provider, ScriptedProvider)
    assert provider.name == "scripted"


def test_unknown_provider_lists_available_ones() -> None:
    """An unknown provider is a config error with a stable code and sorted names."""
    with pytest.raises(
        ProviderError,
        match=r"^config: unknown provider 'nope'; available providers: "
        r"anthropic, openai, scripted$",
    ) as info:
        make_provider("nope", ModelConfig(provider="nope"))
    error = info.value
    assert isinstance(error, UnknownProviderError)
    assert error.code == "unknown_provider"
    assert error.kind == "config"
    assert error.provider == "nope"
    assert error.available == sorted(PROVIDERS)


def test_registered_factories_plug_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """A factory added to PROVIDERS is built by make_provider and listed in errors."""
    built: list[ModelConfig] = []

    def factory(config: ModelConfig) -> ScriptedProvider:
        built.append(config)
        return ScriptedProvider(["x"])

    monkeypatch.setitem(PROVIDERS, "fake", factory)
    config = ModelConfig(provider="fake", model="m")
    assert isinstance(make_provider("fake", config), ScriptedProvider)
    assert built == [config]
    with pytest.raises(
        ProviderError, match=r"available providers: anthropic, fake, openai, scripted$"
    ):
        make_provider("zzz")
