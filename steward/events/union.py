"""The union of the event types a log holds, and its decoders.

Each actor kind records its own event types; the union of a table's kinds'
is what a stored event decodes into (a tagged union: the tag is the type's
name; `steward.actors.kind.Kinds.union`). `UNION` is the shared vocabulary's
alone: a log is given its kinds' union.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

import msgspec
import msgspec.inspect as mi

from steward.events import protocol
from steward.events.base import Event

__all__ = ["SHARED_TYPES", "UNION", "EventUnion", "field_defaults"]


class EventUnion:
    """Event types by tag, and the decoders of their union."""

    def __init__(self, types: tuple[type[Event], ...]) -> None:
        """The union of ``types`` (each once).

        Raises:
            ValueError: two types have one name (the tag).
        """
        names: dict[str, type[Event]] = {}
        for t in types:
            known = names.setdefault(t.__name__, t)
            if known is not t:
                raise ValueError(
                    f"event type {t.__name__} of {t.__module__} has the name (the "
                    f"tag) of {known.__module__}.{known.__name__}; rename one"
                )
        self.types: tuple[type[Event], ...] = tuple(names.values())

    # The decoders are built when first used (a command that reads no event,
    # as `steward --help`, builds none), then kept as plain attributes.

    @functools.cached_property
    def union(self) -> Any:
        return typing.Union[self.types]  # noqa: UP007 (built at run time)

    @functools.cached_property
    def msgpack(self) -> msgspec.msgpack.Decoder[Any]:
        return msgspec.msgpack.Decoder(self.union)

    @functools.cached_property
    def msgpack_list(self) -> msgspec.msgpack.Decoder[list[Any]]:
        return msgspec.msgpack.Decoder(list[self.union])  # type: ignore[name-defined]

    @functools.cached_property
    def json(self) -> msgspec.json.Decoder[Any]:
        return msgspec.json.Decoder(self.union)


SHARED_TYPES: tuple[type[Event], ...] = protocol.EVENT_TYPES
"""The shared vocabulary's event types, which every kind may record."""

UNION = EventUnion(SHARED_TYPES)
"""The union a log decodes into unless given a table's (`Kinds.union`): the
shared vocabulary alone, so a log names no kind of its own."""


def _shown(default: Any) -> str:
    """A default as pinned: its ``repr``, but a Struct at all its own
    defaults as ``Name()`` (its fields' defaults are pinned each, so a field
    added to it with a default changes no pin)."""
    if isinstance(default, msgspec.Struct) and default == type(default)():
        return f"{type(default).__name__}()"
    return repr(default)


def field_defaults(types: tuple[type[Event], ...]) -> dict[str, str]:
    """The default of every field of ``types``, and of the Structs they
    hold, as ``{"Type.field": repr(default)}``: what an event read without
    that field takes (`steward.events.base`). A recorded default never
    changes; ``tests/golden/defaults.json`` pins them."""
    found: dict[str, str] = {}
    seen: set[type] = set()

    def walk(t: mi.Type) -> None:
        if isinstance(t, mi.StructType):
            if t.cls in seen:
                return
            seen.add(t.cls)
            for f in t.fields:
                if not f.required:
                    default = (
                        f.default_factory()
                        if f.default is msgspec.NODEFAULT
                        else f.default
                    )
                    found[f"{t.cls.__name__}.{f.name}"] = _shown(default)
                walk(f.type)
        elif isinstance(t, mi.UnionType):
            for member in t.types:
                walk(member)
        elif isinstance(t, mi.TupleType):
            for member in t.item_types:
                walk(member)
        elif isinstance(t, mi.DictType):
            walk(t.key_type)
            walk(t.value_type)
        elif isinstance(
            t, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)
        ):
            walk(t.item_type)

    for t in mi.multi_type_info(types):
        walk(t)
    return dict(sorted(found.items()))
