"""A session's memory items and its memory writer (pure).

Clifford's memory (spec 000, "Memory, Context and RAG"): memory items are
``module.key: value`` facts at levels 0 (durable: identity, constraints) to
5 (recent context), each level with a cap on items and characters. A turn's
context shows at most `MEMORY_PER_LEVEL_LIMIT` items a level, newest seen
first, within `MEMORY_LOAD_CAP` characters (`memory_block`).

When a session's window is compacted, the memory writer (a model call of
the session's own) reads the messages that left the window and the active
items, and answers with a JSON list of operations (`writer_prompt`).
`write` validates each operation on its own and applies the valid ones in
order: an invalid one is rejected with its reason and changes nothing, so
no operation is ever half-applied. The level caps then archive the items
seen longest ago. The reply may also be an object ``{"operations": [...],
"summary": "..."}``; the summary becomes the session's last summary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import msgspec
from msgspec.structs import replace

from steward.actors.prompt import Prompt
from steward.actors.session.events import MemoryItem, MemoryOp, RejectedOp
from steward.events.codec import encodable_value
from steward.events.protocol import ChatMessage

__all__ = [
    "LEVEL_LIMITS",
    "MEMORY_LOAD_CAP",
    "MEMORY_MODULES",
    "MEMORY_PER_LEVEL_LIMIT",
    "Written",
    "memory_block",
    "write",
    "writer_prompt",
]

MEMORY_LOAD_CAP = 1200
"""Characters of memory items a turn's context shows, at most."""
MEMORY_PER_LEVEL_LIMIT = 5
"""Items of one level a turn's context shows, at most."""
LEVEL_LIMITS: Mapping[int, tuple[int, int]] = MappingProxyType(
    {
        0: (4, 50),
        1: (8, 120),
        2: (10, 180),
        3: (12, 200),
        4: (12, 240),
        5: (6, 300),
    }
)
"""Per level: the active items it keeps (older ones are archived) and the
characters of one item's value (longer values are cut)."""
MEMORY_MODULES = (
    "identity",
    "preferences",
    "constraints",
    "projects",
    "relationships",
    "environment",
    "recent_context",
)
OPS = ("add", "update", "delete", "touch")
_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SECRET = re.compile(
    r"password:|api key|secret|token|private key|sk-[a-z0-9]{20,}"
    r"|-----begin (?:rsa|dsa|ec|openssh|private) key-----|akia[0-9a-z]{16}",
    re.IGNORECASE,
)

WRITER_SYSTEM = (
    "You are the memory writer. Extract durable, non-sensitive memories from "
    "the segment. Output ONLY a JSON array of operations, or an object "
    '{"operations": [...], "summary": "..."} whose summary says in a few '
    "sentences what the segment was about. No prose, no markdown. "
    "Operations: add(level, module, key, value, confidence), "
    "update(id or module+key, value, confidence), delete(id or module+key), "
    "touch(id or module+key). Levels are 0-5: lower levels are durable "
    "identity, preferences and constraints; higher levels more detailed, "
    "recent context. Modules: " + ", ".join(MEMORY_MODULES) + ". Keys are "
    "short snake_case. Never store secrets. Use [] only when there is "
    'nothing to remember. Example: [{"op":"add","level":1,"module":"identity",'
    '"key":"name","value":"Alex","confidence":0.7}]'
)


def memory_block(items: Sequence[MemoryItem]) -> str:
    """The memory items a turn's context shows: per level (0 first) the
    newest seen `MEMORY_PER_LEVEL_LIMIT`, a line each, until
    `MEMORY_LOAD_CAP` characters; empty when there are none."""
    if not items:
        return ""
    lines: list[str] = []
    total = 0
    for level in sorted(LEVEL_LIMITS):
        chosen = sorted(
            (i for i in items if i.level == level and not i.archived),
            key=lambda i: (-i.seen_at, i.id),
        )[:MEMORY_PER_LEVEL_LIMIT]
        for item in chosen:
            line = f"- {item.module}.{item.key}: {item.value[: _max_chars(level)]}"
            if total + len(line) > MEMORY_LOAD_CAP:
                return _block(lines)
            lines.append(line)
            total += len(line)
    return _block(lines)


