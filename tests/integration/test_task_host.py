"""Task programs through the host, on both logs: atomic calls as the
provider receives them, a Director-Evaluator loop, subtasks by
CONTINUATION, tools, limits, cancel, the read models; every stream
recorded replays and keeps the kind contract."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace
from unit import test_kind_contract as contract

from steward import replay
from steward.actors.prompt import Prompt
from steward.actors.task.events import (
    CallFinished,
    SubtaskRefused,
    SubtaskSpawned,
    TaskCreated,
    TaskLimits,
    Template,
)
from steward.clock import FakeClock
from steward.effects.llm import ScriptedProvider
from steward.effects.llm.base import RequestInfo
from steward.effects.llm.scripted import Reply
from steward.effects.tools import ToolRegistry
from steward.events import ChatMessage, ToolCall
from steward.events.protocol import (
    CancelRequested,
    ChildFinished,
    ToolRequested,
    ToolResulted,
    Usage,
)
from steward.kinds import KINDS


def created(program: str, *templates: Template, **kw: Any) -> TaskCreated:
    return TaskCreated(
        task_id=kw.pop("task_id", "t1"), program=program, templates=templates, **kw
    )


DRAFT = Template(name="draft", params=("topic",), instructions="Write about {{topic}}.")
REVIEW = Template(
    name="review",
    params=("text",),
    instructions="Review this:\n{{text}}",
    subtasks=False,
)
JUDGE = Template(
    name="judge",
    params=("text",),
    instructions="Answer accept, or what to change:\n{{text}}",
    subtasks=False,
)
PLAN = Template(
    name="plan",
    params=("goal",),
    instructions="Plan {{goal}}.",
    description="plan a piece of work",
)
SUMMARIZE = Template(
    name="summarize",
    params=("text",),
    instructions="Summarize: {{text}}",
    description="summarize a text",
    subtasks=False,
)
ASK_SUMMARY = {
    "type": "atomic",
    "description": "summarize the notes",
    "inputs": {"text": "long notes"},
    "template_hints": ["summarize"],
}
"""The subtask request the planner makes."""

CHILD = "task.t1/sub/1"


async def until(log: Any, stream: str, done: Callable[[Any], bool]) -> Any:
    """Poll ``stream``'s state (folded from the log) until ``done(state)``."""
    state = None
    for _ in range(1_000):
        records = await log.read(stream)
        if records:
            state = replay.rebuild(records, kinds=KINDS)
            if done(state):
                return state
        await asyncio.sleep(0.01)
    status = getattr(state, "status", "without records")
    raise AssertionError(f"{stream} stayed {status}: {state}"[:2_000])


async def ended(log: Any, stream: str) -> Any:
    return await until(log, stream, lambda s: s.status in ("completed", "failed"))


async def recorded(log: Any, stream: str, kind: type[Any]) -> list[Any]:
    return [r.event for r in await log.read(stream) if isinstance(r.event, kind)]


async def until_recorded(log: Any, stream: str, kind: type[Any]) -> list[Any]:
    """Poll ``stream`` until it holds an event of ``kind``; those it holds."""
    for _ in range(1_000):
        if found := await recorded(log, stream, kind):
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind.__name__} in {stream}")


async def rows(host: Any, log: Any, sql: str) -> list[tuple[Any, ...]]:
    """What ``sql`` reads from the host's read models, caught up with the
    log (what a test waited for is in it)."""
    await host.projector.catch_up(log)
    found: list[tuple[Any, ...]] = await host.projector.query(sql)
    return found


async def verified(log: Any) -> list[str]:
    """Every stream of the log replays to its recorded decisions and keeps
    the kind contract (its pending wants answered by the log's other
    streams, as a golden log's are); their names."""
    streams: list[str] = await log.streams()
    samples = tuple(
        [
            contract.Sample("this test", stream, tuple(await log.read(stream)))
            for stream in streams
        ]
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contract, "golden_samples", lambda: samples)
        for sample in samples:
            assert replay.verify(sample.records, kinds=KINDS) is None, sample.stream
            for check in contract.CHECKS.values():
                check(KINDS.of(sample.stream), sample)
    return streams


