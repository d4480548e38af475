"""Actor kinds: each kind is a value, and one table maps stream names to them.

An actor's stream is named ``<kind>.<id>`` (``run.r1``); its kind is the first
segment. A `Kind` bundles what everything outside the actor needs of it: its
pure decider (``initial``, ``evolve``, ``decide``), which of its events are
inputs (a step of its stream is an input and the decisions after it), and
every event type it records (the log decodes into their union,
`steward.events.UNION`). `KINDS` is the table;
`kind_of` finds a stream's kind, with an error naming the kinds there are.

Replay reads the table (`steward.replay`): rebuild, verify and the split into
steps work for any kind. The host still knows the run kind's effects by name;
moving them behind the table is the next step (see DESIGN §2a).

A kind's functions are pure (DESIGN §2): ``decide`` and ``evolve`` never
change the state they are given, and ``fold`` applies events to a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from msgspec.structs import replace

from steward.actors import run as run_actor
from steward.actors.prompt import HASH_PREFIX, prompt_hash, prompt_matches
from steward.errors import NotFoundError
from steward.events import UNION, Event
from steward.events import run as run_events

__all__ = ["KINDS", "Kind", "kind_of", "kind_name", "register"]

S = TypeVar("S")


@dataclass(frozen=True)
class Kind(Generic[S]):
    """One actor kind: its name, its decider and its events.

    ``fold`` defaults to applying ``evolve`` event by event; a kind whose
    state is costly to copy may give a faster fold that gives the same state.
    """

    name: str
    initial: S
    evolve: Callable[[S, Event], S]
    decide: Callable[[Event, S], list[Event] | None]
    inputs: tuple[type[Event], ...]
    """The event types that open a step (what arrived); all others are the
    decisions of the input before them."""
    events: tuple[type[Event], ...]
    """Every event type the kind records, inputs and decisions."""
    fold_events: Callable[[Iterable[Event], S], S] | None = field(default=None)
    same_decisions: Callable[[tuple[Event, ...], tuple[Event, ...], S], bool] | None = (
        field(default=None)
    )
    """Whether decisions re-decided now (second) are the recorded ones (first)
    in an older form, given the state after the step: for a kind whose old
    logs recorded a value in a form it no longer writes. ``None``: only
    equality counts."""

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        """The state after ``events``, from ``state`` (default: ``initial``)."""
        start = self.initial if state is None else state
        if self.fold_events is not None:
            return self.fold_events(events, start)
        for event in events:
            start = self.evolve(start, event)
        return start

    def is_input(self, event: Event) -> bool:
        return isinstance(event, self.inputs)


def _run_same_decisions(
    recorded: tuple[Event, ...], decided: tuple[Event, ...], after: run_actor.Run
) -> bool:
    """A run's recorded decisions with each prompt hash of the first form
    (written before part hashes) that matches its prompt given in the current
    form: equal to ``decided``, the run verifies."""
    rehashed = []
    for event in recorded:
        if isinstance(
            event, run_events.LlmRequested
        ) and not event.prompt_hash.startswith(HASH_PREFIX):
            prompt = run_actor.build_prompt(after)
            if prompt_matches(prompt, event.prompt_hash):
                event = replace(event, prompt_hash=prompt_hash(prompt))
        rehashed.append(event)
    return tuple(rehashed) == decided


RUN: Kind[run_actor.Run] = Kind(
    name="run",
    initial=run_actor.initial,
    evolve=run_actor.evolve,
    decide=run_actor.decide,
    inputs=run_events.INPUT_TYPES,
    events=run_events.EVENT_TYPES,
    fold_events=run_actor.fold,
    same_decisions=_run_same_decisions,
)

KINDS: dict[str, Kind[Any]] = {RUN.name: RUN}
"""Every actor kind by name: the only place that names them."""


def register(kind: Kind[Any]) -> None:
    """Add ``kind`` to the table (a kind of an extension, or of a test), and
    its events to the union the log decodes into."""
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"there is an actor kind {kind.name!r} already")
    UNION.add(kind.events)
    KINDS[kind.name] = kind


def kind_name(stream: str) -> str:
    """The kind part of stream name ``stream`` (``run`` of ``run.r1``)."""
    return stream.partition(".")[0]


def kind_of(stream: str) -> Kind[Any]:
    """The kind of the actor whose stream is ``stream``."""
    kind = KINDS.get(kind_name(stream))
    if kind is None:
        raise NotFoundError(
            f"stream {stream!r} is of no actor kind steward has (its name starts "
            f"with one of: {', '.join(sorted(f'{k}.' for k in KINDS))})"
        )
    return kind
