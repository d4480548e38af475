"""An MCP server's tools as the model's provider receives them over HTTP:
offered under their wire names with the server's own JSON schema, and the
server's answer holding the model's tool call by its id; for a run of a
profile that uses the server and for a task program's template that names
one of its tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import Dialect
from fake_api import FakeAPI, Reply, Request, sse_reply
from mcp_support import calls, stdio
from wire import hosted, tool_calls, tool_results, tools_of

from steward import replay
from steward.actors.run import events as run_events
from steward.actors.task.events import TaskCreated, Template
from steward.clock import FakeClock
from steward.config.settings import AgentProfile, Settings
from steward.effects.tools import ToolRegistry
from steward.effects.tools.mcp import McpServer
from steward.host import Host
from steward.kinds import KINDS


@dataclass
class Wired:
    host: Host
    log: Any
    api: FakeAPI
    dialect: Dialect
    tools: ToolRegistry
    settings: Settings

    def answer(self, call: tuple[str, str, dict[str, Any]], done: str) -> None:
        """The model calls ``call`` (id, wire name, args), then says ``done``."""

        def reply(request: Request) -> Reply:
            if tool_results(request):
                return sse_reply(self.dialect.frames([done]))
            call_id, name, args = call
            frames = self.dialect.frames([], [(call_id, name, [json.dumps(args)])])
            return sse_reply(frames)

        self.api.respond = reply

    async def ended(self, stream: str) -> Any:
        for _ in range(1_000):
            state = replay.rebuild(await self.log.read(stream), kinds=KINDS)
            if state.status in ("completed", "failed"):
                assert await self.host.settle(30)
                return state
            await asyncio.sleep(0.01)
        raise AssertionError(f"{stream} did not end")

    @property
    def asked(self) -> list[Request]:
        return [r for r in self.api.requests if r.path == self.dialect.path]


@pytest.fixture
async def wired(
    tmp_path: Path, api: FakeAPI, dialect: Dialect, clock: FakeClock
) -> AsyncIterator[Wired]:
    settings = Settings(
        agents={"default": AgentProfile(protocol="native", mcp=["notes"], tools=[])},
        mcp={"notes": stdio(tmp_path, tools=["add", "search"])},
    )
    tools = ToolRegistry.with_builtins()
    tools.add_toolset(McpServer("notes", settings.mcp["notes"], timeout=10))
    await tools.load(["notes"])
    async with hosted(tmp_path, dialect.build(api), clock, tools=tools) as (host, log):
        yield Wired(host, log, api, dialect, tools, settings)


SCHEMA = {
    "type": "object",
    "properties": {"text": {"title": "Text", "type": "string"}},
    "required": ["text"],
}
"""``add``'s input schema as the server gives it, less its title."""


async def test_a_run_offers_the_servers_tools_and_sends_back_its_answer(
    wired: Wired, tmp_path: Path
) -> None:
    args = {"text": "buy milk"}
    wired.answer(("c1", "notes_add", args), "noted")
    run = wired.settings.run_settings("default", wired.tools.specs())
    created = run_events.RunCreated(run_id="r1", input_text="note milk", settings=run)
    assert await wired.host.submit("run.r1", created) is not None
    state = await wired.ended("run.r1")
    assert (state.status, state.output) == ("completed", "noted"), state.error
    one, two = wired.asked
    offered = tools_of(one)
    assert set(offered) == {"notes_add", "notes_search", "finish"}  # a run's own
    assert offered["notes_add"] == SCHEMA
    assert offered["notes_search"] == {
        "type": "object",
        "properties": {"query": {"title": "Query", "type": "string"}},
        "required": ["query"],
    }
    assert tool_calls(two) == [("c1", "notes_add", args)]
    assert tool_results(two) == [("c1", "added note 1")]
    assert calls(tmp_path) == ["add buy milk"]
    assert replay.verify(await wired.log.read("run.r1"), kinds=KINDS) is None


async def test_a_task_template_naming_a_servers_tool_offers_it(
    wired: Wired, tmp_path: Path
) -> None:
    args = {"text": "owls"}
    wired.answer(("c1", "notes_add", args), "kept")
    template = Template(
        name="keep",
        params=("topic",),
        instructions="Keep a note on {{topic}}.",
        tools=("notes.add",),
        subtasks=False,
    )
    task = TaskCreated(
        task_id="t1",
        program='(keep "owls")',
        templates=(template,),
        tools=wired.tools.specs(["notes.add"]),
    )
    assert await wired.host.submit("task.t1", task) is not None
    state = await wired.ended("task.t1")
    assert (state.status, state.output) == ("completed", "kept"), state.error
    one, two = wired.asked
    assert tools_of(one) == {"notes_add": SCHEMA}
    assert tool_results(two) == [("c1", "added note 1")]
    assert calls(tmp_path) == ["add owls"]
    assert replay.verify(await wired.log.read("task.t1"), kinds=KINDS) is None
