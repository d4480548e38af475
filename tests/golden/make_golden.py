"""Record the golden logs of tests/golden/ with the real host.

Run by hand from the repository root::

    .venv/bin/python tests/golden/make_golden.py           # every missing log
    .venv/bin/python tests/golden/make_golden.py NAME ...  # only these scenarios
    .venv/bin/python tests/golden/make_golden.py --list    # the scenarios
    .venv/bin/python tests/golden/make_golden.py --pin-defaults  # new fields'

Each scenario drives a real `Host` over a real `SqliteEventLog` with the
scripted model and a fake clock, then writes every event of its log, in
position order, as JSON lines (`events.recorded_to_json`, what ``steward
events export`` writes) to ``NAME.jsonl``. The ``subagents`` scenario also
keeps its SQLite log file as ``subagents.db``.

A committed golden file is never rewritten: a change that breaks one is a
bug, fixed with an upcaster. So this script skips a file that exists;
``--force`` rewrites the named scenarios, for one not yet committed.

``--pin-defaults`` adds the defaults of fields added since to
``defaults.json`` (`events.field_defaults`) and never changes a pinned one:
a field at its default is not stored, so an old event reads a changed
default as if it had been recorded.

To add a scenario (every new event type comes with one): write an async
function below, add it to `SCENARIOS`, run this script with its name, add its
final states to ``EXPECTED`` in test_golden.py and a row to README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from steward import events, replay
from steward.actors.prompt import Prompt
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.reactor import run_stream
from steward.actors.run.stage_prompts import load_prompts
from steward.actors.session import events as session_events
from steward.actors.task import programs as task_files
from steward.actors.task.events import TaskCompleted, TaskFailed, Template
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.definition import created, worktree
from steward.actors.workflow.events import EdgeDef, GitDef, NodeDef, WorkflowDef
from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.config import ModelConfig, Settings
from steward.effects.llm import ModelRouter, Reply, RequestInfo, ScriptedProvider
from steward.effects.llm.scripted import ReplyError
from steward.effects.tools import ToolContext, ToolRegistry, tool
from steward.events.protocol import LlmRequested, ToolCall
from steward.host import Host
from steward.kinds import KINDS, kind_of

HERE = Path(__file__).resolve().parent
# Run as a script, tests/ is not on the path as pytest puts it there
# (pyproject's ``pythonpath``); the reply helper is the tests' own.
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
from support import act  # noqa: E402

KEEP_DB = {"subagents"}
"""Scenarios whose SQLite log file is committed too (``NAME.db``)."""


# -- tools beside the built-ins ---------------------------------------------------


class TrashArgs(msgspec.Struct, frozen=True, kw_only=True):
    path: str


class FetchArgs(msgspec.Struct, frozen=True, kw_only=True):
    url: str


def tools() -> ToolRegistry:
    """The built-ins, a tool that needs approval and one whose first try fails."""

    @tool("files.trash", args_type=TrashArgs, requires_approval=True)
    async def trash(args: TrashArgs, *, ctx: ToolContext) -> str:
        """Move a workspace file to the trash (a person approves each call)."""
        return f"moved {args.path} to the trash"

    tried: set[str] = set()

    @tool("net.fetch", args_type=FetchArgs)
    async def fetch(args: FetchArgs, *, ctx: ToolContext) -> str:
        """Fetch a URL."""
        if args.url not in tried:  # a transient failure: the run retries it
            tried.add(args.url)
            raise ConnectionError("connection reset by peer")
        return "<title>Release notes</title>"

    registry = ToolRegistry.with_builtins()
    registry.register(trash)
    registry.register(fetch)
    return registry


# -- the rig ------------------------------------------------------------------------


class CountingClock(FakeClock):
    """A fake clock that knows whether someone sleeps on it, so a scenario
    advances it only once the sleeper it means to wake is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping = 0

    async def sleep(self, seconds: float) -> None:
        self.sleeping += 1
        try:
            await super().sleep(seconds)
        finally:
            self.sleeping -= 1


def per_run(
    script: dict[str, list[Reply | str]],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ScriptedProvider:
    """A scripted model playing each run's own replies, whatever the order of
    its requests among other runs' (subagents run side by side); a reply's
    ``delay`` is slept with ``sleep`` (the scenario clock's, to hold a reply
    back until the scenario moves the clock on)."""
    cursors = {run_id: iter(replies) for run_id, replies in script.items()}

    def reply(prompt: Prompt, info: RequestInfo) -> Reply | str:
        answer = next(cursors[info.actor_id], None)
        if answer is None:
            raise AssertionError(f"the script has no reply left for {info.actor_id}")
        return answer

    return ScriptedProvider(reply, sleep=sleep)


class Rig:
    """One scenario's log, clock, workspace and hosts."""

    def __init__(self, log: SqliteEventLog, clock: CountingClock, root: Path) -> None:
        self.log = log
        self.clock = clock
        self.root = root
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        self.tools = tools()
        self.hosts: list[Host] = []

    async def host(self, provider: Any, **kw: Any) -> Host:
        """A started host over the scenario's log."""
        host = Host(
            self.log,
            provider=provider,
            tools=self.tools,
            workspace=self.workspace,
            clock=self.clock,
            **kw,
            kinds=KINDS,
        )
        await host.start()
        self.hosts.append(host)
        return host

    async def start(self, host: Host, run_id: str, **settings: Any) -> None:
        """Start run ``run_id`` with the default profile's settings, overridden."""
        base = Settings().run_settings(tools=self.tools.specs())
        created = run_events.RunCreated(
            run_id=run_id,
            input_text=f"golden scenario {run_id}",
            settings=msgspec.structs.replace(base, **settings),
            at=self.clock.now(),
        )
        await host.submit(run_stream(run_id), created)

    async def state(self, run_id: str) -> run_state.Run:
        return replay.rebuild(await self.log.read(run_stream(run_id)), kinds=KINDS)

    async def until(
        self,
        run_id: str,
        *statuses: str,
        when: Callable[[run_state.Run], bool] = lambda state: True,
    ) -> run_state.Run:
        """Poll run ``run_id`` until it is in one of ``statuses`` and ``when``."""
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            state = await self.state(run_id)
            if state.status in statuses and when(state):
                return state
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"run {run_id} stayed {state.status}")
            await asyncio.sleep(0.005)

    async def advance(self, seconds: float) -> None:
        """Move the clock on once something sleeps on it."""
        deadline = asyncio.get_running_loop().time() + 10
        while not self.clock.sleeping:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("nothing sleeps on the clock")
            await asyncio.sleep(0.005)
        self.clock.advance(seconds)

    async def recorded(self, kind: type[events.Event], n: int) -> None:
        """Wait until ``n`` events of type ``kind`` are in the log."""
        deadline = asyncio.get_running_loop().time() + 10
        while sum(isinstance(r.event, kind) for r in await self.log.read_all()) < n:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"fewer than {n} {kind.__name__} recorded")
            await asyncio.sleep(0.005)

    async def decide(
        self, host: Host, request_id: str, approved: bool, why: str
    ) -> None:
        """A person approves or denies ``request_id`` once its run waits for it."""
        run_id = request_id.split("/")[0]
        await self.until(
            run_id,
            "waiting",
            when=lambda s: (
                s.budget_hold == request_id
                or any(a.request_id == request_id for a in s.approvals)
            ),
        )
        decided = run_events.ApprovalDecided(
            request_id=request_id, approved=approved, reason=why, at=self.clock.now()
        )
        await host.submit(run_stream(run_id), decided)


