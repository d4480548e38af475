"""Retry timing and cost: pure functions for the host's retry loop and accounting.

Nothing here sleeps, reads a clock or draws a random number: the caller passes
``now`` and ``rand`` in, so every delay is exact in a test.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime

from steward.config import ModelConfig
from steward.events.protocol import Usage

__all__ = [
    "DEFAULT_BASE_DELAY",
    "DEFAULT_MAX_DELAY",
    "backoff_delay",
    "cost_usd",
    "parse_retry_after",
    "retry_after_from_headers",
]

DEFAULT_BASE_DELAY = 1.0
"""Seconds before the first retry, before jitter (steward's own default)."""

DEFAULT_MAX_DELAY = 60.0
"""Longest back-off in seconds that steward chooses itself; a server's
``Retry-After`` may ask for more."""

_MAX_EXPONENT = 62  # 2**62 seconds is past any cap; keeps the float finite


def backoff_delay(
    attempt: int,
    retry_after: float | None = None,
    *,
    rand: float,
    base: float = DEFAULT_BASE_DELAY,
    cap: float = DEFAULT_MAX_DELAY,
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 for the first retry).

    Exponential back-off with equal jitter: the ceiling doubles from ``base``
    with each attempt up to ``cap``; the delay is half the ceiling plus ``rand``
    times the other half, so clients that failed together do not come back
    together, and no retry comes back at once. A server's ``retry_after`` is a
    floor: the delay is never shorter than it asked, even beyond ``cap``.

    Args:
        attempt: the retry about to be made, counting from 1.
        retry_after: the wait the server asked for, in seconds, if it did.
        rand: a number drawn uniformly from [0, 1] (``random.random()``).
        base: the ceiling of the first retry, in seconds.
        cap: the largest ceiling, in seconds.

    Raises:
        ValueError: ``attempt`` is below 1 or ``rand`` is outside [0, 1].
    """
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, not {attempt}")
    if not 0.0 <= rand <= 1.0:
        raise ValueError(f"rand must be in [0, 1], not {rand}")
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, _MAX_EXPONENT))
    delay = ceiling / 2 + rand * ceiling / 2
    if retry_after is not None and retry_after > delay:
        return retry_after
    return delay


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds a ``Retry-After`` header value asks to wait, or ``None``.

    The value is either seconds (``"7"``, also ``"1.5"``) or an HTTP date
    (``"Wed, 21 Oct 2015 07:28:00 GMT"``), which is measured from ``now`` (Unix
    seconds) and never gives less than 0. Anything else is ``None``.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT even when it does not say so
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def retry_after_from_headers(headers: Mapping[str, str], *, now: float) -> float | None:
    """The wait a response's headers ask for: ``retry-after-ms``, else
    ``retry-after`` (seconds or an HTTP date); ``None`` if neither parses.

    ``headers`` must look names up case-insensitively (``httpx.Headers`` does).
    """
    millis = parse_retry_after(headers.get("retry-after-ms"), now=now)
    if millis is not None:
        return millis / 1000
    return parse_retry_after(headers.get("retry-after"), now=now)


def cost_usd(usage: Usage, model: ModelConfig) -> float:
    """US dollars a call with ``usage`` cost at ``model``'s per-million prices."""
    return (
        usage.input_tokens * model.input_price_per_mtok
        + usage.output_tokens * model.output_price_per_mtok
    ) / 1_000_000
