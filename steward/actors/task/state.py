"""A task's state and how its events fold into it (pure): ``Task``, its
atoms (the template calls in flight), ``initial`` and ``evolve``; its stream;
and the call signatures its evaluation checks. `steward.actors.task.decider`
decides on it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import msgspec
from msgspec.structs import replace

from steward.actors.outstanding import Outstanding, folded
from steward.actors.task.eval import (
    Checkpoint,
    Done,
    Failed,
    Need,
    defined_atoms,
    reserved_problems,
    resume,
)
from steward.actors.task.events import (
    CallFinished,
    CallStarted,
    SubtaskRefused,
    SubtaskRequest,
    SubtaskSpawned,
    TaskCompleted,
    TaskCreated,
    TaskError,
    TaskFailed,
    Template,
)
from steward.actors.task.lang import Node, ParseError, parse
from steward.actors.task.templates import (
    TemplateError,
    substitute,
    template_problems,
)
from steward.actors.task.values import Result, plain, text_of
from steward.events import Event
from steward.events.protocol import (
    ChatMessage,
    ChildFinished,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolCall,
    ToolRequested,
    ToolResulted,
    ToolSpec,
    Usage,
    assistant_message,
)

SUBTASK_TOOL = ToolSpec(
    name="subtask",
    description=(
        "Answer CONTINUATION: hand part of your work to a subtask, whose "
        "result comes back as this call's answer. type: the kind of work; "
        "description: what it must do; inputs: the values it needs, by "
        "name; template_hints: names or words of the template to use."
    ),
    parameters={
        "type": "object",
        "properties": {
            "type": {"type": "string"},
            "description": {"type": "string"},
            "inputs": {"type": "object"},
            "template_hints": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["type", "description", "inputs"],
    },
)
"""The tool an atomic call's model answers ``CONTINUATION`` with."""