class Asked:
    """A model that records each prompt by the task asking it and answers
    with ``answer(task_id, prompt, n)`` (``n``: that task's calls so far)."""

    def __init__(self, answer: Callable[[str, Prompt, int], str | Reply]) -> None:
        self.answer = answer
        self.prompts: dict[str, list[Prompt]] = {}
        self.priorities: dict[str, set[str]] = {}

    def __call__(self, prompt: Prompt, info: RequestInfo) -> str | Reply:
        seen = self.prompts.setdefault(info.actor_id, [])
        seen.append(prompt)
        self.priorities.setdefault(info.actor_id, set()).add(info.priority)
        return self.answer(info.actor_id, prompt, len(seen))


def first(prompt: Prompt) -> str:
    """The call's instructions (its first message)."""
    return prompt.messages[0].content


def subtask_call(args: dict[str, Any], call_id: str = "call-1") -> Reply:
    return Reply(tool_calls=(ToolCall(id=call_id, name="subtask", args=args),))


async def test_a_program_of_two_calls_binds_the_first_into_the_second(
    make_host: Any, log: Any
) -> None:
    """The second call's instructions hold the first call's output."""
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
    assert await verified(log) == ["task.t1"]


async def test_the_read_models_hold_the_task_and_its_calls(
    make_host: Any, log: Any
) -> None:
    """After a two-call program, ``tasks`` holds the task completed with
    its calls and tokens, ``task_steps`` each call with its arguments,
    content, turns and tokens."""
    replies = iter(
        [
            Reply(text="a draft", usage=Usage(input_tokens=11, output_tokens=3)),
            Reply(text="looks good", usage=Usage(input_tokens=17, output_tokens=5)),
        ]
    )
    host = await make_host(ScriptedProvider(lambda p, i: next(replies)))
    program = '(bind d (draft "owls")) (review d)'
    await host.submit("task.t1", created(program, DRAFT, REVIEW))
    await ended(log, "task.t1")
    tasks = await rows(
        host,
        log,
        "SELECT task_id, parent, depth, source, program, status, calls, "
        "input_tokens, output_tokens, output, error_kind, error_limit, error "
        "FROM tasks",
    )
    assert tasks == [
        ("t1", None, 0, None, program, "completed", 2, 28, 8, "looks good")
        + (None, None, None)
    ]
    steps = await rows(
        host,
        log,
        "SELECT task_id, call, template, tool, args, status, content, turns, "
        "input_tokens, output_tokens, subtask, limit_reached, "
        "finished_at >= started_at FROM task_steps ORDER BY call",
    )
    assert steps == [
        ("t1", 1, "draft", None, '{"topic": "owls"}', "COMPLETE", "a draft", 1)
        + (11, 3, None, None, 1),
        ("t1", 2, "review", None, '{"text": "a draft"}', "COMPLETE", "looks good")
        + (1, 17, 5, None, None, 1),
    ]
    await verified(log)


DE_PROGRAM = """
(director-evaluator-loop
  (max-iterations {n})
  (initial-director-input "owls")
  (director (lambda (input iter) (draft input)))
  (executor (lambda (plan iter) plan))
  (evaluator (lambda (result plan iter) (judge result)))
  (controller
    (lambda (verdict plan draft iter)
      (if (string=? (content verdict) "accept")
          (stop draft)
          (continue (concat "owls, " (content verdict)))))))
"""


def director_evaluator(verdicts: list[str]) -> Asked:
    """Drafts ``draft N``; the judge answers the verdicts in order."""
    counts = {"draft": 0, "judge": 0}

    def answer(task: str, prompt: Prompt, n: int) -> str:
        if first(prompt).startswith("Write"):
            counts["draft"] += 1
            return f"draft {counts['draft']}"
        counts["judge"] += 1
        return verdicts[counts["judge"] - 1]

    return Asked(answer)


async def test_a_director_evaluator_loop_stops_when_the_judge_accepts(
    make_host: Any, log: Any
) -> None:
    """The judge rejects the first draft and accepts the second: the task's
    value is the second draft, and the second director call was asked with
    the first feedback."""
    model = director_evaluator(["shorter, with a verse about night", "accept"])
    host = await make_host(ScriptedProvider(model))
    program = DE_PROGRAM.format(n=3)
    await host.submit("task.t1", created(program, DRAFT, JUDGE))
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    assert state.output == "draft 2"
    asked = [first(p) for p in model.prompts["t1"]]
    assert asked == [
        "Write about owls.",
        "Answer accept, or what to change:\ndraft 1",
        "Write about owls, shorter, with a verse about night.",
        "Answer accept, or what to change:\ndraft 2",
    ]
    await verified(log)