# -- the scenarios ------------------------------------------------------------------


async def json_protocol(rig: Rig) -> None:
    """The JSON loop, most of its commands and their failures.

    Planning gate, notes, a tool call, a message, a decision, an invalid
    reply, an unknown tool, a failed call retried, a call that fails for
    good, output and finish.
    """
    run = "json-protocol"
    replies: list[Reply | str] = [
        act(type="set_output", output="draft"),  # before the plan: gated
        act(type="note", category="requirements", content="A report in report.txt."),
        act(type="note", category="plan", content="Write it, fetch the notes."),
        act(
            type="tool_call",
            name="files.write",
            args={"path": "report.txt", "content": "all good"},
        ),
        act(type="send_message", message="report.txt is written; fetching notes."),
        act(type="decision", content="Cite the release notes.", importance="high"),
        "I will now fetch the release notes.",  # not a command
        act(type="tool_call", name="web.search", args={"q": "release notes"}),
        act(type="tool_call", name="net.fetch", args={"url": "https://example.org"}),
        act(type="tool_call", name="files.read", args={"path": "missing.txt"}),
        act(type="set_output", output="Report written to report.txt."),
        act(type="finish"),
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run)
    await rig.until(run, "completed")


async def json_invalid(rig: Rig) -> None:
    """Two replies that are no valid command: a correction, then the run fails."""
    run = "json-invalid"
    host = await rig.host(
        per_run({run: ["Sure! Here is the answer.", act(type="dance")]})
    )
    await rig.start(host, run, planning_gate=False)
    await rig.until(run, "failed")


async def native_protocol(rig: Rig) -> None:
    """Native tool calling: three calls (one unknown), then a plain answer."""
    run = "native-protocol"
    write = events.ToolCall(
        id="c1", name="files.write", args={"path": "notes.md", "content": "# notes"}
    )
    unknown = events.ToolCall(id="c2", name="web.search", args={"q": "notes"})
    listing = events.ToolCall(id="c3", name="files.list", args={})
    replies: list[Reply | str] = [
        Reply(text="Writing the notes.", tool_calls=(write, unknown)),
        Reply(tool_calls=(listing,)),
        "Wrote notes.md; the workspace holds it.",
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run, protocol="native")
    await rig.until(run, "completed")


async def native_finish(rig: Rig) -> None:
    """Native tool calling at revision 3, with the finish tool: called beside
    another call (answered as a tool error), then alone with metadata."""
    run = "native-finish"
    listing = events.ToolCall(id="c1", name="files.list", args={})
    early = events.ToolCall(id="c2", name="finish", args={"output": "Too soon."})
    done = events.ToolCall(
        id="c3",
        name="finish",
        args={"output": "The workspace is empty.", "metadata": {"files": 0}},
    )
    replies: list[Reply | str] = [
        Reply(text="Looking.", tool_calls=(listing, early)),
        Reply(tool_calls=(done,)),
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run, protocol="native", revision=3)
    await rig.until(run, "completed")


async def tool_rounds(rig: Rig) -> None:
    """Native tool calling at revision 4 with ``max_tool_call_rounds`` 2:
    two replies ask for tools, and their answers end the run failed, with
    no third model call."""
    run = "tool-rounds"
    listing = events.ToolCall(id="c1", name="files.list", args={})
    again = events.ToolCall(id="c2", name="files.list", args={})
    replies: list[Reply | str] = [
        Reply(tool_calls=(listing,)),
        Reply(tool_calls=(again,)),
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run, protocol="native", revision=4, max_tool_call_rounds=2)
    await rig.until(run, "failed")


async def approvals(rig: Rig) -> None:
    """A tool that needs approval: one call approved and run, one denied."""
    run = "approvals"
    replies: list[Reply | str] = [
        act(type="tool_call", name="files.trash", args={"path": "old.txt"}),
        act(type="tool_call", name="files.trash", args={"path": "keep.txt"}),
        act(type="finish", output="Trashed old.txt; kept keep.txt."),
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run, planning_gate=False)
    await rig.decide(host, f"{run}/tool/1", True, "old.txt is obsolete")
    await rig.decide(host, f"{run}/tool/2", False, "keep.txt is still needed")
    await rig.until(run, "completed")


async def budget_pause(rig: Rig) -> None:
    """A token budget with policy pause: spent, the run waits; approved, it goes on."""
    run = "budget-pause"
    replies: list[Reply | str] = [
        act(type="decision", content="Spend more than the budget."),
        act(type="finish", output="Finished on an approved budget."),
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(
        host, run, planning_gate=False, token_budget=50, budget_policy="pause"
    )
    await rig.decide(host, f"{run}/budget/2", True, "worth it")
    await rig.until(run, "completed")


async def budget_fail(rig: Rig) -> None:
    """A token budget with policy fail: spent, the run fails."""
    run = "budget-fail"
    replies: list[Reply | str] = [act(type="decision", content="Spend it all.")]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run, planning_gate=False, token_budget=50)
    await rig.until(run, "failed")


async def sleep_wake(rig: Rig) -> None:
    """A sleep of 60 s and a cron sleep, each woken by the (fake) clock."""
    run = "sleep-wake"
    replies: list[Reply | str] = [
        act(type="sleep", delaySeconds=60, reason="wait for the build"),
        act(type="sleep", cron="0 * * * *", reason="the next full hour"),
        act(type="finish", output="Woke twice."),
    ]
    host = await rig.host(per_run({run: replies}))
    await rig.start(host, run, planning_gate=False)

    async def wake(sleep: int) -> None:
        state = await rig.until(run, "waiting", when=lambda s: s.sleeps == sleep)
        assert state.wake_at is not None
        await rig.advance(state.wake_at - rig.clock.now())

    await wake(1)
    await wake(2)
    await rig.until(run, "completed")


async def subagents(rig: Rig) -> None:
    """Two subagents spawned at once; their results resume the parent."""
    run = "subagents"
    host = await rig.host(
        per_run(
            {
                run: [
                    act(
                        type="spawn_subagents",
                        subagents=[
                            {"task": "Count the words of the request."},
                            {"task": "Name its language.", "tools": ["files.read"]},
                        ],
                    ),
                    act(type="finish", output="Four words, in English."),
                ],
                f"{run}-1": [act(type="send_message", message="Four words.")],
                f"{run}-2": [act(type="send_message", message="English.")],
            }
        )
    )
    await rig.start(host, run, planning_gate=False)
    await rig.until(run, "completed")
    for child in (f"{run}-1", f"{run}-2"):
        await rig.until(child, "completed")


