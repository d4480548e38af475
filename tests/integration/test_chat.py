"""`steward chat` reads one message per line from a pipe, prints each answer,
and exits 0 at the end of input; the session it leaves replays and verifies."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest
from support import PLAN, SPAWN_SCOUT, act, children_started

from steward import cli
from steward.actors.run.events import RunCreated
from steward.actors.session.events import MessageReceived, SubagentAnswered
from steward.bus import SqliteEventLog
from steward.events import Recorded
from steward.hostlock import HostLock
from steward.kinds import KINDS


@pytest.fixture
def chat_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A script whose model greets; a short debounce."""
    script = tmp_path / "s.json"
    reply = act(type="send_message", message="Hello, Ada.")
    script.write_text(json.dumps({"replies": [{"text": reply}]}))
    monkeypatch.setenv("STEWARD_SESSION_DEBOUNCE_MS", "20")
    monkeypatch.chdir(tmp_path)
    return script


def _chat(monkeypatch: pytest.MonkeyPatch, script: Path, lines: str, *argv: str) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    return cli.main(["--db", "log.db", "--script", str(script), "chat", *argv])


def test_piped_chat_prints_each_answer_and_exits_0(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _chat(monkeypatch, chat_env, "hello\n/model\n\n/bogus\n")
    assert capsys.readouterr().out.splitlines() == [
        "Hello, Ada.",
        "model: default",
        "an empty message was not taken: send some text, or /help",
        "unknown command /bogus; commands: /new, /model, /models, /memory, "
        "/status, /help",
    ]
    assert code == 0
    assert cli.main(["--db", "log.db", "replay", "session.cli:local", "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"


async def _records(path: Path, stream: str) -> list[Recorded]:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        return await log.read(stream)


async def _created(path: Path, run_id: str) -> RunCreated:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        first = (await log.read(f"run.{run_id}"))[0].event
    assert isinstance(first, RunCreated)
    return first


def test_a_second_chat_continues_the_session(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The session outlives the process: the next chat's turn sees the first
    exchange in its window."""
    assert _chat(monkeypatch, chat_env, "hello\n") == 0
    later = chat_env.parent / "later.json"  # a script starts anew in each process
    reply = act(type="send_message", message="You said hello before.")
    later.write_text(json.dumps({"replies": [{"text": reply}]}))
    assert _chat(monkeypatch, later, "remember me?\n") == 0
    assert capsys.readouterr().out.splitlines() == [
        "Hello, Ada.",
        "You said hello before.",
    ]
    second = asyncio.run(_created(chat_env.parent / "log.db", "cli:local-t2"))
    assert [m.content for m in second.conversation] == [
        "hello",
        "Hello, Ada.",
        "remember me?",  # what the turn answers, last
    ]
    assert second.input_text == "remember me?"
    assert second.reply_to == "session.cli:local"


def test_a_forked_session_is_a_chat_of_its_own(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`fork session.cli:local --at N` copies the chat up to N into a session
    whose ids are its own (its turns', its timers'), on a chat of its own:
    the fork verifies, takes messages, and its turn sees the copied history;
    the original is untouched."""
    assert _chat(monkeypatch, chat_env, "hello\n") == 0
    capsys.readouterr()
    argv = ["--db", "log.db", "fork", "session.cli:local", "--at", "7"]
    assert cli.main(argv) == 0
    forked = capsys.readouterr().out.splitlines()[0].split()[-1]
    assert forked.startswith("session.cli:local-fork")
    assert cli.main(["--db", "log.db", "replay", forked, "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"
    session_id = forked.partition(".")[2]
    chat_id = session_id.partition(":")[2]
    # its finished turn is not run again, by a running host or a later one
    copy = asyncio.run(_records(chat_env.parent / "log.db", forked))
    assert children_started(copy) == ([], [])
    later = chat_env.parent / "later.json"
    reply = act(type="send_message", message="A fork remembers.")
    later.write_text(json.dumps({"replies": [{"text": reply}]}))
    assert _chat(monkeypatch, later, "still there?\n", "--chat", chat_id) == 0
    assert capsys.readouterr().out.splitlines() == ["A fork remembers."]
    second = asyncio.run(_created(chat_env.parent / "log.db", f"{session_id}-t2"))
    # the original's messages are not the sender's in another chat to it
    assert [m.content for m in second.conversation] == [
        "hello",
        "Hello, Ada.",
        "still there?",
    ]
    assert second.reply_to == forked
    assert cli.main(["--db", "log.db", "replay", "session.cli:local"]) == 0
    assert "kind session, 7 events" in capsys.readouterr().out
    # nor the fork's to the original
    assert _chat(monkeypatch, later, "and you?\n") == 0
    original = asyncio.run(_records(chat_env.parent / "log.db", "session.cli:local"))
    [*_, asked] = [r.event for r in original if isinstance(r.event, MessageReceived)]
    assert asked.text == "and you?" and asked.elsewhere == ()


def test_a_session_forked_inside_its_turn_finishes_that_turn_as_its_own(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fork at the commit that started a turn has that turn in flight,
    under the fork's run id: the next host creates the run and its reply
    reaches the fork."""
    assert _chat(monkeypatch, chat_env, "hello\n") == 0
    capsys.readouterr()
    assert cli.main(["--db", "log.db", "fork", "session.cli:local", "--at", "5"]) == 0
    forked = capsys.readouterr().out.splitlines()[0].split()[-1]
    session_id = forked.partition(".")[2]
    code = _chat(monkeypatch, chat_env, "", "--chat", session_id.partition(":")[2])
    assert code == 0
    turn = asyncio.run(_created(chat_env.parent / "log.db", f"{session_id}-t1"))
    assert turn.input_text == "hello"
    assert cli.main(["--db", "log.db", "replay", forked, "--verify"]) == 0
    out = capsys.readouterr().out
    assert "turn: null" in out and '"content":"Hello, Ada."' in out


def test_control_characters_of_a_message_are_shown_escaped(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Text from outside reaches the terminal with its control characters
    written as escapes (no escape sequence runs), and is recorded as sent."""
    assert _chat(monkeypatch, chat_env, "a\x1b[31mred\x07\n") == 0
    assert cli.main(["--db", "log.db", "sessions", "show", "cli:local"]) == 0
    out = capsys.readouterr().out
    assert "user: a\\u001b[31mred\\u0007" in out
    assert "\x1b" not in out and "\x07" not in out
    turn = asyncio.run(_created(chat_env.parent / "log.db", "cli:local-t1"))
    assert turn.input_text == "a\x1b[31mred\x07"


async def _subagent_answers(path: Path) -> list[SubagentAnswered]:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        return [
            r.event
            for r in await log.read("session.cli:local")
            if isinstance(r.event, SubagentAnswered)
        ]


def _chat_with_subagent(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str,
) -> tuple[SubagentAnswered, list[str]]:
    """A piped chat whose turn spawns subagent ``scout``, which answers
    ``answer``: the session's `SubagentAnswered` and the lines printed,
    sorted (the subagent's answer may come before the turn's reply or after
    it). The chat exits once what runs has finished, and prints what the
    session recorded by then, so an answer it does not print was recorded
    and left out."""
    turn = [
        *PLAN,
        SPAWN_SCOUT,
        act(type="finish", output="On it."),
    ]
    subagent = [*PLAN, act(type="finish", output=answer)]
    script = chat_env.parent / "subagent.json"
    script.write_text(json.dumps({"replies": turn, "subagent_replies": subagent}))
    assert _chat(monkeypatch, script, "scout, count the issues\n") == 0
    printed = sorted(capsys.readouterr().out.splitlines())
    [told] = asyncio.run(_subagent_answers(chat_env.parent / "log.db"))
    assert told.text == answer and told.name == "scout"
    return told, printed


def test_chat_does_not_print_a_silent_subagent_answer(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A subagent's ``{"silent": true}`` is recorded, and not printed."""
    silent = json.dumps({"silent": True, "note": "nothing new"})
    told, printed = _chat_with_subagent(chat_env, monkeypatch, capsys, silent)
    assert told.silent
    assert printed == ["On it."]


@pytest.mark.parametrize(
    "answer",
    ["Two open issues.", '{"silent": false, "issues": 2}'],
    ids=["plain-text", "silent-false"],
)
def test_chat_prints_a_subagent_answer_that_is_not_silent(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str,
) -> None:
    """A subagent's other answers are printed as ``[NAME] text``."""
    told, printed = _chat_with_subagent(chat_env, monkeypatch, capsys, answer)
    assert not told.silent
    assert printed == sorted(["On it.", f"[scout] {answer}"])


def test_chat_beside_a_serve_needs_no_model_of_its_own(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Beside a process hosting the log, `chat` makes no model call, so no
    model need be configured for it; hosting the log itself, it needs one,
    and says so in one line."""
    assert _chat(monkeypatch, chat_env, "hello\n") == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO("/model\n"))
    serving = HostLock(chat_env.parent / "log.db")  # as a serve holds it
    assert serving.acquire()
    try:
        assert cli.main(["--db", "log.db", "chat"]) == 0
    finally:
        serving.release()
    assert capsys.readouterr().out.splitlines() == ["model: default"]
    monkeypatch.setattr("sys.stdin", io.StringIO("/model\n"))
    assert cli.main(["--db", "log.db", "chat"]) == 2
    assert "no model is configured" in capsys.readouterr().err


def test_a_fork_id_is_its_origin_and_one_fork_suffix(
    chat_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An id that holds "-fork" keeps it; a fork of a fork gets a new suffix
    in place of its own, not a second one."""
    assert _chat(monkeypatch, chat_env, "hello\n", "--chat", "my-forklift") == 0
    capsys.readouterr()
    argv = ["--db", "log.db", "fork", "session.cli:my-forklift", "--at", "7"]
    assert cli.main(argv) == 0
    forked = capsys.readouterr().out.splitlines()[0].split()[-1]
    assert re.fullmatch(r"session\.cli:my-forklift-fork[0-9a-f]{6}", forked)
    assert cli.main(["--db", "log.db", "fork", forked, "--at", "7"]) == 0
    again = capsys.readouterr().out.splitlines()[0].split()[-1]
    assert re.fullmatch(r"session\.cli:my-forklift-fork[0-9a-f]{6}", again)
    assert again != forked
