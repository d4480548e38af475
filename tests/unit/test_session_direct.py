"""Direct chat (Clifford's message processor, spec 000, which Clifford never
wires up): a configured chat's turn is one model call of the session's own,
without tools, instead of a run."""

from __future__ import annotations

from msgspec.structs import replace
from test_session import SETTINGS, Chat

from steward.actors.prompt import prompt_hash
from steward.actors.session import state as session_state
from steward.actors.session.events import CoreMemorySet, ReplySent, TurnStarted
from steward.actors.session.reactor import effects, model_call, pending
from steward.config import Settings
from steward.config.settings import SessionConfig
from steward.events import (
    ChatMessage,
    EffectClaimed,
    Event,
    LlmRequested,
    Recorded,
    ToolSpec,
)

TOOLS = (ToolSpec(name="files.read", description="read a file"),)
DIRECT = replace(SETTINGS, direct=True, run=replace(SETTINGS.run, tools=TOOLS))


def _turn(chat: Chat, text: str = "hello", at: float = 1001.0) -> list[Event]:
    chat.say(text, at=at)
    return chat.wake() or []


def test_a_direct_turn_is_one_model_call_of_the_session_without_tools() -> None:
    chat = Chat(settings=DIRECT)
    chat.give(CoreMemorySet(request_id="q1", key="name", value="Ada"))
    turn, ask = _turn(chat)
    assert isinstance(turn, TurnStarted) and turn.direct
    assert isinstance(ask, LlmRequested)
    assert ask.request_id == "cli:c1-t1/llm" == session_state.direct_call(chat.state)
    assert ask.priority == "interactive"
    prompt = session_state.direct_prompt(chat.state)
    assert ask.prompt_hash == prompt_hash(prompt)
    assert prompt.tools == () and prompt.model == "m-small"
    assert prompt.system.startswith(SETTINGS.direct_system_prompt)
    assert "Channel: cli. Chat: c1." in prompt.system
    assert prompt.messages == (
        ChatMessage(role="system", content="Core memory:\nname: Ada"),
        ChatMessage(role="user", content="hello"),
    )
    rec = Recorded(stream="session.cli:c1", version=5, position=5, event=turn, at=0.0)
    assert effects(rec, chat.state, chat.state) == []  # no run
    assert pending(rec).wants == ()
    call = model_call(chat.state, ask)
    assert call.prompt == prompt
    assert chat.state.outstanding.awaits(ask.request_id)


def test_the_direct_answer_is_the_reply_and_the_window_grows() -> None:
    chat = Chat(settings=DIRECT)
    _turn(chat)
    assert chat.answer("Hi, Ada.") == [ReplySent(run_id="cli:c1-t1", text="Hi, Ada.")]
    assert chat.state.turn is None and session_state.direct_call(chat.state) is None
    _turn(chat, "and now?", at=1010.0)
    window = session_state.direct_prompt(chat.state).messages
    assert [m.content for m in window] == ["hello", "Hi, Ada.", "and now?"]


def test_a_failed_direct_call_is_told_and_the_next_turn_starts() -> None:
    chat = Chat(settings=DIRECT)
    _turn(chat)
    chat.say("are you there?", at=1002.0)  # waits for the turn in flight
    chat.wake()
    decided = chat.answer("429 too many requests", status="failed") or []
    reply, turn, ask = decided
    assert isinstance(reply, ReplySent) and reply.status == "failed"
    assert reply.text == (
        "(the turn failed: the model call failed: http: 429 too many requests)"
    )
    assert isinstance(turn, TurnStarted) and turn.text == "are you there?"
    assert isinstance(ask, LlmRequested) and ask.request_id == "cli:c1-t2/llm"


def test_one_live_worker_holds_a_direct_call() -> None:
    chat = Chat(settings=DIRECT)
    _turn(chat)
    rid = "cli:c1-t1/llm"
    first = EffectClaimed(request_id=rid, worker="w1", until=2000.0, at=1001.0)
    assert chat.give(first) == []
    rival = EffectClaimed(request_id=rid, worker="w2", until=2000.0, at=1500.0)
    assert chat.give(rival) is None
    assert chat.state.outstanding.claim(rid) == ("w1", 2000.0)
    chat.answer("done")
    assert chat.state.outstanding.claim(rid) is None


def test_direct_chats_are_chosen_by_session_id_patterns() -> None:
    config = Settings(session=SessionConfig(direct_chats=["cli:quick", "telegram:*"]))
    assert config.session_settings(session_id="cli:quick").direct
    assert config.session_settings(session_id="telegram:42").direct
    assert not config.session_settings(session_id="cli:local").direct
