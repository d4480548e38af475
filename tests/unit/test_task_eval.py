"""The evaluator of task programs (spec 002), driven as the task decider
drives it: evaluate from the start, answer the call it needs with a scripted
result, evaluate again, until the program is done or fails. Scoping (a
template sees its parameters alone), each special form, the loops' limits,
failed calls, the calls limit, the nondeterminism check, tools, the trace and
``defatom``; and a property over random programs and results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from steward.actors.task.eval import (
    MAX_LEVELS,
    Body,
    Checkpoint,
    Done,
    Evaluated,
    Failed,
    Iteration,
    Need,
    Scope,
    TraceLine,
    defined_atoms,
    evaluate,
    resume,
)
from steward.actors.task.events import TaskError, Template
from steward.actors.task.lang import MAX_DEPTH, parse
from steward.actors.task.values import Closure, Decision, QSym, Result, plain


def template(name: str, *params: str, **fields: Any) -> Template:
    return Template(name=name, params=params, instructions=f"do {name}", **fields)


TEMPLATES: Mapping[str, Template] = {
    t.name: t
    for t in (
        template("pick"),
        template("summarize", "text"),
        template("judge", "a", "b"),
        template("plan", "goal"),
        template("execute", "plan"),
    )
}


def ok(content: str, **notes: Any) -> Result:
    return Result("COMPLETE", content, notes)


def bad(content: str) -> Result:
    return Result("FAILED", content, {})


def need(call: int, template: str, **args: Any) -> Need:
    return Need(call=call, template=template, args=args)


class Run(NamedTuple):
    needs: list[Need]
    outcome: Done | Failed


def drive(
    program: str,
    script: Sequence[Result] = (),
    *,
    templates: Mapping[str, Template] = TEMPLATES,
    limits: Mapping[int, str] = {},
    args: Mapping[str, Any] = {},
    max_calls: int = 1_000,
    revision: int = 0,
) -> Run:
    """Evaluate as the decider does: each Need is recorded as started and
    answered with the next scripted result (``limits``: the limit call k's
    failure reached), until the program ends."""
    forms = parse(program)
    results: list[Result] = []
    started: list[tuple[str, str | None, dict[str, Any]]] = []
    needs: list[Need] = []
    while True:
        outcome = evaluate(
            forms,
            templates=templates,
            args=args,
            results=results,
            started=started,
            failed_limits=[limits.get(k) for k in range(1, len(results) + 1)],
            max_calls=max_calls,
            revision=revision,
        )
        if not isinstance(outcome, Need):
            assert len(results) == len(script), "a scripted result was never asked"
            return Run(needs, outcome)
        assert outcome.call == len(results) + 1
        assert len(results) < len(script), f"unscripted call {outcome}"
        needs.append(outcome)
        started.append((outcome.template, outcome.tool, outcome.args))
        results.append(script[len(results)])


def value_of(program: str, script: Sequence[Result] = (), **kw: Any) -> Any:
    outcome = drive(program, script, **kw).outcome
    assert isinstance(outcome, Done), outcome
    return outcome.value


def error_of(program: str, script: Sequence[Result] = (), **kw: Any) -> TaskError:
    outcome = drive(program, script, **kw).outcome
    assert isinstance(outcome, Failed), outcome
    return outcome.error


# --- bind and let ---------------------------------------------------------------------


def test_bind_binds_in_the_current_scope_for_the_forms_after_it() -> None:
    """``bind`` names a value every later form of its scope sees."""
    assert value_of('(bind x "a") (bind y (concat x "b")) (list x y)') == ("a", "ab")


def test_bind_returns_its_value_and_rebinding_replaces_it() -> None:
    """``(bind x E)`` is E's value; binding x again replaces the old value."""
    assert value_of('(bind x "1") (bind x (concat x "2"))') == "12"


def test_let_bindings_are_invisible_outside_the_let() -> None:
    """A name a ``let`` binds is unbound after it, naming where it is used."""
    error = error_of('(let ((x "a")) x)\n  (concat x)')
    assert error.kind == "eval"
    assert error.message == "line 2, column 11: x is not bound"


def test_let_shadows_an_outer_name_only_inside_it() -> None:
    """Inside a ``let`` its name hides the outer one, which is back after it."""
    program = '(bind x "out") (bind y (let ((x "in")) x)) (list x y)'
    assert value_of(program) == ("out", "in")


def test_bind_inside_a_let_stays_inside_it() -> None:
    """A ``bind`` in a ``let`` body binds in the let's scope."""
    assert value_of('(let () (bind z "in") z)') == "in"
    assert error_of('(let () (bind z "in")) z').message == (
        "line 1, column 24: z is not bound"
    )


def test_let_evaluates_its_bindings_in_the_outer_scope() -> None:
    """A let's bindings do not see each other (``let``, not ``let*``)."""
    assert value_of('(bind a "outer") (let ((a "inner") (b a)) b)') == "outer"


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("(bind x)", "(bind NAME EXPR) takes a name and an expression"),
        ('(bind "x" 1)', 'bind\'s first argument must be a name, not "x"'),
        ("(let x 1)", "(let ((NAME EXPR) ...) BODY ...) needs a list of bindings"),
        ("(let ((x)) 1)", "a let binding is (NAME EXPR)"),
        ("(let)", "(let ...) needs 1 argument(s) at least"),
    ],
)
def test_malformed_bind_and_let_are_eval_errors(program: str, message: str) -> None:
    """A malformed ``bind`` or ``let`` fails with what its shape must be."""
    error = error_of(program)
    assert error.kind == "eval"
    assert error.message.endswith(message)
    assert error.message.startswith("line 1, column ")


def test_args_are_bound_at_the_top() -> None:
    """The task's ``args`` are variables of the program's top scope."""
    assert value_of('(concat "about " topic)', args={"topic": "cats"}) == "about cats"


# --- if, and, or, progn, quote --------------------------------------------------------


def test_if_needs_only_the_call_of_the_branch_taken() -> None:
    """The branch ``if`` does not take is never evaluated: its call never needed."""
    run = drive('(if true (summarize "yes") (summarize "no"))', [ok("Y")])
    assert run.needs == [need(1, "summarize", text="yes")]
    assert run.outcome == Done(ok("Y"))
    run = drive('(if nil (summarize "yes") (summarize "no"))', [ok("N")])
    assert run.needs == [need(1, "summarize", text="no")]


def test_if_without_else_is_nil_when_false() -> None:
    """``(if TEST THEN)`` with a false test is nil, and THEN is not evaluated."""
    assert value_of('(if false (summarize "x"))') is None


