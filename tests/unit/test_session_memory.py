"""A session's memory: memory items and their caps, the memory writer's
operations (validated one by one, never half-applied), compaction of the
window, core memory, cross-channel blocks and the messages a session refuses
(spec 000's memory parts; issue 16)."""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace
from test_session import SETTINGS, Chat

from steward.actors.prompt import prompt_hash
from steward.actors.session import state as session_state
from steward.actors.session.events import (
    SESSION_REVISION,
    ContextCompacted,
    CoreMemoryChanged,
    CoreMemorySet,
    Elsewhere,
    MemoryItem,
    MemoryWriteFailed,
    MemoryWritten,
    MessageRefused,
    ReplySent,
)
from steward.actors.session.memory import (
    LEVEL_LIMITS,
    MEMORY_LOAD_CAP,
    MEMORY_PER_LEVEL_LIMIT,
    memory_block,
    write,
)
from steward.actors.session.reactor import model_call, turn_run
from steward.events import EffectClaimed, Event, LlmFailed, LlmRequested, LlmResponded


def _item(n: int, level: int, value: str = "v", seen_at: float = 0.0) -> MemoryItem:
    return MemoryItem(
        id=f"m{n}",
        module="projects",
        key=f"k{n}",
        level=level,
        value=value,
        seen_at=seen_at,
    )


def _ops(*ops: dict[str, object]) -> str:
    return json.dumps(list(ops))


ADD_NAME = {
    "op": "add",
    "level": 1,
    "module": "identity",
    "key": "name",
    "value": "Alex",
}


# -- memory items -------------------------------------------------------------


def test_memory_block_shows_at_most_five_items_a_level_newest_first() -> None:
    items = [_item(n, level=2, seen_at=float(n)) for n in range(8)]
    lines = memory_block(items).splitlines()
    assert lines[0] == "Active memory:"
    assert len(lines) - 1 == MEMORY_PER_LEVEL_LIMIT
    assert lines[1] == "- projects.k7: v"  # seen last, shown first


def test_memory_block_stops_at_the_load_cap_and_cuts_values_to_their_level() -> None:
    items = [_item(n, level=n % 6, value="x" * 400) for n in range(30)]
    block = memory_block(items)
    shown = block.splitlines()[1:]
    assert sum(len(line) for line in shown) <= MEMORY_LOAD_CAP
    level0 = LEVEL_LIMITS[0][1]
    assert shown[0] == "- projects.k0: " + "x" * level0


def test_memory_block_leaves_archived_items_out() -> None:
    assert memory_block([replace(_item(1, level=0), archived=True)]) == ""


# -- the memory writer --------------------------------------------------------


def test_writer_ops_add_update_touch_and_delete() -> None:
    added = write((), _ops(ADD_NAME), at=10.0, next_id=1)
    assert added.error is None and not added.rejected
    [name] = added.items
    assert (name.id, name.value, name.seen_at) == ("m1", "Alex", 10.0)
    updated = write(
        added.items,
        _ops({"op": "update", "module": "identity", "key": "name", "value": "Al"}),
        at=20.0,
        next_id=2,
    )
    assert updated.items[0].value == "Al" and updated.items[0].seen_at == 20.0
    touch, delete = {"op": "touch", "id": "m1"}, {"op": "delete", "id": "m1"}
    touched = write(updated.items, _ops(touch), at=30.0, next_id=2)
    assert touched.items[0].seen_at == 30.0
    deleted = write(touched.items, _ops(delete), at=40.0, next_id=2)
    assert deleted.items == () and len(deleted.applied) == 1


def test_an_add_of_a_known_module_key_updates_it() -> None:
    first = write((), _ops(ADD_NAME), at=1.0, next_id=1)
    again = write(first.items, _ops({**ADD_NAME, "value": "Sam"}), at=2.0, next_id=2)
    assert [(i.id, i.value) for i in again.items] == [("m1", "Sam")]


