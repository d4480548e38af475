"""The workflow decider (spec 001, Alphred): given events, when an input,
then its decisions; the state machines, transitions, retries, loop
backtracking, branch reactivation, hand-off caps and routing decisions."""

from __future__ import annotations

from typing import Any

import hypothesis
import msgspec
import pytest
from hypothesis import strategies as st
from msgspec.structs import replace

from steward import replay
from steward.actors.effects import Want, WantKind
from steward.actors.run.events import (
    LATEST_REVISION,
    CancelRequested,
    ChildFinished,
    EffectClaimed,
    RunSettings,
    ToolRequested,
    ToolResulted,
)
from steward.actors.run.state import run_stream
from steward.actors.workflow import decider as w
from steward.actors.workflow import definition as workflows
from steward.actors.workflow.events import (
    DEFAULT_MAX_STEPS,
    WORKFLOW_REVISION,
    Artifact,
    EdgeDef,
    NodeDef,
    PhaseCompleted,
    PhaseFailed,
    PhaseRequeued,
    PhaseSkipped,
    PhaseStarted,
    TransitionTaken,
    WorkflowCancelled,
    WorkflowCancelRequested,
    WorkflowCompleted,
    WorkflowCreated,
    WorkflowDef,
    WorkflowFailed,
    WorkflowPaused,
    WorkflowPauseRequested,
    WorkflowResumed,
    WorkflowResumeRequested,
    WorkflowStarted,
    Worktree,
)
from steward.actors.workflow.graph import (
    MAX_CHARS_PER_ARTIFACT,
    MAX_CONTEXT_CHARS_TOTAL,
    MAX_UPSTREAM_ARTIFACTS,
    auto_loops,
    handoff,
    head_tail,
    routing_decision,
    upstream_text,
)
from steward.actors.workflow.reactor import (
    NATIVE_RESULT_NOTE,
    RESULT_NOTE,
    effects,
    pending,
    phase_run,
)
from steward.config import Settings
from steward.events import Event, Recorded
from steward.kinds import KINDS

STREAM = "workflow.wf"


def node(key: str, retries: int = 0, prompt: str = "") -> NodeDef:
    return NodeDef(key=key, provider="default", max_retries=retries, prompt=prompt)


def auto(source: str, target: str, priority: int = 1) -> EdgeDef:
    return EdgeDef(source=source, target=target, priority=priority, auto=True)


def guard(source: str, target: str, when: str, priority: int = 1) -> EdgeDef:
    return EdgeDef(source=source, target=target, priority=priority, when=when)


def definition(nodes: list[NodeDef], edges: list[EdgeDef]) -> WorkflowDef:
    return WorkflowDef(key="test", version=1, nodes=tuple(nodes), edges=tuple(edges))


DIR = definition(
    [node("design"), node("implement"), node("review")],
    [
        auto("design", "implement"),
        guard("implement", "design", "report.needs_revision == true"),
        auto("implement", "review", 2),
        guard("review", "implement", 'decision == "changes_requested"'),
    ],
)


class Story:
    """A workflow run's log, grown one input at a time."""

    def __init__(self) -> None:
        self.log: list[Event] = []
        self.state = w.initial

    def when(self, input: Event) -> list[Event] | None:
        decisions = w.decide(input, self.state)
        if decisions is not None:
            self.log += [input, *decisions]
            for event in [input, *decisions]:
                self.state = w.evolve(self.state, event)
        return decisions

    def finish(
        self,
        status: str = "completed",
        output: str = "a report",
        at: float = 1.0,
        **metadata: Any,
    ) -> list[Event] | None:
        """The phase in flight's run ends."""
        assert self.state.current is not None, "no phase runs"
        run_id = w.phase_of(self.state, self.state.current).run_id
        assert run_id is not None
        result = ChildFinished(
            stream=run_stream(run_id), status=status, output=output, metadata=metadata
        )
        return self.when(msgspec.structs.replace(result, at=at))

    def phase(self, key: str) -> w.Phase:
        return w.phase_of(self.state, key)

    def records(self) -> list[Recorded]:
        return [
            Recorded(stream=STREAM, version=n, position=n, at=float(n), event=e)
            for n, e in enumerate(self.log, start=1)
        ]


def started(defn: WorkflowDef = DIR, revision: int = 0, **inputs: str) -> Story:
    story = Story()
    story.when(
        WorkflowCreated(
            workflow_id="wf", definition=defn, inputs=inputs, at=0.5, revision=revision
        )
    )
    return story


# -- the state machines ------------------------------------------------------------


