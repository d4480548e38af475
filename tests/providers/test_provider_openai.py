"""The OpenAI provider: what it sends and what it reads, beyond the contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from conftest import KEY
from fake_api import FakeAPI, o_chunk, o_data, openai_frames, sse_reply

from steward.actors.prompt import Prompt
from steward.actors.run.events import ChatMessage, ToolCall, ToolSpec, Usage
from steward.config import ModelConfig
from steward.effects.llm import RequestInfo, ToolUseEvent, collect
from steward.effects.llm._wire import ToolNames
from steward.effects.llm.openai import KEYLESS, OpenAIProvider, to_request
from steward.errors import ProviderError

INFO = RequestInfo(stream="run.run-1", request_id="req-1")
HELLO = Prompt(model="", system="", messages=(ChatMessage(role="user", content="hi"),))


@pytest.fixture
async def gpt(api: FakeAPI) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    """Build OpenAI providers against ``api``; all are closed after."""
    made: list[OpenAIProvider] = []

    def make(**kw: Any) -> OpenAIProvider:
        kw.setdefault("api_key", KEY)
        kw.setdefault("model", "gpt-test")
        provider = OpenAIProvider(base_url=f"{api.url}/v1", **kw)
        made.append(provider)
        return provider

    try:
        yield make
    finally:
        for provider in made:
            await provider.aclose()


async def test_the_request_is_in_chat_completions_shape(
    api: FakeAPI, gpt: Callable[..., OpenAIProvider]
) -> None:
    """The system prompt leads, tool calls carry JSON arguments, tool messages
    answer by id, usage is asked for, and dotted tool names are made valid."""
    prompt = Prompt(
        model="",
        system="Be brief.",
        messages=(
            ChatMessage(role="user", content="Read a.txt."),
            ChatMessage(
                role="assistant",
                content="",
                tool_calls=(
                    ToolCall(id="t1", name="files.read", args={"path": "a.txt"}),
                ),
            ),
            ChatMessage(role="tool", content="AAA", tool_call_id="t1"),
            ChatMessage(role="assistant", content="It says AAA."),
            ChatMessage(role="user", content="Thanks."),
        ),
        tools=(ToolSpec(name="files.read", description="Read a file."),),
        protocol="native",
        temperature=0.5,
        max_tokens=200,
    )
    api.queue(sse_reply(openai_frames(["ok"])))
    await collect(gpt().stream(prompt, INFO))
    request = api.requests[0]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body == {
        "model": "gpt-test",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.5,
        "max_tokens": 200,  # a base_url server gets the older name
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Read a.txt."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {
                            "name": "files_read",
                            "arguments": '{"path": "a.txt"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "AAA"},
            {"role": "assistant", "content": "It says AAA."},
            {"role": "user", "content": "Thanks."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "files_read",
                    "description": "Read a file.",
                    "parameters": {"type": "object"},
                },
            }
        ],
    }


def test_openai_itself_gets_max_completion_tokens() -> None:
    """Without base_url the reply cap is sent as max_completion_tokens."""
    params = to_request(HELLO, ToolNames(()), model="gpt-test", max_tokens=64)
    assert params["max_completion_tokens"] == 64
    assert "max_tokens" not in params


async def test_parallel_tool_calls_are_joined_by_index(
    api: FakeAPI, gpt: Callable[..., OpenAIProvider]
) -> None:
    """Argument pieces of parallel calls, interleaved, are joined per index."""
    frames = openai_frames(
        [],
        [
            ("c1", "files_read", ['{"path":', ' "a.txt"}']),
            ("c2", "files_read", ['{"path":', ' "b.txt"', "}"]),
        ],
        interleave=True,
    )
    api.queue(sse_reply(frames))
    seen: list[Any] = []
    prompt = Prompt(
        model="",
        system="",
        messages=HELLO.messages,
        tools=(ToolSpec(name="files.read"),),
    )
    result = await collect(gpt().stream(prompt, INFO), seen.append)
    assert result.tool_calls == (
        ToolCall(id="c1", name="files.read", args={"path": "a.txt"}),
        ToolCall(id="c2", name="files.read", args={"path": "b.txt"}),
    )
    assert [e.id for e in seen if isinstance(e, ToolUseEvent)] == ["c1", "c2"]
    assert result.metadata["finish_reason"] == "tool_calls"


async def test_a_stream_without_usage_reports_zero_and_says_so(
    api: FakeAPI, gpt: Callable[..., OpenAIProvider]
) -> None:
    """A server that sends no usage chunk gives zero usage, marked unreported."""
    api.queue(sse_reply(openai_frames(["ok"], usage=False)))
    result = await collect(gpt().stream(HELLO, INFO))
    assert result.text == "ok"
    assert result.usage == Usage()
    assert result.metadata["usage_reported"] is False


async def test_an_error_chunk_with_a_client_code_is_not_retryable(
    api: FakeAPI, gpt: Callable[..., OpenAIProvider]
) -> None:
    """An in-stream error object with code 400 (vLLM's shape) is config."""
    frames = [
        o_data(o_chunk({"role": "assistant", "content": ""})),
        o_data(
            {
                "error": {
                    "object": "error",
                    "message": "context too long",
                    "type": "BadRequestError",
                    "code": 400,
                }
            }
        ),
    ]
    api.queue(sse_reply(frames))
    with pytest.raises(ProviderError, match="context too long") as info:
        await collect(gpt().stream(HELLO, INFO))
    assert (info.value.kind, info.value.retryable) == ("config", False)


async def test_a_compatible_server_needs_no_key(api: FakeAPI) -> None:
    """With base_url and no key, a placeholder key is sent and the call works."""
    config = ModelConfig(provider="openai", model="llama3", base_url=f"{api.url}/v1")
    provider = OpenAIProvider.from_config(config, env={})
    try:
        api.queue(sse_reply(openai_frames(["local"])))
        result = await collect(provider.stream(HELLO, INFO))
    finally:
        await provider.aclose()
    assert result.text == "local"
    assert api.requests[0].headers["authorization"] == f"Bearer {KEYLESS}"
    assert api.requests[0].body["model"] == "llama3"


def test_openai_itself_without_a_key_names_the_variable() -> None:
    """No key and no base_url is a config error that says which variable to set."""
    config = ModelConfig(provider="openai", model="gpt-test")
    with pytest.raises(ProviderError, match=r"^config: .*set OPENAI_API_KEY"):
        OpenAIProvider.from_config(config, env={})


def test_from_config_without_a_model_says_to_set_one() -> None:
    """An openai model table without a model id is a config error."""
    with pytest.raises(ProviderError, match=r"^config: openai needs a model id"):
        OpenAIProvider.from_config(ModelConfig(provider="openai"), env={})


def test_config_errors_name_what_to_set() -> None:
    """No key (and no base_url) and no model id are config errors that say, word
    for word, what to set."""
    with pytest.raises(ProviderError) as no_key:
        OpenAIProvider(api_key=None, key_source="TEAM_KEY")
    assert str(no_key.value) == (
        "config: openai needs an API key: set TEAM_KEY, or api_key_env or "
        "api_key in the model's [models.<name>] table (a base_url server may go "
        "without)"
    )
    with pytest.raises(ProviderError) as no_model:
        OpenAIProvider.from_config(ModelConfig(provider="openai"), env={})
    assert str(no_model.value) == (
        'config: openai needs a model id: set model (e.g. "gpt-4o-mini", or the '
        "name your server serves) in the [models.<name>] table"
    )
