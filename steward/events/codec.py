"""Encode events to msgpack for storage and JSON for export, and back."""

from __future__ import annotations

from typing import Any

import msgspec

from steward.errors import LogReadError
from steward.events.base import UPCASTERS, Event, Recorded
from steward.events.union import UNION, EventUnion

AnyEvent = Event
"""A decoded event, for type checking: one of the types of the union it was
decoded with (the codec names no kind)."""

_mp_encoder = msgspec.msgpack.Encoder()
_json_encoder = msgspec.json.Encoder()
_raw_decoder = msgspec.msgpack.Decoder(dict[str, Any])


def encode(event: Event) -> bytes:
    """The msgpack bytes an event is stored as."""
    return _mp_encoder.encode(event)


def encode_blob(events: Event | list[Event]) -> bytearray:
    """``encode`` an event, or a list of them, into a bytearray.

    sqlite3 binds a bytearray as a blob directly; for ``bytes`` (as for any
    type but int, float, str and bytearray) it first searches for an adapter,
    in vain: about 3,300 instructions a row, some 15% of inserting it.
    """
    blob = bytearray()
    _mp_encoder.encode_into(events, blob)
    return blob


def encodable(event: Event) -> Event:
    """``event`` with every text made encodable as UTF-8.

    A lone surrogate (``"\\ud800"``: valid in JSON and in a Python string, as
    an SDK or a tool hands it over, but not in UTF-8) becomes U+FFFD, and a
    split surrogate pair is joined into its character. The host applies this at
    the boundary, to an input that cannot be encoded as given, so the event
    recorded is the cleaned one and replay sees exactly what was decided on.
    """
    return msgspec.convert(
        encodable_value(msgspec.to_builtins(event)), type(event), strict=False
    )


def encodable_value(value: Any) -> Any:
    """A JSON-like ``value`` (str, list, dict, scalars) with every string,
    keys included, made encodable as `encodable` does for an event."""
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        return [encodable_value(v) for v in value]
    if isinstance(value, dict):
        return {encodable_value(k): encodable_value(v) for k, v in value.items()}
    return value


def decode(data: bytes, union: EventUnion = UNION) -> AnyEvent:
    """Decode stored bytes into one of ``union``'s types, upcasting an old
    shape when its tag asks for it."""
    try:
        event: AnyEvent = union.msgpack.decode(data)
        return event
    except msgspec.ValidationError as e:
        upcast: AnyEvent | None = _upcast(_raw_decoder.decode(data), union)
        if upcast is None:
            raise LogReadError(f"cannot decode stored event: {e}") from e
        return upcast


def _upcast(old: dict[str, Any], union: EventUnion) -> Any:
    """The event an old shape ``old`` upcasts to, if its tag has an upcaster."""
    upcast = UPCASTERS.get(str(old.get("type")))
    return None if upcast is None else msgspec.convert(upcast(old), union.union)


def to_json(event: Event) -> bytes:
    return _json_encoder.encode(event)


def from_json(data: bytes | str, union: EventUnion = UNION) -> AnyEvent:
    event: AnyEvent = union.json.decode(data)
    return event


class RecordedJson(msgspec.Struct, kw_only=True):
    """The JSON-lines export shape of a recorded event."""

    id: str
    stream: str
    version: int
    position: int
    at: float
    correlation_id: str | None
    causation_id: str | None
    event: AnyEvent


class _LineJson(msgspec.Struct, kw_only=True):
    """`RecordedJson` with its event left undecoded, for the union given to decode."""

    stream: str
    version: int
    position: int
    at: float
    correlation_id: str | None
    causation_id: str | None
    event: msgspec.Raw


_line_decoder = msgspec.json.Decoder(_LineJson)


def recorded_to_json(r: Recorded) -> bytes:
    """One JSON line (without the newline) for an export."""
    return _json_encoder.encode(
        RecordedJson(
            id=r.id,
            stream=r.stream,
            version=r.version,
            position=r.position,
            at=r.at,
            correlation_id=r.correlation_id,
            causation_id=r.causation_id,
            event=r.event,
        )
    )


_raw_line_decoder = msgspec.json.Decoder(dict[str, Any])


def recorded_from_json(line: bytes | str, union: EventUnion = UNION) -> Recorded:
    """A recorded event from one exported JSON line, upcasting an old event
    shape as `decode` does (an exported or golden log replays as the log)."""
    j = _line_decoder.decode(line)
    try:
        event: Event = union.json.decode(j.event)
    except msgspec.ValidationError:
        event = _upcast(_raw_line_decoder.decode(j.event), union)
        if event is None:
            raise
    return Recorded(
        stream=j.stream,
        version=j.version,
        position=j.position,
        at=j.at,
        event=event,
        correlation_id=j.correlation_id,
        causation_id=j.causation_id,
    )