def test_the_move_tables_are_the_specs() -> None:
    """The run may go pending -> running -> completed | failed | cancelled and
    running <-> paused; a phase pending -> running -> completed | failed,
    pending -> skipped, failed -> running, completed -> pending and
    skipped -> pending; nothing else."""
    assert w.RUN_MOVES == {
        ("pending", "running"),
        ("running", "completed"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("running", "paused"),
        ("paused", "running"),
    }
    assert w.PHASE_MOVES == {
        ("pending", "running"),
        ("running", "completed"),
        ("running", "failed"),
        ("pending", "skipped"),
        ("failed", "running"),
        ("completed", "pending"),
        ("skipped", "pending"),
    }


PHASE_STATUSES = ("pending", "running", "completed", "failed", "skipped")


@pytest.mark.parametrize("before", PHASE_STATUSES)
@pytest.mark.parametrize("after", PHASE_STATUSES)
def test_a_phase_move_off_the_table_is_refused(before: str, after: str) -> None:
    """Every (from, to) pair of phase statuses: allowed when the table has it,
    refused otherwise."""
    phase = w.Phase(node="n", status=before)  # type: ignore[arg-type]
    if (before, after) in w.PHASE_MOVES:
        w._move_phase(phase, after)
    else:
        with pytest.raises(w._Refused, match=f"from {before} to {after}"):
            w._move_phase(phase, after)


def test_created_starts_the_run_at_the_first_node() -> None:
    """Given nothing, when the run is created, then it is running and its
    first node's phase starts as a fresh run, attempt 1."""
    story = Story()
    decisions = story.when(WorkflowCreated(workflow_id="wf", definition=DIR, at=0.5))
    assert decisions == [
        WorkflowStarted(),
        PhaseStarted(node="design", attempt=1, run_id="wf-design-1", at=0.5),
    ]
    assert story.state.status == "running"
    assert story.phase("design").status == "running"
    assert story.phase("implement").status == "pending"


@pytest.mark.parametrize(
    ("revision", "ids"),
    [
        (0, ["a-b-c-1", "a-b-c-1"]),  # recorded so: the two meet
        (WORKFLOW_REVISION, ["a:b-c:1", "a-b:c:1"]),
    ],
    ids=["recorded before revision 1", "now"],
)
def test_phase_run_ids_of_two_runs_with_dashes_meet_only_before_revision_1(
    revision: int, ids: list[str]
) -> None:
    """Run ``a`` with node ``b-c`` and run ``a-b`` with node ``c``: joined by
    ``-`` (revision 0, how runs recorded before decided, and still decide)
    their first phases share a run id; joined by ``:``, which neither a run
    id nor a node key may hold, they do not."""
    started_ids = []
    for workflow_id, key in (("a", "b-c"), ("a-b", "c")):
        story = Story()
        defn = definition([node(key)], [])
        created = WorkflowCreated(
            workflow_id=workflow_id, definition=defn, revision=revision
        )
        decisions = story.when(created)
        assert decisions is not None
        [start] = [d for d in decisions if isinstance(d, PhaseStarted)]
        started_ids.append(start.run_id)
    assert started_ids == ids


def test_a_run_created_now_is_of_the_latest_revision() -> None:
    """`steward.actors.workflow.definition.created`, which every command
    uses, records the revision the decider now has."""
    defn = definition([node("design")], [])
    made = workflows.created(defn, Settings(), "wf", {})
    assert made.revision == WORKFLOW_REVISION == 3


def test_a_definition_with_problems_is_refused() -> None:
    """A definition the file loader would reject never starts a run."""
    bad = definition([node("a"), node("a")], [])
    assert Story().when(WorkflowCreated(workflow_id="wf", definition=bad)) is None


@pytest.mark.parametrize(
    ("inputs", "refused"),
    [
        ([], WorkflowResumeRequested()),  # running: nothing to resume
        ([WorkflowPauseRequested()], WorkflowPauseRequested()),  # paused already
        ([], WorkflowCreated(workflow_id="wf", definition=DIR)),  # created already
    ],
)
def test_operator_inputs_off_the_run_table_are_refused(
    inputs: list[Event], refused: Event
) -> None:
    """Pause when paused, resume when running, create twice: refused."""
    story = started()
    for event in inputs:
        assert story.when(event) is not None
    assert story.when(refused) is None


def test_nothing_moves_a_finished_run() -> None:
    """A completed run takes no pause, resume, cancel or stray result."""
    story = started(definition([node("only")], []))
    assert story.finish() is not None
    assert story.state.status == "completed"
    stray = ChildFinished(
        stream=run_stream("wf-only-1"), status="completed", output="x"
    )
    for event in (
        WorkflowPauseRequested(),
        WorkflowResumeRequested(),
        WorkflowCancelRequested(),
        stray,
    ):
        assert story.when(event) is None


def test_a_result_of_another_run_is_refused() -> None:
    """Only the phase run in flight's result is taken (a duplicate, a stale
    retry's or a stranger's is refused)."""
    story = started()
    other = ChildFinished(
        stream=run_stream("wf-design-9"), status="completed", output="x"
    )
    assert story.when(other) is None


# -- transitions ---------------------------------------------------------------------


def test_the_first_matching_edge_by_priority_wins() -> None:
    """Edges are tried lowest priority first: a guard at 1 that holds beats
    the auto edge at 2; when it does not hold, the auto edge is taken."""
    story = started()
    story.finish()  # design -> implement
    decisions = story.finish(needs_revision=True)
    assert decisions is not None
    assert decisions[1] == TransitionTaken(
        source="implement",
        target="design",
        priority=1,
        when="report.needs_revision == true",
    )
    story.finish()  # design (attempt 2) -> implement (attempt 2)
    decisions = story.finish(needs_revision=False)
    assert decisions is not None
    assert decisions[1] == TransitionTaken(
        source="implement", target="review", priority=2, auto=True
    )


def test_edges_are_tried_by_priority_not_by_their_order_in_the_file() -> None:
    """An edge written first with priority 5 loses to one written later with
    priority 1 when both match."""
    defn = definition(
        [node("a"), node("b"), node("c")],
        [auto("a", "b", 5), auto("a", "c", 1)],
    )
    story = started(defn)
    decisions = story.finish()
    assert decisions is not None
    assert TransitionTaken(source="a", target="c", priority=1, auto=True) in decisions
    assert PhaseSkipped(node="b") in decisions  # the branch not taken


def test_no_matching_edge_completes_the_run_and_skips_what_never_ran() -> None:
    """A review that approves matches no edge: the run completes; phases
    still pending are skipped."""
    defn = definition(
        [node("review"), node("fix")],
        [guard("review", "fix", 'decision == "changes_requested"')],
    )
    story = started(defn)
    decisions = story.finish(routingDecision="approved")
    assert decisions == [
        PhaseCompleted(
            node="review",
            attempt=1,
            run_id="wf-review-1",
            report="a report",
            decision="approved",
            decision_source="routingDecision",
            metadata={"routingDecision": "approved"},
            at=1.0,
        ),
        PhaseSkipped(node="fix"),
        WorkflowCompleted(last="review"),
    ]
    assert story.state.status == "completed"


def test_a_guard_reads_the_report_and_a_missing_path_is_false() -> None:
    """`report.score >= 0.8` holds for a report with score 0.9; for one
    without a score it is false (never an error) and the next edge wins."""
    defn = definition(
        [node("check"), node("ship"), node("rework")],
        [
            guard("check", "ship", "report.score >= 0.8"),
            auto("check", "rework", 2),
        ],
    )
    high = started(defn)
    assert high.finish(score=0.9) is not None
    assert high.state.current == "ship"
    missing = started(defn)
    assert missing.finish() is not None
    assert missing.state.current == "rework"


CHECK = definition(
    [node("check"), node("fix"), node("other")],
    [
        guard("check", "fix", 'decision != "approved"'),
        guard("check", "other", 'decision == "no_route"', 2),
    ],
)


def test_a_phase_with_no_decision_routes_nowhere_through_decision_guards() -> None:
    """From revision 3 a phase that gave no routing decision has no
    ``decision`` for its guards, a missing path: ``decision != "approved"``
    is false, as is ``decision == "no_route"``, and a report field named
    ``decision`` is not read for it. No edge matches: the run completes."""
    story = started(CHECK, revision=WORKFLOW_REVISION)
    decisions = story.finish(decision="changes_requested")
    assert decisions is not None
    assert not [d for d in decisions if isinstance(d, TransitionTaken)]
    assert decisions[-1] == WorkflowCompleted(last="check")


def test_a_phase_with_a_decision_still_routes_by_it() -> None:
    """A routing decision is what ``decision`` reads: ``!=`` holds for one
    that differs."""
    story = started(CHECK, revision=WORKFLOW_REVISION)
    decisions = story.finish(routingDecision="blocked")
    assert decisions is not None
    assert decisions[1] == TransitionTaken(
        source="check", target="fix", priority=1, when='decision != "approved"'
    )


@pytest.mark.parametrize("revision", [0, 1, 2])
def test_before_revision_3_no_decision_reads_no_route(revision: int) -> None:
    """Runs created before revision 3 decided with ``decision`` the string
    ``no_route`` for a phase that gave none, and replay so: its ``!=``
    guard held."""
    story = started(CHECK, revision=revision)
    decisions = story.finish()
    assert decisions is not None
    assert decisions[1] == TransitionTaken(
        source="check", target="fix", priority=1, when='decision != "approved"'
    )


# -- the bound on phase executions ------------------------------------------------

LOOP = definition([node("a"), node("b")], [auto("a", "b"), auto("b", "a")])


def test_a_loop_fails_the_run_at_max_steps_keeping_its_reports() -> None:
    """a -> b -> a by auto edges never ends: at max_steps (3) phase
    executions the transition back to b is recorded and the run fails,
    naming the bound and the node; every report so far is kept."""
    story = started(replace(LOOP, max_steps=3), revision=WORKFLOW_REVISION)
    story.finish(output="a once")
    story.finish(output="b once")
    decisions = story.finish(output="a twice")
    assert decisions is not None
    assert [type(d) for d in decisions] == [
        PhaseCompleted,
        TransitionTaken,
        WorkflowFailed,
    ]
    assert decisions[-1] == WorkflowFailed(
        reason="max_steps 3 reached: node b would run again (attempt 2) after 3 "
        "phase executions; if the loop is meant to go on, raise max_steps"
    )
    assert story.state.status == "failed" and story.state.runs == 3
    assert w.reports(story.state) == {
        "a": (2, "wf:a:3", "a twice"),
        "b": (1, "wf:b:2", "b once"),
    }
    assert replay.verify(story.records(), kinds=KINDS) is None


def test_retries_count_toward_max_steps() -> None:
    """A retry is a phase execution too: the bound stops one."""
    defn = definition([node("a", retries=5)], [])
    story = started(replace(defn, max_steps=2), revision=WORKFLOW_REVISION)
    story.finish(status="failed")
    decisions = story.finish(status="failed")
    assert decisions is not None
    assert [type(d) for d in decisions] == [PhaseFailed, WorkflowFailed]
    assert "max_steps 2 reached: node a would run again" in decisions[-1].reason  # type: ignore[attr-defined]


def _spin(story: Story, times: int) -> None:
    for _ in range(times):
        assert story.finish() is not None


def test_a_run_without_max_steps_is_bounded_by_the_default() -> None:
    """A revision 3 definition with no bound recorded stops at
    DEFAULT_MAX_STEPS (1000) phase executions."""
    story = started(LOOP, revision=WORKFLOW_REVISION)
    _spin(story, DEFAULT_MAX_STEPS - 1)
    assert story.state.status == "running"
    _spin(story, 1)
    assert story.state.status == "failed"
    assert story.state.runs == DEFAULT_MAX_STEPS == 1000


def test_before_revision_3_a_loop_has_no_bound() -> None:
    """Runs created before revision 3 had no bound, and replay so."""
    story = started(LOOP, revision=2)
    _spin(story, DEFAULT_MAX_STEPS + 1)
    assert story.state.status == "running"


def test_auto_loops_are_the_cycles_no_guard_can_leave() -> None:
    """A cycle of nodes whose first edge by priority is auto is listed once,
    from its first node; one a guard before the auto edge can leave, or an
    auto edge that a lower priority auto edge hides, is not."""
    defn = definition(
        [node("a"), node("b"), node("c"), node("d"), node("e")],
        [
            auto("a", "c"),
            auto("b", "c"),
            auto("c", "b"),
            guard("d", "a", 'decision == "retry"'),
            auto("d", "d", 2),
            auto("e", "a"),
            auto("e", "e", 2),
        ],
    )
    assert auto_loops(defn) == [("b", "c")]
    assert auto_loops(definition([node("x")], [auto("x", "x")])) == [("x",)]
    assert auto_loops(DIR) == []


# -- retries -------------------------------------------------------------------------


def test_a_failed_phase_is_retried_while_retries_last_then_the_run_fails() -> None:
    """max_retries 1: the first failure starts a fresh run of the same attempt
    (failed -> running); the second fails the run."""
    story = started(definition([node("flaky", retries=1)], []))
    decisions = story.finish(status="failed", output="the model timed out")
    assert decisions == [
        PhaseFailed(
            node="flaky",
            attempt=1,
            retry=0,
            run_id="wf-flaky-1",
            reason="the model timed out",
            at=1.0,
        ),
        PhaseStarted(node="flaky", attempt=1, retry=1, run_id="wf-flaky-2", at=1.0),
    ]
    decisions = story.finish(status="failed", output="again")
    assert decisions is not None
    assert decisions[-1] == WorkflowFailed(
        reason="phase flaky failed 2 times (max_retries 1)"
    )
    assert story.state.status == "failed"


def test_a_retry_that_completes_goes_on() -> None:
    """A phase that fails once and then completes takes its transition."""
    story = started(definition([node("a", retries=2), node("b")], [auto("a", "b")]))
    story.finish(status="failed")
    story.finish()
    assert story.state.current == "b"
    assert story.phase("a").status == "completed"


def test_no_retries_fails_the_run_at_once() -> None:
    """max_retries 0: one failure fails the run; a cancelled phase run counts
    as a failure."""
    story = started(definition([node("a")], []))
    decisions = story.finish(status="cancelled", output="")
    assert decisions is not None
    assert decisions[0] == PhaseFailed(
        node="a",
        attempt=1,
        retry=0,
        run_id="wf-a-1",
        reason="its run ended cancelled",
        at=1.0,
    )
    assert isinstance(decisions[-1], WorkflowFailed)


# -- loops and branches ----------------------------------------------------------------


def test_a_loop_backtrack_requeues_the_next_attempt_with_its_times_cleared() -> None:
    """review asks for changes: implement goes completed -> pending with
    attempt 2 and no times, then starts (given design's and review's reports)."""
    story = started()
    story.finish(at=1.0)
    story.finish(at=2.0)  # implement attempt 1 -> review
    assert story.phase("implement").completed_at == 2.0
    decisions = story.finish(output="return JSON", routingDecision="changes_requested")
    assert decisions is not None
    assert PhaseRequeued(node="implement", attempt=2) in decisions
    requeued = w.evolve(
        w.evolve(story.state, PhaseCompleted(**_done("implement"))),
        PhaseRequeued(node="implement", attempt=3),
    )
    phase = w.phase_of(requeued, "implement")
    assert (phase.status, phase.attempt) == ("pending", 3)
    assert (phase.started_at, phase.completed_at) == (None, None)
    started_again = decisions[-1]
    assert isinstance(started_again, PhaseStarted)
    assert (started_again.node, started_again.attempt) == ("implement", 2)
    assert [a.node for a in started_again.upstream] == ["design", "review"]


def _done(node: str) -> dict[str, Any]:
    return {
        "node": node,
        "attempt": 1,
        "run_id": "x",
        "report": "r",
        "decision": "no_route",
    }


def test_a_skipped_branch_is_reactivated_with_its_attempt_unchanged() -> None:
    """triage takes the bug branch (feature is skipped); when bug later leads
    to feature, feature goes skipped -> pending keeping attempt 1, and runs."""
    defn = definition(
        [node("triage"), node("bug"), node("feature")],
        [
            guard("triage", "bug", 'report.kind == "bug"'),
            auto("triage", "feature", 2),
            auto("bug", "feature"),
        ],
    )
    story = started(defn)
    decisions = story.finish(kind="bug")
    assert decisions is not None and PhaseSkipped(node="feature") in decisions
    assert story.phase("feature").status == "skipped"
    decisions = story.finish()
    assert decisions is not None
    assert PhaseRequeued(node="feature", attempt=1) in decisions
    assert story.phase("feature").status == "running"
    assert story.phase("feature").attempt == 1


# -- pause, resume, cancel ---------------------------------------------------


def test_a_paused_run_records_its_phase_and_follows_it_on_resume() -> None:
    """While paused, a phase's result is recorded and nothing starts; resume
    takes the transition it waited for."""
    story = started()
    assert story.when(WorkflowPauseRequested(reason="lunch")) == [
        WorkflowPaused(reason="lunch")
    ]
    decisions = story.finish()
    assert decisions is not None
    assert [type(d) for d in decisions] == [PhaseCompleted]
    assert story.state.current is None and story.state.ended == "design"
    decisions = story.when(WorkflowResumeRequested(at=5.0))
    assert decisions is not None
    assert decisions[0] == WorkflowResumed()
    assert decisions[1] == TransitionTaken(
        source="design", target="implement", priority=1, auto=True
    )
    assert decisions[-1] == PhaseStarted(
        node="implement",
        attempt=1,
        run_id="wf-implement-2",
        upstream=decisions[-1].upstream,  # type: ignore[attr-defined]
        at=5.0,
    )


def test_a_failure_while_paused_is_retried_on_resume() -> None:
    """A phase that fails while the run is paused is retried (or fails the
    run) only once it is resumed."""
    story = started(definition([node("a", retries=1)], []))
    story.when(WorkflowPauseRequested())
    assert [type(d) for d in story.finish(status="failed") or []] == [PhaseFailed]
    decisions = story.when(WorkflowResumeRequested())
    assert [type(d) for d in decisions or []] == [WorkflowResumed, PhaseStarted]


def test_cancel_ends_the_run_and_the_phase_in_flight_is_still_recorded() -> None:
    """Cancelling a running run cancels its phase run (an effect); the phase's
    late result is recorded as its outcome, and nothing follows it."""
    story = started()
    assert story.when(WorkflowCancelRequested(reason="wrong input")) == [
        WorkflowCancelled(reason="wrong input")
    ]
    records = story.records()
    asked = effects(records[-1], story.state, story.state)
    assert [(e.stream, e.input) for e in asked] == [  # type: ignore[union-attr]
        (
            "run.wf-design-1",
            CancelRequested(reason="its workflow wf was cancelled"),
        )
    ]
    decisions = story.finish(status="cancelled", output="")
    assert [type(d) for d in decisions or []] == [PhaseFailed]
    assert story.state.status == "cancelled"


@pytest.mark.parametrize(
    ("revision", "phase"),
    [(1, None), (WORKFLOW_REVISION, "wf:design:1")],
    ids=["recorded before revision 2", "now"],
)
def test_a_cancel_names_the_phase_in_flight_for_the_pending_projection(
    revision: int, phase: str | None
) -> None:
    """From revision 2 a cancel names the phase run in flight, so its
    delivery is wanted (a host that dies before making it leaves it to the
    next) until that phase's result answers it; before, it did not, and
    old runs still decide so."""
    story = started(revision=revision)
    [cancelled] = story.when(WorkflowCancelRequested(reason="stop")) or []
    assert cancelled == WorkflowCancelled(reason="stop", phase_run_id=phase)
    wants = pending(story.records()[-1]).wants
    if phase is None:
        assert wants == ()
        return
    [delivery] = effects(story.records()[-1], story.state, story.state)
    assert wants == (Want(key=delivery.key, kind=WantKind.DELIVER),)  # type: ignore[union-attr]
    [outcome] = story.finish(status="cancelled", output="") or []
    result = story.records()[-2]
    assert isinstance(result.event, ChildFinished)
    assert delivery.key in pending(result).answers  # type: ignore[union-attr]
    assert isinstance(outcome, PhaseFailed)


def test_a_cancel_with_no_phase_in_flight_names_none() -> None:
    story = started(definition([node("a")], []), revision=WORKFLOW_REVISION)
    story.when(WorkflowPauseRequested())
    story.finish()  # recorded; followed on resume
    decisions = story.when(WorkflowCancelRequested(reason="no"))
    assert decisions == [WorkflowResumed(), WorkflowCancelled(reason="no")]


def test_a_paused_run_is_cancelled_through_running() -> None:
    """paused -> cancelled is no move of the spec's: the run is resumed and
    cancelled in one step, so nothing starts in between."""
    story = started()
    story.when(WorkflowPauseRequested())
    story.finish()
    decisions = story.when(WorkflowCancelRequested(reason="no"))
    assert decisions == [WorkflowResumed(), WorkflowCancelled(reason="no")]
    assert story.state.status == "cancelled"


# -- hand-off ------------------------------------------------------------------------


def _fan_in(n: int) -> WorkflowDef:
    sources = [node(f"s{i}") for i in range(n)]
    edges = [auto(f"s{i}", "sink") for i in range(n)]
    return definition([*sources, node("sink")], edges)


def test_at_most_four_direct_predecessors_are_handed_in_node_order() -> None:
    """Five predecessors with reports: the first four (in node order) are
    handed, the fifth is named as dropped; a node without a report is not a
    candidate."""
    defn = _fan_in(6)
    reports = {f"s{i}": (1, f"wf-s{i}-1", f"report {i}") for i in range(6) if i != 2}
    artifacts, dropped = handoff(defn, "sink", reports)
    assert MAX_UPSTREAM_ARTIFACTS == 4
    assert [a.node for a in artifacts] == ["s0", "s1", "s3", "s4"]
    assert dropped == ("s5",)


def test_only_direct_predecessors_are_handed() -> None:
    """a -> b -> c: c is handed b's report, not a's."""
    defn = definition(
        [node("a"), node("b"), node("c")], [auto("a", "b"), auto("b", "c")]
    )
    reports = {"a": (1, "r1", "A"), "b": (1, "r2", "B")}
    artifacts, _ = handoff(defn, "c", reports)
    assert [a.node for a in artifacts] == ["b"]


def test_reports_are_cut_per_artifact_and_in_total_head_and_tail() -> None:
    """Three 20,000-character reports: the first two keep 12,000 each (6,000
    head and tail), the third the 8,000 left of 32,000."""
    defn = _fan_in(3)
    texts = {f"s{i}": (str(i) * 10_000) + ("x" * 10_000) for i in range(3)}
    reports = {k: (1, f"wf-{k}-1", t) for k, t in texts.items()}
    artifacts, dropped = handoff(defn, "sink", reports)
    assert (MAX_CHARS_PER_ARTIFACT, MAX_CONTEXT_CHARS_TOTAL) == (12_000, 32_000)
    assert [(a.included, a.head, a.tail) for a in artifacts] == [
        (12_000, 6_000, 6_000),
        (12_000, 6_000, 6_000),
        (8_000, 4_000, 4_000),
    ]
    assert all(a.truncated and a.chars == 20_000 for a in artifacts)
    assert dropped == ()
    text = upstream_text(artifacts, reports)
    assert "0" * 6_000 + "\n[... 8000 characters cut ...]\n" + "x" * 6_000 in text
    assert "first 4000 and last 4000 of 20000 characters" in text


def test_a_fourth_report_past_the_total_is_dropped() -> None:
    """Once 32,000 characters are handed, a further report is dropped, not
    cut to nothing."""
    defn = _fan_in(4)
    reports = {f"s{i}": (1, f"r{i}", "y" * 12_000) for i in range(4)}
    artifacts, dropped = handoff(defn, "sink", reports)
    assert [a.included for a in artifacts] == [12_000, 12_000, 8_000]
    assert dropped == ("s3",)


@hypothesis.given(chars=st.integers(0, 50_000), limit=st.integers(1, 20_000))
def test_head_tail_keeps_at_most_the_limit_and_all_of_what_fits(
    chars: int, limit: int
) -> None:
    """head + tail is min(chars, limit); the head is the larger half."""
    head, tail = head_tail(chars, limit)
    assert head + tail == min(chars, limit)
    assert tail == 0 if chars <= limit else 0 <= head - tail <= 1


def test_a_short_report_is_handed_whole() -> None:
    """A report under the caps is handed as it is, not truncated."""
    artifacts, _ = handoff(_fan_in(1), "sink", {"s0": (2, "r", "short")})
    assert artifacts == (
        Artifact(node="s0", attempt=2, run_id="r", chars=5, included=5),
    )


def test_the_phase_run_holds_the_prompt_inputs_upstream_and_result_note() -> None:
    """A phase's run gets its node's prompt with the inputs filled in, the
    upstream reports its manifest names, and how to give its result; it
    answers the workflow's stream."""
    defn = definition(
        [node("a"), node("b", prompt="Build {input.feature} ({input.none}).")],
        [auto("a", "b")],
    )
    story = started(defn, feature="a health check")
    story.finish(output="the design")
    started_b = story.log[-1]
    assert isinstance(started_b, PhaseStarted)
    run = phase_run(story.state, started_b, STREAM)
    assert run.run_id == started_b.run_id and run.reply_to == STREAM
    assert run.input_text.startswith("Build a health check ({input.none}).")
    assert "### a (attempt 1, run wf-a-1; 10 characters)\nthe design" in run.input_text
    assert run.input_text.endswith(RESULT_NOTE)


@pytest.mark.parametrize(
    ("protocol", "revision", "note"),
    [
        ("json", LATEST_REVISION, RESULT_NOTE),
        ("native", LATEST_REVISION, NATIVE_RESULT_NOTE),
        ("native", 2, RESULT_NOTE),  # no finish tool to call before revision 3
    ],
)
def test_a_phase_is_told_to_finish_as_its_protocol_does(
    protocol: str, revision: int, note: str
) -> None:
    settings = RunSettings(protocol=protocol, revision=revision)  # type: ignore[arg-type]
    defn = definition([replace(node("a"), settings=settings)], [])
    story = started(defn)
    [phase] = [e for e in story.log if isinstance(e, PhaseStarted)]
    run = phase_run(story.state, phase, STREAM)
    assert run.input_text.endswith(note) and run.settings == settings


# -- routing decisions -------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"routingDecision": "approved"}, ("approved", "routingDecision")),
        (
            {"routingDecision": "approved", "routing_decision": "blocked"},
            ("approved", "routingDecision"),
        ),
        (
            {"routingDecision": "maybe", "routing_decision": "retry"},
            ("retry", "routing_decision"),
        ),
        (
            {"routing_decision": "changes_requested"},
            ("changes_requested", "routing_decision"),
        ),
        ({"routingDecision": 1, "routing_decision": ["approved"]}, ("no_route", None)),
        ({"routingDecision": "APPROVED"}, ("no_route", None)),
        ({}, ("no_route", None)),
    ],
)
def test_routing_decision_precedence(
    metadata: dict[str, Any], expected: tuple[str, str | None]
) -> None:
    """The canonical key when valid, the fallback when the canonical one is
    missing or invalid, no_route when neither is usable."""
    assert routing_decision(metadata) == expected


