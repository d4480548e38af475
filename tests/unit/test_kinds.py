"""Tables of actor kinds: a kind defined here replays like the run kind,
given a table that holds it; steward's own table is left as it is."""

from __future__ import annotations

import pytest
from counter_kind import (
    COUNTER,
    Counter,
    CounterAdd,
    CounterAdded,
    decide,
)
from support import with_kinds

from steward import events, replay
from steward.actors.kind import Kinds
from steward.actors.run import events as run_events
from steward.errors import LogReadError, NotFoundError
from steward.events import Event, Recorded
from steward.events.union import SHARED_TYPES
from steward.kinds import KINDS as STEWARD

KINDS = with_kinds(COUNTER)
"""steward's kinds and the counter."""


def record(stream: str, inputs: list[Event]) -> list[Recorded]:
    """The records a host would commit for ``inputs``, decided by the table."""
    actor = KINDS.of(stream)
    state, out = actor.decider.initial, []
    for input in inputs:
        decided = actor.decider.decide(input, state)
        assert decided is not None
        for event in [input, *decided]:
            version = len(out) + 1
            out.append(
                Recorded(
                    stream=stream,
                    version=version,
                    position=version,
                    at=0.0,
                    event=event,
                )
            )
        state = actor.fold([input, *decided], state)
    return out


def test_a_tables_kind_is_found_by_its_streams_name() -> None:
    """`Kinds.of` maps ``counter.c1`` to the counter kind; an unknown prefix
    is one error naming the kinds there are. steward's table is unchanged."""
    assert KINDS.of("counter.c1") is COUNTER
    assert KINDS.of("run.r1") is STEWARD["run"]
    with pytest.raises(NotFoundError, match=r"'quest\.q1'.*counter\., run\."):
        KINDS.of("quest.q1")
    assert "counter" not in STEWARD
    with pytest.raises(NotFoundError, match=r"'counter\.c1'"):
        STEWARD.of("counter.c1")


def test_replay_folds_splits_and_verifies_any_kind() -> None:
    """rebuild, commits and verify read the stream's kind from the table."""
    records = record("counter.c1", [CounterAdd(n=1), CounterAdd(n=2)])
    assert replay.rebuild(records, kinds=KINDS) == Counter(total=3)
    assert replay.rebuild(records, until=2, kinds=KINDS) == Counter(total=1)
    steps = replay.commits(records, KINDS)
    assert [[type(r.event).__name__ for r in s] for s in steps] == [
        ["CounterAdd", "CounterAdded"],
        ["CounterAdd", "CounterAdded", "CounterFull"],
    ]
    assert replay.verify(records, kinds=KINDS) is None


def test_a_changed_kind_decider_is_caught_at_its_step() -> None:
    """A counter decider changed after its log was written is reported at the
    first step it decides differently."""
    records = record("counter.c1", [CounterAdd(n=1), CounterAdd(n=2)])

    def doubled(input: Event, state: Counter) -> list[Event] | None:
        if isinstance(input, CounterAdd) and input.n == 2:
            return [CounterAdded(total=state.total + 4)]
        return decide(input, state)

    changed = with_kinds(COUNTER.replaced(decide=doubled))
    mismatch = replay.verify(records, kinds=changed)
    assert mismatch is not None and mismatch.version == 3
    assert mismatch.problem == "the decider now decides differently"


def test_a_table_takes_a_name_once_and_a_tag_once() -> None:
    """A table of two kinds of one name is refused, and one of two event
    types of one name (the tag the log decodes by)."""
    with pytest.raises(ValueError, match="two actor kinds named 'counter'"):
        Kinds(COUNTER, COUNTER)

    class CounterAdded(Event, frozen=True):  # another type, the same tag
        pass

    clash = COUNTER.replaced(name="other", events=(CounterAdded,))
    with pytest.raises(ValueError, match="CounterAdded .* has the name"):
        Kinds(COUNTER, clash)


async def test_a_tables_events_are_stored_and_read(tmp_path) -> None:
    """A kind's events go into a log opened with the table's union and come
    back, by SQLite and as the JSON lines of an export; a log opened with
    steward's union names the event it cannot read."""
    from steward.bus import SqliteEventLog

    records = record("counter.c1", [CounterAdd(n=1), CounterAdd(n=2)])
    path = tmp_path / "log.db"
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        await log.append("counter.c1", [r.event for r in records[:2]], 0)
        await log.append("counter.c1", [r.event for r in records[2:]], 2)
        read = await log.read("counter.c1")
    assert [r.event for r in read] == [r.event for r in records]
    lines = [events.recorded_to_json(r) for r in read]
    assert [events.recorded_from_json(line, KINDS.union).event for line in lines] == [
        r.event for r in records
    ]
    assert replay.verify(read, kinds=KINDS) is None
    async with await SqliteEventLog.open(path, union=STEWARD.union) as log:
        with pytest.raises(LogReadError, match="counter.c1/1 at position 1"):
            await log.read("counter.c1")


def test_a_log_given_no_union_decodes_the_shared_vocabulary_alone() -> None:
    """The union a log takes unless given one (`steward.events.UNION`, which
    the events layer holds, below the kinds) is the shared vocabulary's: a
    log names no kind. A table's union is that and each kind's own events."""
    assert set(events.UNION.types) == set(SHARED_TYPES)
    own = {t for kind in STEWARD for t in kind.decider.events}
    assert set(STEWARD.union.types) == set(SHARED_TYPES) | own
    assert "RunCreated" in {t.__name__ for t in own} - set(events.UNION.types)


async def test_a_host_refuses_a_log_that_cannot_decode_its_kinds(tmp_path) -> None:
    """A host given kinds whose events its log does not decode says how to
    open the log, at once, not at the first read of a counter's stream."""
    from steward.bus import SqliteEventLog
    from steward.host import Host

    async with await SqliteEventLog.open(
        tmp_path / "log.db", union=STEWARD.union
    ) as log:
        with pytest.raises(ValueError, match="open it with union=kinds.union"):
            Host(log, kinds=KINDS)
    async with await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union) as log:
        assert Host(log, kinds=KINDS).kinds is KINDS


def test_a_kind_says_what_it_waits_on_a_person_for_and_how_to_answer_both() -> None:
    """A surface with `waiting` but no `answer` (or the reverse) is refused;
    the run's pair lists its approvals and answers one by request id."""
    with pytest.raises(ValueError, match="without the other"):
        COUNTER.replaced(waiting=lambda state: [])
    with pytest.raises(ValueError, match="without the other"):
        COUNTER.replaced(answer=STEWARD["run"].surface.answer)
    run = STEWARD["run"].surface
    assert run.waiting is not None and run.answer is not None
    answer = run.answer("r1/tool/1", False, "not now", 5.0)
    assert answer == run_events.ApprovalDecided(
        request_id="r1/tool/1", approved=False, reason="not now", at=5.0
    )