async def test_a_director_evaluator_loop_fails_at_its_iterations(
    make_host: Any, log: Any
) -> None:
    """A judge that never accepts: the task fails at its ``iterations``
    limit, with the last executor output and the bindings it had."""
    model = director_evaluator(["no", "still no", "never"])
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created(DE_PROGRAM.format(n=2), DRAFT, JUDGE))
    state = await ended(log, "task.t1")
    assert state.status == "failed"
    error = state.error
    assert (error.kind, error.limit) == ("limit", "iterations")
    assert error.last_iteration == {"status": "COMPLETE", "content": "draft 2"} | {
        "notes": {}
    }
    assert error.partial["draft"]["content"] == "draft 2"
    assert error.partial["verdict"]["content"] == "still no"
    assert error.partial["input"] == "owls, no"
    assert len(model.prompts["t1"]) == 4  # two drafts, two verdicts
    await verified(log)


def planner(child: Callable[[Prompt, int], str | Reply], ask: Reply) -> Asked:
    """The task's planner asks ``ask`` first, then answers ``planned:`` and
    the answer it got; its subtasks answer ``child(prompt, n)``."""

    def answer(task: str, prompt: Prompt, n: int) -> str | Reply:
        if task != "t1":
            return child(prompt, n)
        if n == 1:
            return ask
        return "planned: " + prompt.messages[-1].content

    return Asked(answer)


async def test_a_subtask_tool_call_runs_a_child_whose_result_answers_it(
    make_host: Any, log: Any
) -> None:
    """The planner calls ``subtask``: child ``task.t1/sub/1`` answers the
    parent, runs the matched template with the request's inputs, and its
    output is the tool message answering that call in the parent's next
    prompt; the parent completes; the read models show the tree."""
    model = planner(lambda prompt, n: "short notes", subtask_call(ASK_SUMMARY))
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created('(plan "the report")', PLAN, SUMMARIZE))
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    assert state.output == "planned: short notes"

    [spawned] = await recorded(log, "task.t1", SubtaskSpawned)
    assert (spawned.task_id, spawned.template) == ("t1/sub/1", "summarize")
    assert spawned.tool_call_id == "call-1"
    [child] = await recorded(log, CHILD, TaskCreated)
    assert (child.reply_to, child.depth, child.args) == (
        "task.t1",
        1,
        {"text": "long notes"},
    )
    assert child.program == "(summarize text)"
    done = await ended(log, CHILD)
    assert (done.status, done.output) == ("completed", "short notes")
    [asked] = model.prompts["t1/sub/1"]
    assert first(asked) == "Summarize: long notes"
    assert model.priorities == {"t1": {"interactive"}, "t1/sub/1": {"subagent"}}

    one, two = model.prompts["t1"]
    assert first(one) == "Plan the report."
    assert [t.name for t in one.tools] == ["subtask"]
    assert two.messages[1] == ChatMessage(
        role="assistant",
        content="",
        tool_calls=(ToolCall(id="call-1", name="subtask", args=ASK_SUMMARY),),
    )
    assert two.messages[2:] == (
        ChatMessage(role="tool", content="short notes", tool_call_id="call-1"),
    )
    [answer] = await recorded(log, "task.t1", ChildFinished)
    assert (answer.stream, answer.status) == (CHILD, "completed")

    tasks = await rows(
        host, log, "SELECT task_id, parent, depth, status, output FROM tasks ORDER BY 1"
    )
    assert tasks == [
        ("t1", None, 0, "completed", "planned: short notes"),
        ("t1/sub/1", "task.t1", 1, "completed", "short notes"),
    ]
    steps = await rows(
        host,
        log,
        "SELECT task_id, call, template, status, turns, subtask FROM task_steps "
        "ORDER BY 1, 2",
    )
    assert steps == [
        ("t1", 1, "plan", "COMPLETE", 2, "t1/sub/1"),
        ("t1/sub/1", 1, "summarize", "COMPLETE", 1, None),
    ]
    assert sorted(await verified(log)) == ["task.t1", CHILD]


