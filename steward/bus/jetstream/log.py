"""The distributed event log: one NATS JetStream stream, one message per commit.

Subjects
    One JetStream stream (``STEWARD`` by default, file storage, ``replicas``
    copies) captures ``<prefix>.>`` (``steward.ev.>`` by default). Every actor
    stream has its own subject, ``<prefix>.<stream name>``: the dots of the
    name separate subject tokens, so ``run.r1`` is ``steward.ev.run.r1`` and
    ``steward.ev.run.>`` is every run; the mapping (`subjects`) is
    reversible, so the subject is the only place a stream's name is stored.

Commits
    A commit is one message, so it is atomic: JetStream stores a message
    whole or not at all. Its payload is msgpack ``[first_version, count, at,
    correlation_id, causation_id, commit_id, [event, ...]]``. The publish
    carries ``Nats-Expected-Last-Subject-Sequence``: the sequence of the
    stream's last commit (0 for a new stream), which the server checks before
    storing, so of two writers that read the same version exactly one wins and
    the other gets `ConcurrencyError`. Which sequence a version is at is
    cached per handle and looked up (one direct get) on a miss.

    ``Nats-Msg-Id`` is ``<subject tail>/<first version>`` so a commit
    published twice within the stream's two-minute duplicate window (a retry
    after a lost acknowledgement, a copy published by hand) is stored once.
    A retry is safe even without it: the expected-sequence check lets at most
    one copy in (nats-server 2.15 checks it before the message id, so a
    retry of a commit that landed is refused rather than acknowledged as a
    duplicate). Either way, a duplicate acknowledgement or a refusal after
    a retry, the stored message's random ``commit_id`` says whether the
    commit there is this append's own (success) or another writer's
    (`ConcurrencyError`). Appends retry until ``write_timeout``.

Positions
    The JetStream sequence orders commits globally, the same for every reader.
    Event ``i`` (0-based) of the commit stored at sequence ``s`` has position
    ``s * 1_000_000 + i``: strictly increasing, never reused, and a position
    names its message (``position // 1_000_000``) so a read can start there.
    Positions are not contiguous; the first is 1,000,000.

Reading
    ``read`` uses batch direct gets filtered by the stream's subject
    (``next_by_subj``): the server finds that subject's messages through its
    per-subject index and sends only them, never the other streams'; a read
    from past the version this handle last saw starts at that commit's
    sequence.
    ``read_all`` uses batch direct gets by sequence. ``subscribe`` runs an
    ordered pull consumer (ephemeral, in memory, no acks): it catches up and
    then follows, checks the consumer sequence of every delivery, and
    recreates the consumer after the last message it saw when one is missed,
    the consumer vanishes, or its heartbeats stop (a server restart): see
    `follower`.
    Direct gets may be answered by any replica (``allow_direct``), so with
    ``replicas`` > 1 a read may briefly lag a commit just acknowledged;
    appends stay correct, the expected-sequence check runs on the leader.

Throughput
    Publishes are pipelined: an append publishes and waits for its own
    acknowledgement, so concurrent appends share the connection's round trips
    instead of taking turns. Appends to the same stream through one handle
    are put in order (the second waits for the first's acknowledgement), so
    an append may name the version a concurrent one will create.
    Acknowledgements, direct gets and consumer deliveries all arrive on one
    wildcard inbox subscription per handle, handed over as they are parsed
    (`client`).

Reconnects use exponential back-off with jitter, and are logged on the
``steward.bus.jetstream`` loggers.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import itertools
import logging
import os
import random
import re
import ssl
import time
import zlib
from collections.abc import AsyncGenerator, Callable, Collection, Sequence
from typing import Any

import msgspec
import nats.aio.client
import nats.aio.msg
import nats.errors

from steward.bus.base import Commit, check_append, envelopes
from steward.bus.jetstream.client import InboxClient
from steward.bus.jetstream.commits import (
    Outgoing,
    decode_head,
    decode_stored,
    encode_commit,
)
from steward.bus.jetstream.follower import Follower
from steward.bus.jetstream.inbox import (
    API,
    STREAM_NOT_FOUND,
    WRONG_LAST_SEQUENCE,
    ApiError,
    ApiFailure,
    Batch,
    Closed,
    Msg,
    Unavailable,
    ack_meta,
    decode_json_object,
    decode_pub_ack,
    encode_json,
    nanos,
)
from steward.bus.jetstream.subjects import escape_token, stream_of, subject_of
from steward.bus.pages import Row, decode_page
from steward.errors import ConcurrencyError, LogReadError, LogWriteError
from steward.events import UNION, Event, EventUnion, Recorded

__all__ = ["POSITIONS_PER_COMMIT", "JetStreamEventLog"]

logger = logging.getLogger(__name__)

POSITIONS_PER_COMMIT = 1_000_000
"""Positions a commit may use: event ``i`` of sequence ``s`` is ``s * this + i``."""

DEFAULT_PARTITIONS = 16
"""Partitions of a new log: enough for 16 workers to hold one each."""

_PARTITIONS_KEY = "steward_partitions"  # in the stream's metadata

# Messages per batch direct get and per pull request: big enough to replay
# fast, small enough that decoding one batch does not stall the event loop.
_PAGE = 1_000
_TIPS = 100_000  # streams whose last (version, sequence) a handle remembers
_NAMES = 100_000  # subject tails whose stream names a handle remembers


class JetStreamEventLog:
    """An `EventLog` on one NATS JetStream stream, shared by any number of processes.

    Open it with `JetStreamEventLog.open`; close it with `close`, which first
    waits for the appends already made.
    """

    def __init__(
        self,
        nc: Any,
        *,
        stream: str,
        prefix: str,
        servers: list[str],
        clock: Callable[[], float],
        request_timeout: float,
        write_timeout: float,
        read_timeout: float,
        heartbeat: float,
    ) -> None:
        """Wrap a connected client; use `JetStreamEventLog.open` instead."""
        self.stream = stream
        self.union = UNION
        """The event types the log decodes into."""
        self.prefix = prefix
        self.servers = servers
        self.replicas = 1
        """Copies the server keeps of the stream (known once it is open)."""
        self.partitions = 0
        """How many partitions the stream's subjects are split into (known
        once it is open; 0: a log made before partitions, one unsplit whole)."""
        self.created = ""
        """When the server created the stream (known once it is open): a
        stream deleted and made again under its name is another log."""
        self._nc = nc
        self._clock = clock
        self._request_timeout = request_timeout
        self._write_timeout = write_timeout
        self._read_timeout = read_timeout
        self._heartbeat = heartbeat
        self._loop = asyncio.get_running_loop()
        self._subject_prefix = prefix + "."
        self._direct = f"{API}.DIRECT.GET.{stream}"
        self._inbox: str = nc.new_inbox() + "."
        self._tokens = itertools.count(1)
        self._routes: dict[str, asyncio.Future[Msg] | Batch | Follower] = {}
        self._consumers: dict[str, Follower] = {}
        self._followers: set[Follower] = set()
        self._tips: dict[str, tuple[int, int]] = {}  # stream -> (version, seq)
        self._names: dict[str, str] = {}  # subject -> stream name
        self._tails: dict[str, asyncio.Future[None]] = {}  # stream -> last append
        self._commit_size = 4  # events per commit lately, to size read_all's gets
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._connected = asyncio.Event()
        self._connected.set()
        self._expiring: collections.deque[tuple[float, asyncio.Future[Msg]]] = (
            collections.deque()
        )
        self._sweeper: asyncio.TimerHandle | None = None
        self._closing = False
        self._closed = False
        self._mux: Any = None

    # -- opening ---------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        servers: str | Sequence[str] = "nats://127.0.0.1:4222",
        *,
        stream: str = "STEWARD",
        prefix: str = "steward.ev",
        replicas: int = 1,
        partitions: int = DEFAULT_PARTITIONS,
        create: bool = True,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        creds: str | os.PathLike[str] | None = None,
        nkeys_seed: str | os.PathLike[str] | None = None,
        tls: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        name: str = "steward",
        connect_timeout: float = 5.0,
        reconnect_wait: float = 0.1,
        reconnect_max_wait: float = 5.0,
        request_timeout: float = 2.0,
        write_timeout: float = 30.0,
        read_timeout: float = 30.0,
        heartbeat: float = 2.0,
        clock: Callable[[], float] = time.time,
        union: EventUnion = UNION,
    ) -> JetStreamEventLog:
        """Connect to NATS and open (creating it unless ``create`` is false) the stream.

        Args:
            servers: one URL (``nats://host:4222``, ``tls://...``; user and
                password or a token may be in it) or several, of one cluster.
            stream: the JetStream stream's name.
            prefix: the subject prefix; actor streams live under ``<prefix>.>``.
            replicas: copies of the stream in a cluster (1 on a single server).
            partitions: how many partitions a new stream's subjects are split
                into (``<prefix>.<partition>.<stream name>``): the unit of work
                a worker holds. An existing stream keeps its own.
            create: create the stream when it does not exist.
            user, password, token, creds, nkeys_seed: credentials; ``creds`` is
                a ``.creds`` file (JWT and nkey), ``nkeys_seed`` a seed file.
            tls, tls_hostname: a TLS context, and the name its certificate is
                checked against.
            name: the connection's name, shown by the server's monitoring.
            connect_timeout: seconds to wait for each connection attempt.
            reconnect_wait, reconnect_max_wait: after a lost connection, the
                first wait before reconnecting, doubled per failed attempt up
                to the maximum (with 20% jitter); reconnects never give up.
            request_timeout: seconds to wait for one acknowledgement or read
                before asking again (a retry is safe: see the module docs).
            write_timeout: seconds an append keeps trying before it fails.
            read_timeout: seconds a read keeps trying before it fails.
            heartbeat: seconds between a subscription's heartbeats; after two
                missed ones its consumer is recreated.
            clock: gives ``at`` for appends that do not pass one.
            union: the event types the log holds (a kind table's
                `steward.actors.kind.Kinds.union`; default: the shared
                vocabulary alone).

        Raises:
            LogWriteError: NATS cannot be reached, JetStream is not enabled, or
                the stream cannot be created or does not fit steward.
            ValueError: an argument is malformed.
        """
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", stream):
            raise ValueError(
                f"stream must be a JetStream stream name (letters, digits, - "
                f"and _), not {stream!r}"
            )
        if not re.fullmatch(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*", prefix):
            raise ValueError(
                f"prefix must be dot-separated subject tokens without wildcards, "
                f"such as steward.ev, not {prefix!r}"
            )
        if replicas < 1:
            raise ValueError(f"replicas must be 1 or more, not {replicas}")
        if not 1 <= partitions <= 1024:
            raise ValueError(f"partitions must be 1 to 1024, not {partitions}")
        for label, value in (
            ("request_timeout", request_timeout),
            ("write_timeout", write_timeout),
            ("read_timeout", read_timeout),
            ("heartbeat", heartbeat),
            ("reconnect_wait", reconnect_wait),
        ):
            if value <= 0:
                raise ValueError(f"{label} must be positive, not {value}")
        urls = [servers] if isinstance(servers, str) else list(servers)
        if not urls:
            raise ValueError("servers needs at least one NATS URL")
        where = ", ".join(urls)
        holder: list[JetStreamEventLog] = []

        def choose(pool: list[Any], info: dict[str, Any]) -> tuple[Any, float]:
            # The server tried least recently fails least: rotate through the
            # cluster, backing off exponentially on each one.
            server = min(pool, key=lambda s: s.reconnects)
            wait = min(reconnect_max_wait, reconnect_wait * 2**server.reconnects)
            return server, wait * random.uniform(0.8, 1.2)

        async def on_disconnected() -> None:
            if holder:
                holder[0]._connected.clear()
                if not holder[0]._closing:
                    logger.warning("lost the NATS connection (%s); reconnecting", where)

        async def on_reconnected() -> None:
            if holder:
                holder[0]._connected.set()
            url = nc.connected_url
            logger.warning(
                "reconnected to NATS at %s", url.netloc if url is not None else where
            )

        failures: list[Exception] = []

        async def on_error(e: Exception) -> None:
            if not holder:  # still opening: the error that ends it says why
                failures.append(e)
                logger.debug("NATS connection (%s): %s", where, e or type(e).__name__)
                return
            logger.warning("NATS connection (%s): %s", where, e or type(e).__name__)

        async def on_closed() -> None:
            logger.debug("NATS connection (%s) closed", where)

        options: dict[str, Any] = {
            "name": name,
            "connect_timeout": connect_timeout,
            # Opening tries each server twice and fails; once connected, the
            # connection is kept up forever (set below).
            "max_reconnect_attempts": 1,
            "reconnect_time_wait": reconnect_wait,
            "reconnect_to_server_handler": choose,
            "disconnected_cb": on_disconnected,
            "reconnected_cb": on_reconnected,
            "error_cb": on_error,
            "closed_cb": on_closed,
            "pending_size": 64 * 1024 * 1024,
        }
        given: dict[str, Any] = {
            "user": user,
            "password": password,
            "token": token,
            "tls": tls,
            "tls_hostname": tls_hostname,
        }
        options.update((k, v) for k, v in given.items() if v is not None)
        if creds is not None:
            options["user_credentials"] = os.fspath(creds)
        if nkeys_seed is not None:
            options["nkeys_seed"] = os.fspath(nkeys_seed)
        nc = InboxClient() if InboxClient.fits else nats.aio.client.Client()
        try:
            await nc.connect(urls, allow_reconnect=True, **options)
        except Exception as e:
            # nats-py ends with "no servers available"; the last attempt's
            # error (connection refused, a bad certificate) says why
            why = failures[-1] if failures else e
            raise LogWriteError(
                f"cannot connect to NATS at {where}: {why or type(why).__name__}; "
                "check the URL, that nats-server is running (with -js), and the "
                "credentials"
            ) from e
        nc.options["max_reconnect_attempts"] = -1
        log = cls(
            nc,
            stream=stream,
            prefix=prefix,
            servers=urls,
            clock=clock,
            request_timeout=request_timeout,
            write_timeout=write_timeout,
            read_timeout=read_timeout,
            heartbeat=heartbeat,
        )
        log.union = union
        holder.append(log)
        try:
            # What arrives is bounded by what this handle asked for: no limit
            # of nats-py's may drop any of it as a slow consumer.
            log._mux = await nc.subscribe(
                log._inbox + "*",
                cb=log._receive,
                pending_msgs_limit=0,
                pending_bytes_limit=0,
            )
            if isinstance(nc, InboxClient):
                nc.take_over(log._mux, log._dispatch)
            await log._ensure_stream(
                replicas=replicas, partitions=partitions, create=create
            )
        except BaseException:
            await nc.close()
            raise
        return log

    async def _ensure_stream(
        self, *, replicas: int, partitions: int, create: bool
    ) -> None:
        subjects = f"{self.prefix}.>"
        try:
            info = await self._api(f"STREAM.INFO.{self.stream}", None)
        except ApiFailure as e:
            if e.error.err_code != STREAM_NOT_FOUND:
                raise self._open_error(e) from e
            if not create:
                raise LogWriteError(
                    f"there is no JetStream stream {self.stream} at "
                    f"{self._where}; create it (or open with create=True)"
                ) from e
            config = {
                "name": self.stream,
                "subjects": [subjects],
                "storage": "file",
                "retention": "limits",
                "discard": "old",
                "num_replicas": replicas,
                "duplicate_window": nanos(120),
                "allow_direct": True,
                # The log is append-only: no message is ever deleted or purged.
                "deny_delete": True,
                "deny_purge": True,
                "metadata": {_PARTITIONS_KEY: str(partitions)},
            }
            try:
                info = await self._api(f"STREAM.CREATE.{self.stream}", config)
            except ApiFailure as e:
                raise self._open_error(e) from e
            except Unavailable as e:
                raise self._unavailable_error(e) from e
        except Unavailable as e:
            raise self._unavailable_error(e) from e
        config = info.get("config", {})
        self.replicas = int(config.get("num_replicas") or 1)
        self.created = str(info.get("created") or "")
        self.partitions = int((config.get("metadata") or {}).get(_PARTITIONS_KEY, 0))
        if subjects not in config.get("subjects", []):
            raise LogWriteError(
                f"the JetStream stream {self.stream} at {self._where} captures "
                f"{config.get('subjects')}, not {subjects}; open it with the "
                "prefix it was created with, or name another stream"
            )
        if not config.get("allow_direct"):
            raise LogWriteError(
                f"the JetStream stream {self.stream} at {self._where} does not "
                "allow direct gets, which steward reads with; update it with "
                "allow_direct: true"
            )

    def _open_error(self, e: ApiFailure) -> LogWriteError:
        return LogWriteError(
            f"cannot open the JetStream stream {self.stream} at {self._where}: "
            f"{e.error.description} (error {e.error.err_code}); check the "
            "stream name, prefix and replicas against the server's streams"
        )

    def _unavailable_error(self, e: Exception) -> LogWriteError:
        return LogWriteError(
            f"JetStream at {self._where} does not answer ({e}); start nats-server "
            "with -js (JetStream enabled) and check the account's JetStream limits"
        )

    @property
    def _where(self) -> str:
        return ", ".join(self.servers)

    # -- what a follower uses (`follower.Link`) ---------------------------------

    @property
    def where(self) -> str:
        return self._where

    @property
    def heartbeat(self) -> float:
        return self._heartbeat

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def inbox(self) -> str:
        return self._inbox

    def new_token(self) -> str:
        return self._token()

    async def api(self, subject: str, body: Any) -> dict[str, Any]:
        return await self._api(subject, body)

    def route(self, follower: Follower, consumer: str, token: str) -> None:
        self._consumers[consumer] = follower
        self._routes[token] = follower

    def unroute(self, consumer: str | None, token: str | None) -> None:
        if token is not None:
            self._routes.pop(token, None)
        if consumer is not None:
            self._consumers.pop(consumer, None)

    # -- the inbox -------------------------------------------------------------

    async def _receive(self, msg: nats.aio.msg.Msg) -> None:
        """The inbox subscription's callback, when `InboxClient` cannot be used."""
        self._dispatch(Msg.of(msg))

    def _dispatch(self, msg: Msg) -> None:
        """Route one message of the handle's inbox to whoever waits for it."""
        subject: str = msg.subject
        route: asyncio.Future[Msg] | Batch | Follower | None
        if subject.startswith(self._inbox):
            route = self._routes.get(subject[len(self._inbox) :])
        else:
            # A pull consumer delivers under the message's own subject; its
            # reply subject names the consumer.
            try:
                consumer = ack_meta(msg.reply)[0]
            except (ValueError, AttributeError):
                return
            route = self._consumers.get(consumer)
        if route is None:
            return
        if isinstance(route, asyncio.Future):
            if not route.done():
                route.set_result(msg)
        else:
            route.deliver(msg)

    def _token(self) -> str:
        return format(next(self._tokens), "x")

    def _expire(self, answer: asyncio.Future[Msg]) -> None:
        """Fail ``answer`` with TimeoutError unless it comes in request_timeout.

        One timer for all the requests in flight, instead of one each: the
        deadlines come in the order the requests were made.
        """
        self._expiring.append((self._loop.time() + self._request_timeout, answer))
        if self._sweeper is None:
            self._sweeper = self._loop.call_later(self._request_timeout, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = self._loop.time()
        expiring = self._expiring
        while expiring and (expiring[0][1].done() or expiring[0][0] <= now):
            _, answer = expiring.popleft()
            if not answer.done():
                answer.set_exception(TimeoutError())
        if expiring:
            self._sweeper = self._loop.call_at(expiring[0][0], self._sweep)

    async def _request(self, subject: str, payload: bytes, **kw: Any) -> Msg:
        """One message in answer to a publish on the inbox, or `Unavailable`."""
        token = self._token()
        answer: asyncio.Future[Msg] = self._loop.create_future()
        self._routes[token] = answer
        try:
            await self._nc.publish(subject, payload, reply=self._inbox + token, **kw)
            self._expire(answer)
            msg = await answer
        except (TimeoutError, nats.errors.OutboundBufferLimitError) as e:
            raise Unavailable(
                f"no answer within {self._request_timeout:g}s"
                if isinstance(e, TimeoutError)
                else "the outbound buffer is full while reconnecting"
            ) from e
        except nats.errors.ConnectionClosedError as e:
            raise Closed() from e
        finally:
            del self._routes[token]
        if msg.status == "503":
            raise Unavailable("no JetStream stream responded")
        return msg

    async def _api(self, subject: str, body: Any) -> dict[str, Any]:
        """A JetStream API request; raises `ApiFailure` or `Unavailable`."""
        payload = b"" if body is None else encode_json(body)
        msg = await self._request(f"{API}.{subject}", payload)
        response = decode_json_object(msg.data)
        error = response.get("error")
        if error is not None:
            raise ApiFailure(msgspec.convert(error, ApiError))
        return response

    async def _wait_connected(self, deadline: float) -> None:
        if self._connected.is_set():
            return
        remaining = deadline - self._loop.time()
        if remaining > 0:
            try:
                async with asyncio.timeout(remaining):
                    await self._connected.wait()
            except TimeoutError:
                pass

    # -- writing ---------------------------------------------------------------

    async def append(
        self,
        stream: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        at: float | None = None,
    ) -> Commit:
        """Append ``events`` as one message if ``stream`` is at ``expected_version``.

        Raises:
            ConcurrencyError: the stream is not at ``expected_version``.
            LogWriteError: the log is closed, or JetStream refused or did not
                confirm the commit within ``write_timeout``.
            ValueError: ``events`` is empty or the arguments are malformed.
        """
        check_append(stream, events, expected_version)
        if len(events) > POSITIONS_PER_COMMIT:
            raise ValueError(
                f"append to {stream} of {len(events)} events: a commit holds at "
                f"most {POSITIONS_PER_COMMIT:,}; split it"
            )
        if self._closing:
            raise LogWriteError(
                f"the event log {self} is closed; open it again to append"
            )
        at = self._clock() if at is None else at
        commit_id = os.urandom(8).hex()
        count = len(events)
        # Encoding here means an event that cannot be encoded fails its own
        # append before anything is published.
        payload = encode_commit(
            Outgoing(
                first_version=expected_version + 1,
                count=count,
                at=at,
                correlation_id=correlation_id,
                causation_id=causation_id,
                commit_id=commit_id,
                events=list(events),
            )
        )
        self._inflight += 1
        self._drained.clear()
        previous = self._tails.get(stream)
        mine: asyncio.Future[None] = self._loop.create_future()
        self._tails[stream] = mine
        try:
            if previous is not None and not previous.done():
                # wait, unlike await, leaves `previous` alone if we are cancelled.
                await asyncio.wait((previous,))
            seq = await self._commit(
                stream, payload, expected_version, count, commit_id
            )
        finally:
            mine.set_result(None)
            if self._tails.get(stream) is mine:
                del self._tails[stream]
            self._inflight -= 1
            if not self._inflight:
                self._drained.set()
        last_version = expected_version + count
        self._remember(stream, last_version, seq)
        base = seq * POSITIONS_PER_COMMIT
        records = tuple(
            envelopes(
                stream,
                expected_version + 1,
                base,
                at,
                events,
                correlation_id,
                causation_id,
            )
        )
        return Commit(
            stream=stream,
            first_version=expected_version + 1,
            last_version=last_version,
            first_position=base,
            last_position=base + count - 1,
            at=at,
            records=records,
        )

    async def _commit(
        self,
        stream: str,
        payload: bytes,
        expected: int,
        count: int,
        commit_id: str,
    ) -> int:
        """Publish one commit until it is confirmed; its sequence."""
        tail = subject_of(stream)
        subject = self.subject(stream)
        deadline = self._loop.time() + self._write_timeout
        try:
            after = await self._expected_sequence(stream, expected)
        except LogReadError as e:
            raise LogWriteError(
                f"could not append to {stream}: {e}; nothing was stored"
            ) from e
        headers = {
            "Nats-Msg-Id": f"{tail}/{expected + 1}",
            "Nats-Expected-Last-Subject-Sequence": str(after),
        }
        attempts = 0
        problem = ""
        while True:
            if attempts and self._loop.time() >= deadline:
                raise LogWriteError(
                    f"JetStream at {self._where} did not confirm the commit to "
                    f"{stream} (version {expected + 1}) within "
                    f"{self._write_timeout:g}s ({problem}); it may or may not be "
                    "stored: read the stream before retrying"
                )
            if attempts:
                await self._wait_connected(deadline)
            attempts += 1
            try:
                msg = await self._request(subject, payload, headers=headers)
            except Unavailable as e:
                problem = str(e)
                if self._closed:
                    raise LogWriteError(
                        f"the event log {self} closed before JetStream confirmed "
                        f"the commit to {stream}; read the stream to see whether "
                        "it was stored"
                    ) from e
                # Publishing again is safe: the expected sequence lets at most
                # one copy in, and the check below recognises our own.
                logger.debug(
                    "commit to %s (version %d) unconfirmed: %s; publishing again",
                    stream,
                    expected + 1,
                    problem,
                )
                await asyncio.sleep(min(0.05 * attempts, 1.0))
                continue
            except Closed as e:
                raise LogWriteError(
                    f"the event log {self} is closed; open it again to append"
                ) from e
            except nats.errors.Error as e:
                raise LogWriteError(
                    f"could not publish the commit to {stream}: {e}; nothing was "
                    "stored (a commit must fit the server's max_payload)"
                ) from e
            ack = decode_pub_ack(msg.data)
            if ack.error is None:
                if ack.duplicate and not await self._holds(
                    ack.seq, commit_id, deadline
                ):
                    raise await self._conflict(stream, expected)
                return ack.seq
            if ack.error.err_code == WRONG_LAST_SEQUENCE:
                if attempts > 1:
                    # An earlier copy may have landed with its answer lost.
                    landed = await self._find(subject, after, commit_id, deadline)
                    if landed:
                        logger.debug(
                            "commit to %s (version %d) had landed at sequence %d",
                            stream,
                            expected + 1,
                            landed,
                        )
                        return landed
                raise await self._conflict(stream, expected)
            raise LogWriteError(
                f"JetStream refused the commit to {stream} in stream {self.stream}: "
                f"{ack.error.description} (error {ack.error.err_code}); nothing "
                "was stored"
            )

    async def _expected_sequence(self, stream: str, expected: int) -> int:
        """The sequence of ``stream``'s message at ``expected`` (0 for none)."""
        tip = self._tips.get(stream)
        if tip is None and expected == 0:
            return 0  # the server refuses it if the stream exists after all
        if tip is not None and tip[0] == expected:
            return tip[1]
        version, seq = await self._fetch_tip(stream)
        if version != expected:
            raise ConcurrencyError(stream, expected, version)
        return seq

    async def _conflict(self, stream: str, expected: int) -> ConcurrencyError:
        try:
            version, _ = await self._fetch_tip(stream)
        except LogReadError as e:
            raise LogWriteError(
                f"JetStream refused the commit to {stream} at version "
                f"{expected + 1} (another writer got there first), and reading "
                f"its version failed: {e}"
            ) from e
        return ConcurrencyError(stream, expected, version)

    async def _holds(self, seq: int, commit_id: str, deadline: float) -> bool:
        """Whether the message at ``seq`` is the commit ``commit_id``."""
        msg = await self._get_one(self._direct, encode_json({"seq": seq}), deadline)
        return msg is not None and decode_head(msg.data).commit_id == commit_id

    async def _find(
        self, subject: str, after: int, commit_id: str, deadline: float
    ) -> int:
        """The sequence of commit ``commit_id`` if it is next after ``after``, or 0."""
        request = {"seq": after + 1, "next_by_subj": subject}
        msg = await self._get_one(self._direct, encode_json(request), deadline)
        if msg is None or decode_head(msg.data).commit_id != commit_id:
            return 0
        return msg.number(b"Nats-Sequence")

    def _remember(self, stream: str, version: int, seq: int) -> None:
        tips = self._tips
        known = tips.get(stream)
        if known is not None and known[1] >= seq:
            return  # answers may arrive out of order; keep the newest
        if known is None and len(tips) >= _TIPS:
            del tips[next(iter(tips))]
        tips[stream] = (version, seq)

    # -- reading ---------------------------------------------------------------

    async def _get_one(
        self, subject: str, payload: bytes, deadline: float
    ) -> Msg | None:
        """One direct get: the message, or None when there is none."""
        attempts = 0
        while True:
            attempts += 1
            try:
                msg = await self._request(subject, payload)
            except Unavailable as e:
                if self._loop.time() >= deadline or self._closed:
                    raise self._read_error(str(e)) from e
                await self._wait_connected(deadline)
                await asyncio.sleep(min(0.05 * attempts, 1.0))
                continue
            except Closed as e:
                raise self._read_error("the log is closed") from e
            if msg.status is None:
                return msg
            if msg.status == "404":
                return None
            raise self._read_error(msg.describe())

    async def _get_batch(self, request: dict[str, Any]) -> tuple[list[Msg], int]:
        """One batch direct get: its messages, and how many more match after them."""
        payload = encode_json(request)
        deadline = self._loop.time() + self._read_timeout
        attempts = 0
        while True:
            attempts += 1
            token = self._token()
            batch = Batch(self._loop)
            self._routes[token] = batch
            try:
                await self._nc.publish(self._direct, payload, reply=self._inbox + token)
                self._expire(batch.end)
                end = await batch.end
            except (TimeoutError, nats.errors.OutboundBufferLimitError) as e:
                if self._loop.time() >= deadline or self._closed:
                    raise self._read_error(
                        f"no answer within {self._read_timeout:g}s"
                    ) from e
                await self._wait_connected(deadline)
                await asyncio.sleep(min(0.05 * attempts, 1.0))
                continue
            except nats.errors.ConnectionClosedError as e:
                raise self._read_error("the log is closed") from e
            finally:
                del self._routes[token]
            status = end.status
            if status == "204":
                return batch.messages, end.number(b"Nats-Num-Pending")
            if status == "404":
                return batch.messages, 0
            if status == "503" and self._loop.time() < deadline:
                await asyncio.sleep(min(0.05 * attempts, 1.0))
                continue
            raise self._read_error(end.describe())

    def _read_error(self, problem: str) -> LogReadError:
        if self._closing:
            return LogReadError(
                f"the event log {self} is closed; open it again to read"
            )
        return LogReadError(
            f"cannot read the JetStream stream {self.stream} at {self._where}: "
            f"{problem}; check that nats-server is up and reachable"
        )

    async def _fetch_tip(self, stream: str) -> tuple[int, int]:
        """``stream``'s version and its last message's sequence, from the server."""
        subject = self.subject(stream)
        deadline = self._loop.time() + self._read_timeout
        msg = await self._get_one(f"{self._direct}.{subject}", b"", deadline)
        if msg is None:
            return 0, 0
        head = decode_head(msg.data)
        seq = msg.number(b"Nats-Sequence")
        version = head.first_version + head.count - 1
        self._remember(stream, version, seq)
        return version, seq

    def partition_of(self, stream: str) -> int:
        """The partition ``stream``'s commits are stored in (0 in a log
        without partitions): the same in every process, from the name alone."""
        if not self.partitions:
            return 0
        return zlib.crc32(stream.encode()) % self.partitions

    def subject(self, stream: str) -> str:
        """The subject of ``stream``'s commits."""
        if not self.partitions:
            return self._subject_prefix + subject_of(stream)
        return f"{self._subject_prefix}{self.partition_of(stream)}.{subject_of(stream)}"

    def _partition_subjects(self, partitions: Collection[int] | None) -> list[str]:
        """The subjects holding ``partitions`` (every subject for ``None``)."""
        if partitions is None or (not self.partitions and 0 in partitions):
            return [f"{self.prefix}.>"]
        if not self.partitions:
            return []
        return [f"{self._subject_prefix}{p}.>" for p in sorted(partitions)]

    def _stream_name(self, subject: str) -> str:
        name = self._names.get(subject)
        if name is None:
            tail = subject[len(self._subject_prefix) :]
            if self.partitions:
                tail = tail.partition(".")[2]
            name = stream_of(tail)
            if len(self._names) >= _NAMES:
                self._names.clear()
            self._names[subject] = name
        return name

    def _row(self, subject: str, seq: int, data: bytes) -> Row:
        """The commit stored at ``seq`` as a row for `decode_page`."""
        stream = self._stream_name(subject)
        position = seq * POSITIONS_PER_COMMIT
        try:
            c = decode_stored(data)
        except msgspec.DecodeError as e:
            raise LogReadError(
                f"cannot decode the commit to {stream} at position {position}: {e}; "
                "the stored bytes are not a steward commit (is another "
                "application publishing under steward's subject prefix?)"
            ) from e
        return (
            position,
            stream,
            c.first_version,
            c.count,
            c.at,
            c.correlation_id,
            c.causation_id,
            c.events,
        )

    def _decode_page(
        self, messages: list[Msg], after: int = 0, limit: int | None = None
    ) -> list[Recorded]:
        """The events of ``messages`` with ``position > after``, at most ``limit``."""
        rows: list[Row] = []
        fresh = 0  # events of the rows with position > after
        for m in messages:
            seq = m.number(b"Nats-Sequence")
            if (seq + 1) * POSITIONS_PER_COMMIT <= after:
                continue
            row = self._row(m.header(b"Nats-Subject") or "", seq, m.data)
            rows.append(row)
            position, _, _, count, *_ = row
            fresh += max(0, position + count - max(position, after + 1))
            if limit is not None and fresh >= limit:
                break
        records = decode_page(rows, listed=True, union=self.union)
        if records and records[0].position <= after:
            records = [r for r in records if r.position > after]
        return records if limit is None else records[:limit]

    async def read(self, stream: str, from_version: int = 1) -> list[Recorded]:
        """``stream``'s events from ``from_version`` on, reading only its messages."""
        if self._closing:
            raise self._read_error("closed")
        subject = self.subject(stream)
        seq = 1
        tip = self._tips.get(stream)
        if tip is not None and from_version > tip[0]:
            seq = tip[1] + 1  # every message after the tip holds later versions
        out: list[Recorded] = []
        last: Recorded | None = None
        while True:
            messages, more = await self._get_batch(
                {"seq": seq, "next_by_subj": subject, "batch": _PAGE}
            )
            page = self._decode_page(messages)
            if page:
                last = page[-1]
                if page[0].version < from_version:
                    page = [r for r in page if r.version >= from_version]
                out.extend(page)
            if not messages or not more:
                break
            seq = messages[-1].number(b"Nats-Sequence") + 1
        if last is not None:
            self._remember(stream, last.version, last.position // POSITIONS_PER_COMMIT)
        return out

    async def read_all(
        self,
        from_position: int = 0,
        limit: int = 10_000,
        *,
        partition: int | None = None,
    ) -> list[Recorded]:
        """At most ``limit`` events with ``position > from_position``, in
        order; of one ``partition`` only, if given (read through the server's
        subject index, never the others')."""
        if limit < 1:
            raise ValueError(f"read_all needs a limit of 1 or more, not {limit}")
        if self._closing:
            raise self._read_error("closed")
        seq = max(1, from_position // POSITIONS_PER_COMMIT)
        out: list[Recorded] = []
        narrow: dict[str, str] = {}
        if partition is not None and self.partitions:
            narrow["next_by_subj"] = f"{self._subject_prefix}{partition}.>"
        while len(out) < limit:
            # Ask for as many messages as the events still wanted fill, at
            # the size commits had lately, so a small limit over big commits
            # does not fetch (and drop) many more events than it returns.
            wanted = limit - len(out)
            batch = min(_PAGE, max(1, -(-wanted // self._commit_size)))
            messages, more = await self._get_batch(
                {"seq": seq, "batch": batch, **narrow}
            )
            page = self._decode_page(messages, from_position, wanted)
            if messages:
                sample = messages[:8]
                count = sum(decode_head(m.data).count for m in sample)
                self._commit_size = max(1, count // len(sample))
            out.extend(page)
            if not messages or not more:
                break
            seq = messages[-1].number(b"Nats-Sequence") + 1
        return out

    async def version(self, stream: str) -> int:
        """The stream's current version; 0 when it has no events."""
        if self._closing:
            raise self._read_error("closed")
        version, _ = await self._fetch_tip(stream)
        return version

    async def head(self, partitions: Collection[int] | None = None) -> int:
        """The highest position in the log (of ``partitions`` only, if
        given); 0 when it is empty."""
        if self._closing:
            raise self._read_error("closed")
        deadline = self._loop.time() + self._read_timeout
        highest = 0
        for subject in self._partition_subjects(partitions):
            request = encode_json({"last_by_subj": subject})
            msg = await self._get_one(self._direct, request, deadline)
            if msg is not None:
                seq = msg.number(b"Nats-Sequence")
                position = seq * POSITIONS_PER_COMMIT + decode_head(msg.data).count - 1
                highest = max(highest, position)
        return highest

    async def leader_head(self, partition: int) -> int:
        """The highest position of ``partition`` as the stream's leader has
        it (`head`'s direct gets may be answered by a replica a moment
        behind); 0 when it holds nothing."""
        [subject] = self._partition_subjects({partition})
        try:
            answer = await self._api(
                f"STREAM.MSG.GET.{self.stream}", {"last_by_subj": subject}
            )
        except ApiFailure as e:
            if e.error.err_code == 10037:  # no message found
                return 0
            raise
        message = answer["message"]
        data = base64.b64decode(message["data"])
        return int(message["seq"]) * POSITIONS_PER_COMMIT + decode_head(data).count - 1

    async def streams(self, prefix: str = "") -> list[str]:
        """The names of the streams starting with ``prefix``, sorted."""
        if self._closing:
            raise self._read_error("closed")
        # The prefix's whole tokens narrow the server's subject listing; the
        # last, partial one is matched here.
        whole = [escape_token(t) for t in prefix.split(".")[:-1]]
        if self.partitions:
            whole.insert(0, "*")
        narrowed = ".".join([self.prefix, *whole, ">"])
        names: list[str] = []
        offset = 0
        deadline = self._loop.time() + self._read_timeout
        while True:
            body = {"subjects_filter": narrowed, "offset": offset}
            try:
                info = await self._api(f"STREAM.INFO.{self.stream}", body)
            except ApiFailure as e:
                raise self._read_error(e.error.description) from e
            except Unavailable as e:
                if self._loop.time() >= deadline:
                    raise self._read_error(str(e)) from e
                await self._wait_connected(deadline)
                continue
            except Closed as e:
                raise self._read_error("closed") from e
            subjects = info.get("state", {}).get("subjects") or {}
            names.extend(self._stream_name(s) for s in subjects)
            offset += len(subjects)
            if not subjects or offset >= info.get("total", 0):
                break
        return sorted(n for n in names if n.startswith(prefix))

    async def subscribe(
        self, from_position: int = 0, partitions: Collection[int] | None = None
    ) -> AsyncGenerator[Recorded, None]:
        """Every event with ``position > from_position``: stored ones, then
        live; of ``partitions`` only, if given (the server filters them).

        An ordered pull consumer delivers the commits; it is recreated after
        the last commit seen whenever a delivery is missed or the server
        stops answering, so a subscription survives reconnects and server
        restarts. The iteration ends when the log is closed.
        """
        subjects = self._partition_subjects(partitions)
        if self._closing or not subjects:
            return
        follower = Follower(
            self,
            max(1, from_position // POSITIONS_PER_COMMIT),
            subjects,
        )
        self._followers.add(follower)
        try:
            while True:
                msg = await follower.next()
                if msg is None:
                    return
                row = self._row(msg.subject, follower.seq, msg.data)
                for record in decode_page([row], listed=True, union=self.union):
                    if record.position > from_position:
                        yield record
        finally:
            self._followers.discard(follower)
            await follower.stop()

    # -- who hosts it ------------------------------------------------------------

    @property
    def _hosts_subject(self) -> str:
        # core NATS, outside the stream's subjects (JetStream would answer
        # a request it captures with its own ack)
        return f"_STEWARD.hosts.{escape_token(self.stream)}"

    async def advertise(self, about: str) -> None:
        """Answer `host` with ``about`` (who this process is) until the log
        closes: this process hosts the log's actors (a ``serve``, a
        ``worker``)."""

        async def answer(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(about.encode())

        await self._nc.subscribe(self._hosts_subject, cb=answer)

    async def host(self, timeout: float = 3.0) -> str | None:
        """What a process that hosts the log (`advertise`) says of itself;
        ``None`` when none does: the server answers "no responders" at once,
        or nothing answers within ``timeout`` seconds."""
        try:
            msg = await self._nc.request(self._hosts_subject, b"", timeout=timeout)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return None
        return bytes(msg.data).decode(errors="replace")

    # -- lifecycle -------------------------------------------------------------

    @property
    def connection(self) -> Any:
        """The NATS connection (a nats-py client), for services that share it."""
        return self._nc

    async def close(self) -> None:
        """Wait for the appends already made, end subscriptions, and disconnect.

        Closing twice is harmless; subscribers end their iteration.
        """
        if self._closing:
            if not self._closed:
                await self._drained.wait()
            return
        self._closing = True
        for follower in list(self._followers):
            follower.wake()
        try:
            await self._drained.wait()
        finally:
            self._closed = True
            if self._sweeper is not None:
                self._sweeper.cancel()
                self._sweeper = None
            try:
                await self._nc.close()
            except Exception as e:  # closing must not fail the caller
                logger.debug("closing the NATS connection: %s", e)
            # Reads still waiting for an answer get none now: end them.
            while self._expiring:
                _, answer = self._expiring.popleft()
                if not answer.done():
                    answer.set_exception(TimeoutError())

    async def __aenter__(self) -> JetStreamEventLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __str__(self) -> str:
        return f"{self.stream} ({self.prefix}.>) at {self._where}"

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<JetStreamEventLog {self} {state}>"