def _block(lines: list[str]) -> str:
    return "Active memory:\n" + "\n".join(lines) if lines else ""


def writer_prompt(
    model: str, segment: Sequence[ChatMessage], items: Sequence[MemoryItem]
) -> Prompt:
    """What the memory writer is asked: the compacted ``segment`` and the
    active memory items, by id."""
    said = "\n".join(
        f"{'User' if m.role == 'user' else 'Assistant'}: {m.content}" for m in segment
    )
    known = "\n".join(
        f"[{i.id}] L{i.level} {i.module}.{i.key}: {i.value} (conf {i.confidence:.2f})"
        for i in items
        if not i.archived
    )
    ask = (
        f"Segment (most recent {len(segment)} messages):\n{said}\n\n"
        f"Active memories:\n{known or '(none)'}\n\nReturn JSON array of ops."
    )
    return Prompt(
        model=model,
        system=WRITER_SYSTEM,
        messages=(ChatMessage(role="user", content=ask),),
        temperature=0.0,
    )


class Written(msgspec.Struct, frozen=True, kw_only=True):
    """What a memory writer's reply did: the operations applied and
    rejected, the items after them, the summary; or, when the reply is no
    list of operations at all, only ``error``."""

    applied: tuple[MemoryOp, ...] = ()
    rejected: tuple[RejectedOp, ...] = ()
    items: tuple[MemoryItem, ...] = ()
    summary: str | None = None
    error: str | None = None


def write(
    items: tuple[MemoryItem, ...], reply: str, *, at: float, next_id: int
) -> Written:
    """Apply the memory writer's ``reply`` to ``items`` at time ``at``; new
    items are numbered from ``next_id`` (``m<n>``)."""
    parsed = _parse(reply)
    if isinstance(parsed, str):
        return Written(error=parsed)
    raw_ops, summary = parsed
    applied: list[MemoryOp] = []
    rejected: list[RejectedOp] = []
    for index, raw in enumerate(raw_ops):
        op = _validate(raw)
        outcome = op if isinstance(op, str) else _apply(items, op, at, f"m{next_id}")
        if isinstance(op, str) or isinstance(outcome, str):
            reason = op if isinstance(op, str) else str(outcome)
            rejected.append(RejectedOp(index=index, op=_show(raw), reason=reason))
            continue
        if len(outcome) > len(items):
            next_id += 1
        items = outcome
        applied.append(op)
    return Written(
        applied=tuple(applied),
        rejected=tuple(rejected),
        items=_capped(items),
        summary=summary,
    )


def _parse(reply: str) -> tuple[list[Any], str | None] | str:
    """The operations and summary of a reply, or why there are none."""
    try:
        parsed = json.loads(reply)
    except ValueError:
        start, end = reply.find("["), reply.rfind("]")
        try:
            parsed = json.loads(reply[start : end + 1]) if 0 <= start < end else None
        except ValueError:
            parsed = None
        if parsed is None:
            return "the memory writer's reply is not JSON: " + _cut(reply, 200)
    parsed = encodable_value(parsed)  # "\ud800" in JSON: U+FFFD, so it records
    summary = None
    if isinstance(parsed, dict):
        found = parsed.get("summary")
        summary = found.strip() or None if isinstance(found, str) else None
        parsed = parsed.get("operations", [] if summary else None)
    if not isinstance(parsed, list):
        return (
            "the memory writer's reply is no list of operations (nor an object "
            'with "operations"): ' + _cut(reply, 200)
        )
    return parsed, summary


