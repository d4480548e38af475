"""The workflow kind's entry in a kind table."""

from __future__ import annotations

from steward.actors import effects, outstanding
from steward.actors.kind import Decider, Kind, Listing, Reactor, Surface
from steward.actors.run.projection import TOKENS, spent
from steward.actors.workflow import decider, events, reactor, sections
from steward.actors.workflow.projection import WORKFLOWS

__all__ = ["KIND"]

KIND: Kind[decider.Workflow] = Kind(
    name="workflow",
    decider=Decider(
        initial=decider.initial,
        evolve=decider.evolve,
        decide=decider.decide,
        inputs=events.INPUT_TYPES,
        events=events.EVENT_TYPES,
        opens=(events.WorkflowCreated,),
    ),
    reactor=Reactor(
        routed=reactor.ROUTED,
        effects=reactor.effects,
        outstanding=outstanding.kept,
        correlation=reactor.correlation,
        pending=reactor.pending,
    ),
    surface=Surface(
        commands="steward.actors.workflow.grammar",
        detach=reactor.detach,
        projection=WORKFLOWS,
        derived=("workflow_id", "run_id", "request_id", "timer_id", "stream"),
        listing=Listing(
            table="workflow_runs",
            id="workflow_id",
            status="status",
            created="created_at",
            updated="updated_at",
            text="name || ' ' || inputs",
            output="reason",
            tokens=spent("'workflow.' || workflow_id", TOKENS),
            cost=spent("'workflow.' || workflow_id", "cost_usd"),
        ),
        cancel=reactor.cancel,
        status=effects.status,
        sections=sections.sections,
    ),
)
