"""Random runs through the real host and log: the log is the state, replay agrees.

Hypothesis draws each run's model replies (valid commands, invalid JSON, tool
failures, unknown tools, subagents, sleeps, provider errors) and plays them
through a `Host` on a real SQLite log. For every run that took part, folding
its log equals the state the host holds live, and re-deciding every recorded
input gives back the recorded decisions, by `replay.verify` and by
`steward replay --verify`. A decider changed on purpose is caught at the first
version it changes.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

import hypothesis
import msgspec
import pytest
from hypothesis import strategies as st
from support import PLAN, act

from steward import cli, events, replay
from steward.actors.run import decider as run_actor
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.reactor import run_stream
from steward.bus import SqliteEventLog
from steward.config import load_settings
from steward.effects.llm import Reply, ReplyError, ScriptedProvider
from steward.effects.tools import ToolRegistry, tool
from steward.host import Host
from steward.kinds import KINDS

TERMINAL = {"completed", "failed", "cancelled"}


class FlakyArgs(msgspec.Struct, frozen=True):
    key: str


_failures: dict[str, int] = {}


@tool("flaky.op", max_retries=2)
async def flaky(args: FlakyArgs, *, ctx: Any) -> str:
    """Fails the first two calls with each key, then succeeds."""
    seen = _failures.get(args.key, 0)
    _failures[args.key] = seen + 1
    if seen < 2:
        raise RuntimeError(f"flaky failure {seen + 1} for {args.key}")
    return f"ok {args.key}"


REPLIES: list[Reply | str] = [
    act(type="note", category="plan", content="a plan"),
    act(type="note", category="requirements", content="needs"),
    act(type="decision", content="go left"),
    act(type="set_output", output="part. ", mode="append"),
    act(type="send_message", message="hello"),
    act(type="tool_call", name="files.write", args={"path": "a.txt", "content": "x"}),
    act(type="tool_call", name="files.read", args={"path": "missing.txt"}),
    act(type="tool_call", name="files.read", args={"path": "../escape"}),
    act(type="flaky.op", args={"key": "k"}),
    act(type="tool_call", name="web.search", args={}),
    act(type="spawn_subagent", subagent={"task": "look at a.txt"}),
    act(type="spawn_subagents", subagents=[{"task": "one"}, {"task": "two"}]),
    act(type="sleep", delaySeconds=0.01),
    act(type="finish", output="done"),
    "this is not JSON {",
    '{"type": 3}',
    Reply(error=ReplyError(kind="rate_limit", message="slow down")),
    Reply(error=ReplyError(kind="auth", message="bad key", retryable=False)),
]

HOSTILE: list[Reply | str] = [
    # a model's reply is untrusted input: none of these may wedge a run
    act(type="spawn_subagents", subagents=[{"task": "write", "profile": "writer"}]),
    act(type="tool_call", name="files.read", args={"path": "n" * 300}),
    act(type="files.write", path="d/" + "n" * 300, content="x"),
    '{"type": "send_message", "message": "lone \ud800 raw"}',
    '{"type": "set_output", "output": "escaped \\ud800 lone"}',
    "\ud800 not JSON at all",
    act(type="set_output", output="ctl \x00\x07\x1b[31m\r", mode="append"),
    act(type="set_output", output="y" * 300_000),
    act(type="odd.echo", args={}),
]


class NoArgs(msgspec.Struct, frozen=True):
    pass


@tool("odd.echo")
async def odd_echo(args: NoArgs, *, ctx: Any) -> str:
    """Prints what a broken program might: lone surrogates, control characters."""
    return "odd \ud800\udfff \x00\x1b[0m" + "z" * 20_000


scripts = st.lists(st.sampled_from(REPLIES), max_size=12)
hostile_scripts = st.lists(st.sampled_from(REPLIES + HOSTILE), max_size=12)


def _player(plan: list[Reply | str], children: list[list[Reply | str]]) -> Any:
    """A reply function: the root plays ``plan``, each child its own list."""
    cursors: dict[str, list[Reply | str]] = {}

    def reply(prompt: Any, info: Any) -> Reply | str:
        mine = cursors.get(info.actor_id)
        if mine is None:
            is_root = "-" not in info.actor_id
            source = plan if is_root else (children.pop(0) if children else [])
            mine = cursors[info.actor_id] = list(source)
        if mine:
            return mine.pop(0)
        if info.priority == "subagent":
            return act(type="send_message", message=f"{info.actor_id} reporting")
        return act(type="finish", output="the end")

    return reply


async def _play(
    db: Path,
    plan: list[Reply | str],
    children: list[list[Reply | str]],
    planning_gate: bool = True,
) -> dict[str, run_state.Run]:
    """Run one root run to its end; the host's live state of every run."""
    _failures.clear()
    tools = ToolRegistry.with_builtins()
    tools.register(flaky)
    tools.register(odd_echo)
    settings = load_settings(None, env={}).run_settings("default", tools.specs())
    settings = msgspec.structs.replace(
        settings, max_iterations=12, planning_gate=planning_gate
    )
    log = await SqliteEventLog.open(db, union=KINDS.union)
    workspace = db.parent / "workspace"
    workspace.mkdir(exist_ok=True)
    host = Host(
        log,
        provider=ScriptedProvider(_player(plan, children)),
        tools=tools,
        workspace=workspace,
        llm_retries=1,
        kinds=KINDS,
    )
    host.listen(lambda rec: None)
    await host.start()
    try:
        await host.submit(
            run_stream("p1"),
            run_events.RunCreated(run_id="p1", input_text="do it", settings=settings),
        )
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            streams = await log.streams("run.")
            live = {s: (await host.state(s))[0] for s in streams}
            if all(state.status in TERMINAL for state in live.values()):
                break
            assert asyncio.get_running_loop().time() < deadline, {
                s: state.status for s, state in live.items()
            }
            await asyncio.sleep(0.01)
        assert await host.settle()  # any straggling effect tries (and is refused)
        live = {s: (await host.state(s))[0] for s in await log.streams("run.")}
        for stream, state in live.items():
            records = await log.read(stream)
            assert [r.version for r in records] == list(range(1, len(records) + 1))
            assert run_state.fold(r.event for r in records) == state, stream
            assert replay.verify(records, kinds=KINDS) is None, stream
        return {s.removeprefix("run."): state for s, state in live.items()}
    finally:
        await host.stop()
        await log.close()


