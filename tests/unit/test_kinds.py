"""The table of actor kinds: a kind defined here replays like the run kind."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import msgspec
import pytest

from steward import replay
from steward.actors import kind
from steward.errors import NotFoundError
from steward.events import Event, Recorded


class Counter(msgspec.Struct, frozen=True):
    total: int = 0
    limit: int = 3


class Add(Event, frozen=True, kw_only=True):
    """An input: add ``n``."""

    n: int


class Added(Event, frozen=True, kw_only=True):
    total: int


class Full(Event, frozen=True, kw_only=True):
    pass


def evolve(state: Counter, event: Event) -> Counter:
    match event:
        case Added(total=total):
            return msgspec.structs.replace(state, total=total)
        case _:
            return state


def decide(input: Event, state: Counter) -> list[Event] | None:
    match input:
        case Add(n=n) if state.total < state.limit:
            total = state.total + n
            return [Added(total=total), *([Full()] if total >= state.limit else [])]
        case _:
            return None


COUNTER: kind.Kind[Counter] = kind.Kind(
    name="counter",
    initial=Counter(),
    evolve=evolve,
    decide=decide,
    inputs=(Add,),
    events=(Add, Added, Full),
)


@pytest.fixture
def registered() -> Iterator[None]:
    kind.register(COUNTER)
    try:
        yield
    finally:
        del kind.KINDS["counter"]


def record(stream: str, inputs: list[Event]) -> list[Recorded]:
    """The records a host would commit for ``inputs``, decided by the table."""
    actor = kind.kind_of(stream)
    state, out = actor.initial, []
    for input in inputs:
        decided = actor.decide(input, state)
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


def test_a_registered_kind_is_found_by_its_streams_name(registered: None) -> None:
    """`kind_of` maps ``counter.c1`` to the counter kind; an unknown prefix is
    one error naming the kinds there are."""
    assert kind.kind_of("counter.c1") is COUNTER
    assert kind.kind_of("run.r1") is kind.KINDS["run"]
    with pytest.raises(NotFoundError, match=r"'task\.t1'.*counter\., run\."):
        kind.kind_of("task.t1")


def test_replay_folds_splits_and_verifies_any_kind(registered: None) -> None:
    """rebuild, commits and verify read the stream's kind from the table."""
    records = record("counter.c1", [Add(n=1), Add(n=2)])
    assert replay.rebuild(records) == Counter(total=3)
    assert replay.rebuild(records, until=2) == Counter(total=1)
    steps = replay.commits(records)
    assert [[type(r.event).__name__ for r in s] for s in steps] == [
        ["Add", "Added"],
        ["Add", "Added", "Full"],
    ]
    assert replay.verify(records) is None


def test_a_changed_kind_decider_is_caught_at_its_step(registered: None) -> None:
    """A counter decider changed after its log was written is reported at the
    first step it decides differently."""
    records = record("counter.c1", [Add(n=1), Add(n=2)])

    def doubled(input: Event, state: Counter) -> list[Event] | None:
        if isinstance(input, Add) and input.n == 2:
            return [Added(total=state.total + 4)]
        return decide(input, state)

    kind.KINDS["counter"] = dataclasses.replace(COUNTER, decide=doubled)
    mismatch = replay.verify(records)
    assert mismatch is not None and mismatch.version == 3
    assert mismatch.problem == "the decider now decides differently"


def test_a_kind_name_is_taken_once() -> None:
    """Registering another kind under a taken name is refused."""
    with pytest.raises(ValueError, match="'run' already"):
        kind.register(dataclasses.replace(COUNTER, name="run"))


async def test_a_registered_kinds_events_are_stored_and_read(
    registered: None, tmp_path
) -> None:
    """A kind's events go into the log and come back, by SQLite and as the
    JSON lines of an export, once the kind is registered."""
    from steward import events
    from steward.bus import SqliteEventLog

    records = record("counter.c1", [Add(n=1), Add(n=2)])
    async with await SqliteEventLog.open(tmp_path / "log.db") as log:
        await log.append("counter.c1", [r.event for r in records[:2]], 0)
        await log.append("counter.c1", [r.event for r in records[2:]], 2)
        read = await log.read("counter.c1")
    assert [r.event for r in read] == [r.event for r in records]
    lines = [events.recorded_to_json(r) for r in read]
    assert [events.recorded_from_json(line).event for line in lines] == [
        r.event for r in records
    ]
    assert replay.verify(read) is None
