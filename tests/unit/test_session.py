"""The session decider and its context builder, by the test list of Klaw's
engine spec (spec 003): debounce, context builder, sessions and commands.

Time is the ``at`` of each input (the replaceable clock's reading when the
host stamps it): nothing here sleeps.
"""

from __future__ import annotations

import hypothesis
import msgspec
import pytest
from hypothesis import strategies as st
from msgspec.structs import replace

from steward.actors.effects import ArmTimer, Create
from steward.actors.run.events import RunSettings
from steward.actors.run.state import run_stream
from steward.actors.session import decider as s
from steward.actors.session import state as session_state
from steward.actors.session.context import budget_of, build_context, estimate
from steward.actors.session.events import (
    SESSION_REVISION,
    CommandAnswered,
    ContextCompacted,
    CoreMemorySet,
    DebounceArmed,
    MessageReceived,
    ModelBudget,
    ModelSwitched,
    ReplySent,
    ScheduleAsked,
    SegmentStarted,
    SessionOpened,
    SessionSettings,
    SubagentAsked,
    TurnStarted,
)
from steward.actors.session.reactor import effects, turn_run
from steward.events import (
    ChatMessage,
    ChildFinished,
    Event,
    LlmFailed,
    LlmResponded,
    Recorded,
    ToolSpec,
    WakeDue,
)
from steward.kinds import KINDS

SETTINGS = SessionSettings(
    debounce_seconds=1.5,
    model="small",
    models=(
        ModelBudget(name="small", model="m-small", context_budget=1000),
        ModelBudget(name="large", model="m-large", context_budget=100_000),
    ),
    run=RunSettings(system_prompt="You are steward."),
)
SESSION = KINDS["session"]


class Chat:
    """A session driven input by input, as the host would: each accepted
    input is folded with its decisions."""

    def __init__(
        self,
        settings: SessionSettings = SETTINGS,
        at: float = 1000.0,
        revision: int = 0,
    ):
        self.state = session_state.initial
        self.log: list[Event] = []
        self.n = 0
        self.give(
            SessionOpened(
                session_id="cli:c1",
                channel="cli",
                chat_id="c1",
                settings=settings,
                at=at,
                revision=revision,
            )
        )

    def give(self, input: Event) -> list[Event] | None:
        decided = s.decide(input, self.state)
        if decided is not None:
            self.log += [input, *decided]
            self.state = SESSION.fold([input, *decided], self.state)
        return decided

    def say(self, text: str, at: float, **kw: object) -> list[Event] | None:
        self.n += 1
        return self.give(
            MessageReceived(message_id=f"m{self.n}", text=text, at=at, **kw)
        )

    def wake(self) -> list[Event] | None:
        assert self.state.timer is not None
        return self.give(WakeDue(timer_id=self.state.timer))

    def answer(self, output: str, status: str = "completed") -> list[Event] | None:
        """The turn in flight answered: its run's result, or in a direct chat
        the model call's reply (or failure)."""
        assert self.state.turn is not None
        call = session_state.direct_call(self.state)
        if call is not None and status == "completed":
            return self.give(LlmResponded(request_id=call, text=output))
        if call is not None:
            return self.give(LlmFailed(request_id=call, kind="http", message=output))
        result = ChildFinished(
            stream=run_stream(self.state.turn), status=status, output=output
        )
        return self.give(result)

    def turns(self) -> list[TurnStarted]:
        return [e for e in self.log if isinstance(e, TurnStarted)]


# -- 1. debounce --------------------------------------------------------------


def test_single_message_processed_after_debounce() -> None:
    chat = Chat()
    assert chat.say("hello", at=1001.0) == [
        DebounceArmed(timer_id="cli:c1/debounce/1", due=1002.5)
    ]
    assert chat.turns() == []  # nothing before the timer is due
    [turn] = chat.wake() or []
    assert turn == TurnStarted(run_id="cli:c1-t1", message_ids=("m1",), text="hello")


def test_multiple_messages_from_same_chat_merged() -> None:
    chat = Chat()
    chat.say("hello", at=1001.0)
    chat.say("are you there", at=1001.5)
    chat.wake()
    [turn] = chat.turns()
    assert turn.message_ids == ("m1", "m2")
    assert turn.text == "hello\nare you there"


