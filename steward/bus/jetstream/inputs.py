"""Inputs for another worker's streams, decided by the worker that holds them.

A worker holds some partitions and keeps their actors' states warm. An input
it has for a stream of another partition (a child's result for its parent, a
child to create) is sent to that partition's holder on the core NATS subject
``_STEWARD.in.<log stream>.<partition>``, which decides it on the state it
holds and commits it (`Inputs.answer`), instead of being decided here on a
state read afresh from the log. When no holder answers (a partition between
holders) the sender decides it itself: the expected-version check keeps
that correct either way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.errors

from steward.bus.base import Commit
from steward.bus.jetstream.subjects import escape_token
from steward.events import Event
from steward.events.codec import decode, encode

logger = logging.getLogger(__name__)

Decide = Callable[[str, Event, str | None], Awaitable[Commit | None]]
"""The holder's `Mailboxes.submit`: decide and commit an input."""


class _Input(msgspec.Struct, frozen=True):
    stream: str
    event: bytes
    causation_id: str | None


class _Outcome(msgspec.Struct, frozen=True):
    commit: Commit | None = None
    error: str | None = None


class Inputs:
    """Sends inputs to the holders of their streams' partitions, and
    answers those sent to the partitions this worker holds."""

    def __init__(self, log: Any, timeout: float = 10.0) -> None:
        self._log = log
        self._timeout = timeout
        self._subscriptions: dict[int, Any] = {}

    def _subject(self, partition: int) -> str:
        return f"_STEWARD.in.{escape_token(self._log.stream)}.{partition}"

    async def send(
        self, stream: str, input: Event, causation_id: str | None
    ) -> Commit | None | bool:
        """Have ``stream``'s holder decide ``input``: its commit (without its
        records), ``None`` when refused, or ``False`` when no holder answered
        (the caller decides it then)."""
        request = msgspec.msgpack.encode(_Input(stream, encode(input), causation_id))
        try:
            msg = await self._log.connection.request(
                self._subject(self._log.partition_of(stream)),
                request,
                timeout=self._timeout,
            )
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return False
        outcome = msgspec.msgpack.decode(msg.data, type=_Outcome)
        if outcome.error is not None:
            logger.warning(
                "the holder of %s failed to decide: %s", stream, outcome.error
            )
            return False
        return outcome.commit

    async def answer(self, held: frozenset[int], decide: Decide) -> None:
        """Answer the inputs sent to the partitions ``held`` (and no others)."""
        for partition in [p for p in self._subscriptions if p not in held]:
            await self._subscriptions.pop(partition).unsubscribe()

        async def answer(msg: Any) -> None:
            try:
                asked = msgspec.msgpack.decode(msg.data, type=_Input)
                event = decode(asked.event, self._log.union)
                commit = await decide(asked.stream, event, asked.causation_id)
                if commit is not None:
                    commit = msgspec.structs.replace(commit, records=())
                outcome = _Outcome(commit=commit)
            except Exception as e:  # the sender decides it then
                outcome = _Outcome(error=str(e) or type(e).__name__)
            await msg.respond(msgspec.msgpack.encode(outcome))

        for partition in sorted(held - set(self._subscriptions)):
            self._subscriptions[partition] = await self._log.connection.subscribe(
                self._subject(partition), cb=answer
            )

    async def close(self) -> None:
        for subscription in self._subscriptions.values():
            await subscription.unsubscribe()
        self._subscriptions.clear()
