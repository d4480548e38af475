"""The run kind's pure ``pending`` (`steward.actors.run.reactor.pending`)
says what its read models keep pending (`steward.actors.run.projection`,
``keeps_pending``): two projectors, one keeping the run's rows by its SQL,
one folding ``pending`` over the same records (as it does for every other
kind), hold the same ``pending`` rows after every record of every golden
log with runs in it and of a few of the run decider's scenarios. But for
one difference: a run nobody waits on wants its result delivered at its
end, which the SQL (reading the run's parent and ``reply_to``) does not;
the test checks that a host routing that end delivers nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers_run import PLAN, REQUIREMENTS, RUN, STREAM, Story, created, started
from support import act

from steward import events
from steward.actors.effects import Deliver, Pending, notify_key
from steward.actors.kind import Kinds
from steward.actors.run.events import ApprovalDecided, RunTaken
from steward.actors.run.reactor import run_id_of
from steward.actors.run.state import run_stream
from steward.events import Recorded
from steward.events.protocol import (
    CancelRequested,
    ChildFinished,
    ToolCall,
    WakeDue,
)
from steward.kinds import KINDS
from steward.projections.store import Projector

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

BY_SQL = KINDS
"""steward's kinds: the run's pending rows kept by its projection's SQL."""

BY_PENDING = KINDS.replaced(KINDS["run"].replaced(projection=None))
"""The run with no read models: the projector keeps its pending rows as it
does any kind's, from its ``pending`` and the model and tool calls."""

Row = tuple[Any, ...]


def golden_logs() -> list[str]:
    """The golden logs with a run stream in them."""
    return [
        path.stem
        for path in sorted(GOLDEN.glob("*.jsonl"))
        if any(
            events.recorded_from_json(line, union=KINDS.union).stream.startswith("run.")
            for line in path.read_bytes().splitlines()
        )
    ]


def golden(name: str) -> list[Recorded]:
    """Golden log ``name``'s records, in position order."""
    lines = (GOLDEN / f"{name}.jsonl").read_bytes().splitlines()
    return [events.recorded_from_json(line, union=KINDS.union) for line in lines]


async def rows(projector: Projector) -> set[Row]:
    """The projector's pending rows, every column."""
    return set(await projector.query("SELECT * FROM pending"))


def nothing_routed(records: Sequence[Recorded], row: Row) -> bool:
    """Whether ``row`` is the result of a run nobody waits on: wanted by the
    run's end, for which the run's ``effects`` deliver nothing under its key."""
    key, stream, version, kind = row[:4]
    if not stream.startswith("run.") or key != notify_key(run_id_of(stream)):
        return False
    run = KINDS["run"]
    assert run.reactor.effects is not None
    own = [r for r in records if r.stream == stream]
    end = own[version - 1]
    at = run.fold(r.event for r in own[:version])
    latest = run.fold(r.event for r in own)
    asked = run.reactor.effects(end, at, latest)
    return kind == "deliver" and not any(
        isinstance(e, Deliver) and e.key == key for e in asked
    )


async def check_same_rows(
    records: Sequence[Recorded], kinds: Kinds = BY_PENDING
) -> int:
    """Apply ``records`` one by one to a projector of `BY_SQL` and one of
    ``kinds`` and compare their pending rows after each; the number of rows
    compared."""
    by_sql = await Projector.open(":memory:", BY_SQL)
    by_pending = await Projector.open(":memory:", kinds)
    compared = 0
    try:
        for rec in records:
            await by_sql.apply([rec])
            await by_pending.apply([rec])
            sql, folded = await rows(by_sql), await rows(by_pending)
            where = f"after {rec.stream} at version {rec.version}"
            assert sql <= folded, (
                f"{where}: the runs projection keeps {sorted(sql - folded)}, "
                "which run_effects.pending does not want (or answered)"
            )
            extra = {r for r in folded - sql if not nothing_routed(records, r)}
            assert not extra, (
                f"{where}: run_effects.pending keeps {sorted(extra)}, which the "
                "runs projection does not (answered, or never wanted)"
            )
            compared += len(folded)
    finally:
        await by_sql.close()
        await by_pending.close()
    return compared


@pytest.mark.parametrize("log", golden_logs())
async def test_pending_keeps_the_rows_of_the_runs_projection(log: str) -> None:
    """On golden log ``log``, folding the run's pending leaves the rows the
    runs projection does after every record (a run nobody waits on aside)."""
    assert await check_same_rows(golden(log))


def queued_and_cancelled() -> Story:
    """A queued run cancelled before a host takes it."""
    story = Story()
    story.when(created(queued=True))
    story.when(CancelRequested(reason="stop"))
    return story


def taken_slept_and_woken() -> Story:
    """A queued run a host takes; it sleeps, wakes and finishes."""
    story = Story()
    story.when(created(queued=True))
    story.when(RunTaken(at=1_700_000_001.0))
    story.say(REQUIREMENTS)
    story.say(PLAN)
    story.say(act(type="sleep", delaySeconds=60))
    assert story.state.timer_id is not None
    story.when(WakeDue(timer_id=story.state.timer_id))
    story.say(act(type="finish", output="done"))
    return story


def approved_while_a_call_runs() -> Story:
    """A native run asks for a call that needs approval beside another; the
    approval resumes the run while the other call is still in flight."""
    story = started(protocol="native")
    delete = ToolCall(id="call_d", name="files.delete", args={"path": "x"})
    read = ToolCall(id="call_a", name="files.read", args={"path": "a.txt"})
    story.call(delete, read)
    story.when(ApprovalDecided(request_id=f"{RUN}/tool/1", approved=True))
    story.result("deleted", request_id=f"{RUN}/tool/1")
    story.result("A text", request_id=f"{RUN}/tool/2")
    return story


def child_answering() -> Story:
    """A child run (with a parent and ``reply_to``) that finishes."""
    story = Story()
    story.when(created(parent_run_id="parent", reply_to="run.parent"))
    story.say(REQUIREMENTS)
    story.say(PLAN)
    story.say(act(type="finish", output="done"))
    return story


def cancelled_with_a_child_running() -> Story:
    """A run waiting on two children, one finished, is cancelled."""
    story = started()
    story.say(act(type="spawn_subagents", subagents=["find a", "find b"]))
    result = ChildFinished(
        stream=run_stream(f"{RUN}-1"), status="completed", output="A"
    )
    story.when(result)
    story.when(CancelRequested())
    return story


@pytest.mark.parametrize(
    "scenario",
    [
        queued_and_cancelled,
        taken_slept_and_woken,
        approved_while_a_call_runs,
        child_answering,
        cancelled_with_a_child_running,
    ],
)
async def test_pending_keeps_the_rows_of_a_scenario(scenario: Any) -> None:
    """On a run decider's scenario, folding the run's pending leaves the rows
    the runs projection does after every record."""
    log = scenario().records()
    assert all(r.stream == STREAM for r in log)
    assert await check_same_rows(log)


async def test_a_pending_that_answers_no_take_is_caught() -> None:
    """The comparison fails for a run pending that leaves a taken run's
    take wanted until the run ends."""
    run = KINDS["run"]
    pending = run.reactor.pending
    assert pending is not None

    def forgetful(rec: Recorded) -> Pending:
        return Pending() if isinstance(rec.event, RunTaken) else pending(rec)

    kinds = KINDS.replaced(run.replaced(projection=None, pending=forgetful))
    log = taken_slept_and_woken().records()
    assert await check_same_rows(log)
    with pytest.raises(AssertionError, match=r"keeps \[\('take:run-1'"):
        await check_same_rows(log, kinds)
