"""Time for the shell: the system clock, and a fake one tests advance by hand."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable
from typing import Protocol


class Clock(Protocol):
    """Where the host reads the time and waits; deciders never see it."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> Awaitable[None]: ...


class SystemClock:
    """Wall-clock time (epoch seconds) and asyncio sleeps."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when a test calls ``advance``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> Awaitable[None]:
        """Until ``advance`` reaches ``seconds`` from now: now when called, not
        when first awaited (a task started for it runs later, perhaps after
        the clock moved)."""
        if seconds <= 0:
            return asyncio.sleep(0)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), future))
        return future

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper now due."""
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
