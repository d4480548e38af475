"""The task program's decider (pure): evaluate a program over atomic calls.

A task's state holds its program (read once, when it is created), the
templates it may call, the calls it started and finished, and the atomic
call in flight. When a call finishes, the state's program is evaluated
again over the results so far (`steward.actors.task.eval`), from the
checkpoint its last evaluation left (so a step costs the same however many
calls came before it): what it does next is part of the state, and the
decider starts its next call, or ends the task with its value or its error.

An atomic call is a conversation with the model, the Handler of the spec:
the template's instructions with its parameters substituted, the context it
is given, and the tools its template names. A reply with tool calls runs
them (a tool its template does not name is refused, with the names it may
call) and asks again; a reply that answers ``CONTINUATION`` (the
``subtask`` tool, or ``{"status": "CONTINUATION", "subtask_request":
{...}}`` as text) spawns a subtask, whose result comes back as that call's
answer; any other reply is the call's result. The call fails at its
template's turn or token limit, keeping what it had.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from msgspec.structs import replace

from steward.actors.outstanding import Outstanding
from steward.actors.prompt import Prompt, prompt_hash
from steward.actors.task.eval import (
    Need,
    Outcome,
    TraceLine,
    evaluate,
)
from steward.actors.task.events import (
    CallFinished,
    CallStarted,
    ContextManagement,
    SubtaskRefused,
    SubtaskRequest,
    SubtaskSpawned,
    TaskCompleted,
    TaskCreated,
    TaskError,
    TaskFailed,
    Template,
)
from steward.actors.task.state import (
    Atom,
    Task,
    evolve,
    offered,
    recorded_results,
    signature,
    tool_names,
    waits,
)
from steward.actors.task.templates import (
    Scorer,
    TemplateError,
    context_problem,
    match,
    render_value,
    resolve_context,
    score,
    substitute,
)
from steward.actors.task.values import json_value, unfenced
from steward.events import Event
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
)

__all__ = ["atom_prompt", "decide", "evaluation", "outstanding", "relevant"]


def decide(input: Event, state: Task, scorer: Scorer = score) -> list[Event] | None:
    """What the task decides on ``input``; ``None`` refuses it (a duplicate
    or stale answer, an input for an ended task). A subtask's template is
    the one ``scorer`` scores highest for its request (`[task] scorer`)."""
    atom = state.atom
    match input:
        case TaskCreated() if state.created is None:
            return _advance(evolve(state, input))
        case ChildFinished(stream=stream) if atom and stream == atom.child:
            # recorded even when the task ended first (cancelled): it answers
            # the child's delivery
            return _ask(evolve(state, input)) if state.status == "running" else []
        case _ if state.status != "running":
            return None
        case LlmResponded(request_id=rid) as reply if atom and rid == atom.asked:
            return _replied(evolve(state, reply), reply, scorer)
        case LlmFailed(request_id=rid, message=message) if atom and rid == atom.asked:
            return _finish_atom(
                evolve(state, input), "FAILED", f"the model call failed: {message}"
            )
        case LlmAttemptFailed(request_id=rid) | LlmStreamRecorded(request_id=rid) if (
            atom and rid == atom.asked
        ):
            return []
        case ToolResulted(request_id=rid, ok=ok) as result if rid == state.tool:
            after = evolve(state, result)
            content = result.output if ok else (result.error or "the tool failed")
            finished = CallFinished(
                call=len(state.finished) + 1,
                status="COMPLETE" if ok else "FAILED",
                content=content,
            )
            return [finished, *_advance(evolve(after, finished))]
        case ToolResulted(request_id=rid) as result if atom and waits(atom, rid):
            after = evolve(state, result)
            assert after.atom is not None
            return [] if after.atom.waiting else _ask(after)
        case CancelRequested(reason=reason):
            error = TaskError(kind="cancelled", message=reason, partial=_partial(state))
            child = atom.child if atom is not None else None
            return [TaskFailed(error=error, reply_to=_reply_to(state), subtask=child)]
        case EffectClaimed() as claim if outstanding(state).accepts(claim):
            return []
        case _:
            return None


def _advance(state: Task) -> list[Event]:
    """What the program does next (``state.next``): start its next call, or
    end the task."""
    match state.next:
        case TaskCompleted() | TaskFailed() as end:
            return [end]
        case Need(tool=str(tool)) as need:
            started = CallStarted(call=need.call, tool=tool, args=need.args)
            request = ToolRequested(
                request_id=f"{state.id}/tool/{need.call}", name=tool, args=need.args
            )
            return [started, request]
        case Need() as need:
            started = CallStarted(
                call=need.call,
                template=need.template,
                args=need.args,
                context=_context_for(state, state.templates[need.template]),
            )
            return [started, *_ask(evolve(state, started))]
    raise AssertionError(state)


def evaluation(state: Task, trace: list[TraceLine] | None = None) -> Outcome:
    """The task's program evaluated from its start over the calls it started
    and finished (`task_eval.evaluate`), the lines of its tree added to
    ``trace`` if given."""
    return evaluate(state.program, trace=trace, **recorded_results(state))


def _ask(state: Task) -> list[Event]:
    """Ask the model the atom's next turn, unless its turn or token limit
    is reached (the call then fails, keeping its last answer)."""
    atom = state.atom
    assert atom is not None
    template = state.templates[atom.template]
    limits = state.created.limits if state.created else None
    turns = _turns(state)
    tokens = template.max_tokens or (limits.max_tokens if limits else None)
    spent = atom.usage.input_tokens + atom.usage.output_tokens
    if atom.turns >= turns:
        why = f"the call reached its {turns} turns"
        return _finish_atom(state, "FAILED", _with_last(atom, why), limit="turns")
    if tokens is not None and spent >= tokens:
        why = f"the call used {spent} of its {tokens} tokens"
        return _finish_atom(state, "FAILED", _with_last(atom, why), limit="tokens")
    n = state.model_calls + 1
    request = LlmRequested(
        request_id=f"{state.id}/llm/{n}",
        iteration=n,
        prompt_hash=prompt_hash(atom_prompt(state)),
        priority="interactive"
        if not state.created or not state.created.depth
        else "subagent",
    )
    return [request]


def _turns(state: Task) -> int:
    """The model calls the atom in flight may make."""
    atom = state.atom
    assert atom is not None and state.created is not None
    template = state.templates[atom.template]
    return template.max_turns or state.created.limits.max_turns


def _with_last(atom: Atom, why: str) -> str:
    """``why`` a call ended at a limit, with the last answer it had."""
    last = next(
        (m.content for m in reversed(atom.messages) if m.role == "assistant"), ""
    )
    return f"{why}; its last answer: {last}" if last else why


def _replied(state: Task, reply: LlmResponded, scorer: Scorer) -> list[Event]:
    """The atom's model answered (``state`` is after its answer)."""
    atom = state.atom
    assert atom is not None
    template = state.templates[atom.template]
    calls = reply.tool_calls
    if calls:
        subtask = [c for c in calls if c.name == "subtask"]
        if len(calls) == 1 and subtask and template.subtasks:
            return _spawn(state, subtask[0].args, subtask[0].id, scorer)
        run: list[Event] = [
            ToolRequested(
                request_id=f"{state.id}/tool/{atom.call}-{atom.turns}-{i}",
                name=c.name,
                args=c.args,
                call_id=c.id,
            )
            for i, c in enumerate(calls)
            if c.name != "subtask" and c.name in tool_names(offered(state, template))
        ]
        return run or _ask(state)
    status, content, notes, request = _reading(reply.text)
    if status == "CONTINUATION":
        if template.subtasks:
            return _spawn(state, request, None, scorer)
        status, content = (
            "FAILED",
            (
                f"the call answered CONTINUATION, but template {template.name} "
                "allows no subtasks"
            ),
        )
    if status == "COMPLETE" and template.output_format == "json":
        if json_value(content) is None and content.strip() != "null":
            status, content = "FAILED", f"the output is not JSON: {content}"
    return _finish_atom(state, status, content, notes=notes)


