"""Projection files of an older schema are rebuilt from the log on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from steward import events
from steward.actors.run import events as run_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS
from steward.projections.store import Projector, schema_version


async def test_an_old_schema_is_dropped_and_rebuilt_from_the_log(
    tmp_path: Path,
) -> None:
    log_path, proj_path = tmp_path / "log.db", tmp_path / "proj.db"
    async with await SqliteEventLog.open(log_path, union=KINDS.union) as log:
        start = run_events.RunCreated(
            run_id="r1", input_text="hello", settings=run_events.RunSettings()
        )
        await log.append("run.r1", [start, run_events.RunStarted()], 0)
        with sqlite3.connect(proj_path) as old:  # a file from before cost_usd
            old.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, status TEXT)")
            old.execute("CREATE TABLE projection_checkpoint (name TEXT, position INT)")
            old.execute("INSERT INTO projection_checkpoint VALUES ('main', 99)")
        old.close()
        projector = await Projector.open(proj_path, kinds=KINDS)
        try:
            assert projector.position == 0  # the old checkpoint went with its tables
            await projector.catch_up(log)
            rows = await projector.query("SELECT id, status, cost_usd FROM runs")
        finally:
            await projector.close()
    assert rows == [("r1", "running", 0.0)]
    with sqlite3.connect(proj_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (
            schema_version(KINDS),
        )
    conn.close()


async def test_two_projectors_on_one_file_apply_each_event_once(
    tmp_path: Path,
) -> None:
    """A serve projecting and a `runs list` catching up in another process
    share one file: each event is applied once, so tokens are not doubled."""
    log_path = tmp_path / "log.db"
    async with await SqliteEventLog.open(log_path, union=KINDS.union) as log:
        start = run_events.RunCreated(
            run_id="r1", input_text="hello", settings=run_events.RunSettings()
        )
        asked = events.LlmRequested(request_id="r1/llm/1", iteration=1, prompt_hash="")
        reply = events.LlmResponded(
            request_id="r1/llm/1", text="hi", usage=events.Usage(input_tokens=7)
        )
        await log.append("run.r1", [start, run_events.RunStarted(), asked], 0)
        serve = await Projector.open(log_path, kinds=KINDS)
        await serve.catch_up(log)
        lister = await Projector.open(log_path, kinds=KINDS)  # opens at checkpoint 3
        try:
            await log.append("run.r1", [reply], 3)
            await serve.catch_up(log)
            await lister.catch_up(log)  # its checkpoint in memory is still 3
            serve_rows = await serve.query("SELECT input_tokens FROM runs")
            assert lister.position == serve.position == 4
        finally:
            await serve.close()
            await lister.close()
    assert serve_rows == [(7,)]


async def test_a_cancelled_parent_leaves_no_child_to_create(tmp_path: Path) -> None:
    """A run cancelled before its children were created leaves no pending
    spawn row that a restarted host would act on."""
    async with await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union) as log:
        start = run_events.RunCreated(
            run_id="p", input_text="hello", settings=run_events.RunSettings()
        )
        child = run_events.SubagentSpec(run_id="p-1", input_text="look")
        spawned = run_events.SubagentsSpawned(children=(child,))
        cancelled = run_events.RunCancelled(reason="stop", children=("p-1",))
        await log.append("run.p", [start, run_events.RunStarted(), spawned], 0)
        await log.append("run.p", [events.CancelRequested(reason="stop"), cancelled], 3)
        projector = await Projector.open(tmp_path / "log.db", kinds=KINDS)
        try:
            await projector.catch_up(log)
            rows = await projector.query("SELECT key, kind FROM pending")
        finally:
            await projector.close()
    assert ("spawn:p-1", "spawn") not in rows, rows
