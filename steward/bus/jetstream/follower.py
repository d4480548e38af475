"""A subscription's ordered pull consumer: catch up, then follow, surviving restarts."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Protocol

import nats.errors

from steward.bus.jetstream.inbox import (
    API,
    STREAM_NOT_FOUND,
    ApiFailure,
    Closed,
    Msg,
    Unavailable,
    ack_meta,
    encode_json,
    nanos,
)
from steward.errors import LogReadError


class Link(Protocol):
    """What a follower uses of the log it follows (`JetStreamEventLog`
    provides it): the stream, the connection and its inbox, the API, and
    the routing of what arrives on the inbox to the follower."""

    stream: str

    @property
    def where(self) -> str:
        """The servers, for messages."""
        ...

    @property
    def heartbeat(self) -> float: ...
    @property
    def closing(self) -> bool: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def inbox(self) -> str:
        """The prefix of the subjects replies reach this connection on."""
        ...

    @property
    def connection(self) -> Any: ...
    def new_token(self) -> str:
        """A fresh inbox suffix."""
        ...

    async def api(self, subject: str, body: Any) -> dict[str, Any]:
        """A JetStream API request's answer (``$JS.API.<subject>``)."""
        ...

    def route(self, follower: Follower, consumer: str, token: str) -> None:
        """Send deliveries of ``consumer`` and replies on ``token`` to ``follower``."""
        ...

    def unroute(self, consumer: str | None, token: str | None) -> None: ...


logger = logging.getLogger(__name__)

PULL_BATCH = 500
PULL_MAX_BYTES = 64 * 1024 * 1024  # the largest max_payload a server allows


