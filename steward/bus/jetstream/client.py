"""The one place steward reaches into nats-py's private API: `InboxClient`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import nats.aio.client

from steward.bus.jetstream.inbox import Msg

__all__ = ["InboxClient"]

# How nats-py (2.16) calls its private `_process_msg`: from its protocol
# parser, for every message, with the raw header block.
_PROCESS_MSG = ("self", "sid", "subject", "reply", "data", "headers")


def _fits(client: type[nats.aio.client.Client]) -> bool:
    method = getattr(client, "_process_msg", None)
    return (
        inspect.iscoroutinefunction(method)
        and tuple(inspect.signature(method).parameters) == _PROCESS_MSG
    )


class InboxClient(nats.aio.client.Client):
    """nats-py's client, handing one subscription's messages over as they are parsed.

    Why: through nats-py's public callback, every message gets all its
    headers parsed (each name checked one character at a time), a Msg built,
    and a trip through a queue to the subscription's task. For a replay that
    is most of the client's work: measured, the CPU per event replayed is
    twice what it is here (``benchmarks``' JetStream replay). This client
    overrides nats-py's private ``_process_msg`` for the log's inbox
    subscription only (`take_over`): its messages go straight to the log, in
    the reader task, and the one or two headers the log needs are found when
    it needs them. Every other subscription goes through nats-py as usual.

    ``fits`` says whether the installed nats-py has ``_process_msg`` as this
    class expects. When it does not, the log uses nats-py's own client and
    the inbox subscription's public callback instead: correct, only slower.
    ``tests/contract/test_jetstream_inbox.py`` fails then, saying what to do.
    """

    fits: ClassVar[bool] = _fits(nats.aio.client.Client)

    def __init__(self) -> None:
        super().__init__()
        self.inbox_sid: int | None = None
        self.inbox_deliver: Callable[[Msg], None] | None = None

    def take_over(self, subscription: Any, deliver: Callable[[Msg], None]) -> None:
        """Hand ``subscription``'s messages to ``deliver`` as they arrive."""
        self.inbox_sid = subscription._id
        self.inbox_deliver = deliver

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        deliver = self.inbox_deliver
        if sid != self.inbox_sid or deliver is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        stats = self.stats
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        deliver(
            Msg(subject.decode(), reply.decode() if reply else "", data, headers or b"")
        )
