"""The host's Prometheus metrics, counted as plain numbers on the hot path.

A ``prometheus_client`` counter takes a lock on every increment (about a
microsecond here), and a run step increments several: a sizeable share of a
step that should cost tens of microseconds. The host runs on one event loop,
so it counts in plain attributes of `HOST`, and a collector registered with
the default registry turns them into metric families when Prometheus
scrapes. The exposed names, help texts and labels are those of ordinary
counters and a histogram.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

__all__ = ["EFFECT_KINDS", "HOST", "HostMetrics", "Histogram"]

EFFECT_KINDS = ("llm", "tool", "spawn", "deliver", "timer")

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
"""Upper bounds in seconds, those of a default Prometheus histogram."""


class Histogram:
    """Observations counted into `_BUCKETS` (plus +Inf), and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(_BUCKETS, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(``le``, observations at or below it), as the exposition wants."""
        bounds = [*(repr(b) for b in _BUCKETS), "+Inf"]
        total, out = 0, []
        for bound, count in zip(bounds, self.counts, strict=True):
            total += count
            out.append((bound, float(total)))
        return out


class HostMetrics:
    """What every host of this process counted since it started."""

    def __init__(self) -> None:
        self.commits = 0
        self.refusals = 0
        self.conflicts = 0
        self.effects = dict.fromkeys(EFFECT_KINDS, 0)
        self.effect_seconds = {kind: Histogram() for kind in EFFECT_KINDS}


HOST = HostMetrics()


class _HostCollector(Collector):
    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        yield CounterMetricFamily(
            "steward_commits", "Commits appended by the host", value=HOST.commits
        )
        yield CounterMetricFamily(
            "steward_refusals", "Inputs a decider refused", value=HOST.refusals
        )
        yield CounterMetricFamily(
            "steward_conflicts",
            "Commits retried after a conflict",
            value=HOST.conflicts,
        )
        effects = CounterMetricFamily(
            "steward_effects", "Effects dispatched", labels=["kind"]
        )
        for kind, count in HOST.effects.items():
            effects.add_metric([kind], count)
        yield effects
        seconds = HistogramMetricFamily(
            "steward_effect_seconds", "Time an effect took", labels=["kind"]
        )
        for kind, histogram in HOST.effect_seconds.items():
            seconds.add_metric([kind], histogram.cumulative(), histogram.sum)
        yield seconds


REGISTRY.register(_HostCollector())
