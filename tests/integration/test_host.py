"""The host over a real SQLite log: runs, effects, children, timers, recovery."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import prometheus_client
import pytest
from counter_kind import COUNTER, CounterAdd, CounterAdded
from counter_kind import Counter as Count
from counter_kind import decide as counter_decide
from prometheus_client.parser import text_string_to_metric_families
from support import PLAN, act, with_kinds

from steward import events, replay
from steward.actors.kind import Kinds
from steward.actors.run import decider as run_actor
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.reactor import run_stream
from steward.actors.run.state import Run
from steward.bus import EventLog
from steward.clock import FakeClock
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry, tool
from steward.host import Host
from steward.host import states as states_module
from steward.kinds import KINDS, kind_of
from steward.metrics import HOST as METRICS
from steward.projections.store import Projector

TOOLS = ToolRegistry.with_builtins().specs()


def created(run_id: str = "r1", **settings: Any) -> run_events.RunCreated:
    return run_events.RunCreated(
        run_id=run_id,
        input_text="do the thing",
        settings=run_events.RunSettings(tools=settings.pop("tools", TOOLS), **settings),
    )


async def wait_status(
    host: Host, run_id: str, *statuses: str, timeout: float = 10.0
) -> Run:
    """Poll the run's state, as its log records it, until it reaches one of
    ``statuses``."""
    stream = run_stream(run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = kind_of(stream).fold(r.event for r in await host.log.read(stream))
        if state.status in statuses:
            return state
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run_id} stayed {state.status}, not {statuses}")
        await asyncio.sleep(0.01)


async def check_log(log: EventLog) -> None:
    """Every run stream is contiguous, answers each request once, and verifies."""
    for stream in await log.streams("run."):
        records = await log.read(stream)
        assert [r.version for r in records] == list(range(1, len(records) + 1))
        answers = Counter(
            getattr(r.event, "request_id", None)
            for r in records
            if isinstance(r.event, events.LlmResponded | events.ToolResulted)
        )
        assert all(n == 1 for n in answers.values()), answers
        requests = [
            r.event.request_id
            for r in records
            if isinstance(r.event, events.LlmRequested | events.ToolRequested)
        ]
        assert len(requests) == len(set(requests)) or any(
            isinstance(r.event, run_events.ApprovalRequested) for r in records
        )
        assert replay.verify(records, kinds=KINDS) is None, stream


async def test_tool_subagent_and_sleep_run_to_completion(make_host, log, clock) -> None:
    """A run writes a file, waits for a child, sleeps, and finishes; replay verifies."""
    provider = ScriptedProvider(
        [
            *PLAN,
            act(
                type="tool_call",
                name="files.write",
                args={"path": "a.txt", "content": "hi"},
            ),
            act(type="spawn_subagent", subagent={"task": "read a.txt"}),
            # the child's replies come next: it runs while the parent waits
            *PLAN,
            act(type="files.read", args={"path": "a.txt"}),
            act(type="send_message", message="a.txt says hi"),
            act(type="sleep", delaySeconds=30),
            act(type="finish", output="done"),
        ]
    )
    host = await make_host(provider)
    await host.submit(run_stream("r1"), created())
    await wait_status(host, "r1", "waiting")
    state = await wait_status(host, "r1", "waiting")
    for _ in range(200):
        state = await wait_status(host, "r1", "waiting", "completed")
        if state.timer_id is not None:
            break
        await asyncio.sleep(0.01)
    assert state.timer_id == "r1/wake/1"
    clock.advance(31)
    state = await wait_status(host, "r1", "completed")
    assert state.output == "done"
    child = await wait_status(host, "r1-1", "completed")
    assert child.output == "a.txt says hi"
    await check_log(log)


async def test_a_host_keeps_a_bounded_number_of_states(
    make_host, log, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its caps a host forgets the states and versions written longest
    ago; a forgotten run is folded from the log again when its input comes."""
    monkeypatch.setattr(states_module, "_CACHED_STATES", 10)
    monkeypatch.setattr(states_module, "_KNOWN_VERSIONS", 20)
    replies = [act(type="sleep", delaySeconds=60), act(type="finish", output="up")]
    host = await make_host(ScriptedProvider(replies, per_run=True))
    runs = [f"r{n}" for n in range(30)]
    for run_id in runs:
        await host.submit(run_stream(run_id), created(run_id, planning_gate=False))
    for run_id in runs:
        await wait_status(host, run_id, "waiting")
    cached, known = host.states.sizes()
    assert cached <= 10 and known <= 20
    assert host.states.cached(run_stream("r0")) is None

    clock.advance(61)
    for run_id in runs:
        state = await wait_status(host, run_id, "completed")
        assert state.output == "up"
    assert host.states.sizes()[0] <= 10
    await check_log(log)


