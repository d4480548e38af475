"""The run commands: `run`, and `runs start|list|show|cancel|approve|deny`."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from steward import events
from steward.actors import effects as actor_effects
from steward.actors.kind import Kind, Kinds
from steward.actors.run import events as run_events
from steward.actors.run import reactor as run_effects
from steward.actors.run import state as run_state
from steward.actors.run.kind import status_said
from steward.actors.run.stage_prompts import with_prompts
from steward.actors.run.state import run_id_of, run_stream
from steward.actors.workflow.cli import workflow_lines, workflow_view
from steward.bus import EventLog
from steward.cli.env import (
    Env,
    opened,
    resolved,
    stream_records,
)
from steward.cli.hosting import checked_provider, see_run
from steward.cli.output import (
    columns,
    cut,
    json_line,
    prompt_lines,
    prompts_of,
)
from steward.errors import NotAllowedError, StewardError
from steward.host import Host
from steward.isotime import iso_time
from steward.projections.store import Projector
from steward.projections.summary import summary


async def new_run(
    env: Env,
    text: str,
    profile: str,
    mode: str | None = None,
    reasoning: str | None = None,
) -> run_events.RunCreated:
    """A new run of ``text`` with ``profile``; a staged profile's ``mode``
    and ``reasoning`` (``on``/``off``) as the user set them for it.

    Raises:
        StewardError: ``--mode`` or ``--reasoning`` for a profile that is not
            staged; a ``[mcp]`` server of the profile could not be listed.
    """
    agent = env.settings.profile(profile)
    servers = env.settings.servers(agent.mcp, f"agents.{profile}.mcp")
    settings = env.settings.run_settings(profile, await env.offered(servers))
    if mode is not None or reasoning is not None:
        if settings.policy != "staged":
            raise StewardError(
                f"--mode and --reasoning are a staged profile's; profile {profile} "
                'is not (set [agents.NAME] policy = "staged")'
            )
        settings = replace(
            settings,
            mode=mode or settings.mode,
            reasoning=settings.reasoning if reasoning is None else reasoning == "on",
        )
    settings = with_prompts(settings, env.settings, profile)
    return run_events.RunCreated(
        run_id="r" + secrets.token_hex(6),
        input_text=text,
        settings=settings,
        profile=profile,
    )


async def cmd_run(env: Env, args: argparse.Namespace) -> int:
    created = await new_run(env, args.text, args.profile, args.mode, args.reasoning)
    provider = checked_provider(env)  # bad settings fail before the log is made
    async with opened(env) as (log, projector):
        return await see_run(
            env,
            log,
            projector,
            created.run_id,
            args.quiet,
            created=created,
            stream=args.stream,
            provider=provider,
        )


async def cmd_start(env: Env, args: argparse.Namespace) -> int:
    first = await new_run(env, args.text, args.profile, args.mode, args.reasoning)
    created = replace(first, queued=True)
    stream = run_stream(created.run_id)
    async with opened(env) as (log, projector):
        host = Host(log, projector=projector, kinds=env.kinds)
        await host.submit(stream, created)
        env.out(created.run_id)
        if args.wait > 0 and not await _taken(log, stream, args.wait):
            where = "`steward serve`"
            if env.distributed:
                where = "`steward worker` or `steward serve`"
            print(
                f"run {created.run_id} is queued, but no host took it within "
                f"{args.wait:g}s; start {where} on {env.log_url} to run it",
                file=sys.stderr,
            )
    return 0


async def _taken(log: EventLog, stream: str, seconds: float) -> bool:
    """Whether a host takes queued run ``stream`` within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        if any(
            isinstance(r.event, run_events.RunTaken) for r in await log.read(stream)
        ):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)


def run_named(name: str, refusal: str, kinds: Kinds) -> str:
    """The id of the run ``name`` names: its id, or its stream (``run.ID``).
    A stream of another kind of ``kinds`` is refused, ``refusal`` saying
    why; one of no kind is refused naming the kinds there are."""
    if "." not in name:
        return name
    kind = kinds.of(name)
    if not is_run(name):
        raise StewardError(
            f"{refusal}: {name} is a {kind.name} stream; `steward "
            f"replay {name}` shows its state"
        )
    return run_id_of(name)


def is_run(stream: str) -> bool:
    """Whether ``stream`` is a run's (named as the host names them)."""
    return run_stream(run_id_of(stream)) == stream


def _no_run(run_id: str) -> str:
    return f"no run {run_id!r} in the log; `steward runs list` shows them"


RUNS_ONLY = "`steward runs` acts on runs only"
"""Why `runs cancel|approve|deny` refuse a stream of another kind."""


async def cmd_runs_show(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):
        stream = await resolved(log, args.id, env.kinds)
        records = await log.read(stream)
        lines: Callable[[dict[str, Any]], list[str]]
        if is_run(stream):
            await projector.catch_up(log)
            view = await _run_view(projector, run_id_of(stream))
            lines = _run_lines
        elif env.kinds.of(stream).name == "workflow":
            view, lines = workflow_view(records), workflow_lines
        else:
            view, lines = (
                _actor_view(env.kinds.of(stream), stream, records),
                _actor_lines,
            )
    if args.prompts:
        view["prompts"] = prompts_of(env.kinds.of(stream), records)
    if args.output == "json":
        env.out(json_line(view))
        return 0
    for line in [*lines(view), *prompt_lines(view.get("prompts", []))]:
        env.out(line)
    return 0


