"""Replay a recorded run: rebuild its state, verify its decisions, fork it.

Replay never calls a model or a tool: every non-deterministic fact is already
an input in the log, so re-running ``decide`` over the recorded inputs must give
back the recorded decisions. The first place it does not is reported with both
sides, like Temporal's non-determinism check.
"""

from __future__ import annotations

import bisect
import itertools
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from steward.actors.kind import Kind, Kinds
from steward.errors import StewardError
from steward.events import Event, Recorded

Decide = Callable[[Event, Any], list[Event] | None]


class Mismatch(msgspec.Struct, frozen=True, kw_only=True):
    """Where re-deciding the log first disagreed with it."""

    version: int
    input: Event | None
    recorded: tuple[Event, ...]
    decided: tuple[Event, ...] | None
    problem: str


def _kind(records: Sequence[Recorded], kinds: Kinds) -> Kind[Any] | None:
    return kinds.of(records[0].stream) if records else None


def commits(records: Sequence[Recorded], kinds: Kinds) -> list[list[Recorded]]:
    """Split a stream's records into steps: each input with the decisions
    after it (which events are inputs, the stream's kind in ``kinds`` says)."""
    kind = _kind(records, kinds)
    steps: list[list[Recorded]] = []
    for rec in records:
        if not steps or (kind is not None and kind.is_input(rec.event)):
            steps.append([rec])
        else:
            steps[-1].append(rec)
    return steps


def rebuild(
    records: Sequence[Recorded],
    until: int | None = None,
    kind: Kind[Any] | None = None,
    kinds: Kinds | None = None,
) -> Any:
    """The actor's state after its events up to version ``until`` (all by
    default), folded by the stream's kind in ``kinds`` (``kind`` when given:
    for a stream that may have no records yet).

    Raises:
        ValueError: no records, and no ``kind`` to say what state begins;
            neither ``kind`` nor ``kinds`` given.
    """
    if kind is None and kinds is None:
        raise ValueError("rebuild needs the stream's kind, or the kinds table")
    kind = kind or _kind(records, kinds or Kinds())
    if kind is None:
        raise ValueError("no records to rebuild, and no kind to begin from")
    return kind.fold(r.event for r in records if until is None or r.version <= until)


def verify(
    records: Sequence[Recorded], decide: Decide | None = None, *, kinds: Kinds
) -> Mismatch | None:
    """Re-decide every recorded input; the first disagreement, or ``None``.

    ``decide`` defaults to the decider of the stream's kind in ``kinds``.
    """
    kind = _kind(records, kinds)
    if kind is None:
        return None
    if decide is None:
        decide = kind.decider.decide
    state = kind.decider.initial
    for step in commits(records, kinds):
        head = step[0]
        recorded = tuple(r.event for r in step[1:])
        if not kind.is_input(head.event):
            return Mismatch(
                version=head.version,
                input=None,
                recorded=(head.event,),
                decided=None,
                problem="a decision was recorded without an input before it",
            )
        decided = decide(head.event, state)
        if decided is None:
            return Mismatch(
                version=head.version,
                input=head.event,
                recorded=recorded,
                decided=None,
                problem="the decider now refuses this recorded input",
            )
        after = kind.fold((r.event for r in step), state)
        again = tuple(decided)
        if again != recorded and not (
            kind.decider.same_decisions is not None
            and kind.decider.same_decisions(recorded, again, after)
        ):
            return Mismatch(
                version=head.version,
                input=head.event,
                recorded=recorded,
                decided=again,
                problem="the decider now decides differently",
            )
        state = after
    return None


def remap(
    event: Event,
    old: str,
    new: str,
    fields: tuple[str, ...],
) -> Event:
    """``event`` with the ids in ``fields`` (those its kind derives from its
    actor's id, `Surface.derived`) that derive from actor ``old`` rewritten for
    ``new`` (an id, or a stream ``KIND.ID/...`` of a child)."""

    def swap_id(value: str) -> str:
        if value == old or value.startswith((f"{old}/", f"{old}-", f"{old}:")):
            return new + value[len(old) :]
        return value

    def swap(value: str) -> str:
        swapped = swap_id(value)
        if swapped != value:
            return swapped
        kind, dot, rest = value.partition(".")  # a stream: KIND.ID
        return f"{kind}.{swap_id(rest)}" if dot else value

    changes: dict[str, object] = {}
    for name in fields:
        value = getattr(event, name, None)
        if isinstance(value, str):
            changes[name] = swap(value)
    return msgspec.structs.replace(event, **changes) if changes else event