async def test_unanswered_model_call_resumes_after_restart(
    tmp_path: Path, make_host, log
) -> None:
    """A model call cut off by a stop is asked again by the next host, once."""
    stuck = asyncio.Event()

    def never(prompt: Any, info: Any) -> str:
        raise AssertionError("unreachable")

    class Hanging(ScriptedProvider):
        async def stream(self, prompt: Any, info: Any):  # type: ignore[override]
            stuck.set()
            await asyncio.Event().wait()
            yield  # pragma: no cover

    first = await make_host(Hanging(never))
    await first.submit(run_stream("r1"), created(planning_gate=False))
    await asyncio.wait_for(stuck.wait(), 5)
    await first.stop()

    second = await make_host([act(type="finish", output="resumed")])
    state = await wait_status(second, "r1", "completed")
    assert state.output == "resumed"
    await check_log(log)


async def test_a_request_whose_prompt_changed_is_not_sent(make_host, log) -> None:
    """A recorded request whose prompt the code now builds differently fails.

    The model is never asked a prompt other than the one the log's hash names:
    the run records a clear LlmFailed instead.
    """
    start = created(planning_gate=False)
    decided = run_actor.decide(start, run_state.initial)
    assert decided is not None
    tampered = [
        msgspec.structs.replace(d, prompt_hash="0" * 32)
        if isinstance(d, events.LlmRequested)
        else d
        for d in decided
    ]
    await log.append(run_stream("r1"), [start, *tampered], 0)
    asked: list[str] = []

    def reply(prompt: Any, info: Any) -> str:
        asked.append(info.request_id)
        return act(type="finish")

    host = await make_host(ScriptedProvider(reply))
    await wait_status(host, "r1", "failed")
    assert asked == []
    failed = [r.event for r in await log.read(run_stream("r1"))][-2]
    assert isinstance(failed, events.LlmFailed)
    assert failed.kind == "internal"
    assert "does not match the recorded hash" in failed.message


async def test_sleep_survives_restart(make_host, log, clock: FakeClock) -> None:
    """A sleeping run is woken by a later host once its time has come."""
    first = await make_host([act(type="sleep", delaySeconds=60)])
    await first.submit(run_stream("r1"), created(planning_gate=False))
    await wait_status(first, "r1", "waiting")
    await first.stop()

    clock.advance(61)
    second = await make_host([act(type="finish", output="awake")])
    state = await wait_status(second, "r1", "completed")
    assert state.output == "awake"
    await check_log(log)


async def test_cancel_cascades_to_children(make_host, log) -> None:
    """Cancelling a parent cancels the children it waits on."""
    gate = asyncio.Event()

    def reply(prompt: Any, info: Any) -> str:
        if info.priority == "interactive":
            return act(type="spawn_subagents", subagents=[{"task": "a"}, {"task": "b"}])
        return act(type="sleep", delaySeconds=3600)

    host = await make_host(ScriptedProvider(reply))
    await host.submit(run_stream("r1"), created(planning_gate=False))
    await wait_status(host, "r1-1", "waiting")
    await wait_status(host, "r1-2", "waiting")
    commit = await host.submit(run_stream("r1"), events.CancelRequested(reason="stop"))
    assert commit is not None
    for child in ("r1-1", "r1-2"):
        state = await wait_status(host, child, "cancelled")
        assert state.reason == "parent run was cancelled"
    gate.set()
    await check_log(log)


class DeployArgs(msgspec.Struct, frozen=True):
    target: str


@tool("ops.deploy", requires_approval=True)
async def deploy(args: DeployArgs, *, ctx: Any) -> str:
    return f"deployed {args.target}"