class Atom(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The atomic call in flight: its conversation and what it waits for."""

    call: int
    template: str
    messages: tuple[ChatMessage, ...]
    context: tuple[str, ...] = ()
    turns: int = 0
    usage: Usage = Usage()
    asked: str | None = None
    """The model call in flight."""
    waiting: tuple[tuple[str, str | None], ...] = ()
    """The tool calls in flight: each one's request id and the model's id of
    the call it carries out."""
    child: str | None = None
    """The subtask in flight (its stream)."""
    child_call: str | None = None
    """The ``subtask`` tool call its result answers (``None``: asked in text)."""
    child_request: SubtaskRequest | None = None
    """What the subtask in flight was asked (told back if it fails)."""


class Task(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A task program's state."""

    id: str = ""
    created: TaskCreated | None = None
    program: tuple[Node, ...] = ()
    templates: dict[str, Template] = {}
    problem: str | None = None
    """Why the program could not be read, if it could not."""
    started: tuple[CallStarted, ...] = ()
    finished: tuple[CallFinished, ...] = ()
    atom: Atom | None = None
    tool: str | None = None
    """A program's tool call in flight (``system:run_script``, ``call-tool``)."""
    subtasks: int = 0
    model_calls: int = 0
    status: str = "new"
    """``new``, ``running``, ``completed`` or ``failed``."""
    output: str = ""
    value: Any = None
    error: TaskError | None = None
    outstanding: Outstanding = Outstanding()
    """The model and tool calls in flight, and the claims on them."""
    next: Need | TaskCompleted | TaskFailed | None = None
    """What the program does next, evaluated when the task is created and
    when a call finishes: the call it asks for, or the event that ends the
    task."""
    checkpoint: Checkpoint | None = None
    """Where the next evaluation starts (``None``: the program's start)."""


initial = Task()


def task_stream(task_id: str) -> str:
    """The stream of task ``task_id``."""
    return f"task.{task_id}"


def signature(template: str, inputs: dict[str, Any]) -> str:
    """What a subtask is, for cycle detection: its template and inputs."""
    return f"{template} {json.dumps(plain(inputs), sort_keys=True, ensure_ascii=False)}"


# -- evolve --------------------------------------------------------------------------


def evolve(state: Task, event: Event) -> Task:
    """``state`` after ``event``."""
    return folded(_evolve(state, event), event)


def _evolve(state: Task, event: Event) -> Task:
    atom = state.atom
    match event:
        case TaskCreated():
            return _created(state, event)
        case CallStarted(call=call, template=template, tool=None) as started:
            first = ChatMessage(role="user", content=_instructions(state, started))
            return replace(
                state,
                started=(*state.started, started),
                atom=Atom(
                    call=call,
                    template=template,
                    messages=(first,),
                    context=started.context,
                ),
            )
        case CallStarted() as started:
            return replace(state, started=(*state.started, started))
        case ToolRequested(request_id=rid) if atom is None:
            return replace(state, tool=rid)
        case ToolRequested(request_id=rid, call_id=call_id) if atom is not None:
            waiting = (*atom.waiting, (rid, call_id))
            return replace(state, atom=replace(atom, waiting=waiting))
        case LlmRequested(request_id=rid) if atom is not None:
            return replace(
                state,
                model_calls=state.model_calls + 1,
                atom=replace(atom, asked=rid, turns=atom.turns + 1),
            )
        case LlmResponded(request_id=rid) as reply if atom and rid == atom.asked:
            # the reasoning a provider wants back within the call's tool loop
            said = assistant_message(reply.text, reply.tool_calls, reply.reasoning)
            refused = tuple(_refusals(state, atom, reply.tool_calls))
            usage = Usage(
                input_tokens=atom.usage.input_tokens + reply.usage.input_tokens,
                output_tokens=atom.usage.output_tokens + reply.usage.output_tokens,
            )
            return replace(
                state,
                atom=replace(
                    atom,
                    asked=None,
                    usage=usage,
                    messages=(*atom.messages, said, *refused),
                ),
            )
        case LlmFailed(request_id=rid) if atom and rid == atom.asked:
            return replace(
                state,
                atom=replace(atom, asked=None),
            )
        case ToolResulted(request_id=rid) if rid == state.tool:
            return replace(state, tool=None)
        case ToolResulted(request_id=rid) as result if atom and waits(atom, rid):
            call_id = dict(atom.waiting)[rid]
            answer = ChatMessage(
                role="tool",
                content=result.output if result.ok else f"error: {result.error}",
                tool_call_id=call_id,
            )
            return replace(
                state,
                atom=replace(
                    atom,
                    waiting=tuple(w for w in atom.waiting if w[0] != rid),
                    messages=(*atom.messages, answer),
                ),
            )
        case SubtaskSpawned(task_id=child, tool_call_id=call_id, request=request) if (
            atom is not None
        ):
            return replace(
                state,
                subtasks=state.subtasks + 1,
                atom=replace(
                    atom,
                    child=task_stream(child),
                    child_call=call_id,
                    child_request=request,
                ),
            )
        case SubtaskRefused(reason=reason, tool_call_id=call_id) if atom is not None:
            message = ChatMessage(
                role="tool" if call_id else "user",
                content=f"error: {reason}",
                tool_call_id=call_id,
            )
            return replace(
                state, atom=replace(atom, messages=(*atom.messages, message))
            )
        case ChildFinished(stream=stream) as done if atom and stream == atom.child:
            depth = (state.created.depth if state.created else 0) + 1
            answer = _child_answer(atom, done, depth)
            return replace(
                state,
                atom=replace(
                    atom,
                    child=None,
                    child_call=None,
                    child_request=None,
                    messages=(*atom.messages, answer),
                ),
            )
        case CallFinished() as finished:
            after = replace(state, finished=(*state.finished, finished), atom=None)
            return _evaluated(after)
        case TaskCompleted(output=output, value=value):
            return replace(state, status="completed", output=output, value=value)
        case TaskFailed(error=error):
            # the call in flight stays, to show and for its subtask's cancel
            return replace(state, status="failed", error=error)
        case _:
            return state


def _created(state: Task, event: TaskCreated) -> Task:
    templates = {t.name: t for t in event.templates}
    problem = None
    program: tuple[Node, ...] = ()
    try:
        program = parse(event.program)
        for t in defined_atoms(program, event.source):
            templates[t.name] = t
    except (ParseError, ValueError) as e:
        problem = str(e)
    for t in templates.values():
        found = [*template_problems(t), *reserved_problems(t)]
        if problem is None and found:
            problem = f"template {t.name}: {found[0]}"
    created = replace(
        state,
        id=event.task_id,
        created=event,
        program=program,
        templates=templates,
        problem=problem,
        status="running",
    )
    if problem is not None:
        error = TaskError(kind="eval", message=f"the program: {problem}")
        return replace(created, next=TaskFailed(error=error, reply_to=event.reply_to))
    return _evaluated(created)


def _evaluated(state: Task) -> Task:
    """``state`` with its program evaluated over the calls finished so far,
    from its checkpoint: what it does next, and the next checkpoint."""
    created = state.created
    assert created is not None
    evaluated = resume(state.program, state.checkpoint, **recorded_results(state))
    end: Need | TaskCompleted | TaskFailed
    match evaluated.outcome:
        case Need() as need:
            end = need
        case Done(value=value):
            output, value = text_of(value), plain(value)
            end = TaskCompleted(output=output, value=value, reply_to=created.reply_to)
        case Failed(error=error):
            end = TaskFailed(error=error, reply_to=created.reply_to)
    return replace(state, next=end, checkpoint=evaluated.checkpoint)


def recorded_results(state: Task) -> dict[str, Any]:
    """What the evaluator is given of the task: its templates, arguments and
    limit, and its calls as recorded (read by index, each when needed)."""
    created = state.created
    assert created is not None
    finished = state.finished
    return {
        "templates": state.templates,
        "args": created.args,
        "results": _Each(finished, lambda f: Result(f.status, f.content, f.notes)),
        "started": _Each(state.started, lambda s: (s.template, s.tool, s.args)),
        "failed_limits": _Each(finished, lambda f: f.limit),
        "max_calls": created.limits.max_calls,
        "revision": created.revision,
    }


_T = TypeVar("_T")


class _Each(Sequence[_T]):
    """``items`` as ``read`` reads each, when it is read."""

    def __init__(self, items: Sequence[Any], read: Callable[[Any], _T]) -> None:
        self.items = items
        self.read = read

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, i: int) -> _T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[_T]: ...
    def __getitem__(self, i: int | slice) -> _T | Sequence[_T]:
        if isinstance(i, slice):
            return [self.read(x) for x in self.items[i]]
        return self.read(self.items[i])