def _reading(text: str) -> tuple[str, str, dict[str, Any], Any]:
    """A reply's text as (status, content, notes, subtask request): JSON
    with a ``status`` is read as the spec's result; any other text is a
    complete result."""
    data = json_value(unfenced(text))
    if not isinstance(data, dict) or data.get("status") not in (
        "COMPLETE",
        "FAILED",
        "CONTINUATION",
    ):
        return "COMPLETE", text, {}, None
    given = data.get("notes")
    notes: dict[str, Any] = given if isinstance(given, dict) else {}
    status: str = data["status"]
    if status == "CONTINUATION":
        request = data.get("subtask_request", notes.get("subtask_request", {}))
        return "CONTINUATION", "", notes, request
    content = data.get("content", "")
    return (
        status,
        content if isinstance(content, str) else render_value(content),
        notes,
        None,
    )


def _finish_atom(
    state: Task,
    status: str,
    content: str,
    *,
    notes: dict[str, Any] | None = None,
    limit: str | None = None,
) -> list[Event]:
    atom = state.atom
    assert atom is not None
    finished = CallFinished(
        call=atom.call,
        status="COMPLETE" if status == "COMPLETE" else "FAILED",
        content=content,
        notes=notes or {},
        usage=atom.usage,
        turns=atom.turns,
        limit=limit,
    )
    return [finished, *_advance(evolve(state, finished))]