async def test_approval_then_denial(make_host, log) -> None:
    """A tool that needs approval waits; approval runs it, denial tells the model."""

    tools = ToolRegistry.with_builtins()
    tools.register(deploy)
    seen: list[str] = []

    def reply(prompt: Any, info: Any) -> str:
        seen.append(prompt.messages[-1].content)
        n = len(seen)
        if n in (1, 3):
            return act(type="ops.deploy", args={"target": "prod"})
        return act(type="finish", output=f"finished after {n}")

    host = await make_host(ScriptedProvider(reply), tools)
    await host.submit(
        run_stream("r1"), created(tools=tools.specs(), planning_gate=False)
    )
    state = await wait_status(host, "r1", "waiting")
    approve = run_events.ApprovalDecided(
        request_id=state.approvals[0].request_id, approved=True
    )
    assert await host.submit(run_stream("r1"), approve) is not None
    await wait_status(host, "r1", "completed")

    await host.submit(
        run_stream("r2"), created("r2", tools=tools.specs(), planning_gate=False)
    )
    state = await wait_status(host, "r2", "waiting")
    deny = run_events.ApprovalDecided(
        request_id=state.approvals[0].request_id, approved=False, reason="not on friday"
    )
    await host.submit(run_stream("r2"), deny)
    await wait_status(host, "r2", "completed")
    assert "deployed prod" in seen[1]
    assert "not on friday" in seen[3]
    await check_log(log)


async def test_operator_input_from_another_process_reaches_the_host(
    make_host, log, open_log_handle
) -> None:
    """A cancel appended through a second handle on the same log stops the run."""
    host = await make_host([act(type="sleep", delaySeconds=3600)])
    await host.submit(run_stream("r1"), created(planning_gate=False))
    await wait_status(host, "r1", "waiting")

    operator = Host(await open_log_handle(), kinds=KINDS)
    assert await operator.submit(run_stream("r1"), events.CancelRequested()) is not None
    state = await wait_status(host, "r1", "cancelled")
    assert state.reason == "cancelled by operator"


async def test_duplicate_results_are_refused(make_host, log) -> None:
    """A second answer to the same request is refused and records nothing."""
    host = await make_host([act(type="sleep", delaySeconds=3600)])
    await host.submit(run_stream("r1"), created(planning_gate=False))
    await wait_status(host, "r1", "waiting")
    before = await log.version(run_stream("r1"))
    duplicate = events.LlmResponded(request_id="r1/llm/1", text="{}")
    assert await host.submit(run_stream("r1"), duplicate) is None
    assert await log.version(run_stream("r1")) == before


class _SlowReads:
    """The test's log; the next read after `hold_next` waits for `release`."""

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._held: asyncio.Event | None = None
        self.reading = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def hold_next(self) -> asyncio.Event:
        self._held = asyncio.Event()
        return self._held

    async def read(self, stream: str, from_version: int = 1) -> list[Any]:
        held, self._held = self._held, None
        records = await self._log.read(stream, from_version)
        if held is not None:
            self.reading.set()
            await held.wait()
        return records


async def test_a_read_overlapping_a_commit_is_not_decided_on(log) -> None:
    """A state read before a commit but returned after it is read again.

    Otherwise it would replace the newer state in the cache, and the answer
    to the next request would be refused on it: the run would stall.
    """
    slow = _SlowReads(log)
    host = Host(slow, kinds=KINDS)  # type: ignore[arg-type]
    stream = run_stream("r1")
    await host.submit(stream, created(planning_gate=False))
    host.states.forget(stream)
    release = slow.hold_next()
    reader = asyncio.create_task(host.state(stream))
    await slow.reading.wait()  # the reader has the run at its first request
    first = events.LlmResponded(
        request_id="r1/llm/1", text=act(type="note", category="x", content="y")
    )
    commit = await host.submit(stream, first)  # reads the log itself, unheld
    assert commit is not None
    host.states.forget(stream)  # as after a conflict, or another process's commit
    release.set()  # the reader's result is older than the log now
    state, version = await reader
    assert version == commit.last_version
    assert state.llm_pending == "r1/llm/2"
    second = events.LlmResponded(
        request_id="r1/llm/2", text=act(type="finish", output="done")
    )
    assert await host.submit(stream, second) is not None
    assert (await host.state(stream))[0].status == "completed"