def test_messages_from_different_chats_processed_independently() -> None:
    one, two = Chat(), Chat()
    one.say("first chat", at=1001.0)
    two.say("second chat", at=1001.2)
    one.wake()
    assert [t.text for t in one.turns()] == ["first chat"]
    assert two.turns() == [] and two.state.buffer[0].text == "second chat"


def test_timer_restarts_on_new_message_before_timeout() -> None:
    chat = Chat()
    chat.say("a", at=1001.0)
    first = chat.state.timer
    chat.say("b", at=1002.0)
    assert chat.log[-1] == DebounceArmed(timer_id="cli:c1/debounce/2", due=1003.5)
    # the superseded timer still fires, and is refused
    assert chat.give(WakeDue(timer_id=str(first))) is None
    assert chat.turns() == []
    chat.wake()
    assert [t.text for t in chat.turns()] == ["a\nb"]


def test_messages_processed_in_order() -> None:
    chat = Chat()
    for i, text in enumerate(["one", "two", "three"]):
        chat.say(text, at=1001.0 + i / 10)
    chat.wake()
    chat.answer("done")
    chat.say("four", at=1010.0)
    chat.wake()
    assert [t.text for t in chat.turns()] == ["one\ntwo\nthree", "four"]
    assert [m.content for m in chat.state.messages] == [
        "one\ntwo\nthree",
        "done",
        "four",
    ]


def test_a_message_during_a_turn_waits_for_its_reply() -> None:
    """The timer comes due while a turn runs: the next turn starts with the
    reply, never beside the turn in flight."""
    chat = Chat()
    chat.say("first", at=1001.0)
    chat.wake()
    chat.say("second", at=1002.0)
    assert chat.wake() == []  # a turn is in flight
    decided = chat.answer("one")
    assert decided is not None and [type(e) for e in decided] == [
        ReplySent,
        TurnStarted,
    ]
    assert [t.text for t in chat.turns()] == ["first", "second"]


def test_a_result_of_no_turn_in_flight_is_refused() -> None:
    chat = Chat()
    stray = ChildFinished(
        stream=run_stream("elsewhere"), status="completed", output="x"
    )
    assert chat.give(stray) is None


# -- 2. context builder -------------------------------------------------------


def _context(**kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "model": "small",
        "system_prompt": "sys",
        "core_memory": "",
        "summary": None,
        "segment": (),
        "pending": "now",
    }
    args.update(kw)
    return build_context(SETTINGS, **args)  # type: ignore[arg-type]


def _talk(n: int, size: int = 8) -> tuple[ChatMessage, ...]:
    return tuple(
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"{i:0{size}d}")
        for i in range(n)
    )


def test_context_includes_system_prompt_core_memory_and_sliding_window() -> None:
    chat = Chat()
    chat.state = chat.state.__class__(
        **{**_fields(chat.state), "core_memory": (("name", "Ada"),)}
    )
    chat.say("hello", at=1001.0)
    chat.wake()
    chat.answer("hi Ada")
    chat.say("again", at=1005.0)
    chat.wake()
    run = turn_run(chat.state, chat.turns()[-1], "session.cli:c1")
    assert run.settings.system_prompt == "You are steward."
    assert run.conversation == (
        ChatMessage(role="system", content="Core memory:\nname: Ada"),
        ChatMessage(role="user", content="hello"),
        ChatMessage(role="assistant", content="hi Ada"),
        ChatMessage(role="user", content="again"),  # what the turn answers
    )
    assert run.input_text == "again" and run.reply_to == "session.cli:c1"
    assert run.settings.model == "m-small"


def _fields(state: session_state.Session) -> dict[str, object]:
    return {f: getattr(state, f) for f in state.__struct_fields__}


def test_sliding_window_respects_context_budget() -> None:
    """A 1000-token budget less 10% leaves 900; each 400-character message
    is 100 tokens, so after the fixed layers only the newest fit."""
    talk = _talk(20, size=400)
    context = _context(segment=talk)
    fixed = estimate("sys") + estimate("now")
    assert context.fixed_tokens == fixed
    assert context.window == (900 - fixed) // 100
    assert context.messages == talk[-context.window :]


