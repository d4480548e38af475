"""What happened: the envelope, the codec, and the vocabulary every kind
shares (model and tool calls, claims, timers, child results). Each kind's own
events live in its package (`steward.actors.run.events`, ...)."""

from steward.events.base import UPCASTERS, Event, Recorded, event_id, type_name
from steward.events.codec import (
    AnyEvent,
    decode,
    encodable,
    encodable_value,
    encode,
    encode_blob,
    from_json,
    recorded_from_json,
    recorded_to_json,
    to_json,
)
from steward.events.protocol import *  # noqa: F403
from steward.events.protocol import __all__ as _protocol_all
from steward.events.union import UNION, EventUnion, field_defaults

__all__ = [
    "UNION",
    "UPCASTERS",
    "EventUnion",
    "AnyEvent",
    "Event",
    "Recorded",
    "decode",
    "encodable",
    "encodable_value",
    "encode",
    "encode_blob",
    "event_id",
    "field_defaults",
    "from_json",
    "recorded_from_json",
    "recorded_to_json",
    "to_json",
    "type_name",
    *_protocol_all,
]
