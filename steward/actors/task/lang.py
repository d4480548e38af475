"""The S-expression language of task programs: its reader (pure).

A program is a sequence of forms, evaluated in order. A form is a list
``(head arg ...)``, a symbol, or a literal: a string (``"a\\n\\"b\\""``, with
the escapes ``\\n \\t \\r \\" \\\\``), an integer, a float, ``true``,
``false`` or ``nil``. ``'x`` is ``(quote x)``; ``;`` starts a comment that
runs to the end of the line. Every node keeps the line and column (from 1)
where it starts, so an error names where it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from steward.errors import StewardError

__all__ = ["MAX_DEPTH", "Form", "Lit", "Node", "ParseError", "Sym", "parse", "shown"]

MAX_DEPTH = 64
"""Forms (and quotes) nested inside each other, at most: deeper text is a
`ParseError` where it goes too deep, the same on every host, rather than a
`RecursionError` from the reader."""


class Sym(msgspec.Struct, frozen=True, gc=False):
    """A name: a variable, a template, a special form or a primitive."""

    name: str
    line: int
    column: int


class Lit(msgspec.Struct, frozen=True, gc=False):
    """A literal value."""

    value: str | int | float | bool | None
    line: int
    column: int


class Form(msgspec.Struct, frozen=True, gc=False):
    """A list ``(item ...)``."""

    items: tuple[Node, ...]
    line: int
    column: int


Node = Sym | Lit | Form


class ParseError(StewardError):
    """A program that cannot be read: where, and why."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.reason = message
        self.line = line
        self.column = column


_TOKEN = re.compile(
    r"""
    (?P<space>\s+|;[^\n]*)
  | (?P<open>\()
  | (?P<close>\))
  | (?P<quote>')
  | (?P<string>")
  | (?P<atom>[^\s()'";]+)
    """,
    re.VERBOSE,
)
_ESCAPES = MappingProxyType({"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"})
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_WORDS: Mapping[str, bool | None] = MappingProxyType(
    {"true": True, "false": False, "nil": None}
)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0
        # offsets where lines start, for positions
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def where(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.starts[lo] + 1

    def fail(self, message: str, offset: int) -> ParseError:
        return ParseError(message, *self.where(offset))

    def skip(self) -> None:
        while True:
            m = _TOKEN.match(self.text, self.pos)
            if m is None or m.lastgroup != "space":
                return
            self.pos = m.end()

    def node(self) -> Node:
        self.skip()
        start = self.pos
        m = _TOKEN.match(self.text, start)
        if m is None:
            raise self.fail("the program ends where a form was expected", start)
        kind = m.lastgroup
        line, column = self.where(start)
        if kind in ("open", "quote") and self.depth >= MAX_DEPTH:
            raise self.fail(f"forms nest deeper than {MAX_DEPTH} here", start)
        if kind == "open":
            self.pos = m.end()
            items: list[Node] = []
            while True:
                self.skip()
                if self.pos >= len(self.text):
                    raise self.fail("this ( is never closed", start)
                if self.text[self.pos] == ")":
                    self.pos += 1
                    return Form(tuple(items), line, column)
                self.depth += 1
                items.append(self.node())
                self.depth -= 1
        if kind == "close":
            raise self.fail("unexpected ), with no ( open", start)
        if kind == "quote":
            self.pos = m.end()
            self.skip()
            if self.pos >= len(self.text) or self.text[self.pos] == ")":
                raise self.fail("' must be followed by a form", start)
            self.depth += 1
            quoted = self.node()
            self.depth -= 1
            return Form((Sym("quote", line, column), quoted), line, column)
        if kind == "string":
            return self.string(start, line, column)
        self.pos = m.end()
        try:
            return _atom(m.group(), line, column)
        except ValueError:  # int() refuses more than 4300 digits
            raise self.fail(
                f"this integer has too many digits ({len(m.group())})", start
            ) from None

    def string(self, start: int, line: int, column: int) -> Lit:
        out: list[str] = []
        i = start + 1
        text = self.text
        while i < len(text):
            c = text[i]
            if c == '"':
                self.pos = i + 1
                return Lit("".join(out), line, column)
            if c == "\\":
                if i + 1 >= len(text):
                    break
                e = text[i + 1]
                if e not in _ESCAPES:
                    raise self.fail(
                        f"unknown escape \\{e} in a string "
                        '(known: \\n \\t \\r \\" \\\\)',
                        i,
                    )
                out.append(_ESCAPES[e])
                i += 2
                continue
            out.append(c)
            i += 1
        raise self.fail('this string is never closed (a missing ")', start)


def _atom(token: str, line: int, column: int) -> Node:
    if token in _WORDS:
        return Lit(_WORDS[token], line, column)
    if _INT.fullmatch(token):
        return Lit(int(token), line, column)
    if _FLOAT.fullmatch(token) and any(c.isdigit() for c in token):
        return Lit(float(token), line, column)
    return Sym(token, line, column)


def parse(text: str) -> tuple[Node, ...]:
    """The forms of program ``text``, in order.

    Raises:
        ParseError: the text is not a program (an unclosed ``(`` or string,
            a stray ``)``, an unknown escape, nothing at all), with the line
            and column where the problem starts.
    """
    reader = _Reader(text)
    forms: list[Node] = []
    while True:
        reader.skip()
        if reader.pos >= len(text):
            break
        forms.append(reader.node())
    if not forms:
        raise ParseError("the program is empty", 1, 1)
    return tuple(forms)


def shown(node: Node, limit: int = 60) -> str:
    """``node`` written back as text, cut to ``limit`` characters."""
    text = _written(node)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _written(node: Node) -> str:
    match node:
        case Sym(name=name):
            return name
        case Lit(value=value):
            return _literal(value)
        case Form(items=items):
            return "(" + " ".join(_written(i) for i in items) + ")"


def _literal(value: Any) -> str:
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    return str(value)