class Follower:
    """An ordered pull consumer over the stream (or some of its subjects), for
    one subscription.

    Deliveries and the server's status messages arrive (through the handle's
    inbox) in ``buffer``, in order. ``next`` keeps a pull request out, checks
    that consumer sequences follow one another, and starts a new consumer
    after the last stream sequence seen when they do not, when the consumer
    is gone, or when nothing (not even a heartbeat) arrives for two
    heartbeat intervals.
    """

    def __init__(self, log: Link, seq: int, subjects: list[str]) -> None:
        self.log = log
        self.subjects = subjects  # the subjects it delivers (the server filters)
        self.start = seq  # the stream sequence the next consumer starts at
        self.seq = 0  # the stream sequence of the message `next` returned
        self.buffer: collections.deque[Msg] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.consumer: str | None = None
        self.token: str | None = None
        self.delivered = 0  # consumer sequence of the last delivery
        self.outstanding = 0  # messages asked for and not yet delivered
        self.failures = 0

    def deliver(self, msg: Msg) -> None:
        self.buffer.append(msg)
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next(self) -> Msg | None:
        """The next delivered commit message; None once the log is closing."""
        log = self.log
        while True:
            while self.buffer:
                msg = self.buffer.popleft()
                if msg.status is None:
                    consumer, seq, delivered = ack_meta(msg.reply)
                    if consumer != self.consumer:
                        continue  # left over from a consumer already replaced
                    if delivered != self.delivered + 1:
                        await self.reset(f"missed deliveries before {delivered}")
                        break
                    self.delivered = delivered
                    self.seq = seq
                    self.start = seq + 1
                    self.outstanding -= 1
                    self.failures = 0
                    await self.pull()
                    return msg
                await self.control(msg)
            if log.closing:
                return None
            if self.consumer is None and not await self.create():
                continue
            await self.pull()
            if self.buffer:
                continue
            # A plain timer rather than `asyncio.timeout`, whose set-up on
            # every wait costs more than the rest of the wait.
            self.waiter = waiter = log.loop.create_future()
            silent = log.loop.call_later(2.5 * log.heartbeat, _expire, waiter)
            try:
                await waiter
            except TimeoutError:
                await self.reset("no heartbeat from the server")
            finally:
                silent.cancel()
                self.waiter = None

    async def control(self, msg: Msg) -> None:
        """Act on a status message: a heartbeat, an expired pull, a lost consumer."""
        if msg.subject != self.log.inbox + (self.token or ""):
            return  # about a consumer already replaced
        status = msg.status
        if status == "100":
            last = msg.header(b"Nats-Last-Consumer")
            if last is not None and int(last) != self.delivered:
                await self.reset(f"the server delivered up to {last}")
            return
        owed = msg.header(b"Nats-Pending-Messages")
        if status in ("408", "409") and owed is not None:
            # A pull request ended (expired, or a limit): what it still owed
            # will never come; ask again.
            self.outstanding -= int(owed)
            if status == "408" or "Exceeded" in msg.describe():
                await self.pull()
                return
        await self.reset(msg.describe())

    async def create(self) -> bool:
        """Start a consumer at ``start``; False (after a pause) when it failed."""
        log = self.log
        token = log.new_token()
        config = {
            "deliver_policy": "by_start_sequence",
            "opt_start_seq": self.start,
            "filter_subjects": self.subjects,
            "ack_policy": "none",
            "replay_policy": "instant",
            "mem_storage": True,
            "num_replicas": 1,
            "inactive_threshold": nanos(max(60.0, 10 * log.heartbeat)),
        }
        try:
            info = await log.api(
                f"CONSUMER.CREATE.{log.stream}",
                {"stream_name": log.stream, "config": config},
            )
        except Closed:
            return False
        except (Unavailable, ApiFailure) as e:
            if log.closing:
                return False
            if isinstance(e, ApiFailure) and e.error.err_code == STREAM_NOT_FOUND:
                raise LogReadError(
                    f"cannot subscribe to the JetStream stream {log.stream} at "
                    f"{log.where}: it does not exist (was it deleted?)"
                ) from e
            self.failures += 1
            logger.warning(
                "cannot follow the JetStream stream %s at %s: %s; retrying",
                log.stream,
                log.where,
                e,
            )
            await asyncio.sleep(min(0.05 * 2**self.failures, 2.0))
            return False
        self.consumer = info["name"]
        self.token = token
        self.delivered = 0
        self.outstanding = 0
        log.route(self, self.consumer, token)
        return True

    async def pull(self) -> None:
        """Keep at least half a batch asked for."""
        if self.consumer is None or self.outstanding > PULL_BATCH // 2:
            return
        log = self.log
        expires = max(30.0, 4 * log.heartbeat)
        request = {
            "batch": PULL_BATCH,
            "max_bytes": PULL_MAX_BYTES,
            "expires": nanos(expires),
            "idle_heartbeat": nanos(log.heartbeat),
        }
        self.outstanding += PULL_BATCH
        try:
            await log.connection.publish(
                f"{API}.CONSUMER.MSG.NEXT.{log.stream}.{self.consumer}",
                encode_json(request),
                reply=log.inbox + (self.token or ""),
            )
        except nats.errors.Error:
            pass  # no heartbeat will come: the watchdog starts over

    async def reset(self, why: str) -> None:
        """Drop the consumer; the next one starts after the last message seen."""
        if self.consumer is not None:
            logger.info(
                "restarting the subscription to %s at sequence %d: %s",
                self.log.stream,
                self.start,
                why,
            )
        await self.stop()
        self.buffer.clear()
        self.failures += 1
        if self.failures > 1:  # back off while the server keeps failing us
            await asyncio.sleep(min(0.05 * 2**self.failures, 2.0))

    async def stop(self) -> None:
        log = self.log
        consumer, token = self.consumer, self.token
        self.consumer = self.token = None
        log.unroute(consumer, token)
        if consumer is None:
            return
        try:
            # Nobody waits for the answer; an unreachable server removes the
            # consumer itself once it has been inactive long enough.
            await log.connection.publish(
                f"{API}.CONSUMER.DELETE.{log.stream}.{consumer}",
                b"",
                reply=log.inbox + "gone",
            )
        except nats.errors.Error:
            pass


def _expire(waiter: asyncio.Future[None]) -> None:
    """End a follower's wait for messages that did not come in time."""
    if not waiter.done():
        waiter.set_exception(TimeoutError())
