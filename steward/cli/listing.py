"""``steward KIND list``, one command for every kind that lists its actors:
what it prints is the kind's (`steward.actors.kind.Listed`, in its
`Listing`), read from the kind's read models."""

from __future__ import annotations

import argparse
from typing import Any

from steward.actors.kind import Column
from steward.cli.env import Env, opened
from steward.cli.output import columns, cut, listed, total_of
from steward.isotime import iso_time


async def cmd_list(env: Env, args: argparse.Namespace) -> int:
    kind = env.kinds[args.listed_kind]
    listing = kind.surface.listing
    assert listing is not None and listing.listed is not None
    spec = listing.listed
    status: str | None = getattr(args, "status", None)
    where, params = (f"WHERE {listing.status}=?", [status]) if status else ("", [])
    async with opened(env, create=False) as (log, projector):
        await projector.catch_up(log)
        rows = await projector.query(
            f"SELECT {', '.join(sql for _, sql in spec.fields)} "
            f"FROM {listing.table} {where} "
            f"ORDER BY {spec.order} DESC, {listing.id} LIMIT ?",
            [*params, args.limit],
        )
        total = await total_of(
            projector, listing.table, len(rows), args.limit, where, params
        )
    if not rows and args.output == "text":
        env.out(spec.none_in.format(status=status) if status else spec.empty)
        return 0
    names = [name for name, _ in spec.fields]
    found: list[dict[str, Any]] = [
        {
            name: iso_time(value) if name in spec.times else value
            for name, value in zip(names, row, strict=True)
        }
        for row in rows
    ]
    table = columns(
        [c.title for c in spec.columns],
        [[_cell(c, row) for c in spec.columns] for row in found],
        right=[n for n, c in enumerate(spec.columns) if c.right],
    )
    listed(env, args.output, found, total, table)
    return 0


def _cell(column: Column, row: dict[str, Any]) -> object:
    value = row[column.value] if isinstance(column.value, str) else column.value(row)
    return value if column.width is None else cut(value, column.width)
