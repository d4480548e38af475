"""A commit as one JetStream message: its msgpack layout, encoders and decoders.

The payload is ``[first_version, count, at, correlation_id, causation_id,
commit_id, [event, ...]]``.
"""

from __future__ import annotations

import msgspec

from steward.events import Event


class Outgoing(msgspec.Struct, array_like=True, frozen=True):
    """A commit as it is published (the same layout `Stored` decodes)."""

    first_version: int
    count: int
    at: float
    correlation_id: str | None
    causation_id: str | None
    commit_id: str
    events: list[Event]


class Stored(msgspec.Struct, array_like=True, frozen=True):
    """A commit as it is read: its events left as msgpack for `steward.bus.pages`."""

    first_version: int
    count: int
    at: float
    correlation_id: str | None
    causation_id: str | None
    commit_id: str
    events: msgspec.Raw


class Head(msgspec.Struct, array_like=True, frozen=True):
    """The start of a commit: msgspec skips the events without building them."""

    first_version: int
    count: int
    at: float
    correlation_id: str | None
    causation_id: str | None
    commit_id: str


encode_commit = msgspec.msgpack.Encoder().encode
decode_stored = msgspec.msgpack.Decoder(Stored).decode
decode_head = msgspec.msgpack.Decoder(Head).decode
