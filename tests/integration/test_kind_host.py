"""A fifth kind, defined in this test, runs through everything the run kind does.

The tally actor opens, counts, and at three writes a file with a tool, asks
the model for a word, sleeps on a timer, then starts a child run whose
result comes back to it through the child's ``reply_to``; it tells a
channel when done, and every id it derives from its own is renamed by a
fork. Nothing under ``steward/`` knows it: the table of kinds the test's
log, hosts, projections and command lines serve holds it (the ``kinds``
fixture, `support.with_kinds`), no module state is touched, and it runs on
both logs (the ``log`` fixture), through the host, ``replay --verify``,
``fork``, ``projections rebuild`` and the kind contract suite.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats_server import NatsServer
from support import act, with_kinds

from steward import cli, events, replay
from steward.actors.effects import (
    ArmTimer,
    Create,
    Effect,
    ModelCall,
    Pending,
    Told,
    Want,
    WantKind,
    notify_key,
    spawn_key,
)
from steward.actors.kind import Decider, Kind, Kinds, Reactor, Surface
from steward.actors.outstanding import Outstanding, folded, kept
from steward.actors.prompt import Prompt, prompt_hash
from steward.actors.run import events as run_events
from steward.actors.run.state import run_id_of, run_stream
from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.effects.llm import ScriptedProvider
from steward.egress import Egress
from steward.events import ChatMessage, Event, Recorded
from steward.projections.projection import Projection
from steward.projections.store import Projector
from steward.testing.kinds import Sample, check_kind


class Tally(msgspec.Struct, frozen=True):
    id: str = ""
    total: int = 0
    tool: str | None = None
    asked: str | None = None
    word: str = ""
    timer: str | None = None
    child: str | None = None
    output: str | None = None
    outstanding: Outstanding = Outstanding()


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
    """The tally's own fields, and the calls it awaits (`folded`)."""
    return folded(_evolve(state, event), event)


def _evolve(state: Tally, event: Event) -> Tally:
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
        case events.LlmRequested(request_id=rid):
            return replace(state, asked=rid)
        case events.LlmResponded(text=text):
            return replace(state, asked=None, word=text)
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
        case events.ToolResulted(request_id=rid) if rid == state.tool:
            prompt = prompt_hash(tally_prompt(state))
            rid = f"{state.id}/llm/1"
            return [
                events.LlmRequested(request_id=rid, iteration=1, prompt_hash=prompt)
            ]
        case events.LlmResponded(request_id=rid, at=at) if rid == state.asked:
            return [TallySlept(timer_id=f"{state.id}/wake/1", due=at + 5)]
        case events.WakeDue(timer_id=tid) if tid == state.timer:
            return [TallyChildAsked(run_id=f"{state.id}-child")]
        case events.ChildFinished(stream=child, output=output) if child == run_stream(
            state.child
        ):
            return [TallyDone(output=output)]
        case _:
            return None


def tally_prompt(state: Tally) -> Prompt:
    """What the tally asks the model, from its state alone."""
    text = f"a word for {state.total}"
    return Prompt(
        model="scripted", system="", messages=(ChatMessage(role="user", content=text),)
    )


def model_call(
    state: Tally, request: events.LlmRequested, cache: Any, given: Prompt | None
) -> ModelCall:
    return ModelCall(prompt=given or tally_prompt(state))


def tells(event: Event, state: Tally) -> Told | None:
    """A finished tally tells the ``tally`` channel its output."""
    if isinstance(event, TallyDone):
        message = {"type": "done", "tally_id": state.id, "text": event.output}
        return Told(channel="tally", message=message)
    return None


def effects(rec: Recorded, at: Tally, latest: Tally) -> list[Effect]:
    match rec.event:
        case TallySlept(timer_id=timer_id, due=due):
            return [ArmTimer(timer_id=timer_id, due=due)]
        case TallyChildAsked(run_id=run_id):
            settings = run_events.RunSettings(
                planning_gate=False, revision=run_events.LATEST_REVISION
            )
            child = run_events.RunCreated(
                run_id=run_id,
                input_text="say hi",
                settings=settings,
                reply_to=rec.stream,
            )
            return [
                Create(
                    key=spawn_key(run_id),
                    stream=f"run.{run_id}",
                    input=child,
                    stamp=True,
                )
            ]
        case _:
            return []


