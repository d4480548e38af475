"""Actors a decision starts are created by routing the committed decision.

A session's turn starts its run, a run's ``spawn_subagents`` its children,
a session's subagent and a workflow's phase their runs: the dispatcher
routes the committed decision and creates each child (`Dispatcher._create`) in a
commit of its own, after the parent's, caused by the deciding event, once.
A decision that conflicts starts nothing until it is written; an error in
a child's code leaves the parent committed; a child whose stream has begun
already is left as it was (the dispatcher's `Create` is refused by the
child's decider); a host scoped to another run creates nothing. Every
stream of every test replays (`steward.replay.verify`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import act

from steward import events, replay
from steward.actors.kind import Kinds
from steward.actors.prompt import Prompt
from steward.actors.run import decider as run_actor
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.events import LATEST_REVISION
from steward.actors.run.reactor import run_stream
from steward.actors.session import decider as session_actor
from steward.actors.session import events as session_events
from steward.actors.session.state import session_stream
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.decider import workflow_stream
from steward.actors.workflow.events import NodeDef, WorkflowDef
from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.effects.llm import Reply, RequestInfo, ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.events import Recorded
from steward.host import Host
from steward.host.dispatch import Dispatcher
from steward.kinds import KINDS
from steward.metrics import HOST as METRICS

SESSION = "cli:a"
STREAM = session_stream(SESSION)
DEBOUNCE = 1.0
RUN_SETTINGS = run_events.RunSettings(planning_gate=False, tools=())


@pytest.fixture
async def log(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteEventLog]:
    """A real SQLite log file, stamped by the test's clock."""
    opened = await SqliteEventLog.open(
        tmp_path / "log.db", clock=clock.now, union=KINDS.union
    )
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The streams the dispatcher's `Create` path (`Dispatcher._create`) was asked
    to start, in order."""
    asked: list[str] = []
    create = Dispatcher._create

    async def spy(self: Dispatcher, effect: Any, cause: str) -> None:
        asked.append(effect.stream)
        await create(self, effect, cause)

    monkeypatch.setattr(Dispatcher, "_create", spy)
    return asked


@pytest.fixture
def counts() -> dict[str, int]:
    """The process's host metrics at the start of the test (a baseline)."""
    return {
        "spawn": METRICS.effects["spawn"],
        "refusals": METRICS.refusals,
        "conflicts": METRICS.conflicts,
    }


def spawned(counts: dict[str, int]) -> int:
    return METRICS.effects["spawn"] - counts["spawn"]


def refused(counts: dict[str, int]) -> int:
    return METRICS.refusals - counts["refusals"]


@pytest.fixture
async def hosts(
    tmp_path: Path, log: SqliteEventLog, clock: FakeClock
) -> AsyncIterator[Any]:
    """Builds hosts over the test's log (started when asked); all stopped."""
    made: list[Host] = []

    async def make(
        replies: Any = (),
        *,
        start: bool = True,
        scope: str | None = None,
        sleep: Any = asyncio.sleep,
        kinds: Kinds = KINDS,
    ) -> Host:
        host = Host(
            log,
            kinds=kinds,
            provider=ScriptedProvider(replies, sleep=sleep),
            tools=ToolRegistry.with_builtins(),
            workspace=tmp_path,
            clock=clock,
            scope=scope,
        )
        made.append(host)
        if start:
            await host.start()
        return host

    try:
        yield make
    finally:
        for host in made:
            await host.stop()


def opening(clock: FakeClock) -> session_events.SessionOpened:
    return session_events.SessionOpened(
        session_id=SESSION,
        channel="cli",
        chat_id="a",
        settings=session_events.SessionSettings(
            debounce_seconds=DEBOUNCE, run=RUN_SETTINGS
        ),
        at=clock.now(),
    )


def message(clock: FakeClock, n: int, text: str) -> session_events.MessageReceived:
    return session_events.MessageReceived(message_id=f"m{n}", text=text, at=clock.now())


