"""The run decider against Clifford's run-processor contract.

Each test reads as given events (a `Story` driven through the decider), when an
input, then the decisions. Everything is pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from typing import Any

import hypothesis
import msgspec
import pytest
from helpers_run import (
    PLAN,
    READ,
    REQUIREMENTS,
    RUN,
    Story,
    asks,
    created,
    kinds,
    planned,
    settings,
    started,
    texts,
)
from hypothesis import strategies as st
from msgspec.structs import replace
from support import act

from steward import replay
from steward.actors import prompt as prompt_module
from steward.actors.prompt import Prompt, PromptCache, first_kind_hash, prompt_hash
from steward.actors.run import decider as run_actor
from steward.actors.run import state as run_state
from steward.actors.run.events import (
    ApprovalDecided,
    ApprovalRequested,
    DecisionRecorded,
    MessageSent,
    NoteRecorded,
    OutputUpdated,
    RunCancelled,
    RunCompleted,
    RunCreated,
    RunFailed,
    RunResumed,
    RunSlept,
    RunStarted,
    RunTaken,
    SubagentSpec,
    SubagentsSpawned,
    SystemNoteAdded,
)
from steward.actors.run.state import run_stream
from steward.events import (
    CancelRequested,
    ChatMessage,
    ChildFinished,
    Event,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolCall,
    ToolRequested,
    ToolResulted,
    ToolSpec,
    WakeDue,
)
from steward.kinds import KINDS

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def read(path: str = "notes.txt") -> str:
    """A reply asking for files.read."""
    return act(type="tool_call", name="files.read", args={"path": path})


def after_tool_call(**overrides: Any) -> Story:
    """Given a planned run that made one successful tool call."""
    story = planned(**overrides)
    story.say(read())
    story.result("the notes")
    return story


def finished(child: str, output: str = "done") -> ChildFinished:
    """Child ``child`` completed with ``output``."""
    return ChildFinished(stream=run_stream(child), status="completed", output=output)


# -- starting -------------------------------------------------------------------


def test_created_starts_the_run_and_asks_the_model():
    """RunCreated → RunStarted and the first interactive model call."""
    story = Story()
    decisions = story.when(created())
    assert decisions == [RunStarted(), asks(story, 1)]
    assert decisions[1].request_id == f"{RUN}/llm/1"
    assert story.state.status == "running"


def test_subagent_run_asks_with_subagent_priority():
    """A subagent run's model calls are queued at subagent priority."""
    story = Story()
    decisions = story.when(created(kind="subagent", parent_run_id="parent"))
    assert decisions == [RunStarted(), asks(story, 1, priority="subagent")]


def test_second_created_is_refused():
    """A run is created once; a second RunCreated is refused."""
    story = started()
    assert story.refuses(created())


def test_first_prompt_shows_the_input_as_the_user_message():
    """Without a conversation the input text is the one user message."""
    story = started()
    assert story.prompt().messages == (
        ChatMessage(role="user", content="Summarize notes.txt"),
    )


# -- commands -------------------------------------------------------------------


@pytest.mark.parametrize("category", ["requirements", "plan", "risk"])
def test_note_is_recorded_and_the_loop_goes_on(category: str):
    """A note is recorded and the model is asked again."""
    story = started()
    decisions = story.say(act(type="note", category=category, content="c"))
    assert decisions == [NoteRecorded(category=category, content="c"), asks(story, 2)]


def test_requirements_and_plan_notes_open_the_planning_gate():
    """The requirements and plan notes set the gate's two flags."""
    story = started()
    story.say(REQUIREMENTS)
    assert (story.state.has_requirements, story.state.has_plan) == (True, False)
    story.say(PLAN)
    assert (story.state.has_requirements, story.state.has_plan) == (True, True)


def test_decision_is_recorded_with_its_importance():
    """A decision is recorded (with importance) and the loop goes on."""
    story = started()
    decisions = story.say(act(type="decision", content="use A", importance="high"))
    assert decisions == [
        DecisionRecorded(content="use A", importance="high"),
        asks(story, 2),
    ]


def test_set_output_replaces_the_buffer():
    """set_output without a mode replaces the output buffer."""
    story = planned()
    story.say(act(type="set_output", output="first"))
    decisions = story.say(act(type="set_output", output="second"))
    assert decisions == [OutputUpdated(text="second"), asks(story, 5)]
    assert story.state.output == "second"


def test_set_output_appends_to_the_buffer():
    """set_output mode=append adds to the output buffer."""
    story = planned()
    story.say(act(type="set_output", output="Hello"))
    decisions = story.say(act(type="set_output", output=", world", mode="append"))
    assert decisions == [OutputUpdated(text=", world", mode="append"), asks(story, 5)]
    assert story.state.output == "Hello, world"


def test_finish_with_output_completes_with_it():
    """finish with output records it and completes the run with it."""
    story = planned()
    decisions = story.say(act(type="finish", output="All done."))
    assert decisions == [
        OutputUpdated(text="All done."),
        RunCompleted(output="All done.", reason="finish"),
    ]
    assert story.state.status == "completed"


def test_finish_in_append_mode_completes_with_buffer_and_output():
    """finish mode=append completes with the buffer plus the output."""
    story = planned()
    story.say(act(type="set_output", output="Part 1. "))
    decisions = story.say(act(type="finish", output="Part 2.", mode="append"))
    assert decisions[-1] == RunCompleted(output="Part 1. Part 2.", reason="finish")


def test_finish_without_output_completes_with_the_buffer():
    """finish without output completes with the output buffer."""
    story = planned()
    story.say(act(type="set_output", output="the buffer"))
    decisions = story.say(act(type="finish"))
    assert decisions == [RunCompleted(output="the buffer", reason="finish")]


def test_tool_call_requests_the_tool_with_a_derived_id():
    """tool_call → ToolRequested with id <run>/tool/1 and no model call yet."""
    story = planned()
    decisions = story.say(read())
    assert decisions == [
        ToolRequested(
            request_id=f"{RUN}/tool/1", name="files.read", args={"path": "notes.txt"}
        )
    ]


def test_tool_result_goes_to_the_transcript_and_the_loop_goes_on():
    """A successful tool result is shown to the model in the next prompt."""
    story = planned()
    story.say(read())
    decisions = story.result("line one")
    assert decisions == [asks(story, 4)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="user", content="[tool_result files.read]\nline one"
    )


@pytest.mark.parametrize(
    "reply",
    [
        {"type": "files.read", "args": {"path": "notes.txt"}},
        {"name": "files.read", "args": {"path": "notes.txt"}},
    ],
    ids=["type", "name"],
)
def test_tool_call_shortcut(reply: dict[str, Any]):
    """`type`/`name` set to a tool name is a tool_call with its args."""
    story = planned()
    decisions = story.say(act(**reply))
    assert decisions == [
        ToolRequested(
            request_id=f"{RUN}/tool/1", name="files.read", args={"path": "notes.txt"}
        )
    ]


@pytest.mark.parametrize(
    "reply",
    [
        {"type": "files.read", "path": "notes.txt", "limit": 3},
        {"name": "files.read", "path": "notes.txt", "limit": 3},
    ],
    ids=["type", "name"],
)
def test_tool_call_shortcut_keeps_the_arguments_beside_the_name(
    reply: dict[str, Any],
):
    """The keys beside a shortcut's tool name are the call's arguments."""
    story = planned()
    decisions = story.say(act(**reply))
    assert decisions == [
        ToolRequested(
            request_id=f"{RUN}/tool/1",
            name="files.read",
            args={"path": "notes.txt", "limit": 3},
        )
    ]


@pytest.mark.parametrize("key", ["type", "name"])
def test_tool_call_shortcut_of_an_old_run_takes_only_args(key: str):
    """A run recorded before revision 1 re-decides its shortcut as it did then:
    the keys beside the tool name are not arguments (old logs verify)."""
    story = planned(revision=0)
    decisions = story.say(act(**{key: "files.read", "path": "notes.txt"}))
    assert decisions == [
        ToolRequested(request_id=f"{RUN}/tool/1", name="files.read", args={})
    ]