def test_report_text_is_never_read_for_routing() -> None:
    """A report that says "approved" with no routing metadata is no_route."""
    story = started(definition([node("review")], []))
    decisions = story.finish(output='{"routingDecision": "approved"} approved!')
    assert decisions is not None
    done = decisions[0]
    assert isinstance(done, PhaseCompleted) and done.decision == "no_route"


# -- properties ----------------------------------------------------------------

KEYS = ("a", "b", "c", "d")
GUARDS = (
    'decision == "approved"',
    'decision == "changes_requested"',
    "report.score >= 0.5",
    "report.flag == true or attempt > 2",
)


@st.composite
def graphs(draw: st.DrawFn) -> WorkflowDef:
    keys = KEYS[: draw(st.integers(1, len(KEYS)))]
    nodes = [node(k, retries=draw(st.integers(0, 2))) for k in keys]
    edges = []
    for source in keys:
        targets = draw(st.lists(st.sampled_from(keys), max_size=3))
        for priority, target in enumerate(targets, start=1):
            if draw(st.booleans()):
                edges.append(auto(source, target, priority))
            else:
                edges.append(
                    guard(source, target, draw(st.sampled_from(GUARDS)), priority)
                )
    steps = draw(st.one_of(st.none(), st.integers(1, 6)))
    return replace(definition(nodes, edges), max_steps=steps)


