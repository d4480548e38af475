"""The metrics' labels stay bounded: 1,000 runs (each with a model call, a
tool call, one calling a tool the model made up) add no series over what
the first ten made; no label holds an actor's id."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support import act

from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import SqliteEventLog
from steward.config import Settings
from steward.config.settings import RunConfig
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS


def series() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every sample of steward's families: its name and labels."""
    text = generate_latest(REGISTRY).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        if family.name.startswith(("steward", "gen_ai"))
        for sample in family.samples
    }


async def test_a_thousand_runs_add_no_series(tmp_path: Path) -> None:
    def reply(prompt: object, info: object) -> str:
        n = int(str(getattr(info, "run_id", "r0")).removeprefix("r"))
        if len(getattr(prompt, "messages", ())) > 1:
            return act(type="finish", output="done")
        tool = "files.list" if n % 2 else f"made.up{n}"
        return act(type="tool_call", name=tool, args={"path": "."})

    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    tools = ToolRegistry.with_builtins()
    host = Host(
        log,
        provider=ScriptedProvider(reply),
        tools=tools,
        workspace=workspace,
        kinds=KINDS,
    )
    await host.start()
    run = Settings(run=RunConfig(planning_gate=False)).run_settings(
        "default", tools.specs()
    )
    counted: list[int] = []
    try:
        for batch in (range(10), range(10, 1000)):
            await asyncio.gather(
                *(
                    host.submit(
                        run_stream(f"r{n}"),
                        run_events.RunCreated(
                            run_id=f"r{n}", input_text="go", settings=run
                        ),
                    )
                    for n in batch
                )
            )
            assert await host.settle(120)
            counted.append(len(series()))
    finally:
        await host.stop()
        await log.close()
    ended = await log_status(tmp_path)
    assert ended == {"completed": 1000}
    assert counted[0] == counted[1], counted
    labels = {value for _, pairs in series() for _, value in pairs}
    assert not any(value.startswith("r") and value[1:].isdigit() for value in labels)


async def log_status(tmp: Path) -> dict[str, int]:
    log = await SqliteEventLog.open(tmp / "log.db", union=KINDS.union)
    try:
        out: dict[str, int] = {}
        for stream in await log.streams("run."):
            last = (await log.read(stream))[-1].event
            status = (
                "completed" if isinstance(last, run_events.RunCompleted) else "other"
            )
            out[status] = out.get(status, 0) + 1
        return out
    finally:
        await log.close()
