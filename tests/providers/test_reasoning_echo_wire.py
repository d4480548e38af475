"""The reasoning a provider wants back within a tool loop, as its HTTP
server receives it.

A host runs a native run whose model reads a file, then answers, through
the official SDK against the local server of `fake_api`. The server plays
the APIs that refuse a tool loop's next turn without the reasoning they
returned: DeepSeek (Chat Completions) returns ``reasoning_content`` and
answers HTTP 400 with its own error text to a request whose assistant
tool-call message lacks it; Anthropic returns signed thinking blocks and
refuses a tool_use turn that does not start with them, unchanged. A
provider that needs no echo (Chat Completions by default) sends none back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import DIALECTS, Dialect
from fake_api import (
    FakeAPI,
    Reply,
    Request,
    anthropic_error,
    anthropic_frames,
    json_reply,
    openai_frames,
    sse_reply,
)
from wire import hosted

from steward import events, replay
from steward.actors.prompt import Prompt
from steward.actors.run import events as run_events
from steward.actors.task.events import TaskCreated, Template
from steward.clock import FakeClock
from steward.config import Settings
from steward.effects.llm.base import RequestInfo, collect
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

RUN = "echo"
STREAM = f"run.{RUN}"
READ = ("c-read", "files_read", ['{"path": "notes.txt"}'])
THOUGHT = "The user wants the notes; read notes.txt first."
SIGNATURE = "sig-EqQBCgIYAhIM1gbcDa9GJwZA2b3h"
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
DEEPSEEK_REFUSAL = {
    "error": {
        "message": "The `reasoning_content` in the thinking mode must be passed "
        "back to the API.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
}
ANTHROPIC_REFUSAL = (
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but "
    "found `tool_use`. When `thinking` is enabled, a final `assistant` message "
    "must start with a thinking block (preceeding the lastmost set of "
    "`tool_use` and `tool_result` blocks)."
)


def has_results(request: Request) -> bool:
    """Whether the request answers a tool call (either dialect)."""
    for m in request.body["messages"]:
        if m["role"] == "tool":
            return True
        if isinstance(m["content"], list) and any(
            b.get("type") == "tool_result" for b in m["content"]
        ):
            return True
    return False


def assistants(request: Request) -> list[dict[str, Any]]:
    return [m for m in request.body["messages"] if m["role"] == "assistant"]


@dataclass
class DeepSeek:
    """DeepSeek's Chat Completions in thinking mode: each reply carries
    ``reasoning_content``; a request whose assistant tool-call message
    lacks the one that reply had is refused, as DeepSeek refuses it."""

    strict: bool = True
    """``False``: an OpenAI-compatible server that returns reasoning but
    wants none back (and takes any request)."""
    returned: dict[str, str] = field(default_factory=dict)
    refused: int = 0

    def __call__(self, request: Request) -> Reply:
        for m in assistants(request):
            calls = m.get("tool_calls") or []
            if calls and self.strict:
                if m.get("reasoning_content") != self.returned[calls[0]["id"]]:
                    self.refused += 1
                    return json_reply(DEEPSEEK_REFUSAL, status=400)
        if has_results(request):
            return sse_reply(
                openai_frames(["The notes say hello."], reasoning=["Done: answer."])
            )
        self.returned[READ[0]] = THOUGHT
        return sse_reply(
            openai_frames([], [READ], reasoning=[THOUGHT[:20], THOUGHT[20:]])
        )


@dataclass
class Claude:
    """Claude with extended thinking: the tool_use turn comes with a signed
    thinking block and a redacted one, which must start that assistant turn
    in the next request, unchanged."""

    refused: int = 0

    def __call__(self, request: Request) -> Reply:
        echoed = [
            {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": REDACTED},
        ]
        for m in assistants(request):
            uses = [b for b in m["content"] if b["type"] == "tool_use"]
            if uses and m["content"][:2] != echoed:
                self.refused += 1
                return json_reply(anthropic_error(400, ANTHROPIC_REFUSAL), status=400)
        if has_results(request):
            return sse_reply(
                anthropic_frames(["The notes say hello."], thinking=[("Answer.", "s2")])
            )
        frames = anthropic_frames(
            [], [READ], thinking=[(THOUGHT, SIGNATURE)], redacted=[REDACTED]
        )
        return sse_reply(frames)


@dataclass
class Looped:
    host: Host
    log: Any
    api: FakeAPI
    dialect: Dialect

    async def run(self, model: Callable[[Request], Reply]) -> Any:
        """Run the native run against ``model``; its state at the end."""
        self.api.respond = model
        settings = msgspec.structs.replace(
            Settings().run_settings(tools=ToolRegistry.with_builtins().specs()),
            protocol="native",
        )
        created = run_events.RunCreated(
            run_id=RUN, input_text="What do the notes say?", settings=settings
        )
        assert await self.host.submit(STREAM, created) is not None
        for _ in range(1_000):
            state = replay.rebuild(await self.log.read(STREAM), kinds=KINDS)
            if state.status in ("completed", "failed"):
                assert await self.host.settle(30)
                assert replay.verify(await self.log.read(STREAM), kinds=KINDS) is None
                return state
            await asyncio.sleep(0.01)
        raise AssertionError(f"{STREAM} did not end")

    @property
    def asked(self) -> list[Request]:
        return [r for r in self.api.requests if r.path == self.dialect.path]


def looped(name: str, **provider: Any) -> Callable[..., Any]:
    """A fixture: a host whose provider is ``name``'s SDK (built with
    ``provider``) against the fake API, with notes.txt in its workspace."""

    @pytest.fixture
    async def fixture(
        tmp_path: Path, api: FakeAPI, clock: FakeClock
    ) -> AsyncIterator[Looped]:
        dialect = DIALECTS[name]
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        (workspace / "notes.txt").write_text("hello\n")
        built = dialect.build(api, **provider)
        async with hosted(tmp_path, built, clock) as (host, log):
            yield Looped(host=host, log=log, api=api, dialect=dialect)

    return fixture


deepseek = looped("openai", echo_reasoning=True)
plain_openai = looped("openai")
claude = looped("anthropic")


async def test_deepseek_gets_its_reasoning_content_back_in_the_tool_loop(
    deepseek: Looped,
) -> None:
    """The reply that called a tool carried reasoning_content: the tool
    loop's next request sends it back on that assistant message, the
    server takes it and the run completes; the reply's reasoning is
    recorded with it, not in its text."""
    model = DeepSeek()
    state = await deepseek.run(model)
    assert state.status == "completed", state.reason
    assert state.output == "The notes say hello."
    assert model.refused == 0
    first, second = deepseek.asked
    assert assistants(first) == []
    (called,) = assistants(second)
    assert called["reasoning_content"] == THOUGHT
    assert called["tool_calls"][0]["id"] == READ[0]
    replies = [
        r.event
        for r in await deepseek.log.read(STREAM)
        if isinstance(r.event, events.LlmResponded)
    ]
    assert [r.reasoning for r in replies] == [
        (events.Reasoning(text=THOUGHT),),
        (events.Reasoning(text="Done: answer."),),
    ]
    assert THOUGHT not in json.dumps([m.get("content") for m in assistants(second)])


async def test_without_echo_deepseek_refuses_the_loop(plain_openai: Looped) -> None:
    """A Chat Completions provider left at its default sends no reasoning
    back, and DeepSeek refuses the tool loop's next turn with its error:
    the run fails naming it (so the server above does check)."""
    model = DeepSeek()
    state = await plain_openai.run(model)
    assert state.status == "failed"
    assert "reasoning_content` in the thinking mode must be passed back" in str(
        state.reason
    )
    assert model.refused == 1
    assert all("reasoning_content" not in m for m in assistants(plain_openai.asked[1]))


async def test_a_provider_that_needs_no_echo_gets_none(plain_openai: Looped) -> None:
    """A compatible server that returns reasoning but needs none back (the
    openai provider's default): no request sends any, and the run
    completes."""
    state = await plain_openai.run(DeepSeek(strict=False))
    assert state.status == "completed", state.reason
    for request in plain_openai.asked:
        assert "reasoning_content" not in json.dumps(request.body)
        assert THOUGHT not in json.dumps(request.body)


async def test_anthropic_gets_its_thinking_blocks_back_unchanged(
    claude: Looped,
) -> None:
    """The tool_use turn came with a signed thinking block and a redacted
    one: the next request's assistant turn starts with both, unchanged,
    and the run completes."""
    model = Claude()
    state = await claude.run(model)
    assert state.status == "completed", state.reason
    assert state.output == "The notes say hello."
    assert model.refused == 0
    (called,) = assistants(claude.asked[1])
    assert [b["type"] for b in called["content"]] == [
        "thinking",
        "redacted_thinking",
        "tool_use",
    ]
    assert called["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": SIGNATURE,
    }


async def test_a_whole_reply_keeps_its_reasoning(
    api: FakeAPI, dialect: Dialect
) -> None:
    """A reply asked for whole (``stream = false``) gives its reasoning as
    a streamed one does: DeepSeek's reasoning_content, a signed thinking
    block."""
    provider = dialect.build(api, stream=False)
    body = dialect.whole("Hi.")
    if dialect.name == "openai":
        body["choices"][0]["message"]["reasoning_content"] = THOUGHT
        expected = events.Reasoning(text=THOUGHT)
    else:
        thinking = {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE}
        body["content"].insert(0, thinking)
        expected = events.Reasoning(text=THOUGHT, signature=SIGNATURE)
    api.queue(json_reply(body))
    prompt = Prompt(
        model="", system="", messages=(events.ChatMessage(role="user", content="hi"),)
    )
    try:
        result = await collect(
            provider.stream(prompt, RequestInfo(stream="run.r", request_id="r/1"))
        )
    finally:
        await provider.aclose()
    assert (result.text, result.reasoning) == ("Hi.", (expected,))


async def test_a_task_s_call_gives_deepseek_its_reasoning_back(
    deepseek: Looped,
) -> None:
    """A task program's atomic call is a tool loop too: its next request
    sends the reasoning back on the assistant message that called the tool."""
    model = DeepSeek()
    deepseek.api.respond = model
    reader = Template(
        name="reader",
        instructions="What do the notes say?",
        tools=("files.read",),
        subtasks=False,
    )
    task = TaskCreated(
        task_id="t1",
        program="(reader)",
        templates=(reader,),
        tools=ToolRegistry.with_builtins().specs(["files.read"]),
    )
    assert await deepseek.host.submit("task.t1", task) is not None
    for _ in range(1_000):
        state = replay.rebuild(await deepseek.log.read("task.t1"), kinds=KINDS)
        if state.status in ("completed", "failed"):
            break
        await asyncio.sleep(0.01)
    assert (state.status, state.output) == ("completed", "The notes say hello."), (
        state.error
    )
    assert model.refused == 0
    (called,) = assistants(deepseek.asked[1])
    assert called["reasoning_content"] == THOUGHT
    assert replay.verify(await deepseek.log.read("task.t1"), kinds=KINDS) is None
