"""The Anthropic provider: what it sends and what it reads, beyond the contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from conftest import KEY
from fake_api import FakeAPI, a_event, anthropic_frames, sse_reply

from steward.actors.prompt import Prompt
from steward.actors.run.events import ChatMessage, ToolCall, ToolSpec, Usage
from steward.config import ModelConfig
from steward.effects.llm import (
    AssistantDelta,
    RequestInfo,
    ResultEvent,
    StreamEvent,
    collect,
)
from steward.effects.llm.anthropic import DEFAULT_MAX_TOKENS, AnthropicProvider
from steward.errors import ProviderError

INFO = RequestInfo(stream="run.run-1", request_id="req-1")
HELLO = Prompt(model="", system="", messages=(ChatMessage(role="user", content="hi"),))


def sent_key(headers: dict[str, str]) -> str:
    """The key headers of a request (SDK versions use x-api-key or a bearer)."""
    return headers.get("x-api-key", "") + headers.get("authorization", "")


@pytest.fixture
async def claude(api: FakeAPI) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    """Build Anthropic providers against ``api``; all are closed after."""
    made: list[AnthropicProvider] = []

    def make(**kw: Any) -> AnthropicProvider:
        kw.setdefault("api_key", KEY)
        kw.setdefault("model", "claude-test")
        provider = AnthropicProvider(base_url=api.url, **kw)
        made.append(provider)
        return provider

    try:
        yield make
    finally:
        for provider in made:
            await provider.aclose()


async def test_the_request_is_in_messages_api_shape(
    api: FakeAPI, claude: Callable[..., AnthropicProvider]
) -> None:
    """System notes join the system prompt, tool results lead merged user turns,
    tool calls become tool_use blocks, and dotted tool names are made valid."""
    prompt = Prompt(
        model="",
        system="Be brief.",
        messages=(
            ChatMessage(role="system", content="Today is Monday."),
            ChatMessage(role="user", content="Read a.txt and b.txt."),
            ChatMessage(
                role="assistant",
                content="Reading both.",
                tool_calls=(
                    ToolCall(id="t1", name="files.read", args={"path": "a.txt"}),
                    ToolCall(id="t2", name="files.read", args={"path": "b.txt"}),
                ),
            ),
            ChatMessage(role="tool", content="AAA", tool_call_id="t1"),
            ChatMessage(role="tool", content="", tool_call_id="t2"),
            ChatMessage(role="user", content="Summarize."),
        ),
        tools=(
            ToolSpec(
                name="files.read",
                description="Read a file.",
                parameters={
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            ),
        ),
        protocol="native",
        temperature=0.2,
        max_tokens=300,
    )
    api.queue(sse_reply(anthropic_frames(["ok"])))
    await collect(claude().stream(prompt, INFO))
    request = api.requests[0]
    assert KEY in sent_key(request.headers)
    assert "anthropic-version" in request.headers
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 300,
        "stream": True,
        "temperature": 0.2,
        "system": "Be brief.\n\nToday is Monday.",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Read a.txt and b.txt."}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading both."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "files_read",
                        "input": {"path": "a.txt"},
                    },
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "files_read",
                        "input": {"path": "b.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "AAA"},
                    {"type": "tool_result", "tool_use_id": "t2"},
                    {"type": "text", "text": "Summarize."},
                ],
            },
        ],
        "tools": [
            {
                "name": "files_read",
                "description": "Read a file.",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            }
        ],
    }


async def test_defaults_fill_what_the_prompt_leaves_out(
    api: FakeAPI, claude: Callable[..., AnthropicProvider]
) -> None:
    """The provider's model and max_tokens are used when the prompt sets none;
    a prompt's own model wins over the provider's."""
    api.queue(sse_reply(anthropic_frames(["a"])), sse_reply(anthropic_frames(["b"])))
    provider = claude()
    await collect(provider.stream(HELLO, INFO))
    other = Prompt(model="claude-other", system="", messages=HELLO.messages)
    await collect(provider.stream(other, INFO))
    first, second = (r.body for r in api.requests)
    assert (first["model"], first["max_tokens"]) == ("claude-test", DEFAULT_MAX_TOKENS)
    assert "temperature" not in first and "system" not in first
    assert second["model"] == "claude-other"


async def test_cache_tokens_count_as_input(
    api: FakeAPI, claude: Callable[..., AnthropicProvider]
) -> None:
    """Input usage is uncached plus cache-written plus cache-read tokens."""
    frames = anthropic_frames(
        ["ok"], input_tokens=10, cache_read=100, cache_write=5, output_tokens=7
    )
    api.queue(sse_reply(frames))
    result = await collect(claude().stream(HELLO, INFO))
    assert result.usage == Usage(input_tokens=115, output_tokens=7)


async def test_result_metadata_names_the_message_and_stop_reason(
    api: FakeAPI, claude: Callable[..., AnthropicProvider]
) -> None:
    """The result carries the message id, the model and the stop reason."""
    api.queue(sse_reply(anthropic_frames(["ok"], model="claude-served")))
    result = await collect(claude().stream(HELLO, INFO))
    assert isinstance(result, ResultEvent)
    assert result.metadata == {
        "provider": "anthropic",
        "message_id": "msg_01",
        "model": "claude-served",
        "stop_reason": "end_turn",
    }


async def test_tool_input_that_is_not_json_is_invalid_response(
    api: FakeAPI, claude: Callable[..., AnthropicProvider]
) -> None:
    """Tool input pieces that do not join into a JSON object are invalid_response."""
    api.queue(sse_reply(anthropic_frames([], [("t1", "shell", ['{"cmd": "ls'])])))
    with pytest.raises(ProviderError, match=r"^invalid_response: .*'shell'.*not JSON"):
        await collect(claude().stream(HELLO, INFO))


async def test_from_config_reads_the_key_from_the_named_variable(
    api: FakeAPI,
) -> None:
    """api_key_env names the variable the key is read from."""
    config = ModelConfig(
        provider="anthropic",
        model="claude-test",
        base_url=api.url,
        api_key_env="TEAM_CLAUDE_KEY",
    )
    provider = AnthropicProvider.from_config(config, env={"TEAM_CLAUDE_KEY": KEY})
    try:
        api.queue(sse_reply(anthropic_frames(["ok"])))
        await collect(provider.stream(HELLO, INFO))
    finally:
        await provider.aclose()
    assert KEY in sent_key(api.requests[0].headers)


def test_from_config_without_a_key_names_the_variable() -> None:
    """No key anywhere is a config error that says which variable to set."""
    config = ModelConfig(provider="anthropic", model="claude-test")
    with pytest.raises(ProviderError, match=r"^config: .*set ANTHROPIC_API_KEY"):
        AnthropicProvider.from_config(config, env={"ANTHROPIC_API_KEY": ""})


def test_from_config_without_a_model_says_to_set_one() -> None:
    """An anthropic model table without a model id is a config error."""
    with pytest.raises(ProviderError, match=r"^config: anthropic needs a model id"):
        AnthropicProvider.from_config(ModelConfig(provider="anthropic"), env={})


def test_config_errors_name_what_to_set() -> None:
    """No key and no model id are config errors that say, word for word, what
    to set."""
    with pytest.raises(ProviderError) as no_key:
        AnthropicProvider(api_key="", key_source="TEAM_KEY")
    assert str(no_key.value) == (
        "config: anthropic needs an API key: set TEAM_KEY, or api_key_env or "
        "api_key in the model's [models.<name>] table"
    )
    with pytest.raises(ProviderError) as no_model:
        AnthropicProvider.from_config(ModelConfig(provider="anthropic"), env={})
    assert str(no_model.value) == (
        'config: anthropic needs a model id: set model (e.g. "claude-sonnet-4-5") '
        "in the [models.<name>] table"
    )


async def test_from_config_without_max_tokens_sends_the_default(api: FakeAPI) -> None:
    """A model table without max_tokens sends DEFAULT_MAX_TOKENS (the API needs
    a cap); one with it sends its own."""
    for max_tokens, sent in ((None, DEFAULT_MAX_TOKENS), (77, 77)):
        config = ModelConfig(
            provider="anthropic",
            model="claude-test",
            base_url=api.url,
            api_key=KEY,
            max_tokens=max_tokens,
        )
        provider = AnthropicProvider.from_config(config, env={})
        try:
            api.queue(sse_reply(anthropic_frames(["ok"])))
            await collect(provider.stream(HELLO, INFO))
        finally:
            await provider.aclose()
        assert api.requests[-1].body["max_tokens"] == sent


async def test_frames_after_message_stop_are_not_read(
    api: FakeAPI, claude: Callable[..., AnthropicProvider]
) -> None:
    """The reply ends at message_stop: a frame the server sends after it is not
    read (it would follow the result)."""
    late = a_event(
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "late"},
        },
    )
    api.queue(sse_reply([*anthropic_frames(["ok"]), late]))
    seen: list[StreamEvent] = []
    result = await collect(claude().stream(HELLO, INFO), seen.append)
    assert result.text == "ok"
    assert [e.text for e in seen if isinstance(e, AssistantDelta)] == ["ok"]