@pytest.mark.parametrize("key", ["type", "name"])
def test_tool_call_shortcut_with_args_takes_args_and_ignores_the_rest(key: str):
    """An explicit `args` object wins over keys beside a shortcut's tool name."""
    story = planned()
    reply = {key: "files.read", "args": {"path": "a.txt"}, "path": "b.txt"}
    decisions = story.say(act(**reply))
    assert decisions == [
        ToolRequested(
            request_id=f"{RUN}/tool/1", name="files.read", args={"path": "a.txt"}
        )
    ]


@pytest.mark.parametrize("key", ["type", "name"])
@pytest.mark.parametrize("args", [[1], "notes.txt", 3])
def test_tool_call_shortcut_with_args_not_an_object_is_corrected(key: str, args: Any):
    """A shortcut whose `args` is not an object gets a correction, no tool call."""
    story = planned()
    decisions = story.say(act(**{key: "files.read", "args": args}))
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert decisions[0].reason == "invalid_command"
    assert "`args` must be an object" in decisions[0].content


def test_spawn_subagent_spawns_one_child_and_waits():
    """spawn_subagent → SubagentsSpawned with child <run>-1; the run waits."""
    story = started()
    decisions = story.say(
        act(type="spawn_subagent", subagent={"task": "read", "tools": ["files.read"]})
    )
    assert decisions == [
        SubagentsSpawned(
            children=(
                SubagentSpec(
                    run_id=f"{RUN}-1", input_text="read", allowed_tools=("files.read",)
                ),
            )
        )
    ]
    assert story.state.status == "waiting"


def test_spawn_subagents_numbers_children_in_order():
    """spawn_subagents → children <run>-1, <run>-2 (a bare string is a task)."""
    story = started()
    decisions = story.say(
        act(type="spawn_subagents", subagents=[{"task": "a", "profile": "p"}, "b"])
    )
    assert decisions == [
        SubagentsSpawned(
            children=(
                SubagentSpec(run_id=f"{RUN}-1", input_text="a", profile="p"),
                SubagentSpec(run_id=f"{RUN}-2", input_text="b"),
            )
        )
    ]
    assert story.state.children == (f"{RUN}-1", f"{RUN}-2")


def test_a_second_spawn_continues_the_child_numbering():
    """Child ids never repeat: a later spawn starts after the earlier children."""
    story = started()
    story.say(act(type="spawn_subagents", subagents=["a", "b"]))
    story.when(finished(f"{RUN}-1"))
    story.when(finished(f"{RUN}-2"))
    decisions = story.say(act(type="spawn_subagent", subagent={"task": "c"}))
    assert decisions == [
        SubagentsSpawned(children=(SubagentSpec(run_id=f"{RUN}-3", input_text="c"),))
    ]


@pytest.mark.parametrize(
    "subagents", [[], [{"tools": ["x"]}], [42], "a task"], ids=repr
)
def test_malformed_spawn_is_an_invalid_command(subagents: Any):
    """spawn_subagents without a list of tasks is corrected, not spawned."""
    story = started()
    decisions = story.say(act(type="spawn_subagents", subagents=subagents))
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert decisions[0].reason == "invalid_command"


@pytest.mark.parametrize(
    "reply",
    [
        {"type": "spawn_subagent", "subagent": {"task": "t", "profile": "writer"}},
        {
            "type": "spawn_subagents",
            "subagents": ["a", {"task": "b", "profile": "writer"}],
        },
    ],
    ids=["spawn_subagent", "spawn_subagents"],
)
def test_spawn_with_an_unknown_profile_is_corrected_naming_the_known_ones(
    reply: dict[str, Any],
):
    """A subagent naming a profile the run does not know is corrected, not
    spawned, and the correction lists the known profiles."""
    story = started(profiles=("default", "reviewer"))
    decisions = story.say(act(**reply))
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert decisions[0].reason == "invalid_command"
    assert (
        "a subagent's `profile` 'writer' is not an agent profile; "
        "known profiles: default, reviewer" in decisions[0].content
    )
    assert story.state.children == () and story.state.spawned == 0


def test_spawn_with_an_unknown_profile_counts_toward_max_json_retries():
    """Unknown profiles are invalid commands: past max_json_retries the run fails."""
    story = started(profiles=("default",))
    spawn = act(type="spawn_subagent", subagent={"task": "t", "profile": "writer"})
    story.say(spawn)
    decisions = story.say(spawn)
    assert kinds(decisions) == ["RunFailed"]
    assert "'writer' is not an agent profile" in decisions[0].reason


def test_spawn_with_a_known_profile_spawns_the_child():
    """A subagent naming a known profile is spawned with it."""
    story = started(profiles=("default", "reviewer"))
    decisions = story.say(
        act(type="spawn_subagent", subagent={"task": "t", "profile": "reviewer"})
    )
    assert decisions == [
        SubagentsSpawned(
            children=(
                SubagentSpec(run_id=f"{RUN}-1", input_text="t", profile="reviewer"),
            )
        )
    ]


def test_spawn_in_a_run_recorded_without_profiles_checks_none():
    """A run whose settings predate `profiles` (None) spawns any profile, as
    it did when it was recorded, so its log still verifies."""
    story = started()
    decisions = story.say(
        act(type="spawn_subagent", subagent={"task": "t", "profile": "writer"})
    )
    assert kinds(decisions) == ["SubagentsSpawned"]


def test_children_inherit_the_known_profiles():
    """A child's settings carry its parent's profiles, so it checks them too."""
    parent = created(settings=settings(profiles=("default",)))
    spec = SubagentSpec(run_id=f"{RUN}-1", input_text="t")
    child = run_actor.child_created(parent, spec, NOW)
    assert child.settings.profiles == ("default",)


def test_sleep_with_delay_seconds_wakes_after_the_delay():
    """sleep delaySeconds → RunSlept at the reply's time plus the delay."""
    story = started()
    decisions = story.say(act(type="sleep", delaySeconds=90, reason="wait"), at=NOW)
    assert decisions == [
        RunSlept(timer_id=f"{RUN}/wake/1", wake_at=NOW + 90, reason="wait")
    ]
    assert story.state.status == "waiting"


@pytest.mark.parametrize(
    ("wake_at", "expected"),
    [
        ("2023-11-15T00:00:00Z", 1_700_006_400.0),
        ("2023-11-15T00:00:00+00:00", 1_700_006_400.0),
        ("2023-11-15T01:00:00+01:00", 1_700_006_400.0),
        ("2023-11-15T00:00:00", 1_700_006_400.0),
        (1_700_006_400, 1_700_006_400.0),
        (1_700_006_400.5, 1_700_006_400.5),
    ],
)
def test_sleep_until_wake_at(wake_at: Any, expected: float):
    """sleep wakeAt accepts ISO 8601 (naive = UTC) and epoch seconds."""
    story = started()
    decisions = story.say(act(type="sleep", wakeAt=wake_at), at=NOW)
    assert decisions == [RunSlept(timer_id=f"{RUN}/wake/1", wake_at=expected)]


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (NOW, NOW + 100),  # 22:13:20 → 22:15:00
        (NOW + 100, NOW + 400),  # exactly 22:15:00 → the next one, 22:20:00
    ],
)
def test_sleep_with_cron_wakes_at_the_next_match_after_the_reply(
    at: float, expected: float
):
    """sleep cron → RunSlept at the next match strictly after the reply's `at`."""
    story = started()
    decisions = story.say(act(type="sleep", cron="*/5 * * * *"), at=at)
    assert decisions == [
        RunSlept(timer_id=f"{RUN}/wake/1", wake_at=expected, cron="*/5 * * * *")
    ]


@pytest.mark.parametrize(
    "command",
    [
        {},
        {"delaySeconds": -1},
        {"delaySeconds": "60"},
        {"delaySeconds": True},
        {"wakeAt": "tomorrow"},
        {"wakeAt": [1]},
        {"cron": "every five minutes"},
        {"cron": 5},
    ],
    ids=repr,
)
def test_invalid_sleep_is_corrected(command: dict[str, Any]):
    """A sleep without a valid time is an invalid command, not a RunSlept."""
    story = started()
    decisions = story.say(act(type="sleep", **command))
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert decisions[0].reason == "invalid_command"
    assert story.state.status == "running"


# -- the planning gate ----------------------------------------------------------

GATED = [
    read(),
    act(type="files.read", args={"path": "notes.txt"}),
    act(type="set_output", output="x"),
    act(type="finish", output="x"),
]


