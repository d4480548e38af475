"""Guard expressions of workflow transitions: parsed, then evaluated (pure).

A guard compares values of a phase's report context::

    decision == "changes_requested"
    report.quality.score >= 0.8 and (report.risk != "high" or attempt > 2)

Its grammar::

    expr       := and ("or" and)*
    and        := term ("and" term)*
    term       := "(" expr ")" | operand OP operand
    operand    := path | string | number | "true" | "false" | "null"
    path       := NAME ("." NAME)*        NAME: a letter or _, then letters,
                                          digits, _ or -
    OP         := "==" | "!=" | ">" | "<" | ">=" | "<="

Strings are quoted with ``"`` or ``'`` and read as JSON strings: JSON's
escapes (and ``\\'`` in a ``'``-quoted one), no raw control characters. A
word (``and``, ``true``...) standing alone is that word, not a path. A path
reads the context: a dict per segment. `evaluate` never raises: a path that
is missing (or runs into a value that is no object) makes its comparison
false, whatever the operator; ``==`` and ``!=`` compare JSON values, arrays
and objects item by item (a boolean is never a number: ``true != 1``, nor
``[true] != [1]``); the orderings hold between two numbers or two strings
and are false otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

__all__ = [
    "Compare",
    "Guard",
    "GuardError",
    "Logic",
    "Path",
    "evaluate",
    "parse",
    "render",
]

Op = Literal["==", "!=", ">", "<", ">=", "<="]


class Path(msgspec.Struct, frozen=True, gc=False):
    """A dotted path into the context."""

    names: tuple[str, ...]


Operand = Path | str | int | float | bool | None


class Compare(msgspec.Struct, frozen=True, gc=False):
    left: Operand
    op: Op
    right: Operand


class Logic(msgspec.Struct, frozen=True, gc=False):
    """``and`` or ``or`` of two or more guards."""

    op: Literal["and", "or"]
    parts: tuple[Guard, ...]


Guard = Compare | Logic


class GuardError(ValueError):
    """A guard that does not parse; ``column`` is 1-based."""

    def __init__(self, text: str, column: int, problem: str) -> None:
        self.text, self.column, self.problem = text, column, problem
        super().__init__(f"column {column}: {problem}")


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      | (?P<string>"(?:[^"\\]|\\(?s:.))*"|'(?:[^'\\]|\\(?s:.))*')
      | (?P<op>==|!=|>=|<=|>|<)
      | (?P<paren>[()])
      | (?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*)
    )""",
    re.VERBOSE,
)
_WORDS = frozenset({"and", "or", "true", "false", "null"})


class _Token(msgspec.Struct, frozen=True, gc=False):
    kind: str  # number string op paren name word end
    text: str
    column: int


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            tokens.append(_Token("end", "", at + 1))
            return tokens
        match = _TOKEN.match(text, at)
        if match is None or match.lastgroup is None:
            if text[at] in "\"'":
                raise GuardError(text, at + 1, "a string with no closing quote")
            raise GuardError(text, at + 1, f"unexpected {text[at]!r}")
        kind, value = match.lastgroup, match.group(match.lastgroup)
        column = match.start(kind) + 1
        if kind == "name" and value in _WORDS:
            kind = "word"
        tokens.append(_Token(kind, value, column))
        at = match.end()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self, token: _Token, wanted: str) -> GuardError:
        found = "the end" if token.kind == "end" else repr(token.text)
        return GuardError(self.text, token.column, f"expected {wanted}, found {found}")

    def expr(self) -> Guard:
        return self.logic("or", self.conjunction)

    def conjunction(self) -> Guard:
        return self.logic("and", self.term)

    def logic(self, word: Literal["and", "or"], part: Any) -> Guard:
        parts = [part()]
        while self.peek().kind == "word" and self.peek().text == word:
            self.take()
            parts.append(part())
        return parts[0] if len(parts) == 1 else Logic(word, tuple(parts))

    def term(self) -> Guard:
        if self.peek().text == "(" and self.peek().kind == "paren":
            self.take()
            inner = self.expr()
            closing = self.take()
            if closing.text != ")":
                raise self.fail(closing, "')'")
            return inner
        left = self.operand()
        op = self.take()
        if op.kind != "op":
            raise self.fail(op, "a comparison (== != > < >= <=)")
        return Compare(left, op.text, self.operand())  # type: ignore[arg-type]

    def operand(self) -> Operand:
        token = self.take()
        match token.kind:
            case "number":
                if any(c in token.text for c in ".eE"):
                    return float(token.text)
                return int(token.text)
            case "string":
                return _string(self.text, token)
            case "word" if token.text in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[token.text]
            case "name":
                return Path(tuple(token.text.split(".")))
            case _:
                raise self.fail(token, "a path or a value")