results = st.fixed_dictionaries(
    {
        "status": st.sampled_from(["completed", "completed", "failed", "cancelled"]),
        "output": st.text(max_size=30),
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "routingDecision": st.sampled_from(
                    ["approved", "changes_requested", "blocked", "retry", "bogus"]
                ),
                "routing_decision": st.sampled_from(["approved", "retry", 3]),
                "score": st.floats(0, 1),
                "flag": st.booleans(),
            },
        ),
    }
)
operator = st.sampled_from(
    [WorkflowPauseRequested(), WorkflowResumeRequested(), WorkflowCancelRequested()]
)


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(
    defn=graphs(),
    tree=st.one_of(
        st.none(),
        st.builds(
            lambda pr, keep: replace(TREE, pull_request=pr, keep=keep),
            st.sampled_from([None, "gh", "az"]),
            st.booleans(),
        ),
    ),
    script=st.lists(st.one_of(results, operator, st.booleans()), max_size=40),
    revision=st.sampled_from([0, 1, 2, WORKFLOW_REVISION]),
)
def test_random_graphs_and_reports_fold_to_the_live_state_and_verify(
    defn: WorkflowDef, tree: Worktree | None, script: list[Any], revision: int
) -> None:
    """For random graphs (their max_steps too), worktrees, phase results,
    git answers (a boolean: ok or not), operator inputs and revisions: every
    decision is a move of the spec's tables, folding the log gives the live
    state, replay's verify re-decides every step the same, and from
    revision 3 no run starts more phase executions than its bound."""
    story = Story()
    story.when(
        WorkflowCreated(
            workflow_id="wf", definition=defn, worktree=tree, revision=revision
        )
    )
    for n, item in enumerate(script):
        if isinstance(item, bool):
            if story.state.tool is not None:
                tool_result(story, ok=item, error=None if item else "no")
        elif isinstance(item, dict):
            if story.state.current is None:
                continue
            run_id = w.phase_of(story.state, story.state.current).run_id
            assert run_id is not None
            result = ChildFinished(stream=run_stream(run_id), **item)
            story.when(msgspec.structs.replace(result, at=float(n)))
        else:
            story.when(item)
        for phase in story.state.phases:
            assert phase.status in PHASE_STATUSES
        if story.state.runs and tree is not None:
            assert story.state.workspace == tree.path  # phases only in the tree
        if revision >= 3 and defn.max_steps is not None:
            assert story.state.runs <= defn.max_steps
    records = story.records()
    assert replay.rebuild(records, kinds=KINDS) == story.state
    assert replay.verify(records, kinds=KINDS) is None
    previous: dict[str, str] = {}
    state = w.initial
    for event in story.log:  # each phase status change is on the table
        state = w.evolve(state, event)
        for phase in state.phases:
            before = previous.get(phase.node, "pending")
            if before != phase.status:
                assert (before, phase.status) in w.PHASE_MOVES, (phase.node, event)
            previous[phase.node] = phase.status