@pytest.mark.parametrize(
    ("test", "truthy"),
    [
        ("nil", False),
        ("false", False),
        ("0", False),
        ("0.0", False),
        ('""', False),
        ("()", False),
        ("'()", False),
        ("true", True),
        ("1", True),
        ('"x"', True),
        ("'a", True),
        ("'(a)", True),
        ('(json-parse "{}")', False),
        ('(json-parse "[]")', False),
        ("(pick)", True),
    ],
)
def test_what_counts_as_true(test: str, truthy: bool) -> None:
    """nil, false, 0, and empty strings, lists and objects are false; anything
    else (a COMPLETE result) true."""
    assert value_of(f'(if {test} "T" "F")', [ok("p")] if "pick" in test else []) == (
        "T" if truthy else "F"
    )


def test_and_stops_at_the_first_false_value() -> None:
    """``and`` is its first false value (later calls never needed), else its last."""
    run = drive('(and "a" nil (summarize "x"))')
    assert run == Run([], Done(None))
    run = drive('(and "a" (summarize "x"))', [ok("X")])
    assert run == Run([need(1, "summarize", text="x")], Done(ok("X")))
    assert value_of("(and)") is True


def test_or_stops_at_the_first_true_value() -> None:
    """``or`` is its first true value (later calls never needed), else its last."""
    assert drive('(or "" "b" (summarize "x"))') == Run([], Done("b"))
    run = drive('(or nil (summarize "x") (summarize "y"))', [ok("X")])
    assert run == Run([need(1, "summarize", text="x")], Done(ok("X")))
    assert value_of("(or nil false)") is False
    assert value_of("(or)") is False


def test_progn_evaluates_in_order_and_is_its_last_value() -> None:
    """``progn`` makes its calls in order and is its last form's value."""
    run = drive('(progn (summarize "1") (summarize "2"))', [ok("one"), ok("two")])
    assert run.needs == [need(1, "summarize", text="1"), need(2, "summarize", text="2")]
    assert run.outcome == Done(ok("two"))
    assert value_of("(progn)") is None


def test_quote_makes_symbols_and_lists_data() -> None:
    """Quoted symbols are `QSym`, quoted lists tuples, literals themselves."""
    assert value_of("'x") == QSym("x")
    assert value_of('\'(a "b" 1 (c nil))') == (QSym("a"), "b", 1, (QSym("c"), None))
    assert value_of("(quote ())") == ()
    assert value_of("'undefined-name") == QSym("undefined-name")


def test_quote_takes_one_argument() -> None:
    """``(quote a b)`` is an eval error."""
    assert error_of("(quote a b)").message == (
        "line 1, column 1: (quote X) takes one argument"
    )


def test_if_takes_two_or_three_arguments() -> None:
    """``(if)`` and ``(if a b c d)`` are eval errors."""
    for program in ("(if true)", "(if true 1 2 3)"):
        assert error_of(program).message.endswith("takes two or three arguments")


# --- lambda ---------------------------------------------------------------------------


def test_a_lambda_closes_over_the_scope_it_was_made_in() -> None:
    """A closure sees the variables where it was made, not where it is called."""
    program = """
        (bind make (lambda (p) (lambda (s) (concat p s))))
        (bind hi (make "hi "))
        (bind p "caller's p")
        (hi "bob")
    """
    assert value_of(program) == "hi bob"


def test_a_lambda_cannot_see_its_callers_variables() -> None:
    """Scoping is lexical: a caller's ``let`` is invisible to a lambda it calls."""
    error = error_of('(bind f (lambda () y))\n(let ((y "caller")) (f))')
    assert error.kind == "eval"
    assert error.message == "line 1, column 20: y is not bound"


def test_a_lambda_called_with_the_wrong_number_of_arguments_fails() -> None:
    """Calling a lambda with too few or too many arguments names the call."""
    error = error_of("(bind f (lambda (a b) a))\n(f 1)")
    assert error.message == "line 2, column 1: this lambda takes 2 arguments, not 1"
    assert error_of("(bind f (lambda () 1)) (f 1 2)").message.endswith("not 2")


def test_a_lambda_needs_a_parameter_list_of_names() -> None:
    """``(lambda x ...)`` and ``(lambda ("a") ...)`` are eval errors."""
    assert error_of("(lambda x 1)").message.endswith("needs a parameter list")
    assert error_of('(lambda ("a") 1)').message == (
        'line 1, column 10: a lambda\'s parameter must be a name, not "a"'
    )


def test_endless_recursion_fails_at_the_nesting_limit() -> None:
    """A lambda that calls itself forever is an eval error, not a crash."""
    error = error_of("(bind f (lambda (n) (f n)))\n(f 1)")
    assert error.kind == "eval"
    assert f"forms and lambdas nest deeper than {MAX_LEVELS}" in error.message


def _deep(depth: int) -> Any:
    """Evaluate a recursion ``n`` deep from a Python stack ``depth`` frames
    deep."""
    if depth:
        return _deep(depth - 1)
    program = "(bind f (lambda (n) (if (= n 0) 0 (+ 1 (f (- n 1))))))\n(f 108)"
    return evaluate(parse(program), templates={})


def test_a_deep_recursion_ends_the_same_however_deep_the_caller_is() -> None:
    """The nesting limit, not Python's stack, stops a deep recursion: its
    outcome is the same called from the top or from 400 frames down (a
    replay on another host), so it verifies."""
    assert _deep(0) == _deep(400)
    assert isinstance(_deep(0), Failed)


def test_a_value_that_grows_without_end_fails_the_evaluation() -> None:
    """A list doubled in a loop, text doubled, a list nested thousands deep:
    each fails at the size or depth a value may have, never holding the
    host or escaping as an exception."""
    for program in (
        "(bind l (list 1)) (loop 64 (bind l (list l l))) l",
        '(bind s "xx") (loop 40 (bind s (concat s s))) 1',
        "(bind l nil) (loop 3000 (bind l (list l))) l",
    ):
        error = error_of(program)
        assert error.kind == "eval", program
        assert "the value" in error.message, error.message


def test_numbers_and_text_past_what_the_log_stores_are_stored_as_text() -> None:
    """An integer past 64 bits and a lone surrogate in a value become what
    the log can store."""
    assert value_of("(+ 18446744073709551615 1)") == 18446744073709551616
    assert plain(18446744073709551616) == "18446744073709551616"
    assert plain("a\ud800") == "a\ufffd"


def test_lambdas_can_be_called_inline_and_passed_around() -> None:
    """A form whose head is an expression applies its value."""
    assert value_of('((lambda (a b) (concat b a)) "x" "y")') == "yx"
    program = (
        '(bind twice (lambda (f x) (f (f x)))) (twice (lambda (s) (concat s "!")) "a")'
    )
    assert value_of(program) == "a!!"


