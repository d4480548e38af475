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
    import pytest

    from steward.actors.kind import Kind
    from steward.projections.projection import Projection


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


def stop_all(processes: list[subprocess.Popen[bytes]]) -> list[str]:
    """SIGTERM each process still running, wait up to 15 s each (then kill
    it); the tail of each one's standard error."""
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
        errors.append((err or b"").decode()[-1500:])
    return errors


def children_started(records: list[Any]) -> tuple[list[str], list[str]]:
    """What a host would start for a stream's ``records`` (a fork's copy,
    say), by the two paths it has: the streams a running host's dispatcher
    creates as it routes each record (its kind's effects, given the state at
    the record and the latest), and the ``spawn:`` keys a host that starts
    later finds pending (its kind's `pending`, folded)."""
    from steward.actors.effects import Create
    from steward.actors.kind import kind_of

    kind = kind_of(records[0].stream)
    latest = kind.fold(r.event for r in records)
    state, created, wanted = kind.initial, [], []
    for rec in records:
        state = kind.evolve(state, rec.event)
        assert kind.effects is not None and kind.pending is not None
        created += [
            e.stream for e in kind.effects(rec, state, latest) if isinstance(e, Create)
        ]
        asked = kind.pending(rec.event)
        wanted = [k for k in wanted if k not in asked.answers]
        wanted += [w.key for w in asked.wants if w.key.startswith("spawn:")]
    return created, wanted


def use_kind(
    monkeypatch: pytest.MonkeyPatch,
    actor: Kind[Any],
    projection: Projection | None = None,
) -> None:
    """Add kind ``actor`` (and its read models, if given) to the kind table,
    the event union and the projections for one test, through
    ``monkeypatch``: each is as it was once the test ends, passed or failed."""
    from steward.actors import kind
    from steward.events import UNION
    from steward.projections import store

    for attr, value in vars(UNION).items():  # its types and their decoders
        monkeypatch.setattr(UNION, attr, value)
    UNION.add(actor.events)
    monkeypatch.setitem(kind.KINDS, actor.name, actor)
    if projection is not None:
        monkeypatch.setitem(store.PROJECTIONS, projection.kind, projection)
