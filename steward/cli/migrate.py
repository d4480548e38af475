"""`steward log migrate`: copy a nats:// log made before partitions into a
partitioned one (`steward.bus.jetstream.migrate`)."""

from __future__ import annotations

import argparse

from steward.bus import JetStreamEventLog, log_file, open_log
from steward.bus.jetstream import POSITIONS_PER_COMMIT, migrate
from steward.bus.jetstream.url import parse_url
from steward.cli.env import EXIT_FAILED, Env, progress
from steward.cli.output import json_line
from steward.errors import ConfigError, StewardError

HOW = "steward log migrate --to URL"
"""The command, as refusals and a worker on an old log name it."""


def unpartitioned(log: JetStreamEventLog) -> str:
    """What a worker on ``log``, made before partitions, and `steward
    workers` say of it."""
    return (
        f"the log {log.stream} was made before partitions: one worker holds "
        "all its work and the others stand by; `steward log migrate --to "
        "nats://...?stream=NEW&prefix=new.ev` copies it into a partitioned log "
        "that they share"
    )


async def cmd_log_migrate(env: Env, args: argparse.Namespace) -> int:
    if not env.distributed:
        raise ConfigError(
            "settings",
            "log.url",
            "migrate copies a nats:// log made before partitions; give it with "
            "--log nats://... (an embedded log has no partitions to migrate to)",
        )
    if log_file(args.to) is not None:
        raise StewardError(
            f"--to {args.to} is not a nats:// log; give the new log's URL, "
            "nats://host:4222?stream=NEW&prefix=new.ev"
        )
    servers, options = parse_url(args.to)
    source = await open_log(env.log_url, union=env.kinds.union, create=False)
    assert isinstance(source, JetStreamEventLog)
    try:
        await migrate.check_source(source, HOW)
        migrate.check_target_url(
            source,
            servers,
            options.get("stream", "STEWARD"),
            options.get("prefix", "steward.ev"),
        )
        options.setdefault("replicas", source.replicas)
        target = await JetStreamEventLog.open(servers, union=env.kinds.union, **options)
        try:
            await migrate.check_target(target, args.resume, HOW)
            text = args.output == "text"
            if text:
                env.out(
                    f"migrating {source} into {target} ({target.partitions} "
                    f"partitions, {target.replicas} replicas)"
                )
            copied = await migrate.copy(
                source,
                target,
                resume=args.resume,
                progress=progress(
                    "migrating",
                    await source.head(),
                    unit="commit",
                    per=POSITIONS_PER_COMMIT,
                    rate="commits",
                ),
            )
            verified = await migrate.verify(source, target)
        finally:
            await target.close()
    finally:
        await source.close()
    if args.output == "json":
        env.out(
            json_line(
                {
                    "from": str(source),
                    "to": str(target),
                    "partitions": target.partitions,
                    "streams": copied.streams,
                    "commits": copied.commits,
                    "events": copied.events,
                    "skipped_commits": copied.skipped,
                    "verified_events": verified.events,
                    "positions_kept": verified.positions_kept,
                    "ok": verified.mismatch is None,
                    "mismatch": verified.mismatch,
                }
            )
        )
        return 0 if verified.mismatch is None else EXIT_FAILED
    again = f", {copied.skipped:,} there already" if copied.skipped else ""
    env.out(
        f"copied {copied.streams:,} streams: {copied.events:,} events in "
        f"{copied.commits:,} commits{again}"
    )
    if verified.mismatch is not None:
        env.out(f"verify: MISMATCH: {verified.mismatch}")
        return EXIT_FAILED
    env.out(
        f"verified: {verified.events:,} events, each at the same stream and "
        "version with the same time, correlation and causation ids"
        + ("; positions kept" if verified.positions_kept else "")
    )
    rebuild = (
        ""
        if verified.positions_kept
        else "; then `steward projections rebuild` (positions changed)"
    )
    env.out(
        f"next: point --log / [log] url at {args.to}{rebuild}; the old stream "
        f"{source.stream} is left as it was"
    )
    return 0
