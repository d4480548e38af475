"""Times as people read them (pure: no clock is read here)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["duration", "iso_time"]


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
