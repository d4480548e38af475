"""What the console shows of a task (pure): its program's evaluation tree,
the calls in evaluation order with their status and results, nested in the
loops and forms around them, each subtask linked (as `steward task show`
draws it)."""

from __future__ import annotations

from collections.abc import Sequence

from steward.actors.sections import Branch, Section, Tree
from steward.actors.task.decider import evaluation
from steward.actors.task.eval import TraceLine
from steward.actors.task.events import SubtaskSpawned
from steward.actors.task.state import Task, task_stream
from steward.events import Recorded

__all__ = ["sections"]

RESULT_CHARS = 240
"""Characters of a call's result a branch shows."""


def sections(state: Task, records: Sequence[Recorded]) -> tuple[Section, ...]:
    """The evaluation tree of task ``state``, whose stream's records are
    ``records``."""
    if state.created is None:
        return ()
    spawned: dict[int, list[SubtaskSpawned]] = {}
    for rec in records:
        if isinstance(rec.event, SubtaskSpawned):
            spawned.setdefault(rec.event.call, []).append(rec.event)
    trace: list[TraceLine] = []
    if state.problem is None:
        evaluation(state, trace)
    roots = _nested(state, trace, spawned)
    flight = _in_flight(state, spawned)
    if flight is not None:
        roots.append(flight)
    error = state.error
    if state.problem is not None:
        note = f"the program could not be read: {state.problem}"
    elif error is not None:
        note = f"the task failed: {error.kind}: {error.message}"
    else:
        note = (
            f"{len(state.finished)} calls finished, {state.subtasks} subtasks; "
            f"the task is {state.status}"
        )
    return (
        Tree(
            title="Evaluation tree",
            roots=tuple(roots),
            empty="No call has finished yet.",
            note=note,
        ),
    )


def _nested(
    state: Task, trace: Sequence[TraceLine], spawned: dict[int, list[SubtaskSpawned]]
) -> list[Branch]:
    """The trace's lines as branches, each under the line before it of one
    depth less."""
    roots: list[Branch] = []
    open_: list[tuple[int, Branch, list[Branch]]] = []
    """The branches still taking children: (depth, branch, its children)."""

    def close(depth: int) -> None:
        while open_ and open_[-1][0] >= depth:
            _, branch, children = open_.pop()
            done = Branch(
                label=branch.label,
                detail=branch.detail,
                status=branch.status,
                link=branch.link,
                children=(*branch.children, *children),
            )
            (open_[-1][2] if open_ else roots).append(done)

    for line in trace:
        close(line.depth)
        open_.append((line.depth, _branch(state, line, spawned), []))
    close(0)
    return roots


def _branch(
    state: Task, line: TraceLine, spawned: dict[int, list[SubtaskSpawned]]
) -> Branch:
    if line.call is None or line.call > len(state.finished):
        return Branch(label=line.text, status=None)
    finished = state.finished[line.call - 1]
    tokens = finished.usage.input_tokens + finished.usage.output_tokens
    content = finished.content
    if len(content) > RESULT_CHARS:
        content = content[: RESULT_CHARS - 1] + "…"
    limit = f", at its {finished.limit} limit" if finished.limit else ""
    return Branch(
        label=f"call {line.call}: {line.text}",
        detail=f"{content} ({finished.turns} turns, {tokens} tokens{limit})",
        status="completed" if finished.status == "COMPLETE" else "failed",
        children=_subtasks(spawned.get(line.call, ())),
    )


def _subtasks(asked: Sequence[SubtaskSpawned]) -> tuple[Branch, ...]:
    return tuple(
        Branch(
            label=f"subtask {s.task_id}: {s.template}",
            detail=s.request.description,
            link=task_stream(s.task_id),
        )
        for s in asked
    )


def _in_flight(state: Task, spawned: dict[int, list[SubtaskSpawned]]) -> Branch | None:
    """The call started and not finished, if one is."""
    if not state.started or state.started[-1].call <= len(state.finished):
        return None
    call = state.started[-1]
    what = f"tool {call.tool}" if call.tool else call.template
    return Branch(
        label=f"call {call.call}: {what}",
        detail="in flight",
        status="running",
        children=_subtasks(spawned.get(call.call, ())),
    )
