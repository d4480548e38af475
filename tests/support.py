"""Helpers shared by test modules (importable as ``support``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.actors.kind import Kind, Kinds
    from steward.bus import EventLog


def act(**command: Any) -> str:
    """A JSON-protocol reply, e.g. ``act(type="note", category="plan", ...)``."""
    return json.dumps(command)


PLAN = [
    act(type="note", category="requirements", content="what is asked"),
    act(type="note", category="plan", content="how to do it"),
]

SPAWN_SCOUT = act(
    type="tool_call",
    name="subagent_spawn",
    args={"name": "scout", "task": "Count the open issues."},
)
"""A session turn's call starting subagent ``scout``."""


def steward_process(cwd: Path, *argv: str, **env: str) -> subprocess.Popen[bytes]:
    """``python -m steward ARGV`` started in ``cwd`` with ``env`` added; its
    stdout is dropped and its stderr kept for the test to show."""
    return subprocess.Popen(
        [sys.executable, "-m", "steward", *argv],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )


async def create_runs(log: EventLog, ids: list[str]) -> None:
    """Record runs ``ids``, each asked "go" with the default profile's
    settings and the built-in tools, for a serve or workers to carry out."""
    import asyncio

    from steward.actors.run import events as run_events
    from steward.actors.run.state import run_stream
    from steward.config import load_settings
    from steward.effects.tools import ToolRegistry
    from steward.host import Host
    from steward.kinds import KINDS

    settings = load_settings(None, env={}).run_settings(
        "default", ToolRegistry.with_builtins().specs()
    )
    starter = Host(log, kinds=KINDS)
    await asyncio.gather(
        *(
            starter.submit(
                run_stream(run_id),
                run_events.RunCreated(
                    run_id=run_id, input_text="go", settings=settings
                ),
            )
            for run_id in ids
        )
    )


def worker_process(cwd: Path, url: str, n: int) -> subprocess.Popen[bytes]:
    """`steward worker` number ``n`` on log ``url``, its model the script
    ``cwd/script.json``, with short claims and leases for tests that kill
    workers or servers (a claim outlives the longest call it may make)."""
    return steward_process(
        cwd,
        "--log",
        url,
        "--db",
        str(cwd / f"projections-{n}.db"),
        "--script",
        str(cwd / "script.json"),
        "worker",
        STEWARD_LOG_CLAIM_SECONDS="1.5",
        STEWARD_LOG_LEASE_SECONDS="3",
        STEWARD_MODELS_DEFAULT_TIMEOUT="0.5",
        STEWARD_MODELS_DEFAULT_MAX_RETRIES="1",
        STEWARD_TOOLS_TIMEOUT="1.5",
        STEWARD_LLM_MAX_CONCURRENCY="8",
    )


def start_run(cwd: Path, text: str, *argv: str) -> str:
    """``steward runs start TEXT`` in ``cwd`` (``argv`` before it): the id
    of the run it queued for the `serve` there."""
    started = subprocess.run(
        [sys.executable, "-m", "steward", *argv, "runs", "start", text],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def stop_all(processes: list[subprocess.Popen[bytes]], tail: int = 1500) -> list[str]:
    """SIGTERM each process still running, wait up to 15 s each (then kill
    it); the last ``tail`` characters of each one's standard error."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    errors = []
    for process in processes:
        try:
            _, err = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        errors.append((err or b"").decode()[-tail:])
    return errors


def children_started(records: list[Any]) -> tuple[list[str], list[str]]:
    """What a host would start for a stream's ``records`` (a fork's copy,
    say), by the two paths it has: the streams a running host's dispatcher
    creates as it routes each record (its kind's effects, given the state at
    the record and the latest), and the ``spawn:`` keys a host that starts
    later finds pending (its kind's `pending`, folded)."""
    from steward.actors.effects import Create
    from steward.kinds import kind_of

    kind = kind_of(records[0].stream)
    latest = kind.fold(r.event for r in records)
    state, created, wanted = kind.decider.initial, [], []
    for rec in records:
        state = kind.decider.evolve(state, rec.event)
        assert kind.reactor.effects is not None and kind.reactor.pending is not None
        created += [
            e.stream
            for e in kind.reactor.effects(rec, state, latest)
            if isinstance(e, Create)
        ]
        asked = kind.reactor.pending(rec)
        wanted = [k for k in wanted if k not in asked.answers]
        wanted += [w.key for w in asked.wants if w.key.startswith("spawn:")]
    return created, wanted


def with_kinds(*actors: Kind[Any]) -> Kinds:
    """steward's kind table with ``actors`` added (or in place of those of
    their names): what a test hands the host, the log (``union``), the
    projector, replay and the command line it runs a kind of its own on.
    Nothing of steward's is changed."""
    from steward.kinds import KINDS

    return KINDS.replaced(*actors)