async def cancel(rig: Rig) -> None:
    """An operator cancels a run waiting on a sleeping subagent: both end."""
    run = "cancel"
    host = await rig.host(
        per_run(
            {
                run: [
                    act(type="spawn_subagent", subagent={"task": "Watch the queue."})
                ],
                f"{run}-1": [act(type="sleep", delaySeconds=3600)],
            }
        )
    )
    await rig.start(host, run, planning_gate=False)
    await rig.until(f"{run}-1", "waiting", when=lambda s: s.timer_id is not None)
    cancel = events.CancelRequested(reason="stopped by an operator", at=rig.clock.now())
    await host.submit(run_stream(run), cancel)
    for stream in (run, f"{run}-1"):
        await rig.until(stream, "cancelled")


async def model_errors(rig: Rig) -> None:
    """Model errors: a call answered on its retry, one that fails for good.

    The second call fails three times (two retries) and fails the run.
    """
    run = "model-errors"

    def error(kind: Any) -> Reply:
        return Reply(
            error=ReplyError(
                kind=kind, message=f"scripted {kind}", retryable=True, retry_after=5.0
            )
        )

    replies: list[Reply | str] = [
        error("rate_limit"),
        act(type="decision", content="Carry on after the retry."),
        error("transport"),
        error("transport"),
        error("transport"),
    ]
    host = await rig.host(per_run({run: replies}), llm_retries=2)
    await rig.start(host, run, planning_gate=False)
    for n in (1, 2, 3):
        await rig.recorded(events.LlmAttemptFailed, n)
        await rig.advance(5.0)
    await rig.until(run, "failed")


async def streams(rig: Rig) -> None:
    """Recorded streams (``record_stream``) and costs of a priced model.

    A failed attempt's stream, then whole ones, and the replies' costs.
    """
    run = "streams"
    script = rig.root / "script.json"
    replies = [
        {"error": {"kind": "rate_limit", "retryable": True, "retry_after": 5.0}},
        {"json": {"type": "decision", "content": "Stream it."}},
        {"json": {"type": "finish", "output": "Streamed and priced."}},
    ]
    script.write_text(json.dumps({"replies": replies}))
    model = ModelConfig(
        provider="scripted",
        script=script.name,  # the provider's label, kept in the recorded streams
        record_stream=True,
        input_price_per_mtok=3.0,
        output_price_per_mtok=15.0,
    )
    router = ModelRouter(Settings(models={"default": model}))
    with working_directory(rig.root):
        host = await rig.host(router)
        await rig.start(host, run, planning_gate=False)
        await rig.recorded(events.LlmAttemptFailed, 1)
        await rig.advance(5.0)
        await rig.until(run, "completed")


async def claims(rig: Rig) -> None:
    """A worker (``worker_id``) claims each model and tool call in the log."""
    run = "claims"
    replies: list[Reply | str] = [
        act(type="tool_call", name="files.list", args={}),
        act(type="finish", output="Listed the workspace."),
    ]
    host = await rig.host(per_run({run: replies}), worker_id="worker-a")
    await rig.start(host, run, planning_gate=False)
    await rig.until(run, "completed")


async def queued(rig: Rig) -> None:
    """A run queued by an operator (``runs start``) and taken by the next host;
    its model uses the tool-name shortcut with arguments beside the name
    (revision 1) and replies once with a lone surrogate (recorded as U+FFFD)."""
    run = "queued"
    base = Settings().run_settings(tools=rig.tools.specs())
    created = run_events.RunCreated(
        run_id=run,
        input_text="golden scenario queued",
        settings=msgspec.structs.replace(base, planning_gate=False),
        queued=True,
        at=rig.clock.now(),
    )
    replies: list[Reply | str] = [
        act(type="files.list", path="."),
        '{"type": "send_message", "message": "odd \\ud800 text"}',
        act(type="finish", output="Listed and said so."),
    ]
    await rig.host(per_run({run: replies}))  # follows the log from here
    await Host(rig.log, kinds=KINDS).submit(
        run_stream(run), created
    )  # as `runs start` does
    await rig.until(run, "completed")


async def open_chat(
    rig: Rig,
    host: Host,
    chat_id: str,
    settings: session_events.SessionSettings,
    revision: int = 0,
) -> Callable[..., Awaitable[None]]:
    """Open session ``cli:<chat_id>`` (at decider ``revision``); what sends
    it ada's messages (their text, and any other fields of
    `MessageReceived`), numbered ``m1``, ``m2``, ... and stamped with the
    scenario's clock."""
    stream = f"session.cli:{chat_id}"
    start = session_events.SessionOpened(
        session_id=f"cli:{chat_id}",
        channel="cli",
        chat_id=chat_id,
        settings=settings,
        at=rig.clock.now(),
        revision=revision,
    )
    await host.submit(stream, start)
    sent = 0

    async def say(text: str, **fields: Any) -> None:
        nonlocal sent
        sent += 1
        message = session_events.MessageReceived(
            message_id=f"m{sent}",
            text=text,
            sender="ada",
            at=rig.clock.now(),
            **fields,
        )
        await host.submit(stream, message)

    return say


async def session(rig: Rig) -> None:
    """A chat session: two messages merged by the debounce timer into a turn
    (a run answering through ``reply_to``), every command, a segment break,
    a model switch and a second turn."""
    config = Settings(
        models={
            "default": ModelConfig(provider="scripted", context_budget=4000),
            "large": ModelConfig(provider="scripted", model="large-1"),
        }
    )
    opened = config.session_settings(rig.tools.specs())
    opened = msgspec.structs.replace(
        opened, run=msgspec.structs.replace(opened.run, planning_gate=False)
    )
    host = await rig.host(
        per_run(
            {
                "cli:golden-t1": [act(type="send_message", message="Hello, Ada.")],
                "cli:golden-t2": [act(type="finish", output="A fresh start.")],
            }
        )
    )
    say = await open_chat(rig, host, "golden", opened)
    await say("hello")
    await say("it is Ada")
    await rig.advance(1.0)
    await say("still there?")  # restarts the timer; the first one is refused
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 1)
    for command in ("/status", "/model large", "/models", "/memory", "/help"):
        await say(command)
    await say("/frobnicate")
    await say("/new")
    await say("start over")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 2)


def memory_add(level: int, module: str, key: str, value: str) -> dict[str, Any]:
    """A memory writer's op adding ``module.key`` at ``level``."""
    return {"op": "add", "level": level, "module": module, "key": key, "value": value}


def written(*ops: dict[str, Any], summary: str) -> dict[str, Any]:
    """A memory writer's reply: its ``ops`` and the segment's summary."""
    return {"operations": list(ops), "summary": summary}


def compacting(rig: Rig) -> session_events.SessionSettings:
    """The default session settings, but the window compacted after every
    turn past the first, and the turns' runs without a planning gate."""
    opened = Settings().session_settings(rig.tools.specs())
    return msgspec.structs.replace(
        opened,
        max_turns_per_context=1,
        run=msgspec.structs.replace(opened.run, planning_gate=False),
    )