# -- worktrees ------------------------------------------------------------------


TREE = Worktree(
    repository="/repo", path="/trees/wf", branch="steward/test/wf", base="main"
)


def in_tree(defn: WorkflowDef = DIR, **tree: Any) -> Story:
    story = Story()
    worktree = replace(TREE, **tree)
    story.when(WorkflowCreated(workflow_id="wf", definition=defn, worktree=worktree))
    return story


def tool_result(story: Story, ok: bool = True, error: str | None = None) -> Any:
    assert story.state.tool is not None, "no git call in flight"
    result = ToolResulted(request_id=story.state.tool, ok=ok, error=error, at=2.0)
    return story.when(result)


def test_a_run_with_a_worktree_asks_for_it_before_its_first_phase() -> None:
    """Created with a worktree: git.worktree_add first; once it is made the
    first phase starts, its run working in the worktree."""
    story = in_tree()
    assert story.log[1:] == [
        WorkflowStarted(),
        ToolRequested(
            request_id="wf/git/1",
            name="git.worktree_add",
            args={
                "repository": "/repo",
                "path": "/trees/wf",
                "branch": "steward/test/wf",
                "base": "main",
            },
        ),
    ]
    assert story.state.current is None
    decisions = tool_result(story)
    assert [type(d) for d in decisions] == [PhaseStarted]
    started_design = decisions[0]
    assert phase_run(story.state, started_design, STREAM).workspace == "/trees/wf"


