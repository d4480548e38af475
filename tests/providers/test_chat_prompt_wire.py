"""What a chat's model is asked, as the provider's HTTP server receives it.

Each test talks to a session through the official SDK (both dialects)
against the local server of `fake_api`, whose model answers each request
from what the request holds (`Model`). The assertions read the request
bodies the server received: a turn's request ends with the turn's own
messages, whatever history comes before them (spec 003: system prompt, core
memory, summary, window, then the messages the turn answers; a subagent's
last message is its task).
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import DIALECTS, KEY, Dialect
from fake_api import FakeAPI, Reply, Request, sse_reply
from wire import hosted, system_of, text_of

from steward import cli, events, replay
from steward.actors.run import events as run_events
from steward.actors.session import events as session_events
from steward.actors.session.state import session_stream
from steward.clock import FakeClock
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

SESSION = "cli:wire"
STREAM = session_stream(SESSION)


def said(request: Request) -> list[tuple[str, str]]:
    """The request's user and assistant messages, (role, text), in order;
    each text block of one as its own (Anthropic's API merges consecutive
    messages of a role into one message of several blocks)."""
    return [
        (m["role"], text)
        for m in request.body["messages"]
        if m["role"] in ("user", "assistant")
        for text in (
            [text_of([b]) for b in m["content"] if b.get("type") == "text"]
            if isinstance(m["content"], list)
            else [m["content"] or ""]
        )
    ]


def last_user(request: Request) -> str:
    return next(text for role, text in reversed(said(request)) if role == "user")


@dataclass
class Model:
    """A model behind the fake API: the memory writer gets a summary; a
    message ``spawn: TASK`` gets a `subagent_spawn` call, the call's result
    a finish; anything else ``re: <its last user message>``."""

    dialect: Dialect
    asked: list[Request] = field(default_factory=list)
    """The requests of turns and subagents (not the memory writer's)."""

    def __call__(self, request: Request) -> Reply:
        if "memory writer" in system_of(request):
            reply = json.dumps({"operations": [], "summary": "They talked."})
        else:
            self.asked.append(request)
            last = last_user(request)
            if last.startswith("spawn: "):
                args = {"name": "scout", "task": last.removeprefix("spawn: ")}
                reply = json.dumps(
                    {"type": "tool_call", "name": "subagent_spawn", "args": args}
                )
            elif "subagent_spawn" in last:  # the spawn call's result
                reply = json.dumps({"type": "finish", "output": "spawned"})
            else:
                reply = json.dumps({"type": "finish", "output": f"re: {last}"})
        return sse_reply(self.dialect.frames([reply]))


@dataclass
class Chat:
    host: Host
    log: Any
    clock: FakeClock
    model: Model
    messages: int = 0

    async def open(self, **settings: Any) -> None:
        run = run_events.RunSettings(
            planning_gate=False,
            tools=ToolRegistry.with_builtins(extra=KINDS.tools).specs(),
        )
        opened = session_events.SessionOpened(
            session_id=SESSION,
            channel="cli",
            chat_id="wire",
            settings=session_events.SessionSettings(run=run, **settings),
            at=self.clock.now(),
            revision=session_events.SESSION_REVISION,
        )
        assert await self.host.submit(STREAM, opened) is not None

    async def send(self, text: str) -> None:
        self.messages += 1
        received = session_events.MessageReceived(
            message_id=f"m{self.messages}", text=text, at=self.clock.now()
        )
        assert await self.host.submit(STREAM, received) is not None

    async def turn(self, *texts: str) -> str:
        """Send ``texts`` inside one debounce window; the turn's reply."""
        replies = len(await self.recorded(session_events.ReplySent))
        for text in texts:
            await self.send(text)
        self.clock.advance(session_events.SessionSettings().debounce_seconds)
        sent = await self.until(session_events.ReplySent, replies + 1)
        return str(sent[-1].text)

    async def recorded(self, kind: type[events.Event]) -> list[Any]:
        return [
            r.event for r in await self.log.read(STREAM) if isinstance(r.event, kind)
        ]

    async def until(self, kind: type[events.Event], count: int = 1) -> list[Any]:
        for _ in range(1000):
            if len(found := await self.recorded(kind)) >= count:
                await self.host.settle(10)
                return found
            await asyncio.sleep(0.01)
        raise AssertionError(f"fewer than {count} {kind.__name__} in {STREAM}")


@pytest.fixture
async def chat(
    tmp_path: Path, api: FakeAPI, dialect: Dialect, clock: FakeClock
) -> AsyncIterator[Chat]:
    model = Model(dialect)
    api.respond = model
    async with hosted(
        tmp_path,
        dialect.build(api),
        clock,
        tools=ToolRegistry.with_builtins(extra=KINDS.tools),
        workspace=tmp_path,
    ) as (host, log):
        yield Chat(host=host, log=log, clock=clock, model=model)


async def test_each_turn_asks_the_model_about_its_own_message(chat: Chat) -> None:
    await chat.open()
    for text in ("first message", "second message", "third message", "fourth"):
        assert await chat.turn(text) == f"re: {text}"
    first, second, third, fourth = chat.model.asked
    assert said(first) == [("user", "first message")]
    assert said(third) == [
        ("user", "first message"),
        ("assistant", "re: first message"),
        ("user", "second message"),
        ("assistant", "re: second message"),
        ("user", "third message"),
    ]
    assert last_user(fourth) == "fourth"
    assert replay.verify(await chat.log.read(STREAM), kinds=KINDS) is None


async def test_messages_merged_by_the_debounce_are_what_the_turn_answers(
    chat: Chat,
) -> None:
    await chat.open()
    await chat.turn("hello")
    assert await chat.turn("one", "two", "three") == "re: one\ntwo\nthree"
    assert last_user(chat.model.asked[-1]) == "one\ntwo\nthree"


async def test_after_new_the_turn_sees_only_its_segment_and_its_message(
    chat: Chat,
) -> None:
    await chat.open()
    await chat.turn("before")
    await chat.send("/new")
    await chat.turn("after")
    assert said(chat.model.asked[-1]) == [("user", "after")]
    await chat.turn("later")
    assert said(chat.model.asked[-1]) == [
        ("user", "after"),
        ("assistant", "re: after"),
        ("user", "later"),
    ]


async def test_after_a_compaction_the_window_starts_with_a_question(
    chat: Chat,
) -> None:
    await chat.open(max_turns_per_context=2)
    texts = [f"message {n}" for n in range(1, 7)]
    for text in texts:
        await chat.turn(text)
    assert await chat.recorded(session_events.ContextCompacted)
    assert await chat.until(session_events.MemoryWritten)
    for text, request in zip(texts, chat.model.asked, strict=True):
        assert last_user(request) == text
        assert said(request)[0][0] == "user", said(request)
    summary = chat.model.asked[-1]
    assert "They talked." in system_of(summary) + json.dumps(summary.body)
    assert replay.verify(await chat.log.read(STREAM), kinds=KINDS) is None


async def test_a_subagent_is_asked_its_task(chat: Chat) -> None:
    await chat.open()
    await chat.turn("hello")
    assert await chat.turn("spawn: Count the open issues.") == "spawned"
    [answered] = await chat.until(session_events.SubagentAnswered)
    assert answered.text == "re: Count the open issues."
    (asked,) = [r for r in chat.model.asked if "Count" in last_user(r)[:5]]
    assert last_user(asked) == "Count the open issues."


async def test_a_scheduled_firing_is_asked_its_task(chat: Chat) -> None:
    await chat.open()
    await chat.turn("hello")
    asked = session_events.ScheduleAsked(
        request_id="q1",
        name="hourly",
        cron="0 * * * *",
        task="Any news?",
        at=chat.clock.now(),
    )
    assert await chat.host.submit(STREAM, asked) is not None
    [created] = await chat.recorded(session_events.ScheduleCreated)
    chat.clock.advance(created.schedule.due - chat.clock.now())
    [answered] = await chat.until(session_events.SubagentAnswered)
    assert answered.text == "re: Any news?"
    assert last_user(chat.model.asked[-1]) == "Any news?"


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_a_piped_chat_answers_each_line(
    name: str,
    tmp_path: Path,
    api: FakeAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`printf 'first\\nsecond\\nthird\\n' | steward chat` with a configured
    provider: each answer answers its own line."""
    dialect = DIALECTS[name]
    model = Model(dialect)
    api.respond = model
    base_url = api.url if name == "anthropic" else f"{api.url}/v1"
    config = tmp_path / "steward.toml"
    config.write_text(
        "[run]\nplanning_gate = false\n\n"
        f'[models.default]\nprovider = "{name}"\nmodel = "m-test"\n'
        f'base_url = "{base_url}"\n'
    )
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("STEWARD_SESSION_DEBOUNCE_MS", "20")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("first\nsecond\nthird\n"))
    assert cli.main(["--config", str(config), "--db", "log.db", "chat"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "re: first",
        "re: second",
        "re: third",
    ]
    assert [last_user(r) for r in model.asked] == ["first", "second", "third"]
