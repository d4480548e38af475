"""The console's page of a long run: how soon a 20,000-event run's page is
ready, the whole HTML of its first view served.

A run of 6,667 steps (20,003 events) is recorded by a host with the scripted
model; the console is opened on its log with the projections caught up (as
a `serve` keeps them), and its page asked for over ASGI, with nothing of the
run read yet (the first paint), then again (the history cached, only what
was appended since read), then its timeline view (every step laid out and
the run's children looked up, a page of bars drawn).

Target (issue #33): the first paint of a 20,000-event run's page under a
second.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from statistics import median

import httpx

from benchmarks.common import REPEATS, Figure
from benchmarks.runtime_bench import _replies
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import SqliteEventLog
from steward.console.app import Console, create_app
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS
from steward.projections.store import Projector

STEPS = 6_667
"""Steps of the run: three events each, 20,003 in all."""


async def _record(path: Path) -> str:
    """Record the long run in the log at ``path``; its stream."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    host = Host(
        log,
        provider=ScriptedProvider(_replies(STEPS), per_run=True),
        tools=ToolRegistry.with_builtins(),
        workspace=path.parent,
        kinds=KINDS,
    )
    done = asyncio.Event()
    host.listen(
        lambda rec: done.set() if type(rec.event) is run_events.RunCompleted else None
    )
    await host.start()
    settings = run_events.RunSettings(
        max_iterations=STEPS + 1, planning_gate=False, tools=()
    )
    stream = run_stream("long")
    await host.submit(
        stream, run_events.RunCreated(run_id="long", input_text="go", settings=settings)
    )
    await asyncio.wait_for(done.wait(), timeout=600)
    await host.stop()
    await log.close()
    return stream


async def _paints(path: Path, stream: str) -> tuple[float, float, float, int]:
    """Seconds to the first and a second page of ``stream``, from a console
    opened afresh, then to its timeline view (its steps laid out, its
    children looked up); and how many events the run has."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    projector = await Projector.open(path, KINDS)
    await projector.catch_up(log)
    console = Console(log, projector, KINDS)
    transport = httpx.ASGITransport(app=create_app(console))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://c") as web:
            times = []
            for _ in range(2):
                started = time.perf_counter()
                page = await web.get("/actor", params={"stream": stream})
                times.append(time.perf_counter() - started)
                if page.status_code != 200 or "data-version" not in page.text:
                    raise RuntimeError(f"the page failed: {page.status_code}")
            started = time.perf_counter()
            page = await web.get(
                "/actor", params={"stream": stream, "view": "timeline"}
            )
            times.append(time.perf_counter() - started)
            if page.status_code != 200 or "<rect" not in page.text:
                raise RuntimeError(f"the timeline failed: {page.status_code}")
        count = await log.version(stream)
    finally:
        await projector.close()
        await log.close()
    return times[0], times[1], times[2], count


async def run() -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.db"
        stream = await _record(path)
        measured = [await _paints(path, stream) for _ in range(REPEATS)]
    count = measured[0][3]
    if count < 20_000:
        raise RuntimeError(f"the run has {count} events, not 20,000")
    return [
        Figure(
            f"console: first paint of a {count:,}-event run's page",
            median(m[0] for m in measured) * 1000,
            "ms",
            1000.0,
            higher_is_better=False,
        ),
        Figure(
            "console: the same page again (history cached)",
            median(m[1] for m in measured) * 1000,
            "ms",
            None,
            higher_is_better=False,
        ),
        Figure(
            "console: its timeline view (history cached)",
            median(m[2] for m in measured) * 1000,
            "ms",
            None,
            higher_is_better=False,
        ),
    ]
