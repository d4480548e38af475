"""`steward chat` in a terminal prints a reply as the model writes it.

The chat runs in a pseudo-terminal; its model is the real `openai` SDK
against a local server that sends the first piece of the reply, then holds
the rest until the test has seen that piece on the terminal. The reply is a
JSON finish action, and the chat prints its output, not the JSON, once.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import KEY
from fake_api import FakeAPI, openai_frames, sse_reply

pytestmark = pytest.mark.slow

REPLY = "Hello from a model that takes its time."


def _read_until(fd: int, needle: bytes, seen: bytearray, seconds: float) -> bool:
    """Read the terminal into ``seen`` until it holds ``needle``."""
    deadline = time.monotonic() + seconds
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return False
        try:
            seen += os.read(fd, 4096)
        except OSError:  # the chat closed the terminal
            return needle in seen
    return True


def test_a_reply_streams_to_the_terminal_as_the_model_writes_it(
    tmp_path: Path,
) -> None:
    action = json.dumps({"type": "finish", "output": REPLY})
    first, rest = action.index("Hello") + len("Hello"), action.index(" takes")
    pieces = [action[:first], action[first:rest], action[rest:]]
    api = FakeAPI()
    api.queue(sse_reply(openai_frames(pieces), hold=2))  # role, first piece
    (tmp_path / "steward.toml").write_text(
        "[run]\nplanning_gate = false\n\n"
        "[session]\ndebounce_ms = 10\n\n"
        "[models.default]\n"
        'provider = "openai"\nmodel = "gpt-test"\n'
        f'base_url = "{api.url}/v1"\n'
    )
    main, terminal = pty.openpty()
    with (tmp_path / "stderr").open("wb") as stderr:
        chat = subprocess.Popen(
            [sys.executable, "-m", "steward", "--db", "log.db", "chat"],
            cwd=tmp_path,
            stdin=terminal,
            stdout=terminal,
            stderr=stderr,
            env={**os.environ, "OPENAI_API_KEY": KEY, "PYTHONUNBUFFERED": "1"},
        )
    os.close(terminal)
    seen = bytearray()
    try:
        assert _read_until(main, b"> ", seen, 30), seen.decode()
        os.write(main, b"hello there\n")
        assert _read_until(main, b"Hello", seen, 30), seen.decode()
        assert b"takes its time" not in seen  # the rest is not written yet
        assert b'"type"' not in seen  # the output of the action, not its JSON
        api.release.set()
        assert _read_until(main, b"time.\r\n> ", seen, 30), seen.decode()
        os.write(main, b"\x04")  # Ctrl-D
        assert chat.wait(30) == 0, (tmp_path / "stderr").read_text()
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
        api.close()
        os.close(main)
    shown = seen.decode()
    assert shown.count(REPLY) == 1, shown  # streamed, and not printed again
    assert len(api.requests) == 1