async def _run_view(projector: Projector, run_id: str) -> dict[str, Any]:
    """A run's summary and steps, from the read models."""
    run = await projector.query(
        "SELECT status, kind, parent_run_id, iterations, input_tokens, "
        "output_tokens, output_text, reason, cost_usd FROM runs WHERE id=?",
        [run_id],
    )
    steps = await projector.query(
        "SELECT seq, kind, duration, tokens, cost_usd, summary FROM run_steps "
        "WHERE run_id=? ORDER BY seq",
        [run_id],
    )
    status, kind, parent, iterations, tin, tout, output, reason, cost = run[0]
    return {
        "stream": run_stream(run_id),
        "id": run_id,
        "status": status,
        "kind": kind,
        "parent": parent,
        "iterations": iterations,
        "input_tokens": tin,
        "output_tokens": tout,
        "cost_usd": cost,
        "output": output,
        "reason": reason,
        "steps": [
            {
                "step": seq,
                "kind": step_kind,
                "duration": duration,
                "tokens": tokens,
                "cost_usd": step_cost,
                "detail": text,
            }
            for seq, step_kind, duration, tokens, step_cost, text in steps
        ],
    }


def _run_lines(run: dict[str, Any]) -> list[str]:
    parent = f"  parent {run['parent']}" if run["parent"] else ""
    lines = [
        f"run {run['id']}  {status_said(run)}  {run['kind']}{parent}",
        f"iterations {run['iterations']}  tokens in {run['input_tokens']} out "
        f"{run['output_tokens']}"
        + (f"  cost ${run['cost_usd']:.6f}" if run["cost_usd"] else ""),
    ]
    rows = []
    for step in run["steps"]:
        duration, tokens, cost = step["duration"], step["tokens"], step["cost_usd"]
        text = f"${cost:.6f} {step['detail']}" if cost else step["detail"]
        rows.append(
            (
                step["step"],
                step["kind"],
                "" if duration is None else f"{duration:.3f}s",
                "" if tokens is None else tokens,
                text,
            )
        )
    lines += columns(("step", "kind", "duration", "tokens", "detail"), rows, (0, 2, 3))
    if run["output"]:
        lines.append(f"output: {run['output']}")
    if run["reason"]:
        lines.append(f"reason: {run['reason']}")
    return lines


def _actor_view(
    kind: Kind[Any], stream: str, records: list[events.Recorded]
) -> dict[str, Any]:
    """The events of an actor of another kind, from the log."""
    return {
        "stream": stream,
        "kind": kind.name,
        "events": [
            {
                "version": rec.version,
                "type": events.type_name(rec.event),
                "at": iso_time(rec.at),
                "detail": summary(rec.event, sys.maxsize),
            }
            for rec in records
        ],
    }


def _actor_lines(actor: dict[str, Any]) -> list[str]:
    found = actor["events"]
    rows = [
        (e["version"], e["type"], e["at"], cut(e["detail"], DETAIL_WIDTH))
        for e in found
    ]
    return [
        f"{actor['stream']}  kind {actor['kind']}  {len(found)} events",
        *columns(("step", "kind", "at", "detail"), rows, (0,)),
    ]


DETAIL_WIDTH = 120
"""The characters of an event's summary `runs show KIND.ID` shows
(``-o json``: all)."""


async def _operator_input(
    env: Env,
    name: str,
    make: Callable[[run_state.Run, float], events.Event],
    verb: str,
) -> int:
    """Record the input ``make`` gives for the run ``name`` names (given its
    state and the time); a run whose state does not allow it is refused
    (`NotAllowedError`, exit 1)."""
    run_id = run_named(name, RUNS_ONLY, env.kinds)
    stream = run_stream(run_id)
    async with opened(env) as (log, projector):
        await stream_records(log, stream, _no_run(run_id))
        host = Host(log, projector=projector, kinds=env.kinds)
        state, _ = await host.state(stream)
        commit = await host.submit(stream, make(state, host.clock.now()))
        state, _ = await host.state(stream)
    if commit is None:
        raise NotAllowedError(f"run {run_id}", state.status, f"it cannot be {verb}")
    env.out(f"run {run_id} is now {state.status}")
    return 0


async def cmd_runs_cancel(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(
        env,
        args.id,
        lambda state, at: actor_effects.cancel(args.reason, at),
        "cancelled",
    )


def _approval(
    args: argparse.Namespace, approved: bool
) -> Callable[[run_state.Run, float], events.Event]:
    def make(state: run_state.Run, at: float) -> events.Event:
        waiting = [w.request_id for w in run_effects.waiting(state)]
        verb = "approve" if approved else "deny"
        subject = f"run {state.run_id}"
        if not waiting:
            raise NotAllowedError(
                subject,
                state.status,
                f"it waits for no approval, so there is nothing to {verb}",
            )
        if args.request is not None and args.request not in waiting:
            raise NotAllowedError(
                subject,
                state.status,
                f"it waits for no request {args.request!r}, only for "
                + ", ".join(repr(w) for w in waiting),
            )
        request_id = args.request or waiting[0]
        return run_effects.answer(request_id, approved, getattr(args, "reason", ""), at)

    return make


async def cmd_runs_approve(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(env, args.id, _approval(args, True), "approved")


async def cmd_runs_deny(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(env, args.id, _approval(args, False), "denied")
