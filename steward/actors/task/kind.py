"""The task kind's entry in a kind table."""

from __future__ import annotations

from steward.actors import effects
from steward.actors.kind import (
    Column,
    Decider,
    Kind,
    Listed,
    Listing,
    Reactor,
    Surface,
)
from steward.actors.task import decider, events, reactor, sections
from steward.actors.task import state as task_state
from steward.actors.task.projection import TASKS

__all__ = ["KIND"]

KIND: Kind[task_state.Task] = Kind(
    name="task",
    decider=Decider(
        initial=task_state.initial,
        evolve=task_state.evolve,
        decide=decider.decide,
        inputs=events.INPUT_TYPES,
        events=events.EVENT_TYPES,
        opens=(events.TaskCreated,),
    ),
    reactor=Reactor(
        routed=reactor.ROUTED,
        effects=reactor.effects,
        outstanding=decider.outstanding,
        model_call=reactor.model_call,
        correlation=reactor.correlation,
        pending=reactor.pending,
    ),
    surface=Surface(
        commands="steward.actors.task.grammar",
        detach=reactor.detach,
        show=reactor.show,
        projection=TASKS,
        derived=("task_id", "request_id", "stream"),
        listing=Listing(
            table="tasks",
            id="task_id",
            text="COALESCE(source, program)",
            parent="parent",
            output="COALESCE(output, error)",
            tokens="input_tokens + output_tokens",
            listed=Listed(
                fields=(
                    ("id", "task_id"),
                    ("status", "status"),
                    ("depth", "depth"),
                    ("calls", "calls"),
                    ("tokens", "input_tokens + output_tokens"),
                    ("source", "source"),
                    ("result", "COALESCE(output, error, '')"),
                    ("updated_at", "updated_at"),
                ),
                columns=(
                    Column("id", "id"),
                    Column("status", "status"),
                    Column("calls", "calls", right=True),
                    Column("tokens", "tokens", right=True),
                    Column("last", "updated_at"),
                    Column("result", "result", width=50),
                ),
                empty="no tasks yet",
            ),
        ),
        cancel=effects.cancel,
        status=effects.status,
        sections=sections.sections,
    ),
)
