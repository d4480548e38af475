"""Reads of the projections across a shared log: a worker asks `serve`.

A worker builds no projections, yet a tool it runs may read them
(``memory.search`` reads a session's memory views), and an inbound message
it takes carries its sender's messages in other chats (`steward.actors.session.chats`).
`serve`, which builds them, answers such reads on the core NATS subject
``_STEWARD.reads.<stream>`` (`answer_reads`); a worker reads through
`RemoteReads`, which asks there. Several `serve` processes share the
requests as a queue group. With no `serve` running, a search fails in one
line saying so, and the tool's call records that error for the model; a
message is taken without its sender's other chats.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
import nats.errors

from steward.actors.session.events import Elsewhere
from steward.bus.jetstream.subjects import escape_token
from steward.errors import StewardError

logger = logging.getLogger(__name__)


class Projections(Protocol):
    """What `serve`'s projector answers."""

    async def search_memory(
        self, session_id: str, query: str, limit: int
    ) -> list[tuple[str, str, float]]: ...

    async def elsewhere(
        self, sender: str, session_id: str, limit: int
    ) -> tuple[Elsewhere, ...]: ...


class _Search(msgspec.Struct, frozen=True, tag="search"):
    session_id: str
    query: str
    limit: int


class _Elsewhere(msgspec.Struct, frozen=True, tag="elsewhere"):
    sender: str
    session_id: str
    limit: int


class _Answer(msgspec.Struct, frozen=True):
    hits: list[tuple[str, str, float]] = []
    elsewhere: tuple[Elsewhere, ...] = ()
    error: str | None = None


_asked = msgspec.json.Decoder(_Search | _Elsewhere)


def _subject(log: Any) -> str:
    return f"_STEWARD.reads.{escape_token(log.stream)}"


async def answer_reads(
    log: Any, projections: Projections
) -> Callable[[], Awaitable[None]]:
    """Answer the workers' reads of ``log``'s projections from
    ``projections`` until the returned function is called."""

    async def answer(msg: Any) -> None:
        try:
            match _asked.decode(msg.data):
                case _Search(session_id, query, limit):
                    hits = await projections.search_memory(session_id, query, limit)
                    reply = _Answer(hits=hits)
                case _Elsewhere(sender, session_id, limit):
                    found = await projections.elsewhere(sender, session_id, limit)
                    reply = _Answer(elsewhere=found)
        except Exception as e:  # a bad request must not end the service
            logger.warning("a read of the projections failed: %s", e)
            reply = _Answer(error=str(e) or type(e).__name__)
        await msg.respond(msgspec.json.encode(reply))

    subscription = await log.connection.subscribe(
        _subject(log), queue="steward-reads", cb=answer
    )
    return subscription.unsubscribe  # type: ignore[no-any-return]


class RemoteReads:
    """The projections of a shared log, read by asking its `serve`."""

    def __init__(self, log: Any, timeout: float = 10.0) -> None:
        self._log = log
        self._timeout = timeout

    async def search_memory(
        self, session_id: str, query: str, limit: int
    ) -> list[tuple[str, str, float]]:
        request = msgspec.json.encode(_Search(session_id, query, limit))
        try:
            msg = await self._log.connection.request(
                _subject(self._log), request, timeout=self._timeout
            )
        except nats.errors.NoRespondersError:
            raise StewardError(
                "memory search reads the projections, which `steward serve` "
                "keeps; none is running on this log"
            ) from None
        except nats.errors.TimeoutError:
            raise StewardError(
                f"memory search: `steward serve` did not answer in {self._timeout:g}s"
            ) from None
        answer = msgspec.json.decode(msg.data, type=_Answer)
        if answer.error is not None:
            raise StewardError(
                f"memory search failed on `steward serve`: {answer.error}"
            )
        return [(str(s), str(t), float(r)) for s, t, r in answer.hits]

    async def elsewhere(
        self, sender: str, session_id: str, limit: int
    ) -> tuple[Elsewhere, ...]:
        """``sender``'s newest messages in chats other than ``session_id``;
        none when no `serve` answers (the message is taken without them)."""
        request = msgspec.json.encode(_Elsewhere(sender, session_id, limit))
        try:
            msg = await self._log.connection.request(
                _subject(self._log), request, timeout=self._timeout
            )
            answer = msgspec.json.decode(msg.data, type=_Answer)
        except (nats.errors.Error, msgspec.DecodeError) as e:
            logger.warning(
                "a message to %s is taken without its sender's other chats: "
                "`steward serve`, which keeps them, did not answer (%s)",
                session_id,
                e or type(e).__name__,
            )
            return ()
        if answer.error is not None:
            logger.warning("reading %s's other chats failed: %s", sender, answer.error)
        return answer.elsewhere
