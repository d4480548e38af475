"""The state cache: each stream's state as the host last knew it.

A host decides on the state it holds in memory, folded from its own commits
(the decider's output) or from the log when it has none. It also remembers
the newest version of each stream it knows to be committed, by it or by
another process (what the dispatcher saw): a read that returns an older
version overlapped a commit and must not become the state. Both are bounded,
forgetting the streams written longest ago.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import islice
from typing import Any

from steward.actors.kind import Kinds
from steward.bus import EventLog
from steward.errors import StewardError

_STALE_READS = 50
"""Reads of a stream that may come back older than a known commit (a replica
that lags) before `States.get` gives up."""

_CACHED_STATES = 2_048
"""Streams whose state a host keeps in memory; past this, the states written
longest ago are forgotten (and folded from the log again when needed), so a
host serving runs for months holds the active ones, not every run it saw."""

_KNOWN_VERSIONS = 100_000
"""Streams whose newest committed version a host remembers, forgetting those
written longest ago: a stream idle for that many others' commits has no read
in flight that could overlap its last commit."""


class States:
    """The states of the streams a host serves, cached, and the newest
    committed version of each that it knows."""

    def __init__(self, log: EventLog, kinds: Kinds) -> None:
        self._log = log
        self._kinds = kinds
        self._cache: dict[str, tuple[Any, int]] = {}
        # Streams whose cached state this host folded from its own commit of
        # the decider's output: their prompts need no hash check.
        self._own: dict[str, int] = {}
        # The newest version of each stream this host knows to be committed
        # (its own commits, and what the dispatcher saw): a read that returns
        # less started before that commit and must not become the state.
        self._known: dict[str, int] = {}
        self.follows: Callable[[str], bool] = lambda stream: True
        """Whether this host follows ``stream``'s commits (a worker follows
        the partitions it holds): only then is a cached state kept, as
        only then would another process's commit make it known stale."""

    def sizes(self) -> tuple[int, int]:
        """How many states are cached, and how many streams' versions known."""
        return len(self._cache), len(self._known)

    def streams(self) -> list[str]:
        """The streams whose state is cached."""
        return list(self._cache)

    def cached(self, stream: str) -> tuple[Any, int] | None:
        """The cached state and version of ``stream``, if any (no read)."""
        return self._cache.get(stream) if self.follows(stream) else None

    def cached_at(self, stream: str, version: int) -> Any:
        """The cached state of ``stream`` if it is at ``version``."""
        cached = self.cached(stream)
        return cached[0] if cached is not None and cached[1] == version else None

    def unseen(self, stream: str) -> bool:
        """Whether this host knows nothing of ``stream``: no commit, cached
        state or routed record."""
        return stream not in self._known and stream not in self._cache

    def own(self, stream: str, version: int) -> bool:
        """Whether the cached state of ``stream`` at ``version`` is folded
        from this host's own commit of the decider's output."""
        return self._own.get(stream) == version

    async def get(self, stream: str) -> tuple[Any, int]:
        """The current state and version of ``stream`` (cached).

        A read that overlapped a commit of this host may return the stream
        as it was before; such a state is never cached nor decided on (an
        input refused on it would be refused wrongly): it is read again.
        """
        cached = self.cached(stream)
        if cached is not None:
            return cached
        for attempt in range(_STALE_READS):
            recorded = await self._log.read(stream)
            version = recorded[-1].version if recorded else 0
            cached = self._cache.get(stream)
            if cached is not None and cached[1] >= version:
                return cached  # a commit while we read cached a newer state
            if version >= self._known.get(stream, 0):
                break
            await asyncio.sleep(0.001 * (1 + attempt))
        else:
            raise StewardError(
                f"stream {stream}: the log keeps returning version {version}, "
                f"older than the committed {self._known.get(stream, version)}"
            )
        state = self._kinds.of(stream).fold(r.event for r in recorded)
        if self.follows(stream):
            self._keep(stream, state, version)
        return state, version

    async def at(self, stream: str, version: int) -> Any:
        """The state of ``stream`` at ``version`` (folded from the log unless
        the cached state is at that version)."""
        cached = self.cached_at(stream, version)
        if cached is not None:
            return cached
        recorded = await self._log.read(stream)
        kind = self._kinds.of(stream)
        return kind.fold(r.event for r in recorded if r.version <= version)

    def committed(self, stream: str, state: Any, version: int) -> None:
        """Keep ``state``, folded from this host's own commit that took
        ``stream`` to ``version`` (unless a newer state is cached already)."""
        cached = self._cache.get(stream)
        if self.follows(stream) and (cached is None or cached[1] <= version):
            self._keep(stream, state, version)  # (not over a newer state)
            self._own[stream] = version
        self._know(stream, version)

    def saw(self, stream: str, version: int) -> None:
        """Note that ``stream`` is committed up to ``version`` (a record the
        dispatcher read): a cached state older than that is forgotten."""
        if version > self._known.get(stream, 0):
            self._know(stream, version)
            cached = self._cache.get(stream)
            if cached is not None and cached[1] < version:
                # another process wrote this stream: our cached state is stale
                self.forget(stream)

    def forget(self, stream: str) -> None:
        """Drop the cached state of ``stream``: the next look folds the log."""
        self._cache.pop(stream, None)
        self._own.pop(stream, None)

    def _keep(self, stream: str, state: Any, version: int) -> None:
        """Cache ``state`` as ``stream``'s, newest last; forget the oldest
        tenth once more than `_CACHED_STATES` are held."""
        cache = self._cache
        cache.pop(stream, None)
        cache[stream] = (state, version)
        if len(cache) > _CACHED_STATES:
            for old in list(islice(cache, len(cache) - _CACHED_STATES * 9 // 10)):
                self.forget(old)

    def _know(self, stream: str, version: int) -> None:
        """Remember ``version`` as the newest committed of ``stream``; forget
        the oldest tenth once more than `_KNOWN_VERSIONS` are held."""
        known = self._known
        if version > known.get(stream, 0):
            known.pop(stream, None)
            known[stream] = version
            if len(known) > _KNOWN_VERSIONS:
                for old in list(islice(known, len(known) - _KNOWN_VERSIONS * 9 // 10)):
                    del known[old]