def test_a_program_nested_as_deep_as_the_reader_allows_evaluates() -> None:
    """Forms nested ``MAX_DEPTH`` deep evaluate to their value."""
    assert value_of("(progn " * MAX_DEPTH + '"deep"' + ")" * MAX_DEPTH) == "deep"
    assert value_of("(if true " * MAX_DEPTH + "1" + ")" * MAX_DEPTH) == 1


def test_json_nested_too_deeply_is_no_json_to_a_program() -> None:
    """Text whose JSON nests deeper than a value may is read as nil (no JSON
    the program can use), not a crash."""
    assert value_of('(json-parse "' + "[" * 5000 + "]" * 5000 + '")') is None
    assert value_of('(json-parse "' + "[" * 60 + "]" * 60 + '")') is not None


# --- templates: scoping, arity, unknown names -----------------------------------------


def test_a_template_call_binds_its_params_alone_from_the_callers_scope() -> None:
    """A call's args are exactly the template's params, bound positionally to
    the arguments evaluated in the caller's scope; nothing else leaks in."""
    program = """
        (bind secret "s")
        (let ((b "the caller's b") (text "the caller's text"))
          (judge "first" (concat secret "!")))
    """
    run = drive(program, [ok("J")])
    assert run.needs == [need(1, "judge", a="first", b="s!")]
    assert run.outcome == Done(ok("J"))


def test_a_result_passed_to_a_template_is_its_content() -> None:
    """A result given as an argument reaches the template as its content."""
    program = '(bind r (summarize "t")) (judge r (list r 1))'
    run = drive(program, [ok("R", why="w"), ok("J")])
    assert run.needs[1] == need(2, "judge", a="R", b=["R", 1])


def test_a_template_with_no_params_gets_no_args() -> None:
    """``(pick)`` asks for pick with empty args, whatever is bound around it."""
    run = drive('(bind x "1") (pick)', [ok("P")])
    assert run.needs == [need(1, "pick")]


def test_a_template_is_a_value_that_can_be_called_later() -> None:
    """A template's name unbound as a variable is the template, callable."""
    run = drive('(bind f summarize) (f "x")', [ok("S")])
    assert run.needs == [need(1, "summarize", text="x")]


def test_a_wrong_number_of_arguments_to_a_template_names_it() -> None:
    """Calling a template with the wrong argument count is an eval error
    naming the template, its parameters and where."""
    error = error_of('(bind x 1)\n  (judge "only one")')
    assert error.kind == "eval"
    assert error.message == (
        "line 2, column 3: template judge takes 2 arguments (a, b), not 1"
    )
    assert error_of('(pick "x")').message.endswith(
        "template pick takes 0 arguments (none), not 1"
    )
    assert error.partial == {"x": 1}


def test_an_unknown_name_is_an_eval_error_with_its_position() -> None:
    """An unknown head or an unbound variable names itself, its line and column."""
    error = error_of('(bind x "a")\n(bind y\n   (nope x))')
    assert error.kind == "eval"
    assert error.message == (
        "line 3, column 5: nope is not a template, a variable or a primitive"
    )
    assert error.partial == {"x": "a"}
    assert error_of("(concat\n  missing)").message == (
        "line 2, column 3: missing is not bound"
    )


def test_calling_a_value_that_is_no_function_fails() -> None:
    """A string or number in a call's head is an eval error."""
    assert error_of('(bind s "str")\n(s 1)').message == (
        "line 2, column 1: s is not a function"
    )
    assert error_of('("a" 1)').message == 'line 1, column 1: "a" is not a function'


def test_a_variable_hides_a_template_of_the_same_name() -> None:
    """A bound variable named like a template is the variable."""
    assert error_of('(bind pick "p") (pick)').message.endswith("pick is not a function")


@pytest.mark.parametrize(
    "program",
    [
        '(+ 1 "a")',
        "(-)",
        "(< nil 1)",
        "(first 1)",
        '(get-field "x" "k")',
        "(+ 1" + "9" * 400 + " 1.0)",
    ],
)
def test_a_primitive_given_wrong_values_is_an_eval_error(program: str) -> None:
    """A primitive's failure (including an arithmetic overflow) is an eval
    error at its form, never an exception out of `evaluate`."""
    error = error_of(program)
    assert error.kind == "eval"
    assert error.message.startswith("line 1, column 1: (")


def test_primitives_compute_what_they_say() -> None:
    """A few primitives over results, text, numbers and lists."""
    script = [ok("hello world", score=3)]
    program = """
        (bind r (pick))
        (list (content r) (status r) (get-field r 'score) (get-field r "status")
              (contains? r "world") (length "abc") (first '(1 2)) (rest '(1 2))
              (+ 1 2.5) (- 5 2) (- 3) (string=? r "hello world")
              (eq? 'a "a") (not nil) (null? '()) (json-parse "[1, 2]"))
    """
    assert value_of(program, script) == (
        "hello world",
        "COMPLETE",
        3,
        "COMPLETE",
        True,
        3,
        1,
        (2,),
        3.5,
        3,
        -3,
        True,
        True,
        True,
        True,
        [1, 2],
    )


# --- loop -----------------------------------------------------------------------------


def test_a_loop_runs_its_count_and_is_its_last_iterations_value() -> None:
    """``(loop N ...)`` makes its body's calls N times; its value is the last's."""
    run = drive('(loop 3 (summarize "x"))', [ok("1"), ok("2"), ok("3")])
    assert run.needs == [need(k, "summarize", text="x") for k in (1, 2, 3)]
    assert run.outcome == Done(ok("3"))


def test_a_loop_of_zero_iterations_is_nil() -> None:
    """``(loop 0 ...)`` evaluates nothing and is nil."""
    assert drive('(loop 0 (summarize "x"))') == Run([], Done(None))


def test_stop_ends_a_loop_early_with_its_value() -> None:
    """An iteration answering ``(stop V)`` ends the loop: V is its value."""
    program = """
        (bind out (loop 5
          (bind r (summarize "again"))
          (if (string=? r "enough") (stop (concat "got " r)) (continue r))))
        out
    """
    run = drive(program, [ok("more"), ok("enough")])
    assert len(run.needs) == 2
    assert run.outcome == Done("got enough")


def test_continue_on_the_last_iteration_fails_at_the_iterations_limit() -> None:
    """``(continue X)`` with no iteration left ends the task at its
    ``iterations`` limit with the bindings so far and the last iteration's
    output (the continue answer)."""
    program = '(bind seen "yes")\n(loop 2 (bind r (summarize "x")) (continue r))'
    run = drive(program, [ok("1"), ok("2")])
    assert len(run.needs) == 2
    assert isinstance(run.outcome, Failed)
    error = run.outcome.error
    assert (error.kind, error.limit, error.call) == ("limit", "iterations", None)
    assert error.message == "the loop reached its 2 iterations"
    result_2 = {"status": "COMPLETE", "content": "2", "notes": {}}
    assert error.last_iteration == result_2
    assert error.partial == {"seen": "yes", "r": result_2}


