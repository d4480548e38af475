"""Deciders stay pure: they import nothing that does I/O or reads the clock,
keep no module state, and answer the same whatever they were asked before."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import sys
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import msgspec
from counter_kind import COUNTER
from helpers_run import DELETE, READ, created, settings
from hypothesis import strategies as st
from support import act

import steward
from steward.actors.kind import Kind
from steward.actors.prompt import PromptCache
from steward.actors.run import decider as run_actor
from steward.actors.run import state as run_state
from steward.actors.run.events import ApprovalDecided, RunSettings, RunTaken
from steward.actors.run.state import run_stream
from steward.events import (
    CancelRequested,
    ChildFinished,
    EffectClaimed,
    Event,
    LlmFailed,
    LlmResponded,
    ToolCall,
    ToolResulted,
    WakeDue,
)
from steward.kinds import KINDS

FORBIDDEN = {
    "asyncio",
    "aiosqlite",
    "sqlite3",
    "nats",
    "anthropic",
    "openai",
    "time",
    "random",
    "uuid",
    "os",
    "secrets",
    "steward.bus",
    "steward.host",
    "steward.clock",
}
ROOT = Path(steward.__file__).parent.parent


def _forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def _source(module: str) -> Path | None:
    """The file of ``module`` if it is a project's own Python source (not
    built in, of the standard library or an installed package)."""
    if module.partition(".")[0] in sys.stdlib_module_names:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return None
    origin = None if spec is None else spec.origin
    if origin is None or not origin.endswith(".py") or "site-packages" in origin:
        return None
    return Path(origin)


def _modules_of(value: object) -> Iterator[str]:
    """The modules defining what a kind holds: its functions, its event
    types, the type of its initial state (inside tuples, sets and nested
    dataclasses too)."""
    if isinstance(value, str | int | float | bool | None):
        return
    if isinstance(value, tuple | list | set | frozenset):
        for item in value:
            yield from _modules_of(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _modules_of(getattr(value, field.name))
    elif isinstance(value, type) or callable(value):
        yield getattr(value, "__module__", type(value).__module__)
    else:
        yield type(value).__module__


def _imported_modules(module: str, path: Path) -> Iterator[str]:
    """The modules ``module`` (at ``path``) imports: of ``from p import x``,
    ``p.x`` where that is a module, else ``p``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            base = importlib.util.resolve_name(base, package)
            for alias in node.names:
                name = f"{base}.{alias.name}"
                yield name if _is_module(name) else base


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def decider_modules(kinds: Iterable[Kind[Any]]) -> dict[str, Path]:
    """Every module a kind's pure parts run in, by name: those defining its
    decider, reactor and events (whatever `Kind` holds but its read models
    and their listing, which the projector's SQLite serves, and its tools,
    effects the host carries out), and the steward modules they import,
    transitively. A forbidden import is reported by the module that makes
    it, not followed."""
    todo = [
        name
        for k in kinds
        for part in (k.decider, k.reactor, k.surface)
        for field in dataclasses.fields(part)
        if field.name not in ("projection", "listing", "tools")
        for name in _modules_of(getattr(part, field.name))
    ]
    found: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        path = _source(name)
        if name in found or path is None:
            continue
        found[name] = path
        todo += (
            imported
            for imported in _imported_modules(name, path)
            if imported.partition(".")[0] == "steward" and not _forbidden(imported)
        )
    return found


DECIDERS = {
    name: path.relative_to(ROOT).as_posix()
    for name, path in sorted(decider_modules(KINDS).items())
}
"""Each decider module's name and path (from the repository root): derived
from the kind table, so a new kind is checked without a line here."""


def test_the_decider_modules_are_found_from_the_kind_table() -> None:
    """Each kind's own modules are checked, and the steward modules they
    import, transitively: a decider's helper is checked like the decider."""
    for actor in KINDS:
        for part in (actor.decider.decide, actor.decider.evolve, *actor.decider.events):
            assert part.__module__ in DECIDERS, (actor.name, part)
    found = decider_modules([COUNTER])  # a kind not in the table
    assert "counter_kind" in found  # its decide's module (tests/counter_kind.py)
    assert "steward.actors.kind" in found  # imported by counter_kind
    imported = {
        i for name, path in found.items() for i in _imported_modules(name, path)
    }
    followed = {i for i in imported if i.startswith("steward.") and not _forbidden(i)}
    assert followed <= found.keys()  # and what those import, and so on
    assert "msgspec" not in found  # not steward's: not followed


