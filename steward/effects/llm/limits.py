"""How many model calls run at once, in which order, and how fast.

`PriorityLimiter` is Klaw's ``maxConcurrentLlm`` semaphore with its priority
rule: at most ``limit`` calls in flight; when a slot frees, a waiting
interactive call is served before any waiting subagent call, first come first
served within a priority. A call in flight is never interrupted.

`RateLimiter` holds a model to its requests-per-minute and tokens-per-minute
limits over a sliding 60-second window: a call that would exceed them waits
until enough of the window has passed; it never fails for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["PRIORITIES", "PriorityLimiter", "RateLimiter"]

PRIORITIES = ("interactive", "subagent")
"""Priorities, most urgent first."""


class PriorityLimiter:
    """At most ``limit`` holders; waiters served by priority, then arrival."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the model call limit must be 1 or more, not {limit}")
        self.limit = limit
        self.active = 0
        self._waiting: list[tuple[int, int, str, asyncio.Future[None]]] = []
        self._queued = 0
        """Waiters neither served nor cancelled (``_waiting`` keeps cancelled
        ones until they reach the top of the heap)."""
        self._seq = itertools.count()

    def depth(self) -> dict[str, int]:
        """How many calls wait, by priority (the queue depth operators watch)."""
        counts = dict.fromkeys(PRIORITIES, 0)
        for _, _, priority, future in self._waiting:
            if not future.done():
                counts[priority] += 1
        return counts

    @contextlib.asynccontextmanager
    async def slot(self, priority: str) -> AsyncIterator[None]:
        """Hold one slot for the body; waits first if all are taken."""
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    def take(self, priority: str) -> bool:
        """Take a slot if one is free and nobody waits; whether it was taken."""
        if priority not in PRIORITIES:
            raise ValueError(f"unknown priority {priority!r}; use one of {PRIORITIES}")
        if self.active < self.limit and not self._queued:
            self.active += 1
            return True
        return False

    async def acquire(self, priority: str) -> None:
        """Take a slot, waiting for one if all are taken; `release` it after."""
        if self.take(priority):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        rank = PRIORITIES.index(priority)
        heapq.heappush(self._waiting, (rank, next(self._seq), priority, future))
        self._queued += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.cancelled():
                self._queued -= 1
            else:
                self.release()  # granted as we were cancelled: pass it on
            raise

    def release(self) -> None:
        self.active -= 1
        while self._waiting:
            _, _, _, future = heapq.heappop(self._waiting)
            if not future.done():
                self.active += 1
                self._queued -= 1
                future.set_result(None)
                return

    def depth_total(self) -> int:
        return self._queued


class RateLimiter:
    """Requests and tokens per minute over a sliding window; callers queue."""

    WINDOW = 60.0

    def __init__(
        self,
        requests_per_minute: int | None,
        tokens_per_minute: int | None,
        now: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.rpm = requests_per_minute
        self.tpm = tokens_per_minute
        self._now = now
        self._sleep = sleep
        self._sent: deque[tuple[float, int]] = deque()
        self._lock = asyncio.Lock()

    async def acquire(self, tokens: int) -> float:
        """Wait until a call of ``tokens`` fits; the seconds waited."""
        if self.rpm is None and self.tpm is None:
            return 0.0
        waited = 0.0
        async with self._lock:  # first come, first served
            while (delay := self._delay(tokens)) > 0:
                await self._sleep(delay)
                waited += delay
            self._sent.append((self._now(), tokens))
        return waited

    def _delay(self, tokens: int) -> float:
        now = self._now()
        while self._sent and self._sent[0][0] <= now - self.WINDOW:
            self._sent.popleft()
        if not self._sent:
            return 0.0  # an empty window admits any one call, however large
        if self.rpm is not None and len(self._sent) >= self.rpm:
            return self._sent[0][0] + self.WINDOW - now
        if self.tpm is not None:
            used = sum(n for _, n in self._sent)
            if used + tokens > self.tpm:
                # wait until enough of the oldest calls leave the window (all
                # of them, for a call larger than the whole limit)
                leaves = self._sent[-1][0]
                for at, n in self._sent:
                    used -= n
                    if used + tokens <= self.tpm:
                        leaves = at
                        break
                return leaves + self.WINDOW - now
        return 0.0