def test_a_bind_in_a_loop_lasts_to_the_next_iteration() -> None:
    """A ``bind`` in a loop's body binds in the loop's scope: the next
    iteration sees it, and so does what follows the loop (state carried
    from one iteration to the next, as a refinement loop needs)."""
    assert value_of('(bind n "") (loop 3 (bind n (concat n "x"))) n') == "xxx"
    assert value_of('(bind n "") (loop 3 (bind n (concat n "x")))') == "xxx"


def test_a_loop_that_never_ends_without_a_call_fails_at_the_steps_guard() -> None:
    """A loop of a billion iterations makes no call: the evaluation stops at
    its step guard (limit ``steps``) instead of holding the host."""
    run = drive("(bind n 0) (loop 1000000000 (bind n (+ n 1)))", [])
    assert isinstance(run.outcome, Failed)
    assert (run.outcome.error.kind, run.outcome.error.limit) == ("limit", "steps")
    assert run.outcome.error.partial["n"] > 1000


def test_stop_is_an_iterations_value_not_a_jump() -> None:
    """``(stop V)`` ends a loop only as the iteration's value (its last form)."""
    run = drive('(loop 2 (stop "early") (summarize "x"))', [ok("1"), ok("2")])
    assert len(run.needs) == 2
    assert run.outcome == Done(ok("2"))


@pytest.mark.parametrize("count", ["-1", '"3"', "true", "1.5", "nil"])
def test_a_loops_count_must_be_a_whole_number(count: str) -> None:
    """A negative, text, boolean, float or nil count is an eval error."""
    error = error_of(f"(loop {count} 1)")
    assert error.kind == "eval"
    assert "a loop's count must be a whole number >= 0" in error.message


def test_stop_and_continue_outside_a_loop() -> None:
    """At the top, ``(stop V)`` is V and ``(continue X)`` is X."""
    assert value_of('(stop "v")') == "v"
    assert value_of('(continue "x")') == "x"


# --- director-evaluator-loop ----------------------------------------------------------

DE_LOOP = """
(bind topic "cats")
(director-evaluator-loop
  (max-iterations {limit})
  (initial-director-input (concat "draft about " topic))
  (director (lambda (given i) (plan (concat given " #" i))))
  (executor (lambda (p i) (execute p)))
  (evaluator (lambda (r p i) (judge r p)))
  (controller
    (lambda (feedback p r i)
      (if (string=? feedback "good")
          (stop (concat "final: " r))
          (continue (concat "fix " feedback))))))
"""


def test_director_evaluator_continues_then_stops() -> None:
    """Director, executor and evaluator are called in turn; the controller's
    continue value is the next director input; its stop value the loop's."""
    script = [ok("plan1"), ok("did1"), ok("bad"), ok("plan2"), ok("did2"), ok("good")]
    run = drive(DE_LOOP.format(limit=3), script)
    assert run.needs == [
        need(1, "plan", goal="draft about cats #1"),
        need(2, "execute", plan="plan1"),
        need(3, "judge", a="did1", b="plan1"),
        need(4, "plan", goal="fix bad #2"),
        need(5, "execute", plan="plan2"),
        need(6, "judge", a="did2", b="plan2"),
    ]
    assert run.outcome == Done("final: did2")


def test_director_evaluator_at_max_iterations_gives_the_last_result() -> None:
    """Revision 1 (hoidn/llm's loop, its ADR step 7h.ii): without a stop by
    max-iterations, the loop's value is the last executor result."""
    script = [ok("plan1"), ok("did1"), ok("bad"), ok("plan2"), ok("did2"), ok("bad")]
    run = drive(DE_LOOP.format(limit=2), script, revision=1)
    assert len(run.needs) == 6
    assert run.outcome == Done(ok("did2"))


def test_director_evaluator_of_max_iterations_0_runs_nothing() -> None:
    run = drive(DE_LOOP.format(limit=0), [], revision=1)
    assert run == Run([], Done(None))


def test_before_revision_1_max_iterations_fails_with_the_last_result() -> None:
    """Without a stop by max-iterations, the task ends at its ``iterations``
    limit keeping the last executor result and the bindings so far."""
    script = [ok("plan1"), ok("did1"), ok("bad"), ok("plan2"), ok("did2"), ok("bad")]
    run = drive(DE_LOOP.format(limit=2), script)
    assert len(run.needs) == 6
    assert isinstance(run.outcome, Failed)
    error = run.outcome.error
    assert (error.kind, error.limit) == ("limit", "iterations")
    assert error.message == "the director-evaluator loop reached its 2 iterations"
    assert error.last_iteration == {
        "status": "COMPLETE",
        "content": "did2",
        "notes": {},
    }
    assert error.partial["topic"] == "cats"
    assert error.partial["i"] == 2


def test_a_controller_may_answer_a_list() -> None:
    """``(list 'stop V)`` is a stop answer as ``(stop V)`` is."""
    program = """
        (director-evaluator-loop (max-iterations 1) (initial-director-input "g")
          (director (lambda (x i) x)) (executor (lambda (p i) (execute p)))
          (evaluator (lambda (r p i) r)) (controller (lambda (f p r i) (list 'stop p))))
    """
    assert drive(program, [ok("E")]) == Run([need(1, "execute", plan="g")], Done("g"))


CLAUSES = {
    "max-iterations": "(max-iterations 2)",
    "initial-director-input": '(initial-director-input "g")',
    "director": "(director (lambda (x i) x))",
    "executor": "(executor (lambda (p i) p))",
    "evaluator": "(evaluator (lambda (r p i) r))",
    "controller": "(controller (lambda (f p r i) (stop r)))",
}


def test_director_evaluator_with_all_clauses_needs_no_template() -> None:
    """The clause table used below is complete: its loop stops at once."""
    assert value_of("(director-evaluator-loop " + " ".join(CLAUSES.values()) + ")") == (
        "g"
    )


@pytest.mark.parametrize("missing", list(CLAUSES))
def test_director_evaluator_without_a_clause_is_an_eval_error(missing: str) -> None:
    """Each clause is required; the error names the missing one."""
    given = " ".join(text for name, text in CLAUSES.items() if name != missing)
    error = error_of(f"(director-evaluator-loop {given})")
    assert error.kind == "eval"
    assert error.message == (
        f"line 1, column 1: director-evaluator-loop needs {missing}"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("(max-iterations 0)", "max-iterations must be a whole number >= 1, not 0"),
        ("(max-iterations 1) (max-iterations 2)", "max-iterations is given twice"),
        ("(budget 3)", "a director-evaluator-loop clause is (NAME EXPR)"),
        ("(director)", "a director-evaluator-loop clause is (NAME EXPR)"),
        (
            "(controller (lambda (f p r i) r))",
            "the controller must answer (continue X) or (stop V), not 'g'",
        ),
    ],
)
def test_malformed_director_evaluator_loops(change: str, message: str) -> None:
    """Bad clauses and bad controller answers are eval errors saying why."""
    name = change[1:].split()[0].rstrip(")")
    clauses = [text for n, text in CLAUSES.items() if n != name] + [change]
    error = error_of("(director-evaluator-loop " + " ".join(clauses) + ")")
    assert error.kind == "eval"
    assert message in error.message


