"""`steward demo`: a scripted run with a tool, a subagent and a sleep, its
timeline, and every run of it verified."""

from __future__ import annotations

import argparse
import shutil
from importlib import resources
from pathlib import Path

from msgspec.structs import replace

from steward import replay
from steward.actors.run.cli import cmd_runs_show, new_run
from steward.cli.env import Env, ensure_place, opened
from steward.cli.history import report
from steward.cli.hosting import see_run
from steward.errors import StewardError
from steward.hostlock import HostLock


async def cmd_demo(env: Env, args: argparse.Namespace) -> int:
    ensure_place(env.db)
    lock = HostLock(env.db)
    if not lock.acquire():
        raise StewardError(lock.refusal())
    lock.release()
    workspace = env.db.parent / "demo-workspace"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{env.db}{suffix}").unlink(missing_ok=True)
    script = resources.files("steward") / "demo.yaml"
    with resources.as_file(script) as path:
        env.script = str(path)
        tools = replace(env.settings.tools, workspace=str(workspace))
        env.settings = replace(env.settings, tools=tools)
        created = await new_run(
            env,
            "Write a note, have a helper read it back, rest a moment, then report.",
            "default",
        )
        env.out(f"demo: run {created.run_id} (scripted model, workspace {workspace})")
        async with opened(env) as (log, projector):
            status = await see_run(
                env, log, projector, created.run_id, False, created=created
            )
    env.out("")
    shown = argparse.Namespace(id=created.run_id, prompts=False, output="text")
    await cmd_runs_show(env, shown)
    env.out("")
    async with opened(env) as (log, _):
        streams = await log.streams("run.")
        worst = 0
        for stream in streams:
            records = await log.read(stream)
            mismatch = replay.verify(records, kinds=env.kinds)
            if mismatch is not None:
                env.out(f"{stream}:")
                worst = max(worst, report(env, mismatch))
    if worst == 0:
        env.out(f"verify: ok ({len(streams)} runs re-decided from the log)")
    return worst or status
