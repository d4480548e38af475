"""The timer effect: wake-ups at their due time, on the host's clock.

Any kind may arm a timer (a run's sleep, a session's debounce, a cron). At its
due time the timer gives its stream `WakeDue(timer_id)`; a timer that a later
decision superseded fires all the same and is refused by its decider, so
timers need no cancelling. Armed timers live in memory; after a restart the
host arms them again from the ``pending`` projection.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from steward.clock import Clock
from steward.events.protocol import WakeDue

__all__ = ["Timers", "sleep_or"]

Fire = Callable[[str, WakeDue], None]


class Timers:
    """Armed timers by due time; `run` fires each through ``fire`` (which
    starts the delivery and returns at once)."""

    def __init__(self, clock: Clock, fire: Fire) -> None:
        self.clock = clock
        self._fire = fire
        self._heap: list[tuple[float, str, str]] = []
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        """The timers armed, not fired yet."""
        return len(self._heap)

    def arm(self, stream: str, timer_id: str, due: float) -> None:
        heapq.heappush(self._heap, (due, timer_id, stream))
        self._changed.set()

    async def run(self) -> None:
        """Fire timers as they come due, until cancelled."""
        while True:
            self._changed.clear()
            if not self._heap:
                await self._changed.wait()
                continue
            due, timer_id, stream = self._heap[0]
            delay = due - self.clock.now()
            if delay > 0:
                await sleep_or(self.clock, delay, self._changed)
                continue
            heapq.heappop(self._heap)
            self._fire(stream, WakeDue(timer_id=timer_id, at=self.clock.now()))


async def sleep_or(clock: Clock, seconds: float, event: asyncio.Event) -> None:
    """Sleep ``seconds`` on ``clock`` or until ``event`` is set, whichever
    comes first; cancelled, it leaves no task pending."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        waiter.cancel()
        await asyncio.gather(sleeper, waiter, return_exceptions=True)