@pytest.mark.parametrize("reply", GATED)
def test_planning_gate_holds_before_both_notes(reply: str):
    """tool_call/set_output/finish before the notes → a planning_gate note."""
    story = started()
    story.say(REQUIREMENTS)  # one of the two notes is not enough
    decisions = story.say(reply)
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert decisions[0].reason == "planning_gate"
    assert decisions[1] == asks(story, 3)
    assert story.state.output == ""
    assert story.state.calls == ()


def test_planning_gate_note_is_shown_to_the_model():
    """The gate's note is in the next prompt, as a system line."""
    story = started()
    story.say(read())
    last = story.prompt().messages[-1]
    assert last.role == "user"
    assert last.content.startswith("[system] ")
    assert 'note(category="requirements")' in last.content


@pytest.mark.parametrize("reply", GATED)
def test_planning_gate_lets_everything_through_after_both_notes(reply: str):
    """After requirements and plan notes, gated commands go through."""
    story = planned()
    decisions = story.say(reply)
    assert "SystemNoteAdded" not in kinds(decisions)


@pytest.mark.parametrize("reply", GATED)
def test_planning_gate_off_lets_everything_through(reply: str):
    """With planning_gate=False gated commands go through at once."""
    story = started(planning_gate=False)
    decisions = story.say(reply)
    assert kinds(decisions)[0] in {"ToolRequested", "OutputUpdated"}


@pytest.mark.parametrize(
    "reply",
    [
        act(type="send_message", message="Hi."),
        act(type="decision", content="d"),
        act(type="sleep", delaySeconds=1),
        act(type="spawn_subagent", subagent={"task": "t"}),
    ],
)
def test_planning_gate_does_not_hold_other_commands(reply: str):
    """send_message, decision, sleep and spawning are not gated."""
    story = started()
    decisions = story.say(reply)
    assert "SystemNoteAdded" not in kinds(decisions)


# -- send_message ---------------------------------------------------------------


def test_send_message_after_a_tool_call_continues_the_loop():
    """With no completion rule true, send_message keeps the run going."""
    story = after_tool_call()
    decisions = story.say(act(type="send_message", message="Reading done."))
    assert decisions == [MessageSent(text="Reading done."), asks(story, 5)]


def test_send_message_after_an_output_update_continues_the_loop():
    """An output update also counts as work: send_message continues."""
    story = planned()
    story.say(act(type="set_output", output="draft"))
    decisions = story.say(act(type="send_message", message="Drafted."))
    assert decisions == [MessageSent(text="Drafted."), asks(story, 5)]


def test_send_message_in_a_subagent_always_finishes():
    """A subagent run finishes on its first send_message."""
    story = Story()
    story.when(created(kind="subagent", settings=settings(planning_gate=False)))
    story.say(read())
    story.result("the notes")
    decisions = story.say(act(type="send_message", message="Reading done."))
    assert decisions == [
        MessageSent(text="Reading done."),
        RunCompleted(output="Reading done.", reason="message"),
    ]


def test_send_message_identical_to_the_previous_finishes():
    """Repeating the previous message finishes the run."""
    story = after_tool_call()
    story.say(act(type="send_message", message="Working on it."))
    decisions = story.say(act(type="send_message", message="Working on it."))
    assert decisions == [
        MessageSent(text="Working on it."),
        RunCompleted(output="Working on it.", reason="message"),
    ]


@pytest.mark.parametrize(
    "message",
    [
        "Which file do you mean?",
        "Which file do you mean?  ",
        "Please confirm the path.",
        "Bitte den Pfad bestätigen.",
        "Could you confirm the path.",
        "CAN YOU confirm the path.",
    ],
)
def test_send_message_asking_the_user_finishes(message: str):
    """A question (trailing ?, please/bitte/could you/can you) finishes."""
    story = after_tool_call()
    decisions = story.say(act(type="send_message", message=message))
    assert decisions == [
        MessageSent(text=message),
        RunCompleted(output=message, reason="message"),
    ]


def test_send_message_without_any_work_finishes():
    """No tool calls, no output updates and no output → send_message finishes."""
    story = planned()
    decisions = story.say(act(type="send_message", message="Hello."))
    assert decisions == [
        MessageSent(text="Hello."),
        RunCompleted(output="Hello.", reason="message"),
    ]


def test_send_message_after_a_failed_tool_finishes():
    """Once any tool failed, send_message finishes the run."""
    story = planned()
    story.say(read())
    story.fail("no such file", retryable=False)
    decisions = story.say(act(type="send_message", message="The file is missing."))
    assert kinds(decisions) == ["MessageSent", "RunCompleted"]


def test_send_message_that_finishes_completes_with_the_output_buffer():
    """A finishing send_message completes with the buffer when there is one."""
    story = planned()
    story.say(act(type="set_output", output="the report"))
    decisions = story.say(act(type="send_message", message="Anything else?"))
    assert decisions[-1] == RunCompleted(output="the report", reason="message")


# -- invalid replies ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I will read the file now.", "invalid JSON"),
        ("[1, 2]", "one JSON object"),
        ('"finish"', "one JSON object"),
        ('{"content": "x"}', "string `type`"),
        ('{"type": "dance"}', "unknown command type 'dance'"),
        ('{"type": "note", "category": "plan"}', "`note` needs a string `content`"),
        ('{"type": "tool_call", "name": "files.read", "args": [1]}', "`args`"),
        ('{"type": "set_output", "output": "x", "mode": "prepend"}', "`mode`"),
    ],
)
def test_invalid_reply_is_corrected_and_retried(reply: str, problem: str):
    """An invalid reply → SystemNoteAdded(invalid_command) and another try."""
    story = planned()
    decisions = story.say(reply)
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert decisions[0].reason == "invalid_command"
    assert problem in decisions[0].content
    assert decisions[1] == asks(story, 4)


def test_invalid_replies_beyond_max_json_retries_fail_the_run():
    """After max_json_retries corrections the next invalid reply fails the run."""
    story = started()
    story.say("not json")
    decisions = story.say("still not json")
    assert kinds(decisions) == ["RunFailed"]
    assert decisions[0].reason.startswith(
        "the model's reply was not a valid command after 1 retry: invalid JSON"
    )
    assert story.state.status == "failed"


@pytest.mark.parametrize("retries", [0, 2])
def test_max_json_retries_sets_how_many_corrections(retries: int):
    """max_json_retries=N: N corrections, then the run fails."""
    story = started(max_json_retries=retries)
    for _ in range(retries):
        assert kinds(story.say("nope")) == ["SystemNoteAdded", "LlmRequested"]
    decisions = story.say("nope")
    assert kinds(decisions) == ["RunFailed"]
    assert f"after {retries} retr" in decisions[0].reason


@pytest.mark.parametrize(
    "reply",
    [
        '```json\n{"type": "decision", "content": "d"}\n```',
        '```\n{"type": "decision", "content": "d"}\n```',
        '  ```JSON\n{"type": "decision", "content": "d"}```  ',
    ],
)
def test_code_fences_around_json_are_accepted(reply: str):
    """A command wrapped in a Markdown code fence is parsed."""
    story = started()
    decisions = story.say(reply)
    assert decisions == [DecisionRecorded(content="d"), asks(story, 2)]


# -- tool failures --------------------------------------------------------------


def test_retryable_failure_retries_under_a_new_request_id():
    """A retryable failure → attempt 2 under a new id, nothing shown yet."""
    story = planned()
    story.say(read())
    decisions = story.fail("timeout")
    assert decisions == [
        ToolRequested(
            request_id=f"{RUN}/tool/2",
            name="files.read",
            args={"path": "notes.txt"},
            attempt=2,
        )
    ]
    assert "timeout" not in texts(story.prompt().messages)


def test_request_ids_never_repeat_within_a_run():
    """After a retry the next new tool call takes yet another id."""
    story = planned()
    story.say(read("a"))
    story.fail("timeout")
    story.result("contents of a")
    decisions = story.say(read("b"))
    assert decisions == [
        ToolRequested(request_id=f"{RUN}/tool/3", name="files.read", args={"path": "b"})
    ]
    ids = [e.request_id for e in story.log if isinstance(e, ToolRequested)]
    assert ids == [f"{RUN}/tool/1", f"{RUN}/tool/2", f"{RUN}/tool/3"]


