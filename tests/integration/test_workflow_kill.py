"""`steward serve` killed with SIGKILL during a workflow's phase: the next
`serve` resumes the workflow where it was; the phase's run completes once
and the transition is taken once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.workflow import events as workflow_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

WORKFLOW = """
[workflow]
key = "two-phases"
version = 1

[[nodes]]
key = "design"
provider = "default"
prompt = "Design it."

[[nodes]]
key = "implement"
provider = "default"
prompt = "Build it."

[[edges]]
source = "design"
target = "implement"
priority = 1
auto = true
"""


def _finish(output: str, delay: float = 0.0) -> dict[str, object]:
    return {"json": {"type": "finish", "output": output}, "delay": delay}


def _serve(tmp: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "steward",
            "--db",
            "log.db",
            "--script",
            "s.json",
            "serve",
        ],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def _asked(log: SqliteEventLog, stream: str, seconds: float) -> bool:
    """Whether ``stream`` asks the model within ``seconds``."""
    for _ in range(int(seconds / 0.05)):
        if any(
            isinstance(r.event, events.LlmRequested) for r in await log.read(stream)
        ):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_sigkill_during_a_phase_resumes_the_workflow_where_it_was(
    tmp_path: Path,
) -> None:
    (tmp_path / "steward.toml").write_text("[run]\nplanning_gate = false\n")
    (tmp_path / "wf.toml").write_text(WORKFLOW)
    replies = [_finish("The design.", delay=3.0), _finish("Built.")]
    (tmp_path / "s.json").write_text(json.dumps({"replies": replies}))
    first = _serve(tmp_path)
    follower: subprocess.Popen[bytes] | None = None
    second: subprocess.Popen[bytes] | None = None
    try:
        assert first.stdout is not None
        banner = await asyncio.to_thread(first.stdout.readline)
        assert b"steward serving" in banner, banner
        follower = subprocess.Popen(  # recorded for the serve, followed in the log
            [sys.executable, "-m", "steward", "--db", "log.db", "--script", "s.json"]
            + ["workflow", "run", "wf.toml", "--id", "wf-kill"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
        try:
            assert await _asked(log, "run.wf-kill:design:1", 30)
            await asyncio.sleep(0.5)  # the 3 s model call is under way
            first.kill()
            first.communicate()
            assert not any(
                isinstance(r.event, run_events.RunCompleted)
                for r in await log.read("run.wf-kill:design:1")
            )
            second = _serve(tmp_path)  # takes the log over and resumes
            out, err = await asyncio.to_thread(follower.communicate, timeout=60)
            assert follower.returncode == 0, err.decode()[-2000:]
            assert out.decode().splitlines()[-1] == "wf-kill"
            workflow = await log.read("workflow.wf-kill")
            design = await log.read("run.wf-kill:design:1")
        finally:
            await log.close()
    finally:
        for process in (follower, first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.communicate()
    kinds = [type(r.event) for r in workflow]
    assert kinds.count(workflow_events.TransitionTaken) == 1
    assert (
        kinds.count(workflow_events.PhaseStarted) == 2
    )  # design, implement: no phase again
    assert kinds[-1] is workflow_events.WorkflowCompleted
    assert [type(r.event) for r in design].count(run_events.RunCompleted) == 1
    assert replay.verify(workflow, kinds=KINDS) is None
    assert replay.verify(design, kinds=KINDS) is None
