"""Guards of workflow transitions: the grammar `parse` reads, the errors it
raises, and the semantics `evaluate` gives, checked against a reference."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steward.actors.workflow.guards import (
    Compare,
    Guard,
    GuardError,
    Logic,
    Path,
    evaluate,
    parse,
    render,
)

OPS = ["==", "!=", ">", "<", ">=", "<="]


def path(dotted: str) -> Path:
    return Path(tuple(dotted.split(".")))


def holds(text: str, context: dict[str, Any] | None = None) -> bool:
    return evaluate(parse(text), context or {})


# Grammar


def test_a_dotted_path_reads_as_its_names() -> None:
    """A dotted path is one Path of its segments; names take _, - and digits."""
    assert parse("report.quality.score >= 0.8") == Compare(
        Path(("report", "quality", "score")), ">=", 0.8
    )
    assert parse("_x.risk-level2 == 1") == Compare(Path(("_x", "risk-level2")), "==", 1)


@pytest.mark.parametrize("op", OPS)
def test_every_operator_parses_with_or_without_spaces(op: str) -> None:
    """Each of == != > < >= <= parses, spaced or not."""
    expected = Compare(path("a"), op, 1)  # type: ignore[arg-type]
    assert parse(f"a {op} 1") == expected
    assert parse(f"a{op}1") == expected


def test_operands_are_literals_or_paths_on_either_side() -> None:
    """A literal may stand left, a path right, or both sides be either."""
    assert parse("1 < attempt") == Compare(1, "<", path("attempt"))
    assert parse("a == b.c") == Compare(path("a"), "==", path("b.c"))
    assert parse('"x" != null') == Compare("x", "!=", None)


def test_and_binds_tighter_than_or() -> None:
    """``A or B and C`` is ``A or (B and C)``."""
    a, b, c = (Compare(path(n), "==", 1) for n in "abc")
    assert parse("a == 1 or b == 1 and c == 1") == Logic(
        "or", (a, Logic("and", (b, c)))
    )
    assert parse("a == 1 and b == 1 or c == 1") == Logic(
        "or", (Logic("and", (a, b)), c)
    )
    # A true, C false: A or (B and C) holds where (A or B) and C would not.
    assert holds("a == 1 or b == 1 and c == 1", {"a": 1, "c": 0})


def test_parentheses_group_and_nest() -> None:
    """Parentheses override precedence and may nest; redundant ones vanish."""
    a, b, c = (Compare(path(n), "==", 1) for n in "abc")
    assert parse("(a == 1 or b == 1) and c == 1") == Logic(
        "and", (Logic("or", (a, b)), c)
    )
    assert parse("((a == 1))") == a
    assert parse("(a == 1 and (b == 1 or (c == 1)))") == Logic(
        "and", (a, Logic("or", (b, c)))
    )
    assert not holds("(a == 1 or b == 1) and c == 1", {"a": 1, "c": 0})


def test_a_run_of_one_word_is_one_flat_logic() -> None:
    """``A and B and C`` is one Logic of three parts, not nested pairs."""
    a, b, c = (Compare(path(n), "==", 1) for n in "abc")
    assert parse("a == 1 and b == 1 and c == 1") == Logic("and", (a, b, c))
    assert parse("a == 1 or b == 1 or c == 1") == Logic("or", (a, b, c))


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ('"plain"', "plain"),
        ("'plain'", "plain"),
        ('""', ""),
        ("''", ""),
        (r'"say \"hi\""', 'say "hi"'),
        (r"'it\'s'", "it's"),
        ("'say \"hi\"'", 'say "hi"'),
        (r"'say \"hi\"'", 'say "hi"'),
        ('"it\'s"', "it's"),
        (r'"a\\b"', "a\\b"),
        (r"'a\\'", "a\\"),
        (r"'a\\\'b'", "a\\'b"),
        (r'"\/ \b \f \n \r \t"', "/ \b \f \n \r \t"),
        (r"'\n\t'", "\n\t"),
        (r'"\u00e9\ud83d\ude00"', "é😀"),
        (r"'\u00E9'", "é"),
        ('"é and or ( ) == \'"', "é and or ( ) == '"),
    ],
)
def test_strings_take_either_quote_and_json_escapes(literal: str, value: str) -> None:
    """A string in " or ' reads as JSON reads it; \\' only in a '-quoted one."""
    assert parse(f"a == {literal}") == Compare(path("a"), "==", value)


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("-3", -3),
        ("0.5", 0.5),
        ("-2.25", -2.25),
        ("1e3", 1000.0),
        ("2.5E-2", 0.025),
        ("-1e+2", -100.0),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_numbers_are_ints_unless_they_have_a_point_or_exponent(
    literal: str, value: float
) -> None:
    """Integers parse as int; a fraction or an exponent makes a float."""
    parsed = parse(f"a == {literal}")
    assert isinstance(parsed, Compare)
    assert parsed.right == value
    assert type(parsed.right) is type(value)


