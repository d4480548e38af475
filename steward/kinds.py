"""steward's actor kinds: the one place that names them.

`KINDS` is the table every part that serves actors takes by default (the
host, the projector, replay, the egress, the CLI); a log decodes into the
union of its events by default (`steward.events.UNION`, which the events
layer holds below this one: it gathers the ``EVENT_TYPES`` of every module
under `steward.events`, and a test holds the two equal). A kind is its
events, decider, effects and read models, and one entry here.
"""

from __future__ import annotations

from steward.actors import (
    effects,
    outstanding,
    run_effects,
    session_effects,
    session_sections,
    task_effects,
    task_sections,
    workflow_effects,
    workflow_sections,
)
from steward.actors import run as run_actor
from steward.actors import session as session_actor
from steward.actors import task as task_actor
from steward.actors import workflow as workflow_actor
from steward.actors.kind import Decider, Kind, Kinds, Listing, Reactor, Surface
from steward.events import run as run_events
from steward.events import session as session_events
from steward.events import task as task_events
from steward.events import workflow as workflow_events
from steward.projections.runs import RUNS, spent
from steward.projections.sessions import SESSIONS
from steward.projections.tasks import TASKS
from steward.projections.workflows import WORKFLOWS

TOKENS = "input_tokens + output_tokens"
"""A run's tokens, in and out, as its row in ``runs`` holds them."""

__all__ = ["KINDS", "RUN", "SESSION", "TASK", "WORKFLOW", "kind_of"]

RUN: Kind[run_actor.Run] = Kind(
    name="run",
    decider=Decider(
        initial=run_actor.initial,
        evolve=run_actor.evolve,
        decide=run_actor.decide,
        inputs=run_events.INPUT_TYPES,
        events=run_events.EVENT_TYPES,
        opens=(run_events.RunCreated,),
        fold_events=run_actor.fold,
        step=run_actor.decide_and_fold,
        same_decisions=run_effects.same_decisions,
    ),
    reactor=Reactor(
        routed=run_effects.ROUTED,
        effects=run_effects.effects,
        outstanding=outstanding.kept,
        model_call=run_effects.model_call,
        correlation=run_effects.correlation,
        workspace=run_effects.workspace,
        pending=run_effects.pending,
    ),
    surface=Surface(
        detach=run_effects.detach,
        tells=run_effects.tells,
        told=run_effects.TOLD,
        updates=True,
        show=run_effects.show,
        forked=run_effects.forked,
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
        waiting=run_effects.waiting,
        answer=run_effects.answer,
        status=effects.status,
    ),
)

SESSION: Kind[session_actor.Session] = Kind(
    name="session",
    decider=Decider(
        initial=session_actor.initial,
        evolve=session_actor.evolve,
        decide=session_actor.decide,
        inputs=session_events.INPUT_TYPES,
        events=session_events.EVENT_TYPES,
        opens=(session_events.SessionOpened,),
    ),
    reactor=Reactor(
        routed=session_effects.ROUTED,
        effects=session_effects.effects,
        outstanding=outstanding.kept,
        model_call=session_effects.model_call,
        correlation=session_effects.correlation,
        pending=session_effects.pending,
    ),
    surface=Surface(
        detach=session_effects.detach,
        tells=session_effects.tells,
        told=session_effects.TOLD,
        forked=session_effects.forked,
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
        sections=session_sections.sections,
    ),
)

WORKFLOW: Kind[workflow_actor.Workflow] = Kind(
    name="workflow",
    decider=Decider(
        initial=workflow_actor.initial,
        evolve=workflow_actor.evolve,
        decide=workflow_actor.decide,
        inputs=workflow_events.INPUT_TYPES,
        events=workflow_events.EVENT_TYPES,
        opens=(workflow_events.WorkflowCreated,),
    ),
    reactor=Reactor(
        routed=workflow_effects.ROUTED,
        effects=workflow_effects.effects,
        outstanding=outstanding.kept,
        correlation=workflow_effects.correlation,
        pending=workflow_effects.pending,
    ),
    surface=Surface(
        detach=workflow_effects.detach,
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
        cancel=workflow_effects.cancel,
        status=effects.status,
        sections=workflow_sections.sections,
    ),
)

TASK: Kind[task_actor.Task] = Kind(
    name="task",
    decider=Decider(
        initial=task_actor.initial,
        evolve=task_actor.evolve,
        decide=task_actor.decide,
        inputs=task_events.INPUT_TYPES,
        events=task_events.EVENT_TYPES,
        opens=(task_events.TaskCreated,),
    ),
    reactor=Reactor(
        routed=task_effects.ROUTED,
        effects=task_effects.effects,
        outstanding=task_actor.outstanding,
        model_call=task_effects.model_call,
        correlation=task_effects.correlation,
        pending=task_effects.pending,
    ),
    surface=Surface(
        detach=task_effects.detach,
        show=task_effects.show,
        projection=TASKS,
        derived=("task_id", "request_id", "stream"),
        listing=Listing(
            table="tasks",
            id="task_id",
            status="status",
            created="created_at",
            updated="updated_at",
            text="COALESCE(source, program)",
            parent="parent",
            output="COALESCE(output, error)",
            tokens="input_tokens + output_tokens",
        ),
        cancel=effects.cancel,
        status=effects.status,
        sections=task_sections.sections,
    ),
)

KINDS = Kinds(RUN, SESSION, WORKFLOW, TASK)
"""steward's actor kinds."""

kind_of = KINDS.of
"""The kind of the actor whose stream is the one given, of steward's kinds."""
