"""Ingress over NATS: services talk to chat sessions (`steward.egress`
publishes what they hear back).

**Ingress.** A service publishes an `InboundMessage` (JSON, or msgpack with the
header ``Content-Type: application/msgpack``) on ``steward.inbound.<channel>``.
`Ingress` checks it (size, encoding, schema, known channel, agent profile) and
gives it to the session of its chat, ``<channel>:<chat>`` where the chat is
the message's ``context_id``, else its ``user_id``, else ``default`` (opened
with the channel's agent profile the first time). The session debounces it
and answers as any chat's does. When the publisher asked for a reply it gets
``{"ok": true, "session_id", "message_id", "duplicate"}`` or ``{"ok": false,
"error": {"code", "message"}}`` with one of the stable `ERROR_CODES`. A
rejected message is never dropped: its original payload goes to
``steward.deadletter.inbound.<channel>`` with the headers
``Steward-Error-Code`` and ``Steward-Error``, where the JetStream stream
``STEWARD_DEADLETTER`` (created on start, file storage) keeps it for 30 days
whether or not anyone listens.

A message with a ``message_id`` is taken at most once: the session refuses
an id among its newest (`steward.actors.session.state.SEEN_MESSAGES`), and the
reply says ``"duplicate": true``.

The schema of `InboundMessage` is exported to
``docs/inbound-message.v1.schema.json``; regenerate it with
``python -m steward.ingress > docs/inbound-message.v1.schema.json``.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Literal

import msgspec
import nats.js.api

from steward import events
from steward.actors.session.chats import ChatReads, message, open_session
from steward.bus.jetstream.kept import kept_stream
from steward.config.settings import Settings
from steward.errors import StewardError
from steward.host import Host
from steward.metrics import HOST as METRICS

__all__ = [
    "DEADLETTER_STREAM",
    "DEFAULT_MAX_BYTES",
    "ERROR_CODES",
    "INBOUND_SUBJECT",
    "QUEUE_GROUP",
    "InboundMessage",
    "Ingress",
    "deadletter_subject",
    "inbound_schema",
    "inbound_schema_json",
]

log = logging.getLogger("steward.ingress")

INBOUND_SUBJECT = "steward.inbound.*"
"""Where services publish inbound messages; the last token is the channel."""

QUEUE_GROUP = "steward-ingress"
"""Ingress processes share inbound messages as one NATS queue group."""

DEFAULT_MAX_BYTES = 64 * 1024
"""Largest inbound payload accepted, in bytes (64 KiB)."""

DEADLETTER_STREAM = "STEWARD_DEADLETTER"
"""The JetStream stream that keeps refused inbound messages."""

DEADLETTER_MAX_AGE = 30 * 24 * 3600.0
"""Seconds a dead letter is kept (30 days)."""

MSGPACK = "application/msgpack"

ERROR_CODES = (
    "too_large",
    "not_json",
    "not_msgpack",
    "bad_schema",
    "unknown_channel",
    "no_agent",
    "too_long",
    "internal",
)
"""The stable codes of an error reply and of a dead-letter's
``Steward-Error-Code`` header."""


class InboundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message a service sends to steward on ``steward.inbound.<channel>`` (v1)."""

    version: Annotated[
        Literal[1], msgspec.Meta(description="Schema version; this is version 1.")
    ] = 1
    text: Annotated[
        str,
        msgspec.Meta(min_length=1, description="What the user said."),
    ]
    user_id: Annotated[
        str | None,
        msgspec.Meta(
            description="Who sent it, as the service knows them: the chat when "
            "there is no context_id, and who the sender is across chats."
        ),
    ] = None
    context_id: Annotated[
        str | None,
        msgspec.Meta(
            description="The chat it belongs to: its session is <channel>:<context_id>."
        ),
    ] = None
    message_id: Annotated[
        str | None,
        msgspec.Meta(
            description="The service's id of this message: the same id in a "
            "chat is taken once."
        ),
    ] = None
    metadata: Annotated[
        dict[str, str],
        msgspec.Meta(description="Anything else the service keeps with the message."),
    ] = {}


