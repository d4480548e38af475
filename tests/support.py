"""Helpers shared by test modules (importable as ``support``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


def act(**command: Any) -> str:
    """A JSON-protocol reply, e.g. ``act(type="note", category="plan", ...)``."""
    return json.dumps(command)


PLAN = [
    act(type="note", category="requirements", content="what is asked"),
    act(type="note", category="plan", content="how to do it"),
]


def steward_process(cwd: Path, *argv: str, **env: str) -> subprocess.Popen[bytes]:
    """``python -m steward ARGV`` started in ``cwd`` with ``env`` added; its
    stdout is dropped and its stderr kept for the test to show."""
    return subprocess.Popen(
        [sys.executable, "-m", "steward", *argv],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )


def stop_all(processes: list[subprocess.Popen[bytes]]) -> list[str]:
    """SIGTERM each process still running, wait up to 15 s each (then kill
    it); the tail of each one's standard error."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    errors = []
    for process in processes:
        try:
            _, err = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        errors.append((err or b"").decode()[-1500:])
    return errors
