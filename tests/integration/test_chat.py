"""`steward chat` reads one message per line from a pipe, prints each answer,
and exits 0 at the end of input; the session it leaves replays and verifies."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from support import act

from steward import cli
from steward.bus import SqliteEventLog
from steward.events import RunCreated


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
        "unknown command /bogus; commands: /new, /model, /models, /memory, "
        "/status, /help",
    ]
    assert code == 0
    assert cli.main(["--db", "log.db", "replay", "session.cli:local", "--verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"


async def _created(path: Path, run_id: str) -> RunCreated:
    async with await SqliteEventLog.open(path) as log:
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
    assert [m.content for m in second.conversation] == ["hello", "Hello, Ada."]
    assert second.input_text == "remember me?"
    assert second.reply_to == "session.cli:local"