async def session_memory(rig: Rig) -> None:
    """A session's memory: core memory set by a turn's tool input, an empty
    message refused, the window compacted after every turn past the first,
    the memory writer's ops applied (one rejected), then a writer reply that
    is no list of ops."""
    chat = "session.cli:memory"
    opened = compacting(rig)
    writer = written(
        memory_add(1, "identity", "name", "Ada"),
        memory_add(8, "identity", "age", "9"),
        summary="Ada said hello.",
    )
    host = await rig.host(
        per_run(
            {
                "cli:memory-t1": [act(type="finish", output="Hello.")],
                "cli:memory-t2": [act(type="finish", output="Noted.")],
                "cli:memory-t3": [act(type="finish", output="Bye.")],
                "cli:memory": [json.dumps(writer), "I cannot remember that."],
            }
        )
    )
    say = await open_chat(rig, host, "memory", opened)
    core = session_events.CoreMemorySet(
        request_id="q1", key="city", value="Kiel", run_id=""
    )
    await host.submit(chat, core)
    await say("   ")
    for turn, text in enumerate(("I am Ada", "I like tea", "bye"), start=1):
        await say(text)
        await rig.advance(2.0)
        await rig.recorded(session_events.ReplySent, turn)
        if turn == 2:
            await rig.recorded(session_events.MemoryWritten, 1)
    await rig.recorded(session_events.MemoryWriteFailed, 1)


async def session_revision_1(rig: Rig) -> None:
    """A session opened at revision 1: the compaction due after its third
    turn, while the memory writer's call from the second is in flight,
    waits for that call to end, then hands the next call what leaves the
    window."""
    opened = compacting(rig)
    first = written(memory_add(1, "identity", "name", "Ada"), summary="Ada said hello.")
    second = written(
        memory_add(2, "preferences", "drink", "tea"), summary="Ada likes tea."
    )
    host = await rig.host(
        per_run(
            {
                "cli:later-t1": [act(type="finish", output="Hello.")],
                "cli:later-t2": [act(type="finish", output="Noted.")],
                "cli:later-t3": [act(type="finish", output="Bye.")],
                "cli:later": [
                    Reply(text=json.dumps(first), delay=10.0),
                    json.dumps(second),
                ],
            },
            sleep=rig.clock.sleep,
        )
    )
    say = await open_chat(rig, host, "later", opened, 1)
    for turn, text in enumerate(("I am Ada", "I like tea", "bye"), start=1):
        await say(text)
        await rig.advance(2.0)
        await rig.recorded(session_events.ReplySent, turn)
    await rig.advance(10.0)  # the first writer's reply
    await rig.recorded(session_events.MemoryWritten, 2)


async def session_subagents(rig: Rig) -> None:
    """A session's subagents and schedules: a turn spawns a subagent (whose
    answer goes to the chat) and creates an hourly schedule; the schedule
    fires on the hour and its subagent answers silently; a second turn
    deletes the schedule, whose armed timer then fires to no effect."""
    rig.tools = ToolRegistry.with_builtins(extra=KINDS.tools)
    opened = Settings().session_settings(rig.tools.specs())
    opened = msgspec.structs.replace(
        opened, run=msgspec.structs.replace(opened.run, planning_gate=False)
    )
    weather = 'Any rain this hour? Answer {"silent": true} if none.'
    host = await rig.host(
        per_run(
            {
                "cli:subs-t1": [
                    act(
                        type="tool_call",
                        name="subagent_spawn",
                        args={"name": "scout", "task": "Count the open issues."},
                    ),
                    act(
                        type="tool_call",
                        name="schedule.create",
                        args={"name": "weather", "cron": "0 * * * *", "task": weather},
                    ),
                    act(type="finish", output="A scout runs; weather every hour."),
                ],
                "cli:subs-s1": [act(type="finish", output="Two open issues.")],
                "cli:subs-s2": [act(type="finish", output='{"silent": true}')],
                "cli:subs-t2": [
                    act(
                        type="tool_call",
                        name="schedule.delete",
                        args={"name": "weather"},
                    ),
                    act(type="finish", output="No more weather."),
                ],
            }
        )
    )
    say = await open_chat(rig, host, "subs", opened)
    await say("scout the issues, and watch the weather hourly")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 1)
    await rig.recorded(session_events.SubagentAnswered, 1)
    hour = 3600.0
    await rig.advance(hour - rig.clock.now() % hour)
    await rig.recorded(session_events.SubagentAnswered, 2)
    await say("stop the weather checks")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 2)
    await rig.advance(hour)  # the deleted schedule's timer fires, to no effect
    await rig.recorded(events.WakeDue, 4)


async def session_direct(rig: Rig) -> None:
    """A direct chat: each turn is the session's own model call without
    tools (``TurnStarted`` with ``direct``, its ``LlmRequested``), with core
    memory in the prompt; the third call fails for good and is told to the
    chat."""
    chat = "session.cli:direct"
    opened = msgspec.structs.replace(
        Settings().session_settings(rig.tools.specs()), direct=True
    )
    failure = Reply(error=ReplyError(kind="transport", message="scripted outage"))
    host = await rig.host(
        per_run({"cli:direct": ["Hello, Ada.", "Tea it is.", failure]}),
        llm_retries=0,
    )
    say = await open_chat(rig, host, "direct", opened)
    core = session_events.CoreMemorySet(
        request_id="q1", key="drink", value="tea", run_id=""
    )
    await host.submit(chat, core)
    await say("hello")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 1)
    await say("what do I drink?")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 2)
    await say("and tomorrow?")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 3)


async def session_revision_2(rig: Rig) -> None:
    """A direct chat opened at revision 2: ``/etc/hosts is broken`` is a
    message (a turn), ``/model\tlarge`` a command, ``/status`` tells the
    hosting process's uptime (``host_since``) or that it is unknown; the
    turn's call, the session's own, is claimed by a worker
    (`EffectClaimed`), fails once and is retried (`LlmAttemptFailed`), and
    its streams are recorded (`LlmStreamRecorded`); then the session is
    forked (``forked_from``)."""
    script = rig.root / "script.json"
    replies = [
        {"error": {"kind": "rate_limit", "retryable": True, "retry_after": 5.0}},
        {"text": "Check its permissions."},
    ]
    script.write_text(json.dumps({"replies": replies}))
    model = ModelConfig(provider="scripted", script=script.name, record_stream=True)
    large = ModelConfig(provider="scripted", script=script.name, model="large-1")
    settings = Settings(models={"default": model, "large": large})
    opened = msgspec.structs.replace(
        settings.session_settings(rig.tools.specs()), direct=True
    )
    with working_directory(rig.root):
        host = await rig.host(ModelRouter(settings), worker_id="worker-a")
        say = await open_chat(rig, host, "paths", opened, 2)
        await say("/etc/hosts is broken")
        await rig.advance(2.0)
        await rig.recorded(events.LlmAttemptFailed, 1)
        await rig.advance(5.0)
        await rig.recorded(session_events.ReplySent, 1)
        await say("/model\tlarge")
        await say("/status", host_since=rig.clock.now() - 90.0, llm_waiting=0)
        await say("/status")  # from a process that hosts nothing
        # forked as `steward fork` does (`SessionOpened.forked_from`)
        kind = kind_of("session.cli:paths")
        steps = replay.commits(await rig.log.read("session.cli:paths"), kinds=KINDS)
        fork = "cli:paths-fork0a1b2c"
        copy = replay.fork_events(
            steps, "cli:paths", fork, kind.surface.detach, kinds=KINDS
        )
        await rig.log.append(f"session.{fork}", copy, 0, correlation_id=fork)