async def test_a_subtask_asked_in_text_answers_as_a_message(
    make_host: Any, log: Any
) -> None:
    """``{"status": "CONTINUATION", "subtask_request": ...}`` as the reply's
    text spawns the subtask too; its result comes back as a user message."""
    text = json.dumps({"status": "CONTINUATION", "subtask_request": ASK_SUMMARY})
    model = planner(lambda prompt, n: "short notes", Reply(text=text))
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created('(plan "the report")', PLAN, SUMMARIZE))
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    [spawned] = await recorded(log, "task.t1", SubtaskSpawned)
    assert spawned.tool_call_id is None
    assert spawned.request.inputs == {"text": "long notes"}
    assert first(model.prompts["t1/sub/1"][0]) == "Summarize: long notes"
    _, two = model.prompts["t1"]
    assert two.messages[1:] == (
        ChatMessage(role="assistant", content=text),
        ChatMessage(role="user", content="The subtask answered:\nshort notes"),
    )
    assert state.output == "planned: The subtask answered:\nshort notes"
    assert sorted(await verified(log)) == ["task.t1", CHILD]


def failure(answer: ChatMessage, call_id: str = "call-1") -> dict[str, Any]:
    """The failure a subtask's parent is told, as the data it holds."""
    assert (answer.role, answer.tool_call_id) == ("tool", call_id)
    prefix = "error: the subtask failed: "
    assert answer.content.startswith(prefix), answer.content
    told: dict[str, Any] = json.loads(answer.content.removeprefix(prefix))
    return told


async def test_a_failed_subtask_is_the_answer_and_the_parent_goes_on(
    make_host: Any, log: Any
) -> None:
    """The child's model answers FAILED: the parent's model reads the
    error, with the request it made and the child's depth, as the answer to
    its call, and can still complete."""
    failed = json.dumps({"status": "FAILED", "content": "the notes are unreadable"})
    model = planner(lambda prompt, n: failed, subtask_call(ASK_SUMMARY))
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created('(plan "the report")', PLAN, SUMMARIZE))
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    child = await ended(log, CHILD)
    assert child.status == "failed" and child.error.kind == "call"
    told = failure(model.prompts["t1"][1].messages[-1])
    assert told["error"]["kind"] == "call"
    assert "the notes are unreadable" in told["error"]["message"]
    assert told["request"] == ASK_SUMMARY
    assert told["depth"] == 1
    assert state.output.startswith("planned: error: the subtask failed")
    await verified(log)


async def test_a_subtask_below_the_depth_limit_fails_the_child(
    make_host: Any, log: Any
) -> None:
    """With ``max_depth=1`` the child's own subtask would be 2 deep: the
    child fails at the ``depth`` limit and spawns nothing; the parent's
    model reads that failure and completes."""
    deeper = {**ASK_SUMMARY, "inputs": {"text": "shorter notes"}}
    model = planner(
        lambda prompt, n: subtask_call(deeper, "call-9"), subtask_call(ASK_SUMMARY)
    )
    host = await make_host(ScriptedProvider(model))
    summarize = Template(
        name="summarize",
        params=("text",),
        instructions="Summarize: {{text}}",
    )
    limits = TaskLimits(max_depth=1)
    task = created('(plan "the report")', PLAN, summarize, limits=limits)
    await host.submit("task.t1", task)
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    child = await ended(log, CHILD)
    assert (child.error.kind, child.error.limit) == ("limit", "depth")
    assert child.error.depth == 1
    assert child.error.request.inputs == {"text": "shorter notes"}
    assert await recorded(log, CHILD, SubtaskSpawned) == []
    assert await log.read(f"{CHILD}/sub/1") == []
    told = failure(model.prompts["t1"][1].messages[-1])
    assert told["error"]["limit"] == "depth"
    assert told["request"] == ASK_SUMMARY
    steps = await rows(
        host, log, "SELECT task_id, call, status FROM task_steps ORDER BY 1"
    )
    assert steps == [("t1", 1, "COMPLETE"), ("t1/sub/1", 1, "FAILED")]
    assert sorted(await verified(log)) == ["task.t1", CHILD]


