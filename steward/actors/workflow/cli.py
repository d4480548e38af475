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
from typing import Any

from msgspec.structs import replace

from steward import events
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.decider import (
    Workflow,
    evolve,
    initial,
    workflow_stream,
)
from steward.actors.workflow.definition import (
    created,
    load_definition,
    mcp_of,
    worktree,
)
from steward.actors.workflow.graph import auto_loops
from steward.cli.env import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    Env,
    opened,
    shown,
    stream_records,
)
from steward.cli.hosting import checked_provider, follow, foreground, pair
from steward.cli.output import columns, cut
from steward.errors import NotAllowedError, StewardError
from steward.host import Host

TERMINAL = ("completed", "failed", "cancelled")


async def cmd_validate(env: Env, args: argparse.Namespace) -> int:
    definition = load_definition(args.file, env.settings)
    env.out(
        f"{args.file}: ok: workflow {definition.key} v{definition.version}, "
        f"{len(definition.nodes)} nodes, {len(definition.edges)} edges"
    )
    steps = definition.max_steps or env.settings.workflow.max_steps
    for loop in auto_loops(definition):
        cycle = " -> ".join((*loop, loop[0]))
        warning = (
            f"{args.file}: warning: {cycle} loops by auto edges alone: a run "
            f"that gets there goes round until it fails at max_steps ({steps})"
        )
        print(shown(warning), file=sys.stderr)
    return 0


async def cmd_run(env: Env, args: argparse.Namespace) -> int:
    definition = load_definition(args.file, env.settings)
    inputs = dict(pair(text, "--input") for text in args.input)
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
        await env.offered(mcp_of(definition, env.settings)),
        file=args.file,
        worktree=tree,
    )
    provider = checked_provider(env)  # bad settings fail before a log is made
    stream = workflow_stream(workflow_id)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    async with opened(env) as (log, projector):
        what = f"workflow run {workflow_id}"
        try:
            if (await log.version(stream)) > 0:
                raise StewardError(f"there is a workflow run {workflow_id} already")
            async with foreground(env, log, projector, provider, what) as host:
                first = replace(first, at=host.clock.now())
                if await host.submit(stream, first) is None:
                    raise StewardError(f"workflow run {workflow_id} was refused")
                env.out(
                    f"workflow {workflow_id}: {definition.key} v{definition.version}"
                )
                if tree is not None:
                    env.out(
                        f"  worktree {tree.path} on branch {tree.branch} ({tree.base})"
                    )
                state: Workflow = await follow(
                    env,
                    log,
                    stream,
                    interrupted,
                    quiet=args.quiet,
                    line=step_line,
                    # ended, and its worktree's pull request and removal done
                    ended=lambda run: run.status in TERMINAL and run.tool is None,
                )
        finally:
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


def step_line(event: events.Event) -> str | None:
    """A line saying what a workflow event records; ``None`` for those that
    say nothing new to a person watching."""
    match event:
        case workflow_events.PhaseStarted(
            node=node, attempt=attempt, retry=retry, run_id=rid
        ):
            again = f", retry {retry}" if retry else ""
            handed = ""
            if event.upstream:
                handed = f", given {', '.join(a.node for a in event.upstream)}"
            return f"  phase {node} started (attempt {attempt}{again}{handed}): {rid}"
        case workflow_events.PhaseCompleted(
            node=node, attempt=attempt, decision=decision
        ):
            return f"  phase {node} completed (attempt {attempt}): {decision}"
        case workflow_events.PhaseFailed(node=node, reason=reason):
            return f"  phase {node} failed: {reason}"
        case workflow_events.TransitionTaken(
            source=source, target=target, auto=auto, when=when
        ):
            why = "auto" if auto else f"when {when}"
            return f"  {source} -> {target} ({why})"
        case workflow_events.PhaseRequeued(node=node, attempt=attempt):
            return f"  phase {node} queued again (attempt {attempt})"
        case events.ToolResulted(ok=ok, output=output, error=error):
            return f"  git: {output}" if ok else f"  git failed: {error}"
        case workflow_events.WorkflowPaused():
            return "  paused"
        case workflow_events.WorkflowResumed():
            return "  resumed"
        case _:
            return None


