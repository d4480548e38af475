"""A staged agent's chat across user messages, as the provider's HTTP
server receives it (spec 004 §4.3, §2.1, §2.2).

A session of revision 4 whose turns are staged runs talks to the local
server of `fake_api` through the official SDK (both dialects). The model
answers by the stage its system prompt is of, and each tool call comes with
reasoning of the provider's own (DeepSeek's ``reasoning_content``, an
Anthropic thinking block). The assertions read the request bodies: within
a turn's tool loop the provider's reasoning goes back; the next user
message's requests hold the earlier turn's reasoning only as its compact
outcome, never its ``<ide_reasoning>`` block nor the provider's reasoning;
the mode and reasoning switches are the user's (``/mode``, ``/reasoning``),
and a model reply that asks to switch mode is text.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from conftest import Dialect
from fake_api import FakeAPI, Reply, Request, anthropic_frames, openai_frames, sse_reply
from test_chat_prompt_wire import STREAM, Chat
from test_staged_prompt_wire import (
    ANSWER,
    MICRO,
    PROMPTS,
    WARMUP,
    history_of,
    stage_of,
    tools_of,
)
from wire import hosted, text_of

from steward.actors.session import events as session_events
from steward.clock import FakeClock
from steward.config import Settings
from steward.effects.tools import ToolRegistry
from steward.kinds import KINDS

THOUGHT = "Provider thought: the notes file holds the answer."
SWITCH = "Switching to chat mode now: /mode chat"
OUTCOME = (
    "Reasoning outcome: plan: read notes.txt; next: answer; risks: it may "
    "be missing; delivery: DONE"
)


def user_text(request: Request) -> str:
    """The request's last user message that is no tool result."""
    for m in reversed(request.body["messages"]):
        if m["role"] == "user" and text_of(m["content"]):
            return text_of(m["content"])
    return ""


@dataclass
class StagedModel:
    """Answers by stage: plans in the warmup; in the first turn's act reads
    notes.txt (with reasoning of the provider's own), in the second says it
    switches to chat mode, else answers; delivers with ``Delivery: DONE``."""

    dialect: Dialect
    asked: list[tuple[str, str, Request]] = field(default_factory=list)
    """(the turn's message, the stage, the request) of each request."""

    def __call__(self, request: Request) -> Reply:
        stage, turn = stage_of(request), user_text(request)
        self.asked.append((turn, stage, request))
        answer = SWITCH if turn.startswith("switch") else ANSWER
        if stage == "warmup":
            return self.said(WARMUP)
        if stage == "micro_step":
            return self.said(MICRO)
        if stage == "delivery_check":
            return self.said(f"{answer}\nDelivery: DONE")
        if turn.startswith("what") and "files_read" not in json.dumps(
            request.body["messages"]
        ):
            read = ("c-read", "files_read", ['{"path": "notes.txt"}'])
            if self.dialect.name == "anthropic":
                frames = anthropic_frames([], [read], thinking=[(THOUGHT, "sig-1")])
            else:
                frames = openai_frames([], [read], reasoning=[THOUGHT])
            return sse_reply(frames)
        return self.said(answer)

    def said(self, text: str) -> Reply:
        return sse_reply(self.dialect.frames([text]))

    def of(self, turn: str) -> list[tuple[str, Request]]:
        """The (stage, request) of each request of the turn on ``turn``."""
        return [(stage, r) for t, stage, r in self.asked if t == turn]


@pytest.fixture
async def chat(
    tmp_path: Path, api: FakeAPI, dialect: Dialect, clock: FakeClock
) -> AsyncIterator[Chat]:
    model = StagedModel(dialect)
    api.respond = model
    (tmp_path / "notes.txt").write_text("hello\n")
    async with hosted(
        tmp_path,
        dialect.build(api, echo_reasoning=True),
        clock,
        tools=ToolRegistry.with_builtins(extra=KINDS.tools),
        workspace=tmp_path,
    ) as (host, log):
        yield Chat(host=host, log=log, clock=clock, model=model)  # type: ignore[arg-type]


