"""The `steward` command says what it does: no silent database, no traceback
on a closed pipe, one-line argument errors, forks that name what they accept,
times people can read and a metrics endpoint kept to this machine."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from steward.actors.run import events as run_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

STEWARD = str(Path(sys.executable).with_name("steward"))
PLAN = [
    {"json": {"type": "note", "category": "requirements", "content": "what"}},
    {"json": {"type": "note", "category": "plan", "content": "how"}},
]
FINISH = {"json": {"type": "finish", "output": "done"}}


def steward(cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed `steward` command in ``cwd`` with ``env`` added."""
    return subprocess.run(
        [STEWARD, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )


def script(path: Path, replies: list[Any]) -> str:
    path.write_text(json.dumps({"replies": replies}))
    return str(path)


def run_id(out: str) -> str:
    """The id of the run `run` reports completed (``run ID completed``)."""
    found = re.search(r"^run (\S+) completed$", out, re.MULTILINE)
    assert found, out
    return found[1]


def files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


# -- no silent database ----------------------------------------------------------


@pytest.mark.parametrize("url", ["postgres://x", "file:///tmp/x.db"])
def test_an_unknown_log_scheme_is_one_line_naming_the_accepted_ones(
    tmp_path: Path, url: str
) -> None:
    """--log with a scheme steward has no backend for exits 2 with one line
    naming the schemes it has, and creates nothing."""
    done = steward(tmp_path, "--log", url, "runs", "list")
    assert done.returncode == 2 and done.stdout == ""
    scheme = url.partition(":")[0]
    assert done.stderr == (
        f"steward: --log: {url}: there is no {scheme!r} backend; use "
        "sqlite:///abs/path, sqlite://rel/path, a plain path, nats://host:4222 "
        "or tls://host:4222\n"
    )
    assert files(tmp_path) == []


def test_a_log_url_in_the_settings_is_named_as_such(tmp_path: Path) -> None:
    """An unknown scheme in [log] url (here from STEWARD_LOG_URL) is named as
    the setting log.url."""
    done = steward(tmp_path, "runs", "list", STEWARD_LOG_URL="postgres://x")
    assert done.returncode == 2
    assert done.stderr.startswith("steward: settings: log.url: postgres://x: ")
    assert files(tmp_path) == []


@pytest.mark.parametrize("option", ["--log", "--db"])
def test_a_log_in_a_missing_directory_is_refused_naming_it(
    tmp_path: Path, option: str
) -> None:
    """A log file the user names in a directory that does not exist is refused
    (a mistyped path must not become a new, empty log)."""
    missing = tmp_path / "no" / "such"
    ok = script(tmp_path / "s.json", [*PLAN, FINISH])
    done = steward(
        tmp_path, option, str(missing / "x.db"), "--script", ok, "run", "hello"
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"steward: no directory {missing} for {missing / 'x.db'}; create it "
        "first (steward creates only its default .steward/ by itself)\n"
    )
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["runs", "show", "r1"],
        ["replay", "r1", "--verify"],
        ["events", "export", "r1"],
        ["--log", "sqlite://elsewhere/x.db", "runs", "list"],
    ],
)
def test_a_command_that_reads_creates_no_log(tmp_path: Path, argv: list[str]) -> None:
    """Read-only commands where there is no log say so in one line (exit 2)
    and leave the directory as it was."""
    done = steward(tmp_path, *argv)
    path = "elsewhere/x.db" if "--log" in argv else ".steward/steward.db"
    assert done.returncode == 2
    assert done.stderr == f"steward: no log at {path}; --log names another\n"
    assert files(tmp_path) == []


def test_a_command_that_writes_creates_the_default_log(tmp_path: Path) -> None:
    """A writing command in a fresh directory creates .steward/steward.db; a
    reading one then finds it (and an empty log has no runs)."""
    assert steward(tmp_path, "projections", "rebuild").returncode == 0
    assert (tmp_path / ".steward" / "steward.db").is_file()
    listed = steward(tmp_path, "runs", "list")
    assert (listed.returncode, listed.stdout) == (0, "no runs yet\n")


