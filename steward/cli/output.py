"""How the list and show commands print: columns as wide as their
contents, long text cut with a marker, a line saying how many rows a list
left out, and the same data as JSON lines for ``--output json``."""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import msgspec

from steward import replay
from steward.actors.kind import Kind
from steward.cli.codes import FORMATS as FORMATS
from steward.cli.codes import Format
from steward.cli.env import Env, shown
from steward.events import LlmRequested, Recorded
from steward.projections.store import Projector

CUT = "…"
"""Ends a value cut short (the full value is in ``--output json``)."""

_json = msgspec.json.Encoder()


def clip(text: str, width: int) -> str:
    """``text`` if it has at most ``width`` characters; else its first
    ``width - 1`` and `CUT`."""
    return text if len(text) <= width else text[: width - 1] + CUT


def cut(text: object, width: int) -> str:
    """``text`` on one line (each run of white space one blank), clipped to
    ``width`` characters (`clip`)."""
    return clip(" ".join(str(text).split()), width)


def columns(
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    right: Collection[int] = (),
) -> list[str]:
    """``rows`` under ``header``: each column as wide as its widest cell, two
    blanks apart, the last one unpadded; the columns numbered in ``right``
    aligned right. Cells are measured as the terminal is given them
    (`steward.cli.env.shown`), so an escaped character keeps them aligned."""
    cells = [[shown(str(c)) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    last = len(header) - 1
    lines = []
    for row in cells:
        parts = [
            c.rjust(w) if i in right else (c if i == last else c.ljust(w))
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def json_line(value: object) -> str:
    """``value`` as one line of compact JSON."""
    return _json.encode(value).decode()


async def total_of(
    projector: Projector,
    table: str,
    shown: int,
    limit: int,
    where: str = "",
    params: Sequence[object] = (),
) -> int:
    """How many rows a list that showed ``shown`` of ``table`` stands for:
    those, unless ``limit`` cut it, then all that ``where`` selects."""
    if shown < limit:
        return shown
    counted = await projector.query(f"SELECT count(*) FROM {table} {where}", params)
    return int(counted[0][0])


def listed(
    env: Env,
    form: Format,
    rows: Sequence[dict[str, object]],
    total: int,
    table: list[str],
) -> None:
    """A list command's output: ``table`` (text) or a JSON object per row,
    then, when ``total`` is more than the rows shown, how many more there are
    and how to see them (in JSON, on standard error, so that standard output
    stays JSON lines)."""
    if form == "json":
        for row in rows:
            env.out(json_line(row))
    else:
        for line in table:
            env.out(line)
    left = total - len(rows)
    if left > 0:
        note = f"{left} more; use --limit {total} to list them all"
        if form == "json":
            print(note, file=sys.stderr)
        else:
            env.out(note)


def prompts_of(kind: Kind[Any], records: list[Recorded]) -> list[dict[str, Any]]:
    """The prompt of each model call an actor of ``kind`` asked for, as it
    was sent, rebuilt from its ``records`` (``show --prompts``)."""
    prompts = []
    for rec in records:
        if isinstance(rec.event, LlmRequested) and kind.reactor.model_call:
            state = replay.rebuild(records, rec.version, kind)
            prompt = kind.reactor.model_call(state, rec.event, None, None).prompt
            prompts.append(
                {
                    "request_id": rec.event.request_id,
                    "version": rec.version,
                    "system": prompt.system,
                    "messages": [
                        {"role": m.role, "content": m.content} for m in prompt.messages
                    ],
                }
            )
    return prompts


def prompt_lines(prompts: list[dict[str, Any]]) -> list[str]:
    """`prompts_of` as ``show --prompts`` prints them: a line per message."""
    lines = []
    for prompt in prompts:
        lines.append(f"--- prompt for {prompt['request_id']} (v{prompt['version']})")
        lines.append(f"[system] {prompt['system']}")
        lines += [f"[{m['role']}] {m['content']}" for m in prompt["messages"]]
    return lines
