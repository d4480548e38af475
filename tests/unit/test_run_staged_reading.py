"""How a staged run reads a reply (spec 004 §10): a request to the user for
files or diffs, not an answer that mentions code; ``Delivery: DONE``; a
reasoning block kept out of the visible text; never an exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steward.actors.run.staged import reading


@pytest.mark.parametrize(
    "text",
    [
        "Please send me the diff.",
        "Could you paste the file contents here?",
        "Can you share the logs with me?",
        "Send me the file and I will fix it.",
    ],
)
def test_a_request_for_files_is_one(text: str) -> None:
    assert reading(text, "act").asks_for_files


@pytest.mark.parametrize(
    "text",
    [
        "Below I provide the code that fixes it.",
        "I'll share the diff once the tests pass.",
        "The file contents are: hello.",
    ],
)
def test_an_answer_mentioning_code_is_no_request(text: str) -> None:
    assert not reading(text, "act").asks_for_files


def test_delivery_done_is_read_and_taken_out_of_the_answer() -> None:
    said = reading("The notes say hello.\nDelivery: DONE", "delivery_check")
    assert said.done and said.visible == "The notes say hello."
    assert not reading("The notes say hello.", "delivery_check").done


@given(st.text())
def test_any_reply_reads_without_raising(text: str) -> None:
    said = reading(text, "qa_review")
    assert said.report is not None
    assert "<ide_reasoning>" not in said.visible.lower()


def test_a_long_run_of_blanks_reads_at_once() -> None:
    """A reply of a long run of blanks is read in linear time: the delivery
    line and fence patterns never backtrack over it (counted in regex steps
    by the text's length, not timed: 400,000 characters would take minutes
    with a backtracking pattern, and the test would not end)."""
    for text in ("delivery" + " " * 400_000 + "x", "a" + " " * 400_000 + "b"):
        said = reading(text, "qa_review")
        assert not said.done
        assert said.report is not None


def test_a_delivery_line_alone_is_an_empty_answer() -> None:
    said = reading("**Delivery:** DONE", "delivery_check")
    assert said.done and said.empty and said.visible == ""


def test_a_summary_holds_no_reasoning_from_a_tool_output() -> None:
    """A tool's output is any text: a reasoning block in it, or a stray tag,
    never reaches the summary the model is shown."""
    from steward.actors.run.staged import summary
    from steward.events import ChatMessage

    output = "<ide_reasoning>Plan: hidden thoughts</ide_reasoning>kept </ide_reasoning>"
    entries = (ChatMessage(role="tool", content=output, tool_call_id="c1"),)
    text = summary("goal", entries, ())
    assert "hidden" not in text and "ide_reasoning" not in text
    assert "- kept" in text


def _staged_run(**changes: object) -> list[object]:
    """The decisions of a staged run (no reasoning, QA on) whose act answers
    and whose delivery check delivers, the delivery's reply spending 200
    tokens; ``changes`` to its settings."""
    import msgspec

    from steward.actors.run import decider as run
    from steward.actors.run import state as run_state
    from steward.actors.run.events import RunCreated
    from steward.actors.run.stage_prompts import load_prompts
    from steward.config import Settings
    from steward.effects.tools import ToolRegistry
    from steward.events import LlmResponded, Usage

    base = Settings().run_settings(tools=ToolRegistry.with_builtins().specs())
    settings = msgspec.structs.replace(
        base, protocol="native", policy="staged", prompts=load_prompts(), **changes
    )
    state = run_state.initial
    decided: list[object] = []
    inputs = [
        RunCreated(run_id="s1", input_text="answer it", settings=settings),
        "The answer",
        "The answer\nDelivery: DONE",
    ]
    for n, item in enumerate(inputs):
        if isinstance(item, str):
            usage = Usage(input_tokens=200 if n == 2 else 10)
            item = LlmResponded(request_id=state.llm_pending, text=item, usage=usage)
        step = run.decide(item, state)
        assert step is not None, item
        decided += step
        state = run_state.fold([item, *step], state)
    return decided


def test_a_budget_spent_after_delivery_completes_with_the_answer() -> None:
    """Delivery is authoritative (spec 004 §2.5): a budget spent by the
    delivery check's reply ends the run completed with the delivered answer,
    not failed."""
    from steward.actors.run.events import AnswerDelivered, BudgetExceeded, RunCompleted

    decided = _staged_run(token_budget=100)
    kinds = [type(e) for e in decided]
    assert AnswerDelivered in kinds and BudgetExceeded in kinds
    last = decided[-1]
    assert isinstance(last, RunCompleted) and last.output == "The answer"


def test_a_staged_run_without_its_prompts_fails_at_once() -> None:
    from steward.actors.run.events import RunFailed

    decided = _staged_run_created(prompts={})
    assert isinstance(decided[-1], RunFailed)
    assert "prompts" in decided[-1].reason


def _staged_run_created(**changes: object) -> list[object]:
    import msgspec

    from steward.actors.run import decider as run
    from steward.actors.run import state as run_state
    from steward.actors.run.events import RunCreated
    from steward.config import Settings

    settings = msgspec.structs.replace(
        Settings().run_settings(), protocol="native", policy="staged", **changes
    )
    created = RunCreated(run_id="s1", input_text="go", settings=settings)
    return list(run.decide(created, run_state.initial) or [])