# -- a closed pipe ---------------------------------------------------------------


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A log whose run's timeline, prompts and events, and whose list of runs,
    are each far more than a pipe's buffer (64 KiB)."""
    tmp = tmp_path_factory.mktemp("big")
    replies = [
        {"json": {"type": "set_output", "output": f"part {n} " + "x" * 150}}
        for n in range(300)
    ]
    big = script(tmp / "big.json", [*PLAN, *replies, FINISH])
    done = steward(
        tmp, "--script", big, "run", "-q", "x" * 80, STEWARD_RUN_MAX_ITERATIONS="400"
    )
    assert done.returncode == 0, done.stderr
    first = next(
        line.split()[0] for line in steward(tmp, "runs", "list").stdout.splitlines()[1:]
    )

    async def copies() -> None:
        async with await SqliteEventLog.open(
            tmp / ".steward" / "steward.db", union=KINDS.union
        ) as log:
            created = (await log.read(f"run.{first}"))[0].event
            assert isinstance(created, run_events.RunCreated)
            for n in range(1500):
                await log.append(
                    f"run.copy{n}", [replace(created, run_id=f"copy{n}")], 0
                )

    asyncio.run(copies())
    return tmp, first


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "show", "ID"],
        ["runs", "show", "ID", "--prompts"],
        ["runs", "list", "--limit", "2000"],
        ["events", "export", "ID"],
    ],
)
def test_a_closed_pipe_ends_the_command_quietly(
    big_log: tuple[Path, str], argv: list[str]
) -> None:
    """`steward ... | head -1`: when the reader goes away, the command stops
    with status 141 (128 + SIGPIPE, as `yes | head` does) and says nothing."""
    tmp, first = big_log
    argv = [first if a == "ID" else a for a in argv]
    proc = subprocess.Popen(
        [STEWARD, *argv], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert (proc.wait(timeout=60), err) == (141, b"")


# -- fork --------------------------------------------------------------------------


def _suggested(stderr: str) -> list[int]:
    """The versions a fork refusal offers."""
    listed = stderr.rpartition("fork at a version where a step ends: ")[2]
    return [int(v) for v in re.findall(r"\d+", listed)]


def test_fork_refusals_name_the_versions_it_accepts_and_each_is(
    tmp_path: Path,
) -> None:
    """A fork before the first step, inside a step or past the end is one line
    naming the versions where steps end (a long list abbreviated, but with
    its first and last); a fork at each version named is accepted."""
    replies = [{"json": {"type": "set_output", "output": str(n)}} for n in range(12)]
    ok = script(tmp_path / "s.json", [*PLAN, *replies, FINISH])
    done = steward(tmp_path, "--script", ok, "run", "count")
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    exported = steward(tmp_path, "events", "export", rid).stdout.splitlines()
    last = len(exported)

    before = steward(tmp_path, "fork", rid, "--at", "0", "--no-run")
    inside = steward(tmp_path, "fork", rid, "--at", "4", "--no-run")
    past = steward(tmp_path, "fork", rid, "--at", "99", "--no-run")
    for refused in (before, inside, past):
        assert refused.returncode == 2
        assert len(refused.stderr.splitlines()) == 1
    assert before.stderr.startswith("steward: version 0 is before the run's first")
    assert inside.stderr.startswith("steward: version 4 is inside a step (versions 4")
    assert past.stderr.startswith(
        f"steward: version 99 is past the run's last version {last}; "
    )
    suggested = {v for r in (before, inside, past) for v in _suggested(r.stderr)}
    assert "…" in before.stderr
    assert min(suggested) == 3 and max(suggested) == last
    for version in sorted(suggested):
        forked = steward(tmp_path, "fork", rid, "--at", str(version), "--no-run")
        assert forked.returncode == 0, (version, forked.stderr)


def test_fork_exits_1_when_the_forked_run_fails(tmp_path: Path) -> None:
    """fork exits as run does: 0 when the forked run completes, 1 when it
    fails."""
    ok = script(tmp_path / "ok.json", [*PLAN, FINISH])
    done = steward(tmp_path, "--script", ok, "run", "hello")
    assert done.returncode == 0, done.stderr
    rid = run_id(done.stdout)
    failing = script(
        tmp_path / "fail.json", [{"error": {"kind": "auth", "message": "no key"}}]
    )
    failed = steward(tmp_path, "--script", failing, "fork", rid, "--at", "3", "-q")
    assert failed.returncode == 1, failed.stderr
    assert re.search(r"^run \S+-fork\S+ failed$", failed.stdout, re.M)
    again = steward(tmp_path, "--script", ok, "fork", rid, "--at", "3", "-q")
    assert again.returncode == 0, again.stderr
    assert re.search(r"^run \S+-fork\S+ completed$", again.stdout, re.M)


# -- argument errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["nope"],
            "steward: error: argument COMMAND: invalid choice: 'nope' (choose from "
            "'serve', 'worker', 'workers', 'log', 'replay', 'fork', 'events', "
            "'projections', 'run', 'runs', 'prompts', 'chat', 'sessions', "
            "'workflow', 'task', 'mcp', 'console', 'demo'); see `steward --help`",
        ),
        (
            ["runs", "list", "--limit", "0"],
            "steward runs list: error: argument --limit: '0' is not a whole number "
            "above 0; see `steward runs list --help`",
        ),
        (
            ["runs", "show"],
            "steward runs show: error: the following arguments are required: id; "
            "see `steward runs show --help`",
        ),
        (
            ["fork", "r1", "--at", "two"],
            "steward fork: error: argument --at: invalid int value: 'two'; "
            "see `steward fork --help`",
        ),
    ],
)
def test_an_argument_error_is_one_line(
    tmp_path: Path, argv: list[str], expected: str
) -> None:
    """A command line argparse refuses is one line naming the command and
    where its help is (no usage block), exit 2."""
    done = steward(tmp_path, *argv)
    assert (done.returncode, done.stderr) == (2, expected + "\n")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["sessions", "show", "cli:" + os.fsdecode(b"\xff")],
            "steward sessions show: error: argument id: 'cli:\\udcff' holds a byte "
            "that is not UTF-8; an id is printable text; see `steward sessions "
            "show --help`",
        ),
        (
            ["replay", "session.cli:a\x1b[31m"],
            "steward replay: error: argument id: 'session.cli:a\\x1b[31m' holds "
            "the control character \\x1b; an id is printable text; see `steward "
            "replay --help`",
        ),
        (
            ["chat", "--chat", "a\x01"],
            "steward chat: error: argument --chat: 'a\\x01' holds the control "
            "character \\x01; an id is printable text; see `steward chat --help`",
        ),
        (
            ["runs", "show", ""],
            "steward runs show: error: argument id: an empty id names nothing; "
            "see `steward runs show --help`",
        ),
    ],
)
def test_an_id_that_cannot_name_anything_is_refused_naming_why(
    tmp_path: Path, argv: list[str], expected: str
) -> None:
    """Undecodable bytes (a lone surrogate once decoded) and control
    characters in an id are one line, exit 2; no traceback, no log made."""
    done = steward(tmp_path, *argv)
    assert (done.returncode, done.stderr) == (2, expected + "\n")
    assert files(tmp_path) == []