def test_sliding_window_only_shows_messages_from_current_segment() -> None:
    chat = Chat()
    chat.say("before", at=1001.0)
    chat.wake()
    chat.answer("old reply")
    chat.say("/new", at=1002.0)
    chat.say("after", at=1003.0)
    chat.wake()
    run = turn_run(chat.state, chat.turns()[-1], "session.cli:c1")
    # nothing from before /new: the turn's own message only
    assert run.conversation == (ChatMessage(role="user", content="after"),)
    assert run.input_text == "after"
    assert any(isinstance(e, SegmentStarted) for e in chat.log)


def test_subagent_uses_subagent_window_instead_of_sliding_window() -> None:
    talk = _talk(30)
    assert _context(segment=talk).window == SETTINGS.sliding_window
    assert _context(segment=talk, subagent=True).window == SETTINGS.subagent_window


def test_ten_percent_safety_margin_applied_to_context_budget() -> None:
    assert budget_of(SETTINGS, "small") == 900
    assert budget_of(SETTINGS, "large") == 90_000
    assert budget_of(SETTINGS, "unknown") == int(SETTINGS.default_budget_tokens * 0.9)


def test_summary_included_when_available() -> None:
    context = _context(summary="we spoke of cats")
    assert context.messages == (
        ChatMessage(role="system", content="Summary so far:\nwe spoke of cats"),
    )
    assert _context().messages == ()


def test_tools_descriptions_included_in_context() -> None:
    """Tool descriptions count against the budget (the run's system prompt
    lists them): more tools leave room for fewer messages."""
    talk = _talk(20, size=400)
    tools = [ToolSpec(name=f"t{i}", description="x" * 400) for i in range(3)]
    without = _context(segment=talk)
    with_tools = _context(segment=talk, tools=tools)
    assert with_tools.fixed_tokens > without.fixed_tokens
    assert with_tools.window < without.window


@hypothesis.given(
    sizes=st.lists(st.integers(0, 3000), max_size=40),
    budget=st.integers(1, 5000),
    window=st.integers(1, 30),
)
def test_the_window_is_the_newest_messages_that_fit(
    sizes: list[int], budget: int, window: int
) -> None:
    settings = SessionSettings(default_budget_tokens=budget, sliding_window=window)
    talk = tuple(ChatMessage(role="user", content="x" * n) for n in sizes)
    context = build_context(
        settings,
        model="default",
        system_prompt="",
        core_memory="",
        summary=None,
        segment=talk,
        pending="",
    )
    shown = context.messages
    assert len(shown) <= window
    assert shown == talk[len(talk) - len(shown) :]  # the newest, in order
    assert sum(estimate(m.content) for m in shown) <= max(0, context.budget)


# -- 4. sessions --------------------------------------------------------------


def test_creates_session_with_the_default_model() -> None:
    chat = Chat()
    assert chat.state.model == "small" and chat.state.session_id == "cli:c1"


def test_returns_existing_session_for_known_chat_id() -> None:
    """A chat's session opens once: opening it again is refused and what it
    holds stays (`open_session` opens only a stream with no events)."""
    chat = Chat()
    chat.say("/model large", at=1001.0)
    before = chat.state
    again = SessionOpened(
        session_id="cli:c1", channel="cli", chat_id="c1", settings=SETTINGS
    )
    assert chat.give(again) is None
    assert chat.state == before and chat.state.model == "large"


def test_a_message_to_a_session_not_open_is_refused() -> None:
    assert (
        s.decide(MessageReceived(message_id="m1", text="hi"), session_state.initial)
        is None
    )


def test_a_message_delivered_again_is_taken_once() -> None:
    """A service's redelivery (the same message id) is refused, whether the
    first was buffered, a command or refused; the newest 256 ids count."""
    chat = Chat()
    for text in ("hi", "/status", " "):
        first = MessageReceived(message_id=f"id-{text}", text=text, at=1001.0)
        assert chat.give(first) is not None
        assert chat.give(first) is None
    assert len(chat.state.buffer) == 1
    for n in range(session_state.SEEN_MESSAGES):
        chat.give(MessageReceived(message_id=f"n{n}", text="/status", at=1002.0))
    assert len(chat.state.seen) == session_state.SEEN_MESSAGES
    again = MessageReceived(message_id="id-hi", text="hi", at=1003.0)
    assert chat.give(again) is not None  # older than the newest 256