# What a string's body holds beyond plain characters, and of those the
# escapes JSON takes as they are.
_SPECIAL = re.compile(r'\\(?:u[0-9a-fA-F]{4}|.)?|"|[\x00-\x1f]', re.DOTALL)
_JSON_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')


def _string(text: str, token: _Token) -> str:
    # The body is rewritten as a double-quoted JSON string, piece by piece, so
    # that a bad piece is reported where it is (not at the opening quote) and
    # an escaped \" in a '-quoted string stays one quote.
    quote, body = token.text[0], token.text[1:-1]
    pieces: list[str] = []
    at = 0
    for special in _SPECIAL.finditer(body):
        piece = special.group()
        if piece == '"':  # only in a '-quoted string
            piece = '\\"'
        elif piece == "\\'" and quote == "'":
            piece = "'"
        elif not _JSON_ESCAPE.fullmatch(piece):
            raise GuardError(
                text, token.column + 1 + special.start(), _bad_piece(piece, quote)
            )
        pieces += [body[at : special.start()], piece]
        at = special.end()
    pieces.append(body[at:])
    value: str = json.loads('"' + "".join(pieces) + '"')
    return value


def _bad_piece(piece: str, quote: str) -> str:
    if not piece.startswith("\\"):
        return (
            f"a string with a raw control character {piece!r}: "
            "write it as an escape (\\n, \\t, \\u0000)"
        )
    escapes = '\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX'
    if quote == "'":
        escapes += " \\'"
    shown = piece if piece.isprintable() else repr(piece)
    return f"a string with a bad escape {shown}: the escapes are {escapes}"


def parse(text: str) -> Guard:
    """The guard ``text`` says.

    Raises:
        GuardError: it does not parse (its ``column`` says where).
    """
    parser = _Parser(text)
    try:
        guard = parser.expr()
    except RecursionError:
        raise GuardError(text, 1, "parentheses nested too deep") from None
    end = parser.take()
    if end.kind != "end":
        raise parser.fail(end, "'and', 'or' or the end")
    return guard


_MISSING = object()


def _value(operand: Operand, context: dict[str, Any]) -> Any:
    if not isinstance(operand, Path):
        return operand
    value: Any = context
    for name in operand.names:
        if not isinstance(value, dict) or name not in value:
            return _MISSING
        value = value[name]
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(left: Any, right: Any) -> bool:
    # Item by item with a list of pairs to go, not Python's ``==`` (which
    # takes ``[True]`` for ``[1]``) nor recursion (a deep value would raise).
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if _number(a) and _number(b):
            if a != b:
                return False
        elif isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                return False
            pending += [(value, b[key]) for key, value in a.items()]
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
            if len(a) != len(b):
                return False
            pending += zip(a, b, strict=True)
        elif type(a) is not type(b) or a != b:
            return False
    return True


def _compare(guard: Compare, context: dict[str, Any]) -> bool:
    left, right = _value(guard.left, context), _value(guard.right, context)
    if left is _MISSING or right is _MISSING:
        return False
    match guard.op:
        case "==":
            return _equal(left, right)
        case "!=":
            return not _equal(left, right)
    comparable = (_number(left) and _number(right)) or (
        isinstance(left, str) and isinstance(right, str)
    )
    if not comparable:
        return False
    match guard.op:
        case ">":
            return bool(left > right)
        case "<":
            return bool(left < right)
        case ">=":
            return bool(left >= right)
        case _:
            return bool(left <= right)


def evaluate(guard: Guard, context: dict[str, Any]) -> bool:
    """Whether ``guard`` holds in ``context`` (never raises)."""
    if isinstance(guard, Compare):
        return _compare(guard, context)
    if guard.op == "and":
        return all(evaluate(part, context) for part in guard.parts)
    return any(evaluate(part, context) for part in guard.parts)


def render(guard: Guard) -> str:
    """``guard`` as text that parses back to it.

    Any guard `parse` returns renders back to itself; so does one built by
    hand of the same parts (paths of NAMEs that are not words, no NaN).
    """
    if isinstance(guard, Compare):
        return f"{_operand_text(guard.left)} {guard.op} {_operand_text(guard.right)}"
    return f" {guard.op} ".join(f"({render(part)})" for part in guard.parts)


def _operand_text(operand: Operand) -> str:
    if isinstance(operand, Path):
        return ".".join(operand.names)
    if operand is None:
        return "null"
    if isinstance(operand, bool):
        return "true" if operand else "false"
    if isinstance(operand, float):
        # ``1e999`` parses to an infinity, whose repr would read as a path.
        if operand in (float("inf"), float("-inf")):
            return "1e999" if operand > 0 else "-1e999"
        return repr(operand)
    return json.dumps(operand)