def test_invalid_ops_are_rejected_with_their_reason_and_change_nothing() -> None:
    bad = [
        {"op": "merge", "id": "m1"},
        {**ADD_NAME, "module": "gossip"},
        {**ADD_NAME, "level": 7},
        {**ADD_NAME, "level": True},
        {**ADD_NAME, "confidence": 3},
        {**ADD_NAME, "value": "my password: hunter2"},
        {**ADD_NAME, "key": "Not Snake"},
        {"op": "add", "module": "identity", "key": "name"},
        {"op": "update", "value": "x"},
        {"op": "delete", "id": "m404"},
        "add name",
        {**ADD_NAME, "value": 5},
    ]
    written = write((), _ops(*bad, ADD_NAME), at=1.0, next_id=1)
    assert written.error is None
    assert [r.index for r in written.rejected] == list(range(len(bad)))
    reasons = [r.reason for r in written.rejected]
    assert reasons[0].startswith("op must be one of add, update, delete, touch")
    assert reasons[1].startswith("unknown module 'gossip'")
    assert reasons[2].startswith("level must be an integer 0 to 5")
    assert "secret" in reasons[5]
    assert reasons[9] == "no memory item m404 to delete"
    assert reasons[11] == "value must be a string, not 5"
    assert [i.value for i in written.items] == ["Alex"]  # only the valid op
    assert json.loads(written.rejected[1].op)["module"] == "gossip"


def test_a_reply_that_is_no_list_of_ops_is_an_error_and_changes_nothing() -> None:
    assert write((), "I remember that!", at=1.0, next_id=1).error is not None
    assert write((), '{"ops": []}', at=1.0, next_id=1).error is not None
    prose = "Here you go: " + _ops(ADD_NAME) + " done"
    assert [i.key for i in write((), prose, at=1.0, next_id=1).items] == ["name"]


def test_a_reply_object_carries_a_summary() -> None:
    reply = json.dumps({"operations": [ADD_NAME], "summary": " talked about names "})
    written = write((), reply, at=1.0, next_id=1)
    assert written.summary == "talked about names" and len(written.items) == 1


def test_level_caps_archive_the_items_seen_longest_ago() -> None:
    max_items, max_chars = LEVEL_LIMITS[5]
    items = tuple(_item(n, level=5, seen_at=float(n)) for n in range(max_items))
    add = {"op": "add", "level": 5, "module": "recent_context", "key": "t"}
    reply = _ops({**add, "value": "y" * 999})
    written = write(items, reply, at=100.0, next_id=max_items)
    assert [i.id for i in written.items if i.archived] == ["m0"]
    assert len(written.items[-1].value) == max_chars


def test_a_lone_surrogate_in_a_writer_reply_is_recorded_as_u_fffd() -> None:
    reply = _ops(ADD_NAME).replace("Alex", "A\\ud800")
    assert write((), reply, at=1.0, next_id=1).items[0].value == "A\ufffd"


# -- compaction ---------------------------------------------------------------


def _turns(chat: Chat, n: int, start: float = 1001.0) -> None:
    at = start
    for i in range(n):
        chat.say(f"question {i}", at=at)
        chat.wake()
        chat.answer(f"answer {i}")
        at += 10.0


def test_after_61_turns_the_window_keeps_the_newest_half_and_asks_the_writer() -> None:
    chat = Chat()
    _turns(chat, 60)
    assert len(chat.state.messages) == 120 and chat.state.writer is None
    _turns(chat, 1, start=5000.0)
    compacted = next(e for e in chat.log if isinstance(e, ContextCompacted))
    assert (compacted.dropped, compacted.kept) == (61, 30)
    assert len(chat.state.messages) == 61
    assert chat.state.messages[-1].content == "answer 0"
    assert chat.state.messages[0].content == "answer 30"
    request = chat.log[-1]
    assert isinstance(request, LlmRequested) and request.priority == "subagent"
    assert chat.state.writing[-1].content == "question 30"
    assert len(chat.state.writing) == SETTINGS.memory_writer_max_messages
    call = model_call(chat.state, request)
    assert prompt_hash(call.prompt) == request.prompt_hash
    assert "question 30" in call.prompt.messages[0].content
    assert chat.state.outstanding.awaits(request.request_id)


