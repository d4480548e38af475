"""The commands over what the log holds: `replay [--verify]`, `fork`,
`events export` and `projections rebuild`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from steward import events, replay
from steward.cli.env import (
    EXIT_MISMATCH,
    Env,
    opened,
    progress,
    resolved,
)
from steward.cli.hosting import checked_provider, see_run
from steward.cli.output import CUT, clip, json_line


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
    kind = env.kinds.of(stream)
    if kind.surface.show is not None:
        for line in kind.surface.show(stream, len(records), state):
            env.out(line)
    else:
        _state(env, stream, len(records), state)
    if not args.verify:
        return 0
    return report(env, mismatch)


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
        records = await log.read(stream)
        fork, copy, correlation = replay.fork(records, args.at, env.kinds)
        carry = kind.surface.carried and not args.no_run
        provider = checked_provider(env) if carry else None
        # Every input re-decided, and all of them recorded in one commit: a
        # host beside this process (a serve) sees the copy whole and carries
        # out only what its last step asks for. The fork is an actor of its
        # own, answering no one.
        await log.append(fork, copy, 0, correlation_id=correlation)
        if kind.surface.forked is not None:
            lines = kind.surface.forked(stream, fork, args.at, kind.fold(copy))
        else:
            lines = [f"forked {stream} at version {args.at} as {fork}"]
        env.out(lines[0])
        if not kind.surface.carried and not args.no_run:
            env.out("a `steward serve` on this log carries out what it asks for")
        for line in lines[1:]:
            env.out(line)
        if provider is None:
            return 0
        return await see_run(
            env, log, projector, fork.partition(".")[2], args.quiet, provider=provider
        )


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
