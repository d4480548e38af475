"""A task program's host killed with SIGKILL between two atomic calls: the
next `steward serve` resumes the task where it was, without calling the
finished call again; and a fork between the two calls continues from there."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from steward import replay
from steward.actors.task.events import CallFinished, TaskCompleted
from steward.bus import SqliteEventLog
from steward.events import LlmRequested, LlmResponded
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

PROGRAM = '(bind d (draft "owls")) (review d)'
TEMPLATES = {
    "draft.toml": 'params = ["topic"]\ninstructions = "Write about {{topic}}."\n',
    "review.toml": 'params = ["text"]\ninstructions = "Review: {{text}}"\n',
}


def _steward(tmp: Path, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "steward",
            "--db",
            "log.db",
            "--script",
            "s.json",
            *argv,
        ],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _files(tmp: Path) -> None:
    (tmp / "templates").mkdir()
    for name, text in TEMPLATES.items():
        (tmp / "templates" / name).write_text(text)
    (tmp / "prog.sexp").write_text(PROGRAM)
    replies = [
        {"text": "A draft about owls."},
        {"text": "Looks good.", "delay": 3.0},  # the second call, under way
    ]
    (tmp / "s.json").write_text(json.dumps({"replies": replies}))


async def _until(log: SqliteEventLog, stream: str, done: type, n: int = 1) -> None:
    for _ in range(600):
        if sum(isinstance(r.event, done) for r in await log.read(stream)) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream} recorded no {done.__name__}")


def _stop(*processes: subprocess.Popen[bytes] | None) -> None:
    for process in processes:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


async def test_a_sigkill_between_two_calls_resumes_without_calling_the_first_again(
    tmp_path: Path,
) -> None:
    _files(tmp_path)
    runner = _steward(tmp_path, "task", "run", "prog.sexp", "--id", "t1")
    serve: subprocess.Popen[bytes] | None = None
    log = None
    try:
        for _ in range(600):  # the runner hosts the log it makes
            if (tmp_path / "log.db").exists():
                break
            await asyncio.sleep(0.05)
        log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
        await _until(log, "task.t1", LlmRequested, 2)  # call 2 asked, 3 s to go
        runner.kill()
        runner.communicate()
        assert not any(
            isinstance(r.event, TaskCompleted) for r in await log.read("task.t1")
        )
        serve = _steward(tmp_path, "serve")
        await _until(log, "task.t1", TaskCompleted)
        records = await log.read("task.t1")
    finally:
        if log is not None:
            await log.close()
        _stop(runner, serve)
    finished = [r.event for r in records if isinstance(r.event, CallFinished)]
    assert [f.content for f in finished] == ["A draft about owls.", "Looks good."]
    asked = [r.event for r in records if isinstance(r.event, LlmRequested)]
    assert len(asked) == 2  # the first call was not asked again
    assert replay.verify(records, kinds=KINDS) is None


async def test_a_fork_between_two_calls_continues_from_there(tmp_path: Path) -> None:
    """Forked after its first call, the task asks only the second again (the
    serve's scripted model plays the script from the fork's second call);
    the fork's first call's result is the one copied."""
    _files(tmp_path)
    (tmp_path / "s.json").write_text(
        json.dumps({"replies": ["A draft about owls.", "Looks good."]})
    )
    run = _steward(tmp_path, "task", "run", "prog.sexp", "--id", "t1")
    out, err = await asyncio.to_thread(run.communicate, timeout=60)
    assert run.returncode == 0, err.decode()[-2000:]
    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    try:
        records = await log.read("task.t1")
    finally:
        await log.close()
    # the step that records call 1's result and asks for call 2 ends here
    second = next(
        r.version
        for r in records
        if isinstance(r.event, LlmRequested) and r.event.iteration == 2
    )
    fork = _steward(tmp_path, "fork", "task.t1", "--at", str(second))
    out, err = await asyncio.to_thread(fork.communicate, timeout=60)
    assert fork.returncode == 0, err.decode()[-2000:]
    forked = out.decode().splitlines()[0].split()[-1]
    assert forked.startswith("task.t1-fork"), out
    serve = _steward(tmp_path, "serve")
    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    try:
        await _until(log, forked, TaskCompleted)
        copy = await log.read(forked)
    finally:
        await log.close()
        _stop(serve)
    finished = [r.event for r in copy if isinstance(r.event, CallFinished)]
    assert [f.content for f in finished] == ["A draft about owls.", "Looks good."]
    asked = [r.event.request_id for r in copy if isinstance(r.event, LlmRequested)]
    fork_id = forked.removeprefix("task.")
    assert asked == [f"{fork_id}/llm/1", f"{fork_id}/llm/2"]
    answered = [r for r in copy if isinstance(r.event, LlmResponded)]
    assert answered[-1].version > second  # answered after the copy, by the serve
    assert replay.verify(copy, kinds=KINDS) is None
