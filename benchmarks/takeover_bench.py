"""A worker taking over partitions full of ended runs: from their first
records, and from what their last holder saved.

One worker runs ``RUNS`` runs to their end (an instant scripted model) on a
JetStream log and leaves, saving what its partitions wait for
(`steward.bus.jetstream.checkpoints`). Then a new worker starts and takes
all 16 partitions, once reading each partition from its first record (as
every takeover did before the saved wants) and once from the saved wants;
each is measured twice, the best kept. The figure is the time `Host.start`
takes, which returns once the worker holds its first share.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from benchmarks.common import Figure
from benchmarks.log_bench import nats_process
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog
from steward.bus.jetstream.checkpoints import Checkpoints
from steward.bus.jetstream.inputs import Inputs
from steward.bus.jetstream.members import Membership
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

RUNS = 4_000
TARGET_MS = 500.0
"""A takeover from saved wants, whatever the partitions' history."""

_FINISH = '{"type": "finish", "output": "done"}'
_SETTINGS = run_events.RunSettings(
    tools=ToolRegistry.with_builtins().specs(), planning_gate=False
)


async def _worker(url: str, n: int, saved: bool) -> tuple[Host, float]:
    log = await JetStreamEventLog.open(
        url, stream="TAKEOVER", prefix="takeover", union=KINDS.union
    )
    name = f"w{n}"
    host = Host(
        log,
        provider=ScriptedProvider([_FINISH], per_run=True),
        tools=ToolRegistry.with_builtins(),
        worker_id=name,
        llm_concurrency=16,
        membership=Membership(log, name, lease=5.0),
        inputs=Inputs(log),
        checkpoints=Checkpoints(log) if saved else None,
        kinds=KINDS,
    )
    started = time.perf_counter()
    await host.start()
    return host, time.perf_counter() - started


async def _stop(host: Host) -> None:
    await host.stop()
    await host.log.close()  # type: ignore[attr-defined]


async def run() -> list[Figure]:
    with (
        tempfile.TemporaryDirectory() as directory,
        nats_process(Path(directory)) as (url, _),
    ):
        host, _ = await _worker(url, 0, saved=True)
        starter = Host(host.log, kinds=KINDS)
        for chunk in range(0, RUNS, 200):
            await asyncio.gather(
                *(
                    starter.submit(
                        run_stream(f"r{n}"),
                        run_events.RunCreated(
                            run_id=f"r{n}", input_text="go", settings=_SETTINGS
                        ),
                    )
                    for n in range(chunk, min(chunk + 200, RUNS))
                )
            )
        while not await host.settle(5):
            pass
        await _stop(host)
        took: dict[bool, float] = {}
        for saved in (False, True, False, True):
            host, seconds = await _worker(url, 1, saved)
            took[saved] = min(took.get(saved, seconds), seconds)
            await _stop(host)
    name = f"takeover of 16 partitions, {RUNS:,} ended runs"
    return [
        Figure(f"{name}: from the first records", took[False] * 1000, "ms", None),
        Figure(
            f"{name}: from the saved wants",
            took[True] * 1000,
            "ms",
            TARGET_MS,
            higher_is_better=False,
        ),
    ]
