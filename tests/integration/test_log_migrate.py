"""`steward log migrate` copies a nats:// log made before partitions (its
stream has no ``steward_partitions`` in its metadata, as an earlier
steward made it) into a partitioned one, on a real nats-server: runs and
sessions served on the old log replay and verify on the new one, a run
queued on the old log is finished by a serve on the new one, and every
refusal is one line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats_server import NatsServer
from support import PLAN, act, start_run, steward_process, stop_all

from steward import cli
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog, open_log
from steward.bus.jetstream import POSITIONS_PER_COMMIT
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

OLD = "stream=OLD&prefix=old.ev"
NEW = "stream=NEW&prefix=new.ev"


def _old_stream(server: NatsServer, name: str = "OLD", prefix: str = "old.ev") -> None:
    """A stream as a steward from before partitions made it: no
    ``steward_partitions`` in its metadata."""

    async def make() -> None:
        nc = await nats.connect(server.url)
        try:
            await nc.jetstream().add_stream(
                name=name,
                subjects=[f"{prefix}.>"],
                allow_direct=True,
                deny_delete=True,
                deny_purge=True,
            )
        finally:
            await nc.close()

    asyncio.run(make())


def _script(path: Path) -> None:
    """Each run plans, then finishes; a session's turn answers in one reply."""
    finish = act(type="finish", output="done")
    path.write_text(json.dumps({"per_run": True, "replies": [*PLAN, finish]}))


