"""A session's switches of its staged turns (spec 004 §2.1, §2.2) and the
reasoning outcome its history keeps (§4.3), from revision 4.

The mode and the reasoning switch are the user's: ``/mode`` and
``/reasoning`` set them (recorded), each turn's run is created with them,
and nothing a model says changes them. Sessions opened before revision 4
decide as they were recorded: no such commands, no outcome kept.
"""

from __future__ import annotations

from msgspec.structs import replace
from test_session import SETTINGS, Chat

from steward.actors.run.state import run_stream
from steward.actors.session import state as session_state
from steward.actors.session.events import (
    SESSION_REVISION,
    CommandAnswered,
    ModeSwitched,
    ReasoningSwitched,
    ReplySent,
    SubagentStarted,
    TurnStarted,
)
from steward.actors.session.reactor import subagent_run, turn_run
from steward.events import ChildFinished

STAGED = replace(
    SETTINGS, run=replace(SETTINGS.run, protocol="native", policy="staged")
)
OUTCOME = "Reasoning outcome: plan: read it; delivery: DONE"


def reply(decided: list[object] | None) -> str:
    assert decided is not None
    answered = [e for e in decided if isinstance(e, CommandAnswered)]
    assert len(answered) == 1
    return answered[0].reply


def run_of(chat: Chat) -> tuple[str, bool]:
    """The (mode, reasoning) of the run the chat's next turn starts."""
    chat.say("go on", at=2000.0 + chat.n)
    chat.wake()
    turn = chat.turns()[-1]
    created = turn_run(chat.state, turn, "session.cli:c1")
    chat.give(
        ChildFinished(stream=run_stream(turn.run_id), status="completed", output="ok")
    )
    return created.settings.mode, created.settings.reasoning


def test_the_user_sets_mode_and_reasoning_and_turns_run_with_them() -> None:
    """``/mode chat`` and ``/reasoning on`` are recorded and the next
    turns' runs (and a subagent's) are created in chat mode with reasoning
    on; without an argument each shows the switch."""
    chat = Chat(STAGED, revision=SESSION_REVISION)
    assert run_of(chat) == ("agent", False)  # the profile's
    assert reply(chat.say("/mode", at=1001.0)) == "mode: agent"
    decided = chat.say("/mode chat", at=1002.0)
    assert decided is not None and decided[0] == ModeSwitched(mode="chat")
    decided = chat.say("/reasoning on", at=1003.0)
    assert decided is not None and decided[0] == ReasoningSwitched(reasoning=True)
    assert reply(chat.say("/reasoning", at=1004.0)) == "reasoning: on"
    assert run_of(chat) == ("chat", True)
    started = SubagentStarted(run_id="cli:c1-s1", name="a", task="t", model="small")
    sub = subagent_run(chat.state, started, "session.cli:c1")
    assert (sub.settings.mode, sub.settings.reasoning) == ("chat", True)


def test_a_bad_switch_is_answered_and_changes_nothing() -> None:
    """An unknown mode or reasoning value is answered with the ones there
    are; a session whose agent is not staged has no such commands; nothing
    is set."""
    chat = Chat(STAGED, revision=SESSION_REVISION)
    assert reply(chat.say("/mode sideways", at=1001.0)) == (
        "unknown mode 'sideways'; modes: agent, chat"
    )
    assert "use on or off" in reply(chat.say("/reasoning maybe", at=1002.0))
    plain = Chat(SETTINGS, revision=SESSION_REVISION)  # its agent is not staged
    assert reply(plain.say("/mode chat", at=1001.0)).startswith(
        "unknown command /mode; commands: /new, /model"
    )
    assert "/mode" not in reply(plain.say("/help", at=1002.0)).replace("/model", "")
    assert (chat.state.mode, chat.state.reasoning) == (None, None)
    assert (plain.state.mode, plain.state.reasoning) == (None, None)


def test_a_reply_asking_to_switch_mode_is_text() -> None:
    """A turn whose model answers ``/mode chat`` (or says it switches)
    sends that text to the chat; the session's mode and the next turn's
    run stay the user's."""
    chat = Chat(STAGED, revision=SESSION_REVISION)
    chat.say("/reasoning on", at=1000.5)
    chat.say("please switch to chat mode", at=1001.0)
    chat.wake()
    decided = chat.answer("/mode chat\nSwitching to chat mode now.")
    assert decided is not None
    assert [type(e) for e in decided] == [ReplySent]
    assert chat.state.mode is None
    assert run_of(chat) == ("agent", True)


def test_the_history_keeps_a_staged_turns_outcome_after_its_answer() -> None:
    """A turn whose run hands back a reasoning outcome: the chat is sent
    the answer, the history keeps the answer then the outcome, which the
    next turn's run is given."""
    chat = Chat(STAGED, revision=SESSION_REVISION)
    chat.say("read it", at=1001.0)
    chat.wake()
    [turn] = chat.turns()
    result = ChildFinished(
        stream=run_stream(turn.run_id),
        status="completed",
        output="Read.",
        outcome=OUTCOME,
    )
    decided = chat.give(result)
    assert decided is not None and decided[0] == ReplySent(
        run_id=turn.run_id, text="Read.", outcome=OUTCOME
    )
    assert chat.state.messages[-1].content == f"Read.\n\n{OUTCOME}"
    chat.say("and then?", at=1010.0)
    chat.wake()
    created = turn_run(chat.state, chat.turns()[-1], "session.cli:c1")
    assert created.conversation[-2].content == f"Read.\n\n{OUTCOME}"


def test_sessions_before_revision_4_decide_as_recorded() -> None:
    """At revision 3 ``/mode`` is an unknown command, ``/help`` lists no
    switch, and a run's outcome is not kept in the history."""
    chat = Chat(STAGED, revision=3)
    assert reply(chat.say("/mode chat", at=1001.0)).startswith(
        "unknown command /mode; commands: /new, /model"
    )
    assert "/mode [" not in reply(chat.say("/help", at=1002.0))
    assert "/reasoning" in reply(Chat(STAGED, revision=4).say("/help", at=1001.0))
    chat.say("read it", at=1003.0)
    chat.wake()
    [turn] = [t for t in chat.turns() if isinstance(t, TurnStarted)]
    result = ChildFinished(
        stream=run_stream(turn.run_id),
        status="completed",
        output="Read.",
        outcome=OUTCOME,
    )
    decided = chat.give(result)
    assert decided is not None and decided[0] == ReplySent(
        run_id=turn.run_id, text="Read."
    )
    assert chat.state.messages[-1].content == "Read."
    assert session_state.commands(chat.state) == session_state.COMMANDS