def test_exhausted_retries_fail_the_run_naming_the_tool():
    """When max_tool_retries are used up the run fails naming the tool."""
    story = planned()
    story.say(read())
    story.fail("timeout")
    decisions = story.fail("timeout again")
    assert decisions == [
        RunFailed(reason="tool files.read failed after 2 attempt(s): timeout again")
    ]
    assert story.state.status == "failed"


@pytest.mark.parametrize(("spec_retries", "attempts"), [(0, 1), (2, 3)])
def test_tool_max_retries_overrides_the_run_setting(spec_retries: int, attempts: int):
    """A tool spec's max_retries wins over max_tool_retries."""
    flaky = ToolSpec(name="files.read", max_retries=spec_retries)
    story = planned(tools=(flaky,), max_tool_retries=1)
    story.say(read())
    for attempt in range(2, attempts + 1):
        assert story.fail()[0].attempt == attempt
    decisions = story.fail()
    assert decisions == [
        RunFailed(reason=f"tool files.read failed after {attempts} attempt(s): boom")
    ]


def test_max_tool_retries_zero_fails_on_the_first_failure():
    """max_tool_retries=0 means no retry at all."""
    story = planned(max_tool_retries=0)
    story.say(read())
    assert kinds(story.fail()) == ["RunFailed"]


def test_exhausted_retries_without_an_error_message_give_a_clear_reason():
    """A failure without an error text does not put 'None' in the reason."""
    story = planned(max_tool_retries=0)
    story.say(read())
    decisions = story.result("", ok=False, error=None)
    assert decisions == [
        RunFailed(reason="tool files.read failed after 1 attempt(s): unknown error")
    ]


def test_non_retryable_failure_is_shown_and_the_loop_goes_on():
    """A non-retryable failure goes into the transcript; the model decides."""
    story = planned()
    story.say(read())
    decisions = story.fail("permission denied", retryable=False)
    assert decisions == [asks(story, 4)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="user",
        content="[tool_result files.read]\nTool files.read failed: permission denied",
    )


def test_unknown_tool_is_reported_with_the_available_tools():
    """A call to an unknown tool → SystemNoteAdded(tool_error) listing tools."""
    story = planned()
    decisions = story.say(act(type="tool_call", name="web.search", args={}))
    assert decisions == [
        SystemNoteAdded(
            reason="tool_error",
            content="Unknown tool 'web.search'. Available tools: files.delete, "
            "files.read, files.write.",
            tool="web.search",
        ),
        asks(story, 4),
    ]


@pytest.mark.parametrize(
    "request_id", [f"{RUN}/tool/1", f"{RUN}/tool/9"], ids=["duplicate", "unknown"]
)
def test_a_result_for_no_pending_call_is_refused(request_id: str):
    """A duplicate or unknown tool result is refused."""
    story = planned()
    story.say(read())
    story.result("once")
    assert story.refuses(story.tool_result("twice", request_id=request_id))


# -- stalls ---------------------------------------------------------------------


def test_five_replies_without_progress_force_finish():
    """Five replies of notes/decisions only → RunCompleted(reason=stalled),
    saying so in the run's own counts."""
    story = planned()
    story.say(act(type="decision", content="1"))
    story.say(act(type="decision", content="2"))
    decisions = story.say(act(type="decision", content="3"))
    assert decisions == [
        DecisionRecorded(content="3"),
        RunCompleted(
            output="I could not finish this: I stopped after 5 model calls, the "
            "last 5 in a row making no progress (no tool call, message or answer).",
            reason="stalled",
        ),
    ]


def test_before_revision_6_a_stall_said_its_iteration_cap():
    story = planned(revision=5)
    story.say(act(type="decision", content="1"))
    story.say(act(type="decision", content="2"))
    decisions = story.say(act(type="decision", content="3"))
    assert decisions[-1] == RunCompleted(
        output="I could not finish this within 20 steps.", reason="stalled"
    )


def test_stall_limit_is_one_less_than_a_small_iteration_cap():
    """With max_iterations=4 three replies without progress stall the run."""
    story = started(max_iterations=4)
    story.say(REQUIREMENTS)
    story.say(PLAN)
    decisions = story.say(act(type="note", category="risk", content="r"))
    assert kinds(decisions) == ["NoteRecorded", "RunCompleted"]
    assert decisions[-1].reason == "stalled"


def test_stalled_run_finishes_with_the_output_buffer():
    """A stalled run's fallback is the output buffer when there is one."""
    story = planned()
    story.say(act(type="set_output", output="partial"))
    for n in range(4):
        story.say(act(type="decision", content=str(n)))
    decisions = story.say(act(type="decision", content="last"))
    assert decisions[-1] == RunCompleted(output="partial", reason="stalled")


@pytest.mark.parametrize(
    "progress",
    ["tool_call", "set_output", "send_message"],
)
def test_progress_resets_the_stall_count(progress: str):
    """A tool call, output update or sent message resets the stall count."""
    story = planned()
    story.say(act(type="decision", content="a"))
    story.say(act(type="decision", content="b"))  # four without progress
    if progress == "tool_call":
        story.say(read())
        story.result()
    elif progress == "set_output":
        story.say(act(type="set_output", output="x"))
    else:
        story.say(read())
        story.result()
        story.say(act(type="send_message", message="Progress."))
    for n in range(4):
        assert kinds(story.say(act(type="decision", content=str(n))))[-1] == (
            "LlmRequested"
        )
    decisions = story.say(act(type="decision", content="fifth"))
    assert decisions[-1].reason == "stalled"


def test_sleeping_is_not_a_stall():
    """A run that keeps sleeping is woken into a model call, not force-finished."""
    story = started(max_iterations=50)
    for n in range(1, 6):
        story.say(act(type="sleep", delaySeconds=60), at=NOW + n)
        decisions = story.when(WakeDue(timer_id=f"{RUN}/wake/{n}"))
        assert kinds(decisions) == ["RunResumed", "LlmRequested"], f"wake {n}"


# -- the iteration cap ----------------------------------------------------------


def test_iteration_cap_completes_with_the_fallback_sentence():
    """At max_iterations the run completes instead of an N+1th model call."""
    story = started(max_iterations=3, planning_gate=False)
    for _ in range(2):
        story.say(read())
        story.result()
    story.say(read())
    decisions = story.result()
    assert decisions == [
        RunCompleted(
            output="I could not finish this within 3 steps.", reason="max_iterations"
        )
    ]
    assert story.state.iteration == 3


def test_iteration_cap_fallback_is_the_output_buffer():
    """The max_iterations fallback is the output buffer when there is one."""
    story = started(max_iterations=3, planning_gate=False)
    story.say(act(type="set_output", output="draft 1"))
    story.say(act(type="set_output", output="draft 2"))
    decisions = story.say(act(type="send_message", message="Nearly there."))
    assert decisions == [
        MessageSent(text="Nearly there."),
        RunCompleted(output="draft 2", reason="max_iterations"),
    ]


def test_iteration_cap_fallback_is_the_last_message_without_output():
    """Without output the max_iterations fallback is the last message sent."""
    story = started(max_iterations=3, planning_gate=False)
    story.say(read())
    story.result()
    story.say(act(type="send_message", message="Halfway."))
    decisions = story.say(act(type="decision", content="keep going"))
    assert decisions == [
        DecisionRecorded(content="keep going"),
        RunCompleted(output="Halfway.", reason="max_iterations"),
    ]


# -- approvals ------------------------------------------------------------------


def awaiting_approval() -> Story:
    """Given a planned run that asked to call files.delete (needs approval)."""
    story = planned()
    story.say(act(type="tool_call", name="files.delete", args={"path": "x"}))
    return story


def test_tool_needing_approval_asks_a_person_and_waits():
    """A requires_approval tool → ApprovalRequested; the run waits."""
    story = planned()
    decisions = story.say(
        act(type="tool_call", name="files.delete", args={"path": "x"})
    )
    assert decisions == [
        ApprovalRequested(
            request_id=f"{RUN}/tool/1", name="files.delete", args={"path": "x"}
        )
    ]
    assert story.state.status == "waiting"