async def first_turn(host: Host, clock: FakeClock) -> Recorded:
    """Open the session, give it a message and its timer's `WakeDue`: the
    turn's record (the timer is given here, not waited for; a started
    host's fake clock never makes it due)."""
    assert await host.submit(STREAM, opening(clock)) is not None
    assert await host.submit(STREAM, message(clock, 1, "hello")) is not None
    timer = (await host.state(STREAM))[0].timer
    commit = await host.submit(STREAM, events.WakeDue(timer_id=timer))
    assert commit is not None
    turn = commit.records[-1]
    assert isinstance(turn.event, session_events.TurnStarted)
    return turn


async def waiting_turns(host: Host, clock: FakeClock, sessions: list[str]) -> Any:
    """Open ``sessions``, each with a message waiting for its timer; the
    function that gives every timer's `WakeDue` at once (their commits)."""
    timers = []
    for session in sessions:
        opened = msgspec.structs.replace(opening(clock), session_id=session)
        assert await host.submit(session_stream(session), opened) is not None
        received = message(clock, 1, f"hello from {session}")
        assert await host.submit(session_stream(session), received) is not None
        timers.append((await host.state(session_stream(session)))[0].timer)

    async def wake() -> list[Any]:
        return await asyncio.gather(
            *(
                host.submit(session_stream(s), events.WakeDue(timer_id=t))
                for s, t in zip(sessions, timers, strict=True)
            )
        )

    return wake