def test_director_evaluator_phases_must_take_their_arguments() -> None:
    """A template used directly as the director gets (input, iteration): one
    with a single parameter is an arity error naming it."""
    clauses = dict(CLAUSES, director="(director plan)")
    error = error_of("(director-evaluator-loop " + " ".join(clauses.values()) + ")")
    assert error.message.endswith("template plan takes 1 arguments (goal), not 2")


# --- failed calls and limits ----------------------------------------------------------


def test_a_failed_call_fails_the_task_with_what_was_bound() -> None:
    """A FAILED result ends the task: kind ``call``, its number, the bindings
    made before it."""
    program = '(bind a (summarize "1"))\n(bind b (summarize "2"))\n(bind c (pick))'
    run = drive(program, [ok("A"), bad("boom")])
    assert isinstance(run.outcome, Failed)
    error = run.outcome.error
    assert (error.kind, error.call, error.limit) == ("call", 2, None)
    assert error.message == "call 2 failed: boom"
    assert error.partial == {"a": {"status": "COMPLETE", "content": "A", "notes": {}}}


def test_a_failed_call_needs_no_failed_limits() -> None:
    """Results without their ``failed_limits`` are failures of no limit."""
    outcome = evaluate(parse("(pick)"), templates=TEMPLATES, results=[bad("no")])
    assert isinstance(outcome, Failed)
    assert (outcome.error.kind, outcome.error.call) == ("call", 1)


@pytest.mark.parametrize("limit", ["turns", "tokens"])
def test_a_call_failed_at_its_limit_is_a_limit_failure(limit: str) -> None:
    """A call whose failure reached ``turns`` or ``tokens`` ends the task at
    that limit, with the bindings and the last iteration so far."""
    program = '(bind a (summarize "1")) (loop 3 (pick))'
    run = drive(program, [ok("A"), ok("P"), bad("out")], limits={3: limit})
    assert isinstance(run.outcome, Failed)
    error = run.outcome.error
    assert (error.kind, error.limit, error.call) == ("limit", limit, 3)
    assert error.message == "call 3 failed: out"
    assert error.partial == {"a": {"status": "COMPLETE", "content": "A", "notes": {}}}
    assert error.last_iteration == {"status": "COMPLETE", "content": "P", "notes": {}}


def test_the_calls_limit_ends_the_task_before_the_call_past_it() -> None:
    """With ``max_calls`` N the (N+1)-th call is never asked for: the task
    fails at its ``calls`` limit with its partial results."""
    program = '(bind first (pick)) (loop 5 (summarize "x"))'
    run = drive(program, [ok("P"), ok("1"), ok("2")], max_calls=3)
    assert len(run.needs) == 3
    assert isinstance(run.outcome, Failed)
    error = run.outcome.error
    assert (error.kind, error.limit, error.call) == ("limit", "calls", 4)
    assert error.message == "the program made 3 calls"
    assert error.partial == {
        "first": {"status": "COMPLETE", "content": "P", "notes": {}}
    }
    assert error.last_iteration == {"status": "COMPLETE", "content": "2", "notes": {}}


def test_a_recorded_call_that_the_program_no_longer_makes_is_an_eval_error() -> None:
    """If call k now differs from the one recorded (template, tool or args),
    the evaluation fails naming the call and both versions."""
    forms = parse('(bind a (pick))\n(summarize "now")')
    started = [("pick", None, {}), ("summarize", None, {"text": "then"})]
    for results in ([ok("P")], [ok("P"), ok("S")]):
        outcome = evaluate(forms, templates=TEMPLATES, results=results, started=started)
        assert isinstance(outcome, Failed)
        assert outcome.error.kind == "eval"
        assert outcome.error.message == (
            'line 2, column 1: call 2 is now summarize {"text": "now"}, but the task '
            'recorded summarize {"text": "then"}: the program evaluates differently '
            "from when it ran"
        )
    other = [("pick", None, {}), ("", "script.run", {"text": "now"})]
    outcome = evaluate(forms, templates=TEMPLATES, results=[ok("P")], started=other)
    assert isinstance(outcome, Failed)
    assert "but the task recorded script.run" in outcome.error.message


def test_recorded_calls_that_match_are_replayed_without_error() -> None:
    """The same program over its own record evaluates to the same end."""
    forms = parse("(bind a (pick)) (summarize a)")
    started = [("pick", None, {}), ("summarize", None, {"text": "P"})]
    outcome = evaluate(
        forms, templates=TEMPLATES, results=[ok("P"), ok("S")], started=started
    )
    assert outcome == Done(ok("S"))


# --- tools ----------------------------------------------------------------------------


def test_run_script_asks_for_the_script_tool() -> None:
    """``system:run_script`` is a call of the ``script.run`` tool with its
    command as text; its result is the value."""
    run = drive(
        '(bind out (system:run_script (concat "ls " "-l"))) (content out)',
        [ok("a.txt")],
    )
    assert run.needs == [
        Need(call=1, template="", args={"command": "ls -l"}, tool="script.run")
    ]
    assert run.outcome == Done("a.txt")


def test_call_tool_asks_for_any_tool_with_its_pairs() -> None:
    """``(call-tool NAME KEY VALUE ...)`` asks for tool NAME with those args,
    numbered among the template calls."""
    program = '(pick) (call-tool "files.read" "path" "a.txt" \'mode 3)'
    run = drive(program, [ok("P"), ok("text")])
    assert run.needs[1] == Need(
        call=2, template="", args={"path": "a.txt", "mode": 3}, tool="files.read"
    )
    assert run.outcome == Done(ok("text"))


@pytest.mark.parametrize(
    "program",
    ['(call-tool "x" "k")', "(call-tool 'x)", "(call-tool)", "(system:run_script)"],
)
def test_malformed_tool_calls_are_eval_errors(program: str) -> None:
    """A tool call without a name, with an odd pair or no command fails."""
    assert error_of(program).kind == "eval"


def test_a_failed_tool_call_fails_the_task() -> None:
    """A tool's FAILED result is a failed call like a template's."""
    error = error_of('(system:run_script "false")', [bad("exit 1")])
    assert (error.kind, error.call, error.message) == (
        "call",
        1,
        "call 1 failed: exit 1",
    )


# --- trace ----------------------------------------------------------------------------


