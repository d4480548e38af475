"""Cron expressions, for any kind that arms a timer by one (a run's sleep,
a session's schedule): pure computation over a base time the caller passes
in. croniter is imported when first used, so a command that evaluates no
cron expression does not load it."""

from __future__ import annotations

from datetime import UTC, datetime


def valid(cron: str) -> bool:
    """Whether ``cron`` is a cron expression (five fields)."""
    from croniter import croniter

    return bool(croniter.is_valid(cron))


def next_firing(cron: str, after: float) -> float:
    """When ``cron`` fires next after time ``after`` (seconds since the
    epoch, UTC)."""
    from croniter import croniter

    base = datetime.fromtimestamp(after, UTC)
    return float(croniter(cron, base).get_next(datetime).timestamp())
