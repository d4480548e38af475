"""A session's subagents and schedules (spec 003: subagent spawning, the
silent logic, scheduled messages), on the decider: time is each input's
``at``, nothing sleeps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from msgspec.structs import replace
from test_session import SETTINGS, Chat

from steward.actors.effects import ArmTimer, Create
from steward.actors.run.events import RunCreated
from steward.actors.run.state import run_stream
from steward.actors.session import state as session_state
from steward.actors.session import tools as session_tools
from steward.actors.session.events import (
    ScheduleAsked,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SubagentAnswered,
    SubagentAsked,
    SubagentStarted,
)
from steward.actors.session.reactor import SESSION_TOOLS, effects, pending, subagent_run
from steward.events import (
    ChatMessage,
    ChildFinished,
    Event,
    Recorded,
    ToolSpec,
    WakeDue,
)

NINE_UTC = datetime(2026, 11, 24, 9, 0, tzinfo=UTC).timestamp()
"""A Tuesday, 09:00 UTC."""


def _spawn(chat: Chat, name: str = "scout", **kw: object) -> list[Event] | None:
    return chat.give(
        SubagentAsked(request_id=f"q-{name}", name=name, task="look around", **kw)
    )


def _finish(chat: Chat, run_id: str, output: str, status: str = "completed"):  # type: ignore[no-untyped-def]
    result = ChildFinished(stream=run_stream(run_id), status=status, output=output)
    return chat.give(result)


def _rec(event: Event) -> Recorded:
    return Recorded(stream="session.cli:c1", version=9, position=9, event=event, at=0.0)


# -- subagents ----------------------------------------------------------------


def test_a_subagent_starts_as_a_run_of_its_own_answering_the_session() -> None:
    chat = Chat()
    [started] = _spawn(chat) or []
    assert started == SubagentStarted(
        run_id="cli:c1-s1", name="scout", task="look around", model="small"
    )
    [create] = effects(_rec(started), chat.state, chat.state)
    assert isinstance(create, Create) and create.stream == "run.cli:c1-s1"
    run = create.input
    assert isinstance(run, RunCreated)
    assert run.kind == "subagent"  # asks with the subagent priority
    assert run.reply_to == "session.cli:c1" and run.context_id == "cli:c1"
    assert pending(_rec(started)).wants[0].key == "spawn:cli:c1-s1"


def test_subagent_gets_an_isolated_context_with_the_subagent_window() -> None:
    tools = tuple(
        ToolSpec(name=n, description=n) for n in ("files.read", *sorted(SESSION_TOOLS))
    )
    chat = Chat(settings=replace(SETTINGS, run=replace(SETTINGS.run, tools=tools)))
    talk = tuple(
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
        for i in range(12)
    )
    chat.state = replace(chat.state, messages=talk)
    [started] = _spawn(chat, model="large") or []
    run = subagent_run(chat.state, started, "session.cli:c1")  # type: ignore[arg-type]
    window = SETTINGS.subagent_window
    # the window, then the task it is to do
    task = ChatMessage(role="user", content="look around")
    assert run.conversation == (*talk[-window:], task)
    assert run.input_text == "look around"
    assert run.settings.model == "m-large"  # its own model
    assert [t.name for t in run.settings.tools] == ["files.read"]


def test_the_tools_a_subagent_goes_without_are_the_session_tools() -> None:
    """`SESSION_TOOLS` (kept beside the pure effects) names exactly the
    tools of `steward.actors.session.tools`."""
    assert {t.name for t in session_tools.TOOLS} == SESSION_TOOLS


def test_a_subagent_of_an_unknown_model_or_without_a_task_is_refused() -> None:
    chat = Chat()
    assert _spawn(chat, model="huge") is None
    assert chat.give(SubagentAsked(request_id="q", name="x", task=" ")) is None
    assert "unknown model 'huge'" in (
        session_state.subagent_problem(chat.state, "x", "t", "huge") or ""
    )


def test_at_most_four_subagents_run_at_once() -> None:
    chat = Chat()
    for n in range(session_state.MAX_SUBAGENTS):
        assert _spawn(chat, name=f"a{n}") is not None
    assert _spawn(chat, name="one-more") is None
    assert "4 subagents run already" in (
        session_state.subagent_problem(chat.state, "x", "t", None) or ""
    )
    _finish(chat, "cli:c1-s1", "done")
    assert _spawn(chat, name="one-more") is not None


# -- 6. the silent logic (SubagentSilentLogicTest) -----------------------------


def _answer(output: str, status: str = "completed") -> tuple[Chat, SubagentAnswered]:
    chat = Chat()
    _spawn(chat)
    [answered] = _finish(chat, "cli:c1-s1", output, status) or []
    assert isinstance(answered, SubagentAnswered)
    return chat, answered


def test_response_with_silent_true_not_sent_to_gateway() -> None:
    chat, answered = _answer('{"silent": true, "note": "nothing new"}')
    assert answered.silent
    assert chat.state.messages == () and chat.state.subagents == ()


def test_response_without_silent_field_sent_to_gateway() -> None:
    chat, answered = _answer('{"message": "rain at noon"}')
    assert not answered.silent
    assert answered.text == '{"message": "rain at noon"}'
    assert chat.state.messages == (
        ChatMessage(role="assistant", content=answered.text),
    )


def test_response_with_silent_false_sent_to_gateway() -> None:
    assert not _answer('{"silent": false}')[1].silent


@pytest.mark.parametrize("text", ["rain at noon", "silent: true", "", "[true]"])
def test_non_json_response_treated_as_not_silent(text: str) -> None:
    assert not _answer(text)[1].silent


@pytest.mark.parametrize(
    "text", ['{"silent": true', '{"silent": "true"}', '{"silent": 1}', "{\ud800}"]
)
def test_parse_failure_treated_as_not_silent(text: str) -> None:
    assert not session_state.is_silent(text)


def test_a_failed_subagent_is_told_to_the_chat() -> None:
    _, answered = _answer('{"silent": true}', status="failed")
    assert not answered.silent and answered.text.startswith("(subagent scout failed")


def test_a_result_of_no_subagent_is_refused() -> None:
    chat = Chat()
    assert _finish(chat, "cli:c1-s9", "hi") is None


# -- schedules ----------------------------------------------------------------


def _schedule(chat: Chat, cron: str | None = "0 9 * * *", **kw: object):  # type: ignore[no-untyped-def]
    fields: dict[str, object] = {"name": "weather", "task": "weather?", **kw}
    return chat.give(
        ScheduleAsked(request_id="q", cron=cron, at=NINE_UTC - 60, **fields)  # type: ignore[arg-type]
    )


def test_a_schedule_arms_its_first_firing_from_its_cron() -> None:
    chat = Chat()
    [created] = _schedule(chat) or []
    assert isinstance(created, ScheduleCreated)
    assert created.schedule.due == NINE_UTC
    assert effects(_rec(created), chat.state, chat.state) == [
        ArmTimer(timer_id="cli:c1/schedule/1", due=NINE_UTC)
    ]
    assert pending(_rec(created)).wants[0].kind == "timer"  # survives a restart


def test_a_firing_starts_a_subagent_and_arms_the_next() -> None:
    chat = Chat()
    _schedule(chat)
    fired, started = chat.give(WakeDue(timer_id="cli:c1/schedule/1", at=NINE_UTC)) or []
    assert fired == ScheduleFired(
        name="weather", timer_id="cli:c1/schedule/2", due=NINE_UTC + 86400
    )
    assert isinstance(started, SubagentStarted)
    assert (started.name, started.task, started.schedule) == (
        "weather",
        "weather?",
        "weather",
    )
    assert effects(_rec(fired), chat.state, chat.state) == [
        ArmTimer(timer_id="cli:c1/schedule/2", due=NINE_UTC + 86400)
    ]


def test_firings_missed_while_no_host_ran_fire_once() -> None:
    chat = Chat()
    _schedule(chat)
    late = WakeDue(timer_id="cli:c1/schedule/1", at=NINE_UTC + 3 * 86400 + 5)
    fired, _ = chat.give(late) or []
    assert isinstance(fired, ScheduleFired) and fired.due == NINE_UTC + 4 * 86400


def test_a_deleted_schedule_fires_to_no_effect() -> None:
    chat = Chat()
    _schedule(chat)
    assert _schedule(chat, cron=None) == [ScheduleDeleted(name="weather")]
    assert chat.state.schedules == ()
    assert chat.give(WakeDue(timer_id="cli:c1/schedule/1", at=NINE_UTC)) == []


def test_a_replaced_schedule_fires_only_on_its_new_timer() -> None:
    chat = Chat()
    _schedule(chat)
    _schedule(chat, cron="30 9 * * *")
    assert [x.timer_id for x in chat.state.schedules] == ["cli:c1/schedule/2"]
    assert chat.give(WakeDue(timer_id="cli:c1/schedule/1", at=NINE_UTC)) == []
    fired = chat.give(WakeDue(timer_id="cli:c1/schedule/2", at=NINE_UTC + 1800))
    assert fired is not None and len(fired) == 2


@pytest.mark.parametrize(
    ("cron", "fields", "reason"),
    [
        ("every morning", {}, "is not a cron expression"),
        ("0 9 * * *", {"task": ""}, "needs a task"),
        ("0 9 * * *", {"model": "huge"}, "unknown model"),
        (None, {"name": "nope"}, "there is no schedule 'nope'"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_reason(
    cron: str | None, fields: dict[str, object], reason: str
) -> None:
    chat = Chat()
    assert _schedule(chat, cron=cron, **fields) is None
    merged = {"name": "weather", "task": "weather?", "model": None, **fields}
    problem = session_state.schedule_problem(
        chat.state,
        str(merged["name"]),
        cron,
        str(merged["task"]),
        merged["model"],  # type: ignore[arg-type]
    )
    assert problem is not None and reason in problem


def test_a_session_holds_at_most_twenty_schedules() -> None:
    chat = Chat()
    for n in range(session_state.MAX_SCHEDULES):
        assert _schedule(chat, name=f"s{n}") is not None
    assert _schedule(chat, name="one-more") is None
    assert _schedule(chat, name="s0", cron="5 9 * * *") is not None  # a replacement