def _validate(raw: Any) -> MemoryOp | str:
    """``raw`` as an operation, or why it is none."""
    if not isinstance(raw, dict):
        return "an operation is a JSON object"
    op = raw.get("op")
    if op not in OPS:
        return f"op must be one of {', '.join(OPS)}, not {_show(op)}"
    fields: dict[str, Any] = {}
    for name in ("id", "module", "key", "value"):
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            return f"{name} must be a string, not {_show(value)}"
        fields[name] = value
    level = raw.get("level")
    if level is not None and (type(level) is not int or level not in LEVEL_LIMITS):
        return f"level must be an integer 0 to 5, not {_show(level)}"
    confidence = raw.get("confidence")
    if confidence is not None and (
        not isinstance(confidence, int | float)
        or isinstance(confidence, bool)
        or not 0 <= confidence <= 1
    ):
        return f"confidence must be a number 0 to 1, not {_show(confidence)}"
    module, key, value = fields["module"], fields["key"], fields["value"]
    if module is not None and module not in MEMORY_MODULES:
        return f"unknown module {module!r}; modules: {', '.join(MEMORY_MODULES)}"
    if key is not None and not _KEY.fullmatch(key):
        return f"key {_show(key)} is not short snake_case"
    if value is not None:
        value = " ".join(value.split())
        if _SECRET.search(value) or (key is not None and _SECRET.search(key)):
            return "looks like a secret; secrets are never stored"
    if op == "add" and (module is None or key is None or level is None or not value):
        return "add needs module, key, level and a value"
    if op != "add" and fields["id"] is None and (module is None or key is None):
        return f"{op} needs id, or module and key"
    return MemoryOp(
        op=op,
        id=fields["id"],
        module=module,
        key=key,
        level=level,
        value=value,
        confidence=None if confidence is None else float(confidence),
    )


def _apply(
    items: tuple[MemoryItem, ...], op: MemoryOp, at: float, new_id: str
) -> tuple[MemoryItem, ...] | str:
    """``items`` after ``op``, or why it cannot apply (nothing changed)."""
    at_index = _find(items, op)
    if op.op == "add" and at_index is None:
        assert op.module and op.key and op.level is not None and op.value
        added = MemoryItem(
            id=new_id,
            module=op.module,
            key=op.key,
            level=op.level,
            value=op.value[: _max_chars(op.level)],
            confidence=0.6 if op.confidence is None else op.confidence,
            seen_at=at,
        )
        return (*items, added)
    if at_index is None:
        return f"no memory item {op.id or f'{op.module}.{op.key}'} to {op.op}"
    target = items[at_index]
    if op.op == "delete":
        return items[:at_index] + items[at_index + 1 :]
    if op.op == "touch":
        changed = replace(target, seen_at=at, archived=False)
    else:  # add of a known module.key, or update
        level = target.level if op.level is None else op.level
        value = target.value if not op.value else op.value
        changed = replace(
            target,
            level=level,
            value=value[: _max_chars(level)],
            confidence=target.confidence if op.confidence is None else op.confidence,
            seen_at=at,
            archived=False,
        )
    return (*items[:at_index], changed, *items[at_index + 1 :])


def _find(items: Sequence[MemoryItem], op: MemoryOp) -> int | None:
    for index, item in enumerate(items):
        if (op.id is not None and item.id == op.id) or (
            op.id is None and item.module == op.module and item.key == op.key
        ):
            return index
    return None


def _capped(items: tuple[MemoryItem, ...]) -> tuple[MemoryItem, ...]:
    """``items`` with each level's overflow archived, seen longest ago first."""
    archive: set[str] = set()
    for level, (max_items, _) in LEVEL_LIMITS.items():
        active = sorted(
            (i for i in items if i.level == level and not i.archived),
            key=lambda i: (i.seen_at, i.id),
        )
        archive.update(i.id for i in active[: max(0, len(active) - max_items)])
    if not archive:
        return items
    return tuple(replace(i, archived=True) if i.id in archive else i for i in items)


def _max_chars(level: int) -> int:
    return LEVEL_LIMITS.get(level, (0, 120))[1]


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return _cut(text, 500)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