def pending(rec: Recorded) -> Pending:
    """What a tally's recorded event asks of a host that a crash must not lose."""
    match rec.event:
        case TallySlept(timer_id=timer_id, due=due):
            return Pending(wants=(Want(key=timer_id, kind=WantKind.TIMER, due_at=due),))
        case events.WakeDue(timer_id=timer_id):
            return Pending(answers=(timer_id,))
        case TallyChildAsked(run_id=run_id):
            return Pending(wants=(Want(key=spawn_key(run_id), kind=WantKind.CREATE),))
        case events.ChildFinished(stream=child):
            return Pending(answers=(notify_key(run_id_of(child)),))
        case TallyDone():
            return Pending(ended=True)
        case _:
            return Pending()


TALLY: Kind[Tally] = Kind(
    name="tally",
    decider=Decider(
        initial=Tally(),
        evolve=evolve,
        decide=decide,
        inputs=(
            TallyOpened,
            TallyAdd,
            events.ToolResulted,
            events.LlmResponded,
            events.WakeDue,
            events.ChildFinished,
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
            events.LlmRequested,
            events.LlmResponded,
            events.WakeDue,
            events.ChildFinished,
        ),
        opens=(TallyOpened,),
    ),
    reactor=Reactor(
        routed=frozenset({TallySlept, TallyChildAsked}),
        effects=effects,
        outstanding=kept,
        model_call=model_call,
        pending=pending,
    ),
    surface=Surface(
        tells=tells,
        told=frozenset({TallyDone}),
        derived=("tally_id", "run_id", "request_id", "timer_id", "stream"),
    ),
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
    tables=("tallies",),
    schema="CREATE TABLE IF NOT EXISTS tallies "
    "(id TEXT PRIMARY KEY, total INTEGER NOT NULL, output TEXT);",
    apply=project,
)


KINDS = with_kinds(TALLY.replaced(projection=TALLIES))
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
    for _ in range(1_000):
        state = replay.rebuild(await log.read(stream), kinds=KINDS)
        if done(state):
            return state
        if clock is not None:
            clock.advance(1)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{stream} stayed {state}")


def cli_options(log: Any, tmp_path: Path) -> list[str]:
    """The options that point a command line at the test's log."""
    if isinstance(log, SqliteEventLog):
        return ["--db", str(log.path)]
    url = f"{log.servers[0]}?stream={log.stream}&prefix={log.prefix}"
    return ["--log", url, "--db", str(tmp_path / "cli.db")]