def fork_events(
    steps: Sequence[Sequence[Recorded]],
    old: str,
    new: str,
    adapt: Callable[[Event, str], Event] | None = None,
    *,
    kinds: Kinds,
) -> list[Event]:
    """The events that start a fork of ``steps`` (a stream's first steps) as
    actor ``new``: each input with ids of ``old`` rewritten (`remap`, then
    ``adapt(input, old)`` if given), re-decided by the stream's kind in
    ``kinds``, so
    that what the decisions derive from the actor's id names the fork. One
    commit's worth.

    Raises:
        StewardError: the decider refuses a copied input.
    """
    if not steps:
        return []
    kind = kinds.of(steps[0][0].stream)
    state = kind.decider.initial
    copy: list[Event] = []
    for step in steps:
        event = remap(step[0].event, old, new, kind.surface.derived)
        if adapt is not None:
            event = adapt(event, old)
        decided = kind.decider.decide(event, state)
        if decided is None:
            raise StewardError(
                f"the fork refused the input at version {step[0].version}"
            )
        copy += [event, *decided]
        state = kind.fold([event, *decided], state)
    return copy


def fork(
    records: Sequence[Recorded], at: int, kinds: Kinds
) -> tuple[str, list[Event], str | None]:
    """A fork of the actor of ``records`` at version ``at``, where a step
    ends: the fork's stream (``KIND.ID-forkXXXXXX``), the events that start
    it (`fork_events`: one commit's worth) and that commit's correlation id.

    Raises:
        StewardError: ``at`` is not where a step ends (naming versions that
            are), or the decider refuses a copied input.
    """
    stream = records[0].stream
    kind = kinds.of(stream)
    old = stream.partition(".")[2]
    new = _fork_id(old)
    kept = _fork_steps(commits(records, kinds), at)
    copy = fork_events(kept, old, new, kind.surface.detach, kinds=kinds)
    correlation = kind.correlation_of(kind.decider.initial, copy[0]) or new
    return f"{kind.name}.{new}", copy, correlation


_FORKED = re.compile(r"-fork[0-9a-f]{6}$")
"""The suffix a fork's id has (a fork of a fork gets a new one, not two)."""


def _fork_id(old: str) -> str:
    """A new id for a fork of actor ``old``: ``OLD-forkXXXXXX``."""
    return _FORKED.sub("", old) + "-fork" + secrets.token_hex(3)


def _fork_steps(steps: list[list[Recorded]], at: int) -> list[list[Recorded]]:
    """The steps a fork at version ``at`` copies: those up to the one ending
    there. Any other version is refused, naming the versions that work."""
    ends = [step[-1].version for step in steps]
    if at in ends:
        return steps[: ends.index(at) + 1]
    if at > ends[-1]:
        problem = f"version {at} is past the run's last version {ends[-1]}"
    elif at < 1:
        problem = f"version {at} is before the run's first step"
    else:
        step = next(step for step in steps if step[-1].version > at)
        problem = (
            f"version {at} is inside a step "
            f"(versions {step[0].version}..{step[-1].version})"
        )
    raise StewardError(
        f"{problem}; fork at a version where a step ends: {_near(ends, at)}"
    )


def _near(versions: list[int], at: int) -> str:
    """Sorted ``versions`` as a short list: all of up to ten; of more, the
    first two, the last two and the two around ``at``, with … for the rest."""
    if len(versions) <= 10:
        return ", ".join(map(str, versions))
    n = len(versions)
    i = bisect.bisect_left(versions, at)
    shown = sorted({0, 1, n - 2, n - 1} | {j for j in (i - 1, i) if 0 <= j < n})
    parts: list[str] = []
    for before, j in itertools.pairwise([-1, *shown]):
        if j > before + 1:
            parts.append("…")
        parts.append(str(versions[j]))
    return ", ".join(parts)
