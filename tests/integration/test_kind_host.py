"""A kind defined in this test runs through the host like the run kind.

The tally actor counts; at three it writes a file with a tool, sleeps on a
timer, then starts a child run whose result comes back to it through the
child's ``reply_to``. Nothing under ``steward/`` knows it: the table of kinds
the test's log, hosts and projections serve holds it (the ``kinds`` fixture),
and it runs on both logs (the ``log`` fixture).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import act, with_kinds

from steward import events, replay
from steward.actors.effects import ArmTimer, Create, Effect, Pending, Want
from steward.actors.kind import Kind, Kinds
from steward.actors.llm import ScriptedProvider
from steward.clock import FakeClock
from steward.events import Event, Recorded
from steward.projections.projection import Projection
from steward.projections.store import Projector


class Tally(msgspec.Struct, frozen=True):
    id: str = ""
    total: int = 0
    tool: str | None = None
    timer: str | None = None
    child: str | None = None
    output: str | None = None


class TallyOpened(Event, frozen=True, kw_only=True):
    tally_id: str


class TallyAdd(Event, frozen=True, kw_only=True):
    n: int


class TallyCounted(Event, frozen=True, kw_only=True):
    total: int


class TallySlept(Event, frozen=True, kw_only=True):
    timer_id: str
    due: float


class TallyChildAsked(Event, frozen=True, kw_only=True):
    run_id: str


class TallyDone(Event, frozen=True, kw_only=True):
    output: str


def evolve(state: Tally, event: Event) -> Tally:
    replace = msgspec.structs.replace
    match event:
        case TallyOpened(tally_id=tally_id):
            return replace(state, id=tally_id)
        case TallyCounted(total=total):
            return replace(state, total=total)
        case events.ToolRequested(request_id=rid):
            return replace(state, tool=rid)
        case events.ToolResulted():
            return replace(state, tool=None)
        case TallySlept(timer_id=timer_id):
            return replace(state, timer=timer_id)
        case events.WakeDue():
            return replace(state, timer=None)
        case TallyChildAsked(run_id=run_id):
            return replace(state, child=run_id)
        case TallyDone(output=output):
            return replace(state, child=None, output=output)
        case _:
            return state


def decide(input: Event, state: Tally) -> list[Event] | None:
    match input:
        case TallyOpened() if not state.id:
            return []
        case TallyAdd(n=n) if state.id and state.total < 3:
            total = state.total + n
            if total < 3:
                return [TallyCounted(total=total)]
            write = events.ToolRequested(
                request_id=f"{state.id}/tool/1",
                name="files.write",
                args={"path": f"{state.id}.txt", "content": str(total)},
            )
            return [TallyCounted(total=total), write]
        case events.ToolResulted(request_id=rid, at=at) if rid == state.tool:
            return [TallySlept(timer_id=f"{state.id}/wake/1", due=at + 5)]
        case events.WakeDue(timer_id=tid) if tid == state.timer:
            return [TallyChildAsked(run_id=f"{state.id}-child")]
        case events.SubagentFinished(result=r) if r.run_id == state.child:
            return [TallyDone(output=r.output)]
        case _:
            return None


def effects(rec: Recorded, at: Tally, latest: Tally) -> list[Effect]:
    match rec.event:
        case TallySlept(timer_id=timer_id, due=due):
            return [ArmTimer(timer_id=timer_id, due=due)]
        case TallyChildAsked(run_id=run_id):
            settings = events.RunSettings(
                planning_gate=False, revision=events.LATEST_REVISION
            )
            child = events.RunCreated(
                run_id=run_id,
                input_text="say hi",
                settings=settings,
                reply_to=rec.stream,
            )
            return [
                Create(
                    key=f"spawn:{run_id}",
                    stream=f"run.{run_id}",
                    input=child,
                    stamp=True,
                )
            ]
        case _:
            return []


def pending(event: Event) -> Pending:
    """What a tally's event asks of a host that a crash must not lose."""
    match event:
        case TallySlept(timer_id=timer_id, due=due):
            return Pending(wants=(Want(key=timer_id, kind="timer", due_at=due),))
        case events.WakeDue(timer_id=timer_id):
            return Pending(answers=(timer_id,))
        case TallyChildAsked(run_id=run_id):
            return Pending(wants=(Want(key=f"spawn:{run_id}", kind="create"),))
        case events.SubagentFinished(result=result):
            return Pending(answers=(f"notify:{result.run_id}",))
        case TallyDone():
            return Pending(ended=True)
        case _:
            return Pending()


