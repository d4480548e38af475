"""The kind contract: a kind keeps DESIGN §2's promises on its recorded streams.

A kind is checked on sample streams of it: golden logs, each one scenario
recorded by a real host and exported (``steward events export``), read by
`read_samples`. On each of its streams a kind must

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

Each check is a plain function of a kind, a sample and the `Terms` it is
checked on (the kind table, every sample, the exceptions granted), so a
test can show it fails for a broken copy of a kind; `CHECKS` names them
all, and `check_kind` runs them all on every sample of a kind. A failed
check raises `AssertionError`, naming the golden log, the stream and the
version. steward's own kinds are checked in ``tests/unit/test_kind_contract.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from steward import events, replay
from steward.actors.effects import ArmTimer, Create, Deliver, Pending, calls_pending
from steward.actors.kind import Kind, Kinds
from steward.actors.prompt import PromptCache
from steward.actors.sections import Branch, Cell, Graph, Section, Table, Tree
from steward.errors import StewardError
from steward.events import EventUnion, Recorded
from steward.events.protocol import (
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolRequested,
    ToolResulted,
)


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
        """Where version ``version`` of the sample is, for a failure."""
        return f"{self.log}.jsonl, {self.stream} at version {version}"


def read_samples(directory: Path, union: EventUnion) -> tuple[Sample, ...]:
    """Every stream of every golden log (``*.jsonl``, named by its stem) in
    ``directory``, decoded into ``union`` as an export is read."""
    samples = []
    for path in sorted(directory.glob("*.jsonl")):
        streams: dict[str, list[Recorded]] = {}
        for line in path.read_bytes().splitlines():
            rec = events.recorded_from_json(line, union=union)
            streams.setdefault(rec.stream, []).append(rec)
        samples += [Sample(path.stem, s, tuple(r)) for s, r in streams.items()]
    return tuple(samples)


def samples_of(actor: Kind[Any], samples: Iterable[Sample]) -> list[Sample]:
    """The streams of kind ``actor`` (those named ``<kind>.…``) among ``samples``."""
    found = [s for s in samples if s.stream.partition(".")[0] == actor.name]
    assert found, (
        f"kind {actor.name!r} has no stream in any golden log: the kind "
        "contract checks a kind on its golden streams; record a scenario of it"
    )
    return found


@dataclass(frozen=True)
class Terms:
    """What a kind is checked on besides its sample: the kind table
    (another stream's kind answers a want, a section links to a stream of
    one), every sample (another stream of the sample's golden log answers
    a want), and the exceptions granted, each with its reason."""

    kinds: Kinds
    samples: tuple[Sample, ...] = ()
    effects_without_want: Mapping[tuple[str, str, str], str] = field(
        default_factory=dict
    )
    """Effects (by golden log, stream and key) that their event's pending
    does not want."""
    open_at_end: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    """Wants (by golden log, stream and key) that no event of their stream,
    or of another of the log, answers by its end."""
    names_another_actor: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """Fields (event type, path) of a fork's events that may hold the
    origin's id."""
    unforkable: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """Golden streams (log, stream) whose fork is refused."""


Check = Callable[[Kind[Any], Sample, Terms], None]
"""A check of the contract: it raises `AssertionError` where the kind
breaks its promise on the sample."""


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


def check_fold_is_evolve(actor: Kind[Any], sample: Sample, _terms: Terms) -> None:
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


def check_decide_leaves_state(actor: Kind[Any], sample: Sample, _terms: Terms) -> None:
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
    mismatch = replay.verify(sample.records, actor.decider.decide, kinds=Kinds(actor))
    assert mismatch is None, f"{sample.at(mismatch.version)}: {mismatch.problem}"


# -- 3. decide is deterministic --------------------------------------------------------


def check_decide_is_deterministic(
    actor: Kind[Any], sample: Sample, _terms: Terms
) -> None:
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


