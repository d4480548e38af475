"""The workflow kind's entry in a kind table."""

from __future__ import annotations

from steward.actors import effects, outstanding
from steward.actors.kind import (
    Column,
    Decider,
    Kind,
    Listed,
    Listing,
    Reactor,
    Surface,
)
from steward.actors.run.projection import TOKENS, spent
from steward.actors.workflow import decider, events, reactor, sections
from steward.actors.workflow.projection import WORKFLOWS

__all__ = ["KIND"]

TOKENS_SPENT = spent("'workflow.' || workflow_id", TOKENS)
COST_SPENT = spent("'workflow.' || workflow_id", "cost_usd")

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
            text="name || ' ' || inputs",
            output="reason",
            tokens=TOKENS_SPENT,
            cost=COST_SPENT,
            listed=Listed(
                fields=(
                    ("id", "workflow_id"),
                    ("status", "status"),
                    ("workflow", "tree_key"),
                    ("version", "version"),
                    ("phases", "phases"),
                    ("current_node", "current_node"),
                    ("updated_at", "updated_at"),
                    ("tokens", TOKENS_SPENT),
                    ("cost_usd", COST_SPENT),
                ),
                columns=(
                    Column("id", "id"),
                    Column("status", "status"),
                    Column("workflow", lambda r: f"{r['workflow']} v{r['version']}"),
                    Column("phases", "phases", right=True),
                    Column("at", lambda r: r["current_node"] or "-"),
                    Column("tokens", "tokens", right=True),
                    Column("last", "updated_at"),
                ),
                empty="no workflow runs yet",
            ),
        ),
        cancel=reactor.cancel,
        status=effects.status,
        sections=sections.sections,
    ),
)