TALLY: Kind[Tally] = Kind(
    name="tally",
    initial=Tally(),
    evolve=evolve,
    decide=decide,
    inputs=(
        TallyOpened,
        TallyAdd,
        events.ToolResulted,
        events.WakeDue,
        events.SubagentFinished,
    ),
    events=(
        TallyOpened,
        TallyAdd,
        TallyCounted,
        TallySlept,
        TallyChildAsked,
        TallyDone,
        events.ToolRequested,
        events.ToolResulted,
        events.WakeDue,
        events.SubagentFinished,
    ),
    routed=frozenset({TallySlept, TallyChildAsked}),
    effects=effects,
    awaits=lambda state, rid: state.tool == rid,
    pending=pending,
)


def project(conn: Any, rec: Recorded) -> None:
    """The tally's read model: one row per tally, its total and output."""
    tally_id = rec.stream.removeprefix("tally.")
    match rec.event:
        case TallyOpened():
            conn.execute("INSERT INTO tallies VALUES (?, 0, NULL)", (tally_id,))
        case TallyCounted(total=total):
            conn.execute("UPDATE tallies SET total=? WHERE id=?", (total, tally_id))
        case TallyDone(output=output):
            conn.execute("UPDATE tallies SET output=? WHERE id=?", (output, tally_id))
        case _:
            pass


TALLIES = Projection(
    kind="tally",
    tables=("tallies",),
    schema="CREATE TABLE IF NOT EXISTS tallies "
    "(id TEXT PRIMARY KEY, total INTEGER NOT NULL, output TEXT);",
    apply=project,
)


KINDS = with_kinds(dataclasses.replace(TALLY, projection=TALLIES))
"""steward's kinds and the tally, with its read models."""


@pytest.fixture
def kinds() -> Kinds:
    """What the test's log, hosts and projections serve."""
    return KINDS


async def until(
    log: Any, stream: str, done: Any, clock: FakeClock | None = None
) -> Any:
    """Poll ``stream``'s state (folded from the log) until ``done(state)``,
    moving the fake clock on by a few seconds a time if given."""
    import asyncio

    for _ in range(1_000):
        state = replay.rebuild(await log.read(stream), kinds=KINDS)
        if done(state):
            return state
        if clock is not None:
            clock.advance(1)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{stream} stayed {state}")


async def test_a_kind_of_a_test_runs_through_host_replay_fork_and_rebuild(
    make_host: Any, log: Any, clock: FakeClock, tmp_path: Path
) -> None:
    """Tool call, timer and child run, all through the kind table: the tally
    ends with its child's answer, both streams verify, a fork at the child's
    request gets a child of its own, and the projections rebuild alike."""
    model = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    host = await make_host(model)
    await host.submit("tally.t1", TallyOpened(tally_id="t1"))
    for n in (1, 2):
        await host.submit("tally.t1", TallyAdd(n=n))
    state = await until(log, "tally.t1", lambda s: s.output is not None, clock)
    assert state.output == "hi" and state.total == 3
    assert (tmp_path / "workspace" / "t1.txt").read_text() == "3"
    records = await log.read("tally.t1")
    child = await log.read("run.t1-child")
    assert replay.verify(records, kinds=KINDS) is None
    assert replay.verify(child) is None
    assert replay.rebuild(child).status == "completed"
    names = [type(r.event).__name__ for r in records]
    assert names[-2:] == ["SubagentFinished", "TallyDone"]

    # fork at the child's request: the copy starts a child of its own
    steps = replay.commits(records, KINDS)
    asked = next(
        i for i, s in enumerate(steps) if isinstance(s[-1].event, TallyChildAsked)
    )

    def renamed(event: Event, origin: str) -> Event:
        # the tally's own id is in its first input
        if isinstance(event, TallyOpened):
            return msgspec.structs.replace(event, tally_id="t2")
        return event

    copy = replay.fork_events(steps[: asked + 1], "t1", "t2", renamed, KINDS)
    await log.append("tally.t2", copy, 0, correlation_id="t2")
    forked = await until(log, "tally.t2", lambda s: s.output is not None)
    assert forked.output == "hi" and forked.child is None
    assert replay.rebuild(await log.read("run.t2-child")).status == "completed"
    assert replay.verify(await log.read("tally.t2"), kinds=KINDS) is None

    # the projections rebuild from a log that holds another kind's streams
    projector = await Projector.open(tmp_path / "rebuilt.db", KINDS)
    try:
        await projector.rebuild(log)
        runs = await projector.query("SELECT * FROM runs ORDER BY id")
        tallies = await projector.query("SELECT * FROM tallies ORDER BY id")
        await projector.rebuild(log)
        assert await projector.query("SELECT * FROM runs ORDER BY id") == runs
        assert await projector.query("SELECT * FROM tallies ORDER BY id") == tallies
        left = await projector.query("SELECT key FROM pending")
    finally:
        await projector.close()
    assert {row[0] for row in runs} == {"t1-child", "t2-child"}
    assert tallies == [("t1", 3, "hi"), ("t2", 3, "hi")]
    assert left == []  # every effect answered


