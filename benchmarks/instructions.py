"""Instructions per run step, counted by callgrind: a figure that does not drift.

This VM's timings drift by up to 2x within an hour, far more than the 5-20%
a single change to the step path makes. Valgrind's callgrind counts the
instructions the process executes instead, which repeat exactly from one
run to the next (each process is given one hash seed; a random one moves a
count by up to 1.5%), so two commits can be compared any time.

It runs the runtime benchmark's workload (``--runs`` runs of N steps through
one host, the scripted model answering instantly) at two sizes and prints the
difference per extra step: the instructions of a step with start-up removed.
``--fold`` does the same for folding the replay benchmark's log (instructions
per event through its ``fold_page``). Kernel work (system calls) is not
counted.

``--session`` counts a session's message, arrival to its run's start (the
session benchmark's workload), against a lone run's step.

Usage: ``python -m benchmarks.instructions [--runs N] [--fold] [--session]``; needs
``valgrind`` on the PATH. Takes a minute or two: callgrind runs ~50x slower.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_STEP = """
import sys, uvloop
from benchmarks import runtime_bench
uvloop.run(runtime_bench._measure(int(sys.argv[1]), int(sys.argv[2])))
"""

_FOLD = """
import sys, sqlite3
from benchmarks.log_bench import REPLAY_PAGE, fold_page
from steward.bus.pages import decode_page
from steward.bus.sqlite import _READ_ALL
rows = sqlite3.connect(sys.argv[2]).execute(
    _READ_ALL, {"after": 0, "upto": 10**9}
).fetchall()
records = decode_page(rows)
pages = [records[i : i + REPLAY_PAGE] for i in range(0, len(records), REPLAY_PAGE)]
for _ in range(int(sys.argv[1])):
    states = {}
    for page in pages:
        fold_page(states, page)
"""


_SESSION = """
import sys, tempfile, uvloop
from pathlib import Path
from benchmarks import session_bench
session_bench.MESSAGES = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    uvloop.run(session_bench._per_message_us(Path(tmp), sys.argv[2] == "messages"))
"""


def _instructions(program: str, *argv: str) -> int:
    """Instructions callgrind counts for ``python -c program argv``."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            program,
            *argv,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # a count repeats exactly
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_step(runs: int, small: int = 10, large: int = 30) -> float:
    """Instructions per step with ``runs`` concurrent runs."""
    if runs == 1:
        small, large = 50, 250  # a lone run's steps are few per second of setup
    low = _instructions(_STEP, str(runs), str(small))
    high = _instructions(_STEP, str(runs), str(large))
    return (high - low) / (runs * (large - small))


def per_message(small: int = 50, large: int = 250) -> float:
    """Instructions per message of the session benchmark (arrival to its
    run's start)."""
    counts = {
        (n, part): _instructions(_SESSION, str(n), part)
        for n in (small, large)
        for part in ("messages", "opened")
    }
    more = counts[large, "messages"] - counts[small, "messages"]
    opening = counts[large, "opened"] - counts[small, "opened"]
    return (more - opening) / (large - small)


def per_fold_event() -> float:
    """Instructions per event folded, over the replay benchmark's log."""
    from benchmarks import log_bench

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replay.db"
        asyncio.run(log_bench.build_replay_log(path))
        low = _instructions(_FOLD, "0", str(path))
        high = _instructions(_FOLD, "2", str(path))
    return (high - low) / (2 * log_bench.REPLAY_EVENTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.instructions",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--runs", type=int, action="append", help="concurrent runs (default: 1, 100)"
    )
    parser.add_argument(
        "--fold", action="store_true", help="also count instructions per folded event"
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="also count instructions per session message, and its ratio to "
        "a lone run's step (the per-message target's unit)",
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed; it counts the instructions")
    steps = {}
    for runs in args.runs or [1, 100]:
        steps[runs] = per_step(runs)
        print(f"step, {runs} run(s): {steps[runs]:,.0f} instructions", flush=True)
    if args.session:
        step = steps[1] if 1 in steps else per_step(1)
        message = per_message()
        print(
            f"session message: {message:,.0f} instructions, "
            f"{message / step:.2f} lone steps"
        )
    if args.fold:
        print(f"fold: {per_fold_event():,.0f} instructions per event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