async def session_revision_3(rig: Rig) -> None:
    """A three-turn chat opened at revision 3 (``max_turns_per_context``
    1): each turn's run asked with the turn's message last; the second
    turn spawns a subagent whose answer comes after the turn's; the
    compaction after the third turn drops up to its question, so the window
    starts with it (at revision 2 it would start with the subagent's
    answer)."""
    rig.tools = ToolRegistry.with_builtins(extra=KINDS.tools)
    opened = compacting(rig)
    host = await rig.host(
        per_run(
            {
                "cli:three-t1": [act(type="finish", output="Hello, Ada.")],
                "cli:three-t2": [
                    act(
                        type="tool_call",
                        name="subagent_spawn",
                        args={"name": "scout", "task": "Count the open issues."},
                    ),
                    act(type="finish", output="A scout is on it."),
                ],
                "cli:three-s1": [
                    Reply(text=act(type="finish", output="Three."), delay=30.0)
                ],
                "cli:three-t3": [act(type="finish", output="You are welcome.")],
                "cli:three": [
                    json.dumps(written(summary="Ada said hello.")),
                    json.dumps(written(summary="A scout counted issues.")),
                ],
            },
            sleep=rig.clock.sleep,
        )
    )
    say = await open_chat(rig, host, "three", opened, 3)
    await say("I am Ada")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 1)
    await say("count the open issues")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 2)
    await rig.recorded(session_events.MemoryWritten, 1)
    await rig.advance(30.0)  # the scout's answer
    await rig.recorded(session_events.SubagentAnswered, 1)
    await say("thanks")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 3)
    await rig.recorded(session_events.MemoryWritten, 2)


async def session_revision_4(rig: Rig) -> None:
    """A chat of a staged agent opened at revision 4 (``session.cli:four``):
    ``/help`` lists ``/mode`` and ``/reasoning``; the user turns reasoning
    on (`ReasoningSwitched`); the first turn's run plans, reads a file (its
    reply's provider reasoning recorded, `LlmResponded.reasoning`) and
    delivers, and its reply keeps the run's reasoning outcome in the
    history (`ReplySent.outcome`); the second turn's model says it switches
    to chat mode, which stays text; the user sets chat mode
    (`ModeSwitched`), and the third turn's run is in it."""
    prompts = load_prompts()
    opened = Settings().session_settings(rig.tools.specs())
    run = msgspec.structs.replace(
        opened.run,
        protocol="native",
        policy="staged",
        qa=False,
        prompts=prompts,
        project_root="/work",
    )
    opened = msgspec.structs.replace(opened, run=run)
    read = ToolCall(id="c1", name="files.read", args={"path": "notes.txt"})
    thought = events.Reasoning(text="The notes are in notes.txt; read it.")

    def warmup(plan: str) -> str:
        return (
            f"<ide_reasoning>\nAnalyze: the notes\nPlan: {plan}\nReflect: none\n"
            "Action: files.read\nDelivery: NEEDS_WORK\n</ide_reasoning>\nOn it."
        )

    switching = "Switching to chat mode now: /mode chat"
    host = await rig.host(
        per_run(
            {
                "cli:four-t1": [
                    warmup("read notes.txt"),
                    Reply(tool_calls=(read,), reasoning=(thought,)),
                    "The notes say hello.",
                    "The notes say hello.\nDelivery: DONE",
                ],
                "cli:four-t2": [
                    warmup("answer"),
                    switching,
                    f"{switching}\nDelivery: DONE",
                ],
                "cli:four-t3": ["Still hello.", "Still hello.\nDelivery: DONE"],
            }
        )
    )
    (rig.workspace / "notes.txt").write_text("hello\n")
    say = await open_chat(rig, host, "four", opened, 4)
    for command in ("/help", "/mode", "/reasoning on", "/mode sideways"):
        await say(command)
    await say("what do the notes say?")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 1)
    await say("switch to chat mode")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 2)
    await say("/mode chat")
    await say("and now?")
    await rig.advance(2.0)
    await rig.recorded(session_events.ReplySent, 3)


async def workflow(rig: Rig, revision: int = 0) -> None:
    """Workflow runs: one loops (review asks for changes, implement goes
    again), retries a failed phase, is paused and resumed, skips a branch it
    never takes, and completes; one fails past its retries; one is cancelled
    with its phase in flight (which is cancelled and recorded failed).
    Created at ``revision`` (`WorkflowCreated.revision`): 0, as the first
    golden log was, gives phase run ids joined by ``-``; 1 by ``:``; 2 also
    names the phase in flight in the cancel (`WorkflowCancelled.phase_run_id`)."""
    sep = ":" if revision else "-"
    nodes = (
        NodeDef(key="design", provider="default", prompt="Design {input.feature}."),
        NodeDef(key="implement", provider="default", max_retries=1),
        NodeDef(key="review", provider="default"),
        NodeDef(key="hotfix", provider="default"),
    )
    edges = (
        EdgeDef(source="design", target="implement", priority=1, auto=True),
        EdgeDef(source="implement", target="review", priority=1, auto=True),
        EdgeDef(
            source="review",
            target="implement",
            priority=1,
            when='decision == "changes_requested"',
        ),
        EdgeDef(
            source="review", target="hotfix", priority=2, when='decision == "blocked"'
        ),
    )
    loop = WorkflowDef(key="loop", version=1, nodes=nodes, edges=edges)
    lone = WorkflowDef(key="lone", version=1, nodes=(nodes[0],))
    settings = Settings(
        run=msgspec.structs.replace(Settings().run, planning_gate=False)
    )
    outage = Reply(error=ReplyError(kind="transport", message="scripted outage"))

    def finish(output: str, **metadata: Any) -> str:
        return act(type="finish", output=output, metadata=metadata)

    script: dict[str, list[Reply | str]] = {
        "wf-loop-design-1": [Reply(text=finish("The design."), delay=5.0)],
        "wf-loop-implement-2": [outage],
        "wf-loop-implement-3": [finish("Built it.")],
        "wf-loop-review-4": [
            finish("Return JSON.", routingDecision="changes_requested")
        ],
        "wf-loop-implement-5": [finish("Returns JSON now.")],
        "wf-loop-review-6": [finish("Approved.", routingDecision="approved")],
        "wf-fail-design-1": [outage],
        "wf-cancel-design-1": [Reply(text=finish("Too late."), delay=60.0)],
    }
    cursors = {
        "wf-" + run_id[3:].replace("-", sep): iter(replies)
        for run_id, replies in script.items()
    }
    provider = ScriptedProvider(
        lambda prompt, info: next(cursors[info.actor_id]), sleep=rig.clock.sleep
    )
    host = await rig.host(provider, llm_retries=0)
    specs = rig.tools.specs()
    inputs = {"feature": "a health check"}

    def first(defn: WorkflowDef, workflow_id: str) -> workflow_events.WorkflowCreated:
        made = created(defn, settings, workflow_id, inputs, specs)
        return msgspec.structs.replace(made, at=rig.clock.now(), revision=revision)

    await host.submit("workflow.wf-loop", first(loop, "wf-loop"))
    await rig.recorded(run_events.RunStarted, 1)
    await host.submit(
        "workflow.wf-loop", workflow_events.WorkflowPauseRequested(reason="lunch")
    )
    await rig.advance(5.0)  # design answers while the run is paused
    await rig.recorded(workflow_events.PhaseCompleted, 1)
    await host.submit("workflow.wf-loop", workflow_events.WorkflowResumeRequested())
    await rig.recorded(workflow_events.WorkflowCompleted, 1)

    await host.submit("workflow.wf-fail", first(lone, "wf-fail"))
    await rig.recorded(workflow_events.WorkflowFailed, 1)

    await host.submit("workflow.wf-cancel", first(lone, "wf-cancel"))
    await rig.recorded(run_events.RunStarted, 8)
    await host.submit("workflow.wf-cancel", workflow_events.WorkflowCancelRequested())
    await rig.recorded(workflow_events.PhaseFailed, 3)


