"""The union of every event type the log can hold, and its decoders.

Each actor kind records its own event types; the union of all of them is
what a stored event decodes into (a tagged union: the tag is the type's
name). It starts with the run actor's types and grows when the kind table
registers a kind (`steward.actors.kind.register`), which rebuilds the
decoders once. Readers take the decoders from `UNION` when they start a read
(not per event), so a kind registered later is decoded from then on.
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec

from steward.events import run, session, workflow
from steward.events.base import Event

__all__ = ["UNION", "EventUnion"]


class EventUnion:
    """Event types by tag, and the decoders of their union."""

    def __init__(self, types: tuple[type[Event], ...]) -> None:
        self.types: tuple[type[Event], ...] = ()
        self.add(types)

    def add(self, types: tuple[type[Event], ...]) -> None:
        """Add ``types`` (those not here yet) and rebuild the decoders.

        Raises:
            ValueError: another type of the same name (the tag) is here.
        """
        names = {t.__name__: t for t in self.types}
        new = []
        for t in types:
            known = names.get(t.__name__)
            if known is None:
                names[t.__name__] = t
                new.append(t)
            elif known is not t:
                raise ValueError(
                    f"event type {t.__name__} of {t.__module__} has the name (the "
                    f"tag) of {known.__module__}.{known.__name__}; rename one"
                )
        if not new and self.types:
            return
        self.types = (*self.types, *new)
        union: Any = typing.Union[self.types]  # noqa: UP007 (built at run time)
        self.msgpack = msgspec.msgpack.Decoder(union)
        self.msgpack_list = msgspec.msgpack.Decoder(list[union])
        self.json = msgspec.json.Decoder(union)
        self.union: Any = union


UNION = EventUnion((*run.EVENT_TYPES, *session.EVENT_TYPES, *workflow.EVENT_TYPES))
"""The union the log decodes into: the events of steward's kinds and of every
kind registered since (`steward.actors.kind.register`)."""