def test_the_writers_ops_are_applied_within_caps_and_the_next_turn_sees_them() -> None:
    chat = Chat(settings=replace(SETTINGS, max_turns_per_context=2))
    _turns(chat, 3)
    rid = chat.state.writer
    assert rid is not None
    reply = json.dumps(
        {"operations": [ADD_NAME, {"op": "add", "module": "x"}], "summary": "names"}
    )
    [written] = chat.give(LlmResponded(request_id=rid, text=reply, at=2000.0)) or []
    assert isinstance(written, MemoryWritten)
    assert len(written.applied) == 1 and written.rejected[0].index == 1
    assert chat.state.writer is None and chat.state.summary == "names"
    chat.say("what is my name?", at=2001.0)
    chat.wake()
    run = turn_run(chat.state, chat.turns()[-1], "session.cli:c1")
    system = "\n".join(m.content for m in run.conversation if m.role == "system")
    assert "- identity.name: Alex" in system and "Summary so far:\nnames" in system
    assert chat.give(LlmResponded(request_id=rid, text="[]", at=2002.0)) is None


def test_a_failed_writer_call_leaves_memory_as_it_was() -> None:
    chat = Chat(settings=replace(SETTINGS, max_turns_per_context=1))
    _turns(chat, 2)
    rid = chat.state.writer
    assert rid is not None
    decided = chat.give(
        LlmFailed(request_id=rid, kind="rate_limit", message="slow down", at=9.0)
    )
    assert decided == [
        MemoryWriteFailed(
            request_id=rid, reason="the model call failed: rate_limit: slow down"
        )
    ]
    assert chat.state.memory == () and chat.state.writer is None
    garbled = Chat(settings=replace(SETTINGS, max_turns_per_context=1))
    _turns(garbled, 2)
    [failed] = garbled.give(LlmResponded(request_id=rid, text="nope", at=9.0)) or []
    assert isinstance(failed, MemoryWriteFailed) and "not JSON" in failed.reason


def _writing_while_turns_end(revision: int) -> tuple[Chat, str]:
    """A chat compacted after its second turn (its writer's call left in
    flight), then given a third turn: a compaction is due again."""
    chat = Chat(settings=replace(SETTINGS, max_turns_per_context=1), revision=revision)
    _turns(chat, 2)
    rid = chat.state.writer
    assert rid is not None and session_state.window_turns(chat.state) == 1
    _turns(chat, 1, start=2000.0)
    return chat, rid


def test_before_revision_1_a_compaction_while_the_writer_writes_drops_unread() -> None:
    """How sessions opened before revision 1 decided, and still replay: the
    older half left the window, and no writer's call read it."""
    chat, rid = _writing_while_turns_end(revision=0)
    compacted = [e for e in chat.log if isinstance(e, ContextCompacted)]
    assert [c.request_id for c in compacted] == [rid, None]
    assert session_state.window_turns(chat.state) == 1
    assert chat.state.writer == rid
    assert [m.content for m in chat.state.writing] == ["question 0", "answer 0"]


