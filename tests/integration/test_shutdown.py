"""Stopping `steward serve` and `steward chat` (Klaw's graceful shutdown):
SIGTERM during a model call lets it finish and records its reply before
exit; SIGKILL during a debounce window loses no accepted message."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import PLAN, act

from steward import events
from steward.actors.session import events as session_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

DB = ("--db", "log.db")


def _script(path: Path, delay: float) -> None:
    replies = [
        {"text": reply, "delay": delay if n == len(PLAN) else 0.0}
        for n, reply in enumerate([*PLAN, act(type="finish", output="Slow answer.")])
    ]
    path.write_text(json.dumps({"replies": replies}))


def _serve(tmp: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "steward", *DB, "--script", "script.json", "serve"],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )


def _send(tmp: Path, text: str) -> None:
    argv = [*DB, "sessions", "send", "cli:s", text, "--no-wait"]
    sent = subprocess.run(
        [sys.executable, "-m", "steward", *argv], cwd=tmp, capture_output=True
    )
    assert sent.returncode == 0, sent.stderr.decode()


async def _until(log: SqliteEventLog, kind: type[events.Event], seconds: float) -> bool:
    """Whether an event of type ``kind`` is in the log within ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        if any(isinstance(r.event, kind) for r in await log.read_all()):
            return True
        await asyncio.sleep(0.05)
    return False


async def _in_the_slow_call(log: SqliteEventLog) -> None:
    """Wait until the third model call (after the plan notes), which takes
    2 s, has begun."""
    for _ in range(1500):
        asks = [
            r for r in await log.read_all() if isinstance(r.event, events.LlmRequested)
        ]
        if len(asks) == len(PLAN) + 1:
            break
        await asyncio.sleep(0.02)
    assert len(asks) == len(PLAN) + 1, "the slow call was never asked for"
    await asyncio.sleep(0.5)  # the call begins; it lasts 2 s


def _stop(server: subprocess.Popen[bytes], sig: int) -> tuple[str, str]:
    server.send_signal(sig)
    try:
        out, err = server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        out, err = server.communicate()
    return out.decode(), err.decode()


async def test_sigterm_during_a_model_call_lets_it_finish_and_records_its_reply(
    tmp_path: Path,
) -> None:
    _script(tmp_path / "script.json", delay=2.0)
    server = _serve(tmp_path, STEWARD_SESSION_DEBOUNCE_MS="10")
    try:
        assert server.stdout is not None
        banner = await asyncio.to_thread(server.stdout.readline)
        assert b"steward serving" in banner, banner
        _send(tmp_path, "take your time")
        log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
        try:
            await _in_the_slow_call(log)
            out, err = _stop(server, signal.SIGTERM)
            assert server.returncode == 0, err[-2000:]
            assert "stopping: letting what is in flight finish (1 calls" in out
            records = await log.read_all()
        finally:
            await log.close()
    finally:
        if server.poll() is None:
            server.kill()
    last_ask = [r.event for r in records if isinstance(r.event, events.LlmRequested)]
    answers = {
        r.event.request_id: r.event.text
        for r in records
        if isinstance(r.event, events.LlmResponded)
    }
    assert last_ask[-1].request_id in answers  # recorded before the exit
    assert [
        r.event.text for r in records if isinstance(r.event, session_events.ReplySent)
    ] == ["Slow answer."]


async def test_sigkill_during_a_debounce_window_loses_no_accepted_message(
    tmp_path: Path,
) -> None:
    _script(tmp_path / "script.json", delay=0.0)
    server = _serve(tmp_path, STEWARD_SESSION_DEBOUNCE_MS="3000")
    try:
        assert server.stdout is not None
        await asyncio.to_thread(server.stdout.readline)
        _send(tmp_path, "remember me")
        _stop(server, signal.SIGKILL)  # within the 3 s window
    finally:
        if server.poll() is None:
            server.kill()
    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    try:
        taken = [r.event for r in await log.read_all()]
        assert [type(e) for e in taken[-2:]] == [
            session_events.MessageReceived,
            session_events.DebounceArmed,
        ]
        assert not any(isinstance(e, session_events.TurnStarted) for e in taken)
        again = _serve(tmp_path, STEWARD_SESSION_DEBOUNCE_MS="3000")
        try:
            assert await _until(log, session_events.ReplySent, 20), (
                "no reply after restart"
            )
        finally:
            _stop(again, signal.SIGTERM)
        [turn] = [
            r.event
            for r in await log.read_all()
            if isinstance(r.event, session_events.TurnStarted)
        ]
        assert turn.text == "remember me"
    finally:
        await log.close()


async def test_sigterm_of_chat_during_a_model_call_prints_and_records_its_reply(
    tmp_path: Path,
) -> None:
    """`steward chat` stopped by SIGTERM while its turn's model call runs:
    the call finishes, its reply is recorded and printed, then it exits 130
    (as on Ctrl-C)."""
    _script(tmp_path / "script.json", delay=2.0)
    chat = subprocess.Popen(
        [sys.executable, "-m", "steward", *DB, "--script", "script.json", "chat"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "STEWARD_SESSION_DEBOUNCE_MS": "10",
        },
    )
    try:
        assert chat.stdin is not None
        chat.stdin.write(b"take your time\n")
        chat.stdin.flush()  # left open: the chat waits for the reply
        for _ in range(1500):
            if (tmp_path / "log.db").exists():
                break
            await asyncio.sleep(0.02)
        log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
        try:
            await _in_the_slow_call(log)
            out, err = _stop(chat, signal.SIGTERM)
            records = await log.read_all()
        finally:
            await log.close()
    finally:
        if chat.poll() is None:
            chat.kill()
    assert chat.returncode == 130, err[-2000:]
    assert out.splitlines()[-1] == "Slow answer.", out
    assert [
        r.event.text for r in records if isinstance(r.event, session_events.ReplySent)
    ] == ["Slow answer."]