def test_update_model_changes_session_model() -> None:
    chat = Chat()
    chat.say("/model large", at=1001.0)
    assert chat.state.model == "large"
    chat.say("hello", at=1002.0)
    chat.wake()
    run = turn_run(chat.state, chat.turns()[-1], "session.cli:c1")
    assert run.settings.model == "m-large"


def test_reset_segment_writes_a_segment_marker() -> None:
    chat = Chat()
    chat.say("/new", at=1001.0)
    assert chat.log[-2] == SegmentStarted(segment=1, at=1001.0)
    assert chat.state.segment == 1 and chat.state.segment_at == 1001.0


def test_new_segment_starts_after_reset() -> None:
    chat = Chat()
    chat.say("old", at=1001.0)
    chat.wake()
    chat.answer("old reply")
    chat.say("/new", at=1002.0)
    assert chat.state.messages == ()
    chat.say("fresh", at=1003.0)
    chat.wake()
    assert [m.content for m in chat.state.messages] == ["fresh"]
    assert any(isinstance(e, ReplySent) and e.text == "old reply" for e in chat.log)


# -- 5. commands --------------------------------------------------------------


def _reply(decided: list[Event] | None) -> str:
    assert decided is not None
    answer = decided[-1]
    assert isinstance(answer, CommandAnswered)
    return answer.reply


def test_slash_new_resets_segment_and_returns_confirmation() -> None:
    chat = Chat()
    reply = _reply(chat.say("/new", at=1001.0))
    assert reply.startswith("Segment 1 started")
    assert chat.turns() == [] and chat.state.timer is None  # no model call


def test_slash_model_without_args_shows_current_model() -> None:
    assert _reply(Chat().say("/model", at=1001.0)) == "model: small"


def test_slash_model_with_valid_model_switches_model() -> None:
    chat = Chat()
    decided = chat.say("/model large", at=1001.0)
    assert decided is not None and decided[0] == ModelSwitched(model="large")
    assert _reply(decided) == "model switched to large"


def test_slash_model_with_invalid_model_returns_error() -> None:
    chat = Chat()
    decided = chat.say("/model huge", at=1001.0)
    assert _reply(decided) == "unknown model 'huge'; configured models: small, large"
    assert decided is not None and len(decided) == 1 and chat.state.model == "small"


def test_slash_models_lists_all_configured_models() -> None:
    assert _reply(Chat().say("/models", at=1001.0)).splitlines() == [
        "small: context budget 1000 tokens (current)",
        "large: context budget 100000 tokens",
    ]


def test_slash_status_returns_uptime_and_session_info() -> None:
    chat = Chat(at=1000.0)
    chat.say("hello", at=1001.0)
    chat.wake()
    lines = _reply(chat.say("/status", at=1000.0 + 3725, llm_waiting=3)).splitlines()
    assert lines == [
        "uptime 1h 2m 5s (open since 1970-01-01T00:16:40.000Z)",
        "model small",
        "segment 0 since 1970-01-01T00:16:40.000Z",
        "model calls waiting 3",
        "turn in flight cli:c1-t1",
    ]


def test_slash_status_gives_the_uptime_of_the_host_that_took_it() -> None:
    """The uptime is the hosting process's (``host_since``, recorded on the
    message); from revision 2 one taken by a process that hosts nothing says
    it does not know (before, the session's age stood in for it)."""
    chat = Chat(at=1000.0, revision=2)
    hosted = _reply(chat.say("/status", at=4000.0, host_since=3940.0, llm_waiting=0))
    assert hosted.splitlines()[0] == (
        "uptime 1m 0s (hosting since 1970-01-01T01:05:40.000Z; the session open "
        "since 1970-01-01T00:16:40.000Z)"
    )
    assert _reply(chat.say("/status", at=4001.0)).splitlines()[0] == (
        "uptime unknown (the process that took this message hosts no model "
        "calls); the session open since 1970-01-01T00:16:40.000Z"
    )