def test_a_negative_number_follows_an_operator_without_space() -> None:
    """``a<-1`` is ``a < -1``."""
    assert parse("a<-1") == Compare(path("a"), "<", -1)


def test_true_false_null_are_literals() -> None:
    """The words true, false and null are the JSON values."""
    parsed = parse("true != false and x == null")
    assert parsed == Logic(
        "and", (Compare(True, "!=", False), Compare(path("x"), "==", None))
    )
    assert isinstance(parsed, Logic) and isinstance(parsed.parts[0], Compare)
    assert parsed.parts[0].left is True
    assert parsed.parts[0].right is False


def test_a_word_inside_a_dotted_path_is_a_name() -> None:
    """Only a word standing alone is a literal: ``report.null`` is a path."""
    assert parse("report.null == true.and") == Compare(
        path("report.null"), "==", path("true.and")
    )


# Parse errors


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("", 1, "expected a path or a value, found the end"),
        ("   ", 4, "expected a path or a value, found the end"),
        ("a ==", 5, "expected a path or a value, found the end"),
        ("a b", 3, "expected a comparison (== != > < >= <=), found 'b'"),
        ("report.risk", 12, "expected a comparison (== != > < >= <=), found the end"),
        ("a == 1 == 2", 8, "expected 'and', 'or' or the end, found '=='"),
        ("a == == 1", 6, "expected a path or a value, found '=='"),
        ("(a == 1", 8, "expected ')', found the end"),
        ("(a == 1 b", 9, "expected ')', found 'b'"),
        ("a == 1)", 7, "expected 'and', 'or' or the end, found ')'"),
        ("()", 2, "expected a path or a value, found ')'"),
        ('a == "open', 6, "a string with no closing quote"),
        ("a == 'open\\'", 6, "a string with no closing quote"),
        ("a ~ 1", 3, "unexpected '~'"),
        ("a == .5", 6, "unexpected '.'"),
        ("a == 1 and", 11, "expected a path or a value, found the end"),
        ("a == 1 and or b == 1", 12, "expected a path or a value, found 'or'"),
        ("and == 1", 1, "expected a path or a value, found 'and'"),
        (r'a == "x\q"', 8, r"a string with a bad escape \q: the escapes are"),
        (r"a == 'x\q'", 8, r"a string with a bad escape \q: the escapes are"),
        (r'a == "\u12"', 7, r"a string with a bad escape \u: the escapes are"),
        (r'a == "it\'s"', 9, r"a string with a bad escape \': the escapes are"),
        ('a == "tab\there"', 10, "a string with a raw control character '\\t'"),
    ],
)
def test_a_bad_guard_raises_with_the_column_of_the_problem(
    text: str, column: int, message: str
) -> None:
    """GuardError says what was expected and points (1-based) where it was not."""
    with pytest.raises(GuardError, match=re.escape(f"column {column}: {message}")):
        parse(text)
    with pytest.raises(GuardError) as caught:
        parse(text)
    assert (caught.value.text, caught.value.column) == (text, column)


# Evaluation


