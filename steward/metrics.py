"""The host's Prometheus metrics, counted as plain numbers on the hot path.

A ``prometheus_client`` counter takes a lock on every increment (about a
microsecond here), and a run step increments several: a sizeable share of a
step that should cost tens of microseconds. The host runs on one event loop,
so it counts in plain attributes of `HOST`, and a collector registered with
the default registry turns them into metric families when Prometheus
scrapes. The exposed names, help texts and labels are those of ordinary
counters and a histogram.

A module of its own, below the effect handlers that count into it and the
host (`steward.projections.metrics` adds what the projections hold).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from steward.events import Event
from steward.events.protocol import LlmFailed, LlmResponded, ToolResulted

__all__ = [
    "COUNTED",
    "EFFECT_KINDS",
    "TIMED_KINDS",
    "HOST",
    "Histogram",
    "HostMetrics",
]

EFFECT_KINDS = ("llm", "tool", "spawn", "deliver", "timer")
TIMED_KINDS = ("llm", "tool")
"""The effects whose durations are observed: the calls that take time (the
others are a commit each, counted in ``steward_effects_total``)."""

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
    """What every host of this process counted since it started.

    Effects are counted by the process that carried them out (made the model
    or tool call, committed the delivery or the timer's wake), and model
    answers and tool results by the host that committed them, so with several
    workers on one log each is counted once, and a dashboard sums the
    workers' figures.
    """

    def __init__(self) -> None:
        self.commits = 0
        self.refusals = 0
        self.conflicts = 0
        self.effects = dict.fromkeys(EFFECT_KINDS, 0)
        self.effect_seconds = {kind: Histogram() for kind in TIMED_KINDS}
        self.llm_tokens = dict.fromkeys(("input", "output"), 0)
        self.llm_cost_usd = 0.0
        self.tool_calls = dict.fromkeys(("ok", "error"), 0)

    def record(self, event: Event) -> None:
        """Count ``event``, committed by this process (see `COUNTED`)."""
        match event:
            case (
                LlmResponded(usage=usage, cost_usd=cost)
                | LlmFailed(usage=usage, cost_usd=cost)
            ):
                self.llm_tokens["input"] += usage.input_tokens
                self.llm_tokens["output"] += usage.output_tokens
                self.llm_cost_usd += cost
            case ToolResulted(ok=ok):
                self.tool_calls["ok" if ok else "error"] += 1


COUNTED = frozenset({LlmResponded, LlmFailed, ToolResulted})
"""The event types `HostMetrics.record` counts; the host skips the rest."""


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
        yield _labelled(
            "steward_effects", "Effects this process carried out", "kind", HOST.effects
        )
        seconds = HistogramMetricFamily(
            "steward_effect_seconds",
            "Time a model or tool call took",
            labels=["kind"],
        )
        for kind, histogram in HOST.effect_seconds.items():
            seconds.add_metric([kind], histogram.cumulative(), histogram.sum)
        yield seconds
        yield _labelled(
            "steward_llm_tokens",
            "Model tokens, as the provider reported",
            "kind",
            HOST.llm_tokens,
        )
        yield CounterMetricFamily(
            "steward_llm_cost_usd",
            "US dollars spent on model calls, from the configured prices",
            value=HOST.llm_cost_usd,
        )
        yield _labelled(
            "steward_tool_calls",
            "Tool calls answered, by outcome",
            "outcome",
            HOST.tool_calls,
        )


def _labelled(
    name: str, help: str, label: str, counts: dict[str, int]
) -> CounterMetricFamily:
    """A counter with one sample per ``counts`` entry, its key as ``label``."""
    family = CounterMetricFamily(name, help, labels=[label])
    for value, count in counts.items():
        family.add_metric([value], count)
    return family


REGISTRY.register(_HostCollector())