def test_deciders_import_nothing_impure() -> None:
    """A decider module importing I/O, time, randomness or the shell fails here."""
    problems = []
    for module, rel in DECIDERS.items():
        for name in sorted(set(_imported_modules(module, ROOT / rel))):
            if _forbidden(name):
                problems.append(f"{rel} imports {name}")
    assert not problems, (
        "deciders must stay pure (DESIGN §2): "
        + "; ".join(problems)
        + ". Pass times and ids in on input events and do I/O in steward/host/."
    )


def test_public_surface_is_pinned() -> None:
    """`steward.__all__` lists exactly the names a user needs, all importable."""
    assert sorted(steward.__all__) == [
        "EventLog",
        "Host",
        "Recorded",
        "SqliteEventLog",
        "StewardError",
        "load_settings",
    ]
    for name in steward.__all__:
        assert getattr(steward, name) is not None


MUTABLE_CALLS = {
    "dict",
    "list",
    "set",
    "bytearray",
    "defaultdict",
    "OrderedDict",
    "Counter",
    "deque",
    "ChainMap",
}
MUTABLE_NODES = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
ALLOWED = {
    # The upcaster table: filled where an upcaster is defined (and by tests,
    # through monkeypatch), read by the codec to decode old payloads; no
    # decider reads it, so no decision can depend on it.
    ("steward/events/base.py", "UPCASTERS"),
}


def _state_holders(
    body: list[ast.stmt], structs: frozenset[str], struct: bool = False
) -> Iterator[tuple[ast.stmt, bool]]:
    """The statements run at import, in modules and class bodies (not in
    functions, which run per call), each with whether it is in the body of
    a msgspec Struct (named in ``structs``)."""
    for node in body:
        yield node, struct
        if isinstance(node, ast.ClassDef):
            yield from _state_holders(node.body, structs, node.name in structs)
        elif isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try):
            for block in ("body", "orelse", "finalbody"):
                yield from _state_holders(getattr(node, block, []), structs, struct)
            for handler in getattr(node, "handlers", []):
                yield from _state_holders(handler.body, structs, struct)


def _mutable(value: ast.expr | None) -> str | None:
    """What mutable container ``value`` makes, if it makes one."""
    if isinstance(value, MUTABLE_NODES):
        return type(value).__name__.lower().replace("comp", " comprehension")
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in MUTABLE_CALLS:
            return f"{name}()"
    return None


def _field_default(node: ast.stmt) -> bool:
    """Whether ``node``, in a Struct's body, is a field with an empty default:
    msgspec gives each instance its own copy of it."""
    return (
        isinstance(node, ast.AnnAssign)
        and isinstance(node.value, ast.Dict | ast.List | ast.Set)
        and not ast.literal_eval(node.value)
    )


def module_state(
    rel: str, source: str, structs: frozenset[str] = frozenset()
) -> list[str]:
    """Where the module at ``rel`` keeps state: its `global` statements and
    the mutable containers it binds at import, one line each; ``structs``
    names its msgspec Structs."""
    tree = ast.parse(source, filename=rel)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            problems.append(
                f"{rel}:{node.lineno}: `global {', '.join(node.names)}` rebinds "
                "module state; return what the caller needs instead, or keep it "
                "in an object the host owns and passes in"
            )
    for node, in_struct in _state_holders(tree.body, structs):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        made = _mutable(value)
        if made is None or (in_struct and _field_default(node)):
            continue
        for target in targets:
            name = ast.unparse(target)
            if name == "__all__" or (rel, name) in ALLOWED:
                continue
            problems.append(
                f"{rel}:{node.lineno}: `{name}` is a {made} bound at import, "
                "state that outlives a call; make it immutable (a tuple, a "
                "frozenset, a MappingProxyType) or, if it is a cache, keep it "
                "in an object the host owns and passes in "
                "(like steward.actors.prompt.PromptCache)"
            )
    return problems


def _structs(name: str) -> frozenset[str]:
    """The names of the msgspec Structs the module ``name`` defines."""
    module = importlib.import_module(name)
    return frozenset(
        attr
        for attr, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ == module.__name__
    )


def test_deciders_keep_no_module_state() -> None:
    """A `global` statement or a mutable container bound at import (module or
    class level) in a decider module fails here, naming its line and the fix."""
    problems = [
        problem
        for name, rel in DECIDERS.items()
        for problem in module_state(rel, (ROOT / rel).read_text(), _structs(name))
    ]
    assert not problems, "deciders keep no module state (DESIGN §2):\n" + "\n".join(
        problems
    )