async def test_a_subtask_repeating_a_task_above_it_is_refused_as_a_cycle(
    make_host: Any, log: Any
) -> None:
    """A template whose model always asks for itself with the same inputs:
    the request repeats the call that makes it, so the task fails at once
    with a ``subtask`` error naming the cycle; no child runs. One level
    down, a child asking for its own template and inputs is refused alike."""
    again = Template(
        name="again",
        params=("x",),
        instructions="Do {{x}}.",
        description="do it again",
    )
    ask = {
        "type": "atomic",
        "description": "do it",
        "inputs": {"x": "it"},
        "template_hints": ["again"],
    }

    other = {**ask, "inputs": {"x": "that"}}  # t2 asks for a child that repeats

    def answer(task: str, prompt: Prompt, n: int) -> str | Reply:
        if task == "t2" and prompt.messages[-1].role == "tool":
            return "gave up"
        return subtask_call(other if task.startswith("t2") else ask)

    model = Asked(answer)
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created('(again "it")', again))
    state = await ended(log, "task.t1")
    assert state.status == "failed"
    assert state.error.kind == "subtask"
    assert "cycle" in state.error.message
    assert state.error.request.inputs == {"x": "it"}
    assert await log.read(CHILD) == []

    # one level down: the child's own call is the one repeated
    await host.submit("task.t2", created('(again "it")', again, task_id="t2"))
    state = await ended(log, "task.t2")
    assert (state.status, state.output) == ("completed", "gave up"), state.error
    child = await ended(log, "task.t2/sub/1")
    assert child.error.kind == "subtask" and "cycle" in child.error.message
    assert await log.read("task.t2/sub/1/sub/1") == []
    assert failure(model.prompts["t2"][1].messages[-1])["error"]["kind"] == "subtask"
    assert sorted(await verified(log)) == ["task.t1", "task.t2", "task.t2/sub/1"]


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({"type": "atomic", "inputs": {"text": "notes"}}, "`description`"),
        (
            {"type": "atomic", "description": "say it in French", "inputs": {"l": 1}},
            "no template matches the subtask_request (templates: plan, summarize)",
        ),
    ],
    ids=["no-description", "no-template"],
)
async def test_an_invalid_subtask_request_is_refused_and_the_model_asked_again(
    make_host: Any, log: Any, request_: dict[str, Any], why: str
) -> None:
    """A request with no ``description``, or that no template can take:
    the model is told why, as the answer to its call, and asked again; no
    child is created."""
    model = planner(lambda prompt, n: "unused", subtask_call(request_))
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created('(plan "the report")', PLAN, SUMMARIZE))
    state = await ended(log, "task.t1")
    assert state.status == "completed", state.error
    [refused] = await recorded(log, "task.t1", SubtaskRefused)
    assert refused.tool_call_id == "call-1"
    assert why in refused.reason
    told = model.prompts["t1"][1].messages[-1]
    assert (told.role, told.tool_call_id) == ("tool", "call-1")
    assert told.content == f"error: {refused.reason}"
    assert state.output == f"planned: error: {refused.reason}"
    assert await recorded(log, "task.t1", SubtaskSpawned) == []
    assert await verified(log) == ["task.t1"]


WRITER = Template(
    name="writer",
    params=("name",),
    instructions="Write the file {{name}}.",
    tools=("files.write",),
    subtasks=False,
)
WRITE_ONLY = ToolRegistry.with_builtins().specs(["files.write"])


async def test_a_tool_its_template_names_runs_and_answers_the_call(
    make_host: Any, log: Any, tmp_path: Path
) -> None:
    """``files.write`` (named by the template, its spec in the task) is
    offered, run in the workspace, and its output answers the call."""
    write = ToolCall(
        id="w1", name="files.write", args={"path": "out.txt", "content": "hello"}
    )

    def answer(task: str, prompt: Prompt, n: int) -> str | Reply:
        return Reply(tool_calls=(write,)) if n == 1 else "written"

    model = Asked(answer)
    host = await make_host(ScriptedProvider(model))
    task = created('(writer "out.txt")', WRITER, tools=WRITE_ONLY)
    await host.submit("task.t1", task)
    state = await ended(log, "task.t1")
    assert (state.status, state.output) == ("completed", "written"), state.error
    assert (tmp_path / "workspace" / "out.txt").read_text() == "hello"
    one, two = model.prompts["t1"]
    assert one.tools == WRITE_ONLY
    assert two.messages[-1] == ChatMessage(
        role="tool", content="wrote 5 bytes to out.txt", tool_call_id="w1"
    )
    await verified(log)


