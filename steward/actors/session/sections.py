"""What the console shows of a chat session (pure): its segments (``/new``
starts one; a compaction drops a window's older messages), its memory (core
memory, the memory writer's items and summary), and its schedules and the
debounce timer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from steward.actors.sections import Cell, Section, Table
from steward.actors.session.events import (
    ContextCompacted,
    DebounceArmed,
    MessageReceived,
    ScheduleFired,
    SegmentStarted,
    SessionOpened,
    TurnStarted,
)
from steward.actors.session.state import Session
from steward.events import Recorded
from steward.isotime import iso_time

__all__ = ["sections"]


def sections(state: Session, records: Sequence[Recorded]) -> tuple[Section, ...]:
    """The segments, memory and schedules of session ``state``, whose
    stream's records are ``records``."""
    if not state.session_id:
        return ()
    return (
        _segments(state, records),
        _core(state),
        _items(state),
        _schedules(state, records),
    )


@dataclass
class _Segment:
    at: float
    messages: int = 0
    turns: int = 0
    compactions: int = 0
    dropped: int = 0


def _segments(state: Session, records: Sequence[Recorded]) -> Table:
    segments: dict[int, _Segment] = {}
    current = _Segment(at=state.opened_at)
    segments[0] = current
    for rec in records:
        match rec.event:
            case SessionOpened(at=at):
                current.at = at or rec.at
            case SegmentStarted(segment=segment, at=at):
                current = segments[segment] = _Segment(at=at or rec.at)
            case MessageReceived():
                current.messages += 1
            case TurnStarted():
                current.turns += 1
            case ContextCompacted(dropped=dropped):
                current.compactions += 1
                current.dropped += dropped
            case _:
                pass
    rows = tuple(
        (
            Cell(f"s{n}", status="open" if n == state.segment else None),
            Cell(iso_time(s.at)),
            Cell(str(s.messages)),
            Cell(str(s.turns)),
            Cell(str(s.compactions)),
            Cell(str(s.dropped)),
        )
        for n, s in sorted(segments.items())
    )
    return Table(
        title="Segments",
        columns=("segment", "from", "messages", "turns", "compactions", "dropped"),
        rows=rows,
        note=(
            f"segment s{state.segment} is current: its window holds "
            f"{len(state.messages)} messages; /new starts a segment, a "
            "compaction drops a window's older messages (the log keeps them all)"
        ),
    )


def _core(state: Session) -> Table:
    return Table(
        title="Core memory",
        columns=("key", "value"),
        rows=tuple((Cell(key), Cell(value)) for key, value in state.core_memory),
        empty="Nothing: no turn has set core memory.",
        note="in every turn's context (memory.core_set sets a key)",
    )


def _items(state: Session) -> Table:
    return Table(
        title="Memory items",
        columns=("id", "level", "item", "value", "confidence", "last seen", "state"),
        rows=tuple(
            (
                Cell(item.id),
                Cell(str(item.level)),
                Cell(f"{item.module}.{item.key}"),
                Cell(item.value),
                Cell(f"{item.confidence:g}"),
                Cell(iso_time(item.seen_at) if item.seen_at else ""),
                Cell(
                    "archived" if item.archived else "active",
                    status="cancelled" if item.archived else "open",
                ),
            )
            for item in sorted(state.memory, key=lambda i: (i.archived, i.level))
        ),
        empty="None: the memory writer has written none.",
        note="the memory writer's summary of this segment: "
        + (state.summary or "(none)"),
    )


def _schedules(state: Session, records: Sequence[Recorded]) -> Table:
    fired: Counter[str] = Counter()
    debounce: float | None = None
    for rec in records:
        match rec.event:
            case ScheduleFired(name=name):
                fired[name] += 1
            case DebounceArmed(timer_id=timer_id, due=due) if timer_id == state.timer:
                debounce = due
            case _:
                pass
    rows = tuple(
        (
            Cell(s.name),
            Cell(s.cron),
            Cell(s.task),
            Cell(s.model or ""),
            Cell(iso_time(s.due)),
            Cell(str(fired[s.name])),
            Cell(s.timer_id),
        )
        for s in state.schedules
    )
    if state.timer is None:
        armed = "no debounce timer is armed"
    else:
        when = "" if debounce is None else f", due {iso_time(debounce)}"
        armed = f"debounce timer {state.timer} is armed{when}"
    return Table(
        title="Schedules and timers",
        columns=("schedule", "cron", "task", "model", "next firing", "fired", "timer"),
        rows=rows,
        empty="No schedule (schedule.create makes one).",
        note=armed,
    )
