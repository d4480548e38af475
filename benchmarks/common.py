"""What every benchmark shares: a measured figure, its target, and the table."""

from __future__ import annotations

import asyncio
import os
import platform
import sqlite3
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from steward.events import Recorded
from steward.host import Host

# Benchmarks repeat a measurement and report the median: this 2-core VM's
# speed drifts by a third from one second to the next, and the median of a few
# runs is what a user would see, where the best run would flatter.
REPEATS = 5


@dataclass(frozen=True)
class Figure:
    """One measured number and the target it is held to."""

    name: str
    value: float
    unit: str
    target: float | None
    """``None`` for a figure printed for context, held to no target."""
    higher_is_better: bool = True

    @property
    def ratio(self) -> float:
        """How many times better than the target (above 1 means met)."""
        if self.target is None:
            return float("inf")
        if self.higher_is_better:
            return self.value / self.target
        return self.target / self.value if self.value else float("inf")

    @property
    def met(self) -> bool:
        return self.ratio >= 1.0


Measure = Callable[[], Awaitable[tuple[int, float]]]


async def route(host: Host, rec: Recorded) -> None:
    """Carry out what committed event ``rec`` asks for (an actor to create,
    say) as the host's dispatcher does when it meets it (`Dispatcher.route`),
    and wait until that is done: the benchmarks start no dispatcher, so
    their timings hold no wait for one to come round."""
    await host.dispatcher.route(rec)
    await asyncio.gather(*host.dispatcher.tasks)


async def median_rate(measure: Measure, repeats: int = REPEATS) -> float:
    """The median of ``count / seconds`` over ``repeats`` runs of ``measure``."""
    (rate,) = await median_rates(measure, repeats=repeats)
    return rate


async def median_rates(*measures: Measure, repeats: int = REPEATS) -> list[float]:
    """The median rate of each measure, taking turns so drift hits all alike."""
    rates: list[list[float]] = [[] for _ in measures]
    for _ in range(repeats):
        for measure, seen in zip(measures, rates, strict=True):
            count, seconds = await measure()
            seen.append(count / seconds)
    return [statistics.median(seen) for seen in rates]


class Stopwatch:
    """Seconds elapsed since it was made, on the monotonic performance clock."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def event_loop_name() -> str:
    """The event loop the benchmarks run on, as the ``steward`` command does."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def settings_line(synchronous: str = "NORMAL") -> str:
    """Where the figures were measured, so two tables can be compared fairly."""
    return (
        f"machine: {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs ({platform.processor() or 'unknown cpu'}); "
        f"Python {platform.python_version()} on {event_loop_name()}; "
        f"SQLite {sqlite3.sqlite_version}, synchronous={synchronous} unless named; "
        f"median of {REPEATS} runs"
    )


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def print_table(
    figures: Sequence[Figure], *, synchronous: str = "NORMAL", out: TextIO = sys.stdout
) -> None:
    """Print each figure beside its target and their ratio, then a verdict."""
    header = ("benchmark", "measured", "target", "ratio")
    rows = [
        (
            f.name,
            f"{_number(f.value)} {f.unit}",
            "-"
            if f.target is None
            else f"{'>=' if f.higher_is_better else '<='} {_number(f.target)} {f.unit}",
            "-"
            if f.target is None
            else f"{f.ratio:.2f}x" + ("" if f.met else "  MISSED"),
        )
        for f in figures
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        name, *numbers = cells
        return "  ".join(
            [name.ljust(widths[0])]
            + [c.rjust(w) for c, w in zip(numbers, widths[1:], strict=True)]
        ).rstrip()

    print(settings_line(synchronous), file=out)
    print(line(header), file=out)
    print(line(["-" * w for w in widths]), file=out)
    for row in rows:
        print(line(row), file=out)
    held = [f for f in figures if f.target is not None]
    missed = [f.name for f in held if not f.met]
    if not held:
        print("These figures are context, held to no target.", file=out)
    elif missed:
        print(f"{len(missed)} of {len(held)} targets missed.", file=out)
    else:
        print(f"All {len(held)} targets met.", file=out)