async def test_a_tool_its_template_does_not_name_is_refused_not_run(
    make_host: Any, log: Any, tmp_path: Path
) -> None:
    """``files.read`` when only ``files.write`` is allowed, and a made-up
    tool: each call is answered with the tools it may call, and neither
    runs (no tool request is recorded, the file's text reaches no one)."""
    (tmp_path / "workspace" / "secret.txt").write_text("s3cret")
    calls = (
        ToolCall(id="r1", name="files.read", args={"path": "secret.txt"}),
        ToolCall(id="x1", name="magic.wand", args={}),
    )

    def answer(task: str, prompt: Prompt, n: int) -> str | Reply:
        return Reply(tool_calls=calls) if n == 1 else "done"

    model = Asked(answer)
    host = await make_host(ScriptedProvider(model))
    await host.submit("task.t1", created('(writer "x")', WRITER, tools=WRITE_ONLY))
    state = await ended(log, "task.t1")
    assert (state.status, state.output) == ("completed", "done"), state.error
    _, two = model.prompts["t1"]
    assert two.messages[2:] == (
        ChatMessage(
            role="tool",
            content="error: there is no tool files.read here; you may call: "
            "files.write",
            tool_call_id="r1",
        ),
        ChatMessage(
            role="tool",
            content="error: there is no tool magic.wand here; you may call: "
            "files.write",
            tool_call_id="x1",
        ),
    )
    assert await recorded(log, "task.t1", ToolRequested) == []
    assert "s3cret" not in json.dumps([m.content for m in two.messages])
    await verified(log)


async def test_in_one_reply_the_allowed_call_runs_and_the_others_are_refused(
    make_host: Any, log: Any, tmp_path: Path
) -> None:
    """A reply calling ``subtask`` beside ``files.write``, then a refused
    tool: the write runs and its result answers its own call id; the
    subtask is told to come alone, the other the tools it may call."""
    planner_ = Template(
        name="plan",
        params=("goal",),
        instructions="Plan {{goal}}.",
        tools=("files.write",),
    )
    calls = (
        ToolCall(id="s1", name="subtask", args=ASK_SUMMARY),
        ToolCall(id="w1", name="files.write", args={"path": "p.txt", "content": "x"}),
        ToolCall(id="r1", name="files.read", args={"path": "p.txt"}),
    )

    def answer(task: str, prompt: Prompt, n: int) -> str | Reply:
        return Reply(tool_calls=calls) if n == 1 else "planned"

    model = Asked(answer)
    host = await make_host(ScriptedProvider(model))
    task = created('(plan "it")', planner_, SUMMARIZE, tools=WRITE_ONLY)
    await host.submit("task.t1", task)
    state = await ended(log, "task.t1")
    assert (state.status, state.output) == ("completed", "planned"), state.error
    assert (tmp_path / "workspace" / "p.txt").read_text() == "x"
    [run] = await recorded(log, "task.t1", ToolRequested)
    assert (run.name, run.call_id) == ("files.write", "w1")
    _, two = model.prompts["t1"]
    answers = {m.tool_call_id: m.content for m in two.messages[2:]}
    assert answers == {
        "s1": "error: call subtask alone, with no other tool call beside it",
        "w1": "wrote 1 bytes to p.txt",
        "r1": "error: there is no tool files.read here; you may call: "
        "files.write, subtask",
    }
    assert await recorded(log, "task.t1", SubtaskSpawned) == []
    await verified(log)


BUSY = Template(
    name="busy",
    params=("dir",),
    instructions="List {{dir}} until you are told to stop.",
    tools=("files.list",),
    subtasks=False,
)
LIST = ToolRegistry.with_builtins().specs(["files.list"])


def busy_model(usage: Usage | None = None) -> Asked:
    """``draft`` answers ``noted``; ``busy`` lists the workspace forever."""

    def answer(task: str, prompt: Prompt, n: int) -> str | Reply:
        if first(prompt).startswith("Write"):
            return Reply(text="noted", usage=usage)
        listing = ToolCall(id=f"l{n}", name="files.list", args={"path": "."})
        return Reply(tool_calls=(listing,), usage=usage)

    return Asked(answer)