def check_opening_refused(actor: Kind[Any], sample: Sample, _terms: Terms) -> None:
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
    by their requests and answered by their answers (`calls_pending`, as
    the pending projection keeps them, `steward.projections.store`)."""
    assert actor.reactor.pending is not None
    own = actor.reactor.pending(rec)
    calls = calls_pending(rec.event)
    if calls is None:
        return own
    return msgspec.structs.replace(
        own,
        wants=(*own.wants, *calls.wants),
        answers=(*own.answers, *calls.answers),
    )


def check_effects_pending(actor: Kind[Any], sample: Sample, terms: Terms) -> None:
    """A kind with ``effects`` has a ``pending``; every keyed effect (a
    creation, a delivery, a timer) of a recorded event is wanted by that
    event's pending entry, so it survives a crash; and every want is
    answered by a later event of the stream (or the stream ends), or of
    another stream of the golden log (`answered_elsewhere`: a delivery is
    answered by the actor it is delivered to), but for the effects and
    wants the terms grant (``effects_without_want``, ``open_at_end``)."""
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
            if key is None or (*sample[:2], key) in terms.effects_without_want:
                continue
            assert key in wanted, (
                f"{sample.at(rec.version)}: {type(rec.event).__name__} asks for "
                f"{type(effect).__name__} {key!r}, which its pending does not "
                f"want (it wants {sorted(wanted)}): a host that dies first "
                "never carries it out; or list it in effects_without_want with "
                "the reason"
            )
        if asked.ended:
            open_.clear()
        for key in asked.answers:
            open_.pop(key, None)
        open_.update((w.key, rec) for w in asked.wants)
    open_ = answered_elsewhere(actor, sample, open_, terms)
    expected = {k for (log, s, k) in terms.open_at_end if (log, s) == sample[:2]}
    unanswered = {k: r.version for k, r in open_.items() if k not in expected}
    assert not unanswered, (
        f"{sample.log}.jsonl, {sample.stream}: pending wants no later event "
        f"answers (key: version wanted): {unanswered}; a host re-routes them "
        "on every start, forever; answer each in pending (its answer event's "
        "answers) or list it in open_at_end with the reason"
    )
    assert expected <= set(open_), (
        f"{sample.stream}: open_at_end lists {sorted(expected - set(open_))}, "
        "now answered: take them out"
    )


def answered_elsewhere(
    actor: Kind[Any], sample: Sample, open_: dict[str, Recorded], terms: Terms
) -> dict[str, Recorded]:
    """``open_`` (each key by the record that wants it) less the keys an
    event of another stream of the sample's golden log (among the terms'
    samples) answers after it, through that stream's kind's pending (of
    the terms' kinds; ``actor`` for a stream of its kind): the pending
    projection's keys are one table's, so a run's result delivered to its
    ``reply_to`` is answered by that actor's `ChildFinished`, a cancel
    delivered to a child by the child's end."""
    left = dict(open_)
    for other in terms.samples:
        if other.log != sample.log or other.stream == sample.stream or not left:
            continue
        name = other.stream.partition(".")[0]
        kind = actor if name == actor.name else terms.kinds.get(name)
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


def check_fork_renames(actor: Kind[Any], sample: Sample, terms: Terms) -> None:
    """Forking the stream's first ``n`` steps as `FORK`, for every ``n``,
    gives events in which no string field still holds the old actor's id
    or one derived from it (``old/…``, ``old-…``, ``old:…``), but for the
    fields the terms name (``names_another_actor``); the fork of a stream
    they list as ``unforkable`` is refused (`StewardError`)."""
    old, cut = sample.actor, replay.commits(sample.records, Kinds(actor))
    assert old and old not in FORK, f"{sample.stream}: choose another FORK"
    if (sample.log, sample.stream) in terms.unforkable:
        try:
            replay.fork_events(cut, old, FORK, actor.surface.detach, kinds=Kinds(actor))
        except StewardError:
            return
        raise AssertionError(
            f"{sample.log}.jsonl, {sample.stream}: listed as unforkable, and "
            "forked: take it out of unforkable"
        )
    for n in range(1, len(cut) + 1):
        try:
            forked = replay.fork_events(
                cut[:n], old, FORK, actor.surface.detach, kinds=Kinds(actor)
            )
        except StewardError as e:
            raise AssertionError(f"{sample.at(cut[n - 1][0].version)}: {e}") from e
        left = [
            f"{type(event).__name__}.{path} = {value!r}"
            for event in forked
            for path, value in strings(msgspec.to_builtins(event))
            if derived_from(value, old)
            and (type(event).__name__, path.split("[")[0])
            not in terms.names_another_actor
        ]
        assert not left, (
            f"{sample.at(cut[n - 1][-1].version)}: forked at step {n}, these "
            f"still name {old!r}, not the fork {FORK!r}:\n  "
            + "\n  ".join(left)
            + "\nname the field in the kind's derived (Surface.derived), or rename "
            "it in its detach; or list it in names_another_actor with the reason"
        )


# -- 7. sections are display data ---------------------------------------------------


def check_sections(actor: Kind[Any], sample: Sample, terms: Terms) -> None:
    """After every step, the kind's sections (`Surface.sections`, if any)
    of the state and the records so far leave the state alone and are
    tables, trees and graphs of text: a table's rows have a cell per
    column, a graph's edges join its nodes, every link names a stream of a
    kind of the terms' table."""
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
            for problem in _section_problems(section, terms.kinds):
                raise AssertionError(f"{where}: {section.title!r}: {problem}")


def _section_problems(section: Section, kinds: Kinds) -> Iterator[str]:
    def link(target: str | None) -> Iterator[str]:
        if target is not None and target.partition(".")[0] not in kinds:
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
"""The statuses an actor ends in (`Surface.status`)."""


def check_outstanding(actor: Kind[Any], sample: Sample, _terms: Terms) -> None:
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

CHECKS: dict[str, Check] = {
    "fold": check_fold_is_evolve,
    "decide_pure": check_decide_leaves_state,
    "decide_deterministic": check_decide_is_deterministic,
    "opening": check_opening_refused,
    "pending": check_effects_pending,
    "fork": check_fork_renames,
    "sections": check_sections,
    "outstanding": check_outstanding,
}
"""Every check, by a short name (a test's id)."""


def check_kind(
    actor: Kind[Any],
    samples: Iterable[Sample],
    kinds: Kinds,
    **exceptions: Mapping[Any, str],
) -> None:
    """Every check on every sample of ``actor`` among ``samples`` (there
    must be one), with ``kinds`` the table the samples' kinds are in and
    ``exceptions`` the `Terms` granted by name (``open_at_end=...``)."""
    terms = Terms(kinds, tuple(samples), **exceptions)
    for sample in samples_of(actor, terms.samples):
        for check in CHECKS.values():
            check(actor, sample, terms)