# -- times -------------------------------------------------------------------------


def test_times_are_shown_in_iso_8601_utc(tmp_path: Path) -> None:
    """A sleep's wake-up time reads as ISO 8601 in UTC (whatever zone the
    model gave) in `run`'s steps and in `runs show`, not as epoch seconds."""
    sleep = {
        "json": {
            "type": "sleep",
            "wakeAt": "2020-01-02T04:04:05.678+01:00",
            "reason": "nap",
        }
    }
    ok = script(tmp_path / "s.json", [*PLAN, sleep, FINISH])
    done = steward(tmp_path, "--script", ok, "run", "rest")
    assert done.returncode == 0, done.stderr
    assert "RunSlept          until 2020-01-02T03:04:05.678Z (nap)" in done.stdout
    shown = steward(tmp_path, "runs", "show", run_id(done.stdout)).stdout
    assert "until 2020-01-02T03:04:05.678Z (nap)" in shown
    assert "1577934245" not in done.stdout + shown


# -- metrics -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "address"),
    [({}, "127.0.0.1"), ({"STEWARD_METRICS_ADDRESS": "0.0.0.0"}, "0.0.0.0")],
)
def test_metrics_listen_on_this_machine_unless_told(
    tmp_path: Path, env: dict[str, str], address: str
) -> None:
    """serve's metrics endpoint listens on 127.0.0.1 by default; [metrics]
    address (here STEWARD_METRICS_ADDRESS) exposes it."""
    ok = script(tmp_path / "s.json", [])
    proc = subprocess.Popen(
        [STEWARD, "--script", ok, "serve", "--metrics-port", "0"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    try:
        assert proc.stdout is not None
        metrics = proc.stdout.readline()
        assert proc.stdout.readline().startswith("steward serving ")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert metrics.startswith(f"metrics: http://{address}:")


# -- found in review ------------------------------------------------------------------


def test_hosting_commands_with_bad_settings_create_nothing(tmp_path: Path) -> None:
    """`serve` and `run` with no model configured fail before any log,
    directory or lock file is made, even on a path in a missing directory."""
    served = steward(tmp_path, "--log", str(tmp_path / "typo/dir/x.db"), "serve")
    ran = steward(tmp_path, "run", "hello")
    for done in (served, ran):
        assert done.returncode == 2 and "no model is configured" in done.stderr
    assert files(tmp_path) == []


def test_run_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`steward run ... | head -1`: the command ends with 141 and one line on
    stderr saying how the run stands, not a hang. The reply after the plan
    comes once the pipe is closed (10 s later at most), so the lines it
    brings meet a closed pipe however fast the run is."""
    slow = {"json": {"type": "decision", "content": "d"}, "delay": 10}
    replies = script(tmp_path / "s.json", [*PLAN, slow, FINISH])
    proc = subprocess.Popen(
        [STEWARD, "--script", replies, "run", "go"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    assert proc.wait(timeout=30) == 141
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert "Traceback" not in err
    assert len(err.splitlines()) <= 1, err