def inbound_schema() -> dict[str, Any]:
    """The JSON Schema of `InboundMessage` (version 1)."""
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "steward inbound message, version 1",
    }
    schema.update(msgspec.json.schema(InboundMessage))
    return schema


def inbound_schema_json() -> str:
    """`inbound_schema` as the text of ``docs/inbound-message.v1.schema.json``."""
    return json.dumps(inbound_schema(), indent=2, sort_keys=True) + "\n"


def deadletter_subject(channel: str) -> str:
    return f"steward.deadletter.inbound.{channel}"


async def keep_deadletters(js: Any, *, replicas: int = 1) -> None:
    """Make sure stream `DEADLETTER_STREAM` keeps ``steward.deadletter.>``.

    An existing stream of that name is used as it is, so an operator may
    change its limits.
    """
    await kept_stream(
        js,
        nats.js.api.StreamConfig(
            name=DEADLETTER_STREAM,
            subjects=["steward.deadletter.>"],
            storage=nats.js.api.StorageType.FILE,
            max_age=DEADLETTER_MAX_AGE,
            num_replicas=replicas,
        ),
    )


class _Rejected(StewardError):
    """An inbound message steward will not act on; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_json_decoder = msgspec.json.Decoder(InboundMessage)
_msgpack_decoder = msgspec.msgpack.Decoder(InboundMessage)
_json = msgspec.json.Encoder()


def _decode(data: bytes, content_type: str | None) -> InboundMessage:
    msgpack = content_type is not None and content_type.strip().lower() == MSGPACK
    decoder = _msgpack_decoder if msgpack else _json_decoder
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as e:
        raise _Rejected(
            "bad_schema", f"the message does not match inbound schema v1: {e}"
        ) from None
    except msgspec.DecodeError as e:
        if not msgpack and (loose := _loose_json(data)) is not None:
            return loose
        if msgpack:
            raise _Rejected(
                "not_msgpack",
                f"the payload is not valid msgpack ({e}), though its Content-Type "
                f"is {MSGPACK}",
            ) from None
        raise _Rejected(
            "not_json",
            f"the payload is not valid JSON ({e}); send JSON, or msgpack with "
            f"the header Content-Type: {MSGPACK}",
        ) from None


def _loose_json(data: bytes) -> InboundMessage | None:
    """A message msgspec refuses only for a lone surrogate (``"\\ud800"``,
    valid JSON): read by the standard parser, the surrogate made U+FFFD."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    try:
        return msgspec.convert(events.encodable_value(value), InboundMessage)
    except msgspec.ValidationError as e:
        raise _Rejected(
            "bad_schema", f"the message does not match inbound schema v1: {e}"
        ) from None


def _header(text: str, limit: int = 1024) -> str:
    # A header value is one line; keep it short so the record stays readable.
    return " ".join(text.split())[:limit]