def test_a_compaction_due_while_the_writer_writes_waits_for_its_end() -> None:
    """From revision 1 the window keeps its turns while the writer's call is
    in flight; when it ends, the compaction follows with the next call,
    which reads what leaves the window."""
    chat, rid = _writing_while_turns_end(revision=SESSION_REVISION)
    assert [e for e in chat.log if isinstance(e, ContextCompacted)][1:] == []
    assert session_state.window_turns(chat.state) == 2 and chat.state.writer == rid
    reply = json.dumps({"operations": [ADD_NAME], "summary": "names"})
    decided = chat.give(LlmResponded(request_id=rid, text=reply, at=2100.0)) or []
    assert [type(e) for e in decided] == [
        MemoryWritten,
        ContextCompacted,
        LlmRequested,
    ]
    compacted, request = decided[1], decided[2]
    assert isinstance(compacted, ContextCompacted)
    assert isinstance(request, LlmRequested)
    assert compacted.request_id == request.request_id == chat.state.writer != rid
    assert session_state.window_turns(chat.state) == 1
    assert [m.content for m in chat.state.writing] == ["question 1", "answer 1"]
    assert chat.state.memory[0].value == "Alex"  # the first call's ops stand
    call = model_call(chat.state, request)
    assert prompt_hash(call.prompt) == request.prompt_hash
    assert "question 1" in call.prompt.messages[0].content


def test_a_compaction_due_while_the_writer_fails_follows_the_failure() -> None:
    chat, rid = _writing_while_turns_end(revision=SESSION_REVISION)
    decided = chat.give(LlmFailed(request_id=rid, kind="http", message="gone")) or []
    assert [type(e) for e in decided] == [
        MemoryWriteFailed,
        ContextCompacted,
        LlmRequested,
    ]
    assert chat.state.writer not in (None, rid)
    assert [m.content for m in chat.state.writing] == ["question 1", "answer 1"]


def test_a_writer_that_ends_during_a_turn_leaves_the_compaction_to_its_end() -> None:
    """The turn in flight keeps its message in the window: the compaction
    due when the writer's call ends is decided when the turn ends."""
    chat, rid = _writing_while_turns_end(revision=SESSION_REVISION)
    chat.say("in flight", at=2050.0)
    chat.wake()
    assert chat.state.turn is not None
    decided = chat.give(LlmResponded(request_id=rid, text="[]", at=2060.0)) or []
    assert [type(e) for e in decided] == [MemoryWritten]
    assert chat.state.messages[-1].content == "in flight"
    decided = chat.answer("landed") or []
    assert [type(e) for e in decided] == [ReplySent, ContextCompacted, LlmRequested]
    assert [m.content for m in chat.state.messages][-2:] == ["in flight", "landed"]
    assert session_state.window_turns(chat.state) == 1


@pytest.mark.parametrize(
    ("revision", "summary"),
    [(0, "the old segment"), (SESSION_REVISION, None)],
    ids=["before revision 1", "now"],
)
def test_a_writer_asked_before_new_gives_the_new_segment_no_summary(
    revision: int, summary: str | None
) -> None:
    """Its ops still apply (memory outlives segments); its summary, of the
    segment ``/new`` ended, is not the new one's (before revision 1 it
    was)."""
    chat = Chat(settings=replace(SETTINGS, max_turns_per_context=1), revision=revision)
    _turns(chat, 2)
    rid = chat.state.writer
    assert rid is not None
    chat.say("/new", at=3000.0)
    reply = json.dumps({"operations": [ADD_NAME], "summary": "the old segment"})
    chat.give(LlmResponded(request_id=rid, text=reply, at=3001.0))
    assert chat.state.memory[0].value == "Alex"
    assert chat.state.summary == summary


def test_a_writer_that_ends_with_no_compaction_due_asks_for_nothing_more() -> None:
    chat = Chat(
        settings=replace(SETTINGS, max_turns_per_context=1),
        revision=SESSION_REVISION,
    )
    _turns(chat, 2)
    rid = chat.state.writer
    assert rid is not None
    decided = chat.give(LlmResponded(request_id=rid, text="[]", at=2100.0)) or []
    assert [type(e) for e in decided] == [MemoryWritten]
    assert chat.state.writer is None


