"""What a staged run decides from revision 5 (`RunSettings.revision`), and
that a run of revision 4 still decides as it was recorded: a batch of tool
calls with a failed one gets the stage's recovery note whichever result
comes last, and a cancel after the answer was delivered completes the run
with it (spec 004 §10.3, §2.5). (The recoveries bounded per stage entry
are tested through the host: `test_past_its_recoveries_a_staged_run_fails`.)
"""

from __future__ import annotations

import pytest
from helpers_run import READ, Story, created, settings

from steward.actors.run.events import (
    LATEST_REVISION,
    RunCancelled,
    RunCompleted,
    SystemNoteAdded,
)
from steward.actors.run.stage_prompts import load_prompts
from steward.events import CancelRequested, ToolCall, ToolRequested

PROMPTS = load_prompts()
ANSWER = "The notes say hello."


def staged(revision: int) -> Story:
    """A staged run (agent mode, reasoning off, QA on) at ``revision``,
    asked its first (act) call."""
    story = Story()
    story.when(
        created(
            settings=settings(
                protocol="native",
                policy="staged",
                prompts=PROMPTS,
                revision=revision,
            )
        )
    )
    return story


@pytest.mark.parametrize("revision", [4, LATEST_REVISION])
def test_a_failed_call_of_a_batch_is_followed_up_whichever_result_is_last(
    revision: int,
) -> None:
    """Two calls in one reply; the first fails for good, the second's result
    comes last and is fine: from revision 5 the stage's tool-failure
    recovery follows (at 4, as recorded, the run just went on)."""
    story = staged(revision)
    asked = story.call(
        ToolCall(id="c1", name=READ.name, args={"path": "missing.txt"}),
        ToolCall(id="c2", name=READ.name, args={"path": "notes.txt"}),
    )
    first, second = [d.request_id for d in asked if isinstance(d, ToolRequested)]
    failed = story.tool_result(
        ok=False, error="no such file", retryable=False, request_id=first
    )
    assert story.when(failed) == []  # the other call is still out
    decided = story.when(story.tool_result("hello", request_id=second))
    notes = [d for d in decided if isinstance(d, SystemNoteAdded)]
    if revision >= 5:
        (note,) = notes
        assert note.reason == "recovery"
        assert "no such file" in note.content
    else:
        assert notes == []


@pytest.mark.parametrize("revision", [4, LATEST_REVISION])
def test_a_cancel_after_delivery_completes_with_the_delivered_answer(
    revision: int,
) -> None:
    """Cancelled while QA reviews: from revision 5 the run completes with
    the answer it delivered, which nothing takes back (at 4, as recorded,
    it was cancelled)."""
    story = staged(revision)
    story.say(ANSWER)  # act: the draft
    story.say(f"{ANSWER}\nDelivery: DONE")  # delivered; QA asked
    assert story.state.delivered == ANSWER
    decided = story.when(CancelRequested(reason="stop"))
    if revision >= 5:
        assert decided == [RunCompleted(output=ANSWER, reason="cancelled")]
    else:
        assert decided == [RunCancelled(reason="stop")]