async def steward(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The lines ``steward ARGV`` prints over the test's kinds (exit 0)."""
    code = await asyncio.to_thread(cli.main, argv, KINDS)
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    return out


async def test_a_fifth_kind_runs_through_host_cli_replay_fork_and_rebuild(
    make_host: Any,
    log: Any,
    clock: FakeClock,
    tmp_path: Path,
    nats_server: NatsServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Tool call, model call, timer and child run, all through the kind
    table: the tally ends with its child's answer and tells its channel;
    ``replay --verify`` takes both streams, a ``fork`` at the child's
    request renames every id the tally derives and gets a child of its own,
    ``projections rebuild`` gives the same tables, and the tally keeps the
    kind contract on what it recorded."""
    model = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    host = await make_host(model)
    nc = await nats.connect(nats_server.url)
    heard = await nc.subscribe("steward.outbound.tally")
    egress = Egress(nc, host)
    await egress.start()
    try:
        await nc.flush()
        await host.submit("tally.t1", TallyOpened(tally_id="t1"))
        for n in (1, 2):
            await host.submit("tally.t1", TallyAdd(n=n))
        state = await until(log, "tally.t1", lambda s: s.output is not None, clock)
        told = await heard.next_msg(timeout=10)
    finally:
        await egress.close()
        await nc.close()
    assert json.loads(told.data) == {"type": "done", "tally_id": "t1", "text": "hi"}
    assert state.output == "hi" and state.total == 3
    assert state.word == act(type="send_message", message="hi")  # the model's
    assert (tmp_path / "workspace" / "t1.txt").read_text() == "3"
    records = await log.read("tally.t1")
    names = [type(r.event).__name__ for r in records]
    assert names[-2:] == ["ChildFinished", "TallyDone"]

    options = cli_options(log, tmp_path)
    out = await steward([*options, "replay", "tally.t1", "--verify"], capsys)
    assert out[0] == f"tally.t1: kind tally, {len(records)} events"
    assert out[-1] == "verify: ok"
    out = await steward([*options, "replay", "run.t1-child", "--verify"], capsys)
    assert out[0].endswith("status completed") and out[-1] == "verify: ok"

    # fork at the child's request: the copy starts a child of its own
    asked = next(r.version for r in records if isinstance(r.event, TallyChildAsked))
    out = await steward([*options, "fork", "tally.t1", "--at", str(asked)], capsys)
    fork = out[0].split()[-1]  # "forked tally.t1 at version N as tally.t1-forkXXXXXX"
    forked = await until(log, fork, lambda s: s.output is not None)
    new = fork.partition(".")[2]
    assert forked.id == new and forked.output == "hi" and forked.child is None
    copy = [r.event for r in await log.read(fork)]
    derived = [getattr(e, f, "") for e in copy for f in TALLY.surface.derived]
    ids = [i.removeprefix("run.") for i in derived if i]  # (a child's stream)
    assert [i for i in ids if not i.startswith(new)] == []  # renamed
    assert f"{new}/llm/1" in ids and f"{new}-child" in ids
    assert f"run.{new}-child" in derived  # the child's result, by its stream
    child = await log.read(f"run.{new}-child")
    assert replay.rebuild(child, kinds=KINDS).status == "completed"
    out = await steward([*options, "replay", fork, "--verify"], capsys)
    assert out[-1] == "verify: ok"

    # the projections rebuild from a log that holds another kind's streams
    async def tables() -> list[list[tuple[Any, ...]]]:
        projector = await Projector.open(options[-1], KINDS)
        try:
            return [
                await projector.query(f"SELECT * FROM {table} ORDER BY 1")
                for table in ("runs", "tallies", "pending")
            ]
        finally:
            await projector.close()

    await steward([*options, "projections", "rebuild"], capsys)
    runs, tallies, pending = await tables()
    await steward([*options, "projections", "rebuild"], capsys)
    assert await tables() == [runs, tallies, pending]
    assert {row[0] for row in runs} == {"t1-child", f"{new}-child"}
    assert tallies == [("t1", 3, "hi"), (new, 3, "hi")]
    assert pending == []  # every effect answered

    # the kind contract, shipped in steward.testing, on what the tally recorded
    streams: dict[str, list[Recorded]] = {}
    for rec in await log.read_all():
        streams.setdefault(rec.stream, []).append(rec)
    samples = [Sample("this test", s, tuple(r)) for s, r in streams.items()]
    assert {"tally.t1", fork} <= {s.stream for s in samples}
    check_kind(KINDS["tally"], samples, KINDS)


async def test_a_pending_tool_call_of_another_kind_survives_a_restart(
    make_host: Any, log: Any, tmp_path: Path
) -> None:
    """A tally whose tool call was requested but never answered (its host
    died) gets it made by the next host, found in the pending projection."""
    steps: list[Event] = []
    state = TALLY.decider.initial
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
    state = TALLY.decider.initial
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

    def answered(tally_id: str) -> Event:
        rid = f"{tally_id}/llm/1"
        return events.LlmResponded(request_id=rid, text="w", at=clock.now())

    slept = tally_steps("t8", TallyAdd(n=3), written("t8"), answered("t8"))
    await log.append("tally.t8", slept, 0, correlation_id="t8")
    woke = events.WakeDue(timer_id="t7/wake/1")
    asked = tally_steps("t7", TallyAdd(n=3), written("t7"), answered("t7"), woke)
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
    settings = run_events.RunSettings(
        planning_gate=False, revision=run_events.LATEST_REVISION
    )
    child = run_events.RunCreated(
        run_id="t6-child", input_text="say hi", settings=settings, reply_to="tally.t6"
    )
    await first.submit("run.t6-child", child)
    await until(log, "run.t6-child", lambda s: s.status == "completed")
    assert await log.read("tally.t6") == []  # the answer was refused: no tally yet
    await first.stop()
    written = events.ToolResulted(request_id="t6/tool/1", ok=True, output="ok")
    answered = events.LlmResponded(request_id="t6/llm/1", text="w")
    woke = events.WakeDue(timer_id="t6/wake/1")
    steps = tally_steps("t6", TallyAdd(n=3), written, answered, woke)
    await log.append("tally.t6", steps, 0, correlation_id="t6")
    await make_host(model)
    t6 = await until(log, "tally.t6", lambda s: s.output is not None)
    assert t6.output == "hi"