async def until(check: Any, timeout: float = 5.0) -> Any:
    """Poll the async ``check`` until it returns something true (what a
    host's effects record comes from its tasks; nothing here waits on time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert loop.time() < deadline, "gave up waiting"
        await asyncio.sleep(0.005)


def one(records: list[Recorded], kind: type[Any]) -> Recorded:
    [found] = [r for r in records if isinstance(r.event, kind)]
    return found


async def verify_all(log: SqliteEventLog) -> list[str]:
    """Every stream of the log is contiguous and replays to what it records."""
    streams = await log.streams("")
    for stream in streams:
        records = await log.read(stream)
        assert [r.version for r in records] == list(range(1, len(records) + 1))
        assert replay.verify(records, kinds=KINDS) is None, stream
    return streams


async def settle(host: Host) -> None:
    assert await host.settle(timeout=5.0)


# -- a session's turn ---------------------------------------------------------


async def test_a_turn_starts_its_run_by_routing_and_is_answered(
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """Two turns, each after a message and its debounce timer: the
    dispatcher creates the turn's run once, after the session's
    `TurnStarted` and caused by it, and its reply comes back to the
    session."""

    def reply(prompt: Prompt, info: RequestInfo) -> str:
        return act(type="send_message", message=f"answer of {info.actor_id}")

    host = await hosts(reply)
    assert await host.submit(STREAM, opening(clock)) is not None
    for n, text in ((1, "hello"), (2, "and again")):
        assert await host.submit(STREAM, message(clock, n, text)) is not None
        await settle(host)  # the debounce timer is armed
        clock.advance(DEBOUNCE + 0.1)

        async def replied(n: int = n) -> Recorded | None:
            found = [
                r
                for r in await log.read(STREAM)
                if isinstance(r.event, session_events.ReplySent)
            ]
            return found[n - 1] if len(found) >= n else None

        sent = await until(replied)
        run_id = f"{SESSION}-t{n}"
        assert sent.event.run_id == run_id
        assert sent.event.text == f"answer of {run_id}"

        session = await log.read(STREAM)
        [turn] = [
            r
            for r in session
            if isinstance(r.event, session_events.TurnStarted)
            and r.event.run_id == run_id
        ]
        assert turn.event.text == text
        run = await log.read(run_stream(run_id))
        start = one(run, run_events.RunCreated)  # exactly one
        assert start.version == 1
        assert start.position > turn.position  # a commit of its own
        assert start.causation_id == turn.id
        assert start.event.reply_to == STREAM
        assert start.event.input_text == text
        assert spawned(counts) == n  # one start a turn, counted once

    await settle(host)
    assert created == [run_stream(f"{SESSION}-t{n}") for n in (1, 2)]
    assert refused(counts) == 0  # no creation tried twice
    assert await verify_all(log) == [
        run_stream(f"{SESSION}-t1"),
        run_stream(f"{SESSION}-t2"),
        STREAM,
    ]


async def test_a_turn_started_by_the_reply_before_it_starts_its_run(
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """A message that comes while a turn is in flight waits for its reply;
    the second turn is decided on that reply (a `ChildFinished` the
    dispatcher delivers), and the dispatcher creates its run too."""
    gate = asyncio.Event()

    async def held(seconds: float) -> None:
        await gate.wait()

    def reply(prompt: Prompt, info: RequestInfo) -> Reply:
        text = act(type="send_message", message=f"answer of {info.actor_id}")
        return Reply(text=text, delay=1.0 if info.actor_id.endswith("-t1") else 0.0)

    host = await hosts(reply, sleep=held)
    assert await host.submit(STREAM, opening(clock)) is not None
    assert await host.submit(STREAM, message(clock, 1, "first")) is not None
    await settle(host)
    clock.advance(DEBOUNCE + 0.1)

    async def recorded(kind: type[Any], n: int) -> Recorded | None:
        found = [r for r in await log.read(STREAM) if isinstance(r.event, kind)]
        return found[n - 1] if len(found) >= n else None

    await until(lambda: recorded(session_events.TurnStarted, 1))
    routed: list[int] = []  # the positions the host's dispatcher has routed
    host.listen(lambda rec: routed.append(rec.position))
    second = await host.submit(STREAM, message(clock, 2, "second"))
    assert second is not None

    async def armed() -> bool:
        return bool(routed) and routed[-1] >= second.last_position

    await until(armed)  # routed: its debounce timer is armed
    clock.advance(DEBOUNCE + 0.1)
    await until(lambda: recorded(events.WakeDue, 2))  # the turn is in flight
    assert await recorded(session_events.TurnStarted, 2) is None
    gate.set()

    sent = await until(lambda: recorded(session_events.ReplySent, 2))
    assert sent.event.text == f"answer of {SESSION}-t2"
    session = await log.read(STREAM)
    turn = await recorded(session_events.TurnStarted, 2)
    assert turn is not None and turn.event.text == "second"
    first_reply = session[turn.version - 2]
    assert isinstance(first_reply.event, session_events.ReplySent)  # the same commit
    assert isinstance(session[turn.version - 3].event, events.ChildFinished)
    run = await log.read(run_stream(turn.event.run_id))
    start = one(run, run_events.RunCreated)
    assert start.position > turn.position
    assert start.causation_id == turn.id

    await settle(host)
    assert created == [run_stream(f"{SESSION}-t{n}") for n in (1, 2)]
    assert spawned(counts) == 2
    assert await verify_all(log) == [
        run_stream(f"{SESSION}-t1"),
        run_stream(f"{SESSION}-t2"),
        STREAM,
    ]


async def test_a_parent_that_conflicts_starts_no_child_until_it_is_written(
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """The session's stream moved on under the deciding host (a command
    appended elsewhere): the turn's append conflicts and starts nothing;
    decided again and written, its run is created once by the host that
    routes the log, caused by the turn that was written."""
    routing = await hosts()
    host = await hosts(start=False)  # decides; its cache is its own
    assert await host.submit(STREAM, opening(clock)) is not None
    assert await host.submit(STREAM, message(clock, 1, "hello")) is not None
    state, version = await host.state(STREAM)
    command = message(clock, 2, "/model")
    answered = session_actor.decide(command, state)
    assert answered is not None
    await log.append(STREAM, [command, *answered], version)  # behind the host

    commit = await host.submit(STREAM, events.WakeDue(timer_id=state.timer))
    assert commit is not None
    assert commit.first_version == version + len(answered) + 2
    turn = commit.records[-1]
    assert isinstance(turn.event, session_events.TurnStarted)
    assert METRICS.conflicts - counts["conflicts"] == 1

    await settle(routing)
    run = await log.read(run_stream(turn.event.run_id))
    start = one(run, run_events.RunCreated)  # once, after the turn written
    assert start.version == 1
    assert start.position > turn.position
    assert start.causation_id == turn.id
    assert created == [run_stream(turn.event.run_id)]
    assert spawned(counts) == 1
    await verify_all(log)


def workflow() -> workflow_events.WorkflowCreated:
    settings = run_events.RunSettings(planning_gate=False, revision=LATEST_REVISION)
    node = NodeDef(key="design", provider="default", settings=settings)
    definition = WorkflowDef(key="w", version=1, nodes=(node,))
    return workflow_events.WorkflowCreated(workflow_id="wf", definition=definition)


@pytest.mark.parametrize("case", ["session subagent", "workflow phase"])
async def test_every_kind_starts_its_children_by_routing(
    case: str,
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
    created: list[str],
) -> None:
    """A session's subagent (`SubagentStarted`) and a workflow's phase
    (`PhaseStarted`): the dispatcher creates the child run after the commit
    that decided it, caused by the deciding event, answering its parent."""
    host = await hosts([act(type="finish", output="done")])
    if case == "session subagent":
        assert await host.submit(STREAM, opening(clock)) is not None
        stream = STREAM
        input: events.Event = session_events.SubagentAsked(
            request_id="t1/tool/1", name="scout", task="count the issues"
        )
        kind: type[Any] = session_events.SubagentStarted
    else:
        stream, input, kind = (
            workflow_stream("wf"),
            workflow(),
            workflow_events.PhaseStarted,
        )
    commit = await host.submit(stream, input)
    assert commit is not None
    [deciding] = [r for r in commit.records if isinstance(r.event, kind)]
    child = run_stream(deciding.event.run_id)
    await settle(host)
    start = one(await log.read(child), run_events.RunCreated)
    assert start.position > commit.last_position
    assert start.causation_id == deciding.id
    assert start.event.reply_to == stream
    assert created == [child]
    assert await verify_all(log) == sorted([stream, child])


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
async def test_turns_decided_at_once_each_start_their_run_once(
    tmp_path: Path,
    clock: FakeClock,
    created: list[str],
    counts: dict[str, int],
    synchronous: Any,
) -> None:
    """Turns of many sessions decided at once on a started host queue for
    the log's writer together: the dispatcher creates each turn's run once,
    caused by its turn, and no creation is tried twice."""
    log = await SqliteEventLog.open(
        tmp_path / "log.db", clock=clock.now, synchronous=synchronous, union=KINDS.union
    )
    try:
        await each_run_created_once(log, tmp_path, clock, 8, created, counts)
    finally:
        await log.close()


async def each_run_created_once(
    log: Any,
    tmp_path: Path,
    clock: FakeClock,
    count: int,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """On a started host over ``log``, ``count`` sessions' turns decided at
    once: the dispatcher creates each turn's run once (and none is
    refused)."""
    sessions = [f"cli:{n}" for n in range(count)]
    host = Host(
        log,
        provider=ScriptedProvider([act(type="finish", output="hi")] * len(sessions)),
        tools=ToolRegistry.with_builtins(),
        workspace=tmp_path,
        clock=clock,
        kinds=KINDS,
    )
    try:
        await host.start()
        wake = await waiting_turns(host, clock, sessions)
        await settle(host)
        refusals = refused(counts)
        commits = await wake()
        await settle(host)
        for done in commits:
            assert done is not None
            turn = done.records[-1]
            assert isinstance(turn.event, session_events.TurnStarted)
            run = await log.read(run_stream(turn.event.run_id))
            assert one(run, run_events.RunCreated).causation_id == turn.id
        assert sorted(created) == sorted(run_stream(f"{s}-t1") for s in sessions)
        assert refused(counts) == refusals
        assert spawned(counts) == len(sessions)
    finally:
        await host.stop()


async def test_on_either_log_a_started_host_creates_each_run_once(
    tmp_path: Path,
    open_log_handle: Any,
    clock: FakeClock,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """On SQLite and on JetStream a started host's dispatcher creates each
    turn's run once."""
    log = await open_log_handle()
    await each_run_created_once(log, tmp_path, clock, 4, created, counts)


