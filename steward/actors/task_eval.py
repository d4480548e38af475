"""The evaluator of task programs (pure): a step of evaluation is a function
of the program and the results of its calls so far.

`evaluate` runs a program from its start. Each call it makes (an atomic
template, or a tool through ``system:run_script`` and ``call-tool``) is
numbered in evaluation order; the k-th call takes the k-th recorded result.
The first call with no result yet stops the evaluation: it is what the task
asks for next (`Need`). Evaluating again from the start, with one result
more, reaches the next call, and so on until the program has its value
(`Done`) or fails (`Failed`, with the variables bound so far and the last
loop iteration's output). Nothing is kept between evaluations, so a task
resumed on another host, replayed or forked evaluates exactly as it did.
Calls already recorded are checked: a program that now calls another
template, or the same with other arguments, fails naming the call.

The forms: ``bind``, ``let``, ``if``, ``progn``, ``quote``, ``and``,
``or``, ``defatom``, ``lambda``, ``loop``, ``director-evaluator-loop``,
``continue`` / ``stop`` (a loop's controller's answer), ``system:run_script``
and ``call-tool``; a call of a template is ``(name arg ...)``, its
arguments evaluated in the caller's scope and bound to the template's
parameters alone. The primitives are in ``PRIMITIVES``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import msgspec

from steward.actors.task_lang import Form, Lit, Node, Sym, shown
from steward.actors.task_values import (
    PRIMITIVES,
    Closure,
    Decision,
    QSym,
    Result,
    bounded,
    plain,
    text_of,
    truthy,
)
from steward.events.task import TaskError, Template

__all__ = [
    "Done",
    "Failed",
    "MAX_LEVELS",
    "MAX_STEPS",
    "Need",
    "Outcome",
    "RESERVED",
    "TraceLine",
    "defined_atoms",
    "evaluate",
    "reserved_problems",
]

MAX_LEVELS = 100
"""Forms evaluated inside each other, at most (a program nested deep, or a
lambda that recurses deep, fails here): low enough that Python's own stack
limit is never what stops an evaluation, wherever it is called from, so the
outcome is the same on every host and in every replay."""

MAX_STEPS = 1_000_000
"""Forms one evaluation may evaluate, at most: a guard, not a limit a
program is meant to reach (its loops' own counts are), so that a loop of a
billion iterations or a recursion that branches fails the task (limit
``steps``) instead of holding the host."""


class Need(msgspec.Struct, frozen=True, gc=False):
    """The next call the program makes, which has no result yet."""

    call: int
    template: str = ""
    args: dict[str, Any] = {}
    tool: str | None = None


class Done(msgspec.Struct, frozen=True, gc=False):
    """The program's value."""

    value: Any


class Failed(msgspec.Struct, frozen=True, gc=False):
    error: TaskError


Outcome = Need | Done | Failed


class TraceLine(msgspec.Struct, frozen=True, gc=False):
    """One line of an evaluation's tree (`evaluate` with ``trace``): how deep
    it is, what it is (``form``, ``call``, ``iteration``, ``value``) and its
    text; ``call`` is the call's number for a call."""

    depth: int
    what: str
    text: str
    call: int | None = None


class _Env:
    __slots__ = ("parent", "vars")

    def __init__(self, parent: _Env | None = None) -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent

    def find(self, name: str) -> tuple[bool, Any]:
        env: _Env | None = self
        while env is not None:
            if name in env.vars:
                return True, env.vars[name]
            env = env.parent
        return False, None


class _Stop(Exception):
    """Ends an evaluation early: the next call, or a failure."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


class _Error(Exception):
    """The program went wrong at a node."""

    def __init__(self, message: str, node: Node | None = None) -> None:
        where = f"line {node.line}, column {node.column}: " if node else ""
        super().__init__(where + message)


class _Limit(Exception):
    def __init__(self, limit: str, message: str, call: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.call = call


class _CallFailed(Exception):
    def __init__(self, call: int, result: Result, limit: str | None) -> None:
        super().__init__(result.content)
        self.call = call
        self.result = result
        self.limit = limit


def defined_atoms(program: Sequence[Node], source: str = "") -> tuple[Template, ...]:
    """The templates a program defines with ``defatom`` (wherever it does),
    read without evaluating it: ``(defatom NAME (params P ...) (instructions
    "...") (FIELD VALUE) ...)``, a field being any of `Template`'s
    (``max_turns``, ``model``, ``output_format``, ``subtasks``...), and
    ``(context_management (inherit_context "none") ...)``.

    Raises:
        ValueError: a ``defatom`` is malformed, naming where.
    """
    found: list[Template] = []

    def walk(node: Node) -> None:
        if not isinstance(node, Form):
            return
        head = node.items[0] if node.items else None
        if isinstance(head, Sym) and head.name == "defatom":
            found.append(_atom_of(node, source))
            return
        if isinstance(head, Sym) and head.name == "quote":
            return
        for item in node.items:
            walk(item)

    for form in program:
        walk(form)
    return tuple(found)


_ATOM_FIELDS = tuple(f.name for f in msgspec.structs.fields(Template))
"""The fields a ``defatom`` clause may set (``max-turns`` or ``max_turns``)."""
_NOT_IN_DEFATOM = ("name", "source", "context")


def _atom_of(node: Form, source: str) -> Template:
    where = f"line {node.line}, column {node.column}"
    if len(node.items) < 2 or not isinstance(node.items[1], Sym):
        raise ValueError(f"{where}: defatom needs a name: (defatom NAME ...)")
    fields: dict[str, Any] = {"name": node.items[1].name, "source": source}
    for clause in node.items[2:]:
        if (
            not isinstance(clause, Form)
            or not clause.items
            or not isinstance(clause.items[0], Sym)
        ):
            raise ValueError(
                f"line {clause.line}, column {clause.column}: a defatom clause "
                "is (FIELD VALUE ...)"
            )
        key = clause.items[0].name
        field = key.replace("-", "_")
        if field == "context_management":
            # (context_management (inherit_context "none") (fresh_context ...))
            pairs = [_datum(v) for v in clause.items[1:]]
            if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise ValueError(
                    f"line {clause.line}, column {clause.column}: "
                    "(context_management (SETTING VALUE) ...)"
                )
            fields["context"] = {str(k).replace("-", "_"): v for k, v in pairs}
            continue
        if field not in _ATOM_FIELDS or field in _NOT_IN_DEFATOM:
            known = ", ".join(f for f in _ATOM_FIELDS if f not in _NOT_IN_DEFATOM)
            raise ValueError(
                f"line {clause.line}, column {clause.column}: defatom has no "
                f"field {key} (known: {known})"
            )
        values = [_datum(v) for v in clause.items[1:]]
        if field in ("params", "matches", "tools"):
            fields[field] = [v[0] if isinstance(v, list) and v else v for v in values]
        elif len(values) != 1:
            raise ValueError(
                f"line {clause.line}, column {clause.column}: ({key} ...) takes "
                "one value"
            )
        else:
            fields[field] = values[0]
    try:
        return msgspec.convert(fields, Template)
    except msgspec.ValidationError as e:
        raise ValueError(f"{where}: defatom {fields['name']}: {e}") from None


def _datum(node: Node) -> Any:
    """A node read as plain data (symbols as their names)."""
    match node:
        case Sym(name=name):
            return name
        case Lit(value=value):
            return value
        case Form(items=items):
            return [_datum(i) for i in items]


class _Evaluation:
    def __init__(
        self,
        templates: Mapping[str, Template],
        results: Sequence[Result],
        started: Sequence[tuple[str, str | None, dict[str, Any]]],
        failed_limits: Sequence[str | None],
        max_calls: int,
        trace: list[TraceLine] | None,
    ) -> None:
        self.templates = templates
        self.results = results
        self.started = started
        self.failed_limits = failed_limits
        self.max_calls = max_calls
        self.calls = 0
        self.steps = 0
        self.levels = 0
        self.depth = 0
        self.bound: dict[str, Any] = {}
        self.last_iteration: Any = None
        self.trace = trace

    # -- the trace ----------------------------------------------------------------

    def note(self, what: str, text: str, call: int | None = None) -> None:
        if self.trace is not None:
            self.trace.append(TraceLine(self.depth, what, text, call))

    # -- evaluation ---------------------------------------------------------------

    def eval(self, node: Node, env: _Env) -> Any:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _Limit(
                "steps",
                f"the program took more than {MAX_STEPS:,} evaluation steps "
                "without a call (a loop or a recursion that does not end)",
            )
        kind = type(node)
        if kind is Lit:
            return node.value  # type: ignore[union-attr]
        if kind is Sym:
            name = node.name  # type: ignore[union-attr]
            found, value = env.find(name)
            if found:
                return value
            if name in self.templates:
                return QSym(name)
            raise _Error(f"{name} is not bound", node)
        assert type(node) is Form
        if not node.items:
            return ()
        # only a form evaluates others: the nesting is counted here
        if self.levels >= MAX_LEVELS:
            raise _Error(f"forms and lambdas nest deeper than {MAX_LEVELS}", node)
        self.levels += 1
        try:
            head = node.items[0]
            if type(head) is Sym:
                special = _SPECIAL.get(head.name)
                if special is not None:
                    return special(self, node, env)
                return self.apply_named(head, node, env)
            fn = self.eval(head, env)
            args = [self.eval(a, env) for a in node.items[1:]]
            return self.apply(fn, args, node)
        finally:
            self.levels -= 1

    def body(self, nodes: Sequence[Node], env: _Env) -> Any:
        value: Any = None
        for n in nodes:
            value = self.eval(n, env)
        return value

    def apply_named(self, head: Sym, node: Form, env: _Env) -> Any:
        found, fn = env.find(head.name)
        if found:
            args = [self.eval(a, env) for a in node.items[1:]]
            return self.apply(fn, args, node)
        template = self.templates.get(head.name)
        if template is not None:
            args = [self.eval(a, env) for a in node.items[1:]]
            return self.call_template(template, args, node)
        primitive = PRIMITIVES.get(head.name)
        if primitive is not None:
            args = [self.eval(a, env) for a in node.items[1:]]
            try:
                return bounded(primitive(*args))
            except (TypeError, ValueError, KeyError, IndexError, ArithmeticError) as e:
                raise _Error(f"({head.name} ...): {e}", node) from None
        raise _Error(f"{head.name} is not a template, a variable or a primitive", head)

    def apply(self, fn: Any, args: list[Any], node: Form) -> Any:
        if isinstance(fn, Closure):
            if len(args) != len(fn.params):
                raise _Error(
                    f"this lambda takes {len(fn.params)} arguments, not {len(args)}",
                    node,
                )
            scope = _Env(fn.env)
            for name, value in zip(fn.params, args, strict=True):
                self.bind(scope, name, value)
            return self.body(fn.body, scope)
        if isinstance(fn, QSym) and fn.name in self.templates:
            return self.call_template(self.templates[fn.name], args, node)
        raise _Error(f"{shown(node.items[0])} is not a function", node)

    def bind(self, env: _Env, name: str, value: Any) -> None:
        env.vars[name] = value
        self.bound.pop(name, None)  # the newest binding last
        self.bound[name] = value

    # -- calls ----------------------------------------------------------------------

    def call_template(self, template: Template, args: list[Any], node: Form) -> Any:
        if len(args) != len(template.params):
            raise _Error(
                f"template {template.name} takes {len(template.params)} arguments "
                f"({', '.join(template.params) or 'none'}), not {len(args)}",
                node,
            )
        bound = {
            p: a if type(a) is str and a.isascii() else plain(a, text=True)
            for p, a in zip(template.params, args, strict=True)
        }
        return self.call(node, template=template.name, args=bound)

    def call(
        self,
        node: Form,
        *,
        template: str = "",
        args: dict[str, Any],
        tool: str | None = None,
    ) -> Result:
        self.calls += 1
        n = self.calls
        if n <= len(self.started):
            was = self.started[n - 1]
            if was != (template, tool, args):
                label = f"tool {tool}" if tool else template
                raise _Error(
                    f"call {n} is now {label} {_args(args)}, but the task "
                    f"recorded {was[1] or was[0]} {_args(was[2])}: the program "
                    "evaluates differently from when it ran",
                    node,
                )
        if n > len(self.results):
            if n > self.max_calls:
                raise _Limit("calls", f"the program made {self.max_calls} calls", n)
            raise _Stop(Need(call=n, template=template, args=args, tool=tool))
        result = self.results[n - 1]
        if self.trace is not None:
            label = f"tool {tool}" if tool else template
            self.note("call", f"{label} {_args(args)}", n)
        if result.status != "COMPLETE":
            limits = self.failed_limits
            raise _CallFailed(n, result, limits[n - 1] if n <= len(limits) else None)
        return result


def _args(args: Mapping[str, Any]) -> str:
    text = json.dumps(plain(dict(args)), ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:79] + "…"


# -- special forms ----------------------------------------------------------------


def _need(node: Form, count: int, form: str) -> None:
    if len(node.items) - 1 < count:
        raise _Error(f"({form} ...) needs {count} argument(s) at least", node)


def _sym(node: Node, what: str) -> str:
    if not isinstance(node, Sym):
        raise _Error(f"{what} must be a name, not {shown(node)}", node)
    return node.name


def _bind(ev: _Evaluation, node: Form, env: _Env) -> Any:
    if len(node.items) != 3:
        raise _Error("(bind NAME EXPR) takes a name and an expression", node)
    name = _sym(node.items[1], "bind's first argument")
    if ev.trace is not None:
        ev.note("form", f"bind {name}")
    ev.depth += 1
    value = ev.eval(node.items[2], env)
    ev.depth -= 1
    ev.bind(env, name, value)
    return value


def _let(ev: _Evaluation, node: Form, env: _Env) -> Any:
    _need(node, 1, "let")
    pairs = node.items[1]
    if not isinstance(pairs, Form):
        raise _Error("(let ((NAME EXPR) ...) BODY ...) needs a list of bindings", node)
    scope = _Env(env)
    if ev.trace is not None:
        ev.note("form", "let " + " ".join(shown(p, 20) for p in pairs.items))
    ev.depth += 1
    for pair in pairs.items:
        if not isinstance(pair, Form) or len(pair.items) != 2:
            raise _Error("a let binding is (NAME EXPR)", pair)
        name = _sym(pair.items[0], "a let binding's name")
        ev.bind(scope, name, ev.eval(pair.items[1], env))
    value = ev.body(node.items[2:], scope)
    ev.depth -= 1
    return value


def _if(ev: _Evaluation, node: Form, env: _Env) -> Any:
    if len(node.items) not in (3, 4):
        raise _Error("(if TEST THEN [ELSE]) takes two or three arguments", node)
    test = ev.eval(node.items[1], env)
    taken = truthy(test)
    branch = (
        node.items[2] if taken else (node.items[3] if len(node.items) == 4 else None)
    )
    if ev.trace is not None:
        ev.note(
            "form", f"if {shown(node.items[1], 40)} -> {'then' if taken else 'else'}"
        )
    if branch is None:
        return None
    ev.depth += 1
    value = ev.eval(branch, env)
    ev.depth -= 1
    return value


def _progn(ev: _Evaluation, node: Form, env: _Env) -> Any:
    return ev.body(node.items[1:], env)


def _quote(ev: _Evaluation, node: Form, env: _Env) -> Any:
    if len(node.items) != 2:
        raise _Error("(quote X) takes one argument", node)
    return _quoted(node.items[1])


def _quoted(node: Node) -> Any:
    match node:
        case Sym(name=name):
            return QSym(name)
        case Lit(value=value):
            return value
        case Form(items=items):
            return tuple(_quoted(i) for i in items)


def _and(ev: _Evaluation, node: Form, env: _Env) -> Any:
    value: Any = True
    for item in node.items[1:]:
        value = ev.eval(item, env)
        if not truthy(value):
            return value
    return value


def _or(ev: _Evaluation, node: Form, env: _Env) -> Any:
    value: Any = False
    for item in node.items[1:]:
        value = ev.eval(item, env)
        if truthy(value):
            return value
    return value


def _defatom(ev: _Evaluation, node: Form, env: _Env) -> Any:
    # read before evaluation (`defined_atoms`): its value is its name
    return QSym(_sym(node.items[1], "defatom's name")) if len(node.items) > 1 else None


def _lambda(ev: _Evaluation, node: Form, env: _Env) -> Any:
    _need(node, 2, "lambda")
    params = node.items[1]
    if not isinstance(params, Form):
        raise _Error("(lambda (PARAM ...) BODY ...) needs a parameter list", node)
    names = tuple(_sym(p, "a lambda's parameter") for p in params.items)
    return Closure(names, node.items[2:], env)


def _loop(ev: _Evaluation, node: Form, env: _Env) -> Any:
    """``(loop N BODY ...)``: BODY N times (a bound counted in iterations);
    its value is the last iteration's, or the value of a ``(stop V)`` an
    iteration answers. An iteration that answers ``(continue X)`` asks for
    another: if none is left, the task fails at its ``iterations`` limit."""
    _need(node, 2, "loop")
    count = ev.eval(node.items[1], env)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise _Error(f"a loop's count must be a whole number >= 0, not {count!r}", node)
    value: Any = None
    for i in range(1, count + 1):
        ev.note("iteration", f"loop iteration {i} of {count}")
        ev.depth += 1
        value = ev.body(node.items[2:], env)  # a bind lasts to the next iteration
        ev.depth -= 1
        ev.last_iteration = value.value if isinstance(value, Decision) else value
        if isinstance(value, Decision):
            if value.action == "stop":
                return value.value
            continue
    if isinstance(value, Decision):
        raise _Limit("iterations", f"the loop reached its {count} iterations", None)
    return value


_DE_CLAUSES = (
    "max-iterations",
    "initial-director-input",
    "director",
    "executor",
    "evaluator",
    "controller",
)


def _director_evaluator(ev: _Evaluation, node: Form, env: _Env) -> Any:
    """``(director-evaluator-loop (max-iterations N) (initial-director-input
    X) (director F) (executor F) (evaluator F) (controller F))``: each
    iteration the director turns the input into a plan (``F input iter``),
    the executor carries it out (``F plan iter``), the evaluator judges it
    (``F result plan iter``) and the controller answers ``(continue
    NEXT-INPUT)`` or ``(stop VALUE)`` (``F feedback plan result iter``).
    Reaching N iterations without a stop fails the task at its
    ``iterations`` limit, keeping the last iteration's result."""
    clauses: dict[str, Node] = {}
    for clause in node.items[1:]:
        if (
            not isinstance(clause, Form)
            or len(clause.items) != 2
            or not isinstance(clause.items[0], Sym)
            or clause.items[0].name not in _DE_CLAUSES
        ):
            raise _Error(
                "a director-evaluator-loop clause is (NAME EXPR), NAME one of "
                + ", ".join(_DE_CLAUSES),
                clause,
            )
        name = clause.items[0].name
        if name in clauses:
            raise _Error(f"{name} is given twice", clause)
        clauses[name] = clause.items[1]
    missing = [c for c in _DE_CLAUSES if c not in clauses]
    if missing:
        raise _Error(f"director-evaluator-loop needs {', '.join(missing)}", node)
    limit = ev.eval(clauses["max-iterations"], env)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise _Error(f"max-iterations must be a whole number >= 1, not {limit!r}", node)
    given = ev.eval(clauses["initial-director-input"], env)
    phases = {p: ev.eval(clauses[p], env) for p in _DE_CLAUSES[2:]}
    for i in range(1, limit + 1):
        ev.note("iteration", f"director-evaluator iteration {i} of {limit}")
        ev.depth += 1
        plan = ev.apply(phases["director"], [given, i], node)
        result = ev.apply(phases["executor"], [plan, i], node)
        ev.last_iteration = result
        feedback = ev.apply(phases["evaluator"], [result, plan, i], node)
        decision = _decision(
            ev.apply(phases["controller"], [feedback, plan, result, i], node), node
        )
        ev.depth -= 1
        ev.note("value", f"controller: {decision.action}")
        if decision.action == "stop":
            return decision.value
        given = decision.value
    raise _Limit(
        "iterations", f"the director-evaluator loop reached its {limit} iterations"
    )


def _decision(value: Any, node: Form) -> Decision:
    if isinstance(value, Decision):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], QSym | str)
        and (value[0].name if isinstance(value[0], QSym) else value[0])
        in ("continue", "stop")
    ):
        action = value[0].name if isinstance(value[0], QSym) else value[0]
        return Decision(action, value[1])
    raise _Error(
        f"the controller must answer (continue X) or (stop V), not {text_of(value)!r}",
        node,
    )


