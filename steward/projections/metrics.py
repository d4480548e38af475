"""The metrics endpoint: every metric of this process (`steward.metrics`)
and the runs by status, read from the runs projection at each scrape."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

import steward.metrics  # noqa: F401  (registers the host's counters)

__all__ = ["RunsByStatus", "endpoint_registry"]


class RunsByStatus(Collector):
    """The gauge ``steward_runs{status}``: runs by status, read from the runs
    projection in ``path`` at each scrape (complete whichever process wrote
    the runs; with several workers, each reports the same figures)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "steward_runs",
            "Runs by status, from the runs projection",
            labels=["status"],
        )
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=1)) as conn:
                rows = conn.execute(
                    "SELECT status, count(*) FROM runs GROUP BY status ORDER BY status"
                ).fetchall()
        except sqlite3.Error:
            return  # no projections yet, or busy: this scrape goes without
        for status, count in rows:
            family.add_metric([status], count)
        yield family


def endpoint_registry(projections: Path) -> CollectorRegistry:
    """What the ``/metrics`` endpoint serves: every metric of this process,
    and the runs by status from the ``projections`` file."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(REGISTRY)
    registry.register(RunsByStatus(projections))
    return registry
