"""Egress over NATS: what the host records, published for services to hear.

`Egress` listens to the host and publishes, in log order, as each stream's
kind says (`Surface.updates`, `Surface.tells`; it names no kind): an update per
recorded event of a kind that publishes them (the run's, on
``steward.runs.<run_id>.updates``), and what an actor tells a channel on
``steward.outbound.<channel>`` (a session's turn reply, a command's answer,
a refusal, a subagent's answer; a run recorded with a channel that answers
no one, its messages and its end). Model text as it streams goes to
``steward.runs.<run_id>.deltas``, kept nowhere.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NamedTuple

import msgspec

from steward import events
from steward.actors.kind import Kind
from steward.actors.llm import RequestInfo
from steward.bus.jetstream.subjects import escape_token
from steward.host import Host
from steward.projections.summary import summary

__all__ = ["Egress", "deltas_subject", "outbound_subject", "updates_subject"]

log = logging.getLogger("steward.egress")

_json = msgspec.json.Encoder()


def updates_subject(actor_id: str, kind: str) -> str:
    """Where the updates of an actor of ``kind`` go (`Surface.updates`)."""
    return f"steward.{kind}s.{escape_token(actor_id)}.updates"


def outbound_subject(channel: str) -> str:
    return f"steward.outbound.{channel}"


class _Told(NamedTuple):
    """A committed event of a kind that publishes updates or tells of it."""

    rec: events.Recorded
    kind: Kind[Any]


class _Delta(NamedTuple):
    run_id: str
    data: bytes


def deltas_subject(run_id: str) -> str:
    """Where a run's model text streams live (not stored)."""
    return f"steward.runs.{escape_token(run_id)}.deltas"


class Egress:
    """Publishes updates and what actors tell channels as the host records
    them, as each stream's kind says (`Surface.updates`, `Surface.tells`); it
    names no kind.

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

    Args:
        nc: a connected nats-py client; the caller owns and closes it.
        host: the host whose recorded events are published.
    """

    def __init__(self, nc: Any, host: Host) -> None:
        self.nc = nc
        self.host = host
        self._queue: asyncio.Queue[_Told | _Delta | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Listen to the host; publishing happens on one task, in log order."""
        if self._task is None:
            self._task = asyncio.create_task(self._publish_all())
            self.host.listen(self.on_event)
            self.host.listen_deltas(self.on_delta)

    def on_delta(self, info: RequestInfo, text: str) -> None:
        """The host's delta listener: model text as it streams, not kept anywhere.

        Published on ``steward.runs.<run_id>.deltas`` (core NATS, so nobody
        listening means nobody gets it; the log records the whole reply).
        """
        if self._task is not None:
            self._queue.put_nowait(
                _Delta(
                    info.run_id,
                    _json.encode({"request_id": info.request_id, "text": text}),
                )
            )

    def on_event(self, rec: events.Recorded) -> None:
        """The host listener: queue ``rec`` for publishing (never blocks)."""
        if self._task is None:
            return
        kind = self.host.kinds.get(rec.stream.partition(".")[0])
        if kind is not None and (
            kind.surface.updates or kind.surface.tells is not None
        ):
            self._queue.put_nowait(_Told(rec, kind))

    async def close(self) -> None:
        """Publish what is queued, then flush the connection."""
        task, self._task = self._task, None
        if task is None:
            return
        self._queue.put_nowait(None)
        await task
        try:
            await self.nc.flush()
        except Exception:
            log.exception("flushing egress failed")

    async def _publish_all(self) -> None:
        while (item := await self._queue.get()) is not None:
            try:
                if isinstance(item, _Delta):
                    await self.nc.publish(deltas_subject(item.run_id), item.data)
                else:
                    await self._publish(item.rec, item.kind)
            except Exception:
                log.exception("publishing to the outbound subjects failed")

    async def _publish(self, rec: events.Recorded, kind: Kind[Any]) -> None:
        """Publish ``rec`` as its kind says: an update of its stream, and
        what it tells a channel."""
        if kind.surface.updates:
            name, _, actor_id = rec.stream.partition(".")
            update = {
                f"{name}_id": actor_id,
                "version": rec.version,
                "type": events.type_name(rec.event),
                "summary": summary(rec.event),
            }
            subject = updates_subject(actor_id, name)
            await self.nc.publish(subject, _json.encode(update))
        if kind.surface.tells is None or type(rec.event) not in kind.surface.told:
            return
        state, _ = await self.host.state(rec.stream)
        told = kind.surface.tells(rec.event, state)
        if told is not None:
            await self.nc.publish(
                outbound_subject(told.channel), _json.encode(told.message)
            )
