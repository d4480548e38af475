"""What a JetStream cluster costs: `steward serve` plus N `steward worker`
processes sharing one nats-server, on a fixed workload (issue #29).

The workload is RUNS runs of STEPS steps each (a step is one iteration of a
run: model reply, decision, next request), played by the scripted model. Each
measurement starts its own nats-server (empty store), `serve` and N workers
as subprocesses, waits for each to print its ready line, then commits the
runs' `RunCreated` from this process (a `Host` on the log, as `steward runs
start` would) and watches the log until every run has its terminal event.
It prints, for each N:

- the wall time from the first submit to the last run's end, and steps/s;
- the CPU seconds (user + system, children excluded, from
  ``/proc/<pid>/stat``, or psutil off Linux) that the workload cost `serve`,
  the workers together and nats-server, and all of them together: each
  process's CPU is read once all are ready (so startup and catching up are
  left out) and again once the workload is done and every process has gone
  quiet, right before they are stopped. This process (submitting and
  watching) is not counted; its cost is the same for every N;
- for N above the smallest N, the ratio of all processes' CPU to that with
  the smallest N (1 by default).

Two modes; ``python -m benchmarks`` (``make bench``) measures both, for 1
and 4 workers:

- instant model (the default, ``--model-delay 0``): the cost of steward's own
  work, the median of REPEATS measurements. The CPU ratio is held to at most
  1.3x (issue #29: with 4 workers, work is done once in the cluster, not once
  per worker); on a machine with few cores that is the figure that can be
  held, as steps/s cannot grow past the cores;
- slow model (``--model-delay 0.2 --slots 16``): each reply takes the delay
  and each process makes at most ``slots`` model calls at once
  (``STEWARD_LLM_MAX_CONCURRENCY``), so the model is the bottleneck, as in
  production; one measurement each. Steps/s is held to 80% of the ceiling
  ``(workers + 1) * slots / delay`` (issue #29 asks that of 12 workers on a
  16-core machine): `serve` is a member too, holding its share of the
  partitions and making its share of the calls.

Run ``python -m benchmarks.workers_bench --workers 1,2,4,8`` for another
worker list (one mode per invocation, instant unless ``--model-delay``),
``--runs``/``--steps`` for another workload, ``--repeats`` for the median of
several measurements (taken in turns). Each measurement's CPU of every
process (each worker's own) goes to standard error as it is taken.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import REPEATS, Figure, print_table
from benchmarks.log_bench import nats_process
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog, open_log
from steward.bus.jetstream.members import until_shared
from steward.host import Host
from steward.kinds import KINDS

WORKERS = (1, 4)
"""The worker counts ``python -m benchmarks`` measures."""
RUNS = 200
STEPS = 8
SLOTS = 16
SLOW_MODEL = 0.2
"""Seconds per model reply in the slow-model figures of ``make bench``."""
"""Model calls in flight per process (``STEWARD_LLM_MAX_CONCURRENCY``)."""
CPU_TARGET = 1.3
"""At most this times the CPU of the smallest worker count (issue #29)."""
CEILING_SHARE = 0.8
"""With a slow model, steps/s at least this share of the ceiling."""
READY_SECONDS = 120.0
"""How long a process may take to print its ready line."""
WORKLOAD_SECONDS = 600.0
"""How long a workload may take before the benchmark gives up."""
QUIET_WINDOW = 0.5
QUIET_CPU = 0.03
"""The processes are quiet once they spend less than this many CPU seconds,
all together, in a QUIET_WINDOW; waited for up to QUIET_MAX seconds."""
QUIET_MAX = 15.0

_ROOT = Path(__file__).resolve().parent.parent
_PROC = Path("/proc/self/stat").exists()
_TICKS = os.sysconf("SC_CLK_TCK") if _PROC else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, its children excluded."""
    if not _PROC:
        try:
            import psutil  # type: ignore[import-not-found,import-untyped,unused-ignore]
        except ImportError:
            raise RuntimeError("reading CPU seconds needs /proc or psutil") from None
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # the command name (field 2) may hold spaces; the fields after it do not
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15
    return (utime + stime) / _TICKS


@dataclass(frozen=True)
class Setup:
    """What one measurement runs: the workload and the model."""

    runs: int = RUNS
    steps: int = STEPS
    model_delay: float = 0.0
    slots: int = SLOTS

    @property
    def ceiling(self) -> float:
        """Steps/s one process's slots allow (infinite with an instant model)."""
        return self.slots / self.model_delay if self.model_delay else float("inf")

    def model(self) -> str:
        if not self.model_delay:
            return "instant model"
        return f"model {self.model_delay * 1000:.0f} ms, {self.slots} slots"


@dataclass(frozen=True)
class Measured:
    """One measurement with ``workers`` workers (and `serve`)."""

    workers: int
    wall: float
    steps: int
    serve_cpu: float
    worker_cpu: tuple[float, ...]
    nats_cpu: float
    startup_cpu: float
    """CPU of all processes before the workload (startup, catching up)."""

    @property
    def rate(self) -> float:
        return self.steps / self.wall

    @property
    def cpu(self) -> float:
        return self.serve_cpu + sum(self.worker_cpu) + self.nats_cpu

    def line(self) -> str:
        each = " + ".join(f"{c:.2f}" for c in self.worker_cpu)
        return (
            f"{self.workers} worker(s): {self.wall:.2f} s, {self.rate:,.0f} steps/s; "
            f"CPU {self.cpu:.2f} s = serve {self.serve_cpu:.2f} + workers ({each}) "
            f"+ nats-server {self.nats_cpu:.2f} (startup before it: "
            f"{self.startup_cpu:.2f} s)"
        )


def _script(path: Path, setup: Setup) -> None:
    commands: list[dict[str, object]] = [
        {"type": "set_output", "output": f"{n}. ", "mode": "append"}
        for n in range(setup.steps - 1)
    ]
    commands.append({"type": "finish"})
    replies: list[dict[str, object]] = [{"json": command} for command in commands]
    if setup.model_delay:
        for reply in replies:
            reply["delay"] = setup.model_delay
    path.write_text(json.dumps({"per_run": True, "replies": replies}))


class _Process:
    """A `steward serve` or `steward worker` subprocess."""

    def __init__(self, name: str, argv: list[str], directory: Path, slots: int):
        self.name = name
        self.errors = directory / f"{name}.stderr"
        with open(self.errors, "wb") as errors:
            self.popen = subprocess.Popen(
                argv,
                cwd=directory,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=errors,
                env={
                    **os.environ,
                    # the steward beside these benchmarks, wherever installed
                    "PYTHONPATH": os.pathsep.join(
                        [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
                    ),
                    "STEWARD_LLM_MAX_CONCURRENCY": str(slots),
                    # heartbeats every second: the members share the log soon
                    "STEWARD_LOG_LEASE_SECONDS": "4",
                },
            )

    async def ready(self) -> None:
        """Wait for the line it prints once it hosts the log."""
        stdout = self.popen.stdout
        assert stdout is not None
        while True:
            try:
                line = await asyncio.wait_for(
                    asyncio.to_thread(stdout.readline), READY_SECONDS
                )
            except TimeoutError:
                raise self.failed(
                    f"printed no ready line in {READY_SECONDS:g} s"
                ) from None
            if not line:
                raise self.failed("exited before it was ready")
            if line.startswith((b"steward serving", b"steward working")):
                return

    def failed(self, what: str) -> RuntimeError:
        tail = self.errors.read_text(errors="replace").strip().splitlines()[-5:]
        said = "; its stderr ends: " + " | ".join(tail) if tail else ""
        return RuntimeError(f"{self.name} (pid {self.popen.pid}) {what}{said}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def wait(self) -> None:
        try:
            self.popen.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.communicate()


async def _quiet(pids: Sequence[int]) -> None:
    """Wait until the processes have done their share of the work: they
    spend less than QUIET_CPU seconds in a QUIET_WINDOW (or QUIET_MAX)."""
    deadline = time.monotonic() + QUIET_MAX
    last = sum(cpu_seconds(pid) for pid in pids)
    while time.monotonic() < deadline:
        await asyncio.sleep(QUIET_WINDOW)
        now = sum(cpu_seconds(pid) for pid in pids)
        if now - last < QUIET_CPU:
            return
        last = now


async def _watch(log: JetStreamEventLog, runs: int) -> list[str]:
    """Follow the log until ``runs`` runs have ended; the reasons of those
    that did not complete."""
    ended: set[str] = set()
    failures: list[str] = []
    async for rec in log.subscribe():
        event = rec.event
        if rec.stream in ended or not isinstance(
            event,
            run_events.RunCompleted | run_events.RunFailed | run_events.RunCancelled,
        ):
            continue
        ended.add(rec.stream)
        if isinstance(event, run_events.RunFailed):
            failures.append(f"{rec.stream}: {event.reason}")
        elif isinstance(event, run_events.RunCancelled):
            failures.append(f"{rec.stream}: cancelled ({event.reason})")
        if len(ended) == runs:
            break
    return failures


async def measure(workers: int, setup: Setup, directory: Path) -> Measured:
    """Serve plus ``workers`` workers on a new nats-server work ``setup``."""
    directory.mkdir(parents=True)
    script = directory / "script.json"
    _script(script, setup)
    with nats_process(directory) as (server, nats):
        url = f"{server}?stream=BENCH&prefix=bench.ev"
        log = await open_log(
            url, union=KINDS.union
        )  # creates the stream before anyone follows it
        assert isinstance(log, JetStreamEventLog)

        def steward(name: str, command: str) -> _Process:
            argv = [sys.executable, "-m", "steward", "--log", url]
            argv += ["--db", str(directory / f"{name}.db"), "--script", str(script)]
            return _Process(name, [*argv, command], directory, setup.slots)

        processes: list[_Process] = []
        try:
            processes.append(steward("serve", "serve"))
            for n in range(workers):
                processes.append(steward(f"worker{n}", "worker"))
            for process in processes:
                await process.ready()
            await until_shared(log, len(processes))
            pids = [nats.pid, *(p.popen.pid for p in processes)]
            before = {pid: cpu_seconds(pid) for pid in pids}
            watcher = asyncio.create_task(_watch(log, setup.runs))
            settings = run_events.RunSettings(
                max_iterations=setup.steps + 1, planning_gate=False
            )
            starter = Host(log, kinds=KINDS)
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    starter.submit(
                        run_stream(f"b{n}"),
                        run_events.RunCreated(
                            run_id=f"b{n}", input_text="go", settings=settings
                        ),
                    )
                    for n in range(setup.runs)
                )
            )
            try:
                failures = await asyncio.wait_for(watcher, WORKLOAD_SECONDS)
            except TimeoutError:
                raise RuntimeError(
                    f"the runs did not all end in {WORKLOAD_SECONDS:g} s"
                ) from None
            wall = time.perf_counter() - started
            if failures:
                raise RuntimeError(
                    f"{len(failures)} of {setup.runs} runs did not complete, "
                    f"the first: {failures[0]}"
                )
            await _quiet(pids)
            used = {pid: cpu_seconds(pid) - before[pid] for pid in pids}
        finally:
            for process in processes:
                process.stop()
            for process in processes:
                process.wait()
            await log.close()
    return Measured(
        workers=workers,
        wall=wall,
        steps=setup.runs * setup.steps,
        serve_cpu=used[processes[0].popen.pid],
        worker_cpu=tuple(used[p.popen.pid] for p in processes[1:]),
        nats_cpu=used[nats.pid],
        startup_cpu=sum(before.values()),
    )


def _median(seen: list[Measured]) -> Measured:
    """The measurement of median CPU, its wall time the median wall time."""
    ranked = sorted(seen, key=lambda m: m.cpu)
    middle = ranked[(len(ranked) - 1) // 2]
    wall = statistics.median(m.wall for m in seen)
    return dataclasses.replace(middle, wall=wall)


async def measure_all(
    workers: Sequence[int], setup: Setup, repeats: int = 1
) -> dict[int, Measured]:
    """Each worker count measured ``repeats`` times (in turns); the medians."""
    seen: dict[int, list[Measured]] = {n: [] for n in workers}
    with tempfile.TemporaryDirectory(prefix="steward-workers-") as tmp:
        for repeat in range(repeats):
            for n in workers:
                where = Path(tmp) / f"{setup.model_delay:g}-{n}-{repeat}"
                measured = await measure(n, setup, where)
                print(measured.line(), file=sys.stderr, flush=True)
                seen[n].append(measured)
    return {n: _median(m) for n, m in seen.items()}


def figures(measured: dict[int, Measured], setup: Setup) -> list[Figure]:
    """Per worker count: steps/s, wall time, CPU of serve, of the workers, of
    nats-server and of all, and all's ratio to that of the fewest workers."""
    base = measured[min(measured)]
    out: list[Figure] = []
    for n, m in measured.items():
        name = f"jetstream, serve + {n} worker{'s' * (n != 1)}"
        said = []
        if n == base.workers:  # the first row says what the workload is
            said.append(f"{setup.runs} runs x {setup.steps} steps, {setup.model()}")
        target = None
        if setup.model_delay:
            ceiling = (n + 1) * setup.ceiling  # serve holds a share too
            said.append(f"ceiling {ceiling:,.0f}")
            target = CEILING_SHARE * ceiling
        rate = f"{name}: steps/s" + (f" ({'; '.join(said)})" if said else "")
        out.append(Figure(rate, m.rate, "steps/s", target))
        for what, value in (
            ("wall time", m.wall),
            ("CPU, serve", m.serve_cpu),
            ("CPU, the workers", sum(m.worker_cpu)),
            ("CPU, nats-server", m.nats_cpu),
            ("CPU, all", m.cpu),
        ):
            out.append(Figure(f"{name}: {what}", value, "s", None, False))
        if n != base.workers:
            fewest = f"{base.workers} worker{'s' * (base.workers != 1)}"
            out.append(
                Figure(
                    f"{name}: CPU, all / with {fewest}",
                    m.cpu / base.cpu,
                    "x",
                    None if setup.model_delay else CPU_TARGET,
                    higher_is_better=False,
                )
            )
    return out


async def run() -> list[Figure]:
    """What ``python -m benchmarks`` measures: 1 and 4 workers with the
    instant model (the median of REPEATS measurements), then with the slow
    one (one measurement each)."""
    instant = Setup()
    slow = Setup(model_delay=SLOW_MODEL)
    return figures(await measure_all(WORKERS, instant, REPEATS), instant) + figures(
        await measure_all(WORKERS, slow), slow
    )


def _worker_list(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("worker counts are 1 or more")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.workers_bench",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--workers",
        type=_worker_list,
        default=list(WORKERS),
        metavar="N,N,...",
        help="the worker counts to measure (default: %(default)s)",
    )
    parser.add_argument("--runs", type=int, default=RUNS, help="default: %(default)s")
    parser.add_argument(
        "--steps", type=int, default=STEPS, help="per run (default: %(default)s)"
    )
    parser.add_argument(
        "--model-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds per model reply (default: 0, instant)",
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=SLOTS,
        help="model calls in flight per process (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measure each count this many times, report the median",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.steps < 1 or args.slots < 1 or args.repeats < 1:
        parser.error("--runs, --steps, --slots and --repeats are 1 or more")
    if args.model_delay < 0:
        parser.error("--model-delay is 0 or more")
    setup = Setup(
        runs=args.runs, steps=args.steps, model_delay=args.model_delay, slots=args.slots
    )

    async def measured() -> list[Figure]:
        return figures(await measure_all(args.workers, setup, args.repeats), setup)

    from benchmarks.__main__ import _run

    print_table(_run(measured()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
