"""The reader of task programs (spec 002): every literal and form reads with
the line and column where it starts; a malformed program is a `ParseError`
naming where its problem starts, never another exception; a program written
back with `shown` reads as the same forms."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steward.actors.task.lang import (
    MAX_DEPTH,
    Form,
    Lit,
    Node,
    ParseError,
    Sym,
    parse,
    shown,
)
from steward.errors import StewardError


def one(text: str) -> Node:
    forms = parse(text)
    assert len(forms) == 1, forms
    return forms[0]


def bare(node: Node) -> Any:
    """``node`` without positions, a literal with its type (``1``, ``1.0``
    and ``true`` are equal in Python, not in a program)."""
    match node:
        case Sym(name=name):
            return ("sym", name)
        case Lit(value=value):
            return ("lit", type(value).__name__, value)
        case Form(items=items):
            return ("form", tuple(bare(i) for i in items))


def error(text: str) -> ParseError:
    with pytest.raises(ParseError) as caught:
        parse(text)
    return caught.value


# --- literals and symbols -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"hello"', "hello"),
        ('""', ""),
        ("42", 42),
        ("-7", -7),
        ("+3", 3),
        ("0", 0),
        ("3.5", 3.5),
        ("-0.25", -0.25),
        (".5", 0.5),
        ("2.", 2.0),
        ("1e3", 1000.0),
        ("2.5E-1", 0.25),
        ("true", True),
        ("false", False),
        ("nil", None),
    ],
)
def test_each_literal_kind_reads_as_its_value_and_type(text: str, value: Any) -> None:
    """Strings, integers, floats, true, false and nil read as typed literals."""
    node = one(text)
    assert isinstance(node, Lit)
    assert node.value == value
    assert type(node.value) is type(value)
    assert (node.line, node.column) == (1, 1)


@pytest.mark.parametrize(
    "text",
    ["x", "foo-bar", "string=?", "+", "-", "<=", "system:run_script", "1.2.3", "1_0"],
)
def test_other_atoms_are_symbols(text: str) -> None:
    """An atom that is no number and no word is a symbol of that name."""
    assert one(text) == Sym(text, 1, 1)


def test_words_are_literals_only_when_spelled_exactly() -> None:
    """``True`` and ``NIL`` are symbols; only ``true`` and ``nil`` are literals."""
    assert one("True") == Sym("True", 1, 1)
    assert one("NIL") == Sym("NIL", 1, 1)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (r'"a\nb"', "a\nb"),
        (r'"a\tb"', "a\tb"),
        (r'"a\rb"', "a\rb"),
        (r'"say \"hi\""', 'say "hi"'),
        (r'"back\\slash"', "back\\slash"),
        (r'"\\n"', "\\n"),
        ('"two\nlines"', "two\nlines"),
        ('"(not a form) ; nor a comment"', "(not a form) ; nor a comment"),
    ],
)
def test_string_escapes_and_raw_characters(text: str, value: str) -> None:
    """The five escapes are decoded; anything else in quotes is kept as is."""
    assert one(text) == Lit(value, 1, 1)


def test_comments_run_to_the_end_of_the_line() -> None:
    """``;`` hides the rest of its line, inside a form or between forms."""
    forms = parse("; header\n(a ; b c)\n d) ; after\n; end")
    assert forms == (Form((Sym("a", 2, 2), Sym("d", 3, 2)), 2, 1),)


def test_quote_shorthand_is_a_quote_form_at_the_apostrophe() -> None:
    """``'x`` reads as ``(quote x)``, positioned where the ``'`` is."""
    assert one("  'x") == Form((Sym("quote", 1, 3), Sym("x", 1, 4)), 1, 3)
    nested = one("'(a 'b)")
    assert bare(nested) == bare(one("(quote (a (quote b)))"))
    assert isinstance(nested, Form)
    inner = nested.items[1]
    assert isinstance(inner, Form)
    assert inner.items[1] == Form((Sym("quote", 1, 5), Sym("b", 1, 6)), 1, 5)


def test_quote_may_be_followed_by_space_and_comments() -> None:
    """Between ``'`` and its form may come blanks and comments."""
    assert bare(one("' ; c\n x")) == bare(one("(quote x)"))


