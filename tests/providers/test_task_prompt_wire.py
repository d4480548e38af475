"""What a task program's atomic calls ask the model, as the provider's HTTP
server receives it.

A host whose provider is the official SDK (both dialects) runs task
programs against the local server of `fake_api`; the assertions read the
request bodies it received: each call's user message is its template's
instructions with the arguments put in, the system its template's system
text and the task's context, the ``subtask`` tool offered with its schema
where the template allows subtasks, a call's output bound into the next
call's instructions, and a tool's result (a subtask's output) answering
the model's tool call by its id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import Dialect
from fake_api import FakeAPI, Reply, Request, sse_reply
from wire import hosted, system_of, tool_calls, tool_results, tools_of

from steward import cli, replay
from steward.actors.task.events import TaskCreated, Template
from steward.actors.task.state import SUBTASK_TOOL
from steward.clock import FakeClock
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

STREAM = "task.t1"


def user_texts(request: Request) -> list[str]:
    """The text of each user message (each text block of one), in order."""
    return [
        text
        for m in request.body["messages"]
        if m["role"] == "user"
        for text in (
            [b["text"] for b in m["content"] if b.get("type") == "text"]
            if isinstance(m["content"], list)
            else [m["content"]]
        )
    ]


@dataclass
class Tasks:
    """A host running tasks through ``dialect``'s SDK against ``api``."""

    host: Host
    log: Any
    api: FakeAPI
    dialect: Dialect

    def answer(self, respond: Callable[[Request], str | tuple[Any, ...]]) -> None:
        """The model: ``respond(request)`` gives its text, or a tool call
        ``(id, wire name, args)``."""

        def reply(request: Request) -> Reply:
            said = respond(request)
            if isinstance(said, str):
                return sse_reply(self.dialect.frames([said]))
            call_id, name, args = said
            return sse_reply(
                self.dialect.frames([], [(call_id, name, [json.dumps(args)])])
            )

        self.api.respond = reply

    async def run(self, task: TaskCreated) -> Any:
        """Submit ``task`` and wait for it to end; its final state."""
        assert await self.host.submit(STREAM, task) is not None
        for _ in range(1_000):
            state = replay.rebuild(await self.log.read(STREAM), kinds=KINDS)
            if state.status in ("completed", "failed"):
                assert await self.host.settle(30)
                return state
            await asyncio.sleep(0.01)
        raise AssertionError(f"{STREAM} did not end")

    @property
    def asked(self) -> list[Request]:
        return [r for r in self.api.requests if r.path == self.dialect.path]


@pytest.fixture
async def tasks(
    tmp_path: Path, api: FakeAPI, dialect: Dialect, clock: FakeClock
) -> AsyncIterator[Tasks]:
    async with hosted(tmp_path, dialect.build(api), clock) as (host, log):
        yield Tasks(host=host, log=log, api=api, dialect=dialect)


OUTLINE = Template(
    name="outline",
    params=("topic",),
    system="You outline {{topic}} for a young reader.",
    instructions="Outline {{topic}} in three points.",
)
EXPAND = Template(
    name="expand",
    params=("points",),
    system="You write clearly.",
    instructions="Expand these points:\n{{points}}",
    subtasks=False,
)


