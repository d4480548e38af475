"""The evaluator of task programs (pure): a step of evaluation is a function
of the program and the results of its calls so far.

`evaluate` runs a program from its start. Each call it makes (an atomic
template, or a tool through ``system:run_script`` and ``call-tool``) is
numbered in evaluation order; the k-th call takes the k-th recorded result.
The first call with no result yet stops the evaluation: it is what the task
asks for next (`Need`). Evaluating again from the start, with one result
more, reaches the next call, and so on until the program has its value
(`Done`) or fails (`Failed`, with the variables bound so far and the last
loop iteration's output). Calls already recorded are checked: a program
that now calls another template, or the same with other arguments, fails
naming the call.

So that a step costs the same however many calls came before it, an
evaluation need not start from the top: `resume` starts from a `Checkpoint`,
where the last evaluation stood before its last call (the start of a form
of the program, of a ``progn`` or ``let`` body or of a loop iteration, with
the scopes and counts it had there), and gives the next one with its
outcome. A checkpoint is data, a function of the program and the results
alone, so resuming from it gives exactly what evaluating from the top gives
(`evaluate`): a task resumed on another host, replayed or forked evaluates
as it did.

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
from typing import Any, TypeVar

import msgspec

from steward.actors.task.events import TaskError, Template
from steward.actors.task.lang import Form, Lit, Node, Sym, shown
from steward.actors.task.values import (
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

__all__ = [
    "Checkpoint",
    "Done",
    "Evaluated",
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
    "resume",
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


# -- checkpoints ----------------------------------------------------------------------


class Body(msgspec.Struct, frozen=True, gc=False):
    """The form ``at`` of a body (the program's, a ``progn``'s or ``let``'s, a
    loop iteration's) is evaluated next."""

    at: int


class Iteration(msgspec.Struct, frozen=True, gc=False):
    """A ``loop`` of ``count`` iterations is in its iteration ``number``."""

    count: int
    number: int


class Branch(msgspec.Struct, frozen=True, gc=False):
    """An ``if`` evaluates its item ``taken`` (2: then, 3: else)."""

    taken: int


class Let(msgspec.Struct, frozen=True, gc=False):
    """A ``let`` evaluates its body in scope ``scope`` (`Checkpoint.scopes`)."""

    scope: int


Frame = Body | Iteration | Branch | Let


class Scope(msgspec.Struct, frozen=True, gc=False):
    """A scope of a checkpoint: its variables and the scope around it (an
    index into `Checkpoint.scopes`)."""

    vars: dict[str, Any]
    parent: int | None = None


class SavedLambda(msgspec.Struct, frozen=True, gc=False):
    """A lambda kept in a checkpoint: its scope is an index into
    `Checkpoint.scopes` (scopes and lambdas refer to each other)."""

    params: tuple[str, ...]
    body: tuple[Node, ...]
    scope: int


class Checkpoint(msgspec.Struct, frozen=True, gc=False):
    """Where an evaluation stood at the start of a form, as data: the forms
    around it from the program's top (`frames`, each one a loop, ``if`` or
    ``let`` in progress or a body's next form), its scopes (the first the
    program's), the calls and evaluation steps made, the variables bound and
    the last loop iteration's output. Forms whose progress a frame cannot
    hold (a call's arguments, a lambda's body, a ``director-evaluator-loop``)
    take no checkpoint inside them: the evaluation resumes from before."""

    calls: int
    steps: int
    frames: tuple[Frame, ...]
    scopes: tuple[Scope, ...]
    bound: dict[str, Any]
    last_iteration: Any = None


class _Saving:
    """A checkpoint's scopes, as they are kept: each scope reachable, given
    its index when first met, and every lambda with its scope's index."""

    def __init__(self) -> None:
        self.index: dict[_Env, int] = {}
        self.scopes: list[Scope] = []

    def scope(self, env: _Env) -> int:
        found = self.index.get(env)
        if found is not None:
            return found
        parent = None if env.parent is None else self.scope(env.parent)
        n = self.index[env] = len(self.scopes)
        self.scopes.append(Scope({}))  # a lambda in it may refer to it
        self.scopes[n] = Scope({k: self.value(v) for k, v in env.vars.items()}, parent)
        return n

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind is Closure:
            return SavedLambda(value.params, value.body, self.scope(value.env))
        if kind is Decision:
            return Decision(value.action, self.value(value.value))
        if kind is tuple and any(type(v) in (Closure, Decision, tuple) for v in value):
            return tuple(self.value(v) for v in value)
        return value  # data, kept as it is: no value is changed in place


def _scopes_of(checkpoint: Checkpoint) -> list[_Env]:
    """The scopes of ``checkpoint`` as an evaluation uses them."""
    envs: list[_Env] = []
    for scope in checkpoint.scopes:  # a scope comes after the one around it
        envs.append(_Env(None if scope.parent is None else envs[scope.parent]))
    for env, scope in zip(envs, checkpoint.scopes, strict=True):
        env.vars = {k: _restored(v, envs) for k, v in scope.vars.items()}
    return envs


def _restored(value: Any, envs: list[_Env]) -> Any:
    kind = type(value)
    if kind is SavedLambda:
        return Closure(value.params, value.body, envs[value.scope])
    if kind is Decision:
        return Decision(value.action, _restored(value.value, envs))
    if kind is tuple and any(type(v) in (SavedLambda, Decision, tuple) for v in value):
        return tuple(_restored(v, envs) for v in value)
    return value


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


_F = TypeVar("_F", Body, Iteration, Branch, Let)


class _Evaluation:
    def __init__(
        self,
        checkpoint: Checkpoint | None,
        templates: Mapping[str, Template],
        results: Sequence[Result],
        started: Sequence[tuple[str, str | None, dict[str, Any]]],
        failed_limits: Sequence[str | None],
        max_calls: int,
        trace: list[TraceLine] | None = None,
        saving: bool = True,
    ) -> None:
        """An evaluation from ``checkpoint`` (``None``: the program's start),
        which takes checkpoints if ``saving``."""
        self.templates = templates
        self.results = results
        self.started = started
        self.failed_limits = failed_limits
        self.max_calls = max_calls
        self.revision = 0
        """The task's revision (`TaskCreated.revision`)."""
        self.calls = 0
        self.steps = 0
        self.levels = 0
        self.depth = 0
        self.bound: dict[str, Any] = {}
        self.last_iteration: Any = None
        self.trace = trace
        self.path: list[Frame | _Env] = []
        """The forms around the one evaluated that a checkpoint can resume,
        from the top: a frame each, a ``let`` as its scope."""
        self.opaque = 0
        """The forms around it that a checkpoint cannot resume."""
        self.saving = saving
        self.saved = checkpoint
        """The last checkpoint (``None``: the program's start)."""
        self.scopes: list[_Env] = []
        """The resumed checkpoint's scopes."""
        self.resuming: list[Frame] = []
        """The resumed checkpoint's frames not yet reached, the next last."""
        if checkpoint is None:
            self.top = _Env()
            return
        self.scopes = _scopes_of(checkpoint)
        self.top = self.scopes[0]
        self.calls = checkpoint.calls
        self.bound = {k: _restored(v, self.scopes) for k, v in checkpoint.bound.items()}
        self.last_iteration = _restored(checkpoint.last_iteration, self.scopes)
        self.resuming = list(reversed(checkpoint.frames))

    # -- checkpoints ----------------------------------------------------------------

    def resumed(self, kind: type[_F]) -> _F | None:
        """The frame of the form entered, if the evaluation is on its way
        back to its checkpoint (the form is then one of its frames')."""
        if not self.resuming:
            return None
        frame = self.resuming.pop()
        assert type(frame) is kind, (frame, kind)
        if not self.resuming and self.saved is not None:
            # there: the forms entered on the way were counted before
            self.steps = self.saved.steps
        return frame

    def save(self) -> None:
        """A checkpoint here, at the start of a body's form."""
        saving = _Saving()
        saving.scope(self.top)
        frames = tuple(
            Let(saving.scope(f)) if isinstance(f, _Env) else f for f in self.path
        )
        bound = {k: saving.value(v) for k, v in self.bound.items()}
        last = saving.value(self.last_iteration)
        self.saved = Checkpoint(
            self.calls, self.steps, frames, tuple(saving.scopes), bound, last
        )

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
            name = head.name if type(head) is Sym else None
            special = _SPECIAL.get(name) if name is not None else None
            if special is not None and name in _RESUMABLE:
                return special(self, node, env)
            self.opaque += 1
            if special is not None:
                value = special(self, node, env)
            elif type(head) is Sym:
                value = self.apply_named(head, node, env)
            else:
                fn = self.eval(head, env)
                args = [self.eval(a, env) for a in node.items[1:]]
                value = self.apply(fn, args, node)
            self.opaque -= 1
            return value
        finally:
            self.levels -= 1

    def body(self, nodes: Sequence[Node], env: _Env) -> Any:
        """The value of ``nodes`` evaluated in turn; a checkpoint at the start
        of the first after a call, unless a form around cannot resume it."""
        resumed = self.resumed(Body)
        value: Any = None
        for at in range(resumed.at if resumed else 0, len(nodes)):
            self.path.append(Body(at))
            if (
                self.saving
                and not self.opaque
                and self.calls > (self.saved.calls if self.saved else 0)
            ):
                self.save()
            value = self.eval(nodes[at], env)
            self.path.pop()
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
    if ev.trace is not None:
        ev.note("form", "let " + " ".join(shown(p, 20) for p in pairs.items))
    ev.depth += 1
    resumed = ev.resumed(Let)
    if resumed is not None:
        scope = ev.scopes[resumed.scope]
    else:
        scope = _Env(env)
        ev.opaque += 1  # no checkpoint in a binding's value
        for pair in pairs.items:
            if not isinstance(pair, Form) or len(pair.items) != 2:
                raise _Error("a let binding is (NAME EXPR)", pair)
            name = _sym(pair.items[0], "a let binding's name")
            ev.bind(scope, name, ev.eval(pair.items[1], env))
        ev.opaque -= 1
    ev.path.append(scope)
    value = ev.body(node.items[2:], scope)
    ev.path.pop()
    ev.depth -= 1
    return value


def _if(ev: _Evaluation, node: Form, env: _Env) -> Any:
    if len(node.items) not in (3, 4):
        raise _Error("(if TEST THEN [ELSE]) takes two or three arguments", node)
    resumed = ev.resumed(Branch)
    if resumed is not None:
        taken = resumed.taken
    else:
        ev.opaque += 1  # no checkpoint in the test
        taken = 2 if truthy(ev.eval(node.items[1], env)) else 3
        ev.opaque -= 1
        if ev.trace is not None:
            then = "then" if taken == 2 else "else"
            ev.note("form", f"if {shown(node.items[1], 40)} -> {then}")
    if taken == len(node.items):  # false, with no else
        return None
    ev.depth += 1
    ev.path.append(Branch(taken))
    value = ev.eval(node.items[taken], env)
    ev.path.pop()
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
    resumed = ev.resumed(Iteration)
    if resumed is not None:
        count, first = resumed.count, resumed.number
    else:
        ev.opaque += 1  # no checkpoint in the count
        count = ev.eval(node.items[1], env)
        ev.opaque -= 1
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise _Error(
                f"a loop's count must be a whole number >= 0, not {count!r}", node
            )
        first = 1
    value: Any = None
    for i in range(first, count + 1):
        ev.note("iteration", f"loop iteration {i} of {count}")
        ev.depth += 1
        ev.path.append(Iteration(count, i))
        value = ev.body(node.items[2:], env)  # a bind lasts to the next iteration
        ev.path.pop()
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
    Reaching N iterations without a stop gives the last executor result
    (from revision 1; before, it failed the task at its ``iterations``
    limit, keeping that result); ``(max-iterations 0)`` runs nothing and
    gives nil (from revision 1)."""
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
    least = 0 if ev.revision >= 1 else 1
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < least:
        raise _Error(
            f"max-iterations must be a whole number >= {least}, not {limit!r}", node
        )
    if limit == 0:
        ev.note("value", "max-iterations 0: nothing runs, nil")
        return None
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
    if ev.revision >= 1:  # hoidn/llm's ADR, step 7h.ii: the last result
        ev.note(
            "value",
            f"max-iterations {limit} reached without a stop: the last executor result",
        )
        return ev.last_iteration
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


_RESUMABLE = frozenset({"bind", "let", "if", "progn", "loop"})
"""The forms a checkpoint may be inside: each resumes from its frame (a
``bind`` and a ``progn`` need none)."""

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


class Evaluated(msgspec.Struct, frozen=True, gc=False):
    """An evaluation's outcome, and its last checkpoint (``None``: the
    program's start), from which the next evaluation may resume."""

    outcome: Outcome
    checkpoint: Checkpoint | None


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
    revision: int = 0,
) -> Outcome:
    """Evaluate ``program`` from its start over the ``results`` of its calls
    so far (the k-th call takes the k-th), with ``args`` bound at its top.

    ``started`` holds each recorded call's (template, tool, arguments): a
    call that differs fails the evaluation. ``failed_limits`` names, for each
    result, the limit a failed call reached (``None`` if none). With a
    ``trace`` list, the lines of the evaluation's tree are appended to it.
    """
    ev = _Evaluation(
        None, templates, results, started, failed_limits, max_calls, trace, False
    )
    ev.revision = revision
    return _run(ev, program, args).outcome


