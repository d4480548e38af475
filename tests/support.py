"""Helpers shared by test modules (importable as ``support``)."""

from __future__ import annotations

import json
import os
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
