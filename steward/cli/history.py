"""The commands over what the log holds: `replay [--verify]`, `fork`,
`events export` and `projections rebuild`."""

from __future__ import annotations

import argparse
import bisect
import itertools
import re
import secrets
import sys
from pathlib import Path

import msgspec

from steward import events, replay
from steward.actors import run as run_actor
from steward.actors.run_effects import run_id_of
from steward.cli.env import (
    EXIT_MISMATCH,
    Env,
    is_run,
    opened,
    progress,
    resolved,
)
from steward.cli.hosting import checked_provider, see_run
from steward.cli.output import CUT, clip, json_line
from steward.errors import StewardError


async def cmd_replay(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, _):
        stream = await resolved(log, args.id, env.kinds)
        records = await log.read(stream)
    state = replay.rebuild(records, kinds=env.kinds)
    mismatch = replay.verify(records, kinds=env.kinds) if args.verify else None
    if args.output == "json":
        view = {
            "stream": stream,
            "kind": env.kinds.of(stream).name,
            "events": len(records),
            "state": msgspec.to_builtins(state),
        }
        if args.verify:
            view["verify"] = _verified(mismatch)
        env.out(json_line(view))
        return 0 if mismatch is None else EXIT_MISMATCH
    if is_run(stream):
        _run_state(env, run_id_of(stream), len(records), state)
    else:
        _state(env, stream, len(records), state)
    if not args.verify:
        return 0
    return report(env, mismatch)


def _run_state(env: Env, run_id: str, count: int, state: run_actor.Run) -> None:
    env.out(f"run {run_id}: {count} events, status {state.status}")
    env.out(
        f"iterations {state.iteration}, tool calls {state.tool_calls}, "
        f"tokens in {state.input_tokens} out {state.output_tokens}"
    )
    if state.output:
        env.out(f"output: {state.output}")
    if state.reason:
        env.out(f"reason: {state.reason}")


STATE_WIDTH = 200
"""The characters of a field's value `replay` shows of an actor's state
(``--output json`` gives it whole): a session's settings run to kilobytes."""


def _state(env: Env, stream: str, count: int, state: object) -> None:
    """The state of an actor of any kind: a line per field, each value as
    compact JSON, a long one cut (and a last line saying so)."""
    env.out(f"{stream}: kind {env.kinds.of(stream).name}, {count} events")
    fields = msgspec.to_builtins(state)
    if not isinstance(fields, dict):
        fields = {"state": fields}
    long = False
    for name, value in fields.items():
        text = json_line(value)
        long = long or len(text) > STATE_WIDTH
        env.out(f"{name}: {clip(text, STATE_WIDTH)}")
    if long:
        env.out(
            f"(values longer than {STATE_WIDTH} characters are cut at {CUT}; "
            "`--output json` gives them whole)"
        )


def _verified(mismatch: replay.Mismatch | None) -> object:
    """What `replay --verify --output json` says of the verification."""
    if mismatch is None:
        return {"ok": True}
    return {"ok": False, **msgspec.to_builtins(mismatch)}


def report(env: Env, mismatch: replay.Mismatch | None) -> int:
    if mismatch is None:
        env.out("verify: ok")
        return 0
    env.out(f"verify: MISMATCH at version {mismatch.version}: {mismatch.problem}")
    env.out(f"  input:      {mismatch.input!r}")
    env.out(f"  recorded:   {list(mismatch.recorded)!r}")
    decided = None if mismatch.decided is None else list(mismatch.decided)
    env.out(f"  re-decided: {decided!r}")
    return EXIT_MISMATCH


async def cmd_fork(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):  # the actor's log
        stream = await resolved(log, args.id, env.kinds)
        kind = env.kinds.of(stream)
        old = stream.partition(".")[2]
        new = _FORKED.sub("", old) + "-fork" + secrets.token_hex(3)
        records = await log.read(stream)
        kept = _fork_steps(replay.commits(records, env.kinds), args.at)
        runs = is_run(stream)
        provider = checked_provider(env) if runs and not args.no_run else None
        # Every input re-decided, and all of them recorded in one commit: a
        # host beside this process (a serve) sees the copy whole and carries
        # out only what its last step asks for. The fork is an actor of its
        # own, answering no one.
        copy = replay.fork_events(kept, old, new, kind.detach, env.kinds)
        correlation = kind.correlation_of(kind.initial, copy[0]) or new
        await log.append(f"{kind.name}.{new}", copy, 0, correlation_id=correlation)
        if not runs:
            env.out(f"forked {stream} at version {args.at} as {kind.name}.{new}")
            if not args.no_run:
                env.out("a `steward serve` on this log carries out what it asks for")
            if kind.name == "session":
                env.out(f"talk to it: steward sessions send {new} TEXT")
                if schedules := kind.fold(copy).schedules:
                    names = ", ".join(f"{s.name} ({s.cron})" for s in schedules)
                    env.out(f"it keeps the schedules {names}, which a serve fires")
            return 0
        env.out(f"forked {old} at version {args.at} as {new}")
        if provider is None:
            return 0
        return await see_run(env, log, projector, new, args.quiet, provider=provider)


_FORKED = re.compile(r"-fork[0-9a-f]{6}$")
"""The suffix a fork's id has (a fork of a fork gets a new one, not two)."""


def _fork_steps(
    steps: list[list[events.Recorded]], at: int
) -> list[list[events.Recorded]]:
    """The steps a fork at version ``at`` copies: those up to the one ending
    there. Any other version is refused, naming the versions that work."""
    ends = [step[-1].version for step in steps]
    if at in ends:
        return steps[: ends.index(at) + 1]
    if at > ends[-1]:
        problem = f"version {at} is past the run's last version {ends[-1]}"
    elif at < 1:
        problem = f"version {at} is before the run's first step"
    else:
        step = next(step for step in steps if step[-1].version > at)
        problem = (
            f"version {at} is inside a step "
            f"(versions {step[0].version}..{step[-1].version})"
        )
    raise StewardError(
        f"{problem}; fork at a version where a step ends: {_near(ends, at)}"
    )


def _near(versions: list[int], at: int) -> str:
    """Sorted ``versions`` as a short list: all of up to ten; of more, the
    first two, the last two and the two around ``at``, with … for the rest."""
    if len(versions) <= 10:
        return ", ".join(map(str, versions))
    n = len(versions)
    i = bisect.bisect_left(versions, at)
    shown = sorted({0, 1, n - 2, n - 1} | {j for j in (i - 1, i) if 0 <= j < n})
    parts: list[str] = []
    for before, j in itertools.pairwise([-1, *shown]):
        if j > before + 1:
            parts.append("…")
        parts.append(str(versions[j]))
    return ", ".join(parts)


async def cmd_export(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, _):
        records = await log.read(await resolved(log, args.id, env.kinds))
    lines = b"".join(events.recorded_to_json(r) + b"\n" for r in records)
    if args.output and args.output != "-":
        Path(args.output).write_bytes(lines)
        env.out(f"wrote {len(records)} events to {args.output}")
    else:
        out = sys.stdout.buffer
        rest = memoryview(lines)
        while rest:  # a write cut short by a reader going away returns a count
            rest = rest[out.write(rest) :]
        out.flush()
    return 0


async def cmd_rebuild(env: Env, args: argparse.Namespace) -> int:
    async with opened(env) as (log, projector):
        head = await log.head()
        position = await projector.rebuild(log, progress("projections", head))
    env.out(f"projections rebuilt through position {position}")
    return 0
