"""The task decider over random programs and random answers (spec 002):
whatever a program is and whatever its model answers, the task ends
(completed, or failed with its error and partial results), the state folded
from its events is the state it decided on, and ``replay.verify`` re-decides
every step as it was recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from unit.test_task_eval import PROPERTY_TEMPLATES, programs, rich_programs

from steward import replay
from steward.actors.kind import Kinds
from steward.actors.task import decider as task
from steward.actors.task import state as task_state
from steward.actors.task.events import (
    CallFinished,
    CallStarted,
    SubtaskRequest,
    SubtaskSpawned,
    TaskCreated,
    TaskFailed,
    TaskLimits,
    Template,
)
from steward.actors.task.programs import with_scorer
from steward.errors import ConfigError
from steward.events import (
    Event,
    LlmFailed,
    LlmResponded,
    Recorded,
    ToolCall,
    ToolResulted,
    Usage,
    recorded_from_json,
)
from steward.kinds import KINDS, TASK

STREAM = "task.p"

answers = st.sampled_from(
    [
        "text",  # a complete result
        "json-failed",  # the spec's result, FAILED
        "json-notes",  # COMPLETE with notes
        "model-failed",  # LlmFailed
        "invented-tool",  # a tool call no template offers: refused, asked again
        "bad-subtask",  # CONTINUATION without a description: refused, asked again
        "expensive",  # a refused tool call that spends the call's tokens
    ]
)


def _answer(kind: str, request_id: str, n: int) -> Event:
    text = {
        "text": f"answer {n}",
        "json-failed": '{"status": "FAILED", "content": "could not"}',
        "json-notes": '{"status": "COMPLETE", "content": "c", "notes": {"k": 1}}',
    }.get(kind, "")
    if kind == "model-failed":
        return LlmFailed(request_id=request_id, kind="auth", message="bad key")
    if kind in ("invented-tool", "expensive"):
        call = ToolCall(id=f"c{n}", name="shell.exec", args={"cmd": "rm -rf /"})
        usage = Usage(input_tokens=400 if kind == "expensive" else 10)
        return LlmResponded(
            request_id=request_id, text="", tool_calls=(call,), usage=usage
        )
    if kind == "bad-subtask":
        call = ToolCall(id=f"s{n}", name="subtask", args={"type": "x"})
        return LlmResponded(request_id=request_id, text="", tool_calls=(call,))
    return LlmResponded(request_id=request_id, text=text, usage=Usage(input_tokens=10))


def run(program: str, script: list[str], limits: TaskLimits) -> list[Recorded]:
    """The task's records, each input decided on the state folded so far and
    committed with its decisions, its model answered from ``script`` (then
    plain text) until it ends."""
    state = task_state.initial
    records: list[Recorded] = []

    def commit(input: Event) -> None:
        nonlocal state
        decisions = task.decide(input, state)
        assert decisions is not None, input
        for e in (input, *decisions):
            state = task_state.evolve(state, e)
            n = len(records) + 1
            records.append(
                Recorded(stream=STREAM, version=n, position=n, at=0.0, event=e)
            )

    templates = tuple(PROPERTY_TEMPLATES.values())
    commit(
        TaskCreated(task_id="p", program=program, templates=templates, limits=limits)
    )
    for n in range(300):
        if state.status != "running":
            return records
        atom = state.atom
        if atom is not None and atom.asked is not None:
            kind = script[n] if n < len(script) else "text"
            commit(_answer(kind, atom.asked, n))
        elif state.tool is not None:
            commit(ToolResulted(request_id=state.tool, ok=True, output="ran"))
        else:
            raise AssertionError(f"the task waits for nothing: {state}")
    raise AssertionError("the task did not end in 300 answers")


@settings(max_examples=60, deadline=None)
@given(
    programs(),
    st.lists(answers, max_size=30),
    st.integers(1, 3),
    st.sampled_from([None, 300]),
)
def test_any_program_and_answers_end_fold_and_verify(
    program: str, script: list[str], turns: int, tokens: int | None
) -> None:
    limits = TaskLimits(max_turns=turns, max_tokens=tokens)
    records = run(program, script, limits)
    state: Any = TASK.fold(r.event for r in records)
    live: Any = task_state.initial
    for r in records:
        live = task_state.evolve(live, r.event)
    assert state == live
    assert state.status in ("completed", "failed")
    last = records[-1].event
    if isinstance(last, TaskFailed):
        event(f"failed: {last.error.kind} {last.error.limit}")
        assert last.error.kind in ("call", "limit"), last.error.message
        assert isinstance(last.error.partial, dict)
        if last.error.kind == "limit":
            assert last.error.limit in ("turns", "tokens", "iterations", "calls")
    else:
        event("completed")
    assert replay.verify(records, kinds=KINDS) is None


@settings(max_examples=40, deadline=None)
@given(rich_programs(), st.lists(answers, max_size=30))
def test_the_checkpoint_in_the_state_only_saves_work(
    program: str, script: list[str]
) -> None:
    """The task evaluates its program from the checkpoint kept in its state;
    without it (from the program's top), every recorded input is decided
    the same and every finished call leaves the same state, checkpoint
    included."""
    records = run(program, script, TaskLimits())
    state = task_state.initial
    for r in records:
        without = msgspec.structs.replace(state, checkpoint=None)
        if TASK.is_input(r.event) and state.created is not None:
            assert task.decide(r.event, without) == task.decide(r.event, state)
        after = task_state.evolve(state, r.event)
        if isinstance(r.event, CallFinished):
            assert task_state.evolve(without, r.event) == after
        state = after
    assert replay.verify(records, kinds=KINDS) is None


def test_a_code_change_that_evaluates_differently_is_a_mismatch_at_its_version() -> (
    None
):
    """Re-deciding a recorded task with code that binds a template's
    arguments otherwise (here: upper-cased) is refused by `replay.verify`
    at the step of the first call, with both sides."""
    golden = Path(__file__).parents[1] / "golden" / "tasks.jsonl"
    lines = golden.read_bytes().splitlines()
    records = [
        r
        for r in (recorded_from_json(line, KINDS.union) for line in lines)
        if r.stream == "task.t-de"
    ]
    assert replay.verify(records, kinds=KINDS) is None

    def shouting(input: Event, state: task_state.Task) -> list[Event] | None:
        decided = task.decide(input, state)
        if decided is None:
            return None
        return [
            msgspec.structs.replace(
                e, args={k: str(v).upper() for k, v in e.args.items()}
            )
            if isinstance(e, CallStarted)
            else e
            for e in decided
        ]

    mismatch = replay.verify(records, decide=shouting, kinds=KINDS)
    assert mismatch is not None
    first = next(r.version for r in records if isinstance(r.event, CallStarted))
    assert mismatch.version == first - 1  # the step's input: the task's creation
    assert "CallStarted" in str(mismatch.recorded)


def prefer_last(template: Template, request: SubtaskRequest) -> float:
    """A scorer of the test's own: the template named last alphabetically."""
    return float(ord(template.name[0]))


def _spawned(kinds: Kinds) -> str:
    """The template a subtask request with no hints is given, by ``kinds``."""
    kind = kinds.of(STREAM)
    templates = (
        Template(name="alpha", params=("x",), instructions="{{x}}", matches=("sum",)),
        Template(name="zeta", params=("x",), instructions="{{x}}"),
        Template(name="root", instructions="go"),
    )
    state = kind.decider.initial
    for e in (TaskCreated(task_id="p", program="(root)", templates=templates),):
        for d in (e, *(kind.decider.decide(e, state) or [])):
            state = kind.decider.evolve(state, d)
    ask = ToolCall(
        id="s1",
        name="subtask",
        args={"type": "sum", "description": "sum it", "inputs": {"x": "1"}},
    )
    reply = LlmResponded(request_id=state.atom.asked, text="", tool_calls=(ask,))
    decided = kind.decider.decide(reply, state) or []
    [spawned] = [e for e in decided if isinstance(e, SubtaskSpawned)]
    return spawned.template


def test_the_template_scorer_is_a_function_the_settings_may_replace() -> None:
    assert _spawned(KINDS) == "alpha"  # the default: its matches name the type
    assert _spawned(with_scorer(KINDS, "unit.test_task_decider:prefer_last")) == "zeta"
    with pytest.raises(ConfigError, match="task.scorer: 'nowhere:fn' is no importable"):
        with_scorer(KINDS, "nowhere:fn")


def failing_scorer(template: Template, request: SubtaskRequest) -> float:
    """A scorer of the test's own that fails."""
    raise RuntimeError("broken scorer")


def test_a_scorer_that_fails_or_a_request_without_inputs_is_refused_not_raised() -> (
    None
):
    """A template whose parameters the request's inputs lack is never
    chosen, and a scorer that raises scores its template out: the request
    is refused with why, and the decider never raises."""
    assert _spawned_or_refused(
        with_scorer(KINDS, "unit.test_task_decider:failing_scorer")
    ) == ("refused")


def _spawned_or_refused(kinds: Kinds) -> str:
    kind = kinds.of(STREAM)
    templates = (
        Template(name="alpha", params=("x",), instructions="{{x}}"),
        Template(name="root", instructions="go"),
    )
    state = kind.decider.initial
    first = TaskCreated(task_id="p", program="(root)", templates=templates)
    for d in (first, *(kind.decider.decide(first, state) or [])):
        state = kind.decider.evolve(state, d)
    ask = ToolCall(
        id="s1", name="subtask", args={"type": "x", "description": "y", "inputs": {}}
    )
    reply = LlmResponded(request_id=state.atom.asked, text="", tool_calls=(ask,))
    decided = kind.decider.decide(reply, state) or []
    return (
        "spawned"
        if any(isinstance(e, SubtaskSpawned) for e in decided)
        else ("refused")
    )


def test_a_template_with_a_problem_fails_the_task_not_the_fold() -> None:
    """A task created (not through the command line) with a template that
    uses an undeclared placeholder, or is named as a form of the language,
    fails naming it; nothing raises."""
    for template in (
        Template(name="a", instructions="{{y}}"),
        Template(name="content", instructions="go"),
    ):
        first = TaskCreated(
            task_id="p", program=f"({template.name})", templates=(template,)
        )
        decided = task.decide(first, task_state.initial)
        assert decided is not None
        [failed] = decided
        assert isinstance(failed, TaskFailed)
        assert failed.error.kind == "eval"
        assert f"template {template.name}" in failed.error.message


def test_a_second_task_created_is_refused_even_without_an_id() -> None:
    first = TaskCreated(task_id="", program='"x"')
    state = task_state.initial
    for e in (first, *(task.decide(first, state) or [])):
        state = task_state.evolve(state, e)
    assert task.decide(first, state) is None


def test_a_subtask_asked_on_the_last_turn_fails_the_call_at_its_turns() -> None:
    """With one turn a call could never read its subtask's answer: asking
    for one fails the call at its ``turns`` limit instead of spawning it."""
    one = Template(name="one", instructions="go", max_turns=1)
    other = Template(name="other", params=("x",), instructions="{{x}}")
    first = TaskCreated(task_id="p", program="(one)", templates=(one, other))
    state = task_state.initial
    for e in (first, *(task.decide(first, state) or [])):
        state = task_state.evolve(state, e)
    ask = ToolCall(
        id="s1",
        name="subtask",
        args={"type": "x", "description": "y", "inputs": {"x": "1"}},
    )
    reply = LlmResponded(request_id=state.atom.asked, text="", tool_calls=(ask,))
    decided = task.decide(reply, state) or []
    assert not any(isinstance(e, SubtaskSpawned) for e in decided)
    assert isinstance(decided[-1], TaskFailed)
    assert decided[-1].error.limit == "turns"