def test_the_trace_lists_forms_calls_and_iterations_with_their_depth() -> None:
    """A trace is the evaluation's tree: each call with its number, each
    iteration, each form, indented by depth."""
    trace: list[TraceLine] = []
    forms = parse('(bind a (summarize "x")) (loop 2 (if a (summarize a) nil))')
    results = [ok("r1"), ok("r2"), ok("r3")]
    outcome = evaluate(forms, templates=TEMPLATES, results=results, trace=trace)
    assert outcome == Done(ok("r3"))
    assert trace == [
        TraceLine(0, "form", "bind a"),
        TraceLine(1, "call", 'summarize {"text": "x"}', 1),
        TraceLine(0, "iteration", "loop iteration 1 of 2"),
        TraceLine(1, "form", "if a -> then"),
        TraceLine(2, "call", 'summarize {"text": "r1"}', 2),
        TraceLine(0, "iteration", "loop iteration 2 of 2"),
        TraceLine(1, "form", "if a -> then"),
        TraceLine(2, "call", 'summarize {"text": "r1"}', 3),
    ]


def test_the_trace_of_a_director_evaluator_loop_shows_each_decision() -> None:
    """Each director-evaluator iteration and its controller's answer are traced."""
    trace: list[TraceLine] = []
    results = [ok("p"), ok("d"), ok("good")]
    outcome = evaluate(
        parse(DE_LOOP.format(limit=2)),
        templates=TEMPLATES,
        results=results,
        trace=trace,
    )
    assert outcome == Done("final: d")
    assert [(t.depth, t.what, t.call) for t in trace] == [
        (0, "form", None),
        (0, "iteration", None),
        (1, "call", 1),
        (1, "call", 2),
        (1, "call", 3),
        (1, "form", None),
        (0, "value", None),
    ]
    assert trace[5].text == 'if (string=? feedback "good") -> then'
    assert trace[-1].text == "controller: stop"


# --- defatom --------------------------------------------------------------------------


def test_defined_atoms_reads_params_instructions_and_fields() -> None:
    """``defatom`` declares a template, read without evaluating the program."""
    program = parse(
        """
        (defatom critique (params draft style)
          (instructions "Critique {{draft}} in {{style}}")
          (max-turns 3) (output_format "json") (tools "files.read" "files.list"))
        (progn (defatom shout (instructions "SHOUT")))
        '(defatom quoted (instructions "not a template"))
        """
    )
    critique, shout = defined_atoms(program, source="p.task")
    assert critique == Template(
        name="critique",
        params=("draft", "style"),
        instructions="Critique {{draft}} in {{style}}",
        max_turns=3,
        output_format="json",
        tools=("files.read", "files.list"),
        source="p.task",
    )
    assert shout == Template(name="shout", instructions="SHOUT", source="p.task")


def test_a_defatom_is_callable_once_its_template_is_given() -> None:
    """A defatom's value is its name; its template is called like any other."""
    program = '(defatom echo (params x) (instructions "{{x}}")) (echo "hi")'
    atoms = {t.name: t for t in defined_atoms(parse(program))}
    run = drive(program, [ok("hi!")], templates=atoms)
    assert run.needs == [need(1, "echo", x="hi")]
    assert value_of('(defatom echo (instructions "e"))', templates=atoms) == QSym(
        "echo"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(defatom)", "line 1, column 1: defatom needs a name"),
        ('(defatom "n" (instructions "i"))', "line 1, column 1: defatom needs a name"),
        ("(defatom n\n  params)", "line 2, column 3: a defatom clause is (FIELD VALUE"),
        ("(defatom n ())", "line 1, column 12: a defatom clause is (FIELD VALUE"),
        (
            '(defatom n (instructions "i")\n (colour "red"))',
            "line 2, column 2: defatom has no field colour",
        ),
        ('(defatom n (name "x") (instructions "i"))', "defatom has no field name"),
        ('(defatom n (instructions "a" "b"))', "(instructions ...) takes one value"),
        ("(defatom n (params a))", "line 1, column 1: defatom n:"),
        ('(defatom n (instructions "i") (max-turns "x"))', "line 1, column 1: defatom"),
    ],
)
def test_a_malformed_defatom_is_a_value_error_naming_where(
    text: str, message: str
) -> None:
    """Every malformed defatom names its line and column and what is wrong."""
    with pytest.raises(ValueError) as caught:
        defined_atoms(parse(text))
    assert message in str(caught.value)
    assert str(caught.value).startswith("line ")


# --- properties -----------------------------------------------------------------------

PROPERTY_TEMPLATES: Mapping[str, Template] = {
    t.name: t for t in (template("t0"), template("t1", "x"), template("t2", "x", "y"))
}


