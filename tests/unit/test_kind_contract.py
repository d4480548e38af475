"""The kind contract: every kind in the table keeps DESIGN §2's promises.

Parametrized over every kind in `steward.kinds.KINDS`, as the log
contract suite is over both logs, with the committed golden logs
(``tests/golden/*.jsonl``) as each kind's sample streams: a kind with no
stream in any golden log fails here, so a new kind comes with one. On each
of its streams a kind must

1. fold as ``evolve`` does, event by event (and neither changes its state);
2. decide without changing the state it is given, the recorded decisions;
3. decide the same on equal states, whatever it was asked before;
4. refuse an opening input on a stream that has begun;
5. ask for no effect that has no pending entry, and have every pending
   entry it asks for answered, by its stream or by the actor a delivery
   goes to (the pending projection a host resumes from);
6. rename, when forked, every id derived from its actor's id;
7. show its sections (the console's) at every step without changing its
   state: tables, trees and graphs of text, linking to streams of a kind;
8. await, through its reactor's ``outstanding``, exactly the model and tool
   calls its stream requested and has not answered (until it ends), with
   claims held on those alone.

Each check is a plain function of a kind and a sample, so the tests at the
end can show it fails for a broken copy of a kind.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest
from counter_kind import COUNTER

from steward import events, replay
from steward.actors.effects import ArmTimer, Create, Deliver, Pending, Want, notify_key
from steward.actors.kind import Kind, Kinds
from steward.actors.outstanding import Outstanding
from steward.actors.prompt import PromptCache
from steward.actors.run import events as run_events
from steward.actors.sections import Branch, Cell, Graph, Section, Table, Tree
from steward.errors import StewardError
from steward.events import Event, Recorded
from steward.events.protocol import (
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolRequested,
    ToolResulted,
)
from steward.kinds import KINDS

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


class Sample(NamedTuple):
    """One stream of one golden log: a kind's sample."""

    log: str
    stream: str
    records: tuple[Recorded, ...]

    @property
    def actor(self) -> str:
        """The actor's id: the stream's name after its kind."""
        return self.stream.partition(".")[2]

    def at(self, version: int) -> str:
        return f"{self.log}.jsonl, {self.stream} at version {version}"


def kinds() -> list[Kind[Any]]:
    """Every kind in steward's table."""
    return list(KINDS)


@cache
def golden_samples() -> tuple[Sample, ...]:
    """Every stream of every golden log, decoded as an export is read."""
    samples = []
    for path in sorted(GOLDEN.glob("*.jsonl")):
        streams: dict[str, list[Recorded]] = {}
        for line in path.read_bytes().splitlines():
            rec = events.recorded_from_json(line, union=KINDS.union)
            streams.setdefault(rec.stream, []).append(rec)
        samples += [Sample(path.stem, s, tuple(r)) for s, r in streams.items()]
    return tuple(samples)


def samples_of(actor: Kind[Any]) -> list[Sample]:
    """The golden streams of kind ``actor`` (those named ``<kind>.…``)."""
    found = [s for s in golden_samples() if s.stream.partition(".")[0] == actor.name]
    assert found, (
        f"kind {actor.name!r} has no stream in any golden log under {GOLDEN}: "
        "the kind contract suite checks a kind on its golden streams; record a "
        "scenario of it (tests/golden/make_golden.py, see README.md there)"
    )
    return found


def sample(log: str, stream: str) -> Sample:
    """Golden log ``log``'s stream ``stream``."""
    return next(s for s in golden_samples() if (s.log, s.stream) == (log, stream))


def steps(actor: Kind[Any], sample: Sample) -> Iterator[tuple[Recorded, Any, Any]]:
    """Each step of ``sample``: its input's record, the state before it and
    the recorded decisions (a tuple)."""
    state = actor.decider.initial
    for step in replay.commits(sample.records, Kinds(actor)):
        head = step[0]
        assert actor.is_input(head.event), (
            f"{sample.at(head.version)}: {type(head.event).__name__} opens a "
            "step but is no input of the kind (Decider.inputs)"
        )
        yield head, state, tuple(r.event for r in step[1:])
        state = actor.fold((r.event for r in step), state)


# -- 1. fold equals evolve --------------------------------------------------------