def test_approved_call_resumes_and_runs_under_the_same_id():
    """ApprovalDecided(approved) → RunResumed + ToolRequested, same id."""
    story = awaiting_approval()
    decisions = story.when(ApprovalDecided(request_id=f"{RUN}/tool/1", approved=True))
    assert decisions == [
        RunResumed(reason="approved"),
        ToolRequested(
            request_id=f"{RUN}/tool/1", name="files.delete", args={"path": "x"}
        ),
    ]
    assert story.result("deleted") == [asks(story, 4)]
    assert story.say(read())[0].request_id == f"{RUN}/tool/2"


def test_denied_call_resumes_and_tells_the_model_why():
    """ApprovalDecided(denied) → RunResumed + next call; the reason is shown."""
    story = awaiting_approval()
    decisions = story.when(
        ApprovalDecided(request_id=f"{RUN}/tool/1", approved=False, reason="too risky")
    )
    assert decisions == [RunResumed(reason="denied"), asks(story, 4)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="user",
        content="[tool_result files.delete]\n"
        "A person denied the call to files.delete: too risky",
    )


def test_approval_for_an_unknown_request_is_refused():
    """An ApprovalDecided for no pending approval is refused."""
    story = awaiting_approval()
    assert story.refuses(ApprovalDecided(request_id=f"{RUN}/tool/7", approved=True))


def test_approval_is_decided_once():
    """A second ApprovalDecided for the same request is refused."""
    story = awaiting_approval()
    story.when(ApprovalDecided(request_id=f"{RUN}/tool/1", approved=True))
    assert story.refuses(ApprovalDecided(request_id=f"{RUN}/tool/1", approved=False))


# -- subagents ------------------------------------------------------------------


def waiting_on_two() -> Story:
    """Given a run waiting on children <run>-1 and <run>-2."""
    story = started()
    story.say(act(type="spawn_subagents", subagents=["find a", "find b"]))
    return story


def test_a_child_finishing_while_others_run_is_accepted_without_decisions():
    """ChildFinished for one of two children → accepted, no decisions."""
    story = waiting_on_two()
    assert story.when(finished(f"{RUN}-1", "A")) == []
    assert story.state.status == "waiting"
    assert story.state.children == (f"{RUN}-2",)


def test_the_last_child_finishing_resumes_with_all_results():
    """The last ChildFinished → RunResumed + next call showing the results."""
    story = waiting_on_two()
    story.when(finished(f"{RUN}-1", "found A"))
    decisions = story.when(finished(f"{RUN}-2", "found B"))
    assert decisions == [RunResumed(reason="subagents finished"), asks(story, 2)]
    assert story.prompt().messages[-1] == ChatMessage(
        role="user",
        content=f"[subagents]\n- {RUN}-1 (completed): found A\n"
        f"- {RUN}-2 (completed): found B",
    )


@pytest.mark.parametrize("child", [f"{RUN}-9", "other-1"])
def test_a_result_for_an_unknown_child_is_refused(child: str):
    """A ChildFinished for a child this run is not waiting on is refused."""
    story = waiting_on_two()
    assert story.refuses(finished(child))


def test_a_child_finishes_once():
    """A second ChildFinished for the same child is refused."""
    story = waiting_on_two()
    story.when(finished(f"{RUN}-1"))
    assert story.refuses(finished(f"{RUN}-1"))


def parent(**overrides: Any) -> RunCreated:
    """A coordinator's RunCreated with a long conversation and identity fields."""
    history = tuple(
        ChatMessage(role="user" if n % 2 else "assistant", content=f"m{n}")
        for n in range(1, 51)
    )
    fields: dict[str, Any] = {
        "conversation": history,
        "agent_id": "agent",
        "channel_id": "chan",
        "user_id": "user",
        "context_id": "ctx",
        "profile": "coordinator",
    }
    return created(**{**fields, **overrides})


def test_child_created_copies_identity_and_links_parent_and_root():
    """A child inherits identity and settings, and points to parent and root."""
    spec = SubagentSpec(run_id=f"{RUN}-1", input_text="find a")
    child = run_actor.child_created(parent(), spec, at=NOW)
    assert child.kind == "subagent"
    assert child.run_id == f"{RUN}-1"
    assert child.input_text == "find a"
    assert child.settings == settings()
    assert (child.agent_id, child.channel_id, child.user_id, child.context_id) == (
        "agent",
        "chan",
        "user",
        "ctx",
    )
    assert (child.parent_run_id, child.root_run_id) == (RUN, RUN)
    assert child.profile == "coordinator"
    assert child.at == NOW


def test_grandchild_keeps_the_root():
    """A child of a child points its root at the original run."""
    spec = SubagentSpec(run_id=f"{RUN}-1-1", input_text="t", profile="reader")
    grandchild = run_actor.child_created(
        parent(run_id=f"{RUN}-1", root_run_id=RUN), spec, at=NOW
    )
    assert (grandchild.parent_run_id, grandchild.root_run_id) == (f"{RUN}-1", RUN)
    assert grandchild.profile == "reader"


def test_child_conversation_is_limited_and_ends_with_its_task():
    """A child sees the last subagent_conversation_limit messages, then its task."""
    spec = SubagentSpec(run_id=f"{RUN}-1", input_text="find a")
    child = run_actor.child_created(parent(), spec, at=NOW)
    assert [m.content for m in child.conversation] == [
        *(f"m{n}" for n in range(11, 51)),
        "find a",
    ]
    assert child.conversation[-1].role == "user"


def test_child_conversation_limit_zero_gives_only_the_task():
    """With subagent_conversation_limit=0 a child sees only its task."""
    spec = SubagentSpec(run_id=f"{RUN}-1", input_text="find a")
    child = run_actor.child_created(
        parent(settings=settings(subagent_conversation_limit=0)), spec, at=NOW
    )
    assert child.conversation == (ChatMessage(role="user", content="find a"),)


def test_child_of_a_run_without_conversation_sees_the_users_request():
    """A child's history is the parent's effective conversation (its input)."""
    spec = SubagentSpec(run_id=f"{RUN}-1", input_text="find a")
    child = run_actor.child_created(created(), spec, at=NOW)
    assert child.conversation == (
        ChatMessage(role="user", content="Summarize notes.txt"),
        ChatMessage(role="user", content="find a"),
    )


def test_child_tools_are_filtered_to_its_allowed_tools():
    """allowed_tools keeps only those tools in the child's settings."""
    spec = SubagentSpec(
        run_id=f"{RUN}-1", input_text="t", allowed_tools=("files.read", "web.x")
    )
    child = run_actor.child_created(parent(), spec, at=NOW)
    assert child.settings.tools == (READ,)
    assert child.allowed_tools == ("files.read", "web.x")
    assert child.settings.max_iterations == settings().max_iterations


def test_child_without_allowed_tools_keeps_every_tool():
    """No allowed_tools → the child has the parent's tools."""
    spec = SubagentSpec(run_id=f"{RUN}-1", input_text="t")
    child = run_actor.child_created(parent(), spec, at=NOW)
    assert child.settings.tools == settings().tools
    assert child.allowed_tools is None


# -- sleep and wake -------------------------------------------------------------


def sleeping() -> Story:
    """Given a run sleeping on timer <run>/wake/1."""
    story = started()
    story.say(act(type="sleep", delaySeconds=60), at=NOW)
    return story


def test_wake_with_the_armed_timer_resumes_and_asks_the_model():
    """WakeDue(armed timer) → RunResumed(wake) + the next model call."""
    story = sleeping()
    decisions = story.when(WakeDue(timer_id=f"{RUN}/wake/1", at=NOW + 60))
    assert decisions == [RunResumed(reason="wake"), asks(story, 2)]
    assert (story.state.timer_id, story.state.wake_at) == (None, None)


@pytest.mark.parametrize("timer_id", [f"{RUN}/wake/0", f"{RUN}/wake/2", "x"])
def test_wake_with_a_stale_timer_is_refused(timer_id: str):
    """A WakeDue for a timer that is not armed is refused."""
    story = sleeping()
    assert story.refuses(WakeDue(timer_id=timer_id))


def test_a_timer_wakes_the_run_once():
    """A second WakeDue for the same timer is refused; a new sleep gets a new id."""
    story = sleeping()
    story.when(WakeDue(timer_id=f"{RUN}/wake/1"))
    assert story.refuses(WakeDue(timer_id=f"{RUN}/wake/1"))
    decisions = story.say(act(type="sleep", delaySeconds=5), at=NOW + 100)
    assert decisions == [RunSlept(timer_id=f"{RUN}/wake/2", wake_at=NOW + 105)]


