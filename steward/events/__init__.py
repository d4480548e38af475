"""What happened: every event steward records, the envelope and the codec."""

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
from steward.events.run import *  # noqa: F403
from steward.events.run import __all__ as _run_all
from steward.events.session import *  # noqa: F403
from steward.events.session import __all__ as _session_all
from steward.events.union import UNION, EventUnion, field_defaults
from steward.events.workflow import *  # noqa: F403
from steward.events.workflow import __all__ as _workflow_all

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
    *_run_all,
    *_session_all,
    *_workflow_all,
]