def _continue(ev: _Evaluation, node: Form, env: _Env) -> Any:
    if len(node.items) != 2:
        raise _Error("(continue X) takes one argument", node)
    return Decision("continue", ev.eval(node.items[1], env))


def _stop(ev: _Evaluation, node: Form, env: _Env) -> Any:
    if len(node.items) != 2:
        raise _Error("(stop V) takes one argument", node)
    return Decision("stop", ev.eval(node.items[1], env))


def _run_script(ev: _Evaluation, node: Form, env: _Env) -> Any:
    """``(system:run_script COMMAND)``: the ``script.run`` tool, in the
    task's workspace, through the tool registry (its result's content is
    the command's output)."""
    if len(node.items) != 2:
        raise _Error("(system:run_script COMMAND) takes one argument", node)
    command = ev.eval(node.items[1], env)
    return ev.call(node, tool="script.run", args={"command": text_of(command)})


def _call_tool(ev: _Evaluation, node: Form, env: _Env) -> Any:
    """``(call-tool NAME KEY VALUE ...)``: any tool of the registry."""
    _need(node, 1, "call-tool")
    name = ev.eval(node.items[1], env)
    rest = [ev.eval(n, env) for n in node.items[2:]]
    if not isinstance(name, str) or len(rest) % 2:
        raise _Error("(call-tool NAME KEY VALUE ...) needs a name and pairs", node)
    args = {text_of(k): plain(v) for k, v in zip(rest[::2], rest[1::2], strict=True)}
    return ev.call(node, tool=name, args=args)


