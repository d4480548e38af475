"""The session kind's entry in a kind table."""

from __future__ import annotations

from steward.actors import outstanding
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
from steward.actors.session import (
    decider,
    events,
    memory_tools,
    reactor,
    sections,
    tools,
)
from steward.actors.session import state as session_state
from steward.actors.session.projection import SESSIONS

__all__ = ["KIND"]

TOKENS_SPENT = spent("'session.' || session_id", TOKENS)
COST_SPENT = spent("'session.' || session_id", "cost_usd")

KIND: Kind[session_state.Session] = Kind(
    name="session",
    decider=Decider(
        initial=session_state.initial,
        evolve=session_state.evolve,
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
        tools=(*memory_tools.TOOLS, *tools.TOOLS),
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
            text="model || ', ' || messages || ' messages, ' || turns || ' turns'",
            tokens=TOKENS_SPENT,
            cost=COST_SPENT,
            listed=Listed(
                fields=(
                    ("id", "session_id"),
                    ("channel", "channel"),
                    ("chat", "chat_id"),
                    ("model", "model"),
                    ("segment", "segment"),
                    ("messages", "messages"),
                    ("turns", "turns"),
                    ("memory_items", "memory_items"),
                    ("updated_at", "updated_at"),
                    ("tokens", TOKENS_SPENT),
                    ("cost_usd", COST_SPENT),
                ),
                columns=(
                    Column("id", "id"),
                    Column("model", "model"),
                    Column("segment", "segment", right=True),
                    Column("messages", "messages", right=True),
                    Column("turns", "turns", right=True),
                    Column("memory", "memory_items", right=True),
                    Column("tokens", "tokens", right=True),
                    Column("last", "updated_at"),
                ),
                empty="no sessions yet",
            ),
        ),
        sections=sections.sections,
    ),
)