async def test_a_child_that_cannot_be_decided_leaves_its_parent_committed(
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
) -> None:
    """An error in a child's code (here the run's own decider) does not cost
    the parent its input: the turn is recorded, the run is not, and the
    host goes on."""
    decide = run_actor.decide_and_fold

    def broken(input: Any, state: Any, cache: Any = None) -> Any:
        if isinstance(input, run_events.RunCreated):
            raise RuntimeError("the run's decider is broken")
        return decide(input, state, cache)

    broken_run = KINDS["run"].replaced(step=broken)
    host = await hosts(kinds=KINDS.replaced(broken_run))
    turn = await first_turn(host, clock)
    await settle(host)
    assert (await log.read(STREAM))[-1] == turn
    assert await log.read(run_stream(turn.event.run_id)) == []
    assert await log.head() == turn.position


# -- a run's subagents --------------------------------------------------------


async def test_a_runs_subagents_start_by_routing_and_their_results_come_back(
    hosts: Any,
    log: SqliteEventLog,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """``spawn_subagents``: the dispatcher creates both children, each once,
    caused by the parent's `SubagentsSpawned`; the children answer, and the
    parent finishes with their results."""
    asked: list[str] = []

    def reply(prompt: Prompt, info: RequestInfo) -> str:
        asked.append(info.actor_id)
        if info.actor_id != "r1":
            return act(type="finish", output=f"result of {info.actor_id}")
        if asked.count("r1") == 1:
            return act(
                type="spawn_subagents",
                subagents=[{"task": "count the words"}, {"task": "name the language"}],
            )
        # the children's results, as the parent is told them
        return act(type="finish", output=prompt.messages[-1].content)

    host = await hosts(reply)
    parent = run_stream("r1")
    first = run_events.RunCreated(
        run_id="r1", input_text="split it", settings=RUN_SETTINGS
    )
    assert await host.submit(parent, first) is not None

    async def finished() -> Any:
        state, _ = await host.state(parent)
        return state if state.status in run_events.TERMINAL else None

    state = await until(finished)
    assert state.status == "completed"
    assert "result of r1-1" in state.output and "result of r1-2" in state.output

    everything = await log.read_all()
    [spawn] = [
        r for r in everything if isinstance(r.event, run_events.SubagentsSpawned)
    ]
    assert spawn.stream == parent
    children = [run_stream("r1-1"), run_stream("r1-2")]
    caused = [r for r in everything if r.causation_id == spawn.id]
    assert sorted(r.stream for r in caused if r.version == 1) == children
    assert {r.stream for r in caused} == set(children)
    assert all(r.position > spawn.position for r in caused)
    for child in children:
        records = await log.read(child)
        start = one(records, run_events.RunCreated)  # exactly one
        assert start.version == 1
        assert start.event.parent_run_id == "r1"
        end = records[-1].event
        assert isinstance(end, run_events.RunCompleted)
        assert end.output == f"result of {child.removeprefix('run.')}"

    await settle(host)
    assert sorted(asked) == ["r1", "r1", "r1-1", "r1-2"]
    assert spawned(counts) == 2
    assert sorted(created) == children
    assert refused(counts) == 0
    assert await verify_all(log) == [parent, *children]


# -- a child begun already ----------------------------------------------------


@pytest.mark.parametrize("writer", ["same handle", "another handle"])
async def test_a_child_begun_already_is_left_as_it_was(
    writer: str,
    tmp_path: Path,
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
    created: list[str],
    counts: dict[str, int],
) -> None:
    """The turn's run has events before the turn starts (written through the
    host's log handle, which knows its version, or another one, as another
    process would): the session's commit is recorded all the same, the run
    is left as it was, and the dispatcher's `Create` is refused by the run's
    decider, not appended twice."""
    child = run_stream(f"{SESSION}-t1")
    early = run_events.RunCreated(
        run_id=f"{SESSION}-t1", input_text="begun elsewhere", settings=RUN_SETTINGS
    )
    decided = run_actor.decide(early, run_state.initial)
    assert decided is not None
    if writer == "same handle":
        await log.append(child, [early, *decided], 0)
    else:
        other = await SqliteEventLog.open(
            tmp_path / "log.db", clock=clock.now, union=KINDS.union
        )
        try:
            await other.append(child, [early, *decided], 0)
        finally:
            await other.close()
    before = await log.read(child)

    host = await hosts()  # started after: it has not seen the run's stream
    turn = await first_turn(host, clock)
    assert turn.event.run_id == f"{SESSION}-t1"
    assert (await log.read(STREAM))[-1] == turn

    await settle(host)
    assert await log.read(child) == before  # no second RunCreated
    assert created == [child]  # the dispatcher tried
    assert refused(counts) == 1  # and was refused by the begun run
    assert spawned(counts) == 0
    assert await log.head() == turn.position  # nothing after the turn
    assert await verify_all(log) == [child, STREAM]


# -- a scoped host ------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "starts"),
    [(None, True), (SESSION, True), ("another-run", False)],
    ids=["unscoped", "its own scope", "another scope"],
)
async def test_a_host_scoped_elsewhere_starts_nothing(
    scope: str | None,
    starts: bool,
    hosts: Any,
    log: SqliteEventLog,
    clock: FakeClock,
    counts: dict[str, int],
) -> None:
    """A host scoped to another run records the turn and creates no run
    (whoever routes the turn in that run's scope creates it). Unscoped, or
    scoped to the session's own correlation, its dispatcher creates the
    run, caused by the turn."""
    host = await hosts([act(type="finish", output="done")], scope=scope)
    turn = await first_turn(host, clock)
    assert turn.correlation_id == SESSION
    await settle(host)

    run = await log.read(run_stream(turn.event.run_id))
    if starts:
        assert one(run, run_events.RunCreated).causation_id == turn.id
        assert spawned(counts) == 1
    else:
        assert run == []
        assert await log.head() == turn.position
        assert spawned(counts) == 0
    await verify_all(log)