def test_nested_forms_keep_the_line_and_column_of_each_node() -> None:
    """Every node, however deep, knows where it starts (lines and columns from 1)."""
    text = '(bind x\n  (t "a"\n     (u 1.5)))\n\n(y)'
    assert parse(text) == (
        Form(
            (
                Sym("bind", 1, 2),
                Sym("x", 1, 7),
                Form(
                    (
                        Sym("t", 2, 4),
                        Lit("a", 2, 6),
                        Form((Sym("u", 3, 7), Lit(1.5, 3, 9)), 3, 6),
                    ),
                    2,
                    3,
                ),
            ),
            1,
            1,
        ),
        Form((Sym("y", 5, 2),), 5, 1),
    )


def test_empty_list_and_several_top_level_forms() -> None:
    """``()`` is an empty form; a program is every top-level form in order."""
    assert parse('() a "b" 1') == (
        Form((), 1, 1),
        Sym("a", 1, 4),
        Lit("b", 1, 6),
        Lit(1, 1, 10),
    )


def test_columns_count_characters_not_bytes() -> None:
    """A column after non-ASCII text counts code points."""
    assert parse('"héllo→" x') == (Lit("héllo→", 1, 1), Sym("x", 1, 10))


def test_any_whitespace_separates_tokens() -> None:
    """Vertical tab, form feed and Unicode spaces separate tokens as a space does."""
    assert parse("a\x0bb\x0cc\u00a0d\u3000e") == (
        Sym("a", 1, 1),
        Sym("b", 1, 3),
        Sym("c", 1, 5),
        Sym("d", 1, 7),
        Sym("e", 1, 9),
    )


def test_forms_may_nest_up_to_the_depth_limit() -> None:
    """``MAX_DEPTH`` nested forms read (and write back) whole."""
    text = "(a " * MAX_DEPTH + "1" + ")" * MAX_DEPTH
    node = one(text)
    assert shown(node, limit=10**9) == text
    depth = 0
    while isinstance(node, Form):
        depth += 1
        node = node.items[-1]
    assert depth == MAX_DEPTH
    assert node == Lit(1, 1, 3 * MAX_DEPTH + 1)


# --- malformed programs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "reason"),
    [
        ("(a (b c)", 1, 1, "never closed"),
        ("(a\n  (b\n    c)", 1, 1, "never closed"),
        ("(a)\n  (b (c)\n d", 2, 3, "never closed"),
        ("(a))", 1, 4, "unexpected )"),
        ("a\n  )", 2, 3, "unexpected )"),
        ('(a "bc)', 1, 4, "string is never closed"),
        ('x\n\n   "abc\ndef', 3, 4, "string is never closed"),
        ('"ends in a backslash\\', 1, 1, "string is never closed"),
        ('(a "b\\qc")', 1, 6, "unknown escape \\q"),
        ('\n  "ok\\n then \\x"', 2, 14, "unknown escape \\x"),
        ("", 1, 1, "empty"),
        ("   \n ; only a comment\n", 1, 1, "empty"),
        ("'", 1, 1, "' must be followed"),
        ("(a\n  ')", 2, 3, "' must be followed"),
        ("x '  ; nothing quoted", 1, 3, "' must be followed"),
        ("(a 1" + "0" * 4400 + ")", 1, 4, "too many digits"),
        ("(" * (MAX_DEPTH + 5), 1, MAX_DEPTH + 1, "nest deeper"),
        ("'" * (MAX_DEPTH + 1) + "x", 1, MAX_DEPTH + 1, "nest deeper"),
    ],
)
def test_malformed_programs_name_the_line_and_column_of_the_problem(
    text: str, line: int, column: int, reason: str
) -> None:
    """Each kind of malformed program is a ParseError at its exact position."""
    e = error(text)
    assert (e.line, e.column) == (line, column)
    assert str(e) == f"line {line}, column {column}: {e.reason}"
    assert reason in e.reason
    assert isinstance(e, StewardError)


