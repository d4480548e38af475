"""The run commands: `run`, and `runs start|list|show|cancel|approve|deny`."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from collections.abc import Callable

from msgspec.structs import replace

from steward import events, replay
from steward.actors import run as run_actor
from steward.actors.kind import kind_of
from steward.actors.run_effects import run_id_of, run_stream
from steward.actors.tools import ToolRegistry
from steward.actors.workflow import workflow_stream
from steward.bus import EventLog
from steward.cli.env import (
    Env,
    is_run,
    opened,
    run_named,
    stream_named,
    stream_records,
)
from steward.cli.hosting import checked_provider, see_run
from steward.cli.workflow import show_workflow
from steward.errors import StewardError
from steward.host import Host
from steward.isotime import iso_time
from steward.projections.store import Projector
from steward.projections.summary import summary


def new_run(env: Env, text: str, profile: str) -> events.RunCreated:
    tools = ToolRegistry.with_builtins()
    allowed = (
        env.settings.agents[profile].tools if profile in env.settings.agents else None
    )
    settings = env.settings.run_settings(profile, tools.specs(allowed))
    return events.RunCreated(
        run_id="r" + secrets.token_hex(6),
        input_text=text,
        settings=settings,
        profile=profile,
    )


async def cmd_run(env: Env, args: argparse.Namespace) -> int:
    created = new_run(env, args.text, args.profile)
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
    created = replace(new_run(env, args.text, args.profile), queued=True)
    stream = run_stream(created.run_id)
    async with opened(env) as (log, projector):
        host = Host(log, projector=projector)
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
        if any(isinstance(r.event, events.RunTaken) for r in await log.read(stream)):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)


RUNS_ONLY = "`steward runs` acts on runs only"
"""Why `runs cancel|approve|deny` refuse a stream of another kind."""


async def cmd_runs_list(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):
        await projector.catch_up(log)
        where, params = ("WHERE status=?", [args.status]) if args.status else ("", [])
        rows = await projector.query(
            f"SELECT id, status, kind, iterations, input_tokens + output_tokens, "
            f"input_text FROM runs {where} ORDER BY created_at DESC, id LIMIT ?",
            [*params, args.limit],
        )
    if not rows:
        env.out("no runs yet" if not args.status else f"no {args.status} runs")
        return 0
    env.out(f"{'id':<22} {'status':<10} {'kind':<11} {'iter':>4} {'tokens':>7}  input")
    for run_id, status, kind, iterations, tokens, text in rows:
        text = " ".join(str(text).split())[:60]
        env.out(
            f"{run_id:<22} {status:<10} {kind:<11} {iterations:>4} {tokens:>7}  {text}"
        )
    return 0


async def cmd_runs_show(env: Env, args: argparse.Namespace) -> int:
    stream = stream_named(args.id)
    async with opened(env, create=False) as (log, projector):
        if is_run(stream) and not await log.version(stream):
            # a workflow run's id names its stream (`workflow.ID`) too
            if await log.version(workflow_stream(args.id)):
                stream = workflow_stream(args.id)
        records = await stream_records(log, stream)
        if is_run(stream):
            await projector.catch_up(log)
            await _show_run(env, projector, run_id_of(stream))
        elif kind_of(stream).name == "workflow":
            show_workflow(env, records)
        else:
            _show_actor(env, stream, records)
    if args.prompts:
        _prompts(env, records)
    return 0


async def _show_run(env: Env, projector: Projector, run_id: str) -> None:
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
    env.out(
        f"run {run_id}  {status}  {kind}" + (f"  parent {parent}" if parent else "")
    )
    env.out(
        f"iterations {iterations}  tokens in {tin} out {tout}"
        + (f"  cost ${cost:.6f}" if cost else "")
    )
    env.out(f"{'step':>4}  {'kind':<17} {'duration':>9} {'tokens':>7}  detail")
    for seq, step_kind, duration, tokens, step_cost, text in steps:
        dur = f"{duration:.3f}s" if duration is not None else ""
        tok = str(tokens) if tokens is not None else ""
        if step_cost:
            text = f"${step_cost:.6f} {text}"
        env.out(f"{seq:>4}  {step_kind:<17} {dur:>9} {tok:>7}  {text}")
    if output:
        env.out(f"output: {output}")
    if reason:
        env.out(f"reason: {reason}")


def _show_actor(env: Env, stream: str, records: list[events.Recorded]) -> None:
    """The steps of an actor of another kind, from its events in the log."""
    env.out(f"{stream}  kind {kind_of(stream).name}  {len(records)} events")
    env.out(f"{'step':>4}  {'kind':<17} {'at':<24}  detail")
    for rec in records:
        name = events.type_name(rec.event)
        env.out(
            f"{rec.version:>4}  {name:<17} {iso_time(rec.at):<24}  {summary(rec.event)}"
        )


def _prompts(env: Env, records: list[events.Recorded]) -> None:
    """The prompt of each model call the actor asked for, as it was sent."""
    kind = kind_of(records[0].stream)
    for rec in records:
        if isinstance(rec.event, events.LlmRequested) and kind.model_call:
            state = replay.rebuild(records, rec.version)
            prompt = kind.model_call(state, rec.event, None, None).prompt
            env.out(f"--- prompt for {rec.event.request_id} (v{rec.version})")
            env.out(f"[system] {prompt.system}")
            for message in prompt.messages:
                env.out(f"[{message.role}] {message.content}")


async def _operator_input(
    env: Env, name: str, make: Callable[[run_actor.Run], events.Event]
) -> int:
    run_id = run_named(name, RUNS_ONLY)
    stream = run_stream(run_id)
    async with opened(env) as (log, projector):
        await stream_records(log, stream)
        host = Host(log, projector=projector)
        state, _ = await host.state(stream)
        commit = await host.submit(stream, make(state))
        state, _ = await host.state(stream)
    if commit is None:
        env.out(f"run {run_id} is {state.status}: nothing to do")
        return 1
    env.out(f"run {run_id} is now {state.status}")
    return 0


async def cmd_runs_cancel(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(
        env, args.id, lambda s: events.CancelRequested(reason=args.reason)
    )


def _approval(
    args: argparse.Namespace, approved: bool
) -> Callable[[run_actor.Run], events.Event]:
    def make(state: run_actor.Run) -> events.Event:
        waiting = [a.request_id for a in state.approvals]
        if state.budget_hold is not None:
            waiting.append(state.budget_hold)
        if not waiting:
            raise StewardError(f"run {state.run_id} is not waiting for an approval")
        request_id = args.request or waiting[0]
        return events.ApprovalDecided(
            request_id=request_id, approved=approved, reason=getattr(args, "reason", "")
        )

    return make


async def cmd_runs_approve(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(env, args.id, _approval(args, True))


async def cmd_runs_deny(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(env, args.id, _approval(args, False))
