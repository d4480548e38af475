"""Replay a recorded run: rebuild its state, verify its decisions, fork it.

Replay never calls a model or a tool: every non-deterministic fact is already
an input in the log, so re-running ``decide`` over the recorded inputs must give
back the recorded decisions. The first place it does not is reported with both
sides, like Temporal's non-determinism check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from steward.actors import run as run_actor
from steward.actors.prompt import HASH_PREFIX, prompt_hash, prompt_matches
from steward.events import INPUT_TYPES, Event, LlmRequested, Recorded

Decide = Callable[[Event, run_actor.Run], list[Event] | None]


class Mismatch(msgspec.Struct, frozen=True, kw_only=True):
    """Where re-deciding the log first disagreed with it."""

    version: int
    input: Event | None
    recorded: tuple[Event, ...]
    decided: tuple[Event, ...] | None
    problem: str


def commits(records: Sequence[Recorded]) -> list[list[Recorded]]:
    """Split a run's records into steps: each input with the decisions after it."""
    steps: list[list[Recorded]] = []
    for rec in records:
        if isinstance(rec.event, INPUT_TYPES) or not steps:
            steps.append([rec])
        else:
            steps[-1].append(rec)
    return steps


def rebuild(records: Sequence[Recorded], until: int | None = None) -> run_actor.Run:
    """The run's state after its events up to version ``until`` (all by default)."""
    return run_actor.fold(
        r.event for r in records if until is None or r.version <= until
    )


def verify(
    records: Sequence[Recorded], decide: Decide | None = None
) -> Mismatch | None:
    """Re-decide every recorded input; the first disagreement, or ``None``.

    ``decide`` defaults to the run decider as it is now, looked up at the call.
    """
    if decide is None:
        decide = run_actor.decide
    state = run_actor.initial
    for step in commits(records):
        head = step[0]
        recorded = tuple(r.event for r in step[1:])
        if not isinstance(head.event, INPUT_TYPES):
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
        after = run_actor.fold((r.event for r in step), state)
        again = tuple(decided)
        if again != recorded and again != _rehashed(recorded, after):
            return Mismatch(
                version=head.version,
                input=head.event,
                recorded=recorded,
                decided=again,
                problem="the decider now decides differently",
            )
        state = after
    return None


def _rehashed(recorded: tuple[Event, ...], after: run_actor.Run) -> tuple[Event, ...]:
    """``recorded`` with each first-kind prompt hash (written before part
    hashes) that matches its prompt given in the current kind."""
    out = []
    for event in recorded:
        if isinstance(event, LlmRequested) and not event.prompt_hash.startswith(
            HASH_PREFIX
        ):
            prompt = run_actor.build_prompt(after)
            if prompt_matches(prompt, event.prompt_hash):
                event = msgspec.structs.replace(event, prompt_hash=prompt_hash(prompt))
        out.append(event)
    return tuple(out)


def remap(event: Event, old: str, new: str) -> Event:
    """``event`` with ids derived from run ``old`` rewritten for run ``new``."""

    def swap(value: str) -> str:
        if value == old or value.startswith((f"{old}/", f"{old}-")):
            return new + value[len(old) :]
        return value

    changes: dict[str, object] = {}
    for name in ("run_id", "request_id", "timer_id"):
        value = getattr(event, name, None)
        if isinstance(value, str):
            changes[name] = swap(value)
    result = getattr(event, "result", None)
    if isinstance(result, msgspec.Struct) and hasattr(result, "run_id"):
        changes["result"] = msgspec.structs.replace(result, run_id=swap(result.run_id))
    return msgspec.structs.replace(event, **changes) if changes else event