def test_the_module_state_check_finds_what_it_must() -> None:
    """The check names a `global`, a memo dict, a class-level list and a
    container behind `if`; immutable tables, `__all__` and a Struct's empty
    field default (copied for each instance) pass."""
    source = """
from types import MappingProxyType
__all__ = ["f"]
KINDS = ("a", "b")
_SEEN = frozenset({"a"})
_TABLE = MappingProxyType({"a": 1})
_memo: dict[int, str] = {}
class C:
    shared = []
if True:
    _later = set()
def f():
    global _memo
    cache = {}
class S(msgspec.Struct):
    args: dict[str, int] = {}
"""
    problems = module_state("m.py", source, frozenset({"S"}))
    assert [p.split(": ", 1)[0] for p in problems] == [
        "m.py:13",
        "m.py:7",
        "m.py:9",
        "m.py:11",
    ]
    assert "`_memo` is a dict bound at import" in problems[1]
    assert "PromptCache" in problems[1]


def identity_keys(rel: str, source: str) -> list[str]:
    """Where the module at ``rel`` calls `id()`, one line each: a key made of
    an object's identity, which a decider must not use."""
    calls = sorted(
        (
            node
            for node in ast.walk(ast.parse(source, filename=rel))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "id"
        ),
        key=lambda node: (node.lineno, node.col_offset),
    )
    return [
        f"{rel}:{node.lineno}: `{ast.unparse(node)}` takes an object's identity, "
        "which an equal object (a state folded again from the log) does not "
        "share and a new object may reuse; key by value (the object itself, or "
        "its encoding where it holds a dict), or keep the memo in the host, by "
        "stream and version"
        for node in calls
    ]


def test_deciders_key_nothing_by_identity() -> None:
    """An `id()` call in a decider module, or in any module of steward/actors
    beside them (a new kind's, before the kind table names it), fails here,
    naming its line and the fix."""
    actors = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "steward" / "actors").glob("*.py")
    }
    problems = [
        problem
        for rel in sorted(actors | set(DECIDERS.values()))
        for problem in identity_keys(rel, (ROOT / rel).read_text())
    ]
    assert not problems, (
        "deciders key nothing by object identity (DESIGN §2):\n" + "\n".join(problems)
    )


def test_the_identity_check_finds_what_it_must() -> None:
    """The check names each `id()` call, in a key or a method; a field, an
    attribute or an argument named ``id`` passes."""
    source = """
class ToolCall(msgspec.Struct):
    id: str
def digest(message, memo):
    key = (id(message.tool_calls), message.content)
    call = ToolCall(id="c1")
    return memo.get(id(message)) or call.id
class Cache:
    def keep(self, tools):
        self._tools[id(tools)] = tools
"""
    problems = identity_keys("m.py", source)
    assert [p.split(": ", 1)[0] for p in problems] == ["m.py:5", "m.py:7", "m.py:10"]
    assert "`id(message.tool_calls)` takes an object's identity" in problems[0]
    assert "key by value" in problems[0]


# -- the call history does not leak ------------------------------------------------

STEPS = [
    *(
        f"reply {text}"
        for text in (
            act(type="note", category="requirements", content="r"),
            act(type="note", category="plan", content="p"),
            act(type="tool_call", name="files.read", args={"path": "a"}),
            act(type="tool_call", name="files.delete", args={"path": "a"}),
            act(type="tool_call", name="no.such", args={}),
            act(type="set_output", output="part ", mode="append"),
            act(type="decision", content="d"),
            act(type="spawn_subagent", subagent={"task": "look"}),
            act(type="sleep", delaySeconds=30),
            "not json",
        )
    ),
    "calls",
    "tool ok",
    "tool failed",
    "approve",
    "deny",
    "wake",
    "child",
    "claim",
    "take",
]
ENDS = [
    f"reply {act(type='finish', output='done')}",
    f"reply {act(type='send_message', message='working on it')}",
    "cancel",
    "model failed",
]
MOVES = STEPS * 4 + ENDS
"""Names of inputs, those that usually end a run a quarter as often as the
others, so that most runs are still going when the last input comes."""


