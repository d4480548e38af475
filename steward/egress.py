"""Egress over NATS: what the host records, published for services to hear.

`Egress` runs in every host of a JetStream log (`serve` and each `worker`)
and publishes, in log order, what the streams of the partitions its host
holds tell, as each stream's kind says (`Surface.updates`, `Surface.tells`;
it names no kind):

- what an actor tells a channel, on ``steward.outbound.<channel>`` (a
  session's turn reply, a command's answer, a refusal, a subagent's answer;
  a run recorded with a channel that answers no one, its messages and its
  end). These are stored by the JetStream stream ``STEWARD_OUTBOUND``
  (`steward.bus.jetstream.outbound`) with their event's id as
  ``Nats-Msg-Id``, and how far each partition got is saved, so every
  message is published after it is committed whatever process dies: the
  partition's next holder publishes what was not, and one published twice
  is stored once;
- an update per recorded event of a kind that publishes them (the run's,
  on ``steward.runs.<run_id>.updates``), on core NATS: live only;
- model text as it streams, on ``steward.<kind>s.<id>.deltas`` (a run's on
  ``steward.runs.<run_id>.deltas``), core NATS, by the host making the call,
  kept nowhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, NamedTuple, TypeVar

import msgspec
import nats.errors
import nats.js.errors

from steward import events
from steward.actors.kind import Kind
from steward.bus.jetstream.outbound import Told, keep_outbound
from steward.bus.jetstream.subjects import escape_token
from steward.config.settings import OutboundConfig
from steward.effects.llm import RequestInfo
from steward.host import Host
from steward.projections.summary import summary

__all__ = ["Egress", "deltas_subject", "outbound_subject", "updates_subject"]

log = logging.getLogger("steward.egress")

_json = msgspec.json.Encoder()

SAVE_SECONDS = 10.0
"""How often each partition's egress position is saved where only records
that tell nobody moved it (a message told saves it at once)."""

CLOSE_SECONDS = 10.0
"""How long closing waits for what is queued to be stored (the next holder
of a partition publishes what is left)."""


def updates_subject(actor_id: str, kind: str) -> str:
    """Where the updates of an actor of ``kind`` go (`Surface.updates`)."""
    return f"steward.{kind}s.{escape_token(actor_id)}.updates"


def outbound_subject(channel: str) -> str:
    return f"steward.outbound.{channel}"


def deltas_subject(stream: str) -> str:
    """Where the model text of the actor whose stream is ``stream`` streams
    live (not stored): ``steward.<kind>s.<id>.deltas``, as its updates."""
    kind, _, actor_id = stream.partition(".")
    return f"steward.{kind}s.{escape_token(actor_id)}.deltas"


class _Told(NamedTuple):
    """A committed event of a kind that publishes updates or tells of it."""

    rec: events.Recorded
    kind: Kind[Any]
    partition: int


class _Delta(NamedTuple):
    stream: str
    data: bytes


class _CatchUp(NamedTuple):
    """A partition just taken: publish what it told since its saved position."""

    partition: int


class Egress:
    """Publishes what the streams its host holds tell, as each stream's kind
    says (`Surface.updates`, `Surface.tells`); it names no kind.

    Every event of a run stream goes to ``steward.runs.<run_id>.updates`` as
    ``{"run_id", "version", "type", "summary"}``. What a session tells its
    chat goes to ``steward.outbound.<channel>`` as ``{"session_id",
    "channel", "chat_id", "type", "text", ...}`` with type ``reply`` (and
    ``run_id``, ``status``), ``command`` or ``refused`` (and the
    ``message_id`` answered), or ``subagent`` (and ``run_id``, ``name``);
    a fork of a chat (`steward fork`) is no one's, and tells it nothing.
    A top-level run started on a channel that answers no one publishes its
    ``MessageSent`` and its end there as ``{"run_id", "channel", "type",
    "text"}`` with type ``message``, ``completed``, ``failed`` or
    ``cancelled``. A session's turns and subagents, and a run's subagents,
    speak to whom they answer, not to the user: they publish updates only.

    What is told a channel is stored by the JetStream stream
    ``STEWARD_OUTBOUND`` (``[outbound]``), each message with its event's id
    as ``Nats-Msg-Id``: a service reads each once with a durable consumer,
    including what was told while it was away (docs/operations.md).

    Args:
        nc: a connected nats-py client; the caller owns and closes it.
        host: the host whose recorded events are published.
        config: the outbound stream's settings (``[outbound]``).
        told: how far each partition of the host's JetStream log has told
            (`Told`): this egress publishes for the partitions its host
            holds, and catches each up as it takes it. ``None`` (a host on
            another log, one process): every stream's, as recorded from now.
    """

    def __init__(
        self,
        nc: Any,
        host: Host,
        config: OutboundConfig | None = None,
        *,
        told: Told | None = None,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.host = host
        self.config = config or OutboundConfig()
        self.told = told
        self._queue: asyncio.Queue[_Told | _Delta | _CatchUp | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._saving: asyncio.Task[None] | None = None
        self._held: frozenset[int] = frozenset()
        self._done: dict[int, int] = {}  # partition -> last position told
        self._seen: dict[int, int] = {}  # partition -> last position heard of
        self._saved: dict[int, int] = {}  # partition -> last position saved
        self._backlog: Counter[int] = Counter()  # partition -> queued records
        self._catching: set[int] = set()  # partitions being caught up
        if told is None:
            self._partition_of: Any = lambda stream: 0
            self._held, self._done[0] = frozenset({0}), 0
        else:
            self._partition_of = told.log.partition_of

    async def start(self) -> None:
        """Listen to the host (before it starts: its first share of the
        partitions is caught up), and make the outbound stream if missing."""
        if self._task is not None:
            return
        if self.told is not None:  # where partitions never told of start
            told = self.told
            await _persistently("reading the egress's origin", told.origin)
        self._task = asyncio.create_task(self._publish_all())
        self.host.listen(self.on_event)
        self.host.listen_deltas(self.on_delta)
        if self.told is not None:
            self._saving = asyncio.create_task(self._save_forever())
            self.host.listen_holding(self.holding)

    def holding(self, held: frozenset[int]) -> None:
        """The host holds partitions ``held`` from now: publish what each
        newly held one told since its saved position, then what it tells."""
        acquired = held - self._held
        self._held = held
        for partition in sorted(acquired):
            self._done.pop(partition, None)
            self._queue.put_nowait(_CatchUp(partition))

    def on_delta(self, info: RequestInfo, text: str) -> None:
        """The host's delta listener: model text as it streams, not kept anywhere.

        Published on ``steward.<kind>s.<id>.deltas`` (`deltas_subject`; core
        NATS, so nobody listening means nobody gets it; the log records the
        whole reply).
        """
        if self._task is not None:
            self._queue.put_nowait(
                _Delta(
                    info.stream,
                    _json.encode({"request_id": info.request_id, "text": text}),
                )
            )

    def on_event(self, rec: events.Recorded) -> None:
        """The host listener: queue ``rec`` for publishing (never blocks)."""
        if self._task is None:
            return
        partition = self._partition_of(rec.stream)
        if partition not in self._held:
            return  # its holder publishes it
        self._seen[partition] = rec.position
        kind = self.host.kinds.get(rec.stream.partition(".")[0])
        if kind is None:
            return
        surface = kind.surface
        if surface.updates or (
            surface.tells is not None and type(rec.event) in surface.told
        ):
            self._backlog[partition] += 1
            self._queue.put_nowait(_Told(rec, kind, partition))

    async def close(self) -> None:
        """Store what is queued (for up to `CLOSE_SECONDS`), save how far
        each partition got, and flush the connection."""
        task, self._task = self._task, None
        if task is None:
            return
        self._queue.put_nowait(None)
        if self._saving is not None:
            self._saving.cancel()
            await asyncio.gather(self._saving, return_exceptions=True)
        try:
            await asyncio.wait_for(task, CLOSE_SECONDS)
        except TimeoutError:
            # what is left unsaved, the partitions' next holders publish
            log.warning(
                "closing with outbound messages not stored: the next holder "
                "of their partitions publishes them"
            )
        else:
            await self._save()
        try:
            await self.nc.flush()
        except Exception:
            log.exception("flushing egress failed")

    async def _keep_outbound(self) -> None:
        """Make the outbound stream if missing, trying again until JetStream
        answers (a cluster electing its leaders); what is told waits."""
        replicas = 1 if self.told is None else self.told.log.replicas
        await _persistently(
            f"keeping the outbound stream {self.config.stream}",
            lambda: keep_outbound(self.js, self.config, replicas=replicas),
        )

    async def _publish_all(self) -> None:
        await self._keep_outbound()
        while (item := await self._queue.get()) is not None:
            try:
                if isinstance(item, _Delta):
                    await self.nc.publish(deltas_subject(item.stream), item.data)
                elif isinstance(item, _CatchUp):
                    await self._catch_up(item.partition)
                else:
                    try:
                        await self._publish(item)
                    finally:
                        self._backlog[item.partition] -= 1
            except Exception:
                log.exception("publishing to the outbound subjects failed")

    async def _publish(self, item: _Told) -> None:
        """Publish ``item.rec`` as its kind says: an update of its stream,
        and what it tells a channel (unless a catch-up told it already)."""
        rec, kind = item.rec, item.kind
        if kind.surface.updates:
            name, _, actor_id = rec.stream.partition(".")
            update = {
                f"{name}_id": actor_id,
                "version": rec.version,
                "type": events.type_name(rec.event),
                "summary": summary(rec.event),
            }
            subject = updates_subject(actor_id, name)
            try:  # live only: a lost update must not keep what is told
                await self.nc.publish(subject, _json.encode(update))
            except Exception as e:
                log.debug("an update on %s was not published: %s", subject, e)
        done = self._done.get(item.partition)
        if done is not None and rec.position > done:
            await self._tell(rec, kind, item.partition)

    async def _tell(
        self, rec: events.Recorded, kind: Kind[Any], partition: int
    ) -> None:
        """Store what ``rec`` tells a channel, if anything, and save that
        ``partition`` has told up to it."""
        surface = kind.surface
        if surface.tells is not None and type(rec.event) in surface.told:
            state, _ = await _persistently(
                f"reading {rec.stream}'s state", lambda: self.host.state(rec.stream)
            )
            told = surface.tells(rec.event, state)
            if told is not None:
                await self._store(
                    outbound_subject(told.channel), _json.encode(told.message), rec.id
                )
                self._done[partition] = rec.position
                if (
                    self.told is not None
                    and partition in self._held  # else its holder saves it
                    and await self.told.save(partition, rec.position)
                ):
                    self._saved[partition] = rec.position
                return
        self._done[partition] = rec.position

    async def _store(self, subject: str, data: bytes, msg_id: str) -> None:
        """Publish to the outbound stream until it acknowledges (a message
        is not dropped while it may yet be stored: its partition waits, in
        order). One that never can be (larger than the server takes) is
        dropped, saying so; a stream deleted meanwhile is made again."""
        headers = {"Nats-Msg-Id": msg_id}
        delay = 0.1
        while True:
            try:
                await self.js.publish(subject, data, headers=headers)
                return
            except nats.errors.MaxPayloadError as e:
                log.error(
                    "the outbound message of event %s on %s cannot be stored "
                    "(%s): it is not published",
                    msg_id,
                    subject,
                    e,
                )
                return
            except nats.js.errors.NoStreamResponseError:
                log.warning("no stream keeps %s: making it again", subject)
                await self._keep_outbound()
                continue
            except Exception as e:
                log.warning(
                    "storing an outbound message on %s failed (%s); trying again",
                    subject,
                    e or type(e).__name__,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _catch_up(self, partition: int) -> None:
        """Publish what ``partition``'s records told after its saved
        position (a partition just taken: its last holder may have died
        before publishing them)."""
        told = self.told
        assert told is not None  # partitions are held with positions
        self._catching.add(partition)  # what is heard meanwhile is not saved
        try:
            after = await _persistently(
                f"reading partition {partition}'s egress position",
                lambda: told.load(partition),
            )
            self._done[partition] = self._saved[partition] = after
            # up to the partition's head as its leader has it: every record
            # the host heard before holding it (a replica may lag a moment)
            head = await _persistently(
                f"reading partition {partition}'s head",
                partial(told.log.leader_head, partition),
            )
            kinds = self.host.kinds
            while partition in self._held:
                page = await _persistently(
                    f"reading partition {partition} after position {after}",
                    partial(told.log.read_all, after, partition=partition),
                )
                for rec in page:
                    kind = kinds.get(rec.stream.partition(".")[0])
                    if kind is not None:
                        await self._tell(rec, kind, partition)
                    self._done[partition] = rec.position
                if page:
                    after = page[-1].position
                elif after >= head:
                    break
                else:  # the replica that answered is behind: ask again
                    await asyncio.sleep(0.05)
        finally:
            self._catching.discard(partition)

    async def _save_forever(self) -> None:
        while True:
            await asyncio.sleep(SAVE_SECONDS)
            await self._save()

    async def _save(self) -> None:
        """Save how far each partition held has told where records that tell
        nobody moved it (so its next holder reads little of it again)."""
        if self.told is None:
            return
        for partition in sorted(self._held):
            done = self._done.get(partition)
            if done is None or partition in self._catching:
                continue  # not caught up yet
            if not self._backlog[partition]:
                done = max(done, self._seen.get(partition, 0))
            if done > self._saved.get(partition, -1) and await self.told.save(
                partition, done
            ):
                self._saved[partition] = done


_T = TypeVar("_T")


async def _persistently(what: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
    """``attempt()``'s value, made again while it fails (JetStream between
    leaders, a lost connection), after a pause that doubles from 0.1 s to
    5 s: what is told waits, in order, and is never dropped."""
    delay = 0.1
    while True:
        try:
            return await attempt()
        except Exception as e:
            log.warning("%s failed (%s); trying again", what, e or type(e).__name__)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)
