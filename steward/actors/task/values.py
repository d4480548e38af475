"""The values of task programs (pure): a call's result, a quoted symbol, a
loop controller's answer, a lambda; how each is true, shown as text, made
plain data the log can store; and the primitives programs call.

A value is bounded (`bounded`): a program that builds one past `MAX_VALUE`
or nested deeper than `MAX_VALUE_DEPTH` fails, rather than hold its host.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from steward.actors.task.lang import Node
from steward.actors.task.templates import render_value

__all__ = [
    "Closure",
    "Decision",
    "MAX_VALUE",
    "MAX_VALUE_DEPTH",
    "PRIMITIVES",
    "QSym",
    "Result",
    "bounded",
    "json_value",
    "plain",
    "text_of",
    "truthy",
    "unfenced",
]

MAX_VALUE = 100_000
"""The size a value may reach (elements of lists and objects, and a unit
per 100 characters of text), and `MAX_VALUE_DEPTH` how deep it may nest: a
program that builds more fails (an eval error) instead of holding the host."""

MAX_VALUE_DEPTH = 64


class Result(msgspec.Struct, frozen=True, gc=False):
    """A call's result as the program sees it (the spec's ``TaskResult``):
    its ``content`` when put in a prompt or compared with a string."""

    status: str
    content: str
    notes: dict[str, Any]


class QSym(msgspec.Struct, frozen=True, gc=False):
    """A quoted symbol (``'continue``)."""

    name: str


class Decision(msgspec.Struct, frozen=True, gc=False):
    """A loop controller's answer: ``continue`` with the next input, or
    ``stop`` with the loop's value."""

    action: str
    value: Any


class Closure:
    """A ``lambda``: its parameters, body and the scope it was made in."""

    __slots__ = ("body", "env", "params")

    def __init__(self, params: tuple[str, ...], body: tuple[Node, ...], env: Any):
        self.params = params
        self.body = body
        self.env = env


def truthy(value: Any) -> bool:
    if isinstance(value, Result):
        return value.status == "COMPLETE"
    if isinstance(value, tuple | list | dict | str):
        return len(value) > 0
    return value not in (None, False, 0) and value == value


def text_of(value: Any) -> str:
    """A value as text: a result's content, a string itself, anything else
    as JSON (as a prompt shows it)."""
    if isinstance(value, Result):
        return value.content
    if isinstance(value, QSym):
        return value.name
    if isinstance(value, str):
        return str(plain(value))
    return render_value(plain(value))


def plain(value: Any, text: bool = False) -> Any:
    """A value as JSON-able data: a result as its fields (with ``text``, as
    its content), a quoted symbol as its name, a lambda as ``<lambda>``."""
    match value:
        case Result():
            if text:
                return value.content
            return {
                "status": value.status,
                "content": value.content,
                "notes": value.notes,
            }
        case QSym(name=name):
            return name
        case Decision(action=action, value=inner):
            return {action: plain(inner, text)}
        case Closure():
            return "<lambda>"
        case tuple() | list():
            return [plain(v, text) for v in value]
        case dict():
            return {_storable(str(k)): plain(v, text) for k, v in value.items()}
        case _:
            return _storable(value)


_INT64 = (-(2**63), 2**64 - 1)


def _storable(leaf: Any) -> Any:
    """A scalar as the log can store it: a string made encodable (a lone
    surrogate replaced), an integer past 64 bits and a float that is no
    number as text."""
    match leaf:
        case str():
            if leaf.isascii():  # no surrogate, as most text: as it is
                return leaf
            return leaf.encode("utf-16-le", "surrogatepass").decode(
                "utf-16-le", "replace"
            )
        case bool() | None:
            return leaf
        case int() if not _INT64[0] <= leaf <= _INT64[1]:
            return str(leaf)
        case float() if not math.isfinite(leaf):
            return str(leaf)
        case _:
            return leaf


def unfenced(text: str) -> str:
    """``text`` stripped, without a Markdown code fence around it."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        first, newline, rest = body.partition("\n")
        if newline and first.strip().isalnum():  # ```json
            body = rest
    return body.strip()


def json_value(text: str) -> Any:
    """``text`` read as JSON, if it is JSON no bigger and no deeper than a
    value may be (`MAX_VALUE`, `MAX_VALUE_DEPTH`), as plain data the log can
    store; ``None`` otherwise. Never raises: it reads a model's reply."""
    try:
        return plain(bounded(json.loads(text)))
    except (ValueError, RecursionError):
        return None


def _get_field(value: Any, key: Any) -> Any:
    key = text_of(key)
    if isinstance(value, Result):
        if key in ("status", "content", "notes"):
            return getattr(value, key)
        return value.notes.get(key)
    if isinstance(value, dict):
        return value.get(key)
    raise ValueError(
        f"get-field reads a result or a dictionary, not {text_of(value)!r}"
    )


def _parse_json(value: Any) -> Any:
    return json_value(text_of(value))


def _number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{text_of(value)!r} is not a number")
    return value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, Result | QSym) or isinstance(b, Result | QSym):
        return text_of(a) == text_of(b)
    return bool(plain(a) == plain(b))


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, tuple | list):
        return any(_equal(x, needle) for x in haystack)
    return text_of(needle) in text_of(haystack)


def _log(*values: Any) -> None:
    return None


PRIMITIVES: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {
        "list": lambda *xs: tuple(xs),
        "get-field": _get_field,
        "content": lambda r: text_of(r),
        "status": lambda r: r.status if isinstance(r, Result) else None,
        "notes": lambda r: r.notes if isinstance(r, Result) else {},
        "json-parse": _parse_json,
        "concat": lambda *xs: "".join(text_of(x) for x in xs),
        "string=?": lambda a, b: text_of(a) == text_of(b),
        "eq?": _equal,
        "=": _equal,
        "not": lambda x: not truthy(x),
        "null?": lambda x: x is None or x == (),
        "contains?": _contains,
        "length": lambda x: (
            len(x) if isinstance(x, tuple | list | dict) else len(text_of(x))
        ),
        "first": lambda x: x[0] if x else None,
        "rest": lambda x: tuple(x[1:]),
        "+": lambda *xs: sum(_number(x) for x in xs),
        "-": lambda a, *xs: (
            _number(a) - sum(_number(x) for x in xs) if xs else -_number(a)
        ),
        "<": lambda a, b: _number(a) < _number(b),
        ">": lambda a, b: _number(a) > _number(b),
        "<=": lambda a, b: _number(a) <= _number(b),
        ">=": lambda a, b: _number(a) >= _number(b),
        "log-message": _log,
    }
)


def bounded(value: Any) -> Any:
    """``value``, if it is no bigger than `MAX_VALUE` and nests no deeper
    than `MAX_VALUE_DEPTH`; an error (`ValueError`) otherwise."""
    budget = MAX_VALUE
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH:
            raise ValueError(f"the value nests deeper than {MAX_VALUE_DEPTH}")
        if isinstance(item, str):
            budget -= 1 + len(item) // 100
        elif isinstance(item, tuple | list):
            budget -= 1 + len(item)
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            budget -= 1 + len(item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, Result):
            budget -= 1 + len(item.content) // 100
            stack.append((item.notes, depth + 1))
        else:
            budget -= 1
        if budget < 0:
            raise ValueError(f"the value grows past {MAX_VALUE:,} units")
    return value