async def workflow_revision_3(rig: Rig) -> None:
    """Workflow runs created at revision 3: ``wf-gate``'s phase gives no
    routing decision, so its ``decision != "approved"`` guard does not hold
    (a missing path) and the run completes; ``wf-spin`` loops by auto edges
    until its ``max_steps`` (3, `WorkflowDef.max_steps`) fails it; ``wf-cancel``
    is cancelled with its phase in flight."""
    check = NodeDef(key="check", provider="default")
    fix = NodeDef(key="fix", provider="default")
    gate = WorkflowDef(
        key="gate",
        version=1,
        nodes=(check, fix),
        edges=(
            EdgeDef(
                source="check", target="fix", priority=1, when='decision != "approved"'
            ),
        ),
    )
    spin = WorkflowDef(
        key="spin",
        version=1,
        nodes=(
            NodeDef(key="a", provider="default"),
            NodeDef(key="b", provider="default"),
        ),
        edges=(
            EdgeDef(source="a", target="b", priority=1, auto=True),
            EdgeDef(source="b", target="a", priority=1, auto=True),
        ),
        max_steps=3,
    )
    lone = WorkflowDef(key="lone", version=1, nodes=(check,))
    settings = Settings(
        run=msgspec.structs.replace(Settings().run, planning_gate=False)
    )

    def finish(output: str) -> str:
        return act(type="finish", output=output)

    script: dict[str, list[Reply | str]] = {
        "wf-gate:check:1": [finish("Checked.")],
        "wf-spin:a:1": [finish("Spun a.")],
        "wf-spin:b:2": [finish("Spun b.")],
        "wf-spin:a:3": [finish("Spun a again.")],
        "wf-cancel:check:1": [Reply(text=finish("Too late."), delay=60.0)],
    }
    cursors = {run_id: iter(replies) for run_id, replies in script.items()}
    provider = ScriptedProvider(
        lambda prompt, info: next(cursors[info.actor_id]), sleep=rig.clock.sleep
    )
    host = await rig.host(provider)
    specs = rig.tools.specs()

    def first(defn: WorkflowDef, workflow_id: str) -> workflow_events.WorkflowCreated:
        made = created(defn, settings, workflow_id, {}, specs)
        assert made.revision == 3
        return msgspec.structs.replace(made, at=rig.clock.now())

    await host.submit("workflow.wf-gate", first(gate, "wf-gate"))
    await rig.recorded(workflow_events.WorkflowCompleted, 1)
    await host.submit("workflow.wf-spin", first(spin, "wf-spin"))
    await rig.recorded(workflow_events.WorkflowFailed, 1)
    await host.submit("workflow.wf-cancel", first(lone, "wf-cancel"))
    await rig.recorded(run_events.RunStarted, 5)
    await host.submit("workflow.wf-cancel", workflow_events.WorkflowCancelRequested())
    await rig.recorded(workflow_events.PhaseFailed, 1)


async def workflow_worktree(rig: Rig) -> None:
    """A workflow run in a git worktree of a repository made for it: the
    worktree is asked for and made (``ToolRequested``/``ToolResulted`` of
    ``git.worktree_add`` in the workflow's stream), its one phase writes a
    file there, and when the run completes a pull request is asked for (``gh``
    missing: said, not failed) and the worktree removed, its file committed
    to the branch."""
    repo = rig.root / "repo"
    repo.mkdir()
    me = ("-c", "user.name=golden", "-c", "user.email=golden@localhost")
    for argv in (
        ("init", "-q", "-b", "main"),
        ("commit", "-q", "--allow-empty", "-m", "start"),
    ):
        subprocess.run(["git", *me, *argv], cwd=repo, check=True)
    defn = WorkflowDef(
        key="tree",
        version=1,
        nodes=(NodeDef(key="write", provider="default", prompt="Write a note."),),
        git=GitDef(pull_request="gh"),
    )
    settings = Settings(
        run=msgspec.structs.replace(Settings().run, planning_gate=False),
        workflow=msgspec.structs.replace(
            Settings().workflow, worktrees=str(rig.root / "trees")
        ),
    )
    write = act(
        type="tool_call",
        name="files.write",
        args={"path": "note.md", "content": "A note.\n"},
    )
    host = await rig.host(
        per_run(
            {"wf-tree-write-1": [write, act(type="finish", output="Wrote note.md.")]}
        )
    )
    tree = await worktree(defn, settings, "wf-tree", repository=str(repo), now=_NOON)
    first = created(defn, settings, "wf-tree", {}, rig.tools.specs(), worktree=tree)
    first = msgspec.structs.replace(first, at=rig.clock.now())
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(shutil.which("git") or "git").parent)  # no gh
    try:
        await host.submit("workflow.wf-tree", first)
        await rig.recorded(events.ToolResulted, 4)  # add, the phase's, gh, remove
    finally:
        os.environ["PATH"] = old_path


TASK_PROGRAM = """
(defatom draft (params topic brief) (instructions "Write about {{topic}}. {{brief}}"))
(defatom judge (params text) (instructions "Judge: {{text}}") (subtasks false))
(bind checked (system:run_script "echo checked"))
(director-evaluator-loop
  (max-iterations 2)
  (initial-director-input "Keep it short.")
  (director (lambda (brief i) brief))
  (executor (lambda (brief i) (draft topic brief)))
  (evaluator (lambda (text brief i) (judge text)))
  (controller (lambda (verdict brief text i)
    (if (string=? (get-field verdict "verdict") "accept")
        (stop text)
        (continue (concat brief " " (content verdict)))))))
"""


