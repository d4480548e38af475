"""How soon the ``steward`` command answers, timed as whole processes.

Each command line is started as a person or a script would (a new Python
process each time, ``python -m steward`` as the venv's script runs it) and
timed from start to exit, median of `REPEATS`, with Python's bytecode cache
as an installed steward has it (``PYTHONDONTWRITEBYTECODE``, set on some
machines, is left out, and a first run not timed writes the cache):
``steward --help``; ``steward runs list`` on a log of 1,000 runs (its
projections caught up beforehand, as a `serve` keeps them); ``steward
sessions send ID TEXT --no-wait`` to a session of that log (it records
the message and exits).

Targets (issue #42): ``--help`` ≤ 250 ms, ``runs list`` ≤ 500 ms,
``sessions send --no-wait`` ≤ 400 ms.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from benchmarks.common import REPEATS, Figure
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import SqliteEventLog
from steward.host import Host
from steward.kinds import KINDS
from steward.projections.store import Projector

RUNS = 1_000

STEWARD = [sys.executable, "-m", "steward"]
"""The command, as the venv's ``steward`` script starts it."""


async def _record(path: Path) -> None:
    """A log of `RUNS` runs, its projections caught up."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    host = Host(log, kinds=KINDS)
    settings = run_events.RunSettings(planning_gate=False, tools=())
    for chunk in range(0, RUNS, 100):
        await asyncio.gather(
            *(
                host.submit(
                    run_stream(f"r{n}"),
                    run_events.RunCreated(
                        run_id=f"r{n}", input_text=f"task {n}", settings=settings
                    ),
                )
                for n in range(chunk, chunk + 100)
            )
        )
    projector = await Projector.open(path, KINDS)
    await projector.catch_up(log)
    await projector.close()
    await log.close()


ENVIRON = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The commands' environment: a user's, whose bytecode cache is written."""


def _seconds(argv: list[str], cwd: Path) -> float:
    """The wall time of ``steward ARGV`` in ``cwd``, from start to exit."""
    started = time.perf_counter()
    done = subprocess.run(
        [*STEWARD, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env=ENVIRON,
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"steward {' '.join(argv)}: {done.stderr.strip()}")
    return took


async def run() -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        db = cwd / "log.db"
        await _record(db)
        lines = {
            "command line: --help": ["--help"],
            f"command line: runs list ({RUNS:,} runs)": [
                "--db",
                str(db),
                "runs",
                "list",
            ],
            "command line: sessions send ID TEXT --no-wait": [
                "--db",
                str(db),
                "sessions",
                "send",
                "cli:bench",
                "hello",
                "--no-wait",
            ],
        }
        targets = [250.0, 500.0, 400.0]
        for argv in lines.values():  # warm the disk cache, open the session
            _seconds(argv, cwd)
        times: dict[str, list[float]] = {name: [] for name in lines}
        for _ in range(REPEATS):  # alternated, so drift hits each alike
            for name, argv in lines.items():
                times[name].append(_seconds(argv, cwd))
    return [
        Figure(name, median(times[name]) * 1000, "ms", target, higher_is_better=False)
        for name, target in zip(lines, targets, strict=True)
    ]