def test_an_unknown_escape_lists_the_known_ones() -> None:
    """The message of an unknown escape says which escapes there are."""
    with pytest.raises(ParseError, match=r"unknown escape \\a .*known: \\n \\t"):
        parse('"\\a"')


# --- properties -----------------------------------------------------------------------

_ALPHABET = st.sampled_from(list("()\"';\\ \n\tabxyz019.-+e") + ["\x0b", "\u00a0"])


@settings(max_examples=400, deadline=None)
@given(st.text(_ALPHABET, max_size=60))
def test_any_text_parses_or_fails_with_a_position_inside_it(text: str) -> None:
    """Arbitrary text reads, or is a ParseError positioned inside the text."""
    try:
        forms = parse(text)
    except ParseError as e:
        lines = text.split("\n")
        assert 1 <= e.line <= len(lines)
        assert 1 <= e.column <= len(lines[e.line - 1]) + 1
        return
    assert forms


def _sym_name(name: str) -> bool:
    try:
        return parse(name) == (Sym(name, 1, 1),)
    except ParseError:
        return False


_names = st.one_of(
    st.sampled_from(["+", "-", "<=", "...", "-x", "+1a", "1-2"]),
    st.from_regex(r"[a-z][a-z0-9+*?!:<=>/_.\\-]{0,8}", fullmatch=True),
).filter(_sym_name)
_literals = st.one_of(
    st.text(max_size=12),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
_nodes: st.SearchStrategy[Node] = st.recursive(
    st.one_of(
        _names.map(lambda n: Sym(n, 1, 1)),
        _literals.map(lambda v: Lit(v, 1, 1)),
    ),
    lambda inner: st.lists(inner, max_size=4).map(lambda xs: Form(tuple(xs), 1, 1)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_nodes)
def test_a_node_written_by_shown_reads_back_as_the_same_node(node: Node) -> None:
    """``parse(shown(node))`` is ``node`` again, positions aside."""
    assert [bare(n) for n in parse(shown(node, limit=10**9))] == [bare(node)]


@settings(max_examples=200, deadline=None)
@given(st.lists(_nodes, min_size=1, max_size=4), st.sampled_from(["open", "close"]))
def test_an_unbalanced_program_is_an_error_at_the_unbalanced_parenthesis(
    forms: list[Node], change: str
) -> None:
    """A well-formed program with a ``(`` before it or a ``)`` after it fails
    exactly there."""
    text = "\n".join(shown(f, limit=10**9) for f in forms)
    if change == "open":
        e = error("(" + text)
        assert (e.line, e.column, e.reason) == (1, 1, "this ( is never closed")
    else:
        e = error(text + ")")
        last = text.split("\n")[-1]
        assert (e.line, e.column) == (text.count("\n") + 1, len(last) + 1)
        assert e.reason == "unexpected ), with no ( open"


@settings(max_examples=200, deadline=None)
@given(st.lists(_nodes, min_size=1, max_size=4), st.text(max_size=8))
def test_an_unclosed_string_is_an_error_where_it_opens(
    forms: list[Node], tail: str
) -> None:
    """A string opened after a program and never closed fails at its ``"``."""
    text = "\n".join(shown(f, limit=10**9) for f in forms) + "\n"
    e = error(text + '"' + tail.replace('"', "").replace("\\", ""))
    assert (e.line, e.column) == (text.count("\n") + 1, 1)
    assert "never closed" in e.reason


def test_shown_cuts_long_text_with_an_ellipsis() -> None:
    """``shown`` keeps at most ``limit`` characters, ending a cut with ``…``."""
    node = one('(concat "a long string" "and another")')
    assert shown(node, limit=12) == '(concat "a …'
    assert len(shown(node, limit=12)) == 12
    assert shown(node) == '(concat "a long string" "and another")'
    assert shown(one('"a\\"b\\\\c\nd"')) == '"a\\"b\\\\c\\nd"'