class Ingress:
    """Gives inbound messages on ``steward.inbound.<channel>`` to sessions.

    Args:
        nc: a connected nats-py client (``await nats.connect(url)``); the
            caller owns and closes it.
        host: the host that records the messages (``Host.submit``).
        settings: the settings sessions are opened with (profiles, models).
        channels: channel name → agent profile name; other channels are
            answered ``unknown_channel``.
        reads: where a sender's other chats are looked up (`serve`'s
            projections, or a worker's remote reads of them).
        max_bytes: largest payload accepted; larger ones are ``too_large``.
        queue: the NATS queue group the ingress processes share.
        replicas: copies of the dead-letter stream, when it is created.
    """

    def __init__(
        self,
        nc: Any,
        host: Host,
        settings: Settings,
        channels: dict[str, str],
        *,
        reads: ChatReads | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        queue: str = QUEUE_GROUP,
        replicas: int = 1,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.replicas = replicas
        self.host = host
        self.settings = settings
        self.channels = dict(channels)
        self.reads = reads
        self.max_bytes = max_bytes
        self.queue = queue
        self._sub: Any = None

    async def start(self) -> None:
        """Subscribe to ``steward.inbound.*`` in the queue group.

        Raises:
            StewardError: the dead-letter stream cannot be made.
        """
        if self._sub is not None:
            return
        try:
            await keep_deadletters(self.js, replicas=self.replicas)
        except Exception as e:
            raise StewardError(
                f"cannot keep dead letters in the JetStream stream "
                f"{DEADLETTER_STREAM}: {e}"
            ) from e
        self._sub = await self.nc.subscribe(
            INBOUND_SUBJECT, queue=self.queue, cb=self._on_message
        )
        # Once the server has the subscription, a service's request finds it.
        await self.nc.flush()

    async def stop(self) -> None:
        """Stop taking messages; the ones already received are finished first."""
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.drain()

    async def _on_message(self, msg: Any) -> None:
        # Nothing may escape: an exception here would end nothing visible but
        # lose the message, so every failure becomes a reply and a dead letter.
        channel = msg.subject.rsplit(".", 1)[-1]
        try:
            reply = await self.handle(channel, msg.data, msg.headers or {})
        except _Rejected as e:
            log.warning("inbound on %s rejected (%s): %s", channel, e.code, e.message)
            await self._refuse(msg, channel, e.code, e.message)
            return
        except Exception as e:
            log.exception("inbound on %s failed", channel)
            await self._refuse(
                msg, channel, "internal", f"steward could not take the message: {e}"
            )
            return
        if msg.reply:
            try:
                await self.nc.publish(msg.reply, _json.encode(reply))
            except Exception:
                log.exception("reply to inbound on %s failed", channel)

    async def handle(
        self, channel: str, data: bytes, headers: dict[str, str]
    ) -> dict[str, Any]:
        """Give one inbound payload to its chat's session; the reply to send
        back.

        Raises ``_Rejected`` (with its ``code``) for a message steward refuses.
        """
        if len(data) > self.max_bytes:
            raise _Rejected(
                "too_large",
                f"the payload is {len(data)} bytes, more than the {self.max_bytes} "
                f"an inbound message may have",
            )
        inbound = _decode(data, headers.get("Content-Type"))
        profile = self.channels.get(channel)
        if profile is None:
            known = ", ".join(sorted(self.channels)) or "none"
            raise _Rejected(
                "unknown_channel",
                f"channel {channel!r} is not configured; known channels: {known}",
            )
        if profile not in self.settings.agents:
            raise _Rejected(
                "no_agent",
                f"channel {channel!r} names agent profile {profile!r}, which is not "
                f"in [agents]; the message was not taken",
            )
        limit = self.settings.session.max_message_chars
        if len(inbound.text) > limit:
            raise _Rejected(
                "too_long",
                f"the message has {len(inbound.text)} characters, more than the "
                f"{limit} a session takes ([session] max_message_chars); send "
                "it in parts",
            )
        chat = inbound.context_id or inbound.user_id or "default"
        session_id = f"{channel}:{chat}"
        try:
            stream = await open_session(self.settings, self.host, session_id, profile)
        except StewardError as e:
            raise _Rejected(
                "no_agent", f"agent profile {profile!r} cannot open a session: {e}"
            ) from None
        sent = await message(
            self.settings,
            self.host,
            self.reads,
            session_id,
            inbound.text,
            inbound.user_id,
            message_id=inbound.message_id,
        )
        commit = await self.host.submit(stream, sent)
        return {
            "ok": True,
            "session_id": session_id,
            "message_id": sent.message_id,
            "duplicate": commit is None,
        }

    async def _refuse(self, msg: Any, channel: str, code: str, reason: str) -> None:
        METRICS.dead_letters[code] = METRICS.dead_letters.get(code, 0) + 1
        try:
            headers = dict(msg.headers or {})
            headers["Steward-Error-Code"] = code
            headers["Steward-Error"] = _header(reason)
            # Acknowledged by JetStream: stored, not just sent.
            await self.js.publish(
                deadletter_subject(channel), msg.data, headers=headers
            )
        except Exception:
            log.exception("dead-lettering inbound on %s failed", channel)
        if msg.reply:
            error = {"ok": False, "error": {"code": code, "message": reason}}
            try:
                await self.nc.publish(msg.reply, _json.encode(error))
            except Exception:
                log.exception("error reply to inbound on %s failed", channel)


if __name__ == "__main__":
    import sys

    sys.stdout.write(inbound_schema_json())