def test_new_segment_resets_the_window_turns_and_summary() -> None:
    chat = Chat(settings=replace(SETTINGS, max_turns_per_context=3))
    _turns(chat, 2)
    chat.say("/new", at=3000.0)
    assert session_state.window_turns(chat.state) == 0 and chat.state.summary is None
    _turns(chat, 3, start=3001.0)
    assert not any(isinstance(e, ContextCompacted) for e in chat.log)


# -- core memory --------------------------------------------------------------


def test_core_memory_set_changes_and_removes_a_key() -> None:
    chat = Chat()
    assert chat.give(CoreMemorySet(request_id="q1", key="city", value="Bremen")) == [
        CoreMemoryChanged(request_id="q1", key="city", value="Bremen")
    ]
    chat.give(CoreMemorySet(request_id="q2", key="name", value="Alex"))
    chat.give(CoreMemorySet(request_id="q3", key="city", value="Kiel"))
    assert chat.state.core_memory == (("city", "Kiel"), ("name", "Alex"))
    chat.give(CoreMemorySet(request_id="q4", key="city", value=None))
    assert chat.state.core_memory == (("name", "Alex"),)


def test_core_memory_refuses_a_bad_key_and_more_than_it_holds() -> None:
    chat = Chat()
    too_long = "x" * session_state.CORE_MEMORY_CHARS
    assert session_state.core_set_problem(chat.state, "a:b", "v") is not None
    problem = session_state.core_set_problem(chat.state, "k", too_long)
    assert problem is not None and "at most 2000 characters" in problem
    assert chat.give(CoreMemorySet(request_id="q1", key="k", value=too_long)) is None
    missing = session_state.core_set_problem(chat.state, "gone", None)
    assert missing == "core memory has no key 'gone'"


# -- cross-channel blocks -----------------------------------------------------


def test_a_turn_shows_at_most_twelve_messages_from_other_chats() -> None:
    chat = Chat()
    elsewhere = tuple(
        Elsewhere(session_id="tg:9", role="user", text=f"there {n}") for n in range(20)
    )
    chat.say("hello", at=1001.0, elsewhere=elsewhere)
    chat.wake()
    run = turn_run(chat.state, chat.turns()[-1], "session.cli:c1")
    [block] = [m for m in run.conversation if "other chats" in m.content]
    lines = block.content.splitlines()[1:]
    assert len(lines) == 12 and lines[-1] == "[tg:9] user: there 19"


# -- refused messages ---------------------------------------------------------


def test_an_empty_message_is_answered_and_starts_no_turn() -> None:
    chat = Chat()
    [refused] = chat.say("  \n ", at=1001.0) or []
    assert isinstance(refused, MessageRefused) and "empty message" in refused.reply
    assert chat.state.buffer == () and chat.state.timer is None


def test_an_oversized_message_is_answered_with_the_limit() -> None:
    chat = Chat(settings=replace(SETTINGS, max_message_chars=10))
    [refused] = chat.say("x" * 11, at=1001.0) or []
    assert isinstance(refused, MessageRefused)
    assert "11 characters" in refused.reply and "limit is 10" in refused.reply
    assert chat.state.buffer == ()
    assert chat.say("x" * 10, at=1002.0) is not None and chat.state.buffer


def test_one_live_worker_holds_the_writers_call() -> None:
    chat = Chat(settings=replace(SETTINGS, max_turns_per_context=1))
    _turns(chat, 2)
    rid = chat.state.writer
    assert rid is not None

    def claim(worker: str, at: float) -> list[Event] | None:
        return chat.give(
            EffectClaimed(request_id=rid, worker=worker, until=at + 30, at=at)
        )

    assert claim("w1", at=10.0) == []
    assert claim("w2", at=20.0) is None  # w1's claim is live
    assert claim("w1", at=25.0) == []  # renewed by its own worker
    assert claim("w2", at=60.0) == []  # w1's lapsed at 55: w2 takes it
    assert chat.state.outstanding.claim(rid) == ("w2", 90.0)
    assert (
        chat.give(EffectClaimed(request_id="other", worker="w3", until=1, at=0)) is None
    )