@pytest.mark.parametrize("op", OPS)
def test_a_missing_path_is_false_for_every_operator(op: str) -> None:
    """Whatever the operator (``!=`` too), a missing path makes it false."""
    context = {"present": 1, "nothing": None}
    assert not holds(f"absent {op} 1", context)
    assert not holds(f"1 {op} absent", context)
    assert not holds(f"absent {op} null", context)
    assert not holds(f"absent {op} absent", context)
    assert not holds(f"present.deeper {op} 1", context)
    assert not holds(f"nothing.deeper {op} null", context)


@pytest.mark.parametrize("op", ["==", "!=", "<", ">="])
def test_a_path_through_a_string_or_a_list_is_missing(op: str) -> None:
    """Only objects have members: a path through a string or list is missing."""
    # The names are in the string and in the list, as a substring and an item.
    context = {"text": "x length", "items": [1, "x"], "obj": {"x": {"y": 1}}}
    assert not holds(f"text.length {op} 3", context)
    assert not holds(f"items.x {op} 1", context)
    assert not holds(f"obj.x.y.z {op} 1", context)
    assert holds("obj.x.y == 1", context)


def test_a_boolean_is_never_a_number() -> None:
    """``true != 1``; a true value neither equals 1 nor orders against numbers."""
    assert holds("true != 1")
    assert not holds("true == 1")
    assert not holds("false == 0")
    assert not holds("x == 1", {"x": True})
    assert holds("x != 1", {"x": True})
    assert not holds("x == true", {"x": 1})
    assert not holds("x > 0", {"x": True})
    assert not holds("x <= 1", {"x": True})


def test_arrays_and_objects_compare_item_by_item() -> None:
    """Path to path, arrays and objects are equal when their items are."""
    context = {
        "a": [1, {"k": [True, None, "s"]}],
        "b": [1.0, {"k": [True, None, "s"]}],
        "bools": [True, {"k": False}],
        "ints": [1, {"k": 0}],
        "short": [1],
        "k": {"k": 1},
        "j": {"j": 1},
    }
    assert holds("a == b", context)
    assert not holds("a != b", context)
    assert not holds("bools == ints", context)
    assert holds("bools != ints", context)
    assert not holds("a == short", context)
    assert not holds("a == a.k", context)
    assert not holds("k == j", context)
    assert holds("k != j", context)


def test_an_int_equals_the_same_float() -> None:
    """Numbers compare by value: ``1 == 1.0``, and a context 2.0 equals 2."""
    assert holds("1 == 1.0")
    assert not holds("1 != 1.0")
    assert holds("x == 2", {"x": 2.0})
    assert holds("x >= 2.0", {"x": 2})


@pytest.mark.parametrize(
    "text",
    [
        '"a" < 1',
        '"a" > 1',
        "null < 1",
        "null >= null",
        "true > false",
        "true >= true",
        "x < 1",
        "y >= 0",
        "s < n",
        "s >= n",
        "items <= items",
        "obj >= obj",
    ],
)
def test_orderings_between_other_kinds_are_false(text: str) -> None:
    """An ordering holds only between two numbers or two strings."""
    context: dict[str, Any] = {
        "x": None,
        "y": True,
        "s": "1",
        "n": 1,
        "items": [1],
        "obj": {},
    }
    assert not holds(text, context)


@pytest.mark.parametrize(
    "text",
    [
        "1 < 2.5",
        "-1 < 0",
        "1e3 > 999",
        "2 <= 2",
        "2 >= 2.0",
        "attempt > 2",
    ],
)
def test_orderings_between_numbers_hold_by_value(text: str) -> None:
    """Two numbers order by value, whichever is int or float."""
    assert holds(text, {"attempt": 3})


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [("apple", "banana"), ("B", "a"), ("ab", "abc"), ("10", "9"), ("z", "é")],
)
def test_strings_order_by_code_point(smaller: str, larger: str) -> None:
    """Strings order lexicographically by code point (not numerically)."""
    context = {"s": smaller, "l": larger}
    assert holds("s < l", context) and holds("s <= l", context)
    assert holds("l > s", context) and holds("l >= s", context)
    assert not holds("s > l", context) and not holds("s >= l", context)


