"""The run decider in the native tool-calling protocol.

The model answers with tool calls instead of JSON commands; the run ends on a
reply without any. Tests read as given events / when input / then decisions.
This is Klaw's tool call loop (spec 003), and its test list's names are here
(``ToolCallLoopTest``): a session's turn is such a run.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers_run import RUN, Story, asks, kinds, started
from msgspec.structs import replace

from steward import replay
from steward.actors.run import decider as run_actor
from steward.actors.run import state as run_state
from steward.actors.run.events import (
    ApprovalDecided,
    ApprovalRequested,
    OutputUpdated,
    RunCompleted,
    RunResumed,
    SystemNoteAdded,
)
from steward.actors.run.prompt import FINISH_TOOL
from steward.events import ChatMessage, Event, ToolCall, ToolRequested
from steward.kinds import KINDS

A = ToolCall(id="call_a", name="files.read", args={"path": "a.txt"})
B = ToolCall(id="call_b", name="files.write", args={"path": "b.txt"})
DEL = ToolCall(id="call_d", name="files.delete", args={"path": "x"})
UNKNOWN = ToolCall(id="call_x", name="web.search", args={"q": "steward"})


def native(**overrides: Any) -> Story:
    """Given a started native-protocol run."""
    return started(protocol="native", **overrides)


def requested(n: int, call: ToolCall, attempt: int = 1) -> ToolRequested:
    """The ToolRequested for native ``call`` under id <run>/tool/<n>."""
    return ToolRequested(
        request_id=f"{RUN}/tool/{n}",
        name=call.name,
        args=call.args,
        attempt=attempt,
        call_id=call.id,
    )


def test_native_prompt_passes_tools_and_no_json_protocol():
    """A native prompt hands the tools to the provider, and the finish tool
    (revision 3); no JSON protocol text."""
    story = native(system_prompt="You are Clifford.")
    prompt = story.prompt()
    assert prompt.system == "You are Clifford."
    assert prompt.protocol == "native"
    assert prompt.tools == (*story.state.settings.tools, FINISH_TOOL)


def test_every_prompt_of_a_native_run_offers_the_same_tools_tuple():
    """Made once at its creation: the prompt cache keeps the hashed head of
    a prompt by its tools' identity, so a new tuple per prompt would miss."""
    story = native()
    first = story.prompt().tools
    story.call(A)
    story.result()
    assert story.prompt().tools is first


def test_before_revision_3_a_native_prompt_has_no_finish_tool():
    story = native(revision=2)
    assert story.prompt().tools == story.state.settings.tools
    finish = ToolCall(id="call_f", name="finish", args={"output": "done"})
    [note, ask] = story.call(finish)  # an unknown tool then, as recorded
    assert isinstance(note, SystemNoteAdded) and note.call_id == "call_f"
    assert "Unknown tool 'finish'" in note.content
    assert ask == asks(story, 2)


def test_a_configured_tool_named_finish_gives_way_to_the_runs_own():
    mine = replace(FINISH_TOOL, description="not the run's")
    story = native(tools=(mine,))
    assert story.prompt().tools == (FINISH_TOOL,)


def finish(**args: Any) -> ToolCall:
    return ToolCall(id="call_f", name="finish", args=args)


def test_the_finish_tool_ends_the_run_with_its_output_and_metadata():
    """The native run's finish: its output, and metadata a workflow routes on."""
    story = native()
    story.call(A)
    story.result("A text")
    metadata = {"routingDecision": "approved", "score": 0.9}
    decisions = story.call(finish(output="All good.", metadata=metadata), text="hm")
    assert decisions == [
        OutputUpdated(text="All good.", mode="replace"),
        RunCompleted(output="All good.", reason="finish", metadata=metadata),
    ]
    assert story.state.status == "completed"