def test_slash_memory_shows_core_memory() -> None:
    chat = Chat()
    assert _reply(chat.say("/memory", at=1001.0)) == "core memory is empty"
    chat.give(CoreMemorySet(request_id="q1", key="name", value="Alex"))
    assert _reply(chat.say("/memory", at=1002.0)) == "name: Alex"


def test_slash_help_lists_every_command() -> None:
    reply = _reply(Chat().say("/help", at=1001.0))
    for command in ("/new", "/model", "/models", "/memory", "/status", "/help"):
        assert f"\n{command}" in reply


def test_an_unknown_command_gets_a_clear_reply() -> None:
    reply = _reply(Chat().say("/frobnicate now", at=1001.0))
    assert reply == (
        "unknown command /frobnicate; commands: "
        "/new, /model, /models, /memory, /status, /help"
    )


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/new", "/new"),
        ("/model\tlarge", "/model"),
        ("/status  ", "/status"),
        ("/", "/"),
        ("/etc/hosts is broken", None),
        ("//comment", None),
        ("say /new", None),
    ],
)
def test_a_command_is_a_slash_and_a_name_from_revision_2(
    text: str, command: str | None
) -> None:
    """From `SessionOpened.revision` 2 a message is a command when it is
    ``/`` and a name without ``/``, then a blank or its end; anything else
    goes to the model (a turn), as ``/etc/hosts is broken`` does."""
    chat = Chat(revision=2)
    decided = chat.say(text, at=1001.0)
    assert decided is not None
    if command is None:
        assert [type(e) for e in decided] == [DebounceArmed]
        assert chat.state.buffer[-1].text == text
    else:
        assert isinstance(decided[-1], CommandAnswered)
        assert decided[-1].command == command
        assert not chat.state.buffer


def test_before_revision_2_any_slash_is_a_command_named_to_the_first_space() -> None:
    """Sessions opened before revision 2 decide as they did: replay of their
    logs gives the recorded answers."""
    chat = Chat(revision=1)
    assert _reply(chat.say("/etc/hosts is broken", at=1001.0)).startswith(
        "unknown command /etc/hosts;"
    )
    assert _reply(chat.say("/model\tlarge", at=1002.0)).startswith(
        "unknown command /model\tlarge;"
    )
    assert _reply(Chat(revision=2).say("/model\tlarge", at=1002.0)) == (
        "model switched to large"
    )


# -- effects and determinism --------------------------------------------------


def test_a_turn_asks_for_its_run_and_a_message_for_its_timer() -> None:
    chat = Chat()
    chat.say("hello", at=1001.0)
    armed = Recorded(
        stream="session.cli:c1", version=3, position=3, event=chat.log[-1], at=1001.0
    )
    assert effects(armed, chat.state, chat.state) == [
        ArmTimer(timer_id="cli:c1/debounce/1", due=1002.5)
    ]
    chat.wake()
    turn = Recorded(
        stream="session.cli:c1", version=5, position=5, event=chat.log[-1], at=1002.5
    )
    [create] = effects(turn, chat.state, chat.state)
    assert isinstance(create, Create) and create.stream == "run.cli:c1-t1"


WRITER_REPLIES = [
    '[{"op":"add","level":1,"module":"identity","key":"name","value":"Alex"}]',
    '{"operations":[{"op":"touch","module":"identity","key":"name"}],"summary":"s"}',
    '[{"op":"add","level":9,"module":"identity","key":"x","value":"y"}]',
    '[{"op":"delete","id":"m1"},{"op":"update","id":"m2","value":"v"}]',
    "no JSON at all",
    "[1, 2]",
]