def _spawn(state: Task, asked: Any, call_id: str | None, scorer: Scorer) -> list[Event]:
    """The atom answered CONTINUATION with ``asked``: a subtask, or (a bad
    request) the reason as its answer, or (too deep, a cycle) the task's
    end."""
    created = state.created
    atom = state.atom
    assert created is not None and atom is not None
    try:
        request = msgspec.convert(asked, SubtaskRequest)
    except msgspec.ValidationError as e:
        return _refuse_subtask(state, f"the subtask_request is invalid: {e}", call_id)
    cm = request.context_management
    problem = context_problem(cm) if cm is not None else None
    if problem is not None:
        return _refuse_subtask(state, problem, call_id)
    turns = _turns(state)
    if atom.turns >= turns:  # its answer could never be read
        why = f"the call reached its {turns} turns before its subtask could answer"
        return _finish_atom(state, "FAILED", _with_last(atom, why), limit="turns")
    template = match(tuple(state.templates.values()), request, scorer)
    if template is None:
        return _refuse_subtask(
            state,
            "no template matches the subtask_request (templates: "
            + ", ".join(sorted(state.templates))
            + "); give template_hints naming one, and inputs for its parameters",
            call_id,
        )
    depth = created.depth + 1
    deepest = min(
        created.limits.max_depth,
        request.max_depth
        if request.max_depth is not None
        else created.limits.max_depth,
    )
    partial = _partial(state)
    if depth > deepest:
        error = TaskError(
            kind="limit",
            limit="depth",
            message=f"a subtask would be {depth} deep; the limit is {deepest}",
            call=atom.call,
            request=request,
            depth=created.depth,
            partial=partial,
        )
        return [TaskFailed(error=error, reply_to=created.reply_to)]
    inputs = {p: request.inputs[p] for p in template.params}
    own = signature(template.name, inputs)
    asking = state.started[atom.call - 1]
    if own in (*created.lineage, signature(asking.template, asking.args)):
        error = TaskError(
            kind="subtask",
            message=f"the subtask {own} would repeat a task above it (a cycle)",
            call=atom.call,
            request=request,
            depth=created.depth,
            partial=partial,
        )
        return [TaskFailed(error=error, reply_to=created.reply_to)]
    child = f"{state.id}/sub/{state.subtasks + 1}"
    return [
        SubtaskSpawned(
            call=atom.call,
            task_id=child,
            template=template.name,
            request=request,
            tool_call_id=call_id,
        )
    ]