def test_a_finish_without_output_ends_with_the_replys_text():
    story = native()
    decisions = story.call(finish(), text="Said in text.")
    assert decisions == [RunCompleted(output="Said in text.", reason="finish")]


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (finish(output=7), "finish's `output` must be a string"),
        (
            finish(output="x", metadata=["a"]),
            "finish's `metadata` must be a JSON object",
        ),
    ],
    ids=["output", "metadata"],
)
def test_a_finish_with_bad_arguments_is_a_tool_error(call: ToolCall, problem: str):
    story = native()
    decisions = story.call(call)
    note = SystemNoteAdded(
        reason="tool_error",
        content=f"Not finished: {problem}.",
        call_id="call_f",
        tool="finish",
    )
    assert decisions == [note, asks(story, 2)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="tool", content=note.content, tool_call_id="call_f"
    )


def test_a_finish_with_no_output_and_no_text_is_a_tool_error():
    story = native()
    [note, ask] = story.call(finish(metadata={"a": 1}))
    assert isinstance(note, SystemNoteAdded)
    assert note.content == "Not finished: finish needs an `output`: your final answer."
    assert ask == asks(story, 2)


def test_two_finishes_in_one_reply_are_both_answered_and_none_is_a_tool():
    """A configured tool named finish is never called: the name is the run's."""
    story = native(tools=(replace(FINISH_TOOL, description="mine"),))
    second = ToolCall(id="call_g", name="finish", args={"output": "again"})
    decisions = story.call(finish(output="once"), second)
    assert kinds(decisions) == ["SystemNoteAdded", "SystemNoteAdded", "LlmRequested"]
    assert [d.call_id for d in decisions[:2]] == ["call_f", "call_g"]
    assert all("call finish alone" in d.content for d in decisions[:2])


def test_a_rejected_finish_beside_calls_counts_toward_the_round_limit():
    story = native(max_tool_call_rounds=1)
    story.call(A, finish(output="x"))
    decisions = story.result()
    assert kinds(decisions) == ["RunFailed"]
    assert "max_tool_call_rounds" in decisions[0].reason


def test_a_finish_beside_other_calls_waits_for_them():
    """The other calls are made; finish is answered with a tool error, and
    the model, given every answer, may call it alone."""
    story = native()
    decisions = story.call(A, finish(output="early"))
    assert kinds(decisions) == ["SystemNoteAdded", "ToolRequested"]
    assert "call finish alone" in decisions[0].content
    assert decisions[1] == requested(1, A)
    assert story.result("A text") == [asks(story, 2)]
    assert kinds(story.call(finish(output="now"))) == ["OutputUpdated", "RunCompleted"]


def test_tool_calls_are_requested_each_with_its_call_id():
    """A reply with tool calls → one ToolRequested per call, carrying call_id."""
    story = native()
    decisions = story.call(A, B)
    assert decisions == [requested(1, A), requested(2, B)]


def test_single_tool_call_processed_correctly():
    """One tool call → its request; its result in → the model is asked again."""
    story = native()
    assert story.call(A) == [requested(1, A)]
    assert story.result("A text") == [asks(story, 2)]


def test_multiple_sequential_tool_calls():
    """Round after round, each call is requested once the last result is in."""
    story = native()
    for n, call in enumerate((A, B, A), start=1):
        assert story.call(call) == [requested(n, call)]
        assert story.result(f"result {n}", request_id=f"{RUN}/tool/{n}") == [
            asks(story, n + 1)
        ]


def test_next_call_waits_for_every_result():
    """The model is asked again only when all results of the round are in."""
    story = native()
    story.call(A, B)
    assert story.result("A text", request_id=f"{RUN}/tool/1") == []
    assert story.result("B done", request_id=f"{RUN}/tool/2") == [asks(story, 2)]


def test_tool_results_added_to_context_for_next_round():
    """The next prompt has the assistant's tool_calls, then a tool message each."""
    story = native()
    story.call(A, B, text="reading")
    story.result("B done", request_id=f"{RUN}/tool/2")
    story.result("A text", request_id=f"{RUN}/tool/1")
    assert story.prompt().messages == (
        ChatMessage(role="user", content="Summarize notes.txt"),
        ChatMessage(role="assistant", content="reading", tool_calls=(A, B)),
        ChatMessage(role="tool", content="B done", tool_call_id="call_b"),
        ChatMessage(role="tool", content="A text", tool_call_id="call_a"),
    )


