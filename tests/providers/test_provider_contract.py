"""The provider contract, run against every HTTP provider through its real SDK.

Each test runs once per dialect (``anthropic``, ``openai``): the SDK client
talks to a local server that answers in that API's wire format.
"""

from __future__ import annotations

import email.utils
import logging
import socket
import time
import traceback
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from conftest import KEY, Dialect, ProviderFactory
from fake_api import (
    FakeAPI,
    echo_key_reply,
    json_reply,
    raw_reply,
    sse_reply,
    stall_reply,
)

from steward.actors.prompt import Prompt
from steward.actors.run.events import ChatMessage, ToolCall, ToolSpec, Usage
from steward.effects.llm import (
    AssistantDelta,
    RequestInfo,
    ResultEvent,
    StreamEvent,
    SystemEvent,
    ToolUseEvent,
    UsageEvent,
    collect,
)
from steward.errors import ProviderError

INFO = RequestInfo(stream="run.run-1", request_id="req-1")
PROMPT = Prompt(
    model="",
    system="Be brief.",
    messages=(ChatMessage(role="user", content="Say hello."),),
)
TOOL_PROMPT = msgspec.structs.replace(
    PROMPT,
    tools=(
        ToolSpec(
            name="files.read",
            description="Read a file.",
            parameters={"properties": {"path": {"type": "string"}}},
        ),
        ToolSpec(name="shell", description="Run a command."),
    ),
    protocol="native",
)


async def ask(
    provider: Any, prompt: Prompt = PROMPT
) -> tuple[list[StreamEvent], ResultEvent]:
    """Stream ``prompt`` through ``collect``; the events seen and the result."""
    seen: list[StreamEvent] = []
    result = await collect(provider.stream(prompt, INFO), seen.append)
    return seen, result


async def fail(provider: Any, prompt: Prompt = PROMPT) -> ProviderError:
    """The ``ProviderError`` asking ``prompt`` raises."""
    with pytest.raises(ProviderError) as info:
        await ask(provider, prompt)
    return info.value