async def test_a_pending_tool_call_of_another_kind_survives_a_restart(
    make_host: Any, log: Any, tmp_path: Path
) -> None:
    """A tally whose tool call was requested but never answered (its host
    died) gets it made by the next host, found in the pending projection."""
    steps: list[Event] = []
    state = TALLY.initial
    for input in (TallyOpened(tally_id="t9"), TallyAdd(n=3)):
        decided = decide(input, state)
        assert decided is not None
        steps += [input, *decided]
        state = TALLY.fold([input, *decided], state)
    assert state.tool == "t9/tool/1"
    await log.append("tally.t9", steps, 0, correlation_id="t9")
    model = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    await make_host(model)  # catches the projections up, then routes what is pending
    after = await until(log, "tally.t9", lambda s: s.timer is not None)
    assert after.tool is None
    assert (tmp_path / "workspace" / "t9.txt").read_text() == "3"


def tally_steps(tally_id: str, *inputs: Event) -> list[Event]:
    """A tally's recorded events for ``inputs``, decided here, as a host
    that died before carrying out any effect would have left them."""
    steps: list[Event] = []
    state = TALLY.initial
    for input in (TallyOpened(tally_id=tally_id), *inputs):
        decided = decide(input, state)
        assert decided is not None, input
        steps += [input, *decided]
        state = TALLY.fold([input, *decided], state)
    return steps


async def test_a_timer_and_a_child_of_another_kind_survive_a_restart(
    make_host: Any, log: Any, clock: FakeClock
) -> None:
    """A tally that slept on a timer when its host died: the next host arms
    the timer from the pending projection, and when it fires, starts the
    child; a tally whose child was asked for but never created gets it."""

    def written(tally_id: str) -> Event:
        rid = f"{tally_id}/tool/1"
        return events.ToolResulted(request_id=rid, ok=True, output="", at=clock.now())

    slept = tally_steps("t8", TallyAdd(n=3), written("t8"))
    await log.append("tally.t8", slept, 0, correlation_id="t8")
    woke = events.WakeDue(timer_id="t7/wake/1")
    asked = tally_steps("t7", TallyAdd(n=3), written("t7"), woke)
    await log.append("tally.t7", asked, 0, correlation_id="t7")
    model = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    await make_host(model)
    t7 = await until(log, "tally.t7", lambda s: s.output is not None)
    assert t7.output == "hi"
    t8 = await until(log, "tally.t8", lambda s: s.output is not None, clock)
    assert t8.output == "hi"


async def test_a_reply_its_host_died_before_delivering_reaches_the_next_host(
    make_host: Any, log: Any
) -> None:
    """A child run ended while the tally that asked for it could not take its
    result yet (its host died before delivering it): the next host finds the
    delivery in the pending projection and makes it."""
    model = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    first = await make_host(model)
    settings = events.RunSettings(planning_gate=False, revision=events.LATEST_REVISION)
    child = events.RunCreated(
        run_id="t6-child", input_text="say hi", settings=settings, reply_to="tally.t6"
    )
    await first.submit("run.t6-child", child)
    await until(log, "run.t6-child", lambda s: s.status == "completed")
    assert await log.read("tally.t6") == []  # the answer was refused: no tally yet
    await first.stop()
    written = events.ToolResulted(request_id="t6/tool/1", ok=True, output="ok")
    woke = events.WakeDue(timer_id="t6/wake/1")
    steps = tally_steps("t6", TallyAdd(n=3), written, woke)
    await log.append("tally.t6", steps, 0, correlation_id="t6")
    await make_host(model)
    t6 = await until(log, "tally.t6", lambda s: s.output is not None)
    assert t6.output == "hi"
