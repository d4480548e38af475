"""Claims: which worker carries out an effect, when hosts share a log.

With worker ids (hosts sharing a JetStream log) each model or tool call is
claimed in its stream first (`EffectClaimed`, until a time), and the claim is
renewed while the call runs; the stream's decider refuses a claim another
worker holds. A worker that dies stops renewing: its claims expire, and the
sweep routes the pending effects again so that a live worker retakes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from steward import events
from steward.actors.kind import Kinds
from steward.clock import Clock
from steward.effects.timers import sleep_or
from steward.events import Recorded
from steward.host.mailbox import Mailboxes
from steward.host.states import States

log = logging.getLogger("steward.host")

ONE_HOST = "host"
"""The worker of a claim recorded by the one host of an embedded log (for a
call that must not be made twice: `Claims.once`)."""


class Claims:
    """This worker's claims on the effects it carries out."""

    def __init__(
        self,
        mailboxes: Mailboxes,
        states: States,
        kinds: Kinds,
        clock: Clock,
        *,
        worker_id: str | None,
        claim_seconds: float,
    ) -> None:
        self._mailboxes = mailboxes
        self._states = states
        self._kinds = kinds
        self._clock = clock
        self._worker_id = worker_id
        self._claim_seconds = claim_seconds
        # This worker's claims being renewed while their calls run.
        self._renewals: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        """The renewals running (`Host.stop` cancels them)."""
        self._begun: set[str] = set()
        """The calls taken with `once` that this host is making."""

    @property
    def renewing(self) -> bool:
        """Whether any claim of this worker is being renewed."""
        return bool(self._renewals)

    async def claim(self, rec: Recorded, request_id: str) -> bool:
        """Take effect ``request_id`` for this worker; whether it is ours.

        Without a worker id (one host on its log) every effect is ours.
        """
        if self._worker_id is None:
            return True
        # Only the worker holding the stream's partition routes its calls;
        # a look at the state first spares a claim another host (a
        # `steward run` of this run, a worker that held the partition
        # before) holds still.
        held = await self._held(rec, request_id)
        if (
            held is not None
            and held[0] != self._worker_id
            and held[1] > self._clock.now()
        ):
            return False
        claim = self._claim_of(request_id)
        submit = self._mailboxes.submit
        if await submit(rec.stream, claim, causation_id=rec.id) is None:
            return False
        stop = asyncio.Event()
        renewing = asyncio.create_task(self._renew(rec, request_id, stop))
        self.tasks.add(renewing)
        renewing.add_done_callback(self.tasks.discard)
        self._renewals[request_id] = (renewing, stop)
        return True

    async def once(
        self, rec: Recorded, request_id: str
    ) -> Literal["ours", "theirs", "unknown"]:
        """Take a call that must not be made twice (a tool that is not
        idempotent): ``ours`` to make it now (its claim recorded first, with
        one host too), ``theirs`` when a live worker (or this one) makes it,
        ``unknown`` when a host that is gone began it: whether it took effect
        cannot be known, and it is not made again."""
        if request_id in self._begun:
            return "theirs"
        held = await self._held(rec, request_id)
        if held is not None:
            worker, until = held
            alive = until > self._clock.now() and worker != self._worker_id
            return "theirs" if self._worker_id is not None and alive else "unknown"
        if self._worker_id is not None:
            ours = await self.claim(rec, request_id)
        else:
            claim = self._claim_of(request_id, ONE_HOST)
            submit = self._mailboxes.submit
            ours = await submit(rec.stream, claim, causation_id=rec.id) is not None
        if not ours:
            return "theirs"
        self._begun.add(request_id)
        return "ours"

    async def _held(self, rec: Recorded, request_id: str) -> tuple[str, float] | None:
        """The worker whose claim on ``request_id`` the stream holds, and
        until when; ``None`` if none."""
        state, _ = await self._states.get(rec.stream)
        outstanding = self._kinds.of(rec.stream).reactor.outstanding
        return None if outstanding is None else outstanding(state).claim(request_id)

    def ended(self, request_id: str) -> None:
        """Call ``request_id`` taken with `once` has ended."""
        self._begun.discard(request_id)

    async def stop_renewing(self, request_id: str) -> None:
        """Stop renewing this worker's claim on ``request_id`` (if it is)."""
        renewal = self._renewals.pop(request_id, None)
        if renewal is not None:
            renewing, stop = renewal
            stop.set()
            await asyncio.gather(renewing, return_exceptions=True)

    async def sweep(self, reroute: Callable[[], Awaitable[None]]) -> None:
        """Retake effects whose worker died: ``reroute`` the pending ones
        (`Dispatcher.reroute`), often.

        A live worker's claim refuses the retry; an expired one lets it in.
        """
        while True:
            await self._clock.sleep(max(0.05, self._claim_seconds / 4))
            try:
                await reroute()
            except Exception:
                log.exception("sweeping abandoned effects failed")

    async def _renew(self, rec: Recorded, request_id: str, stop: asyncio.Event) -> None:
        """Renew this worker's claim on ``request_id`` every third of
        ``claim_seconds`` until ``stop`` is set (its call ended), so a call
        that takes long is not retaken from a live worker (a heartbeat, as
        Temporal's activities send). The decider accepts a renewal by the
        claim's own worker; a refusal (the call was answered) ends it."""
        while not stop.is_set():
            await sleep_or(self._clock, self._claim_seconds / 3, stop)
            if stop.is_set():
                return
            claim = self._claim_of(request_id)
            submit = self._mailboxes.submit
            try:
                if await submit(rec.stream, claim, causation_id=rec.id) is None:
                    return
            except Exception:
                log.exception("renewing the claim on %s failed", request_id)

    def _claim_of(
        self, request_id: str, worker: str | None = None
    ) -> events.EffectClaimed:
        """This worker's claim on ``request_id`` from now (new or renewed),
        or ``worker``'s (the one host's)."""
        worker = worker or self._worker_id
        assert worker is not None
        now = self._clock.now()
        return events.EffectClaimed(
            request_id=request_id,
            worker=worker,
            until=now + self._claim_seconds,
            at=now,
        )