def _instructions(state: Task, started: CallStarted) -> str:
    template = state.templates.get(started.template)
    if template is None:  # recorded by other code: verify names the step
        return ""
    try:
        return substitute(template.instructions, started.args)
    except TemplateError:  # the same
        return ""


def _refusals(
    state: Task, atom: Atom, calls: tuple[ToolCall, ...]
) -> list[ChatMessage]:
    """The answers to the tool calls of a reply that are not carried out: a
    tool the template does not name (or a name the model made up), a
    ``subtask`` beside other calls, or one the template does not allow."""
    template = state.templates[atom.template]
    allowed = offered(state, template)
    names = ", ".join(t.name for t in allowed) or "none"
    lone = len(calls) == 1
    out = []
    for call in calls:
        if call.name == "subtask" and any(t.name == "subtask" for t in allowed):
            if lone:
                continue
            why = "call subtask alone, with no other tool call beside it"
        elif call.name != "subtask" and call.name in tool_names(allowed):
            continue
        else:
            why = f"there is no tool {call.name} here; you may call: {names}"
        out.append(
            ChatMessage(role="tool", content=f"error: {why}", tool_call_id=call.id)
        )
    return out


def tool_names(specs: tuple[ToolSpec, ...]) -> frozenset[str]:
    return frozenset(t.name for t in specs)


def waits(atom: Atom, request_id: str) -> bool:
    """Whether the atom waits for tool call ``request_id``."""
    return any(rid == request_id for rid, _ in atom.waiting)


def _child_answer(atom: Atom, done: ChildFinished, depth: int) -> ChatMessage:
    """A subtask's result, as the answer its parent's model reads: a
    failure with the request it was and its ``depth`` (spec 002)."""
    if done.status == "completed":
        text = done.output
    else:
        told = {"output": done.output, **done.metadata, "depth": depth}
        if atom.child_request is not None:
            told["request"] = msgspec.to_builtins(atom.child_request)
        text = "error: the subtask failed: " + json.dumps(
            told, ensure_ascii=False, sort_keys=True
        )
    if atom.child_call is None:
        return ChatMessage(role="user", content=f"The subtask answered:\n{text}")
    return ChatMessage(role="tool", content=text, tool_call_id=atom.child_call)


def offered(state: Task, template: Template) -> tuple[ToolSpec, ...]:
    """The tools an atomic call of ``template`` is offered."""
    created = state.created
    specs = tuple(
        t for t in (created.tools if created else ()) if t.name in template.tools
    )
    if template.subtasks:
        specs = (*specs, SUBTASK_TOOL)
    return specs


__all__ = [
    "Atom",
    "SUBTASK_TOOL",
    "Task",
    "evolve",
    "initial",
    "offered",
    "recorded_results",
    "signature",
    "task_stream",
    "tool_names",
    "waits",
]