_SPECIAL: Mapping[str, Callable[[_Evaluation, Form, _Env], Any]] = MappingProxyType(
    {
        "bind": _bind,
        "let": _let,
        "if": _if,
        "progn": _progn,
        "quote": _quote,
        "and": _and,
        "or": _or,
        "defatom": _defatom,
        "lambda": _lambda,
        "loop": _loop,
        "director-evaluator-loop": _director_evaluator,
        "continue": _continue,
        "stop": _stop,
        "system:run_script": _run_script,
        "call-tool": _call_tool,
    }
)


RESERVED = frozenset({*_SPECIAL, *PRIMITIVES, "true", "false", "nil"})
"""Names the language keeps: a template or parameter of one of these names
could never be called or bound, so it is refused when it is read."""


def reserved_problems(template: Template) -> list[str]:
    """A sentence for each of ``template``'s names (its own, its
    parameters') that the language keeps (`RESERVED`)."""
    problems = []
    if template.name in RESERVED:
        problems.append(
            f"name: {template.name} is a name of the language (a form, a "
            "primitive or a literal); give the template another"
        )
    problems += [
        f"params: {p} is a name of the language; give the parameter another"
        for p in template.params
        if p in RESERVED
    ]
    return problems


def evaluate(
    program: Sequence[Node],
    *,
    templates: Mapping[str, Template],
    args: Mapping[str, Any] = {},
    results: Sequence[Result] = (),
    started: Sequence[tuple[str, str | None, dict[str, Any]]] = (),
    failed_limits: Sequence[str | None] = (),
    max_calls: int = 1_000,
    trace: list[TraceLine] | None = None,
) -> Outcome:
    """Evaluate ``program`` from its start over the ``results`` of its calls
    so far (the k-th call takes the k-th), with ``args`` bound at its top.

    ``started`` holds each recorded call's (template, tool, arguments): a
    call that differs fails the evaluation. ``failed_limits`` names, for each
    result, the limit a failed call reached (``None`` if none). With a
    ``trace`` list, the lines of the evaluation's tree are appended to it.
    """
    ev = _Evaluation(templates, results, started, failed_limits, max_calls, trace)
    env = _Env()
    for name, value in args.items():
        ev.bind(env, name, value)
    try:
        value = ev.body(program, env)
    except _Stop as stop:
        return stop.outcome
    except _Limit as e:
        return _failed(ev, "limit", str(e), limit=e.limit, call=e.call)
    except _CallFailed as e:
        kind = "limit" if e.limit else "call"
        message = f"call {e.call} failed: {e.result.content}"
        return _failed(ev, kind, message, limit=e.limit, call=e.call)
    except _Error as e:
        return _failed(ev, "eval", str(e))
    except RecursionError:  # not reached: MAX_LEVELS stops it first
        return _failed(ev, "eval", "the program nests too deeply to evaluate")
    if isinstance(value, Decision):
        value = value.value  # a continue or stop answered outside a loop
    return Done(value)


def _failed(
    ev: _Evaluation,
    kind: Any,
    message: str,
    limit: str | None = None,
    call: int | None = None,
) -> Failed:
    """The evaluation failed: its error, with the variables bound so far and
    the last loop iteration's output, as data a log can store."""
    return Failed(
        TaskError(
            kind=kind,
            limit=limit,
            message=message,
            call=call,
            partial=plain(ev.bound),
            last_iteration=plain(ev.last_iteration),
        )
    )