async def tasks(rig: Rig) -> None:
    """Task programs: a Director-Evaluator loop whose judge asks for one
    revision, after a script call (``t-de``); an atomic call that writes a
    file with its tool, asks for a subtask that is refused (no description),
    then one that runs as a child task and answers it (``t-sub``); a loop
    that reaches its iterations (``t-loop``); a call whose model fails
    (``t-fail``); a task cancelled with its subtask in flight, which is
    cancelled too (``t-cancel``)."""
    judge = Template(name="judge", params=("text",), instructions="Judge: {{text}}")
    writer = Template(
        name="writer",
        params=("topic",),
        instructions="Write {{topic}} to a file, then summarize it.",
        tools=("files.write",),
    )
    summary = Template(
        name="summarize",
        params=("text",),
        description="Summarize a text",
        matches=("summary",),
        instructions="Summarize: {{text}}",
        subtasks=False,
    )
    verdict = {
        "status": "COMPLETE",
        "content": "Add a title.",
        "notes": {"verdict": "revise"},
    }
    accept = {"status": "COMPLETE", "content": "Good.", "notes": {"verdict": "accept"}}
    write = ToolCall(
        id="w1", name="files.write", args={"path": "owls.txt", "content": "Owls."}
    )
    bad = ToolCall(id="s1", name="subtask", args={"type": "summary", "inputs": {}})
    ask = ToolCall(
        id="s2",
        name="subtask",
        args={
            "type": "summary",
            "description": "Summarize the file",
            "inputs": {"text": "Owls hunt at night."},
            "template_hints": ["summarize"],
        },
    )
    held = asyncio.Event()

    async def hold(seconds: float) -> None:
        await held.wait()  # the cancelled child's reply never comes

    script: dict[str, list[Reply | str]] = {
        "t-de": [
            "Owls fly.",
            json.dumps(verdict),
            "Owls: they fly at night.",
            json.dumps(accept),
        ],
        "t-sub": [
            Reply(tool_calls=(write,)),
            Reply(tool_calls=(bad,)),
            Reply(tool_calls=(ask,)),
            "Wrote owls.txt; it says owls hunt at night.",
        ],
        "t-sub/sub/1": ["Owls hunt at night."],
        "t-loop": ["again", "again"],
        "t-fail": [Reply(error=ReplyError(kind="auth", message="scripted bad key"))],
        "t-cancel": [Reply(tool_calls=(ask,))],
        "t-cancel/sub/1": [Reply(text="never", delay=1.0)],
    }
    cursors = {task_id: iter(replies) for task_id, replies in script.items()}
    provider = ScriptedProvider(
        lambda prompt, info: next(cursors[info.actor_id]), sleep=hold
    )
    host = await rig.host(provider, llm_retries=0)
    settings = Settings()

    async def start(
        task_id: str, program: str, *templates: Template, **args: str
    ) -> None:
        first = task_files.created(
            program,
            settings,
            task_id,
            templates=templates,
            args=args,
            context=("Owls are birds of prey.",),
            tools=rig.tools,
        )
        await host.submit(
            f"task.{task_id}", msgspec.structs.replace(first, at=rig.clock.now())
        )

    await start("t-de", TASK_PROGRAM, topic="owls")
    await rig.recorded(TaskCompleted, 1)
    await start("t-sub", '(writer "owls")', writer, summary, judge)
    await rig.recorded(TaskCompleted, 3)  # the child's and its parent's
    loop = '(loop 2 (bind last (judge "x")) (continue last))'
    await start("t-loop", loop, judge)
    await rig.recorded(TaskFailed, 1)
    await start("t-fail", '(judge "x")', judge)
    await rig.recorded(TaskFailed, 2)
    await start("t-cancel", '(writer "owls")', writer, summary)
    child = "task.t-cancel/sub/1"
    while not any(isinstance(r.event, LlmRequested) for r in await rig.log.read(child)):
        await asyncio.sleep(0.005)  # the child asks its model, which holds
    cancel = events.CancelRequested(reason="enough", at=rig.clock.now())
    await host.submit("task.t-cancel", cancel)
    await rig.recorded(TaskFailed, 4)  # the task, and its child cancelled


async def staged(rig: Rig) -> None:
    """Staged runs (spec 004): ``stg-agent`` plans in its warmup (a reasoning
    block kept as its outcome), is refused a tool its stage does not offer,
    recovers from an empty reply, a reply asking for files and a failed
    tool, is sent back by the delivery gate once, delivers and is reviewed
    by QA (a report that is no JSON kept as text); ``stg-chat`` runs in
    chat mode without reasoning or QA: no warmup, read-only tools."""
    prompts = load_prompts()

    def settings(**changes: Any) -> dict[str, Any]:
        return {
            "protocol": "native",
            "policy": "staged",
            "prompts": prompts,
            "project_root": "/work",
            **changes,
        }

    delete = ToolCall(id="c1", name="files.delete", args={"path": "notes.txt"})
    missing = ToolCall(id="c2", name="files.read", args={"path": "missing.txt"})
    read = ToolCall(id="c3", name="files.read", args={"path": "notes.txt"})
    write = ToolCall(id="c4", name="files.write", args={"path": "x", "content": "y"})
    warmup = (
        "<ide_reasoning>\nAnalyze: summarize the notes\nPlan: read notes.txt\n"
        "Reflect: it may be missing\nAction: files.read\nDelivery: NEEDS_WORK\n"
        "</ide_reasoning>\nI will read the notes."
    )
    script: dict[str, list[Reply | str]] = {
        "stg-agent": [
            warmup,
            Reply(tool_calls=(delete,)),
            "",
            "Please send me the file contents.",
            Reply(tool_calls=(missing,)),
            Reply(tool_calls=(read,)),
            "- the notes say hello\n- nothing else\nThe notes say hello.",
            "The notes say hello.",  # the delivery check, not done: back to act
            "The notes say hello.",
            "The notes say hello.\nDelivery: DONE",
            "The answer looks right.",
        ],
        "stg-chat": [
            Reply(tool_calls=(write,)),
            Reply(tool_calls=(read,)),
            "They say hello.",
            "They say hello.\nDelivery: DONE",
        ],
    }
    host = await rig.host(per_run(script))
    (rig.workspace / "notes.txt").write_text("hello\n")
    await rig.start(host, "stg-agent", **settings(reasoning=True))
    await rig.until("stg-agent", "completed", "failed")
    chat = settings(mode="chat", qa=False)
    await rig.start(host, "stg-chat", **chat)
    await rig.until("stg-chat", "completed", "failed")


