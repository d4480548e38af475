"""Tools and subagents from the command line: a model's bad command or bad path
never wedges a run, and tool approval set in steward.toml works end to end."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import steward_process, stop_all

from steward import events
from steward.actors.run import events as run_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

PLAN: list[dict[str, Any]] = [
    {"json": {"type": "note", "category": "requirements", "content": "r"}},
    {"json": {"type": "note", "category": "plan", "content": "p"}},
]
RUN_ID = re.compile(r"\br[0-9a-f]{12}\b")


def _steward(
    tmp: Path, *argv: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", "--db", str(tmp / "log.db"), *argv],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _script(tmp: Path, replies: list[dict[str, Any]], **options: Any) -> str:
    path = tmp / "script.json"
    path.write_text(json.dumps({"replies": replies, **options}))
    return str(path)


def _run_ids(listing: str) -> list[str]:
    return RUN_ID.findall(listing)


def test_a_subagent_with_an_unknown_profile_is_corrected_and_the_run_ends(
    tmp_path: Path,
) -> None:
    """A spawn naming a profile that is not configured creates no child: the
    model hears the known profiles and the run goes on to complete."""
    script = _script(
        tmp_path,
        [
            {
                "json": {
                    "type": "spawn_subagents",
                    "subagents": [{"task": "draft it", "profile": "writer"}],
                }
            },
            *PLAN,
            {"json": {"type": "finish", "output": "done alone"}},
        ],
    )
    ran = _steward(tmp_path, "--script", script, "run", "write a poem", timeout=30)
    assert ran.returncode == 0, ran.stderr
    (run_id,) = _run_ids(_steward(tmp_path, "runs", "list").stdout)
    shown = _steward(tmp_path, "runs", "show", run_id, "--prompts").stdout
    assert shown.split("\n", 1)[0].split()[2] == "completed"
    assert "SubagentsSpawned" not in shown
    assert "a subagent's `profile` 'writer' is not an agent profile; " in shown
    assert "known profiles: default" in shown
    verified = _steward(tmp_path, "replay", run_id, "--verify")
    assert verified.returncode == 0 and "verify: ok" in verified.stdout


def test_a_path_too_long_is_shown_to_the_model_and_the_run_completes(
    tmp_path: Path,
) -> None:
    """A files.write with a 300-character name is an error the model reads in
    its next prompt, not a failure of the run; its corrected call works."""
    long_name = "n" * 300
    script = _script(
        tmp_path,
        [
            *PLAN,
            {
                "json": {
                    "type": "files.write",
                    "path": long_name,
                    "content": "first try",
                }
            },
            {"json": {"type": "files.write", "path": "notes.md", "content": "ok"}},
            {"json": {"type": "finish", "output": "written"}},
        ],
    )
    ran = _steward(tmp_path, "--script", script, "run", "write notes", timeout=30)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert (tmp_path / "notes.md").read_text() == "ok"
    (run_id,) = _run_ids(_steward(tmp_path, "runs", "list").stdout)
    prompts = _steward(tmp_path, "runs", "show", run_id, "--prompts").stdout
    assert (
        f"Tool files.write failed: cannot use path {long_name[:60]!r}… "
        "(300 characters): File name too long" in prompts
    )


def _wait_until_waiting(tmp: Path, run_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = _steward(tmp, "runs", "list", "--status", "waiting").stdout
        if run_id in _run_ids(waiting):
            return
        time.sleep(0.1)
    shown = _steward(tmp, "runs", "show", run_id).stdout
    raise AssertionError(f"run {run_id} never waited:\n{shown}")


def _wait_for_end(tmp: Path, run_id: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = _steward(tmp, "runs", "show", run_id, "--prompts").stdout
        if shown.split("\n", 1)[0].split()[2:3] in (["completed"], ["failed"]):
            return shown
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never ended:\n{shown}")


def _start(tmp: Path, text: str) -> str:
    started = _steward(tmp, "runs", "start", text)
    assert started.returncode == 0, started.stderr
    return _run_ids(started.stdout)[0]


def test_a_tool_that_requires_approval_waits_for_approve_or_deny(
    tmp_path: Path,
) -> None:
    """With `[tools] require_approval = ["files.write"]`, a write waits for a
    person: `runs deny` skips it and tells the model why; `runs approve` runs it."""
    (tmp_path / "steward.toml").write_text(
        '[tools]\nrequire_approval = ["files.write"]\n'
    )
    script = _script(
        tmp_path,
        [
            *PLAN,
            {"json": {"type": "files.write", "path": "notes.md", "content": "hi"}},
            {"json": {"type": "finish", "output": "over"}},
        ],
        per_run=True,
    )
    server = steward_process(
        tmp_path, "--db", str(tmp_path / "log.db"), "--script", script, "serve"
    )
    try:
        denied = _start(tmp_path, "write notes, but be told no")
        _wait_until_waiting(tmp_path, denied)
        said = _steward(tmp_path, "runs", "deny", denied, "--reason", "not on a Friday")
        assert said.returncode == 0, said.stderr
        shown = _wait_for_end(tmp_path, denied)
        assert shown.split("\n", 1)[0].split()[2] == "completed", shown
        assert "A person denied the call to files.write: not on a Friday" in shown
        assert not (tmp_path / "notes.md").exists()

        approved = _start(tmp_path, "write notes")
        _wait_until_waiting(tmp_path, approved)
        assert not (tmp_path / "notes.md").exists()
        said = _steward(tmp_path, "runs", "approve", approved)
        assert said.returncode == 0, said.stderr
        shown = _wait_for_end(tmp_path, approved)
        assert shown.split("\n", 1)[0].split()[2] == "completed", shown
        assert (tmp_path / "notes.md").read_text() == "hi"
        assert "[tool_result files.write]\nwrote 2 bytes to notes.md" in shown
    except AssertionError as e:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=10)
        raise AssertionError(f"{e}\nserve said:\n{err.decode()[-3000:]}") from None
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.communicate()
    for run_id in (denied, approved):
        verified = _steward(tmp_path, "replay", run_id, "--verify")
        assert verified.returncode == 0 and "verify: ok" in verified.stdout


def _recorded(tmp: Path, run_id: str) -> list[type]:
    """The types of the events of run ``run_id`` in the log, read directly."""

    async def read() -> list[type]:
        async with await SqliteEventLog.open(tmp / "log.db", union=KINDS.union) as log:
            return [type(r.event) for r in await log.read(f"run.{run_id}")]

    return asyncio.run(read())


def test_a_run_takes_require_approval_when_it_is_created_not_from_its_host(
    tmp_path: Path,
) -> None:
    """`STEWARD_TOOLS_REQUIRE_APPROVAL=files.write steward serve` asks nothing
    of a run `runs start` created without the variable: `[tools]
    require_approval` is recorded in `RunCreated.settings` by the process
    that creates the run (docs/configuration.md, "Which settings a run
    takes"); the same serve asks for a run created with it."""
    script = _script(
        tmp_path,
        [
            *PLAN,
            {"json": {"type": "files.write", "path": "notes.md", "content": "hi"}},
            {"json": {"type": "finish", "output": "over"}},
        ],
        per_run=True,
    )
    approval = {"STEWARD_TOOLS_REQUIRE_APPROVAL": "files.write"}
    server = steward_process(
        tmp_path, "--db", str(tmp_path / "log.db"), "--script", script, "serve",
        **approval,
    )  # fmt: skip
    try:
        free = _start(tmp_path, "write notes")
        asked = subprocess.run(
            [sys.executable, "-m", "steward", "--db", str(tmp_path / "log.db")]
            + ["runs", "start", "write notes, asking"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, **approval},
        )
        assert asked.returncode == 0, asked.stderr
        (held,) = _run_ids(asked.stdout)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ended = run_events.RunCompleted in _recorded(tmp_path, free)
            if ended and run_events.ApprovalRequested in _recorded(tmp_path, held):
                break
            time.sleep(0.1)
        free_events = _recorded(tmp_path, free)
        assert run_events.RunCompleted in free_events, free_events
        assert run_events.ApprovalRequested not in free_events
        assert events.ToolResulted in free_events  # the write was made, unasked
        assert run_events.ApprovalRequested in _recorded(tmp_path, held)
    finally:
        stop_all([server])
