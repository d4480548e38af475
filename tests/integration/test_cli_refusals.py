"""What the `steward` command refuses, and how: another program's database,
an empty run, an operator command the run's state does not allow; and what
it no longer refuses: options of every command after the command, a
``STEWARD_*`` variable that names no setting."""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from steward import cli, events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def steward(*argv: str) -> int:
    return cli.main(list(argv))


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The exit status of ``steward ARGV`` (an argument error's too) and its
    standard error, which must be one line."""
    try:
        code = steward(*argv)
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return code, err.rstrip("\n")


def shop(path: Path) -> None:
    """An SQLite file of another program: a shop's customers and a calendar's
    ``events`` (a name steward's earliest logs used for their table)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('Ada')")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, title TEXT)")
    conn.close()


def tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master ORDER BY name")
        names = [name for (name,) in rows]
    conn.close()
    return names


# -- another program's database --------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--log", "{db}", "runs", "start", "x", "--wait", "0"],
        ["--db", "{db}", "runs", "list"],
        ["--log", "sqlite://{db}", "projections", "rebuild"],
        # the projections file of a nats:// log: refused before connecting
        ["--log", "nats://127.0.0.1:1", "--db", "{db}", "runs", "list"],
        ["--db", "{db}", "--script", "s.yaml", "serve"],
        ["--db", "{db}", "demo"],
    ],
)
def test_another_programs_database_is_refused_and_left_as_it_was(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    """--log or --db naming an SQLite file with tables, none of them
    steward's, is one line naming the file, exit 2; the file keeps its
    tables and rows and gains none (nor a lock file beside it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("replies:\n  - text: hi\n")
    db = tmp_path / "shop.db"
    shop(db)
    before = sorted(os.listdir(tmp_path))
    code, err = refused(capsys, *[a.format(db=db) for a in argv])
    assert code == 2
    assert err.startswith(f"steward: {db} is not a steward log: ")
    assert "customers, events" in err
    assert tables(db) == ["customers", "events"]
    assert sorted(os.listdir(tmp_path)) == before


def test_an_empty_file_and_a_steward_log_still_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new, empty file becomes a log; the golden log of an earlier steward
    opens as before."""
    empty = tmp_path / "empty.db"
    empty.touch()
    assert steward("--log", str(empty), "runs", "start", "x", "--wait", "0") == 0
    golden = tmp_path / "subagents.db"
    golden.write_bytes((GOLDEN / "subagents.db").read_bytes())
    assert steward("--log", str(golden), "runs", "start", "y", "--wait", "0") == 0
    assert (
        asyncio.run(_head(golden))
        == len((GOLDEN / "subagents.jsonl").read_bytes().splitlines()) + 1
    )


# -- options of every command, after it too ------------------------------------


def test_options_of_every_command_may_follow_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`steward run --script f.yaml "x"` runs as `steward --script f.yaml run
    "x"` does; an option given on both sides takes the one after."""
    script = tmp_path / "f.yaml"
    script.write_text(
        "replies:\n"
        '  - text: \'{"type": "note", "category": "requirements", "content": "r"}\'\n'
        '  - text: \'{"type": "note", "category": "plan", "content": "p"}\'\n'
        '  - text: \'{"type": "finish", "output": "done"}\'\n'
    )
    db = str(tmp_path / "l.db")
    code = steward(
        "--db", str(tmp_path / "other.db"), "run", "--script", str(script),
        "x", "--db", db, "-q",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[-1] == "done"
    assert not (tmp_path / "other.db").exists()
    assert asyncio.run(_head(tmp_path / "l.db")) > 0


# -- connection errors ------------------------------------------------------------


def test_a_nats_log_with_nothing_listening_is_one_line(tmp_path: Path) -> None:
    """`--log nats://...` where no server listens says so in one line (no
    warnings before it), exit 2."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    done = subprocess.run(
        [sys.executable, "-m", "steward", "--log", f"nats://127.0.0.1:{port}"]
        + ["runs", "list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"steward: cannot connect to NATS at nats://127.0.0.1:{port}: "
    )
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "no servers available" not in done.stderr  # the attempt's own error


# -- the environment ----------------------------------------------------------


def test_a_variable_that_names_no_setting_is_warned_of_once(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``STEWARD_*`` variable that names no setting is one warning line on
    stderr naming it, and the command goes on; a known one still applies."""
    monkeypatch.setenv("STEWARD_RUNS_X", "3")
    monkeypatch.setenv("STEWARD_RUN_MAX_ITERATION", "3")
    monkeypatch.setenv("STEWARD_LOG_URL", str(tmp_path / "l.db"))
    code = steward("runs", "start", "x", "--wait", "0")
    err = capsys.readouterr().err
    assert code == 0
    assert err.startswith("steward: warning: ignoring ")
    assert "STEWARD_RUNS_X" in err and "STEWARD_RUN_MAX_ITERATION" in err
    assert len(err.splitlines()) == 1, err
    assert (tmp_path / "l.db").exists()


def test_a_bad_value_of_a_known_variable_is_still_an_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A known variable with a bad value stops the command, naming it."""
    monkeypatch.setenv("STEWARD_RUN_MAX_ITERATIONS", "lots")
    code, err = refused(capsys, "--db", str(tmp_path / "l.db"), "runs", "list")
    assert code == 2
    assert "STEWARD_RUN_MAX_ITERATIONS: run.max_iterations: expected int" in err


# -- an empty run ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "  \n\t"])
@pytest.mark.parametrize("command", [["runs", "start"], ["run"]])
def test_a_run_with_no_input_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    text: str,
) -> None:
    """`runs start ""` (or blank) queues nothing: one line, exit 2, no log."""
    db = tmp_path / "l.db"
    code, err = refused(capsys, "--db", str(db), *command, text)
    assert code == 2
    assert "the run's input is empty" in err
    assert not db.exists()


# -- a state that does not allow the command -------------------------------------


async def _golden_log(path: Path, name: str) -> None:
    """A SQLite log holding the golden log ``name``'s events."""
    lines = (GOLDEN / f"{name}.jsonl").read_bytes().splitlines()
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        for rec in (events.recorded_from_json(line, KINDS.union) for line in lines):
            await log.append(rec.stream, [rec.event], rec.version - 1, at=rec.at)


@pytest.mark.parametrize(
    ("golden", "argv", "said"),
    [
        ("cancel", ["runs", "cancel", "cancel"], "run cancel is cancelled"),
        ("cancel", ["runs", "approve", "cancel"], "run cancel is cancelled"),
        ("cancel", ["runs", "deny", "cancel", "--reason", "no"], "is cancelled"),
        ("sleep_wake", ["runs", "approve", "sleep-wake"], "is completed"),
        ("workflow", ["workflow", "cancel", "wf-cancel"], "is cancelled"),
        ("workflow", ["workflow", "resume", "wf-loop"], "is completed"),
    ],
)
def test_a_command_the_state_does_not_allow_exits_1(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    golden: str,
    argv: list[str],
    said: str,
) -> None:
    """cancel, approve, deny, pause and resume of a run whose state does not
    allow it: one line on stderr saying its state, exit 1, nothing recorded."""
    db = tmp_path / "l.db"
    asyncio.run(_golden_log(db, golden))
    code, err = refused(capsys, "--db", str(db), *argv)
    assert code == 1
    assert said in err and err.startswith("steward: ")
    assert capsys.readouterr().out == ""
    assert asyncio.run(_head(db)) == len(
        (GOLDEN / f"{golden}.jsonl").read_bytes().splitlines()
    )


async def _head(path: Path) -> int:
    async with await SqliteEventLog.open(path, union=KINDS.union) as log:
        return await log.head()


def test_approve_of_a_run_that_waits_for_nothing_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A queued run can be cancelled (exit 0) but not approved (exit 1);
    once cancelled, neither (exit 1)."""
    db = str(tmp_path / "l.db")
    assert steward("--db", db, "runs", "start", "x", "--wait", "0") == 0
    run_id = capsys.readouterr().out.strip()
    code, err = refused(capsys, "--db", db, "runs", "approve", run_id)
    assert (code, err) == (
        1,
        f"steward: run {run_id} is pending: it waits for no approval, so there "
        "is nothing to approve",
    )
    assert steward("--db", db, "runs", "cancel", run_id) == 0
    assert capsys.readouterr().out == f"run {run_id} is now cancelled\n"
    code, err = refused(capsys, "--db", db, "runs", "cancel", run_id)
    assert (code, err) == (
        1,
        f"steward: run {run_id} is cancelled: it cannot be cancelled",
    )
