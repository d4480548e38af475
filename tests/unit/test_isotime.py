"""Times as people write them (`steward.isotime.moment`): a span before now
or an ISO date or time; anything else one clear error."""

from __future__ import annotations

import pytest

from steward.isotime import moment

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("30m", NOW - 1800),
        ("1h", NOW - 3600),
        (" 7d ", NOW - 7 * 86400),
        ("2W", NOW - 14 * 86400),
        ("2026-11-28", 1795824000.0),
        ("2026-11-28T04:00Z", 1795838400.0),
        ("2026-11-28T06:00+02:00", 1795838400.0),
    ],
)
def test_a_span_or_an_iso_time(text: str, at: float) -> None:
    """A span counts back from now; an ISO time without a zone is UTC."""
    assert moment(text, NOW) == at


def test_a_date_alone_can_mean_its_end() -> None:
    """With ``day_end`` a date is the next day's start (an until that takes
    in the whole day); a time is itself."""
    assert moment("2026-11-28", NOW, day_end=True) == 1795824000.0 + 86400
    assert moment("2026-11-28T04:00Z", NOW, day_end=True) == 1795838400.0


@pytest.mark.parametrize("text", ["yesterday", "1y", "", "2026-13-01", "h"])
def test_anything_else_says_what_would_do(text: str) -> None:
    with pytest.raises(ValueError, match="is not a time: give a span before now"):
        moment(text, NOW)
