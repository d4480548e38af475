"""script.run, a task program's ``system:run_script``: a shell command in the
workspace, its exit status and output as JSON; offered to no model."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from steward.effects.tools import ToolContext, ToolRegistry


async def run(workspace: pathlib.Path, command: str) -> dict[str, Any]:
    ctx = ToolContext(workspace=workspace, stream="task.t1")
    outcome = await ToolRegistry.with_builtins().call(
        "script.run", {"command": command}, ctx=ctx
    )
    assert outcome.ok, outcome.error
    return dict(json.loads(outcome.output))


async def test_a_command_runs_in_the_workspace(tmp_path: pathlib.Path) -> None:
    (tmp_path / "here.txt").write_text("x")
    answer = await run(tmp_path, "ls; echo err >&2")
    assert answer["exit"] == 0
    assert "here.txt" in answer["output"] and "err" in answer["output"]


async def test_a_failing_command_is_an_answer_not_a_failed_call(
    tmp_path: pathlib.Path,
) -> None:
    answer = await run(tmp_path, "echo 1 test failed; exit 3")
    assert answer == {"exit": 3, "output": "1 test failed\n"}


async def test_a_command_past_its_time_is_stopped(tmp_path: pathlib.Path) -> None:
    ctx = ToolContext(workspace=tmp_path, stream="run.t1")
    outcome = await ToolRegistry.with_builtins().call(
        "script.run", {"command": "sleep 30"}, ctx=ctx, timeout=0.2
    )
    assert not outcome.ok and "0.2" in (outcome.error or "")


def test_no_model_is_offered_script_run() -> None:
    registry = ToolRegistry.with_builtins()
    assert "script.run" in registry
    assert "script.run" not in [s.name for s in registry.specs()]
    assert registry.specs(["script.run"]) == ()


async def test_a_command_past_its_time_is_stopped_with_its_children(
    tmp_path: pathlib.Path,
) -> None:
    """At its time limit the command's whole process group is killed: the
    child it started (holding the output pipe) is gone, or a zombie, when
    the call ends."""
    ctx = ToolContext(workspace=tmp_path, stream="run.t1")
    command = {"command": "sleep 30 > /dev/null 2>&1 & echo $! > p; wait"}
    registry = ToolRegistry.with_builtins()
    outcome = await registry.call("script.run", command, ctx=ctx, timeout=0.5)
    assert not outcome.ok
    child = pathlib.Path(f"/proc/{(tmp_path / 'p').read_text().strip()}/status")
    if child.exists():  # not reaped yet: killed all the same
        assert "State:\tZ" in child.read_text()
