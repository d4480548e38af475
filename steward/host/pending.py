"""What the streams a worker holds still wait for, kept in memory.

A host with projections resumes from their ``pending`` table. A worker on a
shared log builds no projections: it keeps the same facts in memory, from
the records of the partitions it holds, through the same functions (the
model and tool requests and answers every kind shares, and each kind's
`Reactor.pending`). When it takes over a partition it loads what the
partition's last holder saved (`Checkpoints`), reads the partition's
records after that into this index (from the first, when nothing was
saved) and routes again what is still wanted; a live worker keeps it
current from the records it follows.

An effect answered in another stream (a child to create, a result to
deliver) is answered here when this worker has carried it out; one that a
record wants but its kind's effects turn out not to ask for (a result for a
run nobody waits on) is dropped once it has been routed again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from steward import events
from steward.actors.effects import WantKind, calls_pending
from steward.actors.kind import Kinds
from steward.events import Recorded


class Membership(Protocol):
    """A host's place among the workers sharing a log
    (`steward.bus.jetstream.members.Membership`): it tells the host which
    partitions it holds, and says how busy the host is to the others."""

    held: frozenset[int]

    async def join(
        self,
        hold: Callable[[frozenset[int]], Awaitable[None]],
        busy: Callable[[], dict[str, int]],
    ) -> None: ...

    async def leave(self) -> None: ...


class Checkpoints(Protocol):
    """Where a worker saves what a partition's streams wait for, with the
    position of the last record that says so, and the next holder loads it
    (`steward.bus.jetstream.checkpoints.Checkpoints`)."""

    async def load(
        self, partition: int
    ) -> tuple[int, list[tuple[str, str, int, str]]] | None: ...

    async def save(
        self, partition: int, position: int, wants: list[tuple[str, str, int, str]]
    ) -> bool: ...


class Inputs(Protocol):
    """How a worker hands an input for another worker's stream to its holder,
    and decides those handed to the partitions it holds
    (`steward.bus.jetstream.inputs.Inputs`)."""

    async def send(
        self, stream: str, input: events.Event, causation_id: str | None
    ) -> Any: ...

    async def answer(
        self,
        held: frozenset[int],
        decide: Callable[[str, events.Event, str | None], Awaitable[Any]],
    ) -> None: ...

    async def close(self) -> None: ...


ELSEWHERE = frozenset({WantKind.CREATE, WantKind.SPAWN, WantKind.DELIVER})
"""Kinds of wants answered in another stream (or by nobody)."""

_SKIPPED = frozenset({WantKind.APPROVAL})
"""Kinds of wants a host does not carry out (a person answers them)."""


class PendingIndex:
    """The effects wanted and not yet answered, per stream, in memory."""

    def __init__(self, kinds: Kinds) -> None:
        self._kinds = kinds
        # stream -> key -> (version of the record that asked, kind of want)
        self._wants: dict[str, dict[str, tuple[int, str]]] = {}
        self._streams: dict[str, str] = {}  # key -> stream

    def __len__(self) -> int:
        return len(self._streams)

    def apply(self, rec: Recorded) -> None:
        """Note what committed ``rec`` asks for and answers."""
        asked = calls_pending(rec.event)
        if asked is None:
            kind = self._kinds.get(rec.stream.partition(".")[0])
            if kind is None or kind.reactor.pending is None:
                return
            asked = kind.reactor.pending(rec)
        if asked.ended:
            self.drop(rec.stream)
        for key in asked.answers:
            self._answer(key)
        for want in asked.wants:
            if want.kind not in _SKIPPED:
                self._want(rec, want.key, want.kind)

    def carried(self, key: str) -> None:
        """This host carried out effect ``key`` (its answer may be in
        another stream, which it does not follow)."""
        stream = self._streams.get(key)
        if stream is not None and self._wants[stream][key][1] in ELSEWHERE:
            self._answer(key)

    def routed(self, stream: str, version: int, started: Iterable[str]) -> None:
        """The record at ``version`` was routed again and ``started`` the
        effects with these keys: what else it wanted elsewhere is asked for
        by nobody (void)."""
        wants = self._wants.get(stream, {})
        keep = set(started)
        for key, (at, kind) in list(wants.items()):
            if at == version and kind in ELSEWHERE and key not in keep:
                self._answer(key)

    def sources(self, holds: Callable[[str], bool]) -> list[tuple[str, int]]:
        """The (stream, version) of every record whose effect is still
        wanted, of the streams ``holds`` accepts, in order."""
        return sorted(
            {
                (stream, version)
                for stream, wants in self._wants.items()
                if holds(stream)
                for version, _ in wants.values()
            }
        )

    def saved(self, holds: Callable[[str], bool]) -> list[tuple[str, str, int, str]]:
        """The wants of the streams ``holds`` accepts, as (stream, key,
        version, kind): what `load` takes back (a partition's checkpoint)."""
        return [
            (stream, key, version, kind)
            for stream, wants in self._wants.items()
            if holds(stream)
            for key, (version, kind) in wants.items()
        ]

    def load(self, saved: Iterable[tuple[str, str, int, str]]) -> None:
        """Take back wants `saved` gave (another holder's, maybe)."""
        for stream, key, version, kind in saved:
            self._answer(key)
            self._wants.setdefault(stream, {})[key] = (version, kind)
            self._streams[key] = stream

    def drop(self, stream: str) -> None:
        """Forget ``stream``'s wants (it ended, or is no longer held)."""
        for key in self._wants.pop(stream, {}):
            del self._streams[key]

    def forget(self, holds: Callable[[str], bool]) -> None:
        """Forget the wants of every stream ``holds`` no longer accepts."""
        for stream in [s for s in self._wants if not holds(s)]:
            self.drop(stream)

    def _want(self, rec: Recorded, key: str, kind: str) -> None:
        self._answer(key)  # asked again: the newest asking counts
        self._wants.setdefault(rec.stream, {})[key] = (rec.version, kind)
        self._streams[key] = rec.stream

    def _answer(self, key: str) -> None:
        stream = self._streams.pop(key, None)
        if stream is not None:
            wants = self._wants[stream]
            del wants[key]
            if not wants:
                del self._wants[stream]