# -- each chat's own debounce -------------------------------------------------


async def test_each_chat_starts_its_turn_when_its_own_debounce_is_due(
    hosts: Any, log: SqliteEventLog, clock: FakeClock
) -> None:
    """Two chats whose messages came 0.5 s apart, on a started host and a
    fake clock: time short of either debounce starts no turn; once only the
    first chat's timer is due, only its turn starts; the second's starts
    when its own comes due."""

    def reply(prompt: Prompt, info: RequestInfo) -> str:
        return act(type="send_message", message=f"answer of {info.actor_id}")

    host = await hosts(reply)
    other = "cli:b"
    streams = {SESSION: STREAM, other: session_stream(other)}
    start = clock.now()
    for n, (session, stream) in enumerate(streams.items()):
        opened = msgspec.structs.replace(
            opening(clock), session_id=session, chat_id=session.partition(":")[2]
        )
        assert await host.submit(stream, opened) is not None
        received = message(clock, 1, f"hello from {session}")
        assert await host.submit(stream, received) is not None
        await settle(host)  # its debounce timer is armed
        if n == 0:
            clock.advance(0.5)

    async def recorded(session: str, kind: type[Any]) -> list[Recorded]:
        return [
            r for r in await log.read(streams[session]) if isinstance(r.event, kind)
        ]

    [armed_a] = await recorded(SESSION, session_events.DebounceArmed)
    [armed_b] = await recorded(other, session_events.DebounceArmed)
    assert (armed_a.event.due, armed_b.event.due) == (
        start + DEBOUNCE,
        start + 0.5 + DEBOUNCE,
    )

    clock.advance(0.25)  # 0.75 s after the first message: neither is due
    await settle(host)
    for session in streams:
        assert await recorded(session, events.WakeDue) == []
        assert await recorded(session, session_events.TurnStarted) == []

    clock.advance(0.5)  # 1.25 s: only the first chat's timer is due
    [turn_a] = await until(lambda: recorded(SESSION, session_events.TurnStarted))
    assert turn_a.event.text == f"hello from {SESSION}"
    [wake_a] = await recorded(SESSION, events.WakeDue)
    assert wake_a.event.at == start + 1.25
    await until(lambda: recorded(SESSION, session_events.ReplySent))
    await settle(host)
    assert await recorded(other, events.WakeDue) == []
    assert await recorded(other, session_events.TurnStarted) == []

    clock.advance(0.5)  # 1.75 s: the second chat's timer is due too
    [turn_b] = await until(lambda: recorded(other, session_events.TurnStarted))
    assert turn_b.event.text == f"hello from {other}"
    assert turn_b.event.run_id == f"{other}-t1"
    [wake_b] = await recorded(other, events.WakeDue)
    assert wake_b.event.at == start + 1.75
    [sent_b] = await until(lambda: recorded(other, session_events.ReplySent))
    assert sent_b.event.text == f"answer of {other}-t1"
    await settle(host)
    assert len(await recorded(SESSION, session_events.TurnStarted)) == 1
    assert await verify_all(log) == [
        run_stream(f"{SESSION}-t1"),
        run_stream(f"{other}-t1"),
        STREAM,
        streams[other],
    ]