def check_fold_is_evolve(actor: Kind[Any], sample: Sample) -> None:
    """``fold`` of every prefix equals ``evolve`` applied event by event from
    ``initial``, and from the state before (``fold(events, state)``); neither
    changes the state it is given."""
    state, prefix = actor.decider.initial, []
    for rec in sample.records:
        before = copy.deepcopy(state)
        after = actor.decider.evolve(state, rec.event)
        assert state == before, (
            f"{sample.at(rec.version)}: evolve changed the state it was given "
            f"({type(rec.event).__name__}); apply the event to a copy"
        )
        prefix.append(rec.event)
        folded = actor.fold(prefix)
        assert folded == after, (
            f"{sample.at(rec.version)}: fold of the first {len(prefix)} events is "
            "not what evolve gives event by event; a fast fold (fold_events) "
            "must give what evolve does"
        )
        assert actor.fold([rec.event], state) == after, (
            f"{sample.at(rec.version)}: fold from the state before "
            f"{type(rec.event).__name__} is not evolve's"
        )
        assert state == before, f"{sample.at(rec.version)}: fold changed its state"
        state = after


# -- 2. decide leaves its state alone and decides what was recorded ----------------


def check_decide_leaves_state(actor: Kind[Any], sample: Sample) -> None:
    """For each recorded input, ``decide`` and ``decide_and_fold`` (the host's
    path, with a `PromptCache` kept over the stream as a host keeps one)
    leave the state before alone (deep-equal to a copy taken first), agree
    with each other and with ``fold``, and give the recorded decisions."""
    prompts = PromptCache()
    for head, state, recorded in steps(actor, sample):
        where, name = sample.at(head.version), type(head.event).__name__
        before = copy.deepcopy(state)
        decided = actor.decider.decide(head.event, state)
        assert state == before, (
            f"{where}: decide({name}) changed the state it was given; a decider "
            "never writes to a state its caller holds (DESIGN §2)"
        )
        assert decided is not None, f"{where}: the decider refuses recorded {name}"
        step = actor.decide_and_fold(head.event, state, prompts)
        assert state == before, f"{where}: decide_and_fold({name}) changed its state"
        assert step is not None, f"{where}: decide_and_fold refuses recorded {name}"
        assert list(step[0]) == list(decided), (
            f"{where}: decide_and_fold decides otherwise than decide on {name}"
        )
        assert step[1] == actor.fold([head.event, *decided], state), (
            f"{where}: decide_and_fold's state after {name} is not fold's"
        )
        again, after = tuple(decided), step[1]
        assert again == recorded or (
            actor.decider.same_decisions is not None
            and actor.decider.same_decisions(recorded, again, after)
        ), f"{where}: {name} decided\n  {again}\nbut recorded\n  {recorded}"
    mismatch = replay.verify(sample.records, actor.decider.decide, Kinds(actor))
    assert mismatch is None, f"{sample.at(mismatch.version)}: {mismatch.problem}"


# -- 3. decide is deterministic --------------------------------------------------------


def check_decide_is_deterministic(actor: Kind[Any], sample: Sample) -> None:
    """Deciding an input on the state folded from the log, and on two copies
    of it, gives equal decisions; so does deciding every step again in
    reverse order (an answer may not depend on what was asked before)."""
    answers = []
    for head, state, _ in steps(actor, sample):
        where = sample.at(head.version)
        first = actor.decider.decide(head.event, state)
        one, two = copy.deepcopy(state), copy.deepcopy(state)
        assert actor.decider.decide(head.event, one) == first, (
            f"{where}: decide gives another answer on a copy of the state"
        )
        assert actor.decider.decide(head.event, two) == first, (
            f"{where}: decide gives another answer when asked again"
        )
        answers.append((head, state, first))
    for head, state, first in reversed(answers):
        assert actor.decider.decide(head.event, copy.deepcopy(state)) == first, (
            f"{sample.at(head.version)}: decide answers otherwise after later "
            "inputs were decided: its answer depends on what it was asked "
            "before (module state, an identity-keyed memo?)"
        )


# -- 4. an opening input is refused on a begun stream ------------------------------


