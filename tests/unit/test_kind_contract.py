"""The kind contract (`steward.testing.kinds`), run over steward's kinds.

Parametrized over every kind in `steward.kinds.KINDS` and every check, as
the log contract suite is over both logs, with the committed golden logs
(``tests/golden/*.jsonl``) as each kind's samples: a kind with no stream in
any golden log fails here, so a new kind comes with one (record a scenario
of it: ``tests/golden/make_golden.py``, see README.md there). The
exceptions steward's golden streams are granted are here, each with its
reason; the tests at the end show each check fails for a broken copy of a
kind.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
from counter_kind import COUNTER

from steward import events
from steward.actors.effects import Pending, notify_key
from steward.actors.kind import Kind
from steward.actors.outstanding import Outstanding
from steward.actors.run import events as run_events
from steward.actors.sections import Cell, Section, Table
from steward.events import Event, Recorded
from steward.kinds import KINDS
from steward.testing import kinds as contract
from steward.testing.kinds import Check, Sample, Terms, check_kind

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@cache
def golden_samples() -> tuple[Sample, ...]:
    """Every stream of every golden log, decoded as an export is read."""
    return contract.read_samples(GOLDEN, KINDS.union)


def sample(log: str, stream: str) -> Sample:
    """Golden log ``log``'s stream ``stream``."""
    return next(s for s in golden_samples() if (s.log, s.stream) == (log, stream))


# -- the exceptions granted to steward's golden streams -------------------------------

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

EXCEPTIONS: dict[str, Mapping[Any, str]] = {
    "effects_without_want": EFFECTS_WITHOUT_WANT,
    "open_at_end": OPEN_AT_END,
    "names_another_actor": NAMES_ANOTHER_ACTOR,
    "unforkable": UNFORKABLE,
}
"""The exceptions above, by the names the checks take them under (`Terms`)."""


def terms() -> Terms:
    """steward's terms: its kinds, its golden samples (looked up when
    asked, so a test may put the streams it recorded in their place) and
    its exceptions."""
    return Terms(KINDS, golden_samples(), **EXCEPTIONS)


def on_terms(check: Check) -> Callable[[Kind[Any], Sample], None]:
    """``check`` on steward's `terms`."""
    return lambda actor, each: check(actor, each, terms())


def check_effects_pending(
    actor: Kind[Any],
    each: Sample,
    open_at_end: Mapping[tuple[str, str, str], str] = OPEN_AT_END,
) -> None:
    """The pending check on steward's terms, with the wants ``open_at_end``
    lists left open (a test's own, for a log it recorded)."""
    contract.check_effects_pending(
        actor, each, replace(terms(), open_at_end=open_at_end)
    )


# -- the suite ------------------------------------------------------------------------

CHECKS: dict[str, Callable[[Kind[Any], Sample], None]] = {
    name: on_terms(check) for name, check in contract.CHECKS.items()
}
"""Every check, by name, on steward's terms (the integration tests run
them over the streams they record)."""

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
        for actor in KINDS
        for check in CHECKS
    ]


@pytest.mark.parametrize(("check", "name"), cases())
def test_kind_keeps_the_contract(check: str, name: str) -> None:
    """Kind ``name`` passes contract check ``check`` on every golden stream of it."""
    actor = KINDS[name]
    for each in contract.samples_of(actor, golden_samples()):
        CHECKS[check](actor, each)


@pytest.mark.parametrize("name", KINDS.names)
def test_every_kind_has_a_golden_stream(name: str) -> None:
    """Each kind in the table has a stream in some golden log to be checked on."""
    assert contract.samples_of(KINDS[name], golden_samples())


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
        check_kind(COUNTER, golden_samples(), KINDS)


def test_a_fold_that_is_not_evolve_fails() -> None:
    """A fast fold that drops an event is caught, by its check and by
    `check_kind`, which runs every check on every golden stream of a kind
    (as an extension runs the contract on its own)."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    contract.check_fold_is_evolve(actor, each, terms())
    check_kind(actor, golden_samples(), KINDS, **EXCEPTIONS)
    assert actor.decider.fold_events is not None
    fold_events = actor.decider.fold_events
    lossy = broken(actor, fold_events=lambda es, s: fold_events(list(es)[:-1], s))
    with pytest.raises(AssertionError, match="not what evolve gives"):
        contract.check_fold_is_evolve(lossy, each, terms())
    with pytest.raises(AssertionError, match="not what evolve gives"):
        check_kind(lossy, golden_samples(), KINDS, **EXCEPTIONS)


def test_an_evolve_that_writes_to_its_state_fails() -> None:
    """An evolve that changes the state it is given is caught: a dict inside
    it, since a frozen state's fields cannot be set."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)

    def evolve(state: Any, event: Event) -> Any:
        state.metadata["seen"] = state.metadata.get("seen", 0) + 1
        return actor.decider.evolve(state, event)

    with pytest.raises(AssertionError, match="evolve changed the state"):
        contract.check_fold_is_evolve(
            broken(actor, evolve=evolve, initial=fresh(actor)), each, terms()
        )