def test_loop_stops_when_llm_returns_no_tool_calls():
    """A reply without tool calls completes the run with the reply's text."""
    story = native()
    story.call(A)
    story.result("A text")
    decisions = story.call(text="The summary.")
    assert decisions == [RunCompleted(output="The summary.", reason="finish")]
    assert story.state.status == "completed"


def test_no_planning_gate_in_native():
    """Native tool calls go through without requirements/plan notes."""
    story = native()
    assert kinds(story.call(A)) == ["ToolRequested"]


def test_rounds_up_to_the_limit_go_through():
    """Exactly max_tool_call_rounds rounds of tool calls are allowed."""
    story = native(max_tool_call_rounds=2)
    story.call(A)
    story.result()
    assert story.call(B) == [requested(2, B)]


def test_tool_call_loop_fails_the_run_after_max_tool_call_rounds():
    """At most max_tool_call_rounds model calls: the answers of the last
    round's calls end the run, failed, naming the tool-call loop limit
    (Klaw's ``ToolCallLoopException``, as an event the run ends with)."""
    story = native(max_tool_call_rounds=2)
    story.call(A)
    story.result()
    story.call(B)
    decisions = story.result()
    assert kinds(decisions) == ["RunFailed"]
    assert decisions[0].reason.startswith("tool-call loop limit reached")
    assert "max_tool_call_rounds" in decisions[0].reason
    asked = [e for e in story.log if type(e).__name__ == "LlmRequested"]
    assert len(asked) == 2


def test_before_revision_4_the_tool_loop_made_one_more_call():
    """Runs recorded before revision 4 re-decide as they were: a call past
    the limit, failed when it asks for tools too."""
    story = native(max_tool_call_rounds=2, revision=3)
    for call in (A, B):
        story.call(call)
        story.result()
    decisions = story.call(A)
    assert kinds(decisions) == ["RunFailed"]
    assert "more than 2 rounds" in decisions[0].reason


def test_unknown_tool_is_answered_with_a_note_on_its_call_id():
    """An unknown tool → SystemNoteAdded with call_id, then the next request."""
    story = native()
    decisions = story.call(UNKNOWN)
    note = SystemNoteAdded(
        reason="tool_error",
        content="Unknown tool 'web.search'. Available tools: files.delete, "
        "files.read, files.write, finish.",
        call_id="call_x",
        tool="web.search",
    )
    assert decisions == [note, asks(story, 2)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="tool", content=note.content, tool_call_id="call_x"
    )


def test_unknown_tool_next_to_a_known_one_waits_for_the_known_result():
    """An unknown call is answered at once; the round ends with the known result."""
    story = native()
    decisions = story.call(UNKNOWN, A)
    assert kinds(decisions) == ["SystemNoteAdded", "ToolRequested"]
    assert decisions[1] == requested(1, A)
    assert story.result("A text") == [asks(story, 2)]


def test_non_retryable_failure_is_a_tool_message():
    """A non-retryable failure is shown on the call's tool message."""
    story = native()
    story.call(A)
    assert story.fail("no such file", retryable=False) == [asks(story, 2)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="tool",
        content="Tool files.read failed: no such file",
        tool_call_id="call_a",
    )


def test_retry_keeps_the_call_id_under_a_new_request_id():
    """A retryable failure retries the same call_id under a new request id."""
    story = native()
    story.call(A)
    assert story.fail("timeout") == [requested(2, A, attempt=2)]


def test_approval_in_native_carries_the_call_id():
    """A requires_approval call → ApprovalRequested with its call_id; run waits."""
    story = native()
    decisions = story.call(DEL, A)
    assert decisions == [
        ApprovalRequested(
            request_id=f"{RUN}/tool/1", name=DEL.name, args=DEL.args, call_id="call_d"
        ),
        requested(2, A),
    ]
    assert story.state.status == "waiting"
    assert story.result("A text") == []