def kinds(events: list[StreamEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


# -- replies ----------------------------------------------------------------------


async def test_text_reply_streams_deltas_then_one_result(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A streamed text reply gives system, the deltas in order, usage, one result."""
    api.queue(sse_reply(dialect.frames(["Hel", "lo", "!"])))
    events, result = await ask(connect())
    assert isinstance(events[0], SystemEvent)
    assert events[0].metadata["provider"] == dialect.name
    deltas = [e.text for e in events if isinstance(e, AssistantDelta)]
    assert deltas == ["Hel", "lo", "!"]
    assert isinstance(events[-1], ResultEvent)
    assert sum(isinstance(e, ResultEvent) for e in events) == 1
    assert result.text == "Hello!"
    assert result.tool_calls == ()
    assert api.requests[0].path == dialect.path
    assert api.requests[0].body["stream"] is True


async def test_tool_calls_come_back_with_steward_names_and_args(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """Tool calls streamed in JSON pieces are joined, parsed and renamed back."""
    api.queue(
        sse_reply(
            dialect.frames(
                ["Reading."],
                [
                    ("call_1", "files_read", ['{"pa', 'th": "a', '.txt"}']),
                    ("call_2", "shell", []),
                ],
            )
        )
    )
    events, result = await ask(connect(), TOOL_PROMPT)
    expected = (
        ToolCall(id="call_1", name="files.read", args={"path": "a.txt"}),
        ToolCall(id="call_2", name="shell", args={}),
    )
    assert result.tool_calls == expected
    assert result.text == "Reading."
    uses = [e for e in events if isinstance(e, ToolUseEvent)]
    assert [(u.id, u.name, u.args) for u in uses] == [
        (c.id, c.name, c.args) for c in expected
    ]
    assert kinds(events).index("ToolUseEvent") < kinds(events).index("ResultEvent")


async def test_usage_is_reported_and_aggregated(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """Usage payloads arrive as cumulative events; the result holds the totals."""
    api.queue(sse_reply(dialect.frames(["ok"], input_tokens=120, output_tokens=33)))
    events, result = await ask(connect())
    usage = [e for e in events if isinstance(e, UsageEvent)]
    assert usage and all(u.cumulative for u in usage)
    assert result.usage == Usage(input_tokens=120, output_tokens=33)


async def test_plain_json_reply_when_streaming_is_off(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """With stream=False one JSON reply gives the same normalized events."""
    api.queue(
        json_reply(dialect.whole("Hi there.", [("call_9", "files_read", {"p": 1})]))
    )
    events, result = await ask(connect(stream=False), TOOL_PROMPT)
    assert result.text == "Hi there."
    assert result.tool_calls == (
        ToolCall(id="call_9", name="files.read", args={"p": 1}),
    )
    assert result.usage == Usage(input_tokens=21, output_tokens=8)
    assert kinds(events) == [
        "SystemEvent",
        "AssistantDelta",
        "ToolUseEvent",
        "UsageEvent",
        "ResultEvent",
    ]
    assert "stream" not in api.requests[0].body or not api.requests[0].body["stream"]


async def test_repr_names_the_class_and_the_model(
    dialect: Dialect, connect: ProviderFactory
) -> None:
    """A provider's repr is its class and default model, nothing else."""
    expected = {
        "anthropic": "AnthropicProvider(model='claude-test')",
        "openai": "OpenAIProvider(model='gpt-test')",
    }
    assert repr(connect()) == expected[dialect.name]


# -- failures ---------------------------------------------------------------------


async def test_rate_limit_with_retry_after_seconds(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A 429 with Retry-After is rate_limit, retryable, retry_after in seconds."""
    api.queue(
        json_reply(
            dialect.error(429, "Too many requests"),
            status=429,
            headers={"Retry-After": "7"},
        )
    )
    error = await fail(connect())
    assert (error.kind, error.retryable, error.retry_after) == ("rate_limit", True, 7)
    assert error.status == 429
    assert "Too many requests" in str(error)
    assert len(api.requests) == 1, "the SDK must not retry on its own"


async def test_an_error_answer_to_a_plain_call_is_typed_alike(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """With streaming off, a 429 with Retry-After is typed as a streamed call's."""
    api.queue(
        json_reply(
            dialect.error(429, "Too many requests"),
            status=429,
            headers={"Retry-After": "7"},
        )
    )
    error = await fail(connect(stream=False))
    assert (error.kind, error.retryable, error.retry_after) == ("rate_limit", True, 7)
    assert error.status == 429
    assert "Too many requests" in str(error)


async def test_retry_after_as_an_http_date(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A Retry-After HTTP date on a 503 becomes the seconds until that date."""
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    api.queue(
        json_reply(
            dialect.error(503, "Overloaded"), status=503, headers={"Retry-After": when}
        )
    )
    error = await fail(connect())
    assert (error.kind, error.retryable) == ("internal", True)
    assert error.retry_after is not None and 27 <= error.retry_after <= 31


async def test_server_error_is_internal_and_retryable(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A 500 is internal and retryable, with no retry_after, after one request."""
    api.queue(json_reply(dialect.error(500, "boom"), status=500))
    error = await fail(connect())
    assert (error.kind, error.retryable, error.retry_after) == ("internal", True, None)
    assert error.status == 500
    assert len(api.requests) == 1


async def test_bad_key_is_auth_and_not_retryable(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A 401 is auth, not retryable, and says where the key came from."""
    api.queue(json_reply(dialect.error(401, "invalid x-api-key"), status=401))
    error = await fail(connect(key_source="MY_KEY_VAR"))
    assert (error.kind, error.retryable) == ("auth", False)
    assert "MY_KEY_VAR" in str(error)


async def test_bad_request_is_config_and_not_retryable(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A 400 (unknown model, bad parameter) is config and not retryable."""
    api.queue(json_reply(dialect.error(400, "model: not found"), status=400))
    error = await fail(connect())
    assert (error.kind, error.retryable) == ("config", False)
    assert "model: not found" in str(error)


async def test_dropped_connection_mid_stream_is_transport(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A connection cut in the middle of the body is transport and retryable."""
    api.queue(sse_reply(dialect.frames(["Hel", "lo"], complete=False), cut=True))
    error = await fail(connect())
    assert (error.kind, error.retryable) == ("transport", True)


async def test_refused_connection_is_transport(
    dialect: Dialect, connect: ProviderFactory
) -> None:
    """Nothing listening at base_url is transport and retryable."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once the socket closes: nobody listens
    provider = dialect.build(SimpleNamespace(url=f"http://127.0.0.1:{port}"))
    try:
        error = await fail(provider)
    finally:
        await provider.aclose()
    assert (error.kind, error.retryable) == ("transport", True)


async def test_no_answer_is_a_timeout(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A server that never answers is timeout and retryable, within the timeout."""
    api.queue(stall_reply)
    started = time.monotonic()
    error = await fail(connect(timeout=0.3))
    assert (error.kind, error.retryable) == ("timeout", True)
    assert time.monotonic() - started < 3


async def test_stalled_stream_is_a_timeout(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A stream that stops sending is timeout once the call's deadline passes."""
    frames = dialect.frames(["Hel"], complete=False)

    def reply(h: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for frame in frames:
            h.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
        h.wfile.flush()
        stall_reply(h)

    api.queue(reply)
    error = await fail(connect(timeout=0.3))
    assert (error.kind, error.retryable) == ("timeout", True)


async def test_malformed_stream_data_is_invalid_response(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A data line that is not JSON is invalid_response."""
    api.queue(sse_reply(dialect.malformed_frames))
    error = await fail(connect())
    assert error.kind == "invalid_response"
    assert not error.retryable


async def test_malformed_json_body_is_invalid_response(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A plain reply whose body is not JSON is invalid_response."""
    api.queue(raw_reply(b'{"id": "msg_1", "content": [', status=200))
    error = await fail(connect(stream=False))
    assert error.kind == "invalid_response"


async def test_stream_without_its_terminal_event_is_invalid_response(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """A stream that ends cleanly but without its end marker fails deterministically."""
    api.queue(sse_reply(dialect.frames(["Hel", "lo"], complete=False)))
    error = await fail(connect())
    assert error.kind == "invalid_response"
    assert "incomplete" in str(error)


async def test_error_inside_the_stream_is_typed(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """An overload reported inside a 200 stream is internal and retryable."""
    api.queue(sse_reply(dialect.error_frames))
    error = await fail(connect())
    assert (error.kind, error.retryable) == ("internal", True)
    assert "overloaded" in str(error).lower()


async def test_consumer_closing_early_releases_the_connection(
    api: FakeAPI, dialect: Dialect, connect: ProviderFactory
) -> None:
    """Closing the stream after the first event closes the response cleanly."""
    api.queue(sse_reply(dialect.frames(["a", "b"])), sse_reply(dialect.frames(["c"])))
    provider = connect()
    stream = provider.stream(PROMPT, INFO)
    first = await anext(stream)
    await stream.aclose()
    assert isinstance(first, SystemEvent)
    _, result = await ask(provider)  # the client is still usable
    assert result.text == "c"


# -- secrets ----------------------------------------------------------------------


async def test_the_key_appears_in_no_event_and_no_error(
    api: FakeAPI,
    dialect: Dialect,
    connect: ProviderFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The key reaches the server but no event, error message, repr, traceback
    or debug log line, even when the server echoes it back."""
    caplog.set_level(logging.DEBUG)
    api.queue(
        sse_reply(dialect.frames(["fine"], [("c1", "shell", ['{"cmd": "ls"}'])])),
        echo_key_reply(401),
        json_reply(dialect.error(429, f"slow down {KEY}"), status=429),
    )
    provider = connect()
    events, result = await ask(provider, TOOL_PROMPT)
    sent = api.requests[0].headers
    assert KEY in (sent.get("x-api-key", "") + sent.get("authorization", ""))
    texts = [repr(provider), repr(events), repr(result)]
    texts.extend(msgspec.json.encode(e).decode() for e in events)
    errors = [await fail(provider, TOOL_PROMPT) for _ in range(2)]
    for error in errors:
        texts += [str(error), repr(error), "".join(traceback.format_exception(error))]
    assert "***" in str(errors[0])  # the echo came, and was redacted
    assert "slow down ***" in str(errors[1])
    assert caplog.records, "the SDKs' debug logs were not captured"
    texts.append(caplog.text)
    leaked = [t for t in texts if KEY in t]
    assert not leaked, leaked