def check_opening_refused(actor: Kind[Any], sample: Sample) -> None:
    """The stream's first event is an opening input of the kind, and
    ``decide`` refuses it (``None``) on the state after each step, the whole
    stream's included: a host that opens an actor twice records nothing."""
    opening = sample.records[0].event
    name = type(opening).__name__
    assert isinstance(opening, actor.decider.opens), (
        f"{sample.at(1)}: the stream opens with {name}, which is not in the "
        f"kind's opens ({', '.join(t.__name__ for t in actor.decider.opens) or 'none'})"
    )
    state = actor.decider.initial
    for step in replay.commits(sample.records, Kinds(actor)):
        state = actor.fold((r.event for r in step), state)
        where = sample.at(step[-1].version)
        assert actor.decider.decide(opening, state) is None, (
            f"{where}: decide accepts the opening {name} again on a stream that "
            "has begun; refuse it (return None)"
        )
        assert actor.decide_and_fold(opening, state) is None, (
            f"{where}: decide_and_fold accepts the opening {name} again"
        )


# -- 5. every effect has a pending entry its answer clears ----------------------------

EFFECTS_WITHOUT_WANT: dict[tuple[str, str, str], str] = {
    (log, "workflow.wf-cancel", key): (
        "a WorkflowCancelled of a workflow created before revision 2 names no "
        "phase run (phase_run_id came with revision 2), and pending sees the "
        "event alone: the cancel of these old runs is delivered live only"
    )
    for log, key in [
        ("workflow", "cancel:wf-cancel-design-1"),
        ("workflow_revision_1", "cancel:wf-cancel:design:1"),
    ]
}
"""Effects (by golden log, stream and key) that their event's pending does
not want, and why that is legitimate."""

NOBODY_WAITS = [
    (log, log.replace("_", "-"))
    for log in [
        "approvals",
        "budget_fail",
        "budget_pause",
        "cancel",
        "claims",
        "json_invalid",
        "json_protocol",
        "model_errors",
        "native_finish",
        "native_protocol",
        "queued",
        "sleep_wake",
        "streams",
        "subagents",
        "tool_rounds",
    ]
] + [
    ("staged", "stg-agent"),
    ("staged", "stg-chat"),
    ("staged_compressed", "stg-long"),
    ("staged_revision_5", "stg-batch"),
    ("staged_revision_5", "stg-cancel"),
]
"""The golden runs (log, run id) with no parent and no ``reply_to``."""

OPEN_AT_END: dict[tuple[str, str, str], str] = {
    **{
        (log, f"run.{run}", notify_key(run)): (
            "a run nobody waits on: its end wants its result delivered, as "
            "pending sees the record alone, but a host that routes the end "
            "finds no delivery to make (run_effects.effects gives none), and "
            "the runs projection, which reads the run's parent and reply_to, "
            "keeps no row"
        )
        for log, run in NOBODY_WAITS
    },
    ("cancel", "run.cancel-1", notify_key("cancel-1")): (
        "the child's result is for a parent cancelled before it, whose decider "
        "refuses it: nothing answers the delivery (the runs projection keeps "
        "this row too, and a host re-delivers it to no effect on each start)"
    ),
}
"""Wants (by golden log, stream and key) that no event of their stream,
or of another of the log, answers by its end, and why."""


def effect_key(effect: object) -> str | None:
    """The pending key of an effect a kind's ``effects`` asks for (model and
    tool calls are the shared vocabulary's, wanted by their requests)."""
    match effect:
        case Create(key=key) | Deliver(key=key):
            return key
        case ArmTimer(timer_id=timer_id):
            return timer_id
        case _:
            return None


def pending_of(actor: Kind[Any], rec: Recorded) -> Pending:
    """What recorded ``rec`` changes in the pending work: its kind's
    ``pending``, and, for a stream of any kind, model and tool calls wanted
    by their requests and answered by their answers (as the pending
    projection keeps them, `steward.projections.store`)."""
    assert actor.reactor.pending is not None
    own = actor.reactor.pending(rec)
    match rec.event:
        case LlmRequested(request_id=rid) | ToolRequested(request_id=rid):
            return msgspec.structs.replace(
                own, wants=(*own.wants, Want(key=rid, kind="request"))
            )
        case (
            LlmResponded(request_id=rid)
            | LlmFailed(request_id=rid)
            | ToolResulted(request_id=rid)
        ):
            return msgspec.structs.replace(own, answers=(*own.answers, rid))
        case _:
            return own