def _records(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every stream of the log at ``url``: each event with its version,
    time, correlation and causation ids."""

    async def read() -> dict[str, list[tuple[Any, ...]]]:
        log = await open_log(url, create=False, union=KINDS.union)
        try:
            return {
                stream: [
                    (r.version, r.at, r.correlation_id, r.causation_id, r.event)
                    for r in await log.read(stream)
                ]
                for stream in await log.streams()
            }
        finally:
            await log.close()

    return asyncio.run(read())


def _until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def _completed(url: str, run_id: str) -> bool:
    async def read() -> bool:
        log = await open_log(url, create=False, union=KINDS.union)
        try:
            return any(
                isinstance(r.event, run_events.RunCompleted)
                for r in await log.read(run_stream(run_id))
            )
        finally:
            await log.close()

    return asyncio.run(read())


def _hosted(url: str) -> bool:
    async def ask() -> bool:
        log = await open_log(url, union=KINDS.union)
        try:
            assert isinstance(log, JetStreamEventLog)
            return await log.host(timeout=0.5) is not None
        finally:
            await log.close()

    return asyncio.run(ask())


def test_an_old_log_is_migrated_and_served_partitioned(
    tmp_path: Path, nats: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs and sessions served on a log made before partitions are copied
    whole into a partitioned log: each stream replays and verifies there,
    and a run queued on the old log is finished by a serve on the new."""
    _old_stream(nats)
    _script(tmp_path / "s.json")
    old, new = f"{nats.url}?{OLD}", f"{nats.url}?{NEW}"
    base = ["--db", str(tmp_path / "projections.db")]
    serving = ["--script", str(tmp_path / "s.json"), "serve"]
    serve = steward_process(
        tmp_path, "--log", old, *base, *serving, STEWARD_SESSION_DEBOUNCE_MS="10"
    )
    try:
        _until(lambda: _hosted(old), "the serve never answered on NATS")
        assert cli.main(["--log", old, *base, "workers"]) == 0
        listed = capsys.readouterr().out
        assert "made before partitions" in listed
        assert "steward log migrate --to" in listed
        runs = [start_run(tmp_path, f"task {n}", "--log", old, *base) for n in range(3)]
        for chat in ("cli:a", "cli:b"):
            send = ["--log", old, *base, "sessions", "send", chat, "hi"]
            assert cli.main([*send, "--timeout", "30"]) == 0, capsys.readouterr()
            assert capsys.readouterr().out.strip() == "done"
        for run_id in runs:
            _until(lambda r=run_id: _completed(old, r), f"run {run_id} never ended")
    finally:
        errors = stop_all([serve], tail=1_000_000)  # its whole log
    assert "made before partitions" in errors[0], errors[0]
    assert "steward log migrate --to" in errors[0]
    # queued while nothing hosts the log: the new log's serve runs it
    queued = start_run(tmp_path, "later", "--log", old, *base)
    before = _records(old)
    assert {s.partition(".")[0] for s in before} >= {"run", "session"}

    migrate = ["--log", old, "log", "migrate", "--to", new, "-o", "json"]
    assert cli.main(migrate) == 0
    report = json.loads(capsys.readouterr().out)
    events_in_old = sum(len(r) for r in before.values())
    assert report["ok"] and report["positions_kept"]
    assert report["partitions"] == 16
    assert (report["streams"], report["events"]) == (len(before), events_in_old)
    assert report["verified_events"] == events_in_old
    assert report["skipped_commits"] == 0
    assert _records(new) == before

    for stream in before:
        assert cli.main(["--log", new, *base, "replay", stream, "--verify"]) == 0
        assert "verify: ok" in capsys.readouterr().out, stream

    async def spread() -> set[int]:
        log = await open_log(new, create=False, union=KINDS.union)
        try:
            assert isinstance(log, JetStreamEventLog)
            return {log.partition_of(s) for s in await log.streams()}
        finally:
            await log.close()

    assert len(asyncio.run(spread())) > 1  # no longer one unsplit whole

    serve = steward_process(
        tmp_path, "--log", new, "--db", str(tmp_path / "new.db"), *serving
    )
    try:
        _until(lambda: _completed(new, queued), "the queued run never ended")
    finally:
        errors = stop_all([serve], tail=1_000_000)  # its whole log
    assert "made before partitions" not in errors[0], errors[0]
    assert "Traceback" not in errors[0], errors[0]


def _steward(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", *argv],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _refused(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steward: "), done.stderr
    assert words in lines[0], lines[0]


async def test_a_migration_refuses_what_it_cannot_copy_and_resumes(
    tmp_path: Path, nats: NatsServer
) -> None:
    """A partitioned or hosted source, a target that is the source, overlaps
    it, is not empty or is not a nats:// log: each one line, exit 2. A
    target holding the start of the copy is continued with --resume."""
    await asyncio.to_thread(_old_stream, nats)
    old, new = f"{nats.url}?{OLD}", f"{nats.url}?{NEW}"
    source = await open_log(old, create=False, union=KINDS.union)
    assert isinstance(source, JetStreamEventLog)
    try:
        for n in range(6):
            for v in range(3):
                await source.append(
                    f"run.m{n}",
                    [run_events.NoteRecorded(category="c", content=f"{n}.{v}")]
                    * (1 + v),
                    v * (v + 1) // 2,
                    correlation_id=f"m{n}",
                    causation_id=f"run.m{n}/{v}" if v else None,
                    at=1000.0 + n + v / 10,
                )

        def migrate(*argv: str) -> subprocess.CompletedProcess[str]:
            return _steward(tmp_path, "--log", old, "log", "migrate", *argv)

        partitioned = f"{nats.url}?stream=PART&prefix=part.ev"
        await (await open_log(partitioned, union=KINDS.union)).close()
        done = await asyncio.to_thread(
            _steward, tmp_path, "--log", partitioned, "log", "migrate", "--to", new
        )
        _refused(done, "partitioned already (16 partitions)")
        _refused(await asyncio.to_thread(migrate, "--to", old), "own stream OLD")
        overlapping = f"{nats.url}?stream=NEW&prefix=old.ev.p"
        _refused(await asyncio.to_thread(migrate, "--to", overlapping), "overlaps")
        _refused(
            await asyncio.to_thread(migrate, "--to", str(tmp_path / "x.db")),
            "is not a nats:// log",
        )
        embedded = await asyncio.to_thread(
            _steward, tmp_path, "--log", str(tmp_path / "x.db"), "log", "migrate",
            "--to", new,
        )  # fmt: skip
        _refused(embedded, "copies a nats:// log made before partitions")

        await asyncio.to_thread(_old_stream, nats, "OLD2", "old2.ev")
        also_old = f"{nats.url}?stream=OLD2&prefix=old2.ev"
        _refused(
            await asyncio.to_thread(migrate, "--to", also_old),
            "is itself a log made before partitions",
        )
        other = f"{nats.url}?stream=OTHER&prefix=other.ev"
        unrelated = await open_log(other, union=KINDS.union)
        note = run_events.NoteRecorded(category="c", content="another log's")
        await unrelated.append("run.m0", [note, note], 0)
        await unrelated.close()
        _refused(
            await asyncio.to_thread(migrate, "--to", other, "--resume"),
            "not a copy of this log's beginning",
        )

        await source.advertise("steward serve, pid 1")
        _refused(await asyncio.to_thread(migrate, "--to", new), "is hosted")
        await source.close()
        source = await open_log(old, create=False, union=KINDS.union)
        assert isinstance(source, JetStreamEventLog)

        # a copy that stopped after its first seven commits
        target = await open_log(new, union=KINDS.union)
        try:
            page = await source.read_all(0, 100)
            commits: dict[int, list[Any]] = {}
            for r in page:
                commits.setdefault(r.position // POSITIONS_PER_COMMIT, []).append(r)
            for commit in list(commits.values())[:7]:
                first = commit[0]
                await target.append(
                    first.stream,
                    [r.event for r in commit],
                    first.version - 1,
                    correlation_id=first.correlation_id,
                    causation_id=first.causation_id,
                    at=first.at,
                )
        finally:
            await target.close()
        _refused(await asyncio.to_thread(migrate, "--to", new), "add --resume")
        done = await asyncio.to_thread(migrate, "--to", new, "--resume", "-o", "json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert (report["commits"], report["skipped_commits"]) == (11, 7)
        assert report["ok"] and report["positions_kept"]
        assert report["verified_events"] == 6 * (1 + 2 + 3)
        again = await asyncio.to_thread(migrate, "--to", new, "--resume", "-o", "json")
        assert json.loads(again.stdout)["commits"] == 0  # nothing copied twice
    finally:
        await source.close()
