"""Task programs through the host, on both logs: atomic calls as the
provider receives them, a Director-Evaluator loop, subtasks by
CONTINUATION, tools, limits, cancel."""

from __future__ import annotations

import asyncio
from typing import Any

from steward import replay
from steward.actors.llm import ScriptedProvider
from steward.actors.llm.scripted import Reply
from steward.events import ToolCall
from steward.events.task import TaskCreated, Template
from steward.kinds import KINDS


def created(program: str, *templates: Template, **kw: Any) -> TaskCreated:
    return TaskCreated(task_id=kw.pop("task_id", "t1"), program=program, templates=templates, **kw)


DRAFT = Template(name="draft", params=("topic",), instructions="Write about {{topic}}.")
REVIEW = Template(
    name="review", params=("text",), instructions="Review this:\n{{text}}", subtasks=False
)


async def ended(log: Any, stream: str) -> Any:
    for _ in range(500):
        state = replay.rebuild(await log.read(stream), kinds=KINDS)
        if state.status in ("completed", "failed"):
            return state
        await asyncio.sleep(0.01)
    raise AssertionError(f"{stream} stayed {state.status}")


async def test_a_program_of_two_calls_binds_the_first_into_the_second(
    make_host: Any, log: Any
) -> None:
    seen: list[Any] = []

    def model(prompt: Any, info: Any) -> str:
        seen.append(prompt)
        return "a draft" if len(seen) == 1 else "looks good"

    host = await make_host(ScriptedProvider(model))
    program = '(bind d (draft "owls")) (review d)'
    await host.submit("task.t1", created(program, DRAFT, REVIEW))
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    assert state.output == "looks good"
    assert seen[0].messages[-1].content == "Write about owls."
    assert seen[1].messages[-1].content == "Review this:\na draft"