async def test_projections_rebuild_identically(tmp_path: Path, make_host, log) -> None:
    """Dropping and replaying the projections gives byte-identical tables."""
    host = await make_host(
        [*PLAN, act(type="files.list", args={}), act(type="finish", output="ok")]
    )
    await host.submit(run_stream("r1"), created())
    await wait_status(host, "r1", "completed")
    await host.stop()
    projector = await Projector.open(tmp_path / "log.db", kinds=KINDS)
    try:
        await projector.catch_up(log)
        tables = ("runs", "run_steps", "pending")
        before = [
            await projector.query(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables
        ]
        await projector.rebuild(log)
        after = [
            await projector.query(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables
        ]
        status = await projector.query("SELECT id, status FROM runs")
    finally:
        await projector.close()
    assert before == after
    assert status == [("r1", "completed")]
    assert len(before[1]) == await log.version(run_stream("r1"))


async def test_log_stores_a_long_conversation_once(make_host, log) -> None:
    """100 model calls over a 50 KB conversation add only bytes per call, not KB."""
    conversation = tuple(
        events.ChatMessage(role="user" if i % 2 else "assistant", content="x" * 500)
        for i in range(100)
    )
    replies = [
        act(type="set_output", output=f"step {i}. ", mode="append") for i in range(99)
    ]
    provider = ScriptedProvider([*replies, act(type="send_message", message="done?")])
    host = await make_host(provider)
    start = run_events.RunCreated(
        run_id="r1",
        input_text="long",
        conversation=conversation,
        settings=run_events.RunSettings(max_iterations=200, planning_gate=False),
    )
    await host.submit(run_stream("r1"), start)
    state = await wait_status(host, "r1", "completed", timeout=30)
    assert state.iteration == 100
    records = await log.read(run_stream("r1"))
    sizes = [len(events.encode(r.event)) for r in records]
    first, rest = sizes[0], sum(sizes[1:])
    assert first > 50_000
    per_call = rest / 100
    assert per_call < 400, f"{per_call:.0f} bytes per call"


@pytest.mark.parametrize("protocol", ["native"])
async def test_native_protocol_runs_tools(make_host, log, protocol: str) -> None:
    """The native tool-calling loop runs tools and ends on a plain answer."""
    from steward.effects.llm import Reply

    provider = ScriptedProvider(
        [
            Reply(
                text="",
                tool_calls=(
                    events.ToolCall(
                        id="c1", name="files.write", args={"path": "n", "content": "1"}
                    ),
                    events.ToolCall(id="c2", name="files.list", args={}),
                ),
            ),
            "all done",
        ]
    )
    host = await make_host(provider)
    await host.submit(run_stream("r1"), created(protocol=protocol))
    state = await wait_status(host, "r1", "completed")
    assert state.output == "all done"
    assert state.tool_calls == 2
    await check_log(log)


def _scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample Prometheus would scrape now, by name and labels."""
    text = prometheus_client.generate_latest().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_count_commits_and_effects(make_host, log) -> None:
    before = _scrape()
    host = await make_host(
        [*PLAN, act(type="files.list", args={}), act(type="finish", output="ok")]
    )
    await host.submit(run_stream("m1"), created("m1"))
    await wait_status(host, "m1", "completed")
    records = await log.read(run_stream("m1"))
    after = _scrape()

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    calls = sum(isinstance(r.event, events.LlmRequested) for r in records)
    answers = sum(
        isinstance(r.event, events.LlmResponded | events.ToolResulted) for r in records
    )
    assert calls == 4
    assert grew("steward_effects_total", kind="llm") == calls
    assert grew("steward_effects_total", kind="tool") == 1
    assert grew("steward_tool_calls_total", outcome="ok") == 1
    assert grew("steward_llm_tokens_total", kind="output") > 0
    # one commit for the RunCreated, one for each answer
    assert grew("steward_commits_total") == 1 + answers
    assert grew("steward_effect_seconds_count", kind="llm") == calls
    assert grew("steward_effect_seconds_bucket", kind="llm", le="+Inf") == calls


class _LateAcks:
    """The test's log, but an append is confirmed a few loop turns after it
    is committed (as over a network): followers, the host's dispatcher among
    them, see a commit before its writer hears back."""

    def __init__(self, log: EventLog) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    async def append(self, *args: Any, **kw: Any) -> Any:
        commit = await self._log.append(*args, **kw)
        for _ in range(5):
            await asyncio.sleep(0)
        return commit


@pytest.mark.parametrize("acks", ["prompt", "late"])
async def test_each_model_request_reaches_the_provider_once(
    tmp_path: Path, log, clock, acks: str
) -> None:
    """A run's next model call starts from the commit of the answer before
    it, or from the dispatcher when that sees the commit first: never both."""
    replies = iter(
        [
            *PLAN,
            *(act(type="set_output", output=f"{n} ", mode="append") for n in range(6)),
            act(type="finish"),
        ]
    )
    asked: list[str] = []

    def reply(prompt: Any, info: Any) -> str:
        asked.append(info.request_id)
        return next(replies)

    host = Host(
        log if acks == "prompt" else _LateAcks(log),
        provider=ScriptedProvider(reply),
        tools=ToolRegistry.with_builtins(),
        workspace=tmp_path,
        clock=clock,
        kinds=KINDS,
    )
    await host.start()
    try:
        await host.submit(run_stream("once"), created("once"))
        await wait_status(host, "once", "completed")
        assert await host.settle()  # the dispatcher has routed the last commits
    finally:
        await host.stop()
    requested = [
        r.event.request_id
        for r in await log.read(run_stream("once"))
        if isinstance(r.event, events.LlmRequested)
    ]
    assert len(requested) == 9
    assert asked == requested


def queued(run_id: str) -> run_events.RunCreated:
    return msgspec.structs.replace(created(run_id, planning_gate=False), queued=True)


async def test_a_queued_run_waits_pending_for_the_next_host(
    tmp_path: Path, make_host, log
) -> None:
    """A run queued with no host stays pending (its projection too, with a
    pending row); a host started later takes it from the pending projection."""
    await Host(log, kinds=KINDS).submit(run_stream("q1"), queued("q1"))
    projector = await Projector.open(tmp_path / "log.db", kinds=KINDS)
    try:
        await projector.catch_up(log)
        runs = await projector.query("SELECT status, iterations FROM runs")
        pending = await projector.query("SELECT key, kind FROM pending")
    finally:
        await projector.close()
    assert runs == [("pending", 0)]
    assert pending == [("take:q1", "take")]

    host = await make_host([act(type="finish", output="taken")])
    state = await wait_status(host, "q1", "completed")
    assert state.output == "taken"
    kinds = [type(r.event).__name__ for r in await log.read(run_stream("q1"))]
    assert kinds[:3] == ["RunCreated", "RunTaken", "RunStarted"]
    await check_log(log)


async def test_a_host_takes_a_run_queued_while_it_runs(
    make_host, log, open_log_handle
) -> None:
    """A run queued through another handle reaches a running host, which takes it."""
    host = await make_host([act(type="finish", output="taken live")])
    await Host(await open_log_handle(), kinds=KINDS).submit(
        run_stream("q2"), queued("q2")
    )
    state = await wait_status(host, "q2", "completed")
    assert state.output == "taken live"
    await check_log(log)


async def test_a_host_scoped_to_a_run_does_no_other_runs_work(make_host, log) -> None:
    """A host scoped to one run (`steward run`) neither takes a queued run nor
    makes another run's pending model call; it carries out its own run."""
    other = Host(log, kinds=KINDS)
    await other.submit(run_stream("left"), created("left", planning_gate=False))
    await other.submit(run_stream("queued"), queued("queued"))
    provider = ScriptedProvider([act(type="finish", output="mine done")])
    host = await make_host(provider, scope="mine")
    await host.submit(run_stream("mine"), created("mine", planning_gate=False))
    assert (await wait_status(host, "mine", "completed")).output == "mine done"
    assert await host.settle()  # a wrong take or call would be made and recorded
    assert provider.used == 1
    left = replay.rebuild(await log.read(run_stream("left")), kinds=KINDS)
    assert (left.status, left.llm_pending) == ("running", "left/llm/1")
    assert (
        replay.rebuild(await log.read(run_stream("queued")), kinds=KINDS).status
        == "pending"
    )


async def test_a_request_answered_in_its_own_commit_is_not_asked(
    make_host, log, open_log_handle
) -> None:
    """Of a run written as one commit by another process (a fork's copy), a
    host asks only the model call still open, not those answered in it."""
    note = act(type="note", category="n", content="c")
    copy = _one_commit(events.LlmResponded(request_id="copied/llm/1", text=note))
    asked: list[str] = []

    def reply(prompt: Any, info: Any) -> str:
        asked.append(info.request_id)
        return act(type="finish", output="from the copy")

    host = await make_host(ScriptedProvider(reply))
    await _written_elsewhere(copy, log, await open_log_handle())
    assert await host.settle()  # a second call would be made and answered
    assert asked == ["copied/llm/2"]


def _one_commit(*inputs: events.Event) -> list[events.Event]:
    """Run "copied" created and given ``inputs``, decided here as one commit
    (as a fork writes its copy); the copy leaves model call 2 open."""
    state = run_state.initial
    copy: list[events.Event] = []
    for input in (created("copied", planning_gate=False), *inputs):
        decided = run_actor.decide(input, state)
        assert decided is not None, input
        copy += [input, *decided]
        state = run_state.fold([input, *decided], state)
    assert state.llm_pending == "copied/llm/2"
    return copy


async def _written_elsewhere(
    copy: list[events.Event], log: EventLog, writer: EventLog
) -> None:
    """Append ``copy`` through another handle and wait until the host
    completes the run "from the copy" (read from the log: the host's cache
    stays its own)."""
    await writer.append(run_stream("copied"), copy, 0, correlation_id="copied")
    for _ in range(500):
        state = replay.rebuild(await log.read(run_stream("copied")), kinds=KINDS)
        if state.status == "completed":
            break
        await asyncio.sleep(0.01)
    assert state.output == "from the copy"


async def test_a_tool_call_answered_in_its_own_commit_is_not_made(
    tmp_path: Path, make_host, log, open_log_handle
) -> None:
    """Of a run written as one commit by another process (a fork's copy), a
    host makes no tool call that the copy answers already."""
    write = act(
        type="tool_call",
        name="files.write",
        args={"path": "out.txt", "content": "x\n", "mode": "append"},
    )
    copy = _one_commit(
        events.LlmResponded(request_id="copied/llm/1", text=write),
        events.ToolResulted(request_id="copied/tool/1", ok=True, output="done"),
    )
    host = await make_host([act(type="finish", output="from the copy")])
    await _written_elsewhere(copy, log, await open_log_handle())
    assert await host.settle()  # a repeated call would be made and answered
    assert not (tmp_path / "workspace" / "out.txt").exists()


class _CountedReads(_SlowReads):
    """The test's log, counting the stream reads made of it."""

    def __init__(self, log: EventLog) -> None:
        super().__init__(log)
        self.reads: list[str] = []

    async def read(self, stream: str, from_version: int = 1) -> list[Any]:
        self.reads.append(stream)
        return await super().read(stream, from_version)


async def test_a_stream_begun_by_its_opening_input_is_not_read_first(log) -> None:
    counted = _CountedReads(log)
    host = Host(counted, provider=ScriptedProvider([PLAN]), kinds=KINDS)  # type: ignore[arg-type]
    commit = await host.submit(run_stream("new"), created("new"))
    assert commit is not None and commit.first_version == 1
    assert counted.reads == []
    # any other input to a stream the host does not know is read first
    await host.submit(run_stream("other"), events.CancelRequested())
    assert counted.reads == [run_stream("other")]


async def test_an_opening_input_to_a_stream_another_host_began_is_decided_on_it(
    log,
) -> None:
    first = Host(log, provider=ScriptedProvider([PLAN]), kinds=KINDS)
    await first.submit(run_stream("r1"), created("r1"))
    before = await log.read(run_stream("r1"))
    conflicts = METRICS.conflicts
    second = Host(
        log, provider=ScriptedProvider([PLAN]), kinds=KINDS
    )  # knows nothing of r1
    assert await second.submit(run_stream("r1"), created("r1")) is None  # refused
    assert await log.read(run_stream("r1")) == before
    assert METRICS.conflicts == conflicts  # a guess, not a conflict
    state, version = await second.state(run_stream("r1"))
    assert (state.status, version) == ("running", len(before))


def _touch(input: events.Event, state: Count) -> list[events.Event] | None:
    """The counter's decider, but adding nothing to an empty counter is refused."""
    if isinstance(input, CounterAdd) and input.n == 0 and state.total == 0:
        return None
    return counter_decide(input, state)


TOUCH = with_kinds(COUNTER.replaced(name="touch", decide=_touch, opens=(CounterAdd,)))
"""steward's kinds and a counter that opens with `CounterAdd`."""


@pytest.mark.parametrize("kinds", [TOUCH])  # the log's, too (its fixture's)
async def test_an_opening_input_refused_on_a_guess_is_decided_on_the_log(
    log, kinds: Kinds
) -> None:
    await Host(log, kinds=kinds).submit("touch.t", CounterAdd(n=2))
    late = Host(log, kinds=kinds)  # knows nothing of touch.t: guesses it empty
    commit = await late.submit("touch.t", CounterAdd(n=0))
    assert commit is not None  # decided again on the counter at 2
    assert [type(r.event) for r in await log.read("touch.t")][-1] is CounterAdded
