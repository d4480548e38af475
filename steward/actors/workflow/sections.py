"""What the console shows of a workflow run (pure): its phase graph, the
definition's nodes and edges with the path the run took marked, and each
routing decision (a phase's outcome, where the run went from it and why)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from steward.actors.run.reactor import run_stream
from steward.actors.sections import Cell, Edge, Graph, Node, Section, Table
from steward.actors.workflow.decider import Workflow
from steward.actors.workflow.events import (
    EdgeDef,
    PhaseCompleted,
    PhaseFailed,
    PhaseStarted,
    TransitionTaken,
    WorkflowCancelled,
    WorkflowCompleted,
    WorkflowFailed,
)
from steward.events import Recorded
from steward.isotime import iso_time

__all__ = ["sections"]


def sections(state: Workflow, records: Sequence[Recorded]) -> tuple[Section, ...]:
    """The phase graph and the routing decisions of workflow run ``state``,
    whose stream's records are ``records``."""
    if state.definition is None:
        return ()
    return (_graph(state, records), _decisions(records))


def _graph(state: Workflow, records: Sequence[Recorded]) -> Graph:
    definition = state.definition
    assert definition is not None
    ended: dict[str, str] = {}
    taken: Counter[tuple[str, str, int]] = Counter()
    started: list[PhaseStarted] = []
    for rec in records:
        match rec.event:
            case PhaseStarted() as began:
                started.append(began)
            case PhaseCompleted(run_id=run_id):
                ended[run_id] = "completed"
            case PhaseFailed(run_id=run_id):
                ended[run_id] = "failed"
            case TransitionTaken(source=source, target=target, priority=priority):
                taken[source, target, priority] += 1
    visited = {p.node for p in started}
    phases = {p.node: p for p in state.phases}
    nodes = []
    for node in definition.nodes:
        phase = phases.get(node.key)
        nodes.append(
            Node(
                key=node.key,
                label=node.key,
                status=None if phase is None else phase.status,
                detail="" if phase is None else f"attempt {phase.attempt}",
                link=None
                if phase is None or phase.run_id is None
                else run_stream(phase.run_id),
                visited=node.key in visited,
            )
        )
    edges = tuple(
        Edge(
            source=e.source,
            target=e.target,
            label=_rule(e),
            taken=taken[e.source, e.target, e.priority],
        )
        for e in definition.edges
    )
    path = tuple(
        Cell(
            text=f"{p.node} #{p.attempt}" + (f" retry {p.retry}" if p.retry else ""),
            link=run_stream(p.run_id),
            status=ended.get(p.run_id, "running"),
        )
        for p in started
    )
    name = definition.name or definition.key
    return Graph(
        title="Phase graph",
        nodes=tuple(nodes),
        edges=edges,
        path=path,
        note=(
            f"{name} (v{definition.version}): {len(definition.nodes)} phases, "
            f"{len(definition.edges)} transitions; {len(started)} phase runs "
            f"started, the run is {state.status}"
        ),
    )


def _rule(edge: EdgeDef) -> str:
    """When an edge is taken, as its definition says."""
    return f"{edge.priority}: {'auto' if edge.when is None else edge.when}"


def _decisions(records: Sequence[Recorded]) -> Table:
    """Each phase outcome with where the run went from it: a transition, a
    retry, the run's end; the decision still to make, if one is."""
    rows: list[tuple[Cell, ...]] = []
    outcome: tuple[str, str, str] | None = None
    """(node, run id, verdict) of the outcome not yet followed."""

    def row(to: str, why: str, at: float | None) -> None:
        nonlocal outcome
        assert outcome is not None
        node, run_id, verdict = outcome
        rows.append(
            (
                Cell(node),
                Cell(to),
                Cell(verdict),
                Cell(why),
                Cell("" if at is None else iso_time(at)),
                Cell(run_id, link=run_stream(run_id)),
            )
        )
        outcome = None

    for rec in records:
        match rec.event:
            case PhaseCompleted(node=node, run_id=run_id, decision=decision) as done:
                source = done.decision_source
                verdict = decision + (f" ({source})" if source else "")
                outcome = (node, run_id, verdict)
            case PhaseFailed(node=node, run_id=run_id, reason=reason):
                outcome = (node, run_id, f"failed: {reason}")
            case TransitionTaken(target=target, priority=priority, when=when):
                if outcome is not None:
                    rule = "auto" if when is None else f"guard {when} held"
                    row(target, f"{rule} (edge priority {priority})", rec.at)
            case PhaseStarted(node=node, retry=retry) if retry and outcome is not None:
                row(node, f"retry {retry} of the failed phase", rec.at)
            case WorkflowCompleted():
                if outcome is not None:
                    row("(end)", "no transition matched: the run completed", rec.at)
            case WorkflowFailed(reason=reason) | WorkflowCancelled(reason=reason):
                if outcome is not None:
                    row("(end)", reason, rec.at)
            case _:
                pass
    if outcome is not None:
        row("", "not followed yet (the run is paused, or has ended)", None)
    return Table(
        title="Routing decisions",
        columns=("from", "to", "verdict", "why", "when", "phase run"),
        rows=tuple(rows),
        empty="No phase has finished yet.",
    )
