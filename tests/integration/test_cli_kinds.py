"""The command line reads the kind table: `events export` and `replay` take
any actor's stream, named ``<kind>.<id>``, as well as a run's id."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from counter_kind import COUNTER, Counter, CounterAdd, CounterAdded, decide
from support import PLAN, act, with_kinds

from steward import cli
from steward.actors.kind import Kinds
from steward.bus import SqliteEventLog
from steward.events import Event

WITH_COUNTER = with_kinds(COUNTER)
"""steward's kinds and the counter: what the commands here serve."""


def steward(argv: list[str], kinds: Kinds = WITH_COUNTER) -> int:
    """``steward ARGV`` over ``kinds``."""
    return cli.main(argv, kinds=kinds)


@pytest.fixture
def counter_log(tmp_path: Path) -> str:
    """A SQLite log holding stream ``counter.c1``: two steps of the counter
    kind."""
    db = tmp_path / "log.db"
    asyncio.run(_write(db, "counter.c1", [CounterAdd(n=1), CounterAdd(n=2)]))
    return str(db)


async def _write(db: Path, stream: str, inputs: list[Event]) -> None:
    """Commit each input with its decisions, as a host would."""
    state = COUNTER.decider.initial
    async with await SqliteEventLog.open(db, union=WITH_COUNTER.union) as log:
        version = 0
        for input in inputs:
            decided = COUNTER.decider.decide(input, state)
            assert decided is not None
            commit = [input, *decided]
            await log.append(stream, commit, version)
            version += len(commit)
            state = COUNTER.fold(commit, state)


def test_events_export_takes_a_stream_of_any_kind(
    counter_log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`events export counter.c1` prints that stream's events as JSON lines."""
    assert steward(["--db", counter_log, "events", "export", "counter.c1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    exported = [json.loads(line) for line in lines]
    assert [(e["stream"], e["version"], e["event"]["type"]) for e in exported] == [
        ("counter.c1", 1, "CounterAdd"),
        ("counter.c1", 2, "CounterAdded"),
        ("counter.c1", 3, "CounterAdd"),
        ("counter.c1", 4, "CounterAdded"),
        ("counter.c1", 5, "CounterFull"),
    ]


def test_replay_rebuilds_and_verifies_a_stream_of_any_kind(
    counter_log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay counter.c1 --verify` prints the kind, the event count and the
    state folded by the kind's decider, then verifies it."""
    code = steward(["--db", counter_log, "replay", "counter.c1", "--verify"])
    assert capsys.readouterr().out.splitlines() == [
        "counter.c1: kind counter, 5 events",
        "total: 3",
        "limit: 3",
        "verify: ok",
    ]
    assert code == 0


def test_replay_verify_catches_a_changed_decider_of_any_kind(
    counter_log: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A counter decider changed after its log was written makes `replay
    --verify` exit 3, naming the step."""

    def doubled(input: Event, state: Counter) -> list[Event] | None:
        if isinstance(input, CounterAdd) and input.n == 2:
            return [CounterAdded(total=state.total + 4)]
        return decide(input, state)

    changed = with_kinds(COUNTER.replaced(decide=doubled))
    code = steward(["--db", counter_log, "replay", "counter.c1", "--verify"], changed)
    out = capsys.readouterr().out
    assert code == 3
    assert "verify: MISMATCH at version 3: the decider now decides differently" in out


def test_runs_show_takes_a_stream_of_any_kind(
    counter_log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs show counter.c1` lists its events: version, type, time, and
    their fields as the summary."""
    assert steward(["--db", counter_log, "runs", "show", "counter.c1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "counter.c1  kind counter  5 events"
    steps = [line.split() for line in lines[2:]]
    assert [(s[0], s[1], s[3:]) for s in steps] == [
        ("1", "CounterAdd", ['{"n":1}']),
        ("2", "CounterAdded", ['{"total":1}']),
        ("3", "CounterAdd", ['{"n":2}']),
        ("4", "CounterAdded", ['{"total":3}']),
        ("5", "CounterFull", []),
    ]


def test_fork_copies_a_stream_of_any_kind(
    counter_log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fork counter.c1 --at 2` copies the first step into a counter of its
    own, which replays to the state there and verifies."""
    assert steward(["--db", counter_log, "fork", "counter.c1", "--at", "2"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("forked counter.c1 at version 2 as counter.c1-fork")
    forked = first.split()[-1]
    code = steward(["--db", counter_log, "replay", forked, "--verify"])
    assert capsys.readouterr().out.splitlines() == [
        f"{forked}: kind counter, 2 events",
        "total: 1",
        "limit: 3",
        "verify: ok",
    ]
    assert code == 0


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["replay", "quest.q1"],
            "steward: stream 'quest.q1' is of no actor kind steward has (its "
            "name starts with one of: counter., run., session., task., workflow.)",
        ),
        (
            ["events", "export", "quest.q1"],
            "steward: stream 'quest.q1' is of no actor kind steward has (its "
            "name starts with one of: counter., run., session., task., workflow.)",
        ),
        (
            ["replay", "counter.c9"],
            "steward: no stream 'counter.c9' in the log",
        ),
        (
            ["fork", "counter.c1", "--at", "3"],
            "steward: version 3 is inside a step (versions 3..5); fork at a "
            "version where a step ends: 2, 5",
        ),
        (
            ["runs", "cancel", "counter.c1"],
            "steward: `steward runs` acts on runs only: counter.c1 is a counter "
            "stream; `steward replay counter.c1` shows its state",
        ),
    ],
)
def test_a_stream_the_command_cannot_take_is_one_clear_line(
    counter_log: str,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    expected: str,
) -> None:
    """An unknown kind names the kinds there are; a missing stream, a fork
    inside a step and `runs cancel` of a non-run stream say why, in one line,
    exit 2."""
    code = steward(["--db", counter_log, *argv])
    err = capsys.readouterr().err
    assert (code, err.strip()) == (2, expected)


def test_a_run_stream_name_is_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay run.ID`, `events export run.ID` and `runs show run.ID` are the
    same commands given the run's ID."""
    db = str(tmp_path / "l.db")
    script = tmp_path / "s.json"
    replies = [*PLAN, act(type="finish", output="done")]
    script.write_text(json.dumps({"replies": [{"text": r} for r in replies]}))
    assert steward(["--db", db, "--script", str(script), "run", "-q", "x"]) == 0
    run_id = capsys.readouterr().out.split()[1]  # "run ID completed"
    for argv in (["replay", "--verify"], ["events", "export"], ["runs", "show"]):
        assert steward(["--db", db, *argv, run_id]) == 0
        by_id = capsys.readouterr().out
        assert steward(["--db", db, *argv, f"run.{run_id}"]) == 0
        assert capsys.readouterr().out == by_id
