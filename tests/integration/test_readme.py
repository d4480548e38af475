"""README's and the guides' command lines work as written, from a fresh
directory: the command line guide's "Using it" block, README's tour (and
what it shows them print), and every `steward ...` in their prose."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_pages import GUIDES, PLACEHOLDER, inline_commands

from steward import cli, replay
from steward.actors.run import events as run_events
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
USING_IT = (ROOT / "docs" / "cli.md").read_text()
"""The page whose "Using it" block every line of which a test runs."""
STEWARD = str(Path(sys.executable).with_name("steward"))
PAUSED = {"STEWARD_RUN_TOKEN_BUDGET": "1", "STEWARD_RUN_BUDGET_POLICY": "pause"}
"""A run started with these waits for `runs approve|deny` after its first reply."""


def _using_it() -> list[list[str]]:
    """Every command line of docs/cli.md's "Using it" block, with each
    ``[...]`` part both left out and put in."""
    block = USING_IT.split("## Using it", 1)[1].split("```")[1]
    lines = [line for line in block.splitlines() if line.startswith(".venv/bin/")]
    assert lines, "docs/cli.md's Using it block shows no .venv/bin/steward lines"
    commands = []
    for line in lines:
        optional = re.findall(r"\[([^]]*)\]", line)
        parts = re.split(r"\[[^]]*\]", line)
        for chosen in itertools.product(*[("", o) for o in optional]):
            text = "".join(p + c for p, c in zip(parts, [*chosen, ""], strict=True))
            commands.append(shlex.split(text, comments=True))
    return commands


def _command(argv: list[str]) -> str:
    """The function that carries out a command line (`cmd_run`, ...; a
    kind's list, which every kind shares, as `cmd_list run`)."""
    args = [{"VERSION": "1"}.get(a, a) for a in argv[1:]]
    try:
        parsed = cli.build_parser(KINDS).parse_args(args)
    except SystemExit:
        raise AssertionError(f"{shlex.join(argv)} does not parse") from None
    kind = getattr(parsed, "listed_kind", None)
    return str(parsed.fn.__name__) + ("" if kind is None else f" {kind}")


COMMANDS = _using_it()


class Shell:
    """Starts README's command lines in a directory, as a person would type
    them there, with ID and VERSION put in."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def start(
        self, argv: list[str], run_id: str = "", version: int = 0, **env: str
    ) -> subprocess.Popen[str]:
        words = [{"ID": run_id, "VERSION": str(version)}.get(a, a) for a in argv]
        assert words[0] == ".venv/bin/steward"
        return subprocess.Popen(
            [STEWARD, *words[1:]],
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )

    def run(self, *started: subprocess.Popen[str]) -> list[str]:
        """Wait for ``started``; each must exit 0 with no traceback."""
        outs = []
        for proc in started:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 and "Traceback" not in err, (proc.args, err)
            outs.append(out)
        return outs


def _serving(proc: subprocess.Popen[str], timeout: float = 20) -> None:
    """Wait until ``serve`` says it is serving."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = ""
    while "serving" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            line = proc.stdout.readline()
            assert line, f"serve ended: {proc.communicate()[1]}"
            seen += line
    assert "serving" in seen, seen


def _waiting(shell: Shell, listing: list[str], ids: set[str]) -> None:
    """Poll README's `runs list --status waiting` until it lists ``ids``."""
    deadline = time.monotonic() + 20
    while True:
        (out,) = shell.run(shell.start(listing))
        if ids <= {line.split()[0] for line in out.splitlines()[1:]}:
            return
        assert time.monotonic() < deadline, out
        time.sleep(0.1)


def _first_step_end(exported: str) -> int:
    """The version where a run's first step ends (before its second input)."""
    inputs = {t.__name__ for t in run_events.INPUT_TYPES}
    records = [json.loads(line) for line in exported.splitlines()]
    return next(r["version"] - 1 for r in records[1:] if r["event"]["type"] in inputs)


def test_every_command_line_in_using_it_works_as_written(tmp_path: Path) -> None:
    """Each line of README's Using it block (each [option] with and without)
    exits 0 with no traceback, run as written in a fresh directory with a run
    in the state it needs: ID a completed run, a run waiting on its budget for
    approve and deny, a waiting one for cancel, VERSION where a step ends."""
    (tmp_path / "steward").mkdir()
    shutil.copy(ROOT / "steward" / "demo.yaml", tmp_path / "steward" / "demo.yaml")
    shell = Shell(tmp_path)
    by_command: dict[str, list[list[str]]] = {}
    for argv in COMMANDS:
        by_command.setdefault(_command(argv), []).append(argv)
    (run,) = by_command.pop("cmd_run")
    (serve,) = by_command.pop("cmd_serve")
    starts = by_command.pop("cmd_start")  # with and without its [--wait]
    (fork,) = by_command.pop("cmd_fork")
    (rebuild,) = by_command.pop("cmd_rebuild")
    (approve,) = by_command.pop("cmd_runs_approve")
    (deny,) = by_command.pop("cmd_runs_deny")
    (cancel,) = by_command.pop("cmd_runs_cancel")
    waiting = next(a for a in by_command["cmd_list run"] if "waiting" in a)

    (ran,) = shell.run(shell.start(run))
    completed = re.search(r"^run (\S+) completed$", ran, re.MULTILINE)
    assert completed, ran
    run_id = completed[1]

    server = shell.start(serve)
    try:
        _serving(server)
        started = shell.run(
            *(shell.start(starts[n % len(starts)], **PAUSED) for n in range(3))
        )
        approved, denied, cancelled = (
            re.findall(r"\br[0-9a-f]{12}\b", out)[0] for out in started
        )
        _waiting(shell, waiting, {approved, denied, cancelled})
        reads = [
            shell.start(argv, run_id) for argvs in by_command.values() for argv in argvs
        ]
        outs = shell.run(
            shell.start(approve, approved),
            shell.start(deny, denied),
            shell.start(cancel, cancelled),
            *reads,
        )
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and "Traceback" not in err, err

    exported = next(out for out in outs if out.startswith('{"id":'))
    shell.run(shell.start(fork, run_id, _first_step_end(exported)))
    shell.run(shell.start(rebuild))


def _status(cwd: Path, run_id: str) -> str:
    async def read() -> str:
        async with await SqliteEventLog.open(
            cwd / ".steward" / "steward.db", union=KINDS.union
        ) as log:
            return str(
                replay.rebuild(await log.read(f"run.{run_id}"), kinds=KINDS).status
            )

    return asyncio.run(read())


def _until_completed(cwd: Path, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while (status := _status(cwd, run_id)) != "completed":
        assert status not in ("failed", "cancelled"), f"run {run_id} {status}"
        assert time.monotonic() < deadline, f"run {run_id} stayed {status}"
        time.sleep(0.1)


def test_using_it_in_order_against_one_serve(tmp_path: Path) -> None:
    """README's run, serve, two `runs start`s and a fork, in that order, in
    one directory: each run completes on the demo script (a long serve
    answers every run; the fork goes on with its script where its copy
    ends), and nothing is written outside `.steward/`."""
    (tmp_path / "steward").mkdir()
    shutil.copy(ROOT / "steward" / "demo.yaml", tmp_path / "steward" / "demo.yaml")
    shell = Shell(tmp_path)
    by_command = {_command(argv): argv for argv in COMMANDS}
    (ran,) = shell.run(shell.start(by_command["cmd_run"]))
    run_id = re.findall(r"^run (\S+) completed$", ran, re.MULTILINE)[0]
    server = shell.start(by_command["cmd_serve"])
    try:
        _serving(server)
        for _ in range(2):
            (out,) = shell.run(shell.start(by_command["cmd_start"]))
            started = re.findall(r"\br[0-9a-f]{12}\b", out)[0]
            _until_completed(tmp_path, started)
        (exported,) = shell.run(shell.start(by_command["cmd_export"], run_id))
        fork = shell.start(by_command["cmd_fork"], run_id, _first_step_end(exported))
        (forked,) = shell.run(fork)
        assert re.search(r"^run \S+ completed$", forked, re.MULTILINE), forked
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".steward", "steward"]
    assert (tmp_path / ".steward" / "notes.txt").exists()


def test_make_demo_writes_only_under_steward(tmp_path: Path) -> None:
    """`make demo`'s command, in a fresh directory: it verifies, and leaves
    nothing but `.steward/`."""
    makefile = (ROOT / "Makefile").read_text()
    line = re.search(r"^demo:.*\n\t\$\(BIN\)/steward (.*)$", makefile, re.MULTILINE)
    assert line, "Makefile has no demo target running .venv/bin/steward"
    shell = Shell(tmp_path)
    (out,) = shell.run(shell.start([".venv/bin/steward", *shlex.split(line[1])]))
    assert out.strip().splitlines()[-1].startswith("verify: ok")
    assert [p.name for p in tmp_path.iterdir()] == [".steward"]


@pytest.mark.parametrize("page", [ROOT / "README.md", *GUIDES], ids=lambda p: p.name)
def test_inline_steward_commands_are_templates_or_shown_in_using_it(
    page: Path,
) -> None:
    """A `steward ...` in the prose of README or a guide made of what it
    held either has placeholders (ID, ..., a|b) or is a command the Using
    it block runs, so none goes untested."""
    toured = [c.rsplit("| ", 1)[-1] for c, _ in TOUR]
    covered = {_command(argv) for argv in COMMANDS} | {
        _command([".venv/bin/steward", *shlex.split(c)[1:]]) for c in toured
    }
    for span in inline_commands(page.read_text()):
        if PLACEHOLDER.search(span):
            continue
        argv = [".venv/bin/steward", *shlex.split(span)[1:]]
        if "--help" in argv:
            assert (
                subprocess.run(
                    [STEWARD, *argv[1:]], capture_output=True, check=False
                ).returncode
                == 0
            )
            continue
        assert _command(argv) in covered, f"{page.name} shows `{span}`: test it"


def _tour() -> list[tuple[str, list[str]]]:
    """Each ``$ `` command of README's code blocks (continued lines joined)
    and the lines it shows the command printing."""
    tour = []
    for block in re.findall(r"^```\n(.*?)^```$", README, re.MULTILINE | re.DOTALL):
        if not block.startswith("$ "):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("$ "):
                tour.append((line[2:], []))
            else:
                tour[-1][1].append(line)
    return tour


TOUR = _tour()
IDS = re.compile(r"\b(r[0-9a-f]{12}|wf-[0-9a-f]{8}|task-[0-9a-f]{8})\b")
TIMES = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+Z|\b\d+s\b")


def _normal(line: str) -> str:
    """A printed line with its ids and times made alike, blanks collapsed."""
    line = IDS.sub(lambda m: re.sub(r"[0-9a-f]", "x", m[1]), line)
    return " ".join(TIMES.sub("TIME", line).split())


def test_the_tour_in_readme_prints_what_it_shows(tmp_path: Path) -> None:
    """README's tour, in order, in a fresh copy of the repository's
    examples, as a shell runs it with .venv/bin first on its PATH: each
    command exits 0, and prints the lines README shows (in that order; a
    line `…` stands for lines left out), ids and times aside."""
    assert [c.split()[:2] for c, _ in TOUR][:4] == [
        ["steward", "--script"],
        ["printf", "'hello\\n/status\\n'"],
        ["steward", "--script"],
        ["steward", "--script"],
    ], TOUR
    (tmp_path / "steward").mkdir()
    shutil.copy(ROOT / "steward" / "demo.yaml", tmp_path / "steward" / "demo.yaml")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / ".venv").symlink_to(Path(STEWARD).parent.parent)  # `make install`
    path = f"{Path(STEWARD).parent}:{os.environ.get('PATH', '')}"
    imports = os.pathsep.join(  # as here, whatever the directory
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(":") if p
    )
    for command, shown in TOUR:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PATH": path, "PYTHONPATH": imports},
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, (
            command,
            done.stderr[-2000:],
        )
        printed = iter(_normal(line) for line in done.stdout.splitlines())
        for line in shown:
            if line.strip() in ("…", "..."):
                continue
            assert _normal(line) in printed, (
                f"README shows `{command}` printing {line!r} (in this order); "
                f"it printed:\n{done.stdout}"
            )