def check_effects_pending(
    actor: Kind[Any],
    sample: Sample,
    open_at_end: Mapping[tuple[str, str, str], str] = OPEN_AT_END,
) -> None:
    """A kind with ``effects`` has a ``pending``; every keyed effect (a
    creation, a delivery, a timer) of a recorded event is wanted by that
    event's pending entry, so it survives a crash; and every want is
    answered by a later event of the stream (or the stream ends), or of
    another stream of the golden log (`answered_elsewhere`: a delivery is
    answered by the actor it is delivered to), but for those
    ``open_at_end`` lists."""
    if actor.reactor.effects is None:
        return
    assert actor.reactor.pending is not None, (
        f"kind {actor.name} asks the host for effects but has no pending: the "
        "pending projection cannot tell what it waits for, and a host that dies "
        "before carrying an effect out loses it; give the kind a Reactor.pending"
    )
    latest = actor.fold(r.event for r in sample.records)
    state = actor.decider.initial
    open_: dict[str, Recorded] = {}
    for rec in sample.records:
        state = actor.decider.evolve(state, rec.event)
        asked = pending_of(actor, rec)
        wanted = {w.key for w in asked.wants}
        for effect in actor.reactor.effects(rec, state, latest):
            key = effect_key(effect)
            if key is None or (sample.log, sample.stream, key) in EFFECTS_WITHOUT_WANT:
                continue
            assert key in wanted, (
                f"{sample.at(rec.version)}: {type(rec.event).__name__} asks for "
                f"{type(effect).__name__} {key!r}, which its pending does not "
                f"want (it wants {sorted(wanted)}): a host that dies first "
                "never carries it out"
            )
        if asked.ended:
            open_.clear()
        for key in asked.answers:
            open_.pop(key, None)
        open_.update((w.key, rec) for w in asked.wants)
    open_ = answered_elsewhere(actor, sample, open_)
    expected = {k for (log, s, k) in open_at_end if (log, s) == sample[:2]}
    unanswered = {k: r.version for k, r in open_.items() if k not in expected}
    assert not unanswered, (
        f"{sample.log}.jsonl, {sample.stream}: pending wants no later event "
        f"answers (key: version wanted): {unanswered}; a host re-routes them "
        "on every start, forever; answer each in pending (its answer event's "
        "answers) or list it in OPEN_AT_END with the reason"
    )
    assert expected <= set(open_), (
        f"{sample.stream}: OPEN_AT_END lists {sorted(expected - set(open_))}, "
        "now answered: take them out"
    )


def answered_elsewhere(
    actor: Kind[Any], sample: Sample, open_: dict[str, Recorded]
) -> dict[str, Recorded]:
    """``open_`` (each key by the record that wants it) less the keys an
    event of another stream of the sample's golden log answers after it,
    through that stream's kind's pending (``actor`` for a stream of its
    kind): the pending projection's keys are one table's, so a run's
    result delivered to its ``reply_to`` is answered by that actor's
    `ChildFinished`, a cancel delivered to a child by the child's end."""
    left = dict(open_)
    for other in golden_samples():
        if other.log != sample.log or other.stream == sample.stream or not left:
            continue
        name = other.stream.partition(".")[0]
        kind = actor if name == actor.name else KINDS.get(name)
        if kind is None or kind.reactor.pending is None:
            continue
        for rec in other.records:
            for key in pending_of(kind, rec).answers:
                if key in left and left[key].position < rec.position:
                    del left[key]
    return left


# -- 6. fork renames every derived id -----------------------------------------------

FORK = "forked:copy"
"""The id the forks here are given: it contains no golden actor's id."""

NAMES_ANOTHER_ACTOR: dict[tuple[str, str], str] = {
    ("SessionOpened", "forked_from"): "a forked session names the one it came "
    "from (session_effects.detach), so neither shows the other's messages",
}
"""Fields (event type, path) of a fork's events that may hold the origin's
id, and why. (A forked run's ``reply_to``, ``parent_run_id`` and
``root_run_id`` would: run_effects.detach clears them.)"""

UNFORKABLE: dict[tuple[str, str], str] = {
    ("workflow_worktree", "workflow.wf-tree"): "a workflow run in a git "
    "worktree cannot be forked: the worktree and its branch are its own "
    "(workflow_effects.detach raises)",
}
"""Golden streams whose fork is refused, and why."""