def test_equals_null_matches_only_a_json_null() -> None:
    """``x == null`` holds for a null, not for 0, false, "" or a missing x."""
    assert holds("x == null", {"x": None})
    assert not holds("x != null", {"x": None})
    values: list[Any] = [0, False, "", [], {}]
    for value in values:
        assert not holds("x == null", {"x": value})
        assert holds("x != null", {"x": value})
    assert not holds("x == null", {})


def test_paths_compare_to_paths() -> None:
    """Both operands may read the context."""
    context = {"a": 3, "b": {"c": 3, "d": 4}, "s": "x", "t": "y"}
    assert holds("a == b.c", context)
    assert holds("a < b.d and b.d > b.c", context)
    assert not holds("a != b.c", context)
    assert holds("s < t", context)
    assert not holds("a == s", context)


def test_the_docstring_example_decides_by_its_parts() -> None:
    """and/or combine comparisons as the module's example reads."""
    guard = parse(
        'report.quality.score >= 0.8 and (report.risk != "high" or attempt > 2)'
    )

    def context(score: float, risk: str, attempt: int) -> dict[str, Any]:
        return {
            "report": {"quality": {"score": score}, "risk": risk},
            "attempt": attempt,
        }

    assert evaluate(guard, context(0.9, "low", 1))
    assert evaluate(guard, context(0.8, "high", 3))
    assert not evaluate(guard, context(0.9, "high", 2))
    assert not evaluate(guard, context(0.7, "low", 5))
    assert not evaluate(guard, {"attempt": 5})


def test_a_deeply_nested_value_compares_without_raising() -> None:
    """Equality of values nested far deeper than the recursion limit answers."""
    deep: list[Any] = []
    twin: list[Any] = []
    for _ in range(50_000):
        deep, twin = [deep], [twin]
    assert holds("a == b", {"a": deep, "b": twin})
    assert not holds("a == b", {"a": deep, "b": [twin]})


# Properties: random guards and contexts

NAMES = ["a", "b", "a.x", "report.x", "report.quality.score", "my-field", "_z"]
# Half the values come from a small pool (names included, as strings), so
# that equal values, bool against 1, and strings holding a path's name are
# common rather than rare.
POOL = [0, 1, -1, 2, 0.5, 1.0, -2.5, "", "x", "a x", "high", True, False, None]

paths = st.sampled_from(NAMES).map(path)
literals = st.sampled_from(POOL) | st.one_of(
    st.text(),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
compares = st.builds(
    Compare,
    st.one_of(paths, literals),
    st.sampled_from(OPS),
    st.one_of(paths, literals),
)
guards: st.SearchStrategy[Guard] = st.recursive(
    compares,
    lambda parts: st.builds(
        Logic,
        st.sampled_from(["and", "or"]),
        st.tuples(parts, parts) | st.tuples(parts, parts, parts),
    ),
    max_leaves=10,
)

finite_scalars = st.sampled_from(POOL) | st.one_of(
    st.text(max_size=4),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
)
finite_values = st.recursive(
    finite_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["x", "quality", "score"]), inner, max_size=3)
    ),
    max_leaves=6,
)
reports = st.fixed_dictionaries(
    {},
    optional={
        "x": finite_values,
        "quality": st.fixed_dictionaries({}, optional={"score": finite_values}),
    },
)
contexts = st.fixed_dictionaries(
    {},
    optional={
        "a": finite_values | reports,
        "b": finite_values,
        "report": reports | finite_values,
        "my-field": finite_values,
        "_z": finite_values,
    },
)

# Near misses, one comparison at a time: true against 1, {"x": 1} against
# {"y": 1}, a path a.x through the string "a x" or the list ["x"], where the
# wide strategies above rarely land.
near = st.sampled_from([0, 1, 1.0, -1, True, False, None, "", "x", "a x", "y"])
near_values = st.recursive(
    near,
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2)
    ),
    max_leaves=4,
)
near_operands = st.sampled_from(["a", "b", "a.x", "b.y"]).map(path) | near
near_compares = st.builds(Compare, near_operands, st.sampled_from(OPS), near_operands)
near_contexts = st.dictionaries(st.sampled_from(["a", "b"]), near_values)

