"""`steward workflow`: check a workflow file, run it, pause, resume, cancel.

`run` records the workflow run's first event (its definition and inputs)
and, on an embedded log nobody hosts, hosts the log until the run ends,
printing a line per phase, transition and routing decision; the last line
is the workflow run's id. Beside a `serve` (or on JetStream, with workers)
it records the run and follows it in the log.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import signal
import sys

from msgspec.structs import replace

from steward import events
from steward.actors.kind import kind_of
from steward.actors.tools import ToolRegistry
from steward.actors.workflow import Workflow, workflow_stream
from steward.bus import EventLog
from steward.cli.env import EXIT_FAILED, EXIT_INTERRUPTED, Env, opened, stream_records
from steward.cli.hosting import checked_provider, new_host
from steward.errors import StewardError
from steward.host import Host
from steward.hostlock import HostLock
from steward.isotime import iso_time
from steward.workflows import created, load_definition, worktree

TERMINAL = ("completed", "failed", "cancelled")


async def cmd_validate(env: Env, args: argparse.Namespace) -> int:
    definition = load_definition(args.file, env.settings)
    env.out(
        f"{args.file}: ok: workflow {definition.key} v{definition.version}, "
        f"{len(definition.nodes)} nodes, {len(definition.edges)} edges"
    )
    return 0


async def cmd_list(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):
        await projector.catch_up(log)
        where, params = ("WHERE status=?", [args.status]) if args.status else ("", [])
        rows = await projector.query(
            "SELECT workflow_id, status, tree_key, version, phases, current_node, "
            f"updated_at FROM workflow_runs {where} "
            "ORDER BY updated_at DESC, workflow_id LIMIT ?",
            [*params, args.limit],
        )
    if not rows:
        env.out("no workflow runs yet" if not args.status else f"no {args.status} ones")
        return 0
    env.out(
        f"{'id':<22} {'status':<10} {'workflow':<28} {'phases':>6}  {'at':<12} last"
    )
    for wid, status, key, version, phases, node, updated in rows:
        workflow = f"{key} v{version}"
        env.out(
            f"{wid:<22} {status:<10} {workflow:<28} {phases:>6}  {node or '-':<12} "
            f"{iso_time(updated)}"
        )
    return 0


async def cmd_run(env: Env, args: argparse.Namespace) -> int:
    definition = load_definition(args.file, env.settings)
    inputs = dict(_pair(text) for text in args.input)
    if args.id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", args.id):
        raise StewardError(
            f"--id {args.id!r}: letters, digits, _ and - only, starting with a "
            "letter or digit (it names the run's stream, runs and worktree)"
        )
    workflow_id = args.id or f"wf-{secrets.token_hex(4)}"
    tree = await worktree(
        definition,
        env.settings,
        workflow_id,
        repository=args.repo,
        base=args.base,
        branch=args.branch,
        issue=args.issue,
    )
    first = created(
        definition,
        env.settings,
        workflow_id,
        inputs,
        ToolRegistry.with_builtins().specs(),
        file=args.file,
        worktree=tree,
    )
    provider = checked_provider(env)  # bad settings fail before a log is made
    stream = workflow_stream(workflow_id)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    async with opened(env) as (log, projector):
        lock = None if env.distributed else HostLock(env.db)
        host: Host | None = None
        try:
            if (await log.version(stream)) > 0:
                raise StewardError(f"there is a workflow run {workflow_id} already")
            if lock is not None and lock.acquire():
                host = new_host(env, log, projector, provider=provider)
                await host.start()
            submitter = host or Host(log)
            first = replace(first, at=submitter.clock.now())
            if await submitter.submit(stream, first) is None:
                raise StewardError(f"workflow run {workflow_id} was refused")
            env.out(f"workflow {workflow_id}: {definition.key} v{definition.version}")
            if tree is not None:
                env.out(f"  worktree {tree.path} on branch {tree.branch} ({tree.base})")
            state = await _follow(env, log, stream, interrupted, args.quiet)
        finally:
            if host is not None:
                await host.stop()
            if lock is not None:
                lock.release()
            loop.remove_signal_handler(signal.SIGINT)
    if state.status not in TERMINAL:
        print(
            f"interrupted: workflow run {workflow_id} is left {state.status}; "
            f"`steward serve` carries it on, `steward workflow cancel {workflow_id}` "
            "ends it",
            file=sys.stderr,
        )
        env.out(workflow_id)
        return EXIT_INTERRUPTED
    end = f": {state.reason}" if state.reason else ""
    env.out(f"workflow {workflow_id} {state.status}{end}")
    env.out(workflow_id)
    return 0 if state.status == "completed" else EXIT_FAILED


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise StewardError(f"--input {text!r} is not NAME=VALUE")
    return name, value


async def _follow(
    env: Env, log: EventLog, stream: str, interrupted: asyncio.Event, quiet: bool
) -> Workflow:
    """Print the run's steps as they are recorded, until it ends or Ctrl-C;
    its state then."""
    seen = 0
    kind = kind_of(stream)
    state: Workflow = kind.initial
    while True:
        for rec in await log.read(stream, seen + 1):
            seen = rec.version
            state = kind.evolve(state, rec.event)
            line = step_line(rec.event)
            if line and not quiet:
                env.out(line)
        # ended, and its worktree's pull request and removal done
        if (state.status in TERMINAL and state.tool is None) or interrupted.is_set():
            return state
        try:
            await asyncio.wait_for(interrupted.wait(), 0.05)
        except TimeoutError:
            pass


def step_line(event: events.Event) -> str | None:
    """A line saying what a workflow event records; ``None`` for those that
    say nothing new to a person watching."""
    match event:
        case events.PhaseStarted(node=node, attempt=attempt, retry=retry, run_id=rid):
            again = f", retry {retry}" if retry else ""
            handed = ""
            if event.upstream:
                handed = f", given {', '.join(a.node for a in event.upstream)}"
            return f"  phase {node} started (attempt {attempt}{again}{handed}): {rid}"
        case events.PhaseCompleted(node=node, attempt=attempt, decision=decision):
            return f"  phase {node} completed (attempt {attempt}): {decision}"
        case events.PhaseFailed(node=node, reason=reason):
            return f"  phase {node} failed: {reason}"
        case events.TransitionTaken(source=source, target=target, auto=auto, when=when):
            why = "auto" if auto else f"when {when}"
            return f"  {source} -> {target} ({why})"
        case events.PhaseRequeued(node=node, attempt=attempt):
            return f"  phase {node} queued again (attempt {attempt})"
        case events.ToolResulted(ok=ok, output=output, error=error):
            return f"  git: {output}" if ok else f"  git failed: {error}"
        case events.WorkflowPaused():
            return "  paused"
        case events.WorkflowResumed():
            return "  resumed"
        case _:
            return None


async def _operator(env: Env, name: str, input: events.Event, verb: str) -> int:
    stream = name if name.startswith("workflow.") else workflow_stream(name)
    async with opened(env, create=False) as (log, projector):
        await stream_records(log, stream)
        host = Host(log, projector=projector)
        commit = await host.submit(stream, replace(input, at=host.clock.now()))
        state, _ = await host.state(stream)
    workflow_id = stream.removeprefix("workflow.")
    if commit is None:
        env.out(f"workflow run {workflow_id} is {state.status}: it cannot be {verb}")
        return EXIT_FAILED
    env.out(f"workflow run {workflow_id} is now {state.status}")
    return 0


async def cmd_pause(env: Env, args: argparse.Namespace) -> int:
    paused = events.WorkflowPauseRequested(reason=args.reason)
    return await _operator(env, args.id, paused, "paused")


async def cmd_resume(env: Env, args: argparse.Namespace) -> int:
    return await _operator(env, args.id, events.WorkflowResumeRequested(), "resumed")


async def cmd_cancel(env: Env, args: argparse.Namespace) -> int:
    cancel = events.WorkflowCancelRequested(reason=args.reason)
    return await _operator(env, args.id, cancel, "cancelled")


def show_workflow(env: Env, records: list[events.Recorded]) -> None:
    """A workflow run from its log: its status, the phase path it took, each
    attempt (and retry) of each phase with its routing decision, and each
    transition taken."""
    state: Workflow = kind_of(records[0].stream).initial
    tries: list[list[str]] = []
    taken: list[str] = []
    for rec in records:
        state = kind_of(rec.stream).evolve(state, rec.event)
        match rec.event:
            case events.PhaseStarted(node=node, attempt=attempt, retry=retry) as e:
                again = f" retry {retry}" if retry else ""
                tries.append([f"{node} #{attempt}{again}", "running", "", e.run_id])
            case events.PhaseCompleted() as e:
                tries[-1][1:3] = ["completed", e.decision]
            case events.PhaseFailed(reason=why):
                tries[-1][1:3] = ["failed", why[:60]]
            case events.TransitionTaken(source=source, target=target) as e:
                how = "auto" if e.auto else f"when {e.when}"
                taken.append(f"  {source} -> {target}  (priority {e.priority}, {how})")
            case _:
                pass
    assert state.definition is not None
    defn = state.definition
    reason = f"  ({state.reason})" if state.reason else ""
    env.out(
        f"workflow {state.workflow_id}  {state.status}  "
        f"{defn.key} v{defn.version}{reason}"
    )
    path = " > ".join(t[0].split(" #")[0] for t in tries)
    env.out(f"path: {path or '(no phase started)'}")
    env.out(f"  {'phase':<22} {'status':<10} {'decision':<18} run")
    for label, status, outcome, run_id in tries:
        env.out(f"  {label:<22} {status:<10} {outcome:<18} {run_id}")
    if taken:
        env.out("transitions:")
        for line in taken:
            env.out(line)
