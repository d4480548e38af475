"""The events of a task program (the ``task`` actor kind, spec 002).

A task is one stream, ``task.<id>``, that evaluates an S-expression program
over atomic templates. Its first event records the program text, the
templates it may call, its arguments and limits, so a replay evaluates it as
the live task did whatever the files now say. Each call the program makes
(an atomic template, a tool through ``system:run_script``) is numbered in
evaluation order; an atomic call is a small conversation with the model
(`LlmRequested` / `LlmResponded`, and `ToolRequested` / `ToolResulted` for
the tools its template allows) that ends in `CallFinished`. An atomic task
that answers ``CONTINUATION`` spawns a subtask: a child task that answers
its parent through ``reply_to`` with `ChildFinished`, given back to the
atom as the answer of its ``subtask`` tool call. The program is evaluated
again over the calls finished so far at each step (`steward.actors.task.eval`):
a step of evaluation is a function of the program and the recorded results.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from steward.events.base import Event
from steward.events.protocol import (
    CancelRequested,
    ChildFinished,
    EffectClaimed,
    LlmAttemptFailed,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    LlmStreamRecorded,
    ToolRequested,
    ToolResulted,
    ToolSpec,
    Usage,
)

__all__ = [
    "TASK_REVISION",
    "CallFinished",
    "ContextManagement",
    "DEFAULT_MAX_DEPTH",
    "SubtaskRequest",
    "SubtaskRefused",
    "SubtaskSpawned",
    "TaskCompleted",
    "TaskCreated",
    "TaskError",
    "TaskFailed",
    "TaskLimits",
    "Template",
    "CallStarted",
]

DEFAULT_MAX_DEPTH = 5
"""Subtasks nest this deep at most unless a task or request says otherwise."""

InheritContext = Literal["full", "none", "subset"]
AccumulationFormat = Literal["notes_only", "full_output"]
FreshContext = Literal["enabled", "disabled"]


class ContextManagement(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """A ``<context_management>`` block: each field left ``None`` takes the
    default of the operator and subtype (`steward.actors.task.templates`)."""

    inherit_context: InheritContext | None = None
    accumulate_data: bool | None = None
    accumulation_format: AccumulationFormat | None = None
    fresh_context: FreshContext | None = None


class Template(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """An atomic task template: a function of its declared ``params``.

    ``instructions`` (and ``system``) hold ``{{param}}`` placeholders, each
    one a declared parameter (checked when the template is loaded). A call
    binds the parameters, in order, to its arguments, and nothing else."""

    name: str
    params: tuple[str, ...] = ()
    instructions: str
    system: str = ""
    description: str = ""
    model: str | None = None
    """The ``[models.<name>]`` table its calls go to (the task's otherwise)."""
    output_format: Literal["text", "json"] = "text"
    max_turns: int | None = None
    """Model calls one atomic call may make (the task's limit otherwise)."""
    max_tokens: int | None = None
    """Tokens (in and out) one atomic call may use, at most."""
    context: ContextManagement = ContextManagement()
    subtype: Literal["standard", "subtask"] = "standard"
    matches: tuple[str, ...] = ()
    """Words the template matcher scores a subtask request's hints against."""
    tools: tuple[str, ...] = ()
    """Tools its model may call (of the registry), besides ``subtask``."""
    subtasks: bool = True
    """Whether its model may answer ``CONTINUATION`` (the ``subtask`` tool)."""
    source: str = ""
    """The file it was loaded from (``defatom``: the program's)."""


class TaskLimits(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """What a task may spend; reaching one ends it with a `TaskError`
    naming the limit, and its partial results."""

    max_depth: int = DEFAULT_MAX_DEPTH
    """Subtasks below this task, at most (the task itself is at ``depth``)."""
    max_turns: int = 8
    """Model calls per atomic call, unless its template says fewer or more."""
    max_tokens: int | None = None
    """Tokens (in and out) per atomic call, unless its template says."""
    max_calls: int = 1_000
    """Calls (atomic and tool) the whole program may make."""


class SubtaskRequest(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """What an atomic task answering ``CONTINUATION`` asks for (the spec's
    ``SubtaskRequest``), as validated."""

    type: str
    description: str
    inputs: dict[str, Any] = {}
    template_hints: tuple[str, ...] = ()
    context_management: ContextManagement | None = None
    max_depth: int | None = None
    subtype: str | None = None
    disable_context: bool = False


class TaskError(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True
):
    """Why a task ended without its result, with what it had got so far.

    ``kind``: ``limit`` (``limit`` names it: ``iterations``, ``turns``,
    ``tokens``, ``depth``, ``calls``, ``steps``), ``call`` (an atomic call or tool
    failed), ``subtask`` (a subtask request was refused), ``eval`` (the
    program went wrong: an unknown name, a wrong argument), ``cancelled``."""

    kind: Literal["limit", "call", "subtask", "eval", "cancelled"]
    message: str
    limit: str | None = None
    call: int | None = None
    """The call (in evaluation order, from 1) that failed, if one did."""
    partial: dict[str, Any] = {}
    """Every variable bound when the task ended (innermost last)."""
    last_iteration: Any = None
    """The output of a loop's last iteration, when a loop was running."""
    request: SubtaskRequest | None = None
    depth: int | None = None


class TaskCreated(Event, frozen=True, kw_only=True):
    """A task program starts (the stream's first event)."""

    task_id: str
    program: str
    templates: tuple[Template, ...] = ()
    args: dict[str, Any] = {}
    """Variables the program sees at its top level (``--arg NAME=VALUE``)."""
    tools: tuple[ToolSpec, ...] = ()
    """The specs of the tools its templates may offer, as they were."""
    limits: TaskLimits = TaskLimits()
    context: tuple[str, ...] = ()
    """Context items (notes, file descriptions) the task was given or
    inherited from its parent."""
    model: str | None = None
    """The ``[models.<name>]`` table of calls whose template names none."""
    reply_to: str | None = None
    depth: int = 0
    context_management: ContextManagement | None = None
    """The context settings of its calls over the program's defaults (a
    subtask's, as its request and the defaults for subtasks resolved them)."""
    lineage: tuple[str, ...] = ()
    """The template-and-inputs signature of each task above this one, for
    cycle detection."""
    source: str = ""
    """The program's file, if it came from one."""
    at: float = 0.0
    revision: int = 0
    """The evaluator's behaviour the task was created under (`TASK_REVISION`
    for new tasks and their subtasks, 0 for tasks recorded before), so an
    old task evaluates again exactly as it was recorded. Revision 1: a
    ``director-evaluator-loop`` that reaches ``max-iterations`` without a
    ``stop`` returns its last executor result, as hoidn/llm's loop does
    (before, the task failed at its ``iterations`` limit), and
    ``(max-iterations 0)`` runs nothing and gives nil (before, refused)."""


TASK_REVISION = 1
"""The revision new tasks are created with; see `TaskCreated.revision`."""


class CallStarted(Event, frozen=True, kw_only=True):
    """The program calls atomic template ``template`` (or, with ``tool``,
    runs a tool): call number ``call`` in evaluation order."""

    call: int
    template: str = ""
    args: dict[str, Any] = {}
    """The template's parameters bound to their values (a tool's arguments)."""
    tool: str | None = None
    context: tuple[str, ...] = ()
    """The context items the atom is given (inherited, accumulated, fresh)."""


class SubtaskSpawned(Event, frozen=True, kw_only=True):
    """Call ``call``'s model answered ``CONTINUATION``: child task
    ``task_id`` runs template ``template`` for it."""

    call: int
    task_id: str
    template: str
    request: SubtaskRequest
    tool_call_id: str | None = None
    """The ``subtask`` tool call it answers (``None``: asked in text)."""


class CallFinished(Event, frozen=True, kw_only=True):
    """Call ``call`` ended: its result, as the program sees it."""

    call: int
    status: Literal["COMPLETE", "FAILED"]
    content: str
    notes: dict[str, Any] = {}
    usage: Usage = Usage()
    turns: int = 0
    limit: str | None = None
    """The limit (``turns``, ``tokens``) it reached, if it failed on one."""


class SubtaskRefused(Event, frozen=True, kw_only=True):
    """Call ``call``'s model asked for a subtask that cannot run (an invalid
    request, no template matching it): it is told ``reason`` as the answer
    and asked again."""

    call: int
    reason: str
    tool_call_id: str | None = None


class TaskCompleted(Event, frozen=True, kw_only=True):
    """The program's value: ``output`` as text, ``value`` as JSON."""

    output: str
    value: Any = None
    reply_to: str | None = None
    """The stream the result is delivered to (the parent's), if any."""


class TaskFailed(Event, frozen=True, kw_only=True):
    """The task ended without its result."""

    error: TaskError
    reply_to: str | None = None
    """The stream the result is delivered to (the parent's), if any."""
    subtask: str | None = None
    """The subtask in flight (its stream) when the task was cancelled: it is
    cancelled too."""


INPUT_TYPES: tuple[type[Event], ...] = (
    TaskCreated,
    LlmResponded,
    LlmFailed,
    LlmAttemptFailed,
    LlmStreamRecorded,
    ToolResulted,
    ChildFinished,
    EffectClaimed,
    CancelRequested,
)

EVENT_TYPES: tuple[type[Event], ...] = (
    *INPUT_TYPES,
    CallStarted,
    SubtaskSpawned,
    SubtaskRefused,
    CallFinished,
    TaskCompleted,
    TaskFailed,
    LlmRequested,
    ToolRequested,
)