def _input(move: str, state: run_state.Run, n: int) -> Event:
    """The input ``move`` names, aimed at what ``state`` waits for."""
    at = 1_700_000_000.0 + n
    llm = state.llm_pending or "none"
    call = state.calls[0].request_id if state.calls else "none"
    held = state.approvals[0].request_id if state.approvals else state.budget_hold
    if move.startswith("reply "):
        return LlmResponded(request_id=llm, text=move[6:], at=at)
    match move:
        case "calls":
            read = ToolCall(id=f"c{n}", name="files.read", args={"path": "a"})
            return LlmResponded(request_id=llm, text="", tool_calls=(read,), at=at)
        case "tool ok" | "tool failed":
            ok = move == "tool ok"
            return ToolResulted(request_id=call, ok=ok, output="x" * n, error="e")
        case "approve" | "deny":
            return ApprovalDecided(
                request_id=held or "none", approved=move == "approve"
            )
        case "wake":
            return WakeDue(timer_id=state.timer_id or "none", at=at)
        case "child":
            child = state.children[0] if state.children else "none"
            result = ChildFinished(
                stream=run_stream(child), status="completed", output="o"
            )
            return msgspec.structs.replace(result, at=at)
        case "cancel":
            return CancelRequested(at=at)
        case "model failed":
            return LlmFailed(request_id=llm, kind="k", message="m", at=at)
        case "claim":
            return EffectClaimed(request_id=llm, worker="w", until=at + 60, at=at)
        case _:
            return RunTaken(at=at)


Script = tuple[RunSettings, bool, list[str]]
"""A run to play: its settings, whether it is queued, and its moves."""
Decided = tuple[Event, run_state.Run, list[Event] | None]
"""An input, the state it was decided on, and what `decide` answered."""


def _play(run: Script, cache: PromptCache | None = None) -> list[Decided]:
    """Each input of ``run`` through the real decider, as a host decides it,
    with the state it was decided on and the answer."""
    config, queued, moves = run
    state = run_state.initial
    decided: list[Decided] = []
    for n, move in enumerate([None, *moves]):
        if move is None:
            input: Event = created(settings=config, queued=queued)
        else:
            input = _input(move, state, n)
        step = run_actor.decide_and_fold(input, state, cache)
        decided.append((input, state, None if step is None else step.decisions))
        if step is not None:
            state = step.state
    return decided


runs = st.tuples(
    st.builds(
        settings,
        protocol=st.sampled_from(["json", "native"]),
        planning_gate=st.booleans(),
        max_iterations=st.integers(1, 20),
        transcript_limit=st.integers(0, 4),
        token_budget=st.none() | st.integers(1, 400),
        budget_policy=st.sampled_from(["fail", "pause"]),
        tools=st.just((READ, DELETE)),
    ),
    st.sampled_from((False, False, False, True)),  # queued: pending until taken
    st.lists(st.sampled_from(MOVES), max_size=14),
)


FRESH = (
    "steward.actors.run.decider",
    "steward.actors.run.prompt",
    "steward.actors.prompt",
    "steward.actors.run.commands",
)
"""The decider's own modules (events and their codec are shared, unchanged)."""


def _fresh_decider() -> types.ModuleType:
    """The run decider in modules executed afresh: one that has decided
    nothing before (a memo in module state would be empty in it)."""
    saved = {name: sys.modules.pop(name) for name in FRESH}
    try:
        return importlib.import_module("steward.actors.run.decider")
    finally:
        sys.modules.update(saved)
        for name, module in saved.items():  # an import sets it on its package
            package, _, attr = name.rpartition(".")
            setattr(sys.modules[package], attr, module)


@hypothesis.settings(max_examples=150, database=None, deadline=None)
@hypothesis.given(run=runs, others=st.lists(runs, min_size=1, max_size=3))
def test_decide_answers_the_same_whatever_was_decided_before(
    run: Script, others: list[Script]
) -> None:
    """For each state a run of random inputs reaches, `decide(input, state)`
    gives the answer a decider that decided nothing before gives, and the
    same again after other runs (and the run's own later inputs) were
    decided, on an equal copy of the state, and through a host's warm prompt
    cache; and it leaves `state` unchanged."""
    cache = PromptCache()  # as a host's: shared by every run it decides
    decided = _play(run)
    for other in others:
        _play(other, cache)
    fresh = _fresh_decider()
    for input, state, answer in reversed(decided):
        before = msgspec.msgpack.encode(state)
        assert (
            fresh.decide(input, msgspec.msgpack.decode(before, type=fresh.Run))
            == answer
        )
        assert run_actor.decide(input, state) == answer
        copy = msgspec.msgpack.decode(before, type=run_state.Run)
        assert run_actor.decide(input, copy) == answer
        step = run_actor.decide_and_fold(input, state, cache)
        assert (None if step is None else step.decisions) == answer
        assert msgspec.msgpack.encode(state) == before, "decide changed its state"
