"""`steward task`: check task programs and templates, run one, show, list, cancel.

`run` records the task's first event (its program, templates, arguments and
limits) and, on an embedded log nobody hosts, hosts the log until the task
ends, printing a line per call started and finished and per subtask; the
last line is the task's id. Beside a `serve` (or on JetStream, with workers)
it records the task and follows it in the log. `show` draws a task's
evaluation as a tree, evaluating its program again over its recorded results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from steward import events
from steward.actors.task.decider import evaluation
from steward.actors.task.eval import TraceLine
from steward.actors.task.events import (
    CallFinished,
    CallStarted,
    SubtaskRefused,
    SubtaskSpawned,
)
from steward.actors.task.programs import created, load_program, load_templates, validate
from steward.actors.task.state import Task, task_stream
from steward.bus import EventLog
from steward.cli.env import (
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    Env,
    opened,
    resolved,
    shown,
    stream_records,
)
from steward.cli.hosting import checked_provider, follow, foreground, pair
from steward.cli.output import (
    cut,
    json_line,
    prompt_lines,
    prompts_of,
)
from steward.errors import NotAllowedError, StewardError
from steward.events.protocol import ChildFinished
from steward.host import Host

__all__ = [
    "cmd_task_cancel",
    "cmd_task_run",
    "cmd_task_show",
    "cmd_task_validate",
    "task_tree",
]

TERMINAL = ("completed", "failed")

SHOWN_CHARS = 70
"""The characters of a call's content or output a line shows."""


async def cmd_task_validate(env: Env, args: argparse.Namespace) -> int:
    path = Path(args.path)
    problems = validate(path)
    for problem in problems:
        print(shown(str(problem)), file=sys.stderr)
    if problems:
        return EXIT_INPUT
    env.out(f"{path}: ok")
    return 0


def _templates_dir(env: Env, given: str | None) -> Path | None:
    """The template directory: ``--templates``, else ``[task] templates``
    when it exists (none at all is fine: a program may ``defatom``)."""
    if given is not None:
        return Path(given)
    default = Path(env.settings.task.templates)
    return default if default.is_dir() else None


async def cmd_task_run(env: Env, args: argparse.Namespace) -> int:
    if args.id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", args.id):
        raise StewardError(
            f"--id {args.id!r}: letters, digits, _ and - only, starting with a "
            "letter or digit (it names the task's stream)"
        )
    path = Path(args.program)
    program = load_program(path)
    directory = _templates_dir(env, args.templates)
    templates = load_templates(directory) if directory is not None else ()
    task_id = args.id or f"task-{secrets.token_hex(4)}"
    tools = env.tools()
    await tools.load(env.settings.servers(env.settings.task.mcp, "task.mcp"))
    first = created(
        program,
        env.settings,
        task_id,
        tools=tools,
        templates=templates,
        args=dict(pair(text, "--arg") for text in args.arg),
        context=tuple(args.context),
        source=str(path),
    )
    provider = checked_provider(env)  # bad settings fail before a log is made
    stream = task_stream(task_id)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    async with opened(env) as (log, projector):
        if (await log.version(stream)) > 0:
            raise StewardError(f"there is a task {task_id} already")
        try:
            async with foreground(
                env, log, projector, provider, f"task {task_id}"
            ) as host:
                first = replace(first, at=host.clock.now())
                if await host.submit(stream, first) is None:
                    raise StewardError(f"task {task_id} was refused")
                env.out(f"task {task_id}: {path} ({len(templates)} templates)")
                state: Task = await follow(
                    env,
                    log,
                    stream,
                    interrupted,
                    quiet=args.quiet,
                    line=step_line,
                    ended=lambda task: task.status in TERMINAL,
                )
        finally:
            loop.remove_signal_handler(signal.SIGINT)
    if state.status not in TERMINAL:
        print(
            f"interrupted: task {task_id} is left {state.status}; `steward serve` "
            f"carries it on, `steward task cancel {task_id}` ends it",
            file=sys.stderr,
        )
        env.out(task_id)
        return EXIT_INTERRUPTED
    for line in _ending(state):
        env.out(line)
    env.out(task_id)
    return 0 if state.status == "completed" else EXIT_FAILED


def step_line(event: events.Event) -> str | None:
    """A line saying what a task event records; ``None`` for those that say
    nothing new to a person watching."""
    match event:
        case CallStarted(call=call, tool=str(tool), args=args):
            return f"  call {call}: tool {tool} {_json(args)}"
        case CallStarted(call=call, template=template, args=args):
            return f"  call {call}: {template} {_json(args)}"
        case events.ToolRequested(name=name, args=args):
            return f"    tool {name} {_json(args)}"
        case SubtaskSpawned(task_id=child, template=template):
            return f"    subtask {child}: {template}"
        case SubtaskRefused(reason=reason):
            return f"    subtask refused: {reason}"
        case ChildFinished(stream=child, status=status):
            return f"    subtask {child.partition('.')[2]} {status}"
        case CallFinished(call=call, status=status, content=content) as e:
            tokens = e.usage.input_tokens + e.usage.output_tokens
            spent = f" ({e.turns} turns, {tokens} tokens)" if e.turns else ""
            return f"  call {call} {status}{spent}: {cut(content, SHOWN_CHARS)}"
        case _:
            return None


def _json(value: Any) -> str:
    return cut(json.dumps(value, ensure_ascii=False, sort_keys=True), SHOWN_CHARS)