def test_approved_native_call_runs_then_the_round_ends():
    """Approval → RunResumed + ToolRequested; its result ends the round."""
    story = native()
    story.call(DEL, A)
    story.result("A text", request_id=f"{RUN}/tool/2")
    decisions = story.when(ApprovalDecided(request_id=f"{RUN}/tool/1", approved=True))
    assert decisions == [RunResumed(reason="approved"), requested(1, DEL)]
    assert story.result("deleted") == [asks(story, 2)]


def test_denied_native_call_is_a_tool_message_with_the_reason():
    """Denial → RunResumed + next request; the tool message carries the reason."""
    story = native()
    story.call(DEL)
    decisions = story.when(
        ApprovalDecided(request_id=f"{RUN}/tool/1", approved=False, reason="no")
    )
    assert decisions == [RunResumed(reason="denied"), asks(story, 2)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="tool",
        content="A person denied the call to files.delete: no",
        tool_call_id="call_d",
    )


def test_only_unknown_tools_for_five_rounds_stalls():
    """Rounds that only hit unknown tools make no progress and stall."""
    story = native()
    for n in range(4):
        assert kinds(story.call(replace(UNKNOWN, id=f"x{n}")))[-1] == "LlmRequested"
    decisions = story.call(replace(UNKNOWN, id="x4"))
    assert decisions[-1] == RunCompleted(
        output="I could not finish this: I stopped after 5 model calls, the "
        "last 5 in a row making no progress (no tool call, message or answer).",
        reason="stalled",
    )


def test_window_drops_a_leading_tool_message_whose_call_is_cut_off():
    """A window that would start on a tool message starts after it instead."""
    story = native(transcript_limit=3)
    story.call(A)
    story.result("A text")
    story.call(B)
    story.result("B done")
    assert story.prompt().messages[1:] == (
        ChatMessage(role="assistant", content="", tool_calls=(B,)),
        ChatMessage(role="tool", content="B done", tool_call_id="call_b"),
    )


def test_every_tool_message_in_the_prompt_follows_its_call():
    """Each tool message's tool_call_id is shown in an earlier assistant message."""
    story = native()  # default transcript_token_limit=1200
    story.call(A)
    story.result("x" * 8_000)  # one large file read
    shown: set[str] = set()
    for message in story.prompt().messages:
        shown |= {call.id for call in message.tool_calls}
        if message.role == "tool":
            assert message.tool_call_id in shown


# -- replay ---------------------------------------------------------------------


def native_story() -> Story:
    """A native run: parallel calls, a retry, a denial, an unknown tool, an end."""
    story = native()
    story.call(A, DEL, UNKNOWN)
    story.fail("timeout")
    story.result("A text")
    story.when(ApprovalDecided(request_id=f"{RUN}/tool/2", approved=False, reason="no"))
    story.call(B)
    story.result("B done")
    story.call(text="All done.")
    return story


def test_replay_verifies_a_native_run():
    """Re-deciding a recorded native run gives back its recorded decisions."""
    story = native_story()
    assert story.state.status == "completed"
    records = story.records()
    assert replay.verify(records, kinds=KINDS) is None
    assert replay.rebuild(records, kinds=KINDS) == story.state


def test_replay_catches_a_changed_call_id():
    """A decider that drops call ids is caught at the reply that made the calls."""
    records = native_story().records()

    def changed(input: Event, state: run_state.Run) -> list[Event] | None:
        decisions = run_actor.decide(input, state)
        return [
            replace(d, call_id=None) if isinstance(d, ToolRequested) else d
            for d in decisions or []
        ]

    mismatch = replay.verify(records, decide=changed, kinds=KINDS)
    assert mismatch is not None
    assert mismatch.version == 4  # RunCreated, RunStarted, LlmRequested, the reply
    assert mismatch.recorded[0] == requested(1, A)
    assert mismatch.decided is not None
    assert mismatch.decided[0] == replace(requested(1, A), call_id=None)


def test_replay_flags_a_decision_without_an_input():
    """A log whose first record is a decision is reported, not folded."""
    records = native_story().records()[1:]
    mismatch = replay.verify(records, kinds=KINDS)
    assert mismatch is not None
    assert mismatch.version == 2
    assert mismatch.input is None
    assert mismatch.problem == "a decision was recorded without an input before it"