def test_a_decide_that_writes_to_its_state_fails() -> None:
    """A decide that changes the state it is given is caught, a dict inside
    it included."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)
    contract.check_decide_leaves_state(actor, each, terms())

    def decide(input: Event, state: Any) -> Any:
        state.metadata["seen"] = state.metadata.get("seen", 0) + 1
        return actor.decider.decide(input, state)

    with pytest.raises(AssertionError, match="decide.*changed the state"):
        contract.check_decide_leaves_state(
            broken(actor, decide=decide, initial=fresh(actor)), each, terms()
        )


def test_a_decide_that_decides_otherwise_fails() -> None:
    """A decide whose answer is not the recorded one is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    decide = actor.decider.decide
    forgetful = broken(actor, decide=lambda i, s: (decide(i, s) or [])[:-1])
    with pytest.raises(AssertionError, match="decide"):
        contract.check_decide_leaves_state(forgetful, each, terms())


def test_a_decide_that_remembers_fails() -> None:
    """A decide whose answer depends on how often it was asked is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    contract.check_decide_is_deterministic(actor, each, terms())
    calls, decide = itertools.count(), actor.decider.decide

    def flaky(input: Event, state: Any) -> Any:
        decided = decide(input, state)
        return decided[:-1] if decided and next(calls) % 2 else decided

    with pytest.raises(AssertionError, match="another answer"):
        contract.check_decide_is_deterministic(
            broken(actor, decide=flaky), each, terms()
        )


def test_an_opening_taken_twice_fails() -> None:
    """A decider that accepts its opening input on a begun stream is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    contract.check_opening_refused(actor, each, terms())
    decide = actor.decider.decide

    def reopens(input: Event, state: Any) -> Any:
        return [] if isinstance(input, actor.decider.opens) else decide(input, state)

    with pytest.raises(AssertionError, match="accepts the opening SessionOpened"):
        contract.check_opening_refused(broken(actor, decide=reopens), each, terms())


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
    contract.check_fork_renames(actor, each, terms())
    detach = actor.surface.detach
    assert detach is not None

    def leaky(event: Event, origin: str) -> Event:
        event = detach(event, origin)
        if isinstance(event, run_events.RunCreated):
            return msgspec.structs.replace(event, context_id=f"{origin}/ctx")
        return event

    with pytest.raises(AssertionError, match=r"RunCreated\.context_id"):
        contract.check_fork_renames(broken(actor, detach=leaky), each, terms())


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
    contract.check_outstanding(actor, each, terms())
    forgetful = broken(actor, outstanding=lambda state: Outstanding())
    with pytest.raises(AssertionError, match="does not await it"):
        contract.check_outstanding(forgetful, each, terms())


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
        contract.check_outstanding(stale, each, terms())


def test_a_kind_that_requests_calls_must_say_what_it_awaits() -> None:
    """A kind whose events request calls and whose reactor gives no
    ``outstanding`` cannot be made, naming the fix."""
    with pytest.raises(ValueError, match="says nothing of which calls it awaits"):
        broken(run_kind(), outstanding=None)


def test_sections_with_a_row_short_of_a_cell_fail() -> None:
    """A table whose row has fewer cells than columns is caught."""
    actor, each = session_kind(), sample(*SESSION_SAMPLE)
    contract.check_sections(actor, each, terms())

    def short(state: Any, records: Any) -> tuple[Section, ...]:
        return (Table(title="t", columns=("a", "b"), rows=((Cell("only a"),),)),)

    with pytest.raises(AssertionError, match="not a cell of text for each of"):
        contract.check_sections(broken(actor, sections=short), each, terms())


def test_sections_that_write_to_their_state_fail() -> None:
    """Sections that change the state they are given are caught."""
    actor, each = run_kind(), sample(*RUN_SAMPLE)

    def writes(state: Any, records: Any) -> tuple[Section, ...]:
        state.metadata["shown"] = True
        return ()

    kind = broken(actor, sections=writes, initial=fresh(actor))
    with pytest.raises(AssertionError, match="sections changed the state"):
        contract.check_sections(kind, each, terms())