inputs = st.one_of(
    st.tuples(
        st.just("say"),
        st.sampled_from(
            [
                "hi",
                "/new",
                "/model large",
                "/model\tlarge",
                "/status",
                "/nope",
                "/etc/hosts is broken",
                "x" * 50,
                " ",
                "/memory",
            ]
        ),
    ),
    st.tuples(st.just("wake"), st.booleans()),
    st.tuples(st.just("answer"), st.sampled_from(["completed", "failed"])),
    st.tuples(st.just("turn"), st.sampled_from(["completed", "failed"])),
    st.tuples(st.just("core"), st.sampled_from(["a", "b", "", "c" * 3000])),
    st.tuples(st.just("write"), st.sampled_from(WRITER_REPLIES)),
    st.tuples(st.just("spawn"), st.sampled_from(["a", "b", ""])),
    st.tuples(
        st.just("subagent"), st.sampled_from(['{"silent": true}', "news", "{oops"])
    ),
    st.tuples(st.just("schedule"), st.sampled_from(["*/5 * * * *", "bad", None])),
    st.tuples(st.just("fire"), st.booleans()),
)


@hypothesis.given(
    script=st.lists(inputs, max_size=40),
    gaps=st.lists(st.floats(0, 5), min_size=40, max_size=40),
    direct=st.booleans(),
    revision=st.sampled_from(range(SESSION_REVISION + 1)),
)
@hypothesis.example(  # compactions due while the writer's call is in flight
    script=[("turn", "completed")] * 8,
    gaps=[3.0] * 40,
    direct=False,
    revision=SESSION_REVISION,
)
def test_fold_of_the_log_is_the_live_state_and_every_step_re_decides(
    script: list[tuple[str, object]], gaps: list[float], direct: bool, revision: int
) -> None:
    """Random timings, commands and replies, in a chat of runs or a direct
    chat, opened under either revision: folding the recorded events gives
    the live state, and deciding each recorded input again on the state
    before it gives the recorded decisions. From revision 1, every
    compaction hands what leaves the window to a memory writer's call."""
    chat = Chat(
        settings=replace(SETTINGS, max_turns_per_context=2, direct=direct),
        revision=revision,
    )
    at = 1000.0
    for n, ((what, arg), gap) in enumerate(zip(script, gaps, strict=False)):
        at += gap
        if what == "say":
            chat.say(str(arg), at=at)
        elif what == "wake" and chat.state.timer is not None:
            chat.give(WakeDue(timer_id=chat.state.timer if arg else "stale"))
        elif what == "answer" and chat.state.turn is not None:
            chat.answer("reply", status=str(arg))
        elif what == "turn":  # a whole exchange, unless a turn is in flight
            chat.say("question", at=at)
            if chat.state.timer is not None:
                chat.give(WakeDue(timer_id=chat.state.timer))
            if chat.state.turn is not None:
                chat.answer("answer", status=str(arg))
        elif what == "core":
            value = str(arg) or None
            chat.give(CoreMemorySet(request_id=f"q{n}", key="k", value=value))
        elif what == "write" and chat.state.writer is not None:
            chat.give(LlmResponded(request_id=chat.state.writer, text=str(arg), at=at))
        elif what == "spawn":
            chat.give(SubagentAsked(request_id=f"q{n}", name="sub", task=str(arg)))
        elif what == "subagent" and chat.state.subagents:
            run_id = chat.state.subagents[0][0]
            result = ChildFinished(
                stream=run_stream(run_id), status="completed", output=str(arg)
            )
            chat.give(msgspec.structs.replace(result, at=at))
        elif what == "schedule":
            cron = None if arg is None else str(arg)
            chat.give(
                ScheduleAsked(request_id=f"q{n}", name="s", cron=cron, task="t", at=at)
            )
        elif what == "fire" and chat.state.schedules:
            timer_id = chat.state.schedules[0].timer_id if arg else "cli:c1/schedule/0"
            chat.give(WakeDue(timer_id=timer_id, at=at))
    assert SESSION.fold(chat.log) == chat.state
    if revision >= 1:
        compactions = [e for e in chat.log if isinstance(e, ContextCompacted)]
        assert all(c.request_id is not None for c in compactions)
    state = session_state.initial
    i = 0
    while i < len(chat.log):
        input = chat.log[i]
        decided = s.decide(input, state)
        assert decided is not None
        assert chat.log[i + 1 : i + 1 + len(decided)] == decided
        state = SESSION.fold([input, *decided], state)
        i += 1 + len(decided)