async def staged_compressed(rig: Rig) -> None:
    """A staged run whose transcript outgrows its window (``transcript_limit``
    4): each time entries leave it, a structured summary of them is recorded
    (`ContextCompressed`: its goal, the plan its warmup recorded, a failed
    tool as an open issue, the tool outputs) and shown in their place."""
    prompts = load_prompts()
    reads = [
        ToolCall(id=f"c{n}", name="files.read", args={"path": path})
        for n, path in enumerate(["notes.txt", "missing.txt", "notes.txt"], 1)
    ]
    listing = ToolCall(id="c4", name="files.list", args={})
    warmup = (
        "<ide_reasoning>\nPlan: read notes.txt and list the files\n"
        "Action: files.read\nDelivery: NEEDS_WORK\n</ide_reasoning>\nReading."
    )
    script: dict[str, list[Reply | str]] = {
        "stg-long": [
            warmup,
            *(Reply(tool_calls=(call,)) for call in (*reads, listing)),
            "The notes say hello; the workspace holds notes.txt.",
            "The notes say hello; the workspace holds notes.txt.\nDelivery: DONE",
        ]
    }
    host = await rig.host(per_run(script))
    (rig.workspace / "notes.txt").write_text("hello\n")
    await rig.start(
        host,
        "stg-long",
        protocol="native",
        policy="staged",
        reasoning=True,
        qa=False,
        prompts=prompts,
        transcript_limit=4,
    )
    await rig.until("stg-long", "completed", "failed")


_NOON = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


async def staged_revision_5(rig: Rig) -> None:
    """Staged runs of revision 5: ``stg-batch`` asks for two reads in one
    reply, the one that fails answered first, and gets the tool-failure
    recovery all the same (naming the failure); ``stg-cancel`` is cancelled
    while QA reviews its delivered answer, and completes with it."""
    settings = {
        "protocol": "native",
        "policy": "staged",
        "prompts": load_prompts(),
        "project_root": "/work",
        "revision": 5,
    }
    missing = ToolCall(id="c1", name="files.read", args={"path": "missing.txt"})
    read = ToolCall(id="c2", name="files.read", args={"path": "notes.txt"})
    answer = "The notes say hello."
    script: dict[str, list[Reply | str]] = {
        "stg-batch": [
            Reply(tool_calls=(missing, read)),
            answer,
            f"{answer}\nDelivery: DONE",
        ],
        "stg-cancel": [
            answer,
            f"{answer}\nDelivery: DONE",
            Reply(text='{"verdict": "pass"}', delay=60.0),
        ],
    }
    host = await rig.host(per_run(script, sleep=rig.clock.sleep))
    (rig.workspace / "notes.txt").write_text("hello\n")
    await rig.start(host, "stg-batch", qa=False, **settings)
    await rig.until("stg-batch", "completed", "failed")
    await rig.start(host, "stg-cancel", **settings)
    await rig.until(
        "stg-cancel",
        "running",
        when=lambda s: s.delivered is not None and s.llm_pending is not None,
    )
    cancel = events.CancelRequested(reason="stopped by an operator", at=rig.clock.now())
    await host.submit(run_stream("stg-cancel"), cancel)
    await rig.until("stg-cancel", "completed")


Scenario = Callable[[Rig], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "json_protocol": json_protocol,
    "json_invalid": json_invalid,
    "native_protocol": native_protocol,
    "native_finish": native_finish,
    "tool_rounds": tool_rounds,
    "approvals": approvals,
    "budget_pause": budget_pause,
    "budget_fail": budget_fail,
    "sleep_wake": sleep_wake,
    "subagents": subagents,
    "cancel": cancel,
    "model_errors": model_errors,
    "streams": streams,
    "claims": claims,
    "queued": queued,
    "session": session,
    "session_memory": session_memory,
    "session_subagents": session_subagents,
    "session_direct": session_direct,
    "session_revision_1": session_revision_1,
    "session_revision_2": session_revision_2,
    "session_revision_3": session_revision_3,
    "session_revision_4": session_revision_4,
    "workflow": workflow,
    "workflow_worktree": workflow_worktree,
    # the same runs created at workflow revision 1: phase run ids with ":"
    "workflow_revision_1": partial(workflow, revision=1),
    "workflow_revision_2": partial(workflow, revision=2),
    "workflow_revision_3": workflow_revision_3,
    "tasks": tasks,
    "staged": staged,
    "staged_compressed": staged_compressed,
    "staged_revision_5": staged_revision_5,
}


# -- recording ------------------------------------------------------------------------


@contextmanager
def working_directory(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


async def record(name: str, scenario: Scenario) -> list[Path]:
    """Run ``scenario`` on a fresh log; write its golden files, return them."""
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = CountingClock()
        log = await SqliteEventLog.open(
            root / "log.db", clock=clock.now, union=KINDS.union
        )
        rig = Rig(log, clock, root)
        try:
            await scenario(rig)
        finally:
            for host in rig.hosts:
                await host.stop()
            records = await log.read_all()
            await log.close()
        for stream in sorted({r.stream for r in records}):
            mine = [r for r in records if r.stream == stream]
            mismatch = replay.verify(mine, kinds=KINDS)
            assert mismatch is None, f"{name}: {stream} does not verify: {mismatch}"
        jsonl = HERE / f"{name}.jsonl"
        jsonl.write_bytes(b"".join(events.recorded_to_json(r) + b"\n" for r in records))
        written.append(jsonl)
        if name in KEEP_DB:
            assert not (root / "log.db-wal").exists(), "the log was not checkpointed"
            shutil.copyfile(root / "log.db", HERE / f"{name}.db")
            written.append(HERE / f"{name}.db")
    return written


def pin_defaults() -> int:
    """Add the defaults of fields not in defaults.json yet; keep the others."""
    path = HERE / "defaults.json"
    pinned = json.loads(path.read_text()) if path.exists() else {}
    new = {
        k: v
        for k, v in events.field_defaults(KINDS.union.types).items()
        if k not in pinned
    }
    path.write_text(json.dumps({**pinned, **new}, indent=1, sort_keys=True) + "\n")
    for name in new:
        print(f"pinned {name} = {new[name]}")
    print(f"{path.name}: {len(new)} new, {len(pinned)} kept")
    return 0


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Record the golden logs of tests/golden/ (see the docstring)."
    )
    parser.add_argument("names", nargs="*", help="scenarios to record (default: all)")
    parser.add_argument(
        "--force", action="store_true", help="rewrite files that exist already"
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios")
    parser.add_argument(
        "--pin-defaults",
        action="store_true",
        help="add the defaults of new event fields to defaults.json",
    )
    args = parser.parse_args(argv)
    if args.pin_defaults:
        return pin_defaults()
    logging.basicConfig(level=logging.ERROR)  # the failing tool's warning is planned
    if args.list:
        for name, scenario in SCENARIOS.items():
            print(f"{name:16} {(scenario.__doc__ or '').split(chr(10))[0]}")
        return 0
    unknown = sorted(set(args.names) - set(SCENARIOS))
    if unknown:
        parser.error(f"no scenario {', '.join(unknown)}; --list shows them")
    for name in args.names or SCENARIOS:
        if (HERE / f"{name}.jsonl").exists() and not args.force:
            print(f"{name}: kept (committed golden files are never rewritten)")
            continue
        for path in await record(name, SCENARIOS[name]):
            print(f"{name}: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
