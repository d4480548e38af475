"""A task program's own cost per atomic step (issue #30).

Target: <= 200 us of CPU per atomic step: committing the model's answer to
the task (the call's result recorded, the program evaluated again over the
results so far, the next call started and its prompt hashed, all in one
commit). The program is read once, when the task is created; the model is
not called (its answers are given here, as an instant scripted model's
would be), so what is measured is the evaluator, the decider and the log.

The program is a loop of `STEPS` atomic calls, each given the last one's
result (``(loop N (bind x (step x)))``). Each step resumes the evaluation
from the checkpoint the last one left (the start of the loop's iteration),
so a step costs the same however many calls came before it: the figure is
the mean over the whole program, and a program of `LONG` steps is shown
beside it, to show it stays flat.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from statistics import median

from benchmarks.common import REPEATS, Figure
from steward import events
from steward.actors.task.events import TaskCompleted, TaskCreated, TaskLimits, Template
from steward.actors.task.state import Task, task_stream
from steward.bus import SqliteEventLog
from steward.host import Host
from steward.kinds import KINDS

STEPS = 50
LONG = 200

STEP = Template(
    name="step",
    params=("x",),
    instructions="Carry on from: {{x}}",
    subtasks=False,
)


async def _per_step_us(path: Path, steps: int) -> float:
    """CPU microseconds per atomic step of a program of ``steps`` calls."""
    log = await SqliteEventLog.open(path, union=KINDS.union)
    host = Host(log, kinds=KINDS)  # not started: the model's answers are given here
    stream = task_stream("bench")
    program = f'(bind x "start") (loop {steps} (bind x (step x))) x'
    created = TaskCreated(
        task_id="bench",
        program=program,
        templates=(STEP,),
        limits=TaskLimits(max_calls=steps + 1),
    )
    assert await host.submit(stream, created) is not None
    started = time.process_time()
    for n in range(1, steps + 1):
        state: Task = (await host.state(stream))[0]
        assert state.atom is not None and state.atom.asked is not None, n
        answer = events.LlmResponded(request_id=state.atom.asked, text=f"answer {n}")
        assert await host.submit(stream, answer) is not None, n
    seconds = time.process_time() - started
    last = (await log.read(stream))[-1].event
    assert isinstance(last, TaskCompleted) and last.output == f"answer {steps}", last
    await log.close()
    return seconds / steps * 1e6


async def run() -> list[Figure]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        per_step = median(
            [await _per_step_us(root / f"t{n}.db", STEPS) for n in range(REPEATS)]
        )
        long = await _per_step_us(root / "long.db", LONG)
    return [
        Figure(
            f"task CPU per atomic step ({STEPS}-call program)",
            per_step,
            "us",
            200.0,
            higher_is_better=False,
        ),
        Figure(f"task CPU per atomic step ({LONG}-call program)", long, "us", None),
    ]