def _refuse_subtask(state: Task, why: str, call_id: str | None) -> list[Event]:
    """A subtask request that cannot be run: the model is told why, as its
    request's answer, and asked again."""
    atom = state.atom
    assert atom is not None
    refused = SubtaskRefused(call=atom.call, reason=why, tool_call_id=call_id)
    return [refused, *_ask(evolve(state, refused))]


def _partial(state: Task) -> dict[str, Any]:
    """What the task has got so far: each finished call's content."""
    return {
        f"call {f.call}": f.content for f in state.finished if f.status == "COMPLETE"
    }


def _reply_to(state: Task) -> str | None:
    return state.created.reply_to if state.created else None


# -- context and prompts -------------------------------------------------------------


def _words(*texts: str) -> set[str]:
    return {w for t in texts for w in re.findall(r"[a-z0-9]{3,}", t.lower())}


def relevant(items: tuple[str, ...], *about: str) -> tuple[str, ...]:
    """The ``items`` sharing a word (3 letters or more) with ``about``: the
    associative match of the spec's memory system, over the task's context."""
    words = _words(*about)
    return tuple(i for i in items if _words(i) & words)


def _context_for(state: Task, template: Template) -> tuple[str, ...]:
    """The context items an atomic call of ``template`` is given, by its
    context management: the defaults of its subtype (a ``standard`` one
    inherits all, a ``subtask`` one none and is given what matches it), a
    program's steps accumulating the notes of earlier calls, then what the
    task and the template set."""
    created = state.created
    assert created is not None
    steps = _merged(ContextManagement(accumulate_data=True), created.context_management)
    explicit = _merged(steps, template.context)
    try:
        cm = resolve_context("atomic", template.subtype, explicit)
    except TemplateError:  # refused when the template was loaded
        cm = resolve_context("atomic", template.subtype, None)
    about = (template.name, template.description, *template.matches)
    items: tuple[str, ...] = ()
    if cm.inherit_context == "full":
        items = created.context
    elif cm.inherit_context == "subset" or cm.fresh_context == "enabled":
        items = relevant(created.context, *about)
    if cm.accumulate_data:
        for f in state.finished:
            if f.status != "COMPLETE":
                continue
            if cm.accumulation_format == "full_output":
                items = (*items, f"call {f.call}: {f.content}")
            elif f.notes:
                items = (*items, f"call {f.call} notes: {render_value(f.notes)}")
    return items


def _merged(
    base: ContextManagement | None, over: ContextManagement | None
) -> ContextManagement | None:
    """``base`` with the settings ``over`` makes (those not ``None``)."""
    if base is None or over is None:
        return over if base is None else base
    fields = {k: v for k, v in msgspec.structs.asdict(over).items() if v is not None}
    return replace(base, **fields)


SUBTASK_NOTE = """\
If part of the work is better done apart, answer CONTINUATION: call the
subtask tool (or reply with {"status": "CONTINUATION", "subtask_request":
{"type": ..., "description": ..., "inputs": {...}, "template_hints": [...]}}).
Its result comes back to you as the answer."""

JSON_NOTE = "Answer with JSON only."


def atom_prompt(state: Task) -> Prompt:
    """The prompt of the atom in flight's next turn, from the state alone."""
    atom = state.atom
    assert atom is not None and state.created is not None
    template = state.templates[atom.template]
    started = state.started[atom.call - 1]
    parts = [substitute(template.system, started.args)] if template.system else []
    if template.output_format == "json":
        parts.append(JSON_NOTE)
    if template.subtasks:
        parts.append(SUBTASK_NOTE)
    if atom.context:
        parts.append("## Context\n" + "\n".join(f"- {c}" for c in atom.context))
    return Prompt(
        model="",
        system="\n\n".join(parts),
        messages=atom.messages,
        tools=offered(state, template),
        protocol="native",
    )


# -- what the host asks ----------------------------------------------------------------


def outstanding(state: Task) -> Outstanding:
    """The calls the task awaits, with the claims on them: none once it
    has ended (a call still in flight then is answered to no one)."""
    return state.outstanding if state.status == "running" else Outstanding()
