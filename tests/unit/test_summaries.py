"""The one-line summaries of events that timelines show people."""

from __future__ import annotations

from steward import events
from steward.actors.run import events as run_events
from steward.projections.summary import summary


def test_a_claim_names_its_call_worker_and_expiry_in_utc() -> None:
    """An EffectClaimed reads as the call, the worker and, in ISO 8601 UTC,
    until when the claim holds."""
    claim = events.EffectClaimed(
        request_id="r1/llm/2", worker="host-7", until=1795546373.828
    )
    assert summary(claim) == "r1/llm/2 by host-7 until 2026-11-24T18:52:53.828Z"


def test_a_wake_time_beyond_the_calendar_still_reads() -> None:
    """A sleep until a time datetime cannot hold shows its epoch seconds
    rather than failing the projection."""
    slept = run_events.RunSlept(timer_id="r1/wake/1", wake_at=1e20)
    assert summary(slept) == "until 100000000000000000000.000"
