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
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from steward.events import Event
from steward.events.protocol import LlmFailed, LlmResponded, ToolResulted, Usage

NOT_STARTED = frozenset({"new", "pending"})
"""The statuses of an actor not started yet (made, or queued for a host)."""
ENDED = frozenset({"completed", "failed", "cancelled"})
"""The statuses an actor ends in."""


def ended(before: str, after: str) -> bool:
    """Whether an actor whose status went from ``before`` to ``after`` ended."""
    return after in ENDED and before not in ENDED


__all__ = [
    "COUNTED",
    "EFFECT_KINDS",
    "TIMED_KINDS",
    "ended",
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
CALL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Upper bounds in seconds of a model or tool call, or of its wait for a slot."""
GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
    40.96, 81.92, 163.84, 327.68,
)  # fmt: skip
"""``gen_ai.client.operation.duration``'s advised bucket bounds (seconds),
and two more: a model call may take minutes."""
GENAI_TOKEN_BUCKETS = (
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
    1048576.0, 4194304.0, 16777216.0, 67108864.0,
)  # fmt: skip
"""``gen_ai.client.token.usage``'s advised bucket bounds (tokens)."""


class Histogram:
    """Observations counted into its buckets (plus +Inf), and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = _BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(``le``, observations at or below it), as the exposition wants."""
        bounds = [*(repr(b) for b in self.bounds), "+Inf"]
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
        # by bounded labels (never an actor's id): each key a tuple of them
        self.started: dict[str, int] = {}
        self.ended: dict[tuple[str, str], int] = {}
        self.steps: dict[str, Histogram] = {}
        self.committed: dict[str, int] = {}
        self.model_calls: dict[tuple[str, str, str], int] = {}
        self._models: dict[tuple[str, str], ModelCalls] = {}
        self.model_wait: dict[str, Histogram] = {}
        self.model_first_token: dict[tuple[str, str], Histogram] = {}
        self.model_cost: dict[tuple[str, str], float] = {}
        self.genai_duration: dict[tuple[str, str, str], Histogram] = {}
        self.genai_tokens: dict[tuple[str, str, str], Histogram] = {}
        self.tool_outcomes: dict[tuple[str, str], int] = {}
        self.tool_seconds: dict[str, Histogram] = {}
        self.dead_letters: dict[str, int] = {}
        # gauges `steward serve` and `worker` refresh every few seconds
        self.projection_lag: int | None = None
        self.members: dict[str, int] | None = None
        self.partitions_held: int | None = None
        self.timers: int | None = None

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

    def step(
        self,
        kind: str,
        seconds: float,
        events: int,
        statuses: tuple[str, str] | None = None,
    ) -> None:
        """A decision of an actor of ``kind`` committed: ``seconds`` to
        decide and append, ``events`` in the commit, the actor's status
        before and after (`Surface.status`) when its kind says one."""
        _histogram(self.steps, kind, CALL_BUCKETS).observe(seconds)
        self.committed[kind] = self.committed.get(kind, 0) + events
        if statuses is None:
            return
        before, after = statuses
        if before in NOT_STARTED and after not in NOT_STARTED:
            self.started[kind] = self.started.get(kind, 0) + 1
        if ended(before, after):
            self.ended[(kind, after)] = self.ended.get((kind, after), 0) + 1

    def model_failed(
        self, provider: str, model: str, kind: str, seconds: float
    ) -> None:
        """A model call of ``model`` (a ``[models]`` table's model, through
        ``provider``) failed after ``seconds``, ``kind`` saying how (an
        answered one: `ModelCalls.answered`). Its time is kept once, in the
        GenAI histogram; the families by provider and model are summed from
        it when Prometheus scrapes."""
        called = (provider, model, kind)
        self.model_calls[called] = self.model_calls.get(called, 0) + 1
        _histogram(self.genai_duration, called, GENAI_DURATION_BUCKETS).observe(seconds)

    def model(self, provider: str, model: str) -> ModelCalls:
        """What is kept of the calls of ``model`` through ``provider``, its
        keys and histograms found once for all its calls."""
        found = self._models.get((provider, model))
        if found is None:
            found = self._models[(provider, model)] = ModelCalls(self, provider, model)
        return found

    def first_token(self, provider: str, model: str, seconds: float) -> None:
        """A streamed model call's first piece of answer came after ``seconds``."""
        key = (provider, model)
        _histogram(self.model_first_token, key, CALL_BUCKETS).observe(max(0.0, seconds))

    def waited(self, priority: str, seconds: float) -> None:
        """A model call of ``priority`` waited ``seconds`` for a slot."""
        _histogram(self.model_wait, priority, CALL_BUCKETS).observe(max(0.0, seconds))

    def tool_call(self, tool: str, ok: bool, seconds: float) -> None:
        """A call of ``tool`` (a registered name, or ``unknown``) ended."""
        key = (tool, "ok" if ok else "error")
        self.tool_outcomes[key] = self.tool_outcomes.get(key, 0) + 1
        _histogram(self.tool_seconds, tool, CALL_BUCKETS).observe(seconds)


class ModelCalls:
    """The answered calls of one model through one provider
    (`HostMetrics.model`), with the keys and histograms they update found at
    the first answer, not at each (a step makes a call)."""

    __slots__ = ("_metrics", "_named", "_ok", "_kept")

    def __init__(self, metrics: HostMetrics, provider: str, model: str) -> None:
        self._metrics = metrics
        self._named = (provider, model)
        self._ok = (provider, model, "ok")
        self._kept: tuple[Histogram, Histogram, Histogram] | None = None

    def answered(self, seconds: float, usage: Usage, cost: float) -> None:
        """A call answered after ``seconds``: counted ``ok``, its time and
        tokens kept once, in the GenAI histograms, and its cost summed."""
        metrics = self._metrics
        calls = metrics.model_calls
        calls[self._ok] = calls.get(self._ok, 0) + 1
        kept = self._kept
        if kept is None:
            provider, model = self._named
            tokens = metrics.genai_tokens
            kept = self._kept = (
                _histogram(
                    metrics.genai_duration,
                    (provider, model, ""),
                    GENAI_DURATION_BUCKETS,
                ),
                _histogram(tokens, (provider, model, "input"), GENAI_TOKEN_BUCKETS),
                _histogram(tokens, (provider, model, "output"), GENAI_TOKEN_BUCKETS),
            )
        duration, tokens_in, tokens_out = kept
        duration.observe(seconds)
        tokens_in.observe(usage.input_tokens)
        tokens_out.observe(usage.output_tokens)
        costs = metrics.model_cost
        costs[self._named] = costs.get(self._named, 0.0) + cost


def _histogram(
    histograms: dict[Any, Histogram], key: Any, bounds: tuple[float, ...]
) -> Histogram:
    found = histograms.get(key)
    if found is None:
        found = histograms[key] = Histogram(bounds)
    return found


COUNTED = frozenset({LlmResponded, LlmFailed, ToolResulted})
"""The event types `HostMetrics.record` counts; the host skips the rest."""


HOST = HostMetrics()


class _HostCollector(Collector):
    def collect(self) -> Iterator[Metric]:
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
        yield _counter(
            "steward_actors_started",
            "Actors begun by this process, by kind",
            ["kind"],
            _keyed(HOST.started),
        )
        yield _counter(
            "steward_actors_ended",
            "Actors this process ended, by kind and outcome",
            ["kind", "outcome"],
            _keyed(HOST.ended),
        )
        yield _histograms(
            "steward_step_seconds",
            "Time to decide an input and append the step, by actor kind",
            ["kind"],
            _keyed(HOST.steps),
        )
        yield _counter(
            "steward_committed_events",
            "Events this process committed, by actor kind (over the steps by "
            "kind, steward_step_seconds_count: the events in a commit)",
            ["kind"],
            _keyed(HOST.committed),
        )
        yield _counter(
            "steward_model_calls",
            "Model calls this process made, by provider, model and outcome "
            "(ok, or the kind of failure)",
            ["provider", "model", "outcome"],
            _keyed(HOST.model_calls),
        )
        yield _histograms(
            "steward_model_call_seconds",
            "Time a model call took, by provider and model",
            ["provider", "model"],
            _summed(HOST.genai_duration),
        )
        yield _histograms(
            "steward_model_time_to_first_token_seconds",
            "Time from a streamed model call's start to its first piece of "
            "answer (text or a tool call), by provider and model",
            ["provider", "model"],
            _keyed(HOST.model_first_token),
        )
        yield _histograms(
            "steward_model_call_wait_seconds",
            "Time a model call waited for a slot, by priority (schedule to "
            "start: long waits mean add workers or slots)",
            ["priority"],
            _keyed(HOST.model_wait),
        )
        yield _counter(
            "steward_model_tokens",
            "Model tokens, by provider, model and type (input, output)",
            ["provider", "model", "type"],
            {key: h.sum for key, h in HOST.genai_tokens.copy().items()},
        )
        yield _counter(
            "steward_model_cost_usd",
            "US dollars spent on model calls, by provider and model",
            ["provider", "model"],
            _keyed(HOST.model_cost),
        )
        yield _counter(
            "steward_tool_calls_by_tool",
            "Tool calls this process made, by tool and outcome",
            ["tool", "outcome"],
            _keyed(HOST.tool_outcomes),
        )
        yield _histograms(
            "steward_tool_call_seconds",
            "Time a tool call took, by tool",
            ["tool"],
            _keyed(HOST.tool_seconds),
        )
        yield _counter(
            "steward_inbound_dead_letters",
            "Inbound messages refused and kept on steward.deadletter.inbound, "
            "by the error code they were refused with",
            ["reason"],
            _keyed(HOST.dead_letters),
        )
        if HOST.projection_lag is not None:
            yield GaugeMetricFamily(
                "steward_projection_lag_events",
                "Events recorded in the log that the projections have not applied",
                value=HOST.projection_lag,
            )
        if HOST.members is not None:
            members = GaugeMetricFamily(
                "steward_members",
                "Live members of the log's workers bucket, by role (serve, worker)",
                labels=["role"],
            )
            for role in ("serve", "worker"):
                members.add_metric([role], HOST.members.get(role, 0))
            yield members
        if HOST.timers is not None:
            yield GaugeMetricFamily(
                "steward_timers_armed",
                "Timers this process keeps armed (sleeps, debounces, schedules)",
                value=HOST.timers,
            )
        if HOST.partitions_held is not None:
            yield GaugeMetricFamily(
                "steward_partitions_held",
                "Partitions of the log this member holds (its share of the work)",
                value=HOST.partitions_held,
            )
        yield _histograms(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration (OpenTelemetry gen_ai.client.operation.duration)",
            _GENAI + ["error_type"],
            {(_CHAT, *k): h for k, h in HOST.genai_duration.copy().items()},
        )
        yield _histograms(
            "gen_ai_client_token_usage",
            "Number of input and output tokens used (OpenTelemetry "
            "gen_ai.client.token.usage)",
            _GENAI + ["gen_ai_token_type"],
            {(_CHAT, *k): h for k, h in HOST.genai_tokens.copy().items()},
        )


_CHAT = "chat"
"""``gen_ai.operation.name`` of every model call steward makes."""
_GENAI = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
"""The GenAI conventions' attributes, as their Prometheus mapping names them."""


def _summed(
    histograms: dict[tuple[str, str, str], Histogram],
) -> dict[tuple[str, str], Histogram]:
    """Histograms keyed by (provider, model, error) summed over the error."""
    out: dict[tuple[str, str], Histogram] = {}
    for (provider, model, _), histogram in histograms.copy().items():
        summed = _histogram(out, (provider, model), histogram.bounds)
        summed.counts = [
            a + b for a, b in zip(summed.counts, histogram.counts, strict=True)
        ]
        summed.sum += histogram.sum
    return out


def _counter(
    name: str, help: str, labels: list[str], counts: dict[Any, Any]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help, labels=labels)
    for key, count in sorted(counts.items()):
        family.add_metric(list(key), count)
    return family


def _keyed(counts: dict[Any, Any]) -> dict[tuple[Any, ...], Any]:
    """A copy of ``counts`` (made at once: the event loop may add a key
    while a scrape, in another thread, reads), each key a tuple."""
    return {k if isinstance(k, tuple) else (k,): v for k, v in counts.copy().items()}


def _histograms(
    name: str, help: str, labels: list[str], histograms: dict[Any, Histogram]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, help, labels=labels)
    for key, histogram in sorted(histograms.items()):
        family.add_metric(list(key), histogram.cumulative(), histogram.sum)
    return family


def _labelled(
    name: str, help: str, label: str, counts: dict[str, int]
) -> CounterMetricFamily:
    """A counter with one sample per ``counts`` entry, its key as ``label``."""
    family = CounterMetricFamily(name, help, labels=[label])
    for value, count in counts.items():
        family.add_metric([value], count)
    return family


REGISTRY.register(_HostCollector())