def test_a_worktree_that_cannot_be_made_fails_the_run() -> None:
    """git.worktree_add failing: the run fails saying why; nothing to remove."""
    story = in_tree()
    decisions = tool_result(story, ok=False, error="not a git repository")
    assert decisions == [
        WorkflowFailed(reason="its worktree could not be made: not a git repository")
    ]


def test_a_completed_run_asks_for_its_pull_request_then_the_removal() -> None:
    """The run completes: git.pull_request (asked for in the file), then,
    when it answered (a missing gh too), git.worktree_remove."""
    defn = definition([node("only")], [])
    story = in_tree(defn, pull_request="gh")
    tool_result(story)
    decisions = story.finish()
    assert decisions is not None and isinstance(decisions[-1], ToolRequested)
    asked = decisions[-1]
    assert (asked.name, asked.args["tool"], asked.args["base"]) == (
        "git.pull_request",
        "gh",
        "main",
    )
    assert "only: attempt 1, completed" in asked.args["body"]
    removal = tool_result(story)  # "gh is not installed" is an ok answer
    assert [(d.name, d.request_id) for d in removal] == [
        ("git.worktree_remove", "wf/git/3")
    ]
    assert tool_result(story) == []
    assert story.state.tool is None and story.state.status == "completed"


def test_a_failed_run_removes_its_worktree() -> None:
    """No pull request for a run that did not complete; the worktree is
    removed (its uncommitted work committed to the branch by the tool)."""
    story = in_tree(definition([node("only")], []), pull_request="gh")
    tool_result(story)
    decisions = story.finish(status="failed")
    assert decisions is not None
    assert [d.name for d in decisions if isinstance(d, ToolRequested)] == [
        "git.worktree_remove"
    ]


