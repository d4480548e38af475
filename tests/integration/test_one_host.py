"""One host per SQLite log, and foreground commands that say how their run stands.

Real `steward` processes on one log file: a `serve` hosts it, and `run`,
`fork` and `runs start` beside it hand their runs to it; a second `serve` is
refused; Ctrl-C and a run waiting for a person end `run` with a sentence
saying how the run goes on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from steward import events, replay
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

RUNS = 3


def _script(path: Path, *, delay: float = 0.2) -> Path:
    """Each run notes, appends a line to out.txt (a side effect to count), and
    finishes."""

    def reply(**command: object) -> dict[str, object]:
        return {"json": command, "delay": delay}

    replies = [
        reply(type="note", category="requirements", content="r"),
        reply(type="note", category="plan", content="p"),
        reply(
            type="tool_call",
            name="files.write",
            args={"path": "out.txt", "content": "line\n", "mode": "append"},
        ),
        reply(type="finish", output="done"),
    ]
    path.write_text(json.dumps({"per_run": True, "replies": replies}))
    return path


def _steward(tmp: Path, *argv: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "steward", "--db", str(tmp / "log.db"), *argv],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )


def _wait_for_line(stream: IO[str] | None, text: str) -> str:
    """Read ``stream`` until a line containing ``text``; that line."""
    assert stream is not None
    for line in stream:
        if text in line:
            return line
    raise AssertionError(f"the output ended before a line with {text!r}")


def _serve(tmp: Path) -> subprocess.Popen[str]:
    serve = _steward(tmp, "--script", str(tmp / "script.json"), "serve")
    _wait_for_line(serve.stdout, "steward serving")
    return serve


def _stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM ``process`` (if it runs); its standard error."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return err


async def _runs(db: Path) -> dict[str, list[events.Recorded]]:
    async with await SqliteEventLog.open(db, union=KINDS.union) as log:
        return {s: await log.read(s) for s in await log.streams("run.")}


async def test_runs_beside_a_serve_are_carried_out_once(tmp_path: Path) -> None:
    """`steward run`s beside a `serve` hand it their runs and follow them: every
    tool call happens once, every run completes and verifies, and a second
    `serve` on the file is refused naming the first."""
    _script(tmp_path / "script.json")
    serve = _serve(tmp_path)
    try:
        runs = [
            _steward(tmp_path, "--script", "script.json", "run", f"go {n}")
            for n in range(RUNS)
        ]
        results = [run.communicate(timeout=60) for run in runs]
        second = _steward(tmp_path, "--script", "script.json", "serve")
        _, refused = second.communicate(timeout=30)
    finally:
        for process in (serve, *runs):
            _stop(process)
    for run, (out, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, err
        *_, status, output = out.strip().splitlines()
        assert status.startswith("run ") and status.endswith(" completed"), out
        assert output == "done"
        assert "ToolResulted      ok: appended 5 bytes to out.txt" in out
    assert (tmp_path / "out.txt").read_text() == "line\n" * RUNS
    streams = await _runs(tmp_path / "log.db")
    assert len(streams) == RUNS
    for stream, records in streams.items():
        assert replay.rebuild(records, kinds=KINDS).status == "completed", stream
        kinds = [type(r.event).__name__ for r in records]
        assert kinds[:3] == ["RunCreated", "RunTaken", "RunStarted"], stream
        assert replay.verify(records, kinds=KINDS) is None, stream
    assert second.returncode == 2
    assert refused.startswith(
        f"steward: the log {tmp_path / 'log.db'} is hosted by pid {serve.pid} "
        "(steward --db"
    ), refused
    assert "stop that process first, or hand it work with `steward runs start`" in (
        refused
    )
    assert len(refused.strip().splitlines()) == 1


async def test_a_fork_beside_a_serve_is_carried_out_once(tmp_path: Path) -> None:
    """`steward fork` beside a `serve` copies the run and hands it over: the
    serve makes only the calls after the fork point, once each."""
    _script(tmp_path / "script.json")
    serve = _serve(tmp_path)
    try:
        run = _steward(tmp_path, "--script", "script.json", "run", "go")
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        run_id = out.strip().splitlines()[-2].split()[1]
        records = (await _runs(tmp_path / "log.db"))[f"run.{run_id}"]
        # the step of the tool's result, which asks the model again
        at = 1 + next(
            r.version for r in records if isinstance(r.event, events.ToolResulted)
        )
        fork = _steward(
            tmp_path, "--script", "script.json", "fork", run_id, "--at", str(at)
        )
        out, err = fork.communicate(timeout=60)
    finally:
        for process in (serve, run):
            _stop(process)
    assert fork.returncode == 0, err
    assert out.strip().splitlines()[-2].endswith(" completed"), out
    # the fork goes on with its script where its copy ends: its next reply
    # is the finish, so only the original appended its line
    assert (tmp_path / "out.txt").read_text() == "line\n"
    for stream, records in (await _runs(tmp_path / "log.db")).items():
        assert replay.rebuild(records, kinds=KINDS).status == "completed", stream
        assert replay.verify(records, kinds=KINDS) is None, stream


def test_ctrl_c_on_run_says_how_the_run_goes_on(tmp_path: Path) -> None:
    """Ctrl-C on `steward run` exits 130 and names the run it left, with the
    two ways on: `steward serve` resumes it, `runs cancel` ends it."""
    _script(tmp_path / "script.json", delay=30.0)
    run = _steward(tmp_path, "--script", "script.json", "run", "slow")
    try:
        line = _wait_for_line(run.stdout, "LlmRequested")
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    run_id = line.split()[0]
    assert run.returncode == 130
    assert err == (
        f"interrupted: run {run_id} is left running; `steward serve` resumes it; "
        f"`steward runs cancel {run_id}` ends it\n"
    )


def test_ctrl_c_on_run_beside_a_serve_leaves_the_run_to_it(tmp_path: Path) -> None:
    """Ctrl-C on a `steward run` that handed its run to a `serve` says the run
    goes on there, naming the serve."""
    _script(tmp_path / "script.json", delay=1.0)
    serve = _serve(tmp_path)
    try:
        run = _steward(tmp_path, "--script", "script.json", "run", "handed over")
        line = _wait_for_line(run.stdout, "LlmRequested")
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=30)
    finally:
        for process in (serve, run):
            _stop(process)
    run_id = line.split()[0]
    assert run.returncode == 130
    assert err.startswith(
        f"interrupted: run {run_id} goes on in the host that has the log "
        f"(pid {serve.pid} (steward --db"
    ), err
    assert err.endswith(f"; `steward runs cancel {run_id}` ends it\n")


def test_a_run_paused_on_its_budget_returns_4(tmp_path: Path) -> None:
    """`steward run` whose run pauses on its budget says so, names `runs
    approve|deny`, and exits 4 instead of waiting in silence."""
    _script(tmp_path / "script.json")
    run = _steward(
        tmp_path,
        "--script",
        "script.json",
        "run",
        "spend",
        STEWARD_RUN_TOKEN_BUDGET="10",
        STEWARD_RUN_BUDGET_POLICY="pause",
    )
    try:
        out, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 4, err
    waiting, then = out.strip().splitlines()[-2:]
    run_id = waiting.split()[1]
    assert waiting == (
        f"run {run_id} is waiting for a person: its budget is spent: `steward runs "
        f"approve {run_id}` lifts it, `steward runs deny {run_id} --reason WHY` "
        "fails the run"
    )
    assert then == "a running `steward serve` carries the run on from there"


def test_runs_start_with_no_host_says_the_run_waits(tmp_path: Path) -> None:
    """`runs start` with no host records the run pending, says no host took it
    within --wait, exits 0; a serve started later takes it, and it verifies."""
    _script(tmp_path / "script.json")
    start = _steward(tmp_path, "runs", "start", "later", "--wait", "0.5")
    out, err = start.communicate(timeout=30)
    assert start.returncode == 0, err
    run_id = out.strip()
    assert err == (
        f"run {run_id} is queued, but no host took it within 0.5s; start `steward "
        f"serve` on {tmp_path / 'log.db'} to run it\n"
    )
    listed = _steward(tmp_path, "runs", "list", "--status", "pending")
    assert run_id in listed.communicate(timeout=30)[0]

    serve = _serve(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            shown = _steward(tmp_path, "runs", "list", "--status", "completed")
            if run_id in shown.communicate(timeout=30)[0]:
                break
            time.sleep(0.2)
    finally:
        _stop(serve)
    verify = _steward(tmp_path, "replay", run_id, "--verify")
    out, _ = verify.communicate(timeout=30)
    assert verify.returncode == 0 and "verify: ok" in out, out


def test_a_serve_beside_a_run_is_told_the_run_hosts_only_itself(
    tmp_path: Path,
) -> None:
    """A `serve` refused because a `steward run` holds the log says that the
    holder hosts only its own run, and when this can start."""
    script = _script(tmp_path / "script.json", delay=1.0)
    run = _steward(tmp_path, "--script", str(script), "run", "slow")
    try:
        assert run.stdout is not None
        run.stdout.readline()  # the run is created: its host holds the log
        second = _steward(tmp_path, "--script", str(script), "serve")
        _, refused = second.communicate(timeout=30)
    finally:
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=30)
    assert second.returncode == 2
    assert f"is held by pid {run.pid}" in refused, refused
    assert "hosts only its run" in refused and "start this when it ends" in refused
