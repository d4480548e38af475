"""A session's turns end to end on the decider (spec 003): a turn whose run
fails or is cancelled is told to the chat and ends; a turn's run gets the
session's tools, counted against its context budget; and the session
settings ``[session]`` configures (its profile's model, the longest
message), from `Settings` objects, a TOML file and ``STEWARD_SESSION_*``.
Time is each input's ``at``: nothing sleeps."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace
from test_session import SETTINGS, Chat

from steward.actors.effects import Create
from steward.actors.run.events import RunCreated
from steward.actors.run.state import run_stream
from steward.actors.session.context import build_context, estimate
from steward.actors.session.events import (
    DebounceArmed,
    MessageRefused,
    ReplySent,
    SessionSettings,
    TurnStarted,
)
from steward.actors.session.reactor import effects, turn_run
from steward.config import AgentProfile, ModelConfig, Settings, load_settings
from steward.config.settings import SessionConfig
from steward.events import ChatMessage, ChildFinished, Recorded, ToolSpec

# -- a turn that fails --------------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_turn_that_ends_without_completing_is_told_and_the_next_one_starts(
    status: str,
) -> None:
    """The turn's run ends failed (or cancelled) while a message waits: the
    chat is told the turn's status and why, the reply carries that status,
    and the waiting message starts the next turn in the same decision."""
    chat = Chat()
    chat.say("first", at=1001.0)
    chat.wake()
    chat.say("second", at=1002.0)
    assert chat.wake() == []  # waits for the turn in flight
    decided = chat.answer("the model is unreachable", status=status)
    assert decided == [
        ReplySent(
            run_id="cli:c1-t1",
            text=f"(the turn {status}: the model is unreachable)",
            status=status,
        ),
        TurnStarted(run_id="cli:c1-t2", message_ids=("m2",), text="second"),
    ]
    assert chat.state.turn == "cli:c1-t2"
    assert [m.content for m in chat.state.messages] == [
        "first",
        f"(the turn {status}: the model is unreachable)",
        "second",
    ]


def test_a_failed_turn_is_over_and_its_result_is_taken_once() -> None:
    """Nothing waits: the failure is the chat's reply and the session has no
    turn in flight; the run's result delivered again is refused, and the
    next message starts a turn whose window shows the failure."""
    chat = Chat()
    chat.say("hello", at=1001.0)
    chat.wake()
    [reply] = chat.answer("iteration limit reached", status="failed") or []
    assert reply == ReplySent(
        run_id="cli:c1-t1",
        text="(the turn failed: iteration limit reached)",
        status="failed",
    )
    assert chat.state.turn is None and chat.state.buffer == ()
    result = ChildFinished(
        stream=run_stream("cli:c1-t1"), status="failed", output="again"
    )
    assert chat.give(result) is None
    chat.say("are you there?", at=1010.0)
    [turn] = chat.wake() or []
    assert isinstance(turn, TurnStarted) and turn.run_id == "cli:c1-t2"
    run = turn_run(chat.state, turn, "session.cli:c1")
    assert run.conversation == (
        ChatMessage(role="user", content="hello"),
        ChatMessage(
            role="assistant", content="(the turn failed: iteration limit reached)"
        ),
        ChatMessage(role="user", content="are you there?"),
    )
    assert run.input_text == "are you there?"


# -- a turn's tools -----------------------------------------------------------

TOOLS = tuple(
    ToolSpec(name=f"tool{i}", description=f"tool {i}: " + "d" * 400) for i in range(3)
)
TOOLED = replace(SETTINGS, run=replace(SETTINGS.run, tools=TOOLS))


def _talked(settings: SessionSettings) -> tuple[Chat, TurnStarted]:
    """A chat of 6 exchanges of 400 characters a message (100 tokens each,
    on the 900 tokens the small model leaves), then a seventh turn."""
    chat = Chat(settings=settings)
    for n in range(6):
        chat.say(f"q{n} " + "x" * 397, at=1001.0 + 10 * n)
        chat.wake()
        chat.answer(f"a{n} " + "y" * 397)
    chat.say("now", at=1100.0)
    [turn] = chat.wake() or []
    assert isinstance(turn, TurnStarted)
    return chat, turn


def test_a_turns_run_gets_the_session_tools_and_its_context_counts_them() -> None:
    """The run of a turn offers the session's tools, and its conversation is
    the window left once their descriptions are counted: fewer messages
    than the same chat without tools."""
    chat, turn = _talked(TOOLED)
    run = turn_run(chat.state, turn, "session.cli:c1")
    assert run.settings.tools == TOOLS
    fitted = build_context(
        TOOLED,
        model="small",
        system_prompt=TOOLED.run.system_prompt,
        core_memory="",
        summary=None,
        segment=chat.state.messages[:-1],
        pending="now",
        tools=TOOLS,
        whole_turns=chat.state.revision >= 3,
    )
    now = ChatMessage(role="user", content="now")
    assert run.conversation == (*fitted.messages, now)
    tool_tokens = estimate("\n".join(f"{t.name}: {t.description}" for t in TOOLS))
    assert fitted.fixed_tokens == (
        estimate(TOOLED.run.system_prompt) + tool_tokens + estimate("now")
    )

    bare, bare_turn = _talked(SETTINGS)
    without = turn_run(bare.state, bare_turn, "session.cli:c1")
    assert without.settings.tools == ()
    assert len(run.conversation) < len(without.conversation)
    # the window is the newest messages either way
    assert run.conversation == without.conversation[-len(run.conversation) :]


def test_the_run_a_turn_creates_carries_the_tools() -> None:
    """What the host is asked to create for the turn (its `Create`) is the
    run with the session's tools."""
    chat, turn = _talked(TOOLED)
    rec = Recorded(
        stream="session.cli:c1", version=40, position=40, event=turn, at=1101.5
    )
    [create] = effects(rec, chat.state, chat.state)
    assert isinstance(create, Create) and isinstance(create.input, RunCreated)
    assert create.input.settings.tools == TOOLS
    assert create.input == turn_run(chat.state, turn, "session.cli:c1")


