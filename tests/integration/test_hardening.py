"""Untrusted text and failing effects never wedge a run (both backends)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
from support import PLAN, act
from test_host import _scrape, check_log, created, wait_status

from steward import events
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import EventLog, JetStreamEventLog, SqliteEventLog
from steward.config import Settings
from steward.effects.llm import ModelRouter, ScriptedProvider
from steward.effects.tools import ToolRegistry, tool
from steward.host import Host
from steward.kinds import KINDS
from steward.metrics import HOST as METRICS

LONE = "\ud800"


class NoArgs(msgspec.Struct):
    pass


class Counting(ScriptedProvider):
    """The scripted model, counting the calls it answers."""

    calls = 0

    async def result(self, prompt: Any, info: Any) -> Any:
        self.calls += 1
        return await super().result(prompt, info)


async def test_lone_surrogates_in_a_reply_are_recorded_replaced(make_host, log) -> None:
    """A reply holding a lone surrogate, or one escaped in its JSON, is recorded
    once with U+FFFD in its place, and the run goes on."""
    provider = Counting(
        [
            PLAN[0],
            '{"type": "note", "category": "plan", "content": "raw \ud800 here"}',
            '{"type": "send_message", "message": "bad \\ud800 text"}',
            act(type="finish", output="never asked"),
        ]
    )
    host = await make_host(provider)
    new = created("s1", revision=run_events.LATEST_REVISION)  # a run created now
    await host.submit(run_stream("s1"), new)
    state = await wait_status(host, "s1", "completed", "failed")
    assert state.status == "completed", state.reason
    assert state.output == "bad \ufffd text"
    records = await log.read(run_stream("s1"))
    replies = [r.event for r in records if isinstance(r.event, events.LlmResponded)]
    assert len(replies) == provider.calls == 3
    assert "raw \ufffd here" in replies[1].text
    (note,) = [
        r.event for r in records if isinstance(r.event, run_events.NoteRecorded)
    ][1:]
    assert note.content == "raw \ufffd here"
    await check_log(log)


async def test_lone_surrogates_in_tool_output_and_input(make_host, log) -> None:
    """A tool's output and a run's input with lone surrogates are made encodable."""

    @tool("emit", description="prints something odd")
    async def emit(args: NoArgs, *, ctx: Any) -> str:
        return f"odd {LONE} output \ud83d\ude00"  # a lone and a split pair

    tools = ToolRegistry.with_builtins()
    tools.register(emit)
    specs = (*tools.specs(),)
    host = await make_host(
        [*PLAN, act(type="tool_call", name="emit"), act(type="finish", output="ok")],
        tools,
    )
    run = run_events.RunCreated(
        run_id="s2",
        input_text=f"from the operator {LONE}",
        settings=run_events.RunSettings(tools=specs),
    )
    await host.submit(run_stream("s2"), run)
    await wait_status(host, "s2", "completed")
    records = await log.read(run_stream("s2"))
    first = records[0].event
    assert isinstance(first, run_events.RunCreated)
    assert first.input_text == "from the operator \ufffd"
    (result,) = [r.event for r in records if isinstance(r.event, events.ToolResulted)]
    assert result.ok and result.output == "odd \ufffd output \U0001f600"
    await check_log(log)


async def test_a_reply_the_log_cannot_take_is_recorded_as_paid_failure(
    make_host, log: EventLog
) -> None:
    """A reply too large for the log fails the run with its usage recorded."""
    huge = act(type="finish", output="x" * 2_000_000)
    host = await make_host([*PLAN, huge])
    await host.submit(run_stream("s3"), created("s3", planning_gate=False))
    state = await wait_status(host, "s3", "completed", "failed")
    records = await log.read(run_stream("s3"))
    if isinstance(log, JetStreamEventLog):  # a commit is one message of <= 1 MiB
        assert state.status == "failed"
        (failed,) = [r.event for r in records if isinstance(r.event, events.LlmFailed)]
        assert "not recorded" in failed.message, failed.message
        assert failed.usage.output_tokens > 0
        assert state.output_tokens >= failed.usage.output_tokens
    else:  # SQLite takes it
        assert state.output == "x" * 2_000_000
    await check_log(log)


async def test_a_provider_that_fails_to_set_up_fails_the_call(make_host, log) -> None:
    """A model call whose profile has no settings fails the run, not the host."""
    router = ModelRouter(Settings(), script=None)
    host = await make_host(router)
    run = run_events.RunCreated(
        run_id="s4",
        input_text="hi",
        settings=run_events.RunSettings(),
        profile="writer",
    )
    await host.submit(run_stream("s4"), run)
    state = await wait_status(host, "s4", "failed")
    assert state.reason is not None and "agents.writer" in state.reason
    await check_log(log)


async def test_effect_seconds_exported_for_observed_kinds(make_host, log) -> None:
    """Durations are exported for model and tool calls, each observed."""
    before = _scrape()
    host = await make_host(
        [*PLAN, act(type="files.list", args={}), act(type="finish", output="ok")]
    )
    await host.submit(run_stream("s5"), created("s5"))
    await wait_status(host, "s5", "completed")
    after = _scrape()
    kinds = {
        dict(labels)["kind"]
        for name, labels in after
        if name == "steward_effect_seconds_count"
    }
    assert kinds == {"llm", "tool"}
    key = ("steward_effect_seconds_count", (("kind", "tool"),))
    assert after[key] - before.get(key, 0.0) == 1


async def test_workers_count_only_the_calls_they_make(
    make_host, log: EventLog, tmp_path: Path
) -> None:
    """Two workers on one log: each model call is counted once, by its maker."""
    llm_before = METRICS.effects["llm"]
    script = [*PLAN, act(type="finish", output="done")]
    model = ScriptedProvider(script, per_run=True)  # one model, two workers
    first = await make_host(model, worker_id="w1")
    await make_host(model, worker_id="w2")
    for n in range(4):
        await first.submit(run_stream(f"w{n}"), created(f"w{n}"))
    calls = 0
    for n in range(4):
        await wait_status(first, f"w{n}", "completed")
        records = await log.read(run_stream(f"w{n}"))
        calls += sum(isinstance(r.event, events.LlmResponded) for r in records)
    assert calls == 12
    assert METRICS.effects["llm"] - llm_before == calls


def test_a_fork_never_starts_a_finished_child_again(tmp_path: Path) -> None:
    """Forking a run whose subagent finished copies its result: no child is
    created again, no pending row is left, and no coroutine is left unawaited."""
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "replies": [
                    {"text": r}
                    for r in [
                        *PLAN,
                        act(type="spawn_subagent", subagent={"task": "look"}),
                        act(type="finish", output="parent done"),
                    ]
                ],
                "subagent_replies": [
                    {"text": act(type="send_message", message="child done")}
                ],
            }
        )
    )
    db = str(tmp_path / "log.db")

    def steward(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "steward",
                "--db",
                db,
                "--script",
                str(script),
                *argv,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    ran = steward("run", "-q", "go")
    assert ran.returncode == 0, ran.stderr
    run_id = ran.stdout.split()[1]

    async def streams_and_last() -> tuple[list[str], int]:
        log = await SqliteEventLog.open(db, union=KINDS.union)
        try:
            records = await log.read(run_stream(run_id))
            return await log.streams("run."), records[-1].version
        finally:
            await log.close()

    streams, last = asyncio.run(streams_and_last())
    assert len(streams) == 2  # the run and its child
    forked = steward("fork", run_id, "--at", str(last), "-q")
    assert forked.returncode == 0, forked.stderr
    assert "completed" in forked.stdout
    assert "Warning" not in forked.stderr and "Traceback" not in forked.stderr
    again = steward("run", "-q", "another")  # the next run of this log
    assert "Traceback" not in again.stderr
    streams, _ = asyncio.run(streams_and_last())
    assert len([s for s in streams if "-fork" in s]) == 1, streams  # no fork child
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT key, kind FROM pending").fetchall()
    assert not [row for row in rows if row[1] == "spawn"], rows


async def test_a_stopped_host_leaves_no_task_behind(tmp_path: Path, clock) -> None:
    """A host stopped while a timer is armed leaves no task pending."""
    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    host = Host(
        log,
        provider=ScriptedProvider([act(type="sleep", delaySeconds=60)]),
        tools=ToolRegistry.with_builtins(),
        clock=clock,
        kinds=KINDS,
    )
    before = asyncio.all_tasks()
    await host.start()
    await host.submit(run_stream("t1"), created("t1", planning_gate=False))
    await wait_status(host, "t1", "waiting")
    await asyncio.sleep(0.01)  # the timer task sleeps on the armed timer
    await host.stop()
    await log.close()
    left = [t for t in asyncio.all_tasks() - before if not t.done()]
    assert left == [], left
