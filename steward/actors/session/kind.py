"""The session kind's entry in a kind table."""

from __future__ import annotations

from steward.actors import outstanding
from steward.actors.kind import Decider, Kind, Listing, Reactor, Surface
from steward.actors.run.projection import TOKENS, spent
from steward.actors.session import decider, events, reactor, sections
from steward.actors.session.projection import SESSIONS

__all__ = ["KIND"]

KIND: Kind[decider.Session] = Kind(
    name="session",
    decider=Decider(
        initial=decider.initial,
        evolve=decider.evolve,
        decide=decider.decide,
        inputs=events.INPUT_TYPES,
        events=events.EVENT_TYPES,
        opens=(events.SessionOpened,),
    ),
    reactor=Reactor(
        routed=reactor.ROUTED,
        effects=reactor.effects,
        outstanding=outstanding.kept,
        model_call=reactor.model_call,
        correlation=reactor.correlation,
        pending=reactor.pending,
    ),
    surface=Surface(
        commands="steward.actors.session.grammar",
        detach=reactor.detach,
        tells=reactor.tells,
        told=reactor.TOLD,
        forked=reactor.forked,
        projection=SESSIONS,
        derived=("session_id", "run_id", "request_id", "timer_id", "stream"),
        listing=Listing(
            table="sessions",
            id="session_id",
            status="'open'",
            created="opened_at",
            updated="updated_at",
            text="model || ', ' || messages || ' messages, ' || turns || ' turns'",
            tokens=spent("'session.' || session_id", TOKENS),
            cost=spent("'session.' || session_id", "cost_usd"),
        ),
        sections=sections.sections,
    ),
)
