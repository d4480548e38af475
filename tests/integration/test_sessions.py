"""Sessions end to end through the command line: a chat long enough to be
compacted, the memory writer's operations applied (and one rejected), the
memory views in `sessions list|show`, `replay --verify` of the session, and
`projections rebuild` giving the memory views byte for byte; `sessions send`
answering commands and refusing bad messages with a reason."""

from __future__ import annotations

import asyncio
import io
import json
import re
import sqlite3
from pathlib import Path

import pytest
from support import PLAN, SPAWN_SCOUT, act

from steward import cli
from steward.actors.session.events import (
    SESSION_REVISION,
    MessageReceived,
    SessionOpened,
)
from steward.bus import SqliteEventLog
from steward.effects.tools import ToolContext, ToolRegistry
from steward.events import Event, ToolResulted
from steward.host import Host
from steward.kinds import KINDS

WRITER_REPLY = json.dumps(
    {
        "operations": [
            {
                "op": "add",
                "level": 1,
                "module": "identity",
                "key": "name",
                "value": "Ada",
            },
            {"op": "add", "level": 9, "module": "identity", "key": "x", "value": "y"},
        ],
        "summary": "Ada introduced herself.",
    }
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A script for three turns and the memory writer; compaction after two
    turns; a short debounce."""
    script = tmp_path / "s.json"
    replies = [
        {"text": act(type="send_message", message=f"reply {n}")} for n in (1, 2, 3)
    ]
    script.write_text(
        json.dumps({"replies": replies, "subagent_replies": [WRITER_REPLY]})
    )
    monkeypatch.setenv("STEWARD_SESSION_DEBOUNCE_MS", "10")
    monkeypatch.setenv("STEWARD_SESSION_MAX_TURNS_PER_CONTEXT", "2")
    monkeypatch.chdir(tmp_path)
    return script


def _steward(*argv: str) -> int:
    return cli.main(["--db", "log.db", *argv])


def _memory_views(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        rows: list[tuple[object, ...]] = []
        for table in ("sessions", "messages", "memory_items"):
            rows += conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        for index in ("messages_fts", "memory_fts"):
            rows += conn.execute(
                f"SELECT rowid, text FROM {index} ORDER BY rowid"
            ).fetchall()
        return rows
    finally:
        conn.close()


def test_a_compacted_chat_leaves_memory_the_views_show_and_rebuild_exactly(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("I am Ada\nhow are you\nbye\n"))
    assert _steward("--script", str(env), "chat") == 0
    assert capsys.readouterr().out.splitlines() == ["reply 1", "reply 2", "reply 3"]

    assert _steward("sessions", "list") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["id", "model", "segment"]
    assert row.split()[:6] == ["cli:local", "default", "0", "3", "3", "1"]
    # what it spent is its turns' sum, as the runs table holds each
    with sqlite3.connect(env.parent / "log.db") as db:
        tokens, cost = db.execute(
            "SELECT SUM(input_tokens + output_tokens), SUM(cost_usd) FROM runs "
            "WHERE reply_to = 'session.cli:local'"
        ).fetchone()
    assert tokens > 0 and row.split()[6] == str(tokens)
    assert _steward("sessions", "list", "-o", "json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert (listed["tokens"], listed["cost_usd"]) == (tokens, cost)

    assert _steward("sessions", "show", "cli:local") == 0
    shown = capsys.readouterr().out
    assert "summary: Ada introduced herself." in shown
    assert "[m1] L1 identity.name: Ada" in shown
    assert "3 messages received, 3 turns, 1 compactions" in shown
    assert "segments (1; /new starts one, the log keeps them all):" in shown
    assert re.search(r"^  s0 from \S+Z: 3 messages$", shown, re.MULTILINE), shown

    assert _steward("replay", "session.cli:local", "--verify") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"

    before = _memory_views(env.parent / "log.db")
    assert any(row == (1, "identity name Ada") for row in before)
    assert _steward("projections", "rebuild") == 0
    assert _memory_views(env.parent / "log.db") == before

    opened = asyncio.run(_first_event(env.parent / "log.db", "session.cli:local"))
    assert isinstance(opened, SessionOpened)
    assert opened.revision == SESSION_REVISION  # sessions open at the latest


async def _first_event(path: Path, stream: str) -> Event:
    log = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        return (await log.read(stream))[0].event
    finally:
        await log.close()


def test_sessions_send_answers_a_command_and_refuses_an_empty_message(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _steward("sessions", "send", "telegram:42", "/model") == 0
    assert capsys.readouterr().out.strip() == "model: default"
    assert _steward("sessions", "send", "telegram:42", "   ") == 0
    assert "empty message was not taken" in capsys.readouterr().out
    assert _steward("sessions", "send", "telegram:42", "hi", "--no-wait") == 0
    assert capsys.readouterr().out.startswith("telegram:42-")
    assert _steward("sessions", "show", "telegram:42") == 0
    shown = capsys.readouterr().out
    assert "refused" in shown and "3 messages received, 0 turns" in shown


def test_status_tells_the_hosting_process_uptime_and_queue_or_that_it_hosts_none(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chat` hosts the log: its /status has the host's uptime and its model
    calls waiting. `sessions send` only records: it says it knows neither."""
    monkeypatch.setattr("sys.stdin", io.StringIO("/status\n"))
    assert _steward("--script", str(env), "chat") == 0
    hosted = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"uptime \S+ \(hosting since \S+Z; the session .*", hosted[0])
    assert "model calls waiting 0" in hosted
    assert _steward("sessions", "send", "cli:local", "/status") == 0
    recorded = capsys.readouterr().out.splitlines()
    assert recorded[0].startswith("uptime unknown (the process that took this")
    assert "model calls waiting unknown" in recorded