# -- the settings [session] configures ----------------------------------------


def _configured(**session: object) -> Settings:
    """Two models and a ``chat`` profile on the larger; ``[session]`` as
    given."""
    return Settings(
        models={
            "default": ModelConfig(),
            "large": ModelConfig(model="m-large", context_budget=100_000),
        },
        agents={"default": AgentProfile(), "chat": AgentProfile(model="large")},
        session=SessionConfig(**session),  # type: ignore[arg-type]
    )


def test_a_session_opens_on_its_profiles_model() -> None:
    """The routing default: a session's model is the model of ``[session]
    profile`` (or of the channel's profile when one is given), and its
    turns' runs ask for that model's id."""
    config = _configured(profile="chat")
    opened = config.session_settings()
    assert opened.model == "large" and opened.profile == "chat"
    assert opened.run.model == "m-large"
    assert config.session_settings(profile="default").model == "default"
    # the default profile's model, when no [session] profile names another
    on_default = replace(
        config, agents={"default": AgentProfile(model="large")}, session=SessionConfig()
    )
    assert on_default.session_settings().model == "large"

    chat = Chat(settings=opened)
    assert chat.state.model == "large"
    chat.say("hello", at=1001.0)
    [turn] = chat.wake() or []
    assert isinstance(turn, TurnStarted)
    run = turn_run(chat.state, turn, "session.cli:c1")
    assert run.settings.model == "m-large" and run.settings.model_table == "large"


def test_max_message_chars_comes_from_session_config() -> None:
    """``[session] max_message_chars`` is the session's limit: a longer
    message is refused with a reply naming it; one at the limit is taken."""
    opened = _configured(max_message_chars=10).session_settings()
    assert opened.max_message_chars == 10
    chat = Chat(settings=opened)
    [refused] = chat.say("x" * 11, at=1001.0) or []
    assert isinstance(refused, MessageRefused)
    assert "11 characters" in refused.reply and "limit is 10" in refused.reply
    assert "max_message_chars" in refused.reply
    assert chat.state.buffer == ()
    [armed] = chat.say("x" * 10, at=1002.0) or []
    assert isinstance(armed, DebounceArmed)


def test_max_message_chars_defaults_to_32768() -> None:
    opened = Settings().session_settings()
    assert SessionConfig().max_message_chars == 32_768
    assert opened.max_message_chars == 32_768
    chat = Chat(settings=opened)
    [refused] = chat.say("x" * 32_769, at=1001.0) or []
    assert isinstance(refused, MessageRefused) and "limit is 32768" in refused.reply
    [armed] = chat.say("x" * 32_768, at=1002.0) or []
    assert isinstance(armed, DebounceArmed)


TOML = """\
[models.large]
model = "m-large"
context_budget = 100000

[agents.chat]
model = "large"

[session]
profile = "chat"
max_message_chars = 10
"""


def test_session_settings_from_toml_and_environment(tmp_path: Path) -> None:
    """``[session]`` in ``steward.toml``, and ``STEWARD_SESSION_*`` over it."""
    path = tmp_path / "steward.toml"
    path.write_text(TOML)
    opened = load_settings(path, {}).session_settings()
    assert (opened.model, opened.max_message_chars) == ("large", 10)
    [refused] = Chat(settings=opened).say("x" * 11, at=1001.0) or []
    assert isinstance(refused, MessageRefused) and "limit is 10" in refused.reply

    env = {
        "STEWARD_SESSION_MAX_MESSAGE_CHARS": "12",
        "STEWARD_SESSION_PROFILE": "default",
    }
    overridden = load_settings(path, env).session_settings()
    assert (overridden.model, overridden.max_message_chars) == ("default", 12)
    env = {"STEWARD_AGENTS_CHAT_MODEL": "default"}
    assert load_settings(path, env).session_settings().model == "default"