# -- queued runs ----------------------------------------------------------------


def test_a_queued_run_is_pending_until_a_host_takes_it():
    """A queued RunCreated decides nothing; RunTaken starts the run, once."""
    story = Story()
    assert story.when(created(queued=True)) == []
    assert story.state.status == "pending"
    assert story.state.llm_pending is None
    decisions = story.when(RunTaken(at=1_700_000_001.0))
    assert decisions == [RunStarted(), asks(story, 1)]
    assert story.state.status == "running"
    assert story.refuses(RunTaken())  # a second host's take


def test_a_queued_run_cancelled_before_a_host_takes_it_is_never_taken():
    """CancelRequested ends a pending queued run; a later RunTaken is refused."""
    story = Story()
    story.when(created(queued=True))
    assert story.when(CancelRequested()) == [
        RunCancelled(reason="cancelled by operator")
    ]
    assert story.refuses(RunTaken())


def test_a_run_started_at_once_refuses_a_take():
    """An unqueued run (as every run before `queued`) starts at once; RunTaken
    is refused."""
    story = started()
    assert story.state.status == "running"
    assert story.refuses(RunTaken())


# -- cancel ---------------------------------------------------------------------


def test_cancel_a_running_run():
    """CancelRequested while running → RunCancelled without children."""
    story = started()
    decisions = story.when(CancelRequested(reason="user hit stop"))
    assert decisions == [RunCancelled(reason="user hit stop")]
    assert story.state.status == "cancelled"


def test_cancel_a_waiting_run_lists_its_pending_children():
    """CancelRequested while waiting → RunCancelled naming unfinished children."""
    story = waiting_on_two()
    story.when(finished(f"{RUN}-1"))
    decisions = story.when(CancelRequested())
    assert decisions == [
        RunCancelled(reason="cancelled by operator", children=(f"{RUN}-2",))
    ]


@pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
def test_cancel_a_finished_run_is_refused(end: str):
    """A terminal run refuses CancelRequested."""
    story = planned()
    if end == "completed":
        story.say(act(type="finish", output="x"))
    elif end == "failed":
        story.when(LlmFailed(request_id=story.llm, kind="k", message="m"))
    else:
        story.when(CancelRequested())
    assert story.state.status == end
    assert story.refuses(CancelRequested())


def test_a_late_reply_after_cancel_is_refused():
    """A model reply arriving after the run was cancelled is refused."""
    story = started()
    pending = story.llm
    story.when(CancelRequested())
    assert story.refuses(LlmResponded(request_id=pending, text=REQUIREMENTS))


def test_a_late_tool_result_after_cancel_is_refused():
    """A tool result arriving after the run was cancelled is refused."""
    story = planned()
    story.say(read())
    story.when(CancelRequested())
    assert story.refuses(story.tool_result("late", request_id=f"{RUN}/tool/1"))


@pytest.mark.parametrize(
    "request_id", [f"{RUN}/llm/1", f"{RUN}/llm/3"], ids=["answered", "future"]
)
def test_a_reply_to_a_request_not_pending_is_refused(request_id: str):
    """A duplicate (already answered) or unknown LlmResponded is refused."""
    story = started()
    story.say(REQUIREMENTS)
    assert story.refuses(LlmResponded(request_id=request_id, text=PLAN))


# -- model failures -------------------------------------------------------------


def test_llm_failure_fails_the_run_with_kind_and_message():
    """LlmFailed → RunFailed naming the kind and the message."""
    story = started()
    decisions = story.when(
        LlmFailed(request_id=f"{RUN}/llm/1", kind="rate_limit", message="slow down")
    )
    assert decisions == [RunFailed(reason="model call failed: rate_limit: slow down")]


def test_llm_failure_for_another_request_is_refused():
    """An LlmFailed for a request that is not pending is refused."""
    story = started()
    assert story.refuses(LlmFailed(request_id="x", kind="k", message="m"))


# -- the prompt -----------------------------------------------------------------


def test_prompt_system_has_the_system_prompt_protocol_and_tools():
    """The system text is the system prompt, the JSON protocol, then the tools."""
    story = started(system_prompt="You are Clifford.", temperature=0.2, max_tokens=99)
    prompt = story.prompt()
    assert prompt.system.startswith("You are Clifford.\n\n" + run_actor.JSON_PROTOCOL)
    assert prompt.system.endswith(
        "\n\nTools:\n"
        '- files.read: Read a file parameters: {"type":"object","properties":'
        '{"path":{"type":"string"}}}\n'
        "- files.write: Write a file parameters: {}\n"
        "- files.delete:  parameters: {}"
    )
    assert (prompt.protocol, prompt.tools) == ("json", ())
    assert (prompt.model, prompt.temperature, prompt.max_tokens) == (
        "scripted",
        0.2,
        99,
    )


def test_prompt_without_tools_has_no_tool_listing():
    """A run without tools gets the protocol but no Tools section."""
    story = started(tools=())
    assert story.prompt().system == run_actor.JSON_PROTOCOL


def test_prompt_messages_are_the_conversation_then_the_transcript():
    """Messages: the conversation first, then the run's transcript."""
    history = (
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="hello"),
        ChatMessage(role="user", content="Summarize notes.txt"),
    )
    story = Story()
    story.when(created(conversation=history))
    story.say(REQUIREMENTS)
    assert story.prompt().messages == (
        *history,
        ChatMessage(role="assistant", content=REQUIREMENTS),
    )


def test_transcript_limit_keeps_the_newest_entries():
    """transcript_limit=N shows only the newest N transcript entries."""
    story = started(transcript_limit=3)
    for n in range(4):
        story.say(act(type="decision", content=f"d{n}"))
    messages = story.prompt().messages
    assert [m.content for m in messages] == [
        "Summarize notes.txt",
        act(type="decision", content="d1"),
        act(type="decision", content="d2"),
        act(type="decision", content="d3"),
    ]


def test_transcript_token_limit_keeps_the_newest_entries_that_fit():
    """The token window (chars/4 + 1 each) keeps the newest entries that fit."""
    story = planned(transcript_token_limit=60)
    story.say(read())
    story.result("x" * 100)  # 125 characters: 32 tokens
    story.say(read())  # 71 characters: 18 tokens
    story.result("y" * 100)
    assert story.prompt().messages[1:] == (
        ChatMessage(role="assistant", content=read()),
        ChatMessage(role="user", content="[tool_result files.read]\n" + "y" * 100),
    )


def test_transcript_newest_entry_is_always_kept():
    """A newest entry larger than the whole token budget is still shown."""
    story = planned(transcript_token_limit=10)
    story.say(read())
    story.result("z" * 1000)
    assert story.prompt().messages[1:] == (
        ChatMessage(role="user", content="[tool_result files.read]\n" + "z" * 1000),
    )


def test_transcript_limit_zero_shows_at_most_the_newest_entry():
    """transcript_limit=0 does not turn the limit off."""
    story = started(transcript_limit=0)
    for n in range(3):
        story.say(act(type="decision", content=f"d{n}"))
    assert len(story.prompt().messages) <= 2


def test_prompt_hash_is_the_hash_of_the_prompt_after_the_commit():
    """LlmRequested.prompt_hash = hash(build_prompt(state after input+decisions))."""
    story = planned()
    story.say(read())
    decisions = story.result("contents")
    (request,) = decisions
    state_after_commit = run_state.fold(story.log)
    assert request.prompt_hash == prompt_hash(
        run_actor.build_prompt(state_after_commit)
    )
    before = run_state.fold(story.log[:-2])
    assert request.prompt_hash != prompt_hash(run_actor.build_prompt(before))


def test_decide_and_fold_hands_over_the_prompt_it_hashed():
    """The host sends the prompt the decider built and hashed, and caches the
    state it folded: both equal what folding and building again give."""
    story = planned()
    reply = LlmResponded(request_id=story.llm, text=act(type="decision", content="d"))
    decided = run_actor.decide_and_fold(reply, story.state)
    assert decided is not None
    decisions, after, prompt = decided
    assert after == run_state.fold([reply, *decisions], story.state)
    assert prompt is not None and prompt == run_actor.build_prompt(after)
    assert isinstance(decisions[-1], LlmRequested)
    assert decisions[-1].prompt_hash == prompt_hash(prompt)
    # no model call requested: no prompt
    finish = LlmResponded(request_id=story.llm, text=act(type="finish", output="x"))
    decided = run_actor.decide_and_fold(finish, story.state)
    assert decided is not None and decided[2] is None


