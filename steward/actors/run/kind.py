"""The run kind's entry in a kind table."""

from __future__ import annotations

from typing import Any

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
from steward.actors.run import decider, events, reactor
from steward.actors.run import state as run_state
from steward.actors.run.projection import RUNS, TOKENS

__all__ = ["KIND", "status_said"]


def status_said(run: dict[str, Any]) -> str:
    """A run's status as the lists say it, from its row (its ``status`` and
    ``reason``): ``completed (stalled)`` for one that stopped without
    finishing (`events.UNFINISHED`)."""
    if run["status"] == "completed" and run["reason"] in events.UNFINISHED:
        return f"completed ({run['reason']})"
    return str(run["status"])


def tokens_of(run: dict[str, Any]) -> int:
    """A run's tokens, in and out, from its row."""
    return int(run["input_tokens"] + run["output_tokens"])


KIND: Kind[run_state.Run] = Kind(
    name="run",
    decider=Decider(
        initial=run_state.initial,
        evolve=run_state.evolve,
        decide=decider.decide,
        inputs=events.INPUT_TYPES,
        events=events.EVENT_TYPES,
        opens=(events.RunCreated,),
        fold_events=run_state.fold,
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
            text="input_text",
            parent="COALESCE(reply_to, 'run.' || parent_run_id)",
            output="COALESCE(output_text, reason)",
            tokens=TOKENS,
            cost="cost_usd",
            listed=Listed(
                fields=(
                    ("id", "id"),
                    ("status", "status"),
                    ("kind", "kind"),
                    ("parent", "parent_run_id"),
                    ("iterations", "iterations"),
                    ("input_tokens", "input_tokens"),
                    ("output_tokens", "output_tokens"),
                    ("cost_usd", "cost_usd"),
                    ("created_at", "created_at"),
                    ("input", "input_text"),
                    ("reason", "reason"),
                ),
                columns=(
                    Column("id", "id"),
                    Column("status", status_said),
                    Column("kind", "kind"),
                    Column("iter", "iterations", right=True),
                    Column("tokens", tokens_of, right=True),
                    Column("input", "input", width=60),
                ),
                order="created_at",
                empty="no runs yet",
                none_in="no {status} runs",
                times=frozenset({"created_at"}),
            ),
        ),
        cancel=effects.cancel,
        waiting=reactor.waiting,
        answer=reactor.answer,
        status=effects.status,
    ),
)
