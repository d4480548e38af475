"""What a task's committed decisions ask of the host, as effect values
(pure): a subtask's child task, created with its template, inputs and
context and answering its parent through ``reply_to``; the task's result
delivered to its own parent; a cancel to the subtask in flight when the task
is cancelled. And how a task shows itself."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from steward.actors.effects import (
    Create,
    Deliver,
    Effect,
    ModelCall,
    Pending,
    Want,
    WantKind,
    cancel_key,
    notify_key,
    spawn_key,
)
from steward.actors.prompt import Prompt, PromptCache
from steward.actors.task.decider import atom_prompt, relevant
from steward.actors.task.events import (
    ContextManagement,
    SubtaskSpawned,
    TaskCompleted,
    TaskCreated,
    TaskFailed,
)
from steward.actors.task.state import Task, signature, task_stream
from steward.actors.task.templates import resolve_context
from steward.events import Event, Recorded
from steward.events.protocol import CancelRequested, ChildFinished, LlmRequested

__all__ = [
    "ROUTED",
    "child_task",
    "correlation",
    "detach",
    "effects",
    "model_call",
    "pending",
    "show",
]

ROUTED: frozenset[type[Event]] = frozenset({SubtaskSpawned, TaskCompleted, TaskFailed})


def effects(rec: Recorded, at: Task, latest: Task) -> list[Effect]:
    """What committed event ``rec`` asks for, given the task's state at it."""
    match rec.event:
        case SubtaskSpawned(task_id=child) as spawned:
            stream = task_stream(child)
            if latest.atom is None or latest.atom.child != stream:
                return []  # answered already (a fork copies its result)
            return [
                Create(
                    key=spawn_key(stream),
                    stream=stream,
                    input=child_task(at, spawned, rec.stream),
                    stamp=True,
                )
            ]
        case TaskCompleted(reply_to=str(parent), output=output):
            done = ChildFinished(stream=rec.stream, status="completed", output=output)
            return [_deliver(rec.stream, parent, done)]
        case TaskFailed(reply_to=to, error=error, subtask=below):
            out: list[Effect] = []
            if to is not None:
                result = ChildFinished(
                    stream=rec.stream,
                    status="failed",
                    output=error.message,
                    metadata={"error": _plain(error)},
                )
                out.append(_deliver(rec.stream, to, result))
            if below is not None:
                why = f"its parent task {at.id} was cancelled"
                out.append(
                    Deliver(
                        key=cancel_key(below),
                        stream=below,
                        input=CancelRequested(reason=why),
                        stamp=True,
                    )
                )
            return out
        case _:
            return []


def _deliver(stream: str, parent: str, result: ChildFinished) -> Deliver:
    return Deliver(key=notify_key(stream), stream=parent, input=result, stamp=True)


def _plain(error: Any) -> Any:
    return msgspec.to_builtins(error)


def child_task(state: Task, spawned: SubtaskSpawned, parent: str) -> TaskCreated:
    """The first event of subtask ``spawned``, given its parent's state: a
    program calling its template with the request's inputs; the context the
    request's context management gives it (by default, for a subtask, none
    inherited and what matches the request chosen fresh from the parent's);
    one level deeper, its signature added to the lineage."""
    created = state.created
    atom = state.atom
    assert created is not None and atom is not None
    template = state.templates[spawned.template]
    request = spawned.request
    inputs = {p: request.inputs[p] for p in template.params}
    cm = resolve_context(
        "subtask", request.subtype or template.subtype, request.context_management
    )
    about = (request.type, request.description, *request.template_hints)
    pool = atom.context
    context: tuple[str, ...] = ()
    if request.disable_context:
        context = ()
    elif cm.inherit_context == "full":
        context = pool
    elif cm.inherit_context == "subset":
        context = relevant(pool, *about)
    elif cm.fresh_context == "enabled":
        context = relevant((*created.context, *pool), *about)
    deepest = created.limits.max_depth
    if request.max_depth is not None:
        deepest = min(deepest, request.max_depth)
    return TaskCreated(
        revision=created.revision,  # a subtask evaluates as its parent does
        task_id=spawned.task_id,
        program=f"({template.name}{''.join(' ' + p for p in template.params)})",
        templates=tuple(state.templates.values()),
        args=inputs,
        tools=created.tools,
        limits=replace(created.limits, max_depth=deepest),
        context=tuple(dict.fromkeys(context)),
        context_management=ContextManagement(
            inherit_context="full",
            accumulate_data=cm.accumulate_data,
            accumulation_format=cm.accumulation_format,
            fresh_context="disabled",
        ),
        model=created.model,
        reply_to=parent,
        depth=created.depth + 1,
        lineage=(*created.lineage, signature(template.name, inputs)),
        source=created.source,
    )


def pending(rec: Recorded) -> Pending:
    """What a task's recorded event asks of a host that a crash must not
    lose: its subtask's creation, its result's delivery, a cancel."""
    match rec.event:
        case SubtaskSpawned(task_id=child):
            stream = task_stream(child)
            return Pending(wants=(Want(key=spawn_key(stream), kind=WantKind.CREATE),))
        case ChildFinished(stream=stream):
            return Pending(
                answers=(notify_key(stream), spawn_key(stream), cancel_key(stream))
            )
        case TaskCompleted(reply_to=parent):
            return Pending(ended=True, wants=_notify(rec.stream, parent))
        case TaskFailed(reply_to=parent, subtask=below):
            cancel = (
                (Want(key=cancel_key(below), kind=WantKind.DELIVER),) if below else ()
            )
            return Pending(ended=True, wants=(*_notify(rec.stream, parent), *cancel))
        case TaskCreated(reply_to=str()):
            # created: its creation (the parent's want) is answered
            return Pending(answers=(spawn_key(rec.stream),))
        case _:
            return Pending()


def _notify(stream: str, parent: str | None) -> tuple[Want, ...]:
    """The delivery of a task's result to its parent, if it has one."""
    return (Want(key=notify_key(stream), kind=WantKind.DELIVER),) if parent else ()


def model_call(
    state: Task,
    request: LlmRequested,
    cache: PromptCache | None = None,
    prompt: Prompt | None = None,
) -> ModelCall:
    """The atom in flight's model call: the prompt its request hashed,
    rebuilt from the state at the request."""
    atom = state.atom
    assert atom is not None and state.created is not None
    template = state.templates[atom.template]
    return ModelCall(
        prompt=prompt or atom_prompt(state),
        table=template.model or state.created.model,
    )


def correlation(state: Task, input: Event) -> str | None:
    """A task's commits correlate by the task at the top of its tree."""
    if isinstance(input, TaskCreated):
        return input.task_id.partition("/")[0]
    return state.id.partition("/")[0] or None


def detach(event: Event, origin: str) -> Event:
    """A forked task's first input answers no one."""
    if isinstance(event, TaskCreated):
        return replace(event, reply_to=None)
    return event


def show(stream: str, count: int, state: Task) -> list[str]:
    """What `steward replay` prints of a task."""
    lines = [
        f"task {state.id}: {state.status}, {len(state.finished)} calls finished, "
        f"{count} events"
    ]
    if state.status == "completed":
        lines.append(f"output: {state.output}")
    if state.error is not None:
        limit = f" ({state.error.limit})" if state.error.limit else ""
        lines.append(f"error: {state.error.kind}{limit}: {state.error.message}")
    return lines
