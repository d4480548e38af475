"""The floor: what a step costs on this machine with none of steward in it.

The runtime benchmark's workload done by the least code that can do it: each
run is one coroutine that drains an async generator standing in for the model
(four stream events and a result), decodes the reply's JSON command, makes
three msgspec events (the reply, the output, the next request) and appends them
as one commit through a future to a writer task, which group-commits whatever
is waiting into the same SQLite table steward uses (WAL,
``synchronous=NORMAL``, 8 KiB pages). No envelopes, state, prompt, routing,
metrics or contract checks.

The figures are context, held to no target: they say how far the runtime's
own figures could go here at best, so the runtime's are read as a multiple
of this machine's floor rather than of a number picked elsewhere.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec

from benchmarks.common import Figure
from benchmarks.runtime_bench import CONCURRENT, step_medians


class _Command(msgspec.Struct):
    type: str
    output: str = ""
    mode: str = "replace"


class _Result(msgspec.Struct):
    text: str


class _Replied(msgspec.Struct, tag=True):
    request_id: str
    text: str


class _Output(msgspec.Struct, tag=True):
    output: str
    mode: str


class _Requested(msgspec.Struct, tag=True):
    request_id: str
    iteration: int


_encode = msgspec.msgpack.Encoder().encode
_command = msgspec.json.Decoder(_Command).decode

_TABLE = """
CREATE TABLE commits (
    position INTEGER PRIMARY KEY, stream TEXT NOT NULL, version INTEGER NOT NULL,
    count INTEGER NOT NULL, at REAL NOT NULL, correlation_id TEXT,
    causation_id TEXT, data BLOB NOT NULL, UNIQUE (stream, version)
)
"""


class _Log:
    """Appends through a future to a task that commits what is waiting."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA page_size = 8192")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute(_TABLE)
        self.waiting: list[tuple[str, int, bytes, asyncio.Future[None]]] = []
        self.wakeup = asyncio.Event()
        self.position = 0
        self.writer = asyncio.get_running_loop().create_task(self._write())

    async def append(
        self, stream: str, version: int, events: list[msgspec.Struct]
    ) -> None:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((stream, version, _encode(events), future))
        self.wakeup.set()
        await future

    async def _write(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            batch, self.waiting = self.waiting, []
            rows = []
            for stream, version, data, _ in batch:
                rows.append(
                    (
                        self.position + 1,
                        stream,
                        version,
                        3,
                        time.time(),
                        None,
                        None,
                        data,
                    )
                )
                self.position += 3
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.executemany(
                "INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            self.conn.execute("COMMIT")
            for *_, future in batch:
                future.set_result(None)

    def close(self) -> None:
        self.writer.cancel()
        self.conn.close()


async def _model(text: bytes) -> AsyncIterator[object]:
    for event in ("system", "delta", "delta", "usage"):
        yield event
    yield _Result(text.decode())


async def _run(log: _Log, run_id: str, steps: int) -> None:
    replies = [
        msgspec.json.encode(
            {"type": "set_output", "output": f"part {n}. ", "mode": "append"}
        )
        for n in range(steps)
    ]
    version = 0
    for n, reply in enumerate(replies):
        result = None
        async for event in _model(reply):
            if isinstance(event, _Result):
                result = event
        assert result is not None
        command = _command(result.text)
        events: list[msgspec.Struct] = [
            _Replied(request_id=f"{run_id}/{n}", text=result.text),
            _Output(output=command.output, mode=command.mode),
            _Requested(request_id=f"{run_id}/{n + 1}", iteration=n + 1),
        ]
        await log.append(run_id, version + 1, events)
        version += len(events)


async def _measure(runs: int, steps: int) -> tuple[int, float, float]:
    """Run ``runs`` runs of ``steps`` steps; (steps, wall s, CPU s)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = _Log(Path(tmp) / "floor.db")
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(_run(log, f"f{n}", steps) for n in range(runs)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        (stored,) = log.conn.execute("SELECT count(*) FROM commits").fetchone()
        log.close()
    if stored != runs * steps:
        raise RuntimeError(f"the floor stored {stored} commits, not {runs * steps}")
    return runs * steps, wall, cpu


async def run() -> list[Figure]:
    cpu, _, rate = await step_medians(_measure)
    return [
        Figure(
            "floor (no steward): CPU per step, 1 run",
            cpu,
            "us",
            None,
            higher_is_better=False,
        ),
        Figure(
            f"floor (no steward): steps/s, {CONCURRENT} concurrent runs",
            rate,
            "steps/s",
            None,
        ),
    ]