def test_a_cancelled_run_removes_its_worktree_once_its_phase_answered() -> None:
    """Cancelled with a phase at work in the worktree: the removal waits for
    that phase's run (cancelled too) to answer, so nothing writes after it."""
    story = in_tree(definition([node("only")], []), pull_request="gh")
    tool_result(story)
    assert story.when(WorkflowCancelRequested(reason="no")) == [
        WorkflowCancelled(reason="no")
    ]
    decisions = story.finish(status="cancelled", output="")
    assert decisions is not None
    assert [type(d) for d in decisions] == [PhaseFailed, ToolRequested]
    assert decisions[-1].name == "git.worktree_remove"  # type: ignore[attr-defined]


def test_a_kept_worktree_is_not_removed() -> None:
    """keep: the run ends and asks for nothing more."""
    story = in_tree(definition([node("only")], []), keep=True)
    tool_result(story)
    decisions = story.finish()
    assert decisions is not None
    assert not any(isinstance(d, ToolRequested) for d in decisions)


def test_a_run_paused_while_its_worktree_is_made_starts_on_resume() -> None:
    """The worktree made while paused: the first phase starts on resume."""
    story = in_tree()
    story.when(WorkflowPauseRequested())
    assert tool_result(story) == []
    decisions = story.when(WorkflowResumeRequested())
    assert [type(d) for d in decisions or []] == [WorkflowResumed, PhaseStarted]


