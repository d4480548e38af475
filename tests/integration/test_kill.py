"""`steward serve` killed with SIGKILL mid-run loses nothing and repeats
nothing: not a call, and not a reply of a run's script."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from support import steward_process, stop_all

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import SqliteEventLog
from steward.config import load_settings
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

RUNS = 12


def _script(path: Path) -> None:
    def act(**command: object) -> dict[str, object]:
        return {"json": command, "delay": 0.05}

    replies = [
        act(type="note", category="requirements", content="r"),
        act(type="note", category="plan", content="p"),
        act(
            type="tool_call",
            name="files.write",
            args={"path": "out.txt", "content": "x"},
        ),
        act(type="decision", content="one"),
        act(type="decision", content="two"),
        act(type="set_output", output="partial"),
        act(type="finish", output="done", mode="append"),
    ]
    path.write_text(json.dumps({"per_run": True, "replies": replies}))


def _serve(tmp: Path) -> subprocess.Popen[bytes]:
    return steward_process(
        tmp, "--db", str(tmp / "log.db"), "--script", str(tmp / "script.json"), "serve"
    )


async def _statuses(log: SqliteEventLog) -> Counter[str]:
    host = Host(log, kinds=KINDS)
    result: Counter[str] = Counter()
    for stream in await log.streams("run."):
        state, _ = await host.state(stream)
        result[state.status] += 1
    return result


async def test_sigkill_mid_run_then_restart_completes_every_run(tmp_path: Path) -> None:
    """Kill -9 the server mid-way; a new one finishes every run exactly once."""
    _script(tmp_path / "script.json")
    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    try:
        settings = load_settings(None, env={}).run_settings(
            "default", ToolRegistry.with_builtins().specs()
        )
        starter = Host(log, kinds=KINDS)
        for n in range(RUNS):
            start = run_events.RunCreated(
                run_id=f"k{n}", input_text="go", settings=settings
            )
            await starter.submit(run_stream(f"k{n}"), start)

        server = _serve(tmp_path)
        try:
            for _ in range(400):  # wait until work is visibly under way
                await asyncio.sleep(0.025)
                if (await log.head()) > RUNS * 8:
                    break
            server.send_signal(signal.SIGKILL)
            server.wait(10)
        finally:
            if server.poll() is None:
                server.kill()
            server.communicate()
        mid = await _statuses(log)
        assert mid["completed"] < RUNS, f"killed too late to test anything: {mid}"

        server = _serve(tmp_path)
        try:
            for _ in range(1200):
                await asyncio.sleep(0.025)
                if (await _statuses(log))["completed"] == RUNS:
                    break
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                _, err = server.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                _, err = server.communicate()
        assert (await _statuses(log))["completed"] == RUNS, err.decode()[-2000:]

        for stream in await log.streams("run."):
            records = await log.read(stream)
            assert [r.version for r in records] == list(range(1, len(records) + 1))
            answered = Counter(
                r.event.request_id
                for r in records
                if isinstance(r.event, events.LlmResponded | events.ToolResulted)
            )
            assert set(answered.values()) == {1}, f"{stream}: {answered}"
            requested = [
                r.event.request_id
                for r in records
                if isinstance(r.event, events.LlmRequested | events.ToolRequested)
            ]
            assert sorted(requested) == sorted(answered), stream
            assert replay.verify(records, kinds=KINDS) is None, stream
            assert replay.rebuild(records, kinds=KINDS).output == "partialdone"
            # the new serve went on with each run's script where it was: one
            # model call per reply, none played twice
            calls = [r for r in records if isinstance(r.event, events.LlmRequested)]
            assert len(calls) == 7, stream
    finally:
        await log.close()


async def test_a_scripted_run_left_on_ctrl_c_goes_on_under_serve(
    tmp_path: Path,
) -> None:
    """`steward --script s run` stopped by Ctrl-C while its third call is in
    flight; `steward --script s serve` makes that call with the script's
    third reply (the script is not per_run), and the run completes with
    three calls, not a script played from the top."""

    def reply(delay: float = 0.0, **command: object) -> dict[str, object]:
        return {"json": command, "delay": delay}

    replies = [
        reply(type="note", category="requirements", content="r"),
        reply(type="note", category="plan", content="p"),
        reply(1.0, type="finish", output="done"),
    ]
    (tmp_path / "s.json").write_text(json.dumps({"replies": replies}))
    base = ["--db", str(tmp_path / "log.db"), "--script", str(tmp_path / "s.json")]
    run = steward_process(tmp_path, *base, "run", "go")
    try:
        for _ in range(400):
            await asyncio.sleep(0.025)
            if len(await _calls(tmp_path / "log.db")) == 3:
                break
        run.send_signal(signal.SIGINT)
        assert run.wait(20) == 130
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()
    serve = steward_process(tmp_path, *base, "serve")
    try:
        for _ in range(400):
            await asyncio.sleep(0.025)
            if await _statuses_in(tmp_path / "log.db") == Counter(completed=1):
                break
    finally:
        (err,) = stop_all([serve])
    assert await _statuses_in(tmp_path / "log.db") == Counter(completed=1), err
    assert len(await _calls(tmp_path / "log.db")) == 3


async def _calls(db: Path) -> list[events.LlmRequested]:
    async with await SqliteEventLog.open(db, union=KINDS.union) as log:
        return [
            r.event
            for s in await log.streams("run.")
            for r in await log.read(s)
            if isinstance(r.event, events.LlmRequested)
        ]


async def _statuses_in(db: Path) -> Counter[str]:
    async with await SqliteEventLog.open(db, union=KINDS.union) as log:
        return await _statuses(log)