def _prompt(**changes: Any) -> Prompt:
    """A prompt made of new objects each time (the hash memo must not matter)."""
    fields: dict[str, Any] = {
        "model": "m",
        "system": "".join(["sys", "tem"]),
        "messages": tuple(
            ChatMessage(role="user" if n % 2 else "assistant", content=f"message {n}")
            for n in range(4)
        ),
    }
    return Prompt(**{**fields, **changes})


def test_prompt_hash_depends_on_every_part_and_nothing_else():
    """A prompt's hash changes with each of its parts, and with nothing else."""
    cache = PromptCache()
    same = prompt_hash(_prompt(), cache)
    assert prompt_hash(_prompt(), cache) == same
    assert prompt_hash(_prompt()) == same  # computed afresh: the same
    messages = _prompt().messages
    variants = [
        _prompt(model="n"),
        _prompt(system="system!"),
        _prompt(temperature=0.5),
        _prompt(max_tokens=10),
        _prompt(protocol="native"),
        _prompt(tools=(ToolSpec(name="t", description="d", parameters={}),)),
        _prompt(messages=messages[:-1]),
        _prompt(messages=(*messages[:2], messages[3], messages[2])),
        _prompt(messages=(*messages[:3], ChatMessage(role="user", content="other"))),
        _prompt(messages=(*messages[:3], replace(messages[3], role="assistant"))),
    ]
    hashes = {prompt_hash(v, cache) for v in variants}
    assert same not in hashes and len(hashes) == len(variants)


def test_prompt_hash_tells_equal_values_that_encode_apart():
    """Tools, tool call arguments and settings that are equal but encode
    apart (``1 == 1.0 == True``, ``0.0 == -0.0``) hash as afresh, whichever
    the memo met first: it finds by encoding what equality cannot tell."""
    cache = PromptCache()

    def tool(limit: object) -> ToolSpec:
        return ToolSpec(name="t", parameters={"minimum": limit})

    def asked(n: object) -> ChatMessage:
        call = ToolCall(id="c", name="t", args={"n": n})
        return ChatMessage(role="assistant", content="", tool_calls=(call,))

    for value in (1, 1.0, True):
        prompt = _prompt(
            tools=(tool(value),), protocol="native", messages=(asked(value),)
        )
        assert prompt_hash(prompt, cache) == _hash_afresh(prompt)
    for temperature in (0.0, -0.0, 0):
        prompt = _prompt(temperature=temperature)
        assert prompt_hash(prompt, cache) == _hash_afresh(prompt)


@hypothesis.settings(max_examples=200, database=None)
@hypothesis.given(
    texts=st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=12),
    known=st.sets(st.integers(0, 11)),
    calls=st.sets(st.integers(0, 11)),
)
def test_prompt_hash_is_the_same_whatever_the_memo_holds(
    texts: list[str], known: set[int], calls: set[int]
):
    """Messages digested before (anywhere in the window), repeated ones, ones
    memoized by their encoding (tool call arguments cannot be hashed), and
    equal messages that are other objects all hash as afresh."""

    def message(n: int, text: str) -> ChatMessage:
        if n not in calls:
            return ChatMessage(role="user", content=text)
        call = ToolCall(id="c", name="t", args={"x": [n, text]})
        return ChatMessage(role="assistant", content=text, tool_calls=(call,))

    prompt = _prompt(messages=tuple(message(n, t) for n, t in enumerate(texts)))
    fresh = prompt_hash(prompt)
    cache = PromptCache()
    for n in sorted(known):
        if n < len(texts):
            cache.message_digest(prompt.messages[n])
    assert prompt_hash(prompt, cache) == fresh
    assert prompt_hash(prompt, cache) == fresh  # and again, everything memoized
    # equal messages that are other objects (as when read back from the log)
    again = _prompt(messages=tuple(message(n, t) for n, t in enumerate(texts)))
    assert prompt_hash(again, cache) == fresh


def _hash_afresh(prompt: Prompt) -> str:
    """The prompt hash computed from its definition, with no memo at all."""
    encode = msgspec.msgpack.Encoder(order="deterministic").encode
    head = replace(prompt, messages=())
    whole = hashlib.blake2b(
        hashlib.blake2b(encode(head), digest_size=16).digest(), digest_size=16
    )
    for message in prompt.messages:
        whole.update(hashlib.blake2b(encode(message), digest_size=16).digest())
    return prompt_module.HASH_PREFIX + whole.hexdigest()


@hypothesis.settings(max_examples=300, database=None)
@hypothesis.given(
    conversation=st.integers(0, 3),
    window=st.integers(1, 12),
    steps=st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from(["a", "b", "c"])),
        min_size=1,
        max_size=25,
    ),
    calls=st.sets(st.integers(0, 60)),
)
def test_prompt_hash_of_a_growing_sliding_window_is_the_hash_afresh(
    conversation: int,
    window: int,
    steps: list[tuple[int, str]],
    calls: set[int],
):
    """Prompts made as a run makes them (the conversation, then the newest
    transcript messages within a limit; one to four added a step, equal
    texts repeating, some with tool calls) hash as afresh, though each
    reuses the digests the cache kept of the one before."""
    prefix = tuple(
        ChatMessage(role="user", content=f"ask {n}") for n in range(conversation)
    )
    transcript: list[ChatMessage] = []
    cache = PromptCache()
    for added, text in steps:
        for _ in range(added):
            n = len(transcript)
            call = ToolCall(id="c", name="t", args={"n": n}) if n in calls else None
            transcript.append(
                ChatMessage(
                    role="assistant", content=text, tool_calls=(call,) if call else ()
                )
            )
        prompt = _prompt(messages=(*prefix, *transcript[-window:]))
        assert prompt_hash(prompt, cache) == _hash_afresh(prompt)


def test_the_hash_memos_keep_no_message_past_their_byte_budget():
    """Past the memos' byte budget the digested messages are forgotten;
    hashes stay the same."""
    cache = PromptCache(memo_bytes=200)
    small = _prompt(messages=(ChatMessage(role="user", content="hi"),))
    assert prompt_hash(small, cache) == _hash_afresh(small)
    assert small.messages[0] in cache._messages  # within the budget
    big = _prompt(messages=(ChatMessage(role="user", content="x" * 500),))
    assert prompt_hash(big, cache) == _hash_afresh(big)
    assert list(cache._messages) == [big.messages[0]]  # the earlier forgotten


def test_first_kind_hashes_still_verify():
    """A log written when a prompt hash was the hash of the whole prompt
    verifies; a wrong hash of that kind is still caught."""
    records = invalid_story().records()
    requests = [r for r in records if isinstance(r.event, LlmRequested)]
    assert len(requests) >= 2
    old = []
    for r in records:
        if isinstance(r.event, LlmRequested):
            state = run_state.fold(x.event for x in records if x.version <= r.version)
            legacy = first_kind_hash(run_actor.build_prompt(state))
            r = replace(r, event=replace(r.event, prompt_hash=legacy))
        old.append(r)
    assert replay.verify(old, kinds=KINDS) is None
    wrong = [
        replace(r, event=replace(r.event, prompt_hash="0" * 32))
        if r.version == requests[1].version
        else r
        for r in old
    ]
    mismatch = replay.verify(wrong, kinds=KINDS)
    assert mismatch is not None and mismatch.version < requests[1].version


# -- replay ---------------------------------------------------------------------


def approval_story() -> Story:
    """A run: denied approval, a retried tool call, then finish."""
    story = awaiting_approval()
    story.when(ApprovalDecided(request_id=f"{RUN}/tool/1", approved=False, reason="no"))
    story.say(read())
    story.fail("timeout")
    story.result("contents")
    story.say(act(type="finish", output="done"))
    return story


