"""The contract every event-log backend keeps."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from typing import Protocol

import msgspec

from steward.events import Event, Recorded


class Commit(msgspec.Struct, frozen=True, kw_only=True):
    """Where an append landed: the stream's new version and the global positions."""

    stream: str
    first_version: int
    last_version: int
    first_position: int
    last_position: int
    at: float
    records: tuple[Recorded, ...] = ()


class EventLog(Protocol):
    """An append-only log of streams of events.

    A backend guarantees:

    - ``append`` is atomic: all of ``events`` are stored, at versions
      ``expected_version + 1 ..``, or none is. It raises
      ``steward.errors.ConcurrencyError`` when the stream is not at
      ``expected_version`` (0 means "the stream must not exist").
    - positions are global, strictly increasing, and never reused; an event
      with a lower position was committed no later than one with a higher one.
    - ``read`` returns a stream's events in version order, from
      ``from_version`` (inclusive, 1-based) on.
    - ``read_all`` returns events with ``position > from_position`` in position
      order, at most ``limit`` of them.
    - ``subscribe`` yields every event with ``position > from_position`` in
      order: first those already stored, then new ones as they are committed,
      by this process or any other that writes to the same log.
    - ``version`` is the stream's current version (0 when it does not exist);
      ``head`` the highest position in the log (0 when empty).
    """

    async def append(
        self,
        stream: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        at: float | None = None,
    ) -> Commit: ...

    async def read(self, stream: str, from_version: int = 1) -> list[Recorded]: ...

    async def read_all(
        self, from_position: int = 0, limit: int = 10_000
    ) -> list[Recorded]: ...

    def subscribe(self, from_position: int = 0) -> AsyncIterator[Recorded]: ...

    async def version(self, stream: str) -> int: ...

    async def head(self) -> int: ...

    async def streams(self, prefix: str = "") -> list[str]: ...

    async def close(self) -> None: ...


class PartitionedLog(EventLog, Protocol):
    """A log shared by workers, its streams split into partitions (each
    stream in one, by its name alone): a worker holds some partitions and
    reads and follows only theirs."""

    partitions: int
    """How many partitions; 0: one unsplit whole (partition 0)."""

    def partition_of(self, stream: str) -> int: ...

    async def read_all(
        self,
        from_position: int = 0,
        limit: int = 10_000,
        *,
        partition: int | None = None,
    ) -> list[Recorded]: ...

    def subscribe(
        self, from_position: int = 0, partitions: Collection[int] | None = None
    ) -> AsyncIterator[Recorded]: ...

    async def head(self, partitions: Collection[int] | None = None) -> int: ...


def envelopes(
    stream: str,
    version: int,
    position: int,
    at: float,
    events: Iterable[Event],
    correlation_id: str | None,
    causation_id: str | None,
) -> list[Recorded]:
    """The envelopes of one commit's events, the first at ``version`` and
    ``position``; the commit's time and ids are every event's."""
    return [
        Recorded(
            stream=stream,
            version=version + i,
            position=position + i,
            at=at,
            event=event,
            correlation_id=correlation_id,
            causation_id=causation_id,
        )
        for i, event in enumerate(events)
    ]


def check_append(stream: str, events: Sequence[Event], expected_version: int) -> None:
    """Refuse arguments no log can append, the same way on every backend.

    Raises:
        ValueError: ``events`` is empty, ``stream`` has no name, or
            ``expected_version`` is negative.
    """
    if not events:
        raise ValueError(f"append to {stream} needs at least one event")
    if not stream:
        raise ValueError("append needs a stream name, got an empty string")
    if expected_version < 0:
        raise ValueError(
            f"expected_version for {stream} must be 0 or more, not {expected_version}"
        )
