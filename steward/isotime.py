"""Times as people read them (pure: no clock is read here)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

__all__ = ["AGO", "duration", "iso_time", "moment"]


def iso_time(at: float) -> str:
    """Epoch seconds as ISO 8601 in UTC, to the millisecond
    (``2026-11-24T10:15:03.828Z``)."""
    try:
        moment = datetime.fromtimestamp(at, UTC)
    except (OverflowError, OSError, ValueError):  # beyond the calendar's years
        return f"{at:.3f}"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """A span for people: ``3d 4h 5m 6s``, leading zero units left out."""
    rest = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if rest >= size or parts:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    parts.append(f"{rest}s")
    return " ".join(parts)


AGO = MappingProxyType({"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400})
"""The units of a time given as a span before now (``30m``, ``1h``, ``7d``,
``2w``), in seconds."""

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw])")


def moment(text: str, now: float, *, day_end: bool = False) -> float:
    """The epoch seconds ``text`` names: a span before ``now`` (``1h``,
    ``7d``: `AGO`), or an ISO 8601 date or time (UTC unless it says
    otherwise). A date alone is the start of that day, or its end (the next
    day's start) with ``day_end``.

    Raises:
        ValueError: ``text`` is neither, saying what would do.
    """
    given = text.strip()
    span = _SPAN.fullmatch(given.lower())
    if span is not None:
        return now - float(span[1]) * AGO[span[2]]
    try:
        at = datetime.fromisoformat(given.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: give a span before now (30m, 1h, 1d, 7d, "
            "2w) or an ISO date or time (2026-11-28, 2026-11-28T04:00Z)"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if day_end and len(given) == 10:  # a date alone: YYYY-MM-DD
        at += timedelta(days=1)
    return at.timestamp()