def test_a_claim_on_the_git_call_is_taken_once() -> None:
    """A worker's claim on the git call in flight is recorded; another
    worker's while it holds is refused; a claim on anything else too."""
    story = in_tree()
    rid = story.state.tool
    assert rid is not None
    mine = EffectClaimed(request_id=rid, worker="w1", until=10.0, at=1.0)
    assert story.when(mine) == []
    theirs = EffectClaimed(request_id=rid, worker="w2", until=11.0, at=2.0)
    assert story.when(theirs) is None
    other = EffectClaimed(request_id="wf/git/9", worker="w1", until=10.0, at=1.0)
    assert story.when(other) is None
    awaited = story.state.outstanding
    assert awaited.awaits(rid) and not awaited.awaits("wf/git/9")


def test_a_worktree_made_after_its_run_was_cancelled_is_removed() -> None:
    """Cancelled while git.worktree_add runs: when the worktree comes, it is
    removed at once (no phase starts); one that failed asks for nothing."""
    story = in_tree()
    assert story.when(WorkflowCancelRequested()) == [
        WorkflowCancelled(reason="cancelled by operator")
    ]
    decisions = tool_result(story)
    assert [d.name for d in decisions] == ["git.worktree_remove"]
    assert story.state.runs == 0
    failed = in_tree()
    failed.when(WorkflowCancelRequested())
    assert tool_result(failed, ok=False, error="no") == []