@hypothesis.settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(
    plan=st.one_of(scripts, scripts.map(lambda s: [*PLAN, *s])),
    children=st.lists(scripts, max_size=3),
    planning_gate=st.booleans(),
)
def test_random_runs_fold_to_the_live_state_and_verify(
    plan: list[Reply | str], children: list[list[Reply | str]], planning_gate: bool
) -> None:
    """Any mix of replies: log fold == live state, and replay --verify passes."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "log.db"
        states = asyncio.run(_play(db, plan, children, planning_gate))
        assert states["p1"].status in TERMINAL
        for run_id in states:
            assert cli.main(["--db", str(db), "replay", run_id, "--verify"]) == 0


class _Errors(logging.Handler):
    """Collects what steward logs at ERROR: a traceback a user would see."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage()[:300])


@hypothesis.settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(
    plan=st.one_of(hostile_scripts, hostile_scripts.map(lambda s: [*PLAN, *s])),
    children=st.lists(hostile_scripts, max_size=2),
)
def test_hostile_replies_never_wedge_a_run(
    plan: list[Reply | str], children: list[list[Reply | str]]
) -> None:
    """Unknown profiles, over-long paths, lone surrogates, control characters and
    huge texts: every run ends, nothing is logged as an error, replay verifies."""
    errors = _Errors()
    logging.getLogger("steward").addHandler(errors)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "log.db"
            states = asyncio.run(_play(db, plan, children))
            assert states["p1"].status in TERMINAL
    finally:
        logging.getLogger("steward").removeHandler(errors)
    assert errors.seen == []


def test_a_changed_decider_is_reported_at_the_first_diverging_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decider that now asks at another priority from iteration 3 on is caught."""
    db = tmp_path / "log.db"
    plan = [*PLAN, act(type="decision", content="d"), act(type="finish")]
    asyncio.run(_play(db, plan, []))
    capsys.readouterr()

    recorded = asyncio.run(_records(db, "p1"))
    third = next(
        r
        for r in recorded
        if isinstance(r.event, events.LlmRequested) and r.event.iteration == 3
    )
    original = run_actor.decide

    def changed(input: events.Event, state: run_state.Run) -> list[events.Event] | None:
        decided = original(input, state)
        if decided is None:
            return None
        return [
            msgspec.structs.replace(d, priority="subagent")
            if isinstance(d, events.LlmRequested) and d.iteration >= 3
            else d
            for d in decided
        ]

    changed_run = KINDS["run"].replaced(decide=changed)
    argv = ["--db", str(db), "replay", "p1", "--verify"]
    assert cli.main(argv, kinds=KINDS.replaced(changed_run)) == 3
    out = capsys.readouterr().out
    # Reported at the input of the commit that recorded the third request.
    (step,) = [c for c in replay.commits(recorded, kinds=KINDS) if third in c]
    assert f"verify: MISMATCH at version {step[0].version}:" in out
    assert "priority='subagent'" in out


async def _records(db: Path, run_id: str) -> list[events.Recorded]:
    async with await SqliteEventLog.open(db, union=KINDS.union) as log:
        return await log.read(run_stream(run_id))
