"""The event base class, the `Recorded` envelope and the codec.

Events are frozen, keyword-only msgspec Structs tagged with their class name, so
one tagged union decodes any of them. They are stored as msgpack and exported
as JSON lines. Fields are only ever added (with defaults), never renamed in
place; `UPCASTERS` maps an old tag to a function that rewrites an old payload,
so an old log always replays.

A field at its default is not stored (``omit_defaults``): most of a
`RunCreated` is settings left as they are, and a turn's run stores 295 bytes
instead of 742. So a default is part of the log's format: an event read
without a field takes the field's default of the code reading it, whether the
field did not exist yet or was left at its default. A default, once
recorded, never changes (`steward.events.union.field_defaults`, pinned by
``tests/golden/defaults.json``). The Structs a prompt hash encodes
(`ChatMessage`, `ToolCall`, `ToolSpec`) store every field, as they always
have: their bytes are what recorded hashes were taken of.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec


class Event(
    msgspec.Struct, frozen=True, tag=True, kw_only=True, gc=False, omit_defaults=True
):
    """Base of every event: a fact that happened, never changed once recorded."""


class Recorded(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event as the log holds it.

    ``version`` is 1-based within ``stream``; ``position`` is global and
    strictly increasing across the whole log. ``id`` is derived
    (``stream/version``) so it is unique without being stored.
    """

    stream: str
    version: int
    position: int
    at: float
    event: Event
    correlation_id: str | None = None
    causation_id: str | None = None

    @property
    def id(self) -> str:
        return event_id(self.stream, self.version)


def event_id(stream: str, version: int) -> str:
    """The id of the event at ``version`` of ``stream``."""
    return f"{stream}/{version}"


# Old tag -> function turning an old payload (a dict) into the current one.
UPCASTERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def type_name(event: Event) -> str:
    """The tag an event is stored under."""
    return type(event).__name__