def test_sessions_show_lists_the_newest_segments(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("/new\n" * 11))
    assert _steward("--script", str(env), "chat") == 0
    capsys.readouterr()
    assert _steward("sessions", "show", "cli:local") == 0
    shown = capsys.readouterr().out
    assert (
        "segments (12; /new starts one, the log keeps them all):\n  (2 earlier)\n"
        in shown
    )
    assert re.search(r"^  s2 from \S+Z: 1 messages$", shown, re.MULTILINE), shown
    assert re.search(r"^  s11 from \S+Z: 0 messages$", shown, re.MULTILINE), shown
    assert not re.search(r"^  s1 from", shown, re.MULTILINE)


def test_a_bad_session_id_is_one_line(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _steward("sessions", "send", "nocolon", "hi") == 2
    assert "is not CHANNEL:CHAT" in capsys.readouterr().err
    assert _steward("sessions", "show", "cli:none") == 2
    assert "no session 'cli:none'" in capsys.readouterr().err


def test_a_turn_sets_core_memory_and_searches_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memory tools in a turn: ``memory.core_set`` becomes the session's
    own event, ``memory.search`` finds an earlier message, ``core_get``
    reads what was set."""
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"replies": [act(type="send_message", message="Hi")]}))
    turn = [
        *PLAN,
        act(
            type="tool_call",
            name="memory.core_set",
            args={"key": "city", "value": "Kiel"},
        ),
        act(type="tool_call", name="memory.search", args={"query": "lighthouse"}),
        act(type="tool_call", name="memory.core_get", args={}),
        act(type="finish", output="Noted."),
    ]
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"replies": turn}))
    monkeypatch.setenv("STEWARD_SESSION_DEBOUNCE_MS", "10")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("the lighthouse is red\n"))
    assert _steward("--script", str(first), "chat") == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("I live in Kiel\n/memory\n"))
    assert _steward("--script", str(second), "chat") == 0
    assert capsys.readouterr().out.splitlines() == ["Hi", "Noted.", "city: Kiel"]
    results = asyncio.run(_tool_results(tmp_path / "log.db", "run.cli:local-t2"))
    assert [r.ok for r in results] == [True, True, True]
    found = json.loads(results[1].output)
    assert found[0]["text"] == "the lighthouse is red"
    assert found[0]["source"].startswith("message ")
    assert results[2].output == "city: Kiel"
    assert _steward("replay", "session.cli:local", "--verify") == 0


async def _tool_results(path: Path, stream: str) -> list[ToolResulted]:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        return [
            r.event for r in await log.read(stream) if isinstance(r.event, ToolResulted)
        ]


def test_the_memory_tools_outside_a_session_say_so(tmp_path: Path) -> None:
    async def call() -> str:
        async with await SqliteEventLog.open(
            tmp_path / "log.db", union=KINDS.union
        ) as log:
            ctx = ToolContext(
                workspace=tmp_path, stream="run.r1", actors=Host(log, kinds=KINDS)
            )
            registry = ToolRegistry.with_builtins(extra=KINDS.tools)
            outcome = await registry.call("memory.core_get", {}, ctx=ctx)
            assert not outcome.ok
            return outcome.error or ""

    assert "run.r1 belongs to no chat session" in asyncio.run(call())


def test_a_message_carries_what_its_sender_said_in_other_chats(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for chat, text in (("telegram:1", "I like tea"), ("slack:2", "and cake")):
        assert (
            _steward("sessions", "send", chat, text, "--sender", "ada", "--no-wait")
            == 0
        )
    assert (
        _steward("sessions", "send", "cli:3", "hi", "--sender", "ada", "--no-wait") == 0
    )
    assert (
        _steward("sessions", "send", "cli:4", "hi", "--sender", "bob", "--no-wait") == 0
    )
    messages = asyncio.run(_messages(env.parent / "log.db"))
    assert [(e.session_id, e.text) for e in messages["cli:3"].elsewhere] == [
        ("telegram:1", "I like tea"),
        ("slack:2", "and cake"),
    ]
    assert messages["cli:4"].elsewhere == ()


async def _messages(path: Path) -> dict[str, MessageReceived]:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        return {
            r.stream.removeprefix("session."): r.event
            for r in await log.read_all()
            if isinstance(r.event, MessageReceived)
        }


def test_a_turn_spawns_a_subagent_and_sets_a_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``subagent_spawn`` and ``schedule.*`` in a piped chat: the subagent's
    answer is printed as ``[NAME] text``; the schedule shows in
    ``sessions show`` and ``schedule.list``; both streams verify."""
    turn = [
        *PLAN,
        SPAWN_SCOUT,
        act(
            type="tool_call",
            name="schedule.create",
            args={"name": "daily", "cron": "0 9 * * *", "task": "Any news?"},
        ),
        act(type="tool_call", name="schedule.create", args={"name": "x", "cron": "?"}),
        act(type="tool_call", name="schedule.list", args={}),
        act(type="finish", output="On it."),
    ]
    script = tmp_path / "s.json"
    subagent = [*PLAN, act(type="finish", output="Two open issues.")]
    script.write_text(json.dumps({"replies": turn, "subagent_replies": subagent}))
    monkeypatch.setenv("STEWARD_SESSION_DEBOUNCE_MS", "10")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("scout, and news daily\n"))
    assert _steward("--script", str(script), "chat") == 0
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "On it.",
        "[scout] Two open issues.",
    ]
    results = asyncio.run(_tool_results(tmp_path / "log.db", "run.cli:local-t1"))
    assert [r.ok for r in results] == [True, True, False, True]
    assert "missing required field `task`" in (results[2].error or "")
    [listed] = json.loads(results[3].output)
    assert (listed["name"], listed["cron"], listed["task"]) == (
        "daily",
        "0 9 * * *",
        "Any news?",
    )
    assert _steward("sessions", "show", "cli:local") == 0
    shown = capsys.readouterr().out
    assert "schedules (1):\n  daily (0 9 * * *) next " in shown
    assert "subagent cli:local-s1 assistant: Two open issues." in shown
    for stream in ("session.cli:local", "run.cli:local-s1"):
        assert _steward("replay", stream, "--verify") == 0
    capsys.readouterr()
    assert _steward("replay", "session.cli:local") == 0
    events = int(capsys.readouterr().out.split(", ")[1].split()[0])
    assert _steward("fork", "session.cli:local", "--at", str(events)) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[-1] == "it keeps the schedules daily (0 9 * * *), which a serve fires"


def test_a_direct_chat_answers_with_one_model_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[session] direct_chats``: the chat's turns are the session's own
    model calls, no runs; the session replays."""
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"replies": ["Hi there.", "Still here."]}))
    monkeypatch.setenv("STEWARD_SESSION_DEBOUNCE_MS", "10")
    monkeypatch.setenv("STEWARD_SESSION_DIRECT_CHATS", "cli:quick,cli:other")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nstill there?\n"))
    assert _steward("--script", str(script), "chat", "--chat", "quick") == 0
    assert capsys.readouterr().out.splitlines() == ["Hi there.", "Still here."]
    assert asyncio.run(_streams(tmp_path / "log.db")) == ["session.cli:quick"]
    assert _steward("replay", "session.cli:quick", "--verify") == 0


async def _streams(path: Path) -> list[str]:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        return sorted(await log.streams(""))
