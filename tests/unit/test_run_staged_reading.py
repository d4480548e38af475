"""How a staged run reads a reply (spec 004 §10): a request to the user for
files or diffs, not an answer that mentions code; ``Delivery: DONE``; a
reasoning block kept out of the visible text; never an exception."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steward.actors.run_staged import reading


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