async def test_a_call_fails_at_its_template_turn_limit(
    make_host: Any, log: Any
) -> None:
    """``max_turns=2`` and a model that keeps calling a tool: the call fails
    at its ``turns`` limit, and the task with it, keeping the earlier call's
    output in ``partial``; the read models show which limit ended it."""
    model = busy_model()
    host = await make_host(ScriptedProvider(model))
    busy = replace(BUSY, max_turns=2)
    program = '(bind d (draft "owls")) (busy ".")'
    await host.submit("task.t1", created(program, DRAFT, busy, tools=LIST))
    state = await ended(log, "task.t1")
    assert state.status == "failed"
    error = state.error
    assert (error.kind, error.limit, error.call) == ("limit", "turns", 2)
    assert error.partial == {
        "d": {"status": "COMPLETE", "content": "noted"} | {"notes": {}}
    }
    finished = await recorded(log, "task.t1", CallFinished)
    assert [(f.call, f.status, f.turns, f.limit) for f in finished] == [
        (1, "COMPLETE", 1, None),
        (2, "FAILED", 2, "turns"),
    ]
    assert len(model.prompts["t1"]) == 3  # one draft, two turns of busy
    assert len(await recorded(log, "task.t1", ToolResulted)) == 2
    tasks = await rows(
        host, log, "SELECT status, calls, error_kind, error_limit, error FROM tasks"
    )
    assert tasks == [("failed", 2, "limit", "turns", error.message)]
    steps = await rows(
        host,
        log,
        "SELECT call, template, status, turns, limit_reached FROM task_steps "
        "ORDER BY call",
    )
    assert steps == [
        (1, "draft", "COMPLETE", 1, None),
        (2, "busy", "FAILED", 2, "turns"),
    ]
    await verified(log)


async def test_a_call_fails_at_its_template_token_limit(
    make_host: Any, log: Any
) -> None:
    """``max_tokens=100`` and 70 tokens a turn: the second turn passes it,
    the call fails at its ``tokens`` limit with what it used, and so does
    the task."""
    model = busy_model(Usage(input_tokens=60, output_tokens=10))
    host = await make_host(ScriptedProvider(model))
    busy = replace(BUSY, max_tokens=100)
    program = '(bind d (draft "owls")) (busy ".")'
    await host.submit("task.t1", created(program, DRAFT, busy, tools=LIST))
    state = await ended(log, "task.t1")
    assert state.status == "failed"
    error = state.error
    assert (error.kind, error.limit, error.call) == ("limit", "tokens", 2)
    assert error.partial["d"]["content"] == "noted"
    [_, call] = await recorded(log, "task.t1", CallFinished)
    assert (call.status, call.limit, call.turns) == ("FAILED", "tokens", 2)
    assert call.usage == Usage(input_tokens=120, output_tokens=20)
    await verified(log)


async def test_cancelling_a_task_cancels_its_subtask_in_flight(
    make_host: Any, log: Any, clock: FakeClock
) -> None:
    """A cancel while the subtask's model call is in flight: the task fails
    ``cancelled``, the child is sent a cancel and fails too, and its result
    still reaches the parent's stream."""

    def child(prompt: Prompt, n: int) -> Reply:
        return Reply(text="too late", delay=3600)  # until the clock moves

    model = planner(child, subtask_call(ASK_SUMMARY))
    host = await make_host(ScriptedProvider(model, sleep=clock.sleep))
    await host.submit("task.t1", created('(plan "the report")', PLAN, SUMMARIZE))
    await until(log, CHILD, lambda s: s.atom is not None and s.atom.asked)
    await host.submit("task.t1", CancelRequested(reason="no longer needed"))
    state = await ended(log, "task.t1")
    assert state.status == "failed"
    assert (state.error.kind, state.error.message) == ("cancelled", "no longer needed")
    child_state = await ended(log, CHILD)
    assert child_state.error.kind == "cancelled"
    assert child_state.error.message == "its parent task t1 was cancelled"
    [cancel] = await recorded(log, CHILD, CancelRequested)
    assert cancel.reason == "its parent task t1 was cancelled"
    [answer] = await until_recorded(log, "task.t1", ChildFinished)
    assert (answer.stream, answer.status) == (CHILD, "failed")
    tasks = await rows(
        host, log, "SELECT task_id, status, error_kind FROM tasks ORDER BY 1"
    )
    assert tasks == [("t1", "failed", "cancelled"), ("t1/sub/1", "failed", "cancelled")]
    steps = await rows(
        host, log, "SELECT task_id, status, finished_at IS NOT NULL FROM task_steps"
    )
    assert sorted(steps) == [("t1", "FAILED", 1), ("t1/sub/1", "FAILED", 1)]
    assert sorted(await verified(log)) == ["task.t1", CHILD]