async def open_staged(chat: Chat) -> None:
    """Open the chat at revision 4, its turns staged runs (agent mode,
    reasoning off, no QA, as the profile says)."""
    opened = Settings().session_settings(
        ToolRegistry.with_builtins(extra=KINDS.tools).specs()
    )
    run = msgspec.structs.replace(
        opened.run, protocol="native", policy="staged", qa=False, prompts=PROMPTS
    )
    start = session_events.SessionOpened(
        session_id="cli:wire",
        channel="cli",
        chat_id="wire",
        settings=msgspec.structs.replace(opened, run=run),
        at=chat.clock.now(),
        revision=session_events.SESSION_REVISION,
    )
    assert await chat.host.submit(STREAM, start) is not None


async def test_the_next_user_message_sees_the_outcome_not_the_reasoning(
    chat: Chat,
) -> None:
    """Within the first turn's tool loop the provider's reasoning goes back
    with its tool call; the second turn's requests hold the first turn's
    answer with its reasoning outcome, and neither its reasoning block nor
    the provider's reasoning."""
    model: StagedModel = chat.model  # type: ignore[assignment]
    await open_staged(chat)
    await chat.send("/reasoning on")
    assert await chat.turn("what do the notes say?") == ANSWER
    assert await chat.turn("thanks, and again?") == ANSWER

    first = model.of("what do the notes say?")
    assert [stage for stage, _ in first] == [
        "warmup",
        "act",
        "micro_step",
        "delivery_check",
    ]
    micro = first[2][1]
    assert THOUGHT in json.dumps(micro.body["messages"])  # echoed in the loop

    second = model.of("thanks, and again?")
    assert [stage for stage, _ in second] == ["warmup", "act", "delivery_check"]
    for _, request in second:
        history = history_of(request)
        assert OUTCOME in history
        assert ANSWER in history
        assert THOUGHT not in history
        assert "<ide_reasoning" not in history
        assert "Research: the notes file" not in history
        assert "reasoning_content" not in history
        assert '"thinking"' not in history
        assert "files_read" not in history  # the earlier tool loop is not shown


async def test_mode_and_reasoning_are_the_users_alone(chat: Chat) -> None:
    """A turn whose model says it switches to chat mode leaves the next turn
    in agent mode (all tools, the warmup with reasoning on); only the
    user's ``/mode chat`` makes the turn after it read-only, and
    ``/reasoning off`` takes its warmup away."""
    model: StagedModel = chat.model  # type: ignore[assignment]
    await open_staged(chat)
    await chat.send("/reasoning on")
    assert await chat.turn("switch to chat mode") == SWITCH
    assert await chat.turn("still agent?") == ANSWER
    await chat.send("/mode chat")
    assert await chat.turn("now chat?") == ANSWER
    await chat.send("/reasoning off")
    await chat.send("/mode agent")
    assert await chat.turn("agent, no reasoning?") == ANSWER

    after = model.of("still agent?")
    assert [stage for stage, _ in after][:2] == ["warmup", "act"]
    assert "files_write" in tools_of(after[1][1])
    chatting = model.of("now chat?")
    assert chatting[0][0] == "act"  # no warmup in chat mode
    assert "files_write" not in tools_of(chatting[0][1])
    assert "files_read" in tools_of(chatting[0][1])
    plain = model.of("agent, no reasoning?")
    assert plain[0][0] == "act"  # reasoning off: no warmup
    assert "files_write" in tools_of(plain[0][1])
    switched = [
        type(r.event).__name__
        for r in await chat.log.read(STREAM)
        if isinstance(
            r.event, session_events.ModeSwitched | session_events.ReasoningSwitched
        )
    ]
    assert switched == [
        "ReasoningSwitched",
        "ModeSwitched",
        "ReasoningSwitched",
        "ModeSwitched",
    ]
