"""The table of actor kinds: a kind defined here replays like the run kind."""

from __future__ import annotations

import dataclasses

import pytest
from counter_kind import (
    COUNTER,
    Counter,
    CounterAdd,
    CounterAdded,
    decide,
)
from support import use_kind

from steward import events, replay
from steward.actors import kind
from steward.errors import NotFoundError
from steward.events import Event, Recorded


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter kind in the table for the test."""
    use_kind(monkeypatch, COUNTER)


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
    records = record("counter.c1", [CounterAdd(n=1), CounterAdd(n=2)])
    assert replay.rebuild(records) == Counter(total=3)
    assert replay.rebuild(records, until=2) == Counter(total=1)
    steps = replay.commits(records)
    assert [[type(r.event).__name__ for r in s] for s in steps] == [
        ["CounterAdd", "CounterAdded"],
        ["CounterAdd", "CounterAdded", "CounterFull"],
    ]
    assert replay.verify(records) is None


def test_a_changed_kind_decider_is_caught_at_its_step(
    registered: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A counter decider changed after its log was written is reported at the
    first step it decides differently."""
    records = record("counter.c1", [CounterAdd(n=1), CounterAdd(n=2)])

    def doubled(input: Event, state: Counter) -> list[Event] | None:
        if isinstance(input, CounterAdd) and input.n == 2:
            return [CounterAdded(total=state.total + 4)]
        return decide(input, state)

    monkeypatch.setitem(
        kind.KINDS, "counter", dataclasses.replace(COUNTER, decide=doubled)
    )
    mismatch = replay.verify(records)
    assert mismatch is not None and mismatch.version == 3
    assert mismatch.problem == "the decider now decides differently"


def test_a_kind_name_is_taken_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering another kind under a taken name is refused."""
    monkeypatch.setitem(kind.KINDS, "run", kind.KINDS["run"])  # back, if not refused
    with pytest.raises(ValueError, match="'run' already"):
        kind.register(dataclasses.replace(COUNTER, name="run"))


async def test_a_registered_kinds_events_are_stored_and_read(
    registered: None, tmp_path
) -> None:
    """A kind's events go into the log and come back, by SQLite and as the
    JSON lines of an export, once the kind is registered."""
    from steward import events
    from steward.bus import SqliteEventLog

    records = record("counter.c1", [CounterAdd(n=1), CounterAdd(n=2)])
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


OPENINGS: dict[str, Event] = {
    "run": events.RunCreated(
        run_id="r1", input_text="x", settings=events.RunSettings()
    ),
    "session": events.SessionOpened(
        session_id="cli:a",
        channel="cli",
        chat_id="a",
        settings=events.SessionSettings(),
    ),
    "workflow": events.WorkflowCreated(
        workflow_id="w",
        definition=events.WorkflowDef(
            key="k", version=1, nodes=(events.NodeDef(key="a", provider="default"),)
        ),
    ),
}
"""An opening input each kind that opens (`Kind.opens`) accepts on its
initial state. Kept by hand: a `Kind` holds the types it opens with, not a
valid instance of one (a workflow opens with a definition that has nodes);
the tests below fail for a kind of the table that has no entry here."""

OPENING_KINDS = sorted(name for name, actor in kind.KINDS.items() if actor.opens)


@pytest.mark.parametrize("name", OPENING_KINDS)
def test_a_kind_refuses_its_opening_input_on_a_begun_stream(name: str) -> None:
    """The host decides an opening input (`Kind.opens`) on the initial state
    without reading the stream, trusting the append at version 0 and this:
    on a stream that has begun, the kind refuses it."""
    actor = kind.KINDS[name]
    opens = ", ".join(t.__name__ for t in actor.opens)
    assert name in OPENINGS, (
        f"kind {name} opens with {opens}: add one it accepts to OPENINGS"
    )
    opening = OPENINGS[name]
    assert isinstance(opening, actor.opens)
    decided = actor.decide(opening, actor.initial)
    assert decided is not None
    assert actor.decide(opening, actor.fold([opening, *decided])) is None


def test_every_kind_that_opens_has_an_opening_here() -> None:
    """OPENINGS holds an entry for each kind of the table that opens, and no
    other (a kind gone, or one that no longer opens, is dropped from it)."""
    assert sorted(OPENINGS) == OPENING_KINDS