@st.composite
def expressions(draw: st.DrawFn, scope: tuple[str, ...], depth: int) -> str:
    """An expression over the property templates, using bound names only."""
    leaves = ["string"] + (["var"] * 2 if scope else [])
    forms = ["if", "and", "or", "progn", "let", "loop", "loop"]
    kinds = leaves + (["call"] * 6 + forms if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    sub = expressions(scope, depth - 1)
    match kind:
        case "string":
            return '"' + draw(st.sampled_from(["", "a", "b", "ok"])) + '"'
        case "var":
            return draw(st.sampled_from(scope))
        case "call":
            name = draw(st.sampled_from(sorted(PROPERTY_TEMPLATES)))
            params = PROPERTY_TEMPLATES[name].params
            return f"({name}" + "".join(" " + draw(sub) for _ in params) + ")"
        case "if":
            parts = draw(st.lists(sub, min_size=2, max_size=3))
            return "(if " + " ".join(parts) + ")"
        case "and" | "or" | "progn":
            return (
                f"({kind} "
                + " ".join(draw(st.lists(sub, min_size=1, max_size=3)))
                + ")"
            )
        case "let":
            name = f"l{depth}"
            value = draw(sub)
            body = draw(expressions((*scope, name), depth - 1))
            return f"(let (({name} {value})) {body})"
        case _:
            count = draw(st.integers(0, 2))
            body = draw(sub)
            ending = draw(st.sampled_from(["", "stop", "continue", "choice"]))
            match ending:
                case "stop" | "continue":
                    body = f"{body} ({ending} {draw(sub)})"
                case "choice":
                    test, stop, more = draw(sub), draw(sub), draw(sub)
                    body = f"{body} (if {test} (stop {stop}) (continue {more}))"
            return f"(loop {count} {body})"


@st.composite
def programs(draw: st.DrawFn) -> str:
    """A sequence of top-level binds and expressions."""
    scope: tuple[str, ...] = ()
    forms: list[str] = []
    for i in range(draw(st.integers(2, 5))):
        expression = draw(expressions(scope, draw(st.integers(2, 3))))
        if draw(st.booleans()):
            forms.append(f"(bind v{i} {expression})")
            scope = (*scope, f"v{i}")
        else:
            forms.append(expression)
    return "\n".join(forms)


_results = st.builds(
    Result,
    st.sampled_from(["COMPLETE"] * 9 + ["FAILED"]),
    st.sampled_from(["", "a", "ok", "long content"]),
    st.just({}),
)


def _run_property(
    forms: tuple[Any, ...],
    script: list[Result],
    limits: list[str | None],
    max_calls: int,
) -> tuple[list[Need], list[Result], Done | Failed]:
    results: list[Result] = []
    needs: list[Need] = []
    for _ in range(500):
        outcome = evaluate(
            forms,
            templates=PROPERTY_TEMPLATES,
            results=results,
            started=[(n.template, n.tool, n.args) for n in needs],
            failed_limits=limits[: len(results)],
            max_calls=max_calls,
        )
        if not isinstance(outcome, Need):
            return needs, results, outcome
        k = len(results)
        needs.append(outcome)
        results.append(script[k] if k < len(script) else ok(f"r{k}"))
    raise AssertionError("the evaluation did not end in 500 steps")


@settings(max_examples=100, deadline=None)
@given(
    programs(),
    st.lists(_results, max_size=20),
    st.lists(st.sampled_from([None, "turns"]), min_size=40, max_size=40),
    st.sampled_from([1_000, 1_000, 1_000, 2, 4]),
)
def test_random_programs_evaluate_deterministically_to_an_end(
    program: str, script: list[Result], limits: list[str | None], max_calls: int
) -> None:
    """Any well-formed program over any results ends (done, or failed at a
    call or a limit, never an eval error), the same way each time; each need
    asks for a known template with exactly its params; evaluating over a
    prefix of the results, with every call recorded, asks for the same next
    call; every failure keeps its partial results."""
    forms = parse(program)
    limits = limits + [None] * 500  # calls past those drawn fail at no limit
    needs, results, outcome = _run_property(forms, script, limits, max_calls)
    event(f"calls: {min(len(needs), 10)}{'+' if len(needs) >= 10 else ''}")
    assert _run_property(forms, script, limits, max_calls) == (needs, results, outcome)

    for k, n in enumerate(needs, start=1):
        assert n.call == k
        assert n.tool is None
        assert set(n.args) == set(PROPERTY_TEMPLATES[n.template].params)
        assert all(isinstance(v, str | None) for v in n.args.values()), n.args

    started = [(n.template, n.tool, n.args) for n in needs]
    for k in range(len(needs)):
        again = evaluate(
            forms,
            templates=PROPERTY_TEMPLATES,
            results=results[:k],
            started=started,
            failed_limits=limits[:k],
            max_calls=max_calls,
        )
        assert again == needs[k]

    trace: list[TraceLine] = []
    final = evaluate(
        forms,
        templates=PROPERTY_TEMPLATES,
        results=results,
        started=started,
        failed_limits=limits[: len(results)],
        max_calls=max_calls,
        trace=trace,
    )
    assert final == outcome
    assert [t.call for t in trace if t.what == "call"] == list(
        range(1, len(results) + 1)
    )

    match outcome:
        case Done(value=value):
            event("done")
            assert not isinstance(value, Decision)
            assert len(needs) <= max_calls
            assert all(r.status == "COMPLETE" for r in results)
        case Failed(error=error):
            event(f"failed: {error.kind} {error.limit}")
            assert error.kind in ("limit", "call"), error.message
            assert isinstance(error.partial, dict)
            if error.kind == "call" or error.limit == "turns":
                assert error.call == len(results)
                assert results[-1].status == "FAILED"
                assert limits[len(results) - 1] == error.limit
            elif error.limit == "calls":
                assert len(needs) == max_calls
                assert error.call == max_calls + 1
            else:
                assert error.limit == "iterations"


# --- checkpoints ----------------------------------------------------------------------


class _Names:
    """Fresh names for a drawn program."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


@st.composite
def _body(
    draw: st.DrawFn,
    names: _Names,
    scope: tuple[str, ...],
    fns: tuple[str, ...],
    depth: int,
) -> str:
    """Forms in turn, each seeing what the ones before it bound: values,
    and lambdas (of one parameter) that later forms call."""
    forms = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["expr", "expr", "bind", "lambda"]))
        if kind == "bind":
            name = names("b")
            forms.append(f"(bind {name} {draw(_expr(names, scope, fns, depth))})")
            scope = (*scope, name)
        elif kind == "lambda" and depth > 0:
            name, param = names("f"), names("p")
            body = draw(_body(names, (*scope, param), fns, depth - 1))
            forms.append(f"(bind {name} (lambda ({param}) {body}))")
            fns = (*fns, name)
        else:
            forms.append(draw(_expr(names, scope, fns, depth)))
    return " ".join(forms)


@st.composite
def _expr(
    draw: st.DrawFn,
    names: _Names,
    scope: tuple[str, ...],
    fns: tuple[str, ...],
    depth: int,
) -> str:
    """An expression of any form, calls of templates and of lambdas among
    them, with lambdas that escape their ``let`` and lambdas in lists."""
    kinds = ["string"] + (["var"] * 2 if scope else [])
    if depth > 0:
        kinds += ["call"] * 4 + ["if", "and", "progn", "let", "let"] + ["loop"] * 4
        kinds += ["de", "escape"] + (["apply", "apply", "listed"] if fns else [])
    kind = draw(st.sampled_from(kinds))
    sub = _expr(names, scope, fns, depth - 1)
    body = _body(names, scope, fns, depth - 1)
    match kind:
        case "string":
            return '"' + draw(st.sampled_from(["", "a", "ok"])) + '"'
        case "var":
            return draw(st.sampled_from(scope))
        case "call":
            name = draw(st.sampled_from(sorted(PROPERTY_TEMPLATES)))
            params = PROPERTY_TEMPLATES[name].params
            return f"({name}" + "".join(" " + draw(sub) for _ in params) + ")"
        case "if":
            parts = [draw(sub), f"(progn {draw(body)})", f"(progn {draw(body)})"]
            return "(if " + " ".join(parts[: draw(st.integers(2, 3))]) + ")"
        case "and":
            return f"(and {draw(sub)} {draw(sub)})"
        case "progn":
            return f"(progn {draw(body)})"
        case "let":
            name = names("l")
            inner = draw(_body(names, (*scope, name), fns, depth - 1))
            return f"(let (({name} {draw(sub)})) {inner})"
        case "loop":
            ending = draw(st.sampled_from(["", "(stop {})", "(continue {})"]))
            test = draw(sub)
            choice = f"(if {test} (stop {draw(sub)}) (continue {draw(sub)}))"
            end = draw(st.sampled_from([ending.format(draw(sub)), choice]))
            return f"(loop {draw(st.integers(0, 3))} {draw(body)} {end})"
        case "de":
            phases = [
                ("director", "(i n)", "(t1 i)"),
                ("executor", "(p n)", "(t2 p n)"),
                ("evaluator", "(r p n)", "(t1 r)"),
            ]
            return (
                f"(director-evaluator-loop (max-iterations {draw(st.integers(1, 3))})"
                f" (initial-director-input {draw(sub)})"
                + "".join(f" ({n} (lambda {ps} {c}))" for n, ps, c in phases)
                + " (controller (lambda (f p r n) (if (t1 f) (stop r) (continue f)))))"
            )
        case "escape":  # a lambda that outlives its let, called later
            a = names("a")
            return f"(let (({a} {draw(sub)})) (lambda (q) (t2 {a} q)))"
        case "apply":
            return f"({draw(st.sampled_from(fns))} {draw(sub)})"
        case _:  # a lambda kept in a list, taken out and called
            return (
                f"((first (list {draw(st.sampled_from(fns))} {draw(sub)})) {draw(sub)})"
            )


@st.composite
def rich_programs(draw: st.DrawFn) -> str:
    """A program of binds, lambdas and every form (`_body`)."""
    return draw(_body(_Names(), (), (), draw(st.integers(2, 4))))


def _evaluations(
    forms: tuple[Any, ...],
    script: list[Result],
    limits: list[str | None],
    checkpoint: Checkpoint | None,
    k: int,
) -> Evaluated:
    """The evaluation over the first ``k`` results, from ``checkpoint``."""
    return resume(
        forms,
        checkpoint,
        templates=PROPERTY_TEMPLATES,
        args={"arg": "given"},
        results=script[:k],
        started=[],  # what resuming reads of it is checked below
        failed_limits=limits[:k],
        max_calls=40,
    )


class _After(Sequence[Any]):
    """``items``, of which reading one before index ``start`` is an error."""

    def __init__(self, items: Sequence[Any], start: int) -> None:
        self.items, self.start = items, start

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        assert isinstance(i, int) and i >= self.start, f"read {i}"
        return self.items[i]


def test_a_step_resumed_from_its_checkpoint_reads_only_the_calls_after_it() -> None:
    """In a loop of calls, each step resumes at the start of the iteration
    of its last call, whatever came before: it reads no earlier result, and
    its checkpoint holds the loop's iteration and the variables bound."""
    forms = parse('(bind x "start") (loop 50 (bind x (summarize x))) x')
    checkpoint: Checkpoint | None = None
    results: list[Result] = []
    started: list[tuple[str, str | None, dict[str, Any]]] = []
    for k in range(1, 51):
        skipped = checkpoint.calls if checkpoint else 0
        step = resume(
            forms,
            checkpoint,
            templates=TEMPLATES,
            results=_After(results, skipped),
            started=_After(started, skipped),
        )
        text = f"r{k - 1}" if k > 1 else "start"
        assert step.outcome == need(k, "summarize", text=text)
        if k > 1:
            x = ok(f"r{k - 1}")
            assert step.checkpoint is not None
            assert step.checkpoint == Checkpoint(
                calls=k - 1,
                steps=step.checkpoint.steps,
                frames=(Body(1), Iteration(50, k), Body(0)),
                scopes=(Scope({"x": x}),),
                bound={"x": x},
                last_iteration=x,
            )
        checkpoint = step.checkpoint
        started.append(("summarize", None, {"text": text}))
        results.append(ok(f"r{k}"))
    last = resume(forms, checkpoint, templates=TEMPLATES, results=results)
    assert last.outcome == Done(ok("r50"))


def test_a_call_failing_after_a_checkpoint_keeps_what_was_bound_before_it() -> None:
    """A failure in a step resumed at a loop's second iteration has the
    partial results and the first iteration's output, as from the top."""
    forms = parse('(bind n "0") (loop 3 (bind n (concat n "1")) (bind x (pick)))')
    first = resume(forms, None, templates=TEMPLATES, results=[ok("a")])
    assert first.checkpoint is not None
    assert first.checkpoint.frames == (Body(1), Iteration(3, 2), Body(0))
    results = [ok("a"), bad("no")]
    failed = resume(forms, first.checkpoint, templates=TEMPLATES, results=results)
    assert failed.outcome == evaluate(forms, templates=TEMPLATES, results=results)
    assert failed.outcome == Failed(
        TaskError(
            kind="call",
            message="call 2 failed: no",
            call=2,
            partial={"n": "011", "x": plain(ok("a"))},
            last_iteration=plain(ok("a")),
        )
    )


def _seen(outcome: Any) -> Any:
    """An outcome to compare: a lambda in a value as its parameters and body
    (two evaluations make two lambdas of each)."""

    def seen(value: Any) -> Any:
        match value:
            case Closure():
                return ("lambda", value.params, value.body)
            case tuple():
                return tuple(seen(v) for v in value)
            case Decision():
                return Decision(value.action, seen(value.value))
        return value

    return Done(seen(outcome.value)) if isinstance(outcome, Done) else outcome


@settings(max_examples=150, deadline=None)
@given(
    rich_programs(),
    st.lists(_results, min_size=40, max_size=40),
    st.lists(st.sampled_from([None, "turns"]), min_size=40, max_size=40),
)
def test_resuming_from_a_checkpoint_gives_what_evaluating_from_the_top_gives(
    program: str, script: list[Result], limits: list[str | None]
) -> None:
    """Over any program (binds in bodies, lambdas that escape their scope or
    sit in lists, nested loops, director-evaluator loops) and any results,
    each step resumed from the last step's checkpoint has exactly the
    outcome evaluating from the top has (a need, the value, or the error
    with its partial results), and leaves the checkpoint it leaves."""
    forms = parse(program)
    checkpoint: Checkpoint | None = None
    resumed_at = []
    for k in range(len(script) + 1):
        step = _evaluations(forms, script, limits, checkpoint, k)
        from_top = _evaluations(forms, script, limits, None, k)
        assert step.checkpoint == from_top.checkpoint, f"step {k}"
        assert _seen(step.outcome) == _seen(from_top.outcome), f"step {k}"
        top = evaluate(
            forms,
            templates=PROPERTY_TEMPLATES,
            args={"arg": "given"},
            results=script[:k],
            failed_limits=limits[:k],
            max_calls=40,
        )
        assert _seen(step.outcome) == _seen(top), f"step {k}"
        resumed_at.append(checkpoint.calls if checkpoint else 0)
        if not isinstance(step.outcome, Need):
            break
        assert step.outcome.call == k + 1
        checkpoint = step.checkpoint
    event(f"resumed after a call: {any(resumed_at)}")
    event(f"outcome: {type(step.outcome).__name__}")