async def test_a_program_of_two_calls_on_the_wire(
    tasks: Tasks, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first call: its instructions with ``owls`` put in as the user
    message, its system text and the task's context in the system prompt,
    the ``subtask`` tool offered with its schema; the second: the first
    call's output bound into its instructions, no tool offered."""

    def respond(request: Request) -> str:
        last = user_texts(request)[-1]
        return "1. eyes 2. wings 3. night" if last.startswith("Outline") else "done"

    tasks.answer(respond)
    context = ("owls hunt at night", "the reader is seven")
    task = TaskCreated(
        task_id="t1",
        program='(bind points (outline "owls")) (expand points)',
        templates=(OUTLINE, EXPAND),
        context=context,
    )
    state = await tasks.run(task)
    assert (state.status, state.output) == ("completed", "done"), state.error
    one, two = tasks.asked
    assert user_texts(one) == ["Outline owls in three points."]
    system = system_of(one)
    assert system.startswith("You outline owls for a young reader.")
    assert "## Context\n- owls hunt at night\n- the reader is seven" in system
    assert tools_of(one) == {"subtask": {"type": "object", **SUBTASK_TOOL.parameters}}
    assert tools_of(one)["subtask"]["required"] == ["type", "description", "inputs"]

    assert user_texts(two) == ["Expand these points:\n1. eyes 2. wings 3. night"]
    assert system_of(two).startswith("You write clearly.")
    assert "subtask" not in system_of(two)
    assert tools_of(two) == {}
    assert replay.verify(await tasks.log.read(STREAM), kinds=KINDS) is None

    # `task show --prompts` rebuilds from the log what each call sent
    db = str(tmp_path / "log.db")
    code = await asyncio.to_thread(
        cli.main, ["--db", db, "task", "show", "t1", "--prompts", "-o", "json"]
    )
    assert code == 0
    shown = json.loads(capsys.readouterr().out)["prompts"]
    assert len(shown) == 2
    for prompt, request in zip(shown, (one, two), strict=True):
        assert prompt["system"] == system_of(request)
        users = [m["content"] for m in prompt["messages"] if m["role"] == "user"]
        assert users == user_texts(request)


WRITER = Template(
    name="writer",
    params=("name",),
    instructions="Write the file {{name}}.",
    tools=("files.write",),
    subtasks=False,
)


async def test_a_tool_result_answers_the_tool_call_on_the_wire(
    tasks: Tasks, tmp_path: Path
) -> None:
    """The model calls ``files.write`` (offered under its wire name): the
    next request holds that call and the tool's result answering its id."""
    args = {"path": "out.txt", "content": "hi"}

    def respond(request: Request) -> str | tuple[Any, ...]:
        return "written" if tool_results(request) else ("w1", "files_write", args)

    tasks.answer(respond)
    task = TaskCreated(
        task_id="t1",
        program='(writer "out.txt")',
        templates=(WRITER,),
        tools=ToolRegistry.with_builtins().specs(["files.write"]),
    )
    state = await tasks.run(task)
    assert (state.status, state.output) == ("completed", "written"), state.error
    assert (tmp_path / "workspace" / "out.txt").read_text() == "hi"
    one, two = tasks.asked
    assert list(tools_of(one)) == ["files_write"]
    assert tool_results(one) == []
    assert user_texts(one) == ["Write the file out.txt."]
    assert tool_calls(two) == [("w1", "files_write", args)]
    assert tool_results(two) == [("w1", "wrote 2 bytes to out.txt")]
    assert replay.verify(await tasks.log.read(STREAM), kinds=KINDS) is None


PLAN = Template(name="plan", params=("goal",), instructions="Plan {{goal}}.")
SUMMARIZE = Template(
    name="summarize",
    params=("text",),
    instructions="Summarize: {{text}}",
    subtasks=False,
)


async def test_a_subtask_s_result_answers_the_subtask_call_on_the_wire(
    tasks: Tasks,
) -> None:
    """The model calls ``subtask``: the child's request asks its template
    with the request's inputs, and the parent's next request holds the
    call and the child's output answering its id."""
    ask = {
        "type": "atomic",
        "description": "summarize the notes",
        "inputs": {"text": "long notes"},
        "template_hints": ["summarize"],
    }

    def respond(request: Request) -> str | tuple[Any, ...]:
        if tool_results(request):
            return "planned"
        if user_texts(request)[-1].startswith("Summarize"):
            return "short notes"
        return ("s1", "subtask", ask)

    tasks.answer(respond)
    task = TaskCreated(
        task_id="t1", program='(plan "the report")', templates=(PLAN, SUMMARIZE)
    )
    state = await tasks.run(task)
    assert (state.status, state.output) == ("completed", "planned"), state.error
    one, child, two = tasks.asked
    assert user_texts(one) == ["Plan the report."]
    assert user_texts(child) == ["Summarize: long notes"]
    assert tools_of(child) == {}
    assert tool_calls(two) == [("s1", "subtask", ask)]
    assert tool_results(two) == [("s1", "short notes")]
    for stream in (STREAM, "task.t1/sub/1"):
        assert replay.verify(await tasks.log.read(stream), kinds=KINDS) is None, stream