def _ending(state: Task) -> list[str]:
    """What a task's end says: its output, or its error and what it had."""
    if state.status == "completed":
        return [f"task {state.id} completed: {state.output}"]
    error = state.error
    assert error is not None
    limit = f" {error.limit}" if error.limit else ""
    lines = [f"task {state.id} failed: {error.kind}{limit}: {error.message}"]
    if error.last_iteration is not None:
        lines.append(f"  last iteration: {cut(_text(error.last_iteration), 200)}")
    for name, value in error.partial.items():
        lines.append(f"  {name} = {cut(_text(value), 200)}")
    return lines


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# -- show ------------------------------------------------------------------------------


async def task_tree(log: EventLog, stream: str, env: Env) -> dict[str, Any]:
    """A task from its log: its status, output or error, and its program's
    evaluation as lines of a tree (its subtasks' trees inside), each call
    with its result, turns and tokens."""
    records = await stream_records(log, stream)
    kind = env.kinds.of(stream)
    state: Task = kind.decider.initial
    for rec in records:
        state = kind.decider.evolve(state, rec.event)
    spawned: dict[int, list[str]] = {}
    for rec in records:
        if isinstance(rec.event, SubtaskSpawned):
            spawned.setdefault(rec.event.call, []).append(rec.event.task_id)
    trace: list[TraceLine] = []
    created = state.created
    assert created is not None
    if state.problem is None:
        evaluation(state, trace)
    lines: list[dict[str, Any]] = []
    for line in trace:
        row: dict[str, Any] = {
            "depth": line.depth,
            "what": line.what,
            "text": line.text,
        }
        if line.call is not None:
            finished = state.finished[line.call - 1]
            row.update(
                call=line.call,
                status=finished.status,
                content=finished.content,
                turns=finished.turns,
                tokens=finished.usage.input_tokens + finished.usage.output_tokens,
            )
            row["subtasks"] = [
                await task_tree(log, task_stream(child), env)
                for child in spawned.get(line.call, [])
                if await log.version(task_stream(child))
            ]
        lines.append(row)
    in_flight = None
    if state.status == "running" and state.started:
        last = state.started[-1]
        if len(state.finished) < last.call:
            in_flight = {
                "call": last.call,
                "template": last.template,
                "tool": last.tool,
            }
    error = state.error
    return {
        "id": state.id,
        "stream": stream,
        "status": state.status,
        "source": created.source or None,
        "depth": created.depth,
        "parent": created.reply_to,
        "calls": len(state.finished),
        "output": state.output if state.status == "completed" else None,
        "error": None
        if error is None
        else {
            "kind": error.kind,
            "limit": error.limit,
            "message": error.message,
            "call": error.call,
            "partial": error.partial,
            "last_iteration": error.last_iteration,
        },
        "in_flight": in_flight,
        "tree": lines,
    }


def tree_lines(task: dict[str, Any], indent: str = "") -> list[str]:
    """`task_tree` for a person."""
    head = f"{indent}task {task['id']}  {task['status']}"
    if task["source"] and not indent:
        head += f"  {task['source']}"
    out = [head]
    for row in task["tree"]:
        pad = indent + "  " * (row["depth"] + 1)
        if row["what"] == "call":
            spent = ""
            if row["turns"]:
                spent = f", {row['turns']} turns, {row['tokens']} tokens"
            out.append(
                f"{pad}call {row['call']}: {row['text']}  -> {row['status']}{spent}"
            )
            out.append(f"{pad}  = {cut(row['content'], SHOWN_CHARS)}")
            for child in row["subtasks"]:
                out.extend(tree_lines(child, pad + "  "))
        else:
            out.append(f"{pad}{row['text']}")
    if task["in_flight"]:
        what = task["in_flight"]["tool"] or task["in_flight"]["template"]
        out.append(f"{indent}  in flight: call {task['in_flight']['call']}: {what}")
    if task["output"] is not None:
        out.append(f"{indent}output: {cut(task['output'], 200)}")
    error = task["error"]
    if error is not None:
        limit = f" {error['limit']}" if error["limit"] else ""
        out.append(f"{indent}error: {error['kind']}{limit}: {error['message']}")
        if error["last_iteration"] is not None:
            last = cut(_text(error["last_iteration"]), 200)
            out.append(f"{indent}  last iteration: {last}")
        for name, value in error["partial"].items():
            out.append(f"{indent}  {name} = {cut(_text(value), 200)}")
    return out


async def cmd_task_show(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, _):
        stream = await resolved(log, args.id, env.kinds)
        if not stream.startswith("task."):
            raise StewardError(f"{args.id} is not a task; `steward replay` shows it")
        task = await task_tree(log, stream, env)
        if args.prompts:  # each call's messages, as the model received them
            task["prompts"] = prompts_of(env.kinds.of(stream), await log.read(stream))
    if args.output == "json":
        env.out(json_line(task))
    else:
        for line in [*tree_lines(task), *prompt_lines(task.get("prompts", []))]:
            env.out(shown(line))
    return 0


# -- list and cancel ---------------------------------------------------------------


async def cmd_task_cancel(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):
        stream = await resolved(log, args.id, env.kinds)
        if not stream.startswith("task."):
            raise StewardError(f"{args.id} is not a task")
        host = Host(log, projector=projector, kinds=env.kinds)
        cancel = events.CancelRequested(reason=args.reason, at=host.clock.now())
        commit = await host.submit(stream, cancel)
        state, _ = await host.state(stream)
    if commit is None:
        raise NotAllowedError(
            f"task {state.id}", state.status, "it cannot be cancelled"
        )
    env.out(f"task {state.id} is now {state.status}")
    return 0
