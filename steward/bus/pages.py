"""Stored commits to envelopes, for every backend: one decode-and-upcast path.

A backend reads a page of commits, each as a `Row`, and `decode_page` turns
them into `Recorded` envelopes: in one pass over the current shapes (one call
of msgspec's C decoder per commit), or, when an event does not decode in its
current shape, event by event through the codec, which applies
`steward.events.UPCASTERS` to old shapes and names the first event that is
unreadable.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

import msgspec

from steward.bus.base import envelopes
from steward.errors import LogReadError
from steward.events import UNION, AnyEvent, EventUnion, Recorded, decode

__all__ = ["Row", "decode_page"]

Row = tuple[int, str, int, int, float, str | None, str | None, bytes | msgspec.Raw]
"""One commit: ``(position, stream, version, count, at, correlation_id,
causation_id, data)``, position and version those of its first event, ``data``
the msgpack of its events: a list, or the lone event of a commit of one
(unless the backend always stores a list: ``decode_page(listed=True)``)."""

_decode_parts = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode


def decode_page(
    rows: Sequence[Row], *, listed: bool = False, union: EventUnion = UNION
) -> list[Recorded]:
    """The events of ``rows``, in order, as envelopes; old shapes upcast.

    Args:
        rows: commits in position (or version) order.
        listed: every row's ``data`` is a list, even of one event.
        union: the event types the events decode into.

    Raises:
        LogReadError: an event is unreadable; the message names its stream,
            version and position.
    """
    # A page allocates a few objects per event and frees none, so the cyclic
    # collector would run many times per page and find nothing (envelopes and
    # events cannot form cycles). Paused for this loop only, which never
    # awaits, it runs once afterwards instead: replays get 10-30% faster.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _current_envelopes(rows, listed, union)
    except msgspec.DecodeError:
        pass  # an old shape to upcast, or bytes that are no event
    finally:
        if collecting:
            gc.enable()
    page: list[Recorded] = []
    for position, stream, version, count, at, correlation, causation, data in rows:
        events = _upcast_events(
            data, listed or count != 1, stream, version, position, union
        )
        page += envelopes(stream, version, position, at, events, correlation, causation)
    return page


def _current_envelopes(
    rows: Sequence[Row], listed: bool, union: EventUnion
) -> list[Recorded]:
    """A `Recorded` for each event of each row, in its current shape: one call
    of the C decoder per row. Every replay runs this loop, so it is written out
    rather than through `steward.bus.base.envelopes` (a fifth less time per
    event, measured)."""
    page: list[Recorded] = []
    add = page.append
    decode_one, decode_many = union.msgpack.decode, union.msgpack_list.decode
    for position, stream, version, count, at, correlation, causation, data in rows:
        events = decode_many(data) if listed or count != 1 else (decode_one(data),)
        for event in events:
            add(
                Recorded(
                    stream=stream,
                    version=version,
                    position=position,
                    at=at,
                    event=event,
                    correlation_id=correlation,
                    causation_id=causation,
                )
            )
            version += 1
            position += 1
    return page


def _upcast_events(
    data: bytes | msgspec.Raw,
    is_list: bool,
    stream: str,
    version: int,
    position: int,
    union: EventUnion,
) -> list[AnyEvent]:
    """A commit's events one by one through the codec, which knows the upcasters."""
    try:
        parts = _decode_parts(data) if is_list else [data]
    except msgspec.DecodeError as e:
        raise _unreadable(stream, version, position, e) from e
    events = []
    for i, part in enumerate(parts):
        try:
            events.append(decode(bytes(part), union))
        except Exception as e:
            raise _unreadable(stream, version + i, position + i, e) from e
    return events


def _unreadable(stream: str, version: int, position: int, e: Exception) -> LogReadError:
    return LogReadError(
        f"cannot decode event {stream}/{version} at position {position}: "
        f"{e}; the stored bytes are corrupt or were written by a newer "
        "steward (add an upcaster for the old shape, or restore the log "
        "from a backup)"
    )
