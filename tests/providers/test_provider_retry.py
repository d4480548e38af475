"""Back-off, Retry-After, cost, status classification and tool names: pure parts."""

from __future__ import annotations

import email.utils

import httpx2
import pytest

from steward.actors.run.events import Usage
from steward.config import ModelConfig
from steward.effects.llm._wire import ToolNames, classify_status
from steward.effects.llm.retry import (
    DEFAULT_MAX_DELAY,
    backoff_delay,
    cost_usd,
    parse_retry_after,
    retry_after_from_headers,
)

NOW = 1_700_000_000.0


def test_backoff_doubles_per_attempt_within_its_jitter_band() -> None:
    """Attempt n waits between half and all of base * 2**(n-1)."""
    assert [backoff_delay(n, rand=1.0) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert [backoff_delay(n, rand=0.0) for n in (1, 2, 3, 4)] == [0.5, 1, 2, 4]
    assert backoff_delay(3, rand=0.5, base=0.1) == pytest.approx(0.3)


def test_backoff_is_capped() -> None:
    """The ceiling stops at cap, and huge attempt numbers do not overflow."""
    assert backoff_delay(20, rand=1.0) == DEFAULT_MAX_DELAY
    assert backoff_delay(10_000, rand=0.0, cap=10) == 5
    assert backoff_delay(7, rand=1.0, cap=3) == 3


def test_retry_after_is_a_floor_not_a_ceiling() -> None:
    """A server's Retry-After wins when longer, even past the cap; never shortens."""
    assert backoff_delay(1, 30.0, rand=0.3) == 30
    assert backoff_delay(1, 300.0, rand=1.0) == 300
    assert backoff_delay(4, 0.5, rand=1.0) == 8


def test_backoff_rejects_nonsense() -> None:
    """Attempts count from 1 and rand is a draw from [0, 1]."""
    with pytest.raises(ValueError, match="attempt must be 1 or more, not 0"):
        backoff_delay(0, rand=0.5)
    with pytest.raises(ValueError, match=r"rand must be in \[0, 1\], not 1.5"):
        backoff_delay(1, rand=1.5)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        (email.utils.formatdate(NOW + 42, usegmt=True), 42.0),
        (email.utils.formatdate(NOW - 42, usegmt=True), 0.0),
        (email.utils.formatdate(NOW + 42), 42.0),  # "-0000", no zone: read as GMT
        ("-3", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    """Seconds or an HTTP date (from now); anything else is None."""
    assert parse_retry_after(value, now=NOW) == expected


def test_retry_after_ms_wins_and_names_are_case_insensitive() -> None:
    """retry-after-ms is preferred; headers are looked up case-insensitively."""
    both = httpx2.Headers({"Retry-After-Ms": "250", "Retry-After": "9"})
    assert retry_after_from_headers(both, now=NOW) == 0.25
    only = httpx2.Headers({"RETRY-AFTER": "9"})
    assert retry_after_from_headers(only, now=NOW) == 9
    assert retry_after_from_headers(httpx2.Headers({}), now=NOW) is None


def test_cost_uses_the_per_million_prices() -> None:
    """Cost is input tokens at the input price plus output at the output price."""
    model = ModelConfig(input_price_per_mtok=3.0, output_price_per_mtok=15.0)
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)
    assert cost_usd(usage, model) == pytest.approx(10.5)
    assert cost_usd(Usage(input_tokens=1234, output_tokens=56), model) == (
        pytest.approx((1234 * 3 + 56 * 15) / 1e6)
    )
    assert cost_usd(usage, ModelConfig()) == 0


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, ("config", False)),
        (401, ("auth", False)),
        (403, ("auth", False)),
        (404, ("config", False)),
        (408, ("timeout", True)),
        (409, ("internal", True)),
        (413, ("config", False)),
        (422, ("config", False)),
        (429, ("rate_limit", True)),
        (500, ("internal", True)),
        (502, ("internal", True)),
        (503, ("internal", True)),
        (504, ("timeout", True)),
        (529, ("internal", True)),
    ],
)
def test_status_codes_map_to_kinds(status: int, expected: tuple[str, bool]) -> None:
    """Each HTTP error status has one kind and one retryability."""
    assert classify_status(status) == expected


def test_tool_names_are_made_valid_and_mapped_back() -> None:
    """Dotted names get valid spellings; valid names keep theirs; all map back."""
    names = ToolNames(["files.read", "files_read", "shell", "a b/c"])
    assert names.wire("files_read") == "files_read"  # valid: its own name
    assert names.wire("files.read") == "files_read_2"  # would collide
    assert names.wire("shell") == "shell"
    assert names.wire("a b/c") == "a_b_c"
    for name in ("files.read", "files_read", "shell", "a b/c"):
        assert names.steward(names.wire(name)) == name
    assert names.steward("unknown_tool") == "unknown_tool"
    assert names.wire("web.fetch") == "web_fetch"  # first seen in history
