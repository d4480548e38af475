"""`steward workers`: the live workers of a shared log, what each holds and
how busy it is."""

from __future__ import annotations

import argparse
import sys
import time

from steward.bus import JetStreamEventLog, open_log
from steward.bus.jetstream.members import Membership
from steward.cli.env import Env
from steward.cli.migrate import unpartitioned
from steward.cli.output import columns, listed
from steward.errors import ConfigError


async def cmd_workers(env: Env, args: argparse.Namespace) -> int:
    if not env.distributed:
        raise ConfigError(
            "settings",
            "log.url",
            "workers share a nats:// log; give --log nats://... (an embedded "
            "log has one host, `steward serve`)",
        )
    log = await open_log(env.log_url, union=env.kinds.union)
    try:
        assert isinstance(log, JetStreamEventLog)
        membership = Membership(log, "-", lease=env.settings.log.lease_seconds)
        members = await membership.members()
    finally:
        await log.close()
    now = time.time()
    partitions = max(1, log.partitions)
    rows = [
        {
            "worker": m.worker,
            "role": m.role,
            "host": m.host,
            "pid": m.pid,
            "partitions": list(m.partitions),
            "share": len(m.partitions) / partitions,
            "in_flight": m.busy.get("in_flight", 0),
            "waiting": m.busy.get("waiting", 0),
            "actors": m.busy.get("cached", 0),
            "up_seconds": round(now - m.started, 1),
            "seen_seconds_ago": round(now - m.seen, 1),
        }
        for m in members
    ]
    table = columns(
        [
            "WORKER",
            "ROLE",
            "PARTITIONS",
            "SHARE",
            "IN FLIGHT",
            "WAITING",
            "ACTORS",
            "UP",
        ],
        [
            [
                r["worker"],
                r["role"],
                _ranges(m.partitions) or "-",
                f"{len(m.partitions)}/{partitions}",
                r["in_flight"],
                r["waiting"],
                r["actors"],
                f"{r['up_seconds']:.0f}s",
            ]
            for r, m in zip(rows, members, strict=True)
        ],
        right={3, 4, 5, 6, 7},
    )
    held = {p for m in members for p in m.partitions}
    if not log.partitions:
        note = unpartitioned(log)
        if args.output == "text":
            env.out(note)
        else:
            print(note, file=sys.stderr)
    if args.output == "text":
        if not members:
            env.out(f"no live workers on {env.log_url}: start `steward worker`")
            return 0
        if len(held) < partitions:
            table.append(
                f"{partitions - len(held)} of {partitions} partitions held by no "
                "one yet (a worker that joined or left is taking them over)"
            )
    listed(env, args.output, rows, len(rows), table)
    return 0


def _ranges(partitions: tuple[int, ...]) -> str:
    """``0-3,7,9-10``: the partitions, runs of them joined."""
    out: list[str] = []
    for p in sorted(partitions):
        if out and out[-1].split("-")[-1] == str(p - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{p}"
        else:
            out.append(str(p))
    return ",".join(out)
