"""Steps/s with 1, 2 and 4 `steward worker` processes sharing a JetStream log.

The model is the scripted provider with a fixed delay per reply (MODEL_DELAY),
so the model is the bottleneck, as it is in production: each worker makes at
most LLM_SLOTS calls at once, and steps/s should grow with the workers until
the machine's 2 cores are the limit. A step is one iteration of a run (model
reply, decision, next request). The target is that 2 workers do at least 1.5x
and 4 workers at least 2x the steps of one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Figure
from benchmarks.log_bench import nats_server
from steward import events
from steward.actors.run_effects import run_stream
from steward.bus import JetStreamEventLog, open_log
from steward.host import Host

MODEL_DELAY = 0.2  # seconds per model reply
LLM_SLOTS = 4  # model calls in flight per worker
RUNS = 48
STEPS = 6  # iterations per run


def _script(path: Path) -> None:
    commands: list[dict[str, object]] = [
        {"type": "set_output", "output": f"{n}. ", "mode": "append"}
        for n in range(STEPS - 1)
    ]
    commands.append({"type": "finish"})
    replies = [{"json": command, "delay": MODEL_DELAY} for command in commands]
    path.write_text(json.dumps({"per_run": True, "replies": replies}))


async def _measure(workers: int, directory: Path) -> float:
    with nats_server(directory / f"w{workers}") as server:
        url = f"{server}?stream=BENCH&prefix=bench.ev"
        _script(directory / "script.json")
        log = await open_log(url)
        assert isinstance(log, JetStreamEventLog)
        processes = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "steward",
                    "--log",
                    url,
                    "--db",
                    str(directory / f"p{workers}-{n}.db"),
                    "--script",
                    str(directory / "script.json"),
                    "worker",
                ],
                cwd=directory,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**os.environ, "STEWARD_LLM_MAX_CONCURRENCY": str(LLM_SLOTS)},
            )
            for n in range(workers)
        ]
        try:
            for process in processes:  # each prints a line once it is ready
                assert process.stdout is not None
                await asyncio.to_thread(process.stdout.readline)
            settings = events.RunSettings(max_iterations=STEPS + 1, planning_gate=False)
            starter = Host(log)
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    starter.submit(
                        run_stream(f"b{n}"),
                        events.RunCreated(
                            run_id=f"b{n}", input_text="go", settings=settings
                        ),
                    )
                    for n in range(RUNS)
                )
            )
            finished = 0
            async for rec in log.subscribe():
                if isinstance(rec.event, events.RunCompleted | events.RunFailed):
                    finished += 1
                    if finished == RUNS:
                        break
            elapsed = time.perf_counter() - started
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                process.communicate(timeout=30)
            await log.close()
    return RUNS * STEPS / elapsed


async def run() -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        rates = {n: await _measure(n, Path(tmp)) for n in (1, 2, 4)}
    ceiling = LLM_SLOTS / MODEL_DELAY
    return [
        Figure(
            f"jetstream: steps/s, 1 worker (model {MODEL_DELAY * 1000:.0f} ms, "
            f"{LLM_SLOTS} calls; ceiling {ceiling:.0f})",
            rates[1],
            "steps/s",
            None,
        ),
        Figure("jetstream: steps/s, 2 workers", rates[2], "steps/s", 1.5 * rates[1]),
        Figure("jetstream: steps/s, 4 workers", rates[4], "steps/s", 2.0 * rates[1]),
    ]