def subagent_story() -> Story:
    """A run: two children, a cron sleep, a wake, then a question."""
    story = waiting_on_two()
    story.when(finished(f"{RUN}-2", "B"))
    story.when(finished(f"{RUN}-1", "A"))
    story.say(act(type="sleep", cron="*/5 * * * *"), at=NOW)
    story.when(WakeDue(timer_id=f"{RUN}/wake/1"))
    story.say(act(type="send_message", message="Done?"))
    return story


def invalid_story() -> Story:
    """A run failed by invalid replies, with a planning-gate note between."""
    story = started()
    story.say("not json")
    story.say(read())
    story.say("still not json")
    return story


def stalled_story() -> Story:
    """A run force-finished after five replies without progress."""
    story = planned()
    for n in range(3):
        story.say(act(type="decision", content=str(n)))
    return story


def cancelled_story() -> Story:
    """A run cancelled while one of its two children still runs."""
    story = waiting_on_two()
    story.when(finished(f"{RUN}-1"))
    story.when(CancelRequested())
    return story


SCENARIOS = {
    "approval-retry": approval_story,
    "subagents-sleep": subagent_story,
    "invalid-json": invalid_story,
    "stalled": stalled_story,
    "cancelled": cancelled_story,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay_verifies_a_recorded_run(scenario: str):
    """Re-deciding a recorded run gives back exactly its recorded decisions."""
    story = SCENARIOS[scenario]()
    assert story.state.status in {"completed", "failed", "cancelled"}
    records = story.records()
    assert replay.verify(records, kinds=KINDS) is None
    assert replay.rebuild(records, kinds=KINDS) == story.state


def test_replay_reports_the_first_changed_decision():
    """A decider that now decides differently is caught at that input."""
    story = approval_story()
    records = story.records()

    def changed(input: Event, state: run_state.Run) -> list[Event] | None:
        decisions = run_actor.decide(input, state)
        if isinstance(input, ToolResulted) and decisions:
            return [
                replace(d, attempt=9) if isinstance(d, ToolRequested) else d
                for d in decisions
            ]
        return decisions

    mismatch = replay.verify(records, decide=changed, kinds=KINDS)
    assert mismatch is not None
    failure = next(
        r for r in records if isinstance(r.event, ToolResulted) and not r.event.ok
    )
    assert mismatch.version == failure.version
    assert mismatch.input == failure.event
    assert mismatch.problem == "the decider now decides differently"
    retry = ToolRequested(
        request_id=f"{RUN}/tool/3",
        name="files.read",
        args={"path": "notes.txt"},
        attempt=2,
    )
    assert mismatch.recorded == (retry,)
    assert mismatch.decided == (replace(retry, attempt=9),)


def test_replay_reports_an_input_the_decider_now_refuses():
    """A decider that now refuses a recorded input is caught at that input."""
    story = subagent_story()
    records = story.records()

    def refuses_wakes(input: Event, state: run_state.Run) -> list[Event] | None:
        return None if isinstance(input, WakeDue) else run_actor.decide(input, state)

    mismatch = replay.verify(records, decide=refuses_wakes, kinds=KINDS)
    assert mismatch is not None
    wake = next(r for r in records if isinstance(r.event, WakeDue))
    assert (mismatch.version, mismatch.decided) == (wake.version, None)
    assert mismatch.problem == "the decider now refuses this recorded input"


def test_replay_reports_a_changed_prompt_hash():
    """A decider whose model request hashes another prompt is caught."""
    story = invalid_story()
    records = story.records()

    def changed(input: Event, state: run_state.Run) -> list[Event] | None:
        decisions = run_actor.decide(input, state)
        return [
            replace(d, prompt_hash="0" * 32)
            if isinstance(d, LlmRequested) and d.iteration == 2
            else d
            for d in decisions or []
        ]

    mismatch = replay.verify(records, decide=changed, kinds=KINDS)
    assert mismatch is not None
    assert mismatch.version == 4  # the first reply: "not json"


# -- properties -----------------------------------------------------------------

REPLIES = [
    REQUIREMENTS,
    PLAN,
    act(type="decision", content="d"),
    read(),
    act(type="tool_call", name="files.delete", args={}),
    act(type="tool_call", name="web.search", args={}),
    act(type="set_output", output="o"),
    act(type="set_output", output="+", mode="append"),
    act(type="send_message", message="Working."),
    act(type="send_message", message="Which one?"),
    act(type="finish"),
    act(type="spawn_subagents", subagents=["a", "b"]),
    act(type="sleep", delaySeconds=5),
    "not json",
]
NATIVE_CALLS = [
    (),
    (READ_CALL := ToolCall(id="c-read", name="files.read", args={}),),
    (ToolCall(id="c-del", name="files.delete", args={}), READ_CALL),
    (ToolCall(id="c-web", name="web.search", args={}),),
]


def _possible_inputs(story: Story) -> list[Event]:
    """Every input the run would accept now, plus a cancel."""
    state = story.state
    inputs: list[Event] = [CancelRequested()]
    if state.llm_pending is not None:
        rid = state.llm_pending
        if state.settings.protocol == "native":
            inputs += [
                LlmResponded(request_id=rid, text="t", tool_calls=calls)
                for calls in NATIVE_CALLS
            ]
        else:
            inputs += [LlmResponded(request_id=rid, text=r) for r in REPLIES]
        inputs.append(LlmFailed(request_id=rid, kind="k", message="m"))
    for call in state.calls:
        inputs += [
            story.tool_result(request_id=call.request_id),
            story.tool_result(request_id=call.request_id, ok=False, error="e"),
            story.tool_result(
                request_id=call.request_id, ok=False, error="e", retryable=False
            ),
        ]
    for pending in state.approvals:
        inputs += [
            ApprovalDecided(request_id=pending.request_id, approved=True),
            ApprovalDecided(request_id=pending.request_id, approved=False),
        ]
    inputs += [finished(child) for child in state.children]
    if state.timer_id is not None:
        inputs.append(WakeDue(timer_id=state.timer_id))
    return inputs


@hypothesis.settings(max_examples=100, deadline=None, database=None)
@hypothesis.given(data=st.data())
def test_any_run_replays_and_never_reuses_an_id(data: st.DataObject):
    """Every run ends or waits on something, replays, and never repeats an id."""
    story = started(
        protocol=data.draw(st.sampled_from(["json", "native"])),
        planning_gate=data.draw(st.booleans()),
        max_iterations=data.draw(st.sampled_from([3, 6, 20])),
    )
    while story.state.status not in {"completed", "failed", "cancelled"}:
        inputs = _possible_inputs(story)
        assert len(inputs) > 1, f"stuck in {story.state.status}: {story.log[-3:]}"
        if len(story.log) > 80:
            inputs = [CancelRequested()]
        story.when(data.draw(st.sampled_from(inputs)))
    records = story.records()
    assert replay.verify(records, kinds=KINDS) is None
    assert replay.rebuild(records, kinds=KINDS) == story.state
    requests = [e for e in story.log if isinstance(e, LlmRequested)]
    assert len({r.request_id for r in requests}) == len(requests)
    asked = [e.request_id for e in story.log if isinstance(e, ApprovalRequested)]
    approved = {
        e.request_id for e in story.log if isinstance(e, ApprovalDecided) and e.approved
    }
    tool_ids = [e.request_id for e in story.log if isinstance(e, ToolRequested)]
    assert len(set(tool_ids)) == len(tool_ids)
    assert len(set(asked)) == len(asked)
    # an approved call runs under the id its approval took; no other id is shared
    assert set(tool_ids) & set(asked) <= approved


def test_an_escaped_lone_surrogate_is_invalid_json_for_an_old_run():
    """A run of revision 0 re-decides a reply with an escaped lone surrogate as
    it was recorded then (invalid JSON, a correction); a new run reads it."""
    reply = '{"type": "send_message", "message": "odd \\ud800"}'
    old = planned(revision=0).say(reply)
    assert kinds(old) == ["SystemNoteAdded", "LlmRequested"]
    assert "invalid JSON" in old[0].content
    new = planned().say(reply)
    assert kinds(new)[0] == "MessageSent" and new[0].text == "odd \ufffd"


def test_json_nested_too_deep_is_invalid_not_a_crash():
    """A reply nested deeper than a parser recurses is an invalid command."""
    decisions = planned().say("[" * 50_000)
    assert kinds(decisions) == ["SystemNoteAdded", "LlmRequested"]
    assert "invalid JSON" in decisions[0].content