async def _operator(env: Env, name: str, input: events.Event, verb: str) -> int:
    stream = name if name.startswith("workflow.") else workflow_stream(name)
    async with opened(env, create=False) as (log, projector):
        await stream_records(log, stream)
        host = Host(log, projector=projector, kinds=env.kinds)
        commit = await host.submit(stream, replace(input, at=host.clock.now()))
        state, _ = await host.state(stream)
    workflow_id = stream.removeprefix("workflow.")
    if commit is None:
        subject = f"workflow run {workflow_id}"
        raise NotAllowedError(subject, state.status, f"it cannot be {verb}")
    env.out(f"workflow run {workflow_id} is now {state.status}")
    return 0


async def cmd_pause(env: Env, args: argparse.Namespace) -> int:
    paused = workflow_events.WorkflowPauseRequested(reason=args.reason)
    return await _operator(env, args.id, paused, "paused")


async def cmd_resume(env: Env, args: argparse.Namespace) -> int:
    return await _operator(
        env, args.id, workflow_events.WorkflowResumeRequested(), "resumed"
    )


async def cmd_cancel(env: Env, args: argparse.Namespace) -> int:
    cancel = workflow_events.WorkflowCancelRequested(reason=args.reason)
    return await _operator(env, args.id, cancel, "cancelled")


def workflow_view(records: list[events.Recorded]) -> dict[str, Any]:
    """A workflow run from its log: its status, each attempt (and retry) of
    each phase with its routing decision (or why it failed), and each
    transition taken. The attempt in flight when the run was cancelled is
    ``cancelled``."""
    state: Workflow = initial
    phases: list[dict[str, Any]] = []
    taken: list[dict[str, Any]] = []
    for rec in records:
        state = evolve(state, rec.event)
        match rec.event:
            case (
                workflow_events.PhaseStarted(
                    node=node, attempt=attempt, retry=retry
                ) as e
            ):
                phases.append(
                    {
                        "node": node,
                        "attempt": attempt,
                        "retry": retry,
                        "status": "running",
                        "decision": None,
                        "reason": None,
                        "run_id": e.run_id,
                    }
                )
            case workflow_events.PhaseCompleted() as e:
                phases[-1].update(status="completed", decision=e.decision)
            case workflow_events.PhaseFailed(reason=why) if (
                phases[-1]["status"] != "cancelled"
            ):
                phases[-1].update(status="failed", reason=why)
            case workflow_events.WorkflowCancelled() if phases[-1:] and (
                phases[-1]["status"] == "running"
            ):
                # its run answers failed, if a host delivers the cancel
                phases[-1].update(status="cancelled")
            case workflow_events.TransitionTaken() as e:
                taken.append(
                    {
                        "source": e.source,
                        "target": e.target,
                        "priority": e.priority,
                        "auto": e.auto,
                        "when": e.when,
                    }
                )
            case _:
                pass
    assert state.definition is not None
    return {
        "stream": records[0].stream,
        "id": state.workflow_id,
        "status": state.status,
        "workflow": state.definition.key,
        "version": state.definition.version,
        "reason": state.reason or None,
        "phases": phases,
        "transitions": taken,
    }


REASON_WIDTH = 60
"""The characters of a failed phase's reason `runs show` shows in its
table (``-o json``: all)."""


def workflow_lines(run: dict[str, Any]) -> list[str]:
    """`workflow_view` for a person: the run, the phase path it took, a row
    per attempt and a line per transition."""
    reason = f"  ({run['reason']})" if run["reason"] else ""
    path = " > ".join(p["node"] for p in run["phases"])
    rows = [
        (
            f"{p['node']} #{p['attempt']}"
            + (f" retry {p['retry']}" if p["retry"] else ""),
            p["status"],
            p["decision"] or cut(p["reason"] or "", REASON_WIDTH),
            p["run_id"],
        )
        for p in run["phases"]
    ]
    lines = [
        f"workflow {run['id']}  {run['status']}  "
        f"{run['workflow']} v{run['version']}{reason}",
        f"path: {path or '(no phase started)'}",
        *(
            "  " + line
            for line in columns(("phase", "status", "decision", "run"), rows)
        ),
    ]
    if run["transitions"]:
        lines.append("transitions:")
        for t in run["transitions"]:
            how = "auto" if t["auto"] else f"when {t['when']}"
            lines.append(
                f"  {t['source']} -> {t['target']}  (priority {t['priority']}, {how})"
            )
    return lines
