"""MCP servers through the command line, as a user runs them: a scripted
run that calls a server's tools (its tool list recorded, so it verifies
with the server gone or changed), `steward mcp list` and `mcp call`, and a
call in flight when the host is killed (made again on the next host for an
``idempotent`` server, recorded as of unknown outcome otherwise)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_support import SERVER, calls
from support import act, steward_process, stop_all

from steward import events, replay
from steward.actors.run import events as run_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parents[2] / "examples/mcp"


def config(
    tmp: Path, table: str = "", *, command: str = sys.executable, version: int = 1
) -> None:
    """``steward.toml`` with the test server as ``[mcp.notes]`` (its tools'
    ``version``), the default profile using it; ``table`` added to it."""
    (tmp / "steward.toml").write_text(
        f"""
[run]
planning_gate = false
[agents.default]
mcp = ["notes"]
tools = ["files.read"]
[mcp.notes]
command = {json.dumps(command)}
args = [{json.dumps(str(SERVER))}]
env = {{ MCP_STATE = {json.dumps(str(tmp))}, MCP_TOOLS = "{version}" }}
deny = ["die"]
{table}
"""
    )


def script(tmp: Path, *replies: str) -> None:
    (tmp / "s.json").write_text(json.dumps({"replies": [{"text": r} for r in replies]}))


def steward(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", "--db", "log.db", *argv],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def records(tmp: Path, stream: str | None = None) -> list[events.Recorded]:
    log = await SqliteEventLog.open(tmp / "log.db", union=KINDS.union)
    try:
        if stream is None:
            (stream,) = await log.streams("run.")
        return await log.read(stream)
    finally:
        await log.close()


async def test_a_run_records_the_tools_it_was_offered_and_verifies_without_them(
    tmp_path: Path,
) -> None:
    config(tmp_path)
    script(
        tmp_path,
        act(type="tool_call", name="notes.add", args={"text": "buy milk"}),
        act(type="tool_call", name="notes.media", args={}),
        act(type="finish", output="noted"),
    )
    ran = steward(tmp_path, "--script", "s.json", "run", "note milk")
    assert ran.returncode == 0, ran.stderr[-2000:]
    recorded = await records(tmp_path)
    opened = recorded[0].event
    assert isinstance(opened, run_events.RunCreated)
    offered = {t.name: t for t in opened.settings.tools}
    assert "notes.die" not in offered and "files.write" not in offered
    assert offered["notes.add"].description == "Add a note."
    assert offered["notes.add"].parameters["required"] == ["text"]
    results = [r.event for r in recorded if isinstance(r.event, events.ToolResulted)]
    assert [r.output for r in results] == [
        "added note 1",
        "a picture and a file\n[image image/png, 32 bytes]\n"
        "[resource file:///notes.txt]\none\ntwo",
    ]
    shown = steward(tmp_path, "runs", "show", opened.run_id)
    assert "[image image/png, 32 bytes]" in shown.stdout, shown.stderr

    # the server gone: the old run still verifies, asking it nothing
    config(tmp_path, command="/nonexistent/python")
    verified = steward(tmp_path, "replay", "--verify", opened.run_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert calls(tmp_path) == ["add buy milk", "media "]

    # the server's tools changed: a new run is offered the new list, the
    # old one keeps the one it recorded
    config(tmp_path, version=2)
    script(tmp_path, act(type="finish", output="nothing to do"))
    again = steward(tmp_path, "--script", "s.json", "run", "look")
    assert again.returncode == 0, again.stderr[-2000:]
    log = await SqliteEventLog.open(tmp_path / "log.db", union=KINDS.union)
    try:
        streams = await log.streams("run.")
        first = await log.read(f"run.{opened.run_id}")
        (newer,) = [s for s in streams if s != f"run.{opened.run_id}"]
        second = await log.read(newer)
    finally:
        await log.close()
    new_tools = {t.name: t for t in second[0].event.settings.tools}
    assert new_tools["notes.add"].description == "Add a note (version 2)."
    assert "notes.extra" in new_tools
    assert first[0].event == opened
    assert replay.verify(first, kinds=KINDS) is None


def test_mcp_list_and_call(tmp_path: Path) -> None:
    config(
        tmp_path,
        'require_approval = ["add"]\n[mcp.web]\nurl = "http://127.0.0.1:1/mcp"',
    )
    listed = steward(tmp_path, "mcp", "list")
    assert listed.returncode == 1, listed.stderr  # web is unreachable
    lines = listed.stdout.splitlines()
    assert lines[0] == f"notes  stdio  {sys.executable} {SERVER}  ok"
    assert lines[1].split() == ["TOOL", "DESCRIPTION"]
    assert lines[2].split() == [
        "notes.add",
        "Add",
        "a",
        "note.",
        "(asks",
        "for",
        "approval)",
    ]
    assert not any("notes.die" in line for line in lines)
    assert (
        "  left out: spaced name: its name is not 1-64 letters, digits, _, - or ."
        in lines
    )
    assert lines[-1].startswith("web  http  http://127.0.0.1:1/mcp  unreachable: ")
    as_json = steward(tmp_path, "mcp", "list", "-o", "json")
    servers = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(s["server"], s["reachable"]) for s in servers] == [
        ("notes", True),
        ("web", False),
    ]
    assert servers[0]["tools"][0]["parameters"]["required"] == ["text"]

    called = steward(tmp_path, "mcp", "call", "notes.add", "--args", '{"text": "hi"}')
    assert (called.returncode, called.stdout) == (0, "added note 1\n"), called.stderr
    failed = steward(tmp_path, "mcp", "call", "notes.fail")
    assert failed.returncode == 1
    assert failed.stderr == "steward: Error executing tool fail\n"
    # the server's own account of it is in its log, beside the log's file
    assert "ValueError: the disk is full" in (tmp_path / "mcp/notes.log").read_text()
    bad = steward(tmp_path, "mcp", "call", "notes.add", "--args", "{text")
    assert bad.returncode == 2 and bad.stderr.startswith("steward: --args is not JSON")
    unknown = steward(tmp_path, "mcp", "call", "files.read")
    assert unknown.returncode == 2
    assert "'files.read' is no MCP server's tool" in unknown.stderr
    assert calls(tmp_path) == ["add hi", "fail "]


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_call_in_flight_when_the_host_is_killed(
    tmp_path: Path, idempotent: bool
) -> None:
    config(tmp_path, f"idempotent = {json.dumps(idempotent)}")
    script(
        tmp_path,
        act(type="tool_call", name="notes.hold", args={"name": "a"}),
        act(type="finish", output="after"),
    )
    runner = steward_process(
        tmp_path, "--db", "log.db", "--script", "s.json", "run", "hold"
    )
    serve = None
    try:
        for _ in range(600):
            if calls(tmp_path) == ["hold a"]:
                break
            await asyncio.sleep(0.05)
        assert calls(tmp_path) == ["hold a"], runner.stderr
        runner.kill()
        (tmp_path / "release").touch()  # the killed host's server may end
        runner.communicate()
        serve = steward_process(
            tmp_path, "--db", "log.db", "--script", "s.json", "serve"
        )
        for _ in range(600):
            recorded = await records(tmp_path)
            if any(isinstance(r.event, run_events.RunCompleted) for r in recorded):
                break
            await asyncio.sleep(0.05)
    finally:
        (tmp_path / "release").touch()  # no server is left holding
        errors = stop_all([p for p in (runner, serve) if p is not None])
    (result,) = [r.event for r in recorded if isinstance(r.event, events.ToolResulted)]
    assert isinstance(recorded[-1].event, run_events.RunCompleted), errors
    if idempotent:
        assert (result.ok, result.output) == (True, "held a")
        assert calls(tmp_path) == ["hold a", "hold a"]
    else:
        assert not result.ok and not result.retryable
        assert "whether it took effect is unknown" in (result.error or "")
        assert calls(tmp_path) == ["hold a"]
    assert replay.verify(recorded, kinds=KINDS) is None


def test_a_server_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    """Its exit status and the last lines of its standard error, and where
    the rest of it is."""
    (tmp_path / "steward.toml").write_text(
        '[mcp.notes]\ncommand = "/bin/sh"\nargs = ["-c", "echo starting >&2; '
        "echo one >&2; echo two >&2; echo \\\"No module named 'mcp'\\\" >&2; "
        'exit 3"]\n'
    )
    listed = steward(tmp_path, "mcp", "list")
    assert listed.returncode == 1
    [line] = listed.stdout.splitlines()
    assert line.startswith("notes  stdio  /bin/sh -c ")
    assert line.endswith(
        "unreachable: could not start: MCPError: Connection closed; it exited "
        "with status 3; its standard error ends: one | two | No module named "
        "'mcp' (all of it in mcp/notes.log)"
    ), line


def test_the_readme_example_lists_and_runs(tmp_path: Path) -> None:
    """examples/mcp as README shows it, run from a copy of the repository's
    layout with ``.venv/bin/steward`` and no venv activated (its ``bin``
    not on PATH): its server listed, called by hand and by the scripted
    run; its notes are a file of their own, each note a line even after
    a hand-written last line without its end."""
    shutil.copytree(EXAMPLE, tmp_path / "examples/mcp")
    venv = Path(sys.executable).parent.parent
    (tmp_path / ".venv").symlink_to(venv)  # the clone's `make install`
    bare = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if Path(p).resolve() != (venv / "bin").resolve()
    )
    environ = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    (tmp_path / ".steward").mkdir()
    (tmp_path / ".steward/mcp-notes.txt").write_text("from before")  # no \n

    def example(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [".venv/bin/steward", "--config", "examples/mcp/steward.toml", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**environ, "PATH": bare},
        )

    listed = example("mcp", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "notes  stdio  .venv/bin/python examples/mcp/notes_server.py  ok",
        "  TOOL          DESCRIPTION",
        "  notes.add     Add a note (one line).",
        "  notes.count   How many notes there are.",
        "  notes.search  The notes that contain query, case ignored.",
    ]
    called = example("mcp", "call", "notes.add", "--args", '{"text": "buy milk"}')
    assert called.stdout == "note 2 added\n", called.stderr
    ran = example("run", "Keep a note about MCP")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.splitlines()[-1] == "Noted, and found it again."
    notes = (tmp_path / ".steward/mcp-notes.txt").read_text().splitlines()
    assert notes == ["from before", "buy milk", "steward records every MCP call"]
    assert not (tmp_path / ".steward/notes.txt").exists()  # the demo's own