def strings(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string in ``value`` (an event as builtins), with its path."""
    match value:
        case str():
            yield path, value
        case dict():
            for key, item in value.items():
                yield from strings(item, f"{path}.{key}" if path else str(key))
        case list() | tuple():
            for n, item in enumerate(value):
                yield from strings(item, f"{path}[{n}]")
        case _:
            pass


def derived_from(value: str, old: str) -> bool:
    """Whether ``value`` is actor ``old``'s id or holds an id derived from it."""
    return value == old or any(f"{old}{sep}" in value for sep in "/-:")


def check_fork_renames(actor: Kind[Any], sample: Sample) -> None:
    """Forking the stream's first ``n`` steps as `FORK`, for every ``n``,
    gives events in which no string field still holds the old actor's id
    or one derived from it (``old/…``, ``old-…``, ``old:…``), but for the
    fields `NAMES_ANOTHER_ACTOR` lists."""
    old, cut = sample.actor, replay.commits(sample.records, Kinds(actor))
    assert old and old not in FORK, f"{sample.stream}: choose another FORK"
    if (sample.log, sample.stream) in UNFORKABLE:
        with pytest.raises(StewardError):
            replay.fork_events(cut, old, FORK, actor.surface.detach, Kinds(actor))
        return
    for n in range(1, len(cut) + 1):
        try:
            forked = replay.fork_events(
                cut[:n], old, FORK, actor.surface.detach, Kinds(actor)
            )
        except StewardError as e:
            raise AssertionError(f"{sample.at(cut[n - 1][0].version)}: {e}") from e
        left = [
            f"{type(event).__name__}.{path} = {value!r}"
            for event in forked
            for path, value in strings(msgspec.to_builtins(event))
            if derived_from(value, old)
            and (type(event).__name__, path.split("[")[0]) not in NAMES_ANOTHER_ACTOR
        ]
        assert not left, (
            f"{sample.at(cut[n - 1][-1].version)}: forked at step {n}, these "
            f"still name {old!r}, not the fork {FORK!r}:\n  "
            + "\n  ".join(left)
            + "\nname the field in the kind's derived (Surface.derived), or rename "
            "it in its detach; or list it in NAMES_ANOTHER_ACTOR with the reason"
        )


# -- 7. sections are display data ---------------------------------------------------


def check_sections(actor: Kind[Any], sample: Sample) -> None:
    """After every step, the kind's sections (`Surface.sections`, if any)
    of the state and the records so far leave the state alone and are
    tables, trees and graphs of text: a table's rows have a cell per
    column, a graph's edges join its nodes, every link names a stream of a
    kind in the table."""
    shows = actor.surface.sections
    if shows is None:
        return
    state = actor.decider.initial
    for step in replay.commits(sample.records, Kinds(actor)):
        state = actor.fold((r.event for r in step), state)
        where = sample.at(step[-1].version)
        before = copy.deepcopy(state)
        records = sample.records[: step[-1].version]
        shown = shows(state, records)
        assert state == before, f"{where}: sections changed the state they were given"
        for section in shown:
            for problem in _section_problems(section):
                raise AssertionError(f"{where}: {section.title!r}: {problem}")


def _section_problems(section: Section) -> Iterator[str]:
    def link(target: str | None) -> Iterator[str]:
        if target is not None and target.partition(".")[0] not in KINDS:
            yield f"links {target!r}, the stream of no kind"

    match section:
        case Table(columns=columns, rows=rows):
            for row in rows:
                if len(row) != len(columns) or not all(
                    isinstance(c, Cell) and isinstance(c.text, str) for c in row
                ):
                    yield f"row {row} is not a cell of text for each of {columns}"
                for c in row:
                    yield from link(c.link)
        case Tree(roots=roots):
            todo: list[Branch] = list(roots)
            while todo:
                branch = todo.pop()
                if not isinstance(branch.label, str):
                    yield f"branch {branch} has no text"
                yield from link(branch.link)
                todo += branch.children
        case Graph(nodes=nodes, edges=edges, path=path):
            keys = {n.key for n in nodes}
            for edge in edges:
                if {edge.source, edge.target} - keys:
                    yield f"edge {edge} joins what is no node of the graph"
            for n in nodes:
                yield from link(n.link)
            for c in path:
                yield from link(c.link)
        case _:
            yield f"{section!r} is no table, tree or graph"


# -- 8. what it awaits ---------------------------------------------------------


ENDED = frozenset({"completed", "failed", "cancelled"})


def check_outstanding(actor: Kind[Any], sample: Sample) -> None:
    """After each step, the calls ``Reactor.outstanding`` says the actor
    awaits are the ones its stream requested (`LlmRequested`,
    `ToolRequested`) and has not answered (`LlmResponded`, `LlmFailed`,
    `ToolResulted`): all of them while it runs, none other ever (an ended
    actor may give up on one in flight); a claim is held only on one it
    awaits. A kind that requests no call needs no ``outstanding``."""
    outstanding = actor.reactor.outstanding
    requests = (LlmRequested, ToolRequested)
    if outstanding is None:
        asked = [r for r in sample.records if isinstance(r.event, requests)]
        assert not asked, (
            f"{sample.at(asked[0].version)}: the kind requests calls but its "
            "reactor gives no outstanding"
        )
        return
    status = actor.surface.status
    state, open_ = actor.decider.initial, list[str]()
    for step in replay.commits(sample.records, Kinds(actor)):
        for rec in step:
            match rec.event:
                case LlmRequested(request_id=rid) | ToolRequested(request_id=rid):
                    open_.append(rid)
                case (
                    LlmResponded(request_id=rid)
                    | LlmFailed(request_id=rid)
                    | ToolResulted(request_id=rid)
                ) if rid in open_:
                    open_.remove(rid)
        state = actor.fold((r.event for r in step), state)
        awaited = outstanding(state)
        at = sample.at(step[-1].version)
        stray = [r for r in awaited.requested if r not in open_]
        assert not stray, f"{at}: awaits {stray}, never requested or answered"
        if status is None or status(state) not in ENDED:
            missed = [r for r in open_ if not awaited.awaits(r)]
            assert not missed, f"{at}: requested {missed} and does not await it"
        unawaited = [r for r, _, _ in awaited.claims if not awaited.awaits(r)]
        assert not unawaited, f"{at}: holds a claim on {unawaited}, not awaited"


# -- the suite ------------------------------------------------------------------------

CHECKS: dict[str, Callable[[Kind[Any], Sample], None]] = {
    "fold": check_fold_is_evolve,
    "decide_pure": check_decide_leaves_state,
    "decide_deterministic": check_decide_is_deterministic,
    "opening": check_opening_refused,
    "pending": check_effects_pending,
    "fork": check_fork_renames,
    "sections": check_sections,
    "outstanding": check_outstanding,
}

KNOWN: dict[tuple[str, str], str] = {}
"""(check, kind) pairs that fail on the current code, and why."""


def cases() -> list[Any]:
    return [
        pytest.param(
            check,
            actor.name,
            id=f"{actor.name}-{check}",
            marks=[
                pytest.mark.xfail(
                    raises=AssertionError, strict=True, reason=KNOWN[check, actor.name]
                )
            ]
            if (check, actor.name) in KNOWN
            else [],
        )
        for actor in kinds()
        for check in CHECKS
    ]


@pytest.mark.parametrize(("check", "name"), cases())
def test_kind_keeps_the_contract(check: str, name: str) -> None:
    """Kind ``name`` passes contract check ``check`` on every golden stream of it."""
    actor = next(k for k in kinds() if k.name == name)
    for each in samples_of(actor):
        CHECKS[check](actor, each)


@pytest.mark.parametrize("name", [k.name for k in kinds()])
def test_every_kind_has_a_golden_stream(name: str) -> None:
    """Each kind in the table has a stream in some golden log to be checked on."""
    assert samples_of(next(k for k in kinds() if k.name == name))


def test_the_listed_exceptions_are_golden_streams() -> None:
    """Every exception the checks list names a stream of a golden log."""
    known = {(s.log, s.stream) for s in golden_samples()}
    listed = {k[:2] for k in [*EFFECTS_WITHOUT_WANT, *OPEN_AT_END]} | set(UNFORKABLE)
    assert listed <= known, sorted(listed - known)


def test_a_superseded_timer_leaves_no_pending_entry() -> None:
    """A debounce timer a later message superseded leaves nothing pending."""
    each = sample("session", "session.cli:golden")
    check_effects_pending(session_kind(), each, open_at_end={})


# -- the suite fails for a kind that breaks a rule ------------------------------------


def broken(actor: Kind[Any], **changes: Any) -> Kind[Any]:
    """A copy of ``actor`` with ``changes``."""
    return actor.replaced(**changes)


def fresh(actor: Kind[Any]) -> Any:
    """A copy of ``actor``'s initial state, for a broken kind that writes to
    the states it is given (the kind's own is shared by every test)."""
    return copy.deepcopy(actor.decider.initial)


RUN_SAMPLE = ("json_protocol", "run.json-protocol")
SESSION_SAMPLE = ("session_subagents", "session.cli:subs")


def run_kind() -> Kind[Any]:
    return KINDS["run"]


def session_kind() -> Kind[Any]:
    return KINDS["session"]


def test_a_kind_without_a_golden_stream_is_named() -> None:
    """A kind no golden log holds a stream of fails, naming the kind."""
    with pytest.raises(AssertionError, match="kind 'counter' has no stream"):
        samples_of(COUNTER)


def test_a_fold_that_is_not_evolve_fails() -> None:
    """A fast fold that drops an event is caught."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    check_fold_is_evolve(actor, each)
    assert actor.decider.fold_events is not None
    fold_events = actor.decider.fold_events
    lossy = broken(actor, fold_events=lambda es, s: fold_events(list(es)[:-1], s))
    with pytest.raises(AssertionError, match="not what evolve gives"):
        check_fold_is_evolve(lossy, each)


def test_an_evolve_that_writes_to_its_state_fails() -> None:
    """An evolve that changes the state it is given is caught: a dict inside
    it, since a frozen state's fields cannot be set."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)

    def evolve(state: Any, event: Event) -> Any:
        state.metadata["seen"] = state.metadata.get("seen", 0) + 1
        return actor.decider.evolve(state, event)

    with pytest.raises(AssertionError, match="evolve changed the state"):
        check_fold_is_evolve(broken(actor, evolve=evolve, initial=fresh(actor)), each)


def test_a_decide_that_writes_to_its_state_fails() -> None:
    """A decide that changes the state it is given is caught, a dict inside
    it included."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    check_decide_leaves_state(actor, each)

    def decide(input: Event, state: Any) -> Any:
        state.metadata["seen"] = state.metadata.get("seen", 0) + 1
        return actor.decider.decide(input, state)

    with pytest.raises(AssertionError, match="decide.*changed the state"):
        check_decide_leaves_state(
            broken(actor, decide=decide, initial=fresh(actor)), each
        )


def test_a_decide_that_decides_otherwise_fails() -> None:
    """A decide whose answer is not the recorded one is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    decide = actor.decider.decide
    forgetful = broken(actor, decide=lambda i, s: (decide(i, s) or [])[:-1])
    with pytest.raises(AssertionError, match="decide"):
        check_decide_leaves_state(forgetful, each)


def test_a_decide_that_remembers_fails() -> None:
    """A decide whose answer depends on how often it was asked is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    check_decide_is_deterministic(actor, each)
    calls, decide = itertools.count(), actor.decider.decide

    def flaky(input: Event, state: Any) -> Any:
        decided = decide(input, state)
        return decided[:-1] if decided and next(calls) % 2 else decided

    with pytest.raises(AssertionError, match="another answer"):
        check_decide_is_deterministic(broken(actor, decide=flaky), each)


def test_an_opening_taken_twice_fails() -> None:
    """A decider that accepts its opening input on a begun stream is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    check_opening_refused(actor, each)
    decide = actor.decider.decide

    def reopens(input: Event, state: Any) -> Any:
        return [] if isinstance(input, actor.decider.opens) else decide(input, state)

    with pytest.raises(AssertionError, match="accepts the opening SessionOpened"):
        check_opening_refused(broken(actor, decide=reopens), each)


def test_a_want_never_answered_fails() -> None:
    """A pending that answers nothing leaves its wants open, and is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    check_effects_pending(actor, each)
    assert actor.reactor.pending is not None
    pending = actor.reactor.pending
    deaf = broken(actor, pending=lambda e: Pending(wants=pending(e).wants))
    with pytest.raises(AssertionError, match="pending wants no later event answers"):
        check_effects_pending(deaf, each)


def test_an_effect_without_a_want_fails() -> None:
    """An effect no pending entry wants (a timer a crash loses) is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    with pytest.raises(AssertionError, match="which its pending does not want"):
        check_effects_pending(broken(actor, pending=lambda e: Pending()), each)


def test_a_kind_with_effects_and_no_pending_fails() -> None:
    """A kind that asks for effects but says nothing of what it waits for
    cannot be built (unless its read models keep its pending rows, as the
    run's do: the check below then fails for it, a known exception)."""
    with pytest.raises(ValueError, match="says nothing of what it waits for"):
        broken(session_kind(), pending=None)
    each = sample(*RUN_SAMPLE)
    with pytest.raises(AssertionError, match="has no pending"):
        check_effects_pending(broken(run_kind(), pending=None), each)


def test_a_fork_that_keeps_a_derived_id_fails() -> None:
    """A fork whose first input still holds an id derived from its origin is
    caught, naming the field."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    check_fork_renames(actor, each)
    detach = actor.surface.detach
    assert detach is not None

    def leaky(event: Event, origin: str) -> Event:
        event = detach(event, origin)
        if isinstance(event, run_events.RunCreated):
            return msgspec.structs.replace(event, context_id=f"{origin}/ctx")
        return event

    with pytest.raises(AssertionError, match=r"RunCreated\.context_id"):
        check_fork_renames(broken(actor, detach=leaky), each)


def forgetting(actor: Kind[Any], event_type: type[Event], part: str) -> Kind[Any]:
    """A copy of ``actor`` whose pending forgets its ``part`` (``wants`` or
    ``answers``) of the events of ``event_type``."""
    pending = actor.reactor.pending
    assert pending is not None

    def forgetful(rec: Recorded) -> Pending:
        asked = pending(rec)
        if isinstance(rec.event, event_type):
            return msgspec.structs.replace(asked, **{part: ()})
        return asked

    return broken(actor, pending=forgetful)


@pytest.mark.parametrize(
    ("event_type", "part", "where", "match"),
    [
        (
            run_events.RunSlept,
            "wants",
            ("sleep_wake", "run.sleep-wake"),
            "asks for ArmTimer 'sleep-wake/wake/1', which its pending does not want",
        ),
        (
            run_events.RunCompleted,
            "wants",
            ("subagents", "run.subagents-1"),
            "asks for Deliver 'notify:subagents-1', which its pending does not want",
        ),
        (
            events.ChildFinished,
            "answers",
            ("subagents", "run.subagents-1"),
            r"no later event answers .*\{'notify:subagents-1': \d+\}",
        ),
        (
            run_events.RunCancelled,
            "answers",
            ("cancel", "run.cancel"),
            r"no later event answers .*\{'cancel:cancel-1': \d+\}",
        ),
    ],
)
def test_a_run_pending_that_forgets_fails(
    event_type: type[Event], part: str, where: tuple[str, str], match: str
) -> None:
    """A run's pending that forgets a want, or an answer given in another
    stream (a parent's `ChildFinished`, a child's end), is caught."""
    actor, each = run_kind(), sample(*where)
    check_effects_pending(actor, each)
    with pytest.raises(AssertionError, match=match):
        check_effects_pending(forgetting(actor, event_type, part), each)


def test_a_kind_that_forgets_a_call_it_awaits_fails() -> None:
    """A reactor that awaits nothing (its kind never folds its calls into
    its `Outstanding`) is caught at the first call requested."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    check_outstanding(actor, each)
    forgetful = broken(actor, outstanding=lambda state: Outstanding())
    with pytest.raises(AssertionError, match="does not await it"):
        check_outstanding(forgetful, each)


def test_a_kind_that_awaits_an_answered_call_fails() -> None:
    """A reactor that still awaits a call once its answer is in (its
    kind's evolve dropped the answer) is caught."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    stale = broken(
        actor,
        outstanding=lambda state: Outstanding(
            requested=(*state.outstanding.requested, f"{state.run_id}/llm/0")
        ),
    )
    with pytest.raises(AssertionError, match="never requested or answered"):
        check_outstanding(stale, each)


def test_a_kind_that_requests_calls_must_say_what_it_awaits() -> None:
    """A kind whose events request calls and whose reactor gives no
    ``outstanding`` cannot be made, naming the fix."""
    with pytest.raises(ValueError, match="says nothing of which calls it awaits"):
        broken(run_kind(), outstanding=None)


def test_sections_with_a_row_short_of_a_cell_fail() -> None:
    """A table whose row has fewer cells than columns is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    check_sections(actor, each)

    def short(state: Any, records: Any) -> tuple[Section, ...]:
        return (Table(title="t", columns=("a", "b"), rows=((Cell("only a"),),)),)

    with pytest.raises(AssertionError, match="not a cell of text for each of"):
        check_sections(broken(actor, sections=short), each)


def test_sections_that_write_to_their_state_fail() -> None:
    """Sections that change the state they are given are caught."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)

    def writes(state: Any, records: Any) -> tuple[Section, ...]:
        state.metadata["shown"] = True
        return ()

    kind = broken(actor, sections=writes, initial=fresh(actor))
    with pytest.raises(AssertionError, match="sections changed the state"):
        check_sections(kind, each)
