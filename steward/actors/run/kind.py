"""The run kind's entry in a kind table."""

from __future__ import annotations

from steward.actors import effects, outstanding
from steward.actors.kind import Decider, Kind, Listing, Reactor, Surface
from steward.actors.run import decider, events, reactor
from steward.actors.run.projection import RUNS, TOKENS

__all__ = ["KIND"]

KIND: Kind[decider.Run] = Kind(
    name="run",
    decider=Decider(
        initial=decider.initial,
        evolve=decider.evolve,
        decide=decider.decide,
        inputs=events.INPUT_TYPES,
        events=events.EVENT_TYPES,
        opens=(events.RunCreated,),
        fold_events=decider.fold,
        step=decider.decide_and_fold,
        same_decisions=reactor.same_decisions,
    ),
    reactor=Reactor(
        routed=reactor.ROUTED,
        effects=reactor.effects,
        outstanding=outstanding.kept,
        model_call=reactor.model_call,
        correlation=reactor.correlation,
        workspace=reactor.workspace,
        pending=reactor.pending,
    ),
    surface=Surface(
        commands="steward.actors.run.grammar",
        detach=reactor.detach,
        tells=reactor.tells,
        told=reactor.TOLD,
        updates=True,
        show=reactor.show,
        forked=reactor.forked,
        carried=True,
        projection=RUNS,
        derived=("run_id", "request_id", "timer_id", "stream"),
        listing=Listing(
            table="runs",
            id="id",
            status="status",
            created="created_at",
            updated="updated_at",
            text="input_text",
            parent="COALESCE(reply_to, 'run.' || parent_run_id)",
            output="COALESCE(output_text, reason)",
            tokens=TOKENS,
            cost="cost_usd",
        ),
        cancel=effects.cancel,
        waiting=reactor.waiting,
        answer=reactor.answer,
        status=effects.status,
    ),
)
