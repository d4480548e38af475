"""Fixtures for the provider suite: a local fake API and the providers under test.

Contract tests take the ``dialect`` fixture and run once per provider; a
provider joins the suite by adding a ``Dialect`` to ``DIALECTS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fake_api import (
    FakeAPI,
    a_event,
    anthropic_error,
    anthropic_frames,
    anthropic_message,
    o_chunk,
    o_data,
    openai_completion,
    openai_error,
    openai_frames,
)

from steward.effects.llm.anthropic import AnthropicProvider
from steward.effects.llm.openai import OpenAIProvider

KEY = "sk-test-S3CRET-key-0123456789abcdef"
"""The API key every provider under test is given."""


@dataclass(frozen=True)
class Dialect:
    """One API's wire format, and how to build its provider against a FakeAPI."""

    name: str
    path: str
    """The request path the SDK posts to."""
    frames: Callable[..., list[bytes]]
    """A streamed reply: ``frames(text, tools, input_tokens=, output_tokens=)``;
    ``complete=False`` leaves out the terminal frame."""
    whole: Callable[..., dict[str, Any]]
    """A non-streamed reply: ``whole(text, tools)``."""
    error: Callable[[int, str], dict[str, Any]]
    """An error body for a status."""
    error_frames: list[bytes]
    """A stream that starts, then reports an overloaded server in-band."""
    malformed_frames: list[bytes]
    """A stream whose second frame's data is not JSON."""
    build: Callable[..., Any]
    """``build(api, **kw)``: a provider talking to ``api``."""


def _anthropic_frames(*a: Any, complete: bool = True, **kw: Any) -> list[bytes]:
    return anthropic_frames(*a, stop=complete, **kw)


def _openai_frames(*a: Any, complete: bool = True, **kw: Any) -> list[bytes]:
    return openai_frames(*a, finish=complete, **kw)


def _build_anthropic(api: FakeAPI, **kw: Any) -> AnthropicProvider:
    kw.setdefault("api_key", KEY)
    return AnthropicProvider(model="claude-test", base_url=api.url, **kw)


def _build_openai(api: FakeAPI, **kw: Any) -> OpenAIProvider:
    kw.setdefault("api_key", KEY)
    return OpenAIProvider(model="gpt-test", base_url=f"{api.url}/v1", **kw)


DIALECTS = {
    "anthropic": Dialect(
        name="anthropic",
        path="/v1/messages",
        frames=_anthropic_frames,
        whole=anthropic_message,
        error=anthropic_error,
        error_frames=[
            *anthropic_frames(["Hel"], stop=False)[:4],
            a_event(
                "error",
                {
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                },
            ),
        ],
        malformed_frames=[
            anthropic_frames(["x"])[0],
            b"event: content_block_start\ndata: {not json\n\n",
        ],
        build=_build_anthropic,
    ),
    "openai": Dialect(
        name="openai",
        path="/v1/chat/completions",
        frames=_openai_frames,
        whole=openai_completion,
        error=openai_error,
        error_frames=[
            o_data(o_chunk({"role": "assistant", "content": "Hel"})),
            o_data(
                {
                    "error": {
                        "message": "The server is overloaded",
                        "type": "server_error",
                        "code": None,
                    }
                }
            ),
        ],
        malformed_frames=[
            o_data(o_chunk({"role": "assistant", "content": ""})),
            b"data: {not json\n\n",
        ],
        build=_build_openai,
    ),
}


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    """A fake API server on 127.0.0.1, stopped after the test."""
    server = FakeAPI()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=sorted(DIALECTS))
def dialect(request: pytest.FixtureRequest) -> Dialect:
    """The provider under test, by wire format."""
    return DIALECTS[request.param]


ProviderFactory = Callable[..., Any]


@pytest.fixture
async def connect(api: FakeAPI, dialect: Dialect) -> AsyncIterator[ProviderFactory]:
    """Build providers of ``dialect`` against ``api``; all are closed after."""
    made: list[Any] = []

    def make(**kw: Any) -> Any:
        provider = dialect.build(api, **kw)
        made.append(provider)
        return provider

    try:
        yield make
    finally:
        for provider in made:
            await provider.aclose()
