"""A small actor kind for tests: a counter that is full at three.

Shared by the tests of the kind table, replay and the command line, which
build a table with it for a test (`support.with_kinds`). Its event types are
named ``Counter*``: in the union the log decodes into, a tag (the type's
name) is one type's only.
"""

from __future__ import annotations

import msgspec

from steward.actors import kind
from steward.events import Event


class Counter(msgspec.Struct, frozen=True):
    total: int = 0
    limit: int = 3


class CounterAdd(Event, frozen=True, kw_only=True):
    """An input: add ``n``."""

    n: int


class CounterAdded(Event, frozen=True, kw_only=True):
    total: int


class CounterFull(Event, frozen=True, kw_only=True):
    pass


def evolve(state: Counter, event: Event) -> Counter:
    match event:
        case CounterAdded(total=total):
            return msgspec.structs.replace(state, total=total)
        case _:
            return state


def decide(input: Event, state: Counter) -> list[Event] | None:
    match input:
        case CounterAdd(n=n) if state.total < state.limit:
            total = state.total + n
            full: list[Event] = [CounterFull()] if total >= state.limit else []
            return [CounterAdded(total=total), *full]
        case _:
            return None


COUNTER: kind.Kind[Counter] = kind.Kind(
    name="counter",
    decider=kind.Decider(
        initial=Counter(),
        evolve=evolve,
        decide=decide,
        inputs=(CounterAdd,),
        events=(CounterAdd, CounterAdded, CounterFull),
    ),
)
