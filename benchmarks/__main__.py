"""Run the benchmarks and print their figures beside the targets.

Usage: ``python -m benchmarks [--only NAME]``, NAME being a module of
``MODULES`` (``log_bench``, ``runtime_bench``, ``floor_bench``,
``workers_bench``, ``takeover_bench``, ``session_bench``, ``workflow_bench``,
``task_bench``, ``console_bench``, ``cli_bench``,
or just ``log``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from benchmarks.common import Figure, print_table

MODULES = [
    "benchmarks.log_bench",
    "benchmarks.runtime_bench",
    "benchmarks.floor_bench",
    "benchmarks.workers_bench",
    "benchmarks.takeover_bench",
    "benchmarks.session_bench",
    "benchmarks.workflow_bench",
    "benchmarks.task_bench",
    "benchmarks.console_bench",
    "benchmarks.cli_bench",
]


def _run(coro: Coroutine[Any, Any, list[Figure]]) -> list[Figure]:
    """Run on the event loop the ``steward`` command uses."""
    try:
        import uvloop
    except ImportError:  # not on every platform
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--only",
        metavar="NAME",
        help="run only the benchmark modules whose name contains NAME",
    )
    args = parser.parse_args(argv)
    selected = [m for m in MODULES if args.only is None or args.only in m]
    if not selected:
        names = ", ".join(m.rpartition(".")[2] for m in MODULES)
        parser.error(f"no benchmark module matches {args.only!r}; there are: {names}")
    figures: list[Figure] = []
    for name in selected:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        figures += _run(importlib.import_module(name).run())
    print_table(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