def resume(
    program: Sequence[Node],
    checkpoint: Checkpoint | None,
    *,
    templates: Mapping[str, Template],
    args: Mapping[str, Any] = {},
    results: Sequence[Result] = (),
    started: Sequence[tuple[str, str | None, dict[str, Any]]] = (),
    failed_limits: Sequence[str | None] = (),
    max_calls: int = 1_000,
    revision: int = 0,
) -> Evaluated:
    """`evaluate`, from ``checkpoint`` (an earlier evaluation's, of the same
    program with the same ``args`` over a prefix of the same results), with
    the same outcome; and the evaluation's last checkpoint. Only the calls
    after the checkpoint's are read from ``results`` and ``started``."""
    ev = _Evaluation(checkpoint, templates, results, started, failed_limits, max_calls)
    ev.revision = revision
    return _run(ev, program, args if checkpoint is None else {})


def _run(
    ev: _Evaluation, program: Sequence[Node], args: Mapping[str, Any]
) -> Evaluated:
    for name, value in args.items():
        ev.bind(ev.top, name, value)
    try:
        value = ev.body(program, ev.top)
    except _Stop as stop:
        return Evaluated(stop.outcome, ev.saved)
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
    return Evaluated(Done(value), ev.saved)


def _failed(
    ev: _Evaluation,
    kind: Any,
    message: str,
    limit: str | None = None,
    call: int | None = None,
) -> Evaluated:
    """The evaluation failed: its error, with the variables bound so far and
    the last loop iteration's output, as data a log can store."""
    error = TaskError(
        kind=kind,
        limit=limit,
        message=message,
        call=call,
        partial=plain(ev.bound),
        last_iteration=plain(ev.last_iteration),
    )
    return Evaluated(Failed(error), ev.saved)