# Anything JSON-like, NaN and infinities included, under any names.
any_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["x", "quality", "score"]), inner, max_size=3)
    ),
    max_leaves=8,
)
any_contexts = st.dictionaries(
    st.sampled_from(["a", "b", "report", "my-field", "_z"]) | st.text(max_size=2),
    any_values,
    max_size=5,
)


_MISSING = object()
_ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    "<": operator.lt,
    ">=": operator.ge,
    "<=": operator.le,
}


def reference(guard: Guard, context: dict[str, Any]) -> bool:
    """The module docstring's semantics, written apart from the module."""
    if isinstance(guard, Logic):
        results = [reference(part, context) for part in guard.parts]
        return all(results) if guard.op == "and" else any(results)
    left, right = _read(guard.left, context), _read(guard.right, context)
    if left is _MISSING or right is _MISSING:
        return False
    if guard.op in ("==", "!="):
        return (_json(left) == _json(right)) == (guard.op == "==")
    kinds = {_json(left)[0], _json(right)[0]}
    if kinds not in ({"number"}, {"string"}):
        return False
    return _ORDERS[guard.op](left, right)


def _read(operand: Any, context: dict[str, Any]) -> Any:
    if not isinstance(operand, Path):
        return operand
    value: Any = context
    for name in operand.names:
        if type(value) is not dict or name not in value:
            return _MISSING
        value = value[name]
    return value


def _json(value: Any) -> tuple[Any, ...]:
    """``value`` tagged with its JSON type, so that == compares JSON values."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_json(item) for item in value))
    return ("object", {key: _json(item) for key, item in value.items()})


@settings(max_examples=300, deadline=None)
@given(guards)
def test_render_parses_back_to_the_same_guard(guard: Guard) -> None:
    """``parse(render(g))`` is ``g``, literal types and nesting included."""
    # render parenthesizes every part of a Logic, so a Logic nested in one of
    # the same word stays nested: the round trip is exact. repr tells True
    # from 1 and -0.0 from 0.0, which == would not.
    parsed = parse(render(guard))
    assert parsed == guard
    assert repr(parsed) == repr(guard)


@pytest.mark.parametrize(
    "text",
    [
        "a == 1e999 or a > -1e999",
        "(a == 1 and (b == 2)) and c == 3",
        "x == 'it\\'s \"é\"'",
        "a>=-0.0",
    ],
)
def test_a_parsed_guard_renders_back_to_itself(text: str) -> None:
    """``render`` of what ``parse`` made parses to it again, infinities too."""
    parsed = parse(text)
    assert repr(parse(render(parsed))) == repr(parsed)


@settings(max_examples=300, deadline=None)
@given(guards, contexts)
def test_evaluate_agrees_with_the_reference(
    guard: Guard, context: dict[str, Any]
) -> None:
    """``evaluate`` of a rendered and parsed guard is the documented answer."""
    assert evaluate(parse(render(guard)), context) is reference(guard, context)


@settings(max_examples=300, deadline=None)
@given(near_compares, near_contexts)
def test_a_comparison_of_near_miss_values_agrees_with_the_reference(
    compare: Compare, context: dict[str, Any]
) -> None:
    """Values alike but for their JSON type or shape compare as documented."""
    assert evaluate(parse(render(compare)), context) is reference(compare, context)


@settings(max_examples=300, deadline=None)
@given(guards, any_contexts)
def test_evaluate_never_raises(guard: Guard, context: dict[str, Any]) -> None:
    """Any guard over any JSON-like context, NaN included, gives a bool."""
    assert type(evaluate(guard, context)) is bool


def test_parentheses_nested_too_deep_are_one_error() -> None:
    """A guard of thousands of parentheses is refused in one line, not with
    a traceback."""
    with pytest.raises(GuardError, match="nested too deep"):
        parse("(" * 5000 + "a == 1" + ")" * 5000)
