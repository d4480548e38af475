"""The `steward` command line: bad input gets one clear line, good input works."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support import PLAN, act

from steward import cli
from steward.actors.run import events as run_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS


def steward(*argv: str) -> int:
    return cli.main(list(argv))


def write_script(path: Path, replies: list[str]) -> Path:
    path.write_text(json.dumps({"replies": [{"text": r} for r in replies]}))
    return path


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.yaml", "replies:\n  - texx: 1\n", "bad.yaml: replies[0].texx: unknown"),
        ("bad.json", '{"replies": [', "bad.json"),
        ("empty.yaml", "", "empty.yaml"),
    ],
)
def test_an_invalid_script_is_named_with_its_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    expected: str,
) -> None:
    script = tmp_path / name
    script.write_text(text)
    code = steward("--db", str(tmp_path / "l.db"), "--script", str(script), "run", "x")
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[run]\nmax_iterations = "lots"\n', "run.max_iterations: expected int"),
        ("[run\n", "line 1: invalid TOML"),
        ("[run]\nmax_iteration = 3\n", "max_iteration"),
        ('[log]\nsynchronous = "SOMETIMES"\n', "log.synchronous"),
    ],
)
def test_an_invalid_config_is_named_with_its_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    config = tmp_path / "steward.toml"
    config.write_text(text)
    code = steward(
        "--config", str(config), "--db", str(tmp_path / "l.db"), "runs", "list"
    )
    err = capsys.readouterr().err
    assert code == 2
    assert str(config) in err and expected in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", "nope"],
        ["replay", "nope", "--verify"],
        ["fork", "nope", "--at", "3"],
        ["events", "export", "nope"],
    ],
)
def test_an_unknown_id_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A command that takes an actor of any kind names the streams it looked
    for, of every kind, and where the ids there are are listed."""
    asyncio.run(_create_log(tmp_path / "l.db"))
    code = steward("--db", str(tmp_path / "l.db"), *argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        "steward: no actor 'nope' in the log (no stream run.nope, session.nope, "
        "workflow.nope or task.nope); each kind's `list` command shows their ids"
    )


def test_an_unknown_run_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs cancel` takes runs only, and says so of an id it cannot find."""
    asyncio.run(_create_log(tmp_path / "l.db"))
    code = steward("--db", str(tmp_path / "l.db"), "runs", "cancel", "nope")
    err = capsys.readouterr().err
    assert code == 2
    assert (
        err.strip()
        == "steward: no run 'nope' in the log; `steward runs list` shows them"
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--limit", "0"], "argument --limit: '0' is not a whole number above 0"),
        (["--limit", "x"], "argument --limit: 'x' is not a whole number above 0"),
        (["--status", "done"], "argument --status: invalid choice: 'done'"),
    ],
)
def test_runs_list_refuses_a_bad_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        steward("--db", str(tmp_path / "l.db"), "runs", "list", *argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert expected in err.strip().splitlines()[-1]
    assert "Traceback" not in err


def test_run_streams_steps_then_show_export_replay_and_fork(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scripted run end to end through the commands an operator uses."""
    monkeypatch.chdir(tmp_path)  # the workspace is the working directory
    db = str(tmp_path / "l.db")
    script = write_script(
        tmp_path / "s.json",
        [
            *PLAN,
            act(
                type="tool_call",
                name="files.write",
                args={"path": "../x", "content": "y"},
            ),
            act(type="set_output", output="partial"),
            act(type="finish", output="all done"),
        ],
    )
    assert steward("--db", db, "--script", str(script), "run", "write x") == 0
    out = capsys.readouterr().out
    assert "ToolResulted      error: path '../x' resolves outside the workspace" in out
    *_, status, output = out.strip().splitlines()
    run_id = status.split()[1]
    assert status == f"run {run_id} completed" and output == "all done"

    assert steward("--db", db, "runs", "show", run_id) == 0
    shown = capsys.readouterr().out
    assert "completed" in shown and "ToolRequested" in shown

    assert steward("--db", db, "events", "export", run_id) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    exported = [json.loads(line) for line in lines]
    assert [e["version"] for e in exported] == list(range(1, len(exported) + 1))
    assert exported[-1]["event"]["type"] == "RunCompleted"

    assert steward("--db", db, "replay", run_id, "--verify") == 0
    assert "verify: ok" in capsys.readouterr().out

    assert steward("--db", db, "fork", run_id, "--at", "4", "--no-run") == 2
    assert (
        "version 4 is inside a step (versions 4..6); fork at a version where a "
        "step ends: 3, 6, "
    ) in capsys.readouterr().err
    assert steward("--db", db, "fork", run_id, "--at", "6", "--no-run") == 0
    forked = capsys.readouterr().out.split()[-1]
    assert forked.startswith(f"{run_id}-fork")
    assert steward("--db", db, "events", "export", forked) == 0
    copied = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [e["event"]["type"] for e in copied] == [
        e["event"]["type"] for e in exported[:6]
    ]
    assert steward("--db", db, "replay", forked, "--verify") == 0


async def _create_log(path: Path) -> None:
    await (await SqliteEventLog.open(path, union=KINDS.union)).close()


def test_runs_list_on_an_empty_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_create_log(tmp_path / "l.db"))
    assert steward("--db", str(tmp_path / "l.db"), "runs", "list") == 0
    assert "no runs" in capsys.readouterr().out.lower()


def test_a_long_rebuild_reports_its_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """projections rebuild prints where it is on standard error while it works
    (at most every PROGRESS_EVERY seconds; here at every batch) and the
    result alone on standard output."""
    db = tmp_path / "log.db"

    async def fill() -> None:
        async with await SqliteEventLog.open(db, union=KINDS.union) as log:
            for n in range(60):
                notes = [
                    run_events.NoteRecorded(category="plan", content=str(i))
                    for i in range(100)
                ]
                await log.append(f"run.r{n}", notes, 0)

    asyncio.run(fill())
    monkeypatch.setattr(cli.env, "PROGRESS_EVERY", 0.0)
    assert steward("--db", str(db), "projections", "rebuild") == 0
    out, err = capsys.readouterr()
    assert out == "projections rebuilt through position 6000\n"
    assert err.startswith("projections: position 5,000 of 6,000 (83%, ")
    assert err.count("\n") == 1


def test_a_stalled_run_says_so_and_exits_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that only takes notes stalls the run: it says how many calls
    it made, the lists say it stalled, and `run` exits with its own status."""
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "l.db")
    notes = [act(type="note", category="plan", content=f"n{n}") for n in range(9)]
    script = write_script(tmp_path / "s.json", [*PLAN, *notes])
    code = steward("--db", db, "--script", str(script), "run", "Summarize notes.txt")
    out = capsys.readouterr().out.splitlines()
    assert code == 6
    assert out[-2].endswith("completed unfinished (stalled)"), out
    assert out[-1] == (
        "I could not finish this: I stopped after 5 model calls, the last 5 in a "
        "row making no progress (no tool call, message or answer)."
    )
    run_id = out[-2].split()[1]
    assert steward("--db", db, "runs", "list") == 0
    listed = capsys.readouterr().out.splitlines()[1].split()
    assert listed[:3] == [run_id, "completed", "(stalled)"]
    assert steward("--db", db, "runs", "show", run_id, "-o", "json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["status"], shown["reason"]) == ("completed", "stalled")
