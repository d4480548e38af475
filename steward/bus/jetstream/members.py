"""Workers sharing a JetStream log: who is live, and which partitions each holds.

A log's streams are split into partitions (`JetStreamEventLog.partition_of`).
Each `serve` and `worker` is a member: it holds some partitions, and only the
holder of a partition decides its streams' effects (model and tool calls,
timers, children, deliveries) and follows its records. Membership and holding
live in a JetStream key-value bucket, ``<stream>_WORKERS``, whose entries
expire after ``lease`` seconds unless written again (the bucket's TTL):

- ``member.<worker>``: a member's heartbeat, written every quarter lease, with
  what it holds and how busy it is (`steward workers` lists them);
- ``lease.<partition>``: the member holding the partition. It is taken with a
  create (which fails while another's lease lives) and renewed with an update
  that names the revision it read (compare-and-set), so no two members hold
  one lease: a renewal that fails means the lease was lost, and the member
  lets the partition go; one whose last renewal is three quarters of a lease
  old lets everything go, before the server could give it to another, even
  while its heartbeat still waits for an answer (a bucket between leaders).

Every member computes the same assignment from the live members it lists
(`assign`: rendezvous hashing, balanced so that each holds its share give or
take one), lets go of what is no longer its own (after which its lease is
deleted) and takes what is free. A member that joins is given its share
within about two heartbeats; one that stops deletes its leases; one that dies
loses them when they expire. The log stays the last word either way: a
commit names the version it follows, and a call is claimed in its stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.api
import nats.js.errors

from steward.bus.jetstream.inbox import ApiFailure, Closed, Unavailable
from steward.errors import LogReadError

logger = logging.getLogger(__name__)

_WRONG_LAST_SEQUENCE = (10071, 10164)  # JetStream's codes for a failed compare

JOIN_SECONDS = 30.0
"""How long joining keeps trying while JetStream does not answer (a bucket
just made, or its leader lost, elects a leader in a few seconds)."""

Hold = Callable[[frozenset[int]], Awaitable[None]]
"""Told the partitions a member holds whenever they change."""

Busy = Callable[[], dict[str, int]]
"""How busy a member is, for its heartbeat (calls in flight, work waiting)."""


@dataclass(frozen=True)
class Member:
    """A live member, as its last heartbeat described it."""

    worker: str
    role: str
    host: str
    pid: int
    started: float
    seen: float
    partitions: tuple[int, ...]
    busy: dict[str, int] = field(default_factory=dict)


def assign(members: list[str], partitions: int) -> dict[int, str]:
    """Which member holds each partition: every member computes the same.

    Rendezvous hashing weighs each member for each partition; taking the
    pairs strongest first, a partition goes to the member that weighs most
    among those with less than their share, so every member holds
    ``partitions // len(members)`` or one more, and a member joining or
    leaving moves few partitions.
    """
    if not members:
        return {}
    base, extra = divmod(partitions, len(members))
    load = dict.fromkeys(members, 0)
    out: dict[int, str] = {}
    # every (partition, member) pair, the strongest first: a partition goes
    # to the member that wants it most among those with room
    pairs = sorted(
        ((_weight(m, p), p, m) for p in range(partitions) for m in members),
        reverse=True,
    )
    for cap in (base, base + 1):
        for _, p, member in pairs:
            if p in out or load[member] >= cap:
                continue
            if cap > base:
                if not extra:
                    break
                extra -= 1
            out[p] = member
            load[member] += 1
    return out


async def until_shared(log: Any, members: int, timeout: float = 60.0) -> None:
    """Wait until ``members`` members of ``log`` each hold a share of its
    partitions, and every partition is held (as `steward workers` would
    list them).

    Raises:
        TimeoutError: they did not within ``timeout`` seconds.
    """
    watcher = Membership(log, "-")
    partitions = max(1, log.partitions)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    held: list[tuple[int, ...]] = []
    problem = ""
    while loop.time() < deadline:
        try:
            listed = await watcher.members()
        except LogReadError as e:  # JetStream between leaders: ask again
            problem = f" (last: {e})"
            listed = []
        held = [m.partitions for m in listed if m.partitions]
        if len(held) == members and sum(map(len, held)) == partitions:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(
        f"{members} members did not come to share {log.stream}: they hold "
        f"{held}{problem}"
    )


def _weight(member: str, partition: int) -> bytes:
    return hashlib.blake2b(f"{member}/{partition}".encode(), digest_size=8).digest()


def worker_key(worker: str) -> str:
    """``worker`` as a key token (the characters a KV key may hold)."""
    return re.sub(r"[^A-Za-z0-9_\-=]", "_", worker)


class Membership:
    """This process's membership of the workers sharing a JetStream log."""

    def __init__(
        self,
        log: Any,
        worker: str,
        *,
        role: str = "worker",
        lease: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if lease <= 0:
            raise ValueError(f"lease must be positive, not {lease}")
        self.log = log
        self.worker = worker
        self.role = role
        self.lease = lease
        self.partitions = max(1, log.partitions)
        self.held: frozenset[int] = frozenset()
        """The partitions this member holds."""
        self._clock = clock
        self._key = worker_key(worker)
        self._revisions: dict[int, int] = {}  # partition -> its lease's revision
        self._hold: Hold | None = None
        self._busy: Busy = dict
        self._kv: Any = None
        self._beating: asyncio.Task[None] | None = None
        self._taking: asyncio.Task[None] | None = None
        self.renewed = clock()
        """When the leases held were last renewed (by ``clock``)."""
        self._started = clock()

    @property
    def bucket(self) -> str:
        return f"{self.log.stream}_WORKERS"

    async def open(self, create: bool = True) -> bool:
        """Open the bucket (creating it, unless not ``create``); whether it
        is there. A bucket made with another lease keeps it: its TTL is
        every member's lease."""
        js = self._js()
        try:
            self._kv = await js.key_value(self.bucket)
            ttl = (await self._kv.status()).ttl
            if ttl and abs(ttl - self.lease) > 1e-3:
                logger.warning(
                    "the workers of %s keep leases of %gs, not %gs: kept",
                    self.log.stream,
                    ttl,
                    self.lease,
                )
                self.lease = ttl
            return True
        except nats.js.errors.BucketNotFoundError:
            if not create:
                return False
            config = nats.js.api.KeyValueConfig(
                bucket=self.bucket,
                history=1,
                ttl=self.lease,
                replicas=self.log.replicas,
                storage=nats.js.api.StorageType.FILE,
            )
            self._kv = await js.create_key_value(config)
            return True

    async def join(self, hold: Hold, busy: Busy = dict) -> None:
        """Join: take a share of the partitions now (``hold`` is told), and
        keep the heartbeat, the share and the leases current until `leave`."""
        self._hold, self._busy = hold, busy
        loop = asyncio.get_running_loop()
        deadline = loop.time() + JOIN_SECONDS
        attempts = 0
        while True:
            attempts += 1
            try:
                await self.open()
                await self.beat()
                break
            except Exception as e:
                # the bucket's stream electing a leader (just made by another
                # member, or its leader lost): no answer for a moment
                if loop.time() >= deadline:
                    raise
                logger.warning(
                    "joining the workers of %s: %s; trying again",
                    self.bucket,
                    e or type(e).__name__,
                )
                self._kv = None
                await asyncio.sleep(min(0.1 * attempts, self.lease / 4))
        if self._taking is not None:  # a first share is held once joined
            await self._taking
        self._beating = asyncio.create_task(self._beat_forever())

    async def leave(self) -> None:
        """Let every partition go (``hold`` told first), delete the leases
        and the heartbeat: the others take over at their next heartbeat."""
        for task in (self._beating, self._taking):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._beating = self._taking = None
        try:
            await self._let_go(self.held)
            if self._kv is not None:
                await self._kv.delete(f"member.{self._key}")
        except Exception as e:  # the leases lapse by themselves
            logger.warning("could not leave the workers of %s: %s", self.bucket, e)

    async def members(self) -> list[Member]:
        """The live members, by worker id.

        Raises:
            LogReadError: JetStream did not answer (a lost connection, a
                bucket between leaders).
        """
        try:
            return await self._members()
        except (nats.errors.Error, ApiFailure, Unavailable, Closed) as e:
            self._kv = None
            raise LogReadError(
                f"cannot list the workers of {self.log.stream} at "
                f"{self.log.where}: {e or type(e).__name__}; check that "
                "nats-server is up and reachable"
            ) from e

    async def _members(self) -> list[Member]:
        if self._kv is None and not await self.open(create=False):
            return []  # no worker has joined yet
        # The bucket's stream lists its subjects (no consumer made, unlike
        # nats-py's `keys`, whose consumers pile up under load).
        prefix = f"$KV.{self.bucket}."
        info = await self.log.api(
            f"STREAM.INFO.KV_{self.bucket}", {"subjects_filter": f"{prefix}member.*"}
        )
        keys = sorted(info.get("state", {}).get("subjects") or {})
        out = []
        for subject in keys:
            key = subject.removeprefix(prefix)
            try:
                entry = await self._kv.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                continue
            try:
                about = json.loads(entry.value or b"{}")
                out.append(
                    Member(
                        worker=str(about["worker"]),
                        role=str(about.get("role", "worker")),
                        host=str(about.get("host", "")),
                        pid=int(about.get("pid", 0)),
                        started=float(about.get("started", 0.0)),
                        seen=float(about.get("seen", 0.0)),
                        partitions=tuple(int(p) for p in about.get("partitions", ())),
                        busy={str(k): int(v) for k, v in about.get("busy", {}).items()},
                    )
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                logger.warning("a member entry %s that is not steward's: skipped", key)
        return sorted(out, key=lambda m: m.worker)

    async def beat(self) -> None:
        """One heartbeat: say this member lives, renew its leases, then
        let go of what is no longer its own and take what is free."""
        if self._kv is None:
            await self.open()
        await self._announce()
        await self._renew()
        live = [m.worker for m in await self.members()]
        if self.worker not in live:
            live.append(self.worker)
        mine = frozenset(
            p
            for p, m in assign(sorted(live), self.partitions).items()
            if m == self.worker
        )
        await self._let_go(self.held - mine)
        taken = {p for p in sorted(mine - self.held) if await self._take(p)}
        if taken:
            # reading what the new partitions wait for may take a while: it
            # runs beside the heartbeats, which keep the leases meanwhile
            self._taking = asyncio.create_task(self._tell(self.held | taken))

    def _js(self) -> Any:
        """A JetStream context whose requests give up after a quarter lease
        (nats-py's default, 5 s, is longer than a short lease): a request
        lost with its server or its stream's leader fails in time for the
        next heartbeat to ask again."""
        timeout = min(5.0, max(0.25, self.lease / 4))
        return self.log.connection.jetstream(timeout=timeout)

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 4)
            beat = asyncio.create_task(self.beat())
            try:
                # A heartbeat stuck past the moment its leases may lapse (the
                # bucket's leader lost, a slow server) does not keep the
                # partitions meanwhile: they are let go while it goes on.
                while not beat.done():
                    left = self.renewed + 0.75 * self.lease - self._clock()
                    if not self.held:  # nothing to let go: look again later
                        left = self.lease / 4
                    await asyncio.wait({beat}, timeout=max(left, 0.01))
                    if not beat.done() and self._lapsed():
                        await self._lapse()
                beat.result()
            except asyncio.CancelledError:
                beat.cancel()
                raise
            except Exception as e:  # a lost connection: the next beat tries again
                logger.warning("worker heartbeat on %s failed: %s", self.bucket, e)
                self._kv = None  # (the bucket may be gone with a server's memory)
            if self._lapsed():
                await self._lapse()

    def _lapsed(self) -> bool:
        """Whether this member holds partitions whose leases it last renewed
        three quarters of a lease ago: they lapse about now."""
        return bool(self.held) and self._clock() - self.renewed > 0.75 * self.lease

    async def _lapse(self) -> None:
        """Let every partition go, before the server gives them to another:
        a later heartbeat takes this member's share again."""
        logger.warning("%s lets its partitions go", self.worker)
        self._revisions.clear()
        await self._tell(frozenset())

    async def _announce(self) -> None:
        about = {
            "worker": self.worker,
            "role": self.role,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": self._started,
            "seen": self._clock(),
            "partitions": sorted(self.held),
            "busy": self._busy(),
        }
        await self._kv.put(f"member.{self._key}", json.dumps(about).encode())

    async def _renew(self) -> None:
        """Renew each lease held; let go at once of one that was lost."""
        started = self._clock()  # the server counts the lease from about now
        lost = set()
        for p in sorted(self.held):
            revision = self._revisions.get(p)
            if revision is None:
                continue  # let go meanwhile (`_lapse`)
            try:
                revision = await self._kv.update(
                    f"lease.{p}", self._key.encode(), last=revision
                )
            except nats.js.errors.KeyWrongLastSequenceError:
                lost.add(p)
                continue
            if p in self.held:
                self._revisions[p] = revision
            else:  # let go while renewing: the renewal must not keep it
                await self._delete_lease(p, revision)
        self.renewed = started
        if lost:
            logger.warning(
                "%s lost the lease of partitions %s", self.worker, sorted(lost)
            )
            for p in lost:
                self._revisions.pop(p, None)
            await self._tell(self.held - lost)

    async def _take(self, partition: int) -> bool:
        """Take the lease of ``partition`` if no one holds it: a create that
        the server refuses while the key has a value (nats-py 2.16's
        `KeyValue.create` sends no expectation for a new key, so it is
        written here), or an update naming the revision of its deletion."""
        key = f"lease.{partition}"
        value = self._key.encode()
        js = self._js()
        try:
            ack = await js.publish(
                f"$KV.{self.bucket}.{key}",
                value,
                headers={"Nats-Expected-Last-Subject-Sequence": "0"},
            )
            self._revisions[partition] = ack.seq
            return True
        except nats.js.errors.BadRequestError as e:
            if e.err_code not in _WRONG_LAST_SEQUENCE:
                raise
        try:
            entry = await self._kv.get(key)
            if entry.value != value:
                return False  # held by another until it lets go or it lapses
            # this member's own, from a heartbeat that did not finish
            self._revisions[partition] = entry.revision
            return True
        except nats.js.errors.KeyNotFoundError as e:  # (KeyDeletedError too)
            entry = getattr(e, "entry", None)
            if entry is None or not entry.revision:
                return False  # lapsed this moment: the next heartbeat takes it
            deleted = entry.revision  # the deletion's, or its lapse's
        try:
            self._revisions[partition] = await self._kv.update(key, value, last=deleted)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False  # another took it first
        return True

    async def _let_go(self, partitions: frozenset[int]) -> None:
        if not partitions:
            return
        await self._tell(self.held - partitions)
        for p in sorted(partitions):
            await self._delete_lease(p, self._revisions.pop(p, None))

    async def _delete_lease(self, partition: int, revision: int | None) -> None:
        """Give up the lease of ``partition`` at ``revision`` (unless it
        lapsed and another took it already)."""
        try:
            await self._kv.delete(f"lease.{partition}", last=revision)
        except nats.js.errors.BadRequestError as e:
            if e.err_code not in _WRONG_LAST_SEQUENCE:
                raise

    async def _tell(self, held: frozenset[int]) -> None:
        """Hold ``held`` from now on; partitions the host could not take
        (their records unread: a lost connection) are let go, and a later
        heartbeat takes them again."""
        before, self.held = self.held, held
        if held != before:
            logger.info(
                "%s holds %d partitions: took %s, let go %s",
                self.worker,
                len(held),
                sorted(held - before) or "none",
                sorted(before - held) or "none",
            )
        if self._hold is None:
            return
        try:
            await self._hold(held)
        except Exception:
            failed = held - before
            logger.exception("%s could not take partitions %s", self.worker, failed)
            self.held -= failed
            for p in sorted(failed):
                revision = self._revisions.pop(p, None)
                try:
                    await self._kv.delete(f"lease.{p}", last=revision)
                except Exception:
                    pass  # it lapses
