"""The runtime around the model: what one run step costs, and steps/s at scale.

A *step* is one iteration of the run loop: the model's reply is recorded, the
decider turns it into a command, and the next model request is committed and
dispatched. The model is the scripted provider answering instantly, so every
microsecond measured is steward's own: deciding, encoding, committing to the
embedded log (``synchronous=NORMAL``, WAL), dispatching and prompt hashing.

Targets (issue #2):

- runtime cost per step for one run <= 100 us. Measured as CPU time of the
  process per step: a lone run spends most of its wall time waiting for its own
  commits to come back from SQLite's writer thread, which is latency, not cost.
  The wall time per step is printed beside it, against no target;
- aggregate steps/s with 100 concurrent runs >= 20,000.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from statistics import median

from benchmarks.common import REPEATS, Figure
from steward import events
from steward.actors.run import events as run_events
from steward.actors.run.events import Usage
from steward.actors.run.reactor import run_stream
from steward.bus import SqliteEventLog
from steward.effects.llm import Reply, ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

STEPS = 200  # iterations of the lone run
CONCURRENT = 100
CONCURRENT_STEPS = 50  # iterations of each of the concurrent runs
_ENDS = (
    run_events.RunCompleted,
    run_events.RunFailed,
)  # the benchmark's listener waits for


def _replies(steps: int) -> list[Reply]:
    """``steps - 1`` progress replies, then ``finish``: exactly ``steps`` steps.

    Each reply reports its usage, as a real model's does; without it the
    scripted model would estimate it by summing the prompt window's length,
    the test model's own work (2-4 us a step), not the runtime's.
    """
    commands = [
        {"type": "set_output", "output": f"part {n}. ", "mode": "append"}
        for n in range(steps - 1)
    ]
    return [
        Reply(text=json.dumps(command), usage=_USAGE)
        for command in [*commands, {"type": "finish"}]
    ]


_USAGE = Usage(input_tokens=800, output_tokens=20)


async def _measure(runs: int, steps: int) -> tuple[int, float, float]:
    """Run ``runs`` runs of ``steps`` steps; (steps, wall s, CPU s)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = await SqliteEventLog.open(Path(tmp) / "log.db", union=KINDS.union)
        host = Host(
            log,
            provider=ScriptedProvider(_replies(steps), per_run=True),
            tools=ToolRegistry.with_builtins(),
            workspace=tmp,
            llm_concurrency=runs,
            kinds=KINDS,
        )
        await host.start()
        settings = run_events.RunSettings(
            max_iterations=steps + 1, planning_gate=False, tools=()
        )
        done = asyncio.Event()
        finished = 0

        def on_event(rec: events.Recorded) -> None:
            nonlocal finished
            if type(rec.event) in _ENDS:
                finished += 1
                if finished == runs:
                    done.set()

        host.listen(on_event)
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(
            *(
                host.submit(
                    run_stream(f"b{n}"),
                    run_events.RunCreated(
                        run_id=f"b{n}", input_text="go", settings=settings
                    ),
                )
                for n in range(runs)
            )
        )
        await asyncio.wait_for(done.wait(), timeout=600)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        states = [await host.state(run_stream(f"b{n}")) for n in range(runs)]
        await host.stop()
        await log.close()
    bad = [s.run_id for s, _ in states if s.iteration != steps]
    if bad:
        raise RuntimeError(f"runs {bad[:3]} did not take {steps} steps")
    return runs * steps, wall, cpu


StepMeasure = Callable[[int, int], Awaitable[tuple[int, float, float]]]
"""Runs ``runs`` runs of ``steps`` steps: (steps, wall s, CPU s)."""


async def step_medians(measure: StepMeasure) -> tuple[float, float, float]:
    """Medians of ``REPEATS`` runs each: a lone run's CPU and wall time per
    step (us), and steps/s with ``CONCURRENT`` runs."""
    lone = [await measure(1, STEPS) for _ in range(REPEATS)]
    many = [await measure(CONCURRENT, CONCURRENT_STEPS) for _ in range(REPEATS)]
    return (
        median(cpu / n * 1e6 for n, _, cpu in lone),
        median(wall / n * 1e6 for n, wall, _ in lone),
        median(n / wall for n, wall, _ in many),
    )


async def run() -> list[Figure]:
    cpu, wall, rate = await step_medians(_measure)
    return [
        Figure(
            "runtime CPU per step, 1 run (NORMAL)",
            cpu,
            "us",
            100,
            higher_is_better=False,
        ),
        Figure(
            "wall time per step, 1 run (NORMAL)",
            wall,
            "us",
            None,
            higher_is_better=False,
        ),
        Figure(
            f"steps/s, {CONCURRENT} concurrent runs (NORMAL)",
            rate,
            "steps/s",
            20_000,
        ),
    ]
