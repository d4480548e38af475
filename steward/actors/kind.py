"""Actor kinds: each kind is a value, and one table maps stream names to them.

An actor's stream is named ``<kind>.<id>`` (``run.r1``); its kind is the first
segment. A `Kind` bundles what everything outside the actor needs of it: its
pure decider (``initial``, ``evolve``, ``decide``), which of its events are
inputs (a step of its stream is an input and the decisions after it), and
every event type it records (the log decodes into their union,
`steward.events.UNION`). `KINDS` is the table;
`kind_of` finds a stream's kind, with an error naming the kinds there are.

Replay reads the table (`steward.replay`): rebuild, verify and the split into
steps work for any kind. The host does too: it decides and folds through a
stream's kind, and carries out the effects (`steward.actors.effects`) that
the kind's ``effects`` says a committed decision asks for.

A kind's functions are pure (DESIGN §2): ``decide`` and ``evolve`` never
change the state they are given, and ``fold`` applies events to a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from steward.actors import run as run_actor
from steward.actors import run_effects, session_effects, workflow_effects
from steward.actors import session as session_actor
from steward.actors import workflow as workflow_actor
from steward.actors.effects import Effect, ModelCall, Pending, Told
from steward.actors.prompt import (
    Prompt,
    PromptCache,
)
from steward.errors import NotFoundError
from steward.events import UNION, Event, Recorded
from steward.events import run as run_events
from steward.events import session as session_events
from steward.events import workflow as workflow_events
from steward.events.protocol import LlmRequested

__all__ = ["KINDS", "Kind", "Step", "kind_of", "register"]

S = TypeVar("S")


Step = tuple[list[Event], S, Prompt | None]
"""What one accepted input does to an actor: its decisions, the state after
the input and them, and the prompt of the model call they request (``None``
when none, or when the kind leaves it to `Kind.model_call`)."""


@dataclass(frozen=True)
class Kind(Generic[S]):
    """One actor kind: its name, its decider, its events and what its
    committed decisions ask of the host (all pure).

    Only ``name`` to ``events`` are required: a kind without the others
    records inputs and decisions and asks the host for nothing.
    """

    name: str
    initial: S
    evolve: Callable[[S, Event], S]
    decide: Callable[[Event, S], list[Event] | None]
    inputs: tuple[type[Event], ...]
    """The event types that open a step (what arrived); all others are the
    decisions of the input before them."""
    events: tuple[type[Event], ...]
    """Every event type the kind records, inputs and decisions."""
    opens: tuple[type[Event], ...] = ()
    """The inputs that begin a stream (`RunCreated`): the host decides one
    on ``initial`` without reading a stream it knows nothing of. Appended at
    version 0, it fails if the stream has events, and is then decided again
    on them: the kind's decider must refuse an opening input on a stream
    that has begun."""
    fold_events: Callable[[Iterable[Event], S], S] | None = None
    """A fold giving what ``evolve`` event by event would, faster."""
    step: Callable[[Event, S, PromptCache | None], Step[S] | None] | None = None
    """``decide`` with the state after the step and its model call's prompt,
    where the kind builds them together; default: ``decide``, then ``fold``."""
    same_decisions: Callable[[tuple[Event, ...], tuple[Event, ...], S], bool] | None = (
        None
    )
    """Whether decisions re-decided now (second) are the recorded ones (first)
    in an older form, given the state after the step: for a kind whose old
    logs recorded a value in a form it no longer writes. ``None``: only
    equality counts."""
    routed: frozenset[type[Event]] = frozenset()
    """The event types `effects` may answer; the host skips the others (and
    makes the model and tool calls of `LlmRequested` and `ToolRequested`
    itself)."""
    effects: Callable[[Recorded, S, S], list[Effect]] | None = None
    """What committed event ``rec`` asks of the host, given the state at it
    and the newest state (`steward.actors.effects`)."""
    awaits: Callable[[S, str], bool] | None = None
    """Whether the actor still waits for the result of an effect (by request
    id): the host skips a call whose answer is in already."""
    claim: Callable[[S, str], tuple[str, float] | None] | None = None
    """The (worker, until) of the claim on an effect, if any."""
    model_call: (
        Callable[[S, LlmRequested, PromptCache | None, Prompt | None], ModelCall] | None
    ) = None
    """What a model call the actor asked for sends: the prompt given (the one
    its decider hashed), or one built from the state at the request."""
    correlation: Callable[[S, Event], str | None] | None = None
    """The correlation id of a commit of ``input`` on ``state``."""
    workspace: Callable[[S], str | None] | None = None
    """The directory the actor's tool calls work in, if not the host's."""
    detach: Callable[[Event, str], Event] | None = None
    """A fork's inputs made an actor's of its own (one that answers no one),
    given each copied one and the id of the actor forked; ``None``: copied
    as they are."""
    pending: Callable[[Event], Pending] | None = None
    """What a recorded event changes in the effects still to carry out
    (timers, deliveries, creations), for the pending projection a host
    resumes from after a crash. A kind with ``effects`` needs it, or those
    effects are lost when a host dies before carrying them out. The run
    kind's is kept by its own projection (`steward.projections.runs`)."""

    tells: Callable[[Event, S], Told | None] | None = None
    """What a committed event tells a channel, given the actor's state (at
    or after the event: what it reads is fixed when the actor opens), or
    ``None``; the egress publishes it."""
    told: frozenset[type[Event]] = frozenset()
    """The event types `tells` may tell of; the egress reads the actor's
    state for those only."""
    updates: bool = False
    """Whether every event of the kind's streams is published as an update
    (``steward.<kind>s.<id>.updates``) by the egress."""
    derived: tuple[str, ...] = ("request_id", "timer_id")
    """The event fields that hold ids the kind derives from its actor's id
    (``<id>/llm/1``, ``<id>-t2``): a fork renames them for its own
    (`steward.replay.remap`). The shared vocabulary's request and timer ids
    by default; a kind adds its own (``run_id``, ``session_id``, ...)."""

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        """The state after ``events``, from ``state`` (default: ``initial``)."""
        start = self.initial if state is None else state
        if self.fold_events is not None:
            return self.fold_events(events, start)
        for event in events:
            start = self.evolve(start, event)
        return start

    def decide_and_fold(
        self, input: Event, state: S, cache: PromptCache | None = None
    ) -> Step[S] | None:
        """The step ``input`` makes on ``state``; ``None`` refuses it."""
        if self.step is not None:
            return self.step(input, state, cache)
        decisions = self.decide(input, state)
        if decisions is None:
            return None
        return decisions, self.fold([input, *decisions], state), None

    def is_input(self, event: Event) -> bool:
        return isinstance(event, self.inputs)

    def correlation_of(self, state: S, input: Event) -> str | None:
        """The correlation id of a commit of ``input`` on ``state`` (``None``
        for a kind that names none)."""
        return None if self.correlation is None else self.correlation(state, input)


RUN: Kind[run_actor.Run] = Kind(
    name="run",
    initial=run_actor.initial,
    evolve=run_actor.evolve,
    decide=run_actor.decide,
    inputs=run_events.INPUT_TYPES,
    events=run_events.EVENT_TYPES,
    opens=(run_events.RunCreated,),
    fold_events=run_actor.fold,
    step=run_actor.decide_and_fold,
    same_decisions=run_effects.same_decisions,
    routed=run_effects.ROUTED,
    effects=run_effects.effects,
    awaits=run_effects.awaits,
    claim=run_effects.claim,
    model_call=run_effects.model_call,
    correlation=run_effects.correlation,
    workspace=run_effects.workspace,
    detach=run_effects.detach,
    tells=run_effects.tells,
    told=run_effects.TOLD,
    updates=True,
    derived=("run_id", "request_id", "timer_id"),
)

SESSION: Kind[session_actor.Session] = Kind(
    name="session",
    initial=session_actor.initial,
    evolve=session_actor.evolve,
    decide=session_actor.decide,
    inputs=session_events.INPUT_TYPES,
    events=session_events.EVENT_TYPES,
    opens=(session_events.SessionOpened,),
    routed=session_effects.ROUTED,
    effects=session_effects.effects,
    awaits=session_effects.awaits,
    claim=session_actor.claim_on,
    model_call=session_effects.model_call,
    correlation=session_effects.correlation,
    detach=session_effects.detach,
    pending=session_effects.pending,
    tells=session_effects.tells,
    told=session_effects.TOLD,
    derived=("session_id", "run_id", "request_id", "timer_id"),
)

WORKFLOW: Kind[workflow_actor.Workflow] = Kind(
    name="workflow",
    initial=workflow_actor.initial,
    evolve=workflow_actor.evolve,
    decide=workflow_actor.decide,
    inputs=workflow_events.INPUT_TYPES,
    events=workflow_events.EVENT_TYPES,
    opens=(workflow_events.WorkflowCreated,),
    routed=workflow_effects.ROUTED,
    effects=workflow_effects.effects,
    awaits=workflow_actor.awaits,
    claim=workflow_actor.claim_on,
    correlation=workflow_effects.correlation,
    detach=workflow_effects.detach,
    pending=workflow_effects.pending,
    derived=("workflow_id", "run_id", "request_id", "timer_id"),
)

KINDS: dict[str, Kind[Any]] = {
    RUN.name: RUN,
    SESSION.name: SESSION,
    WORKFLOW.name: WORKFLOW,
}
"""Every actor kind by name: the only place that names them."""


def register(kind: Kind[Any]) -> None:
    """Add ``kind`` to the table (a kind of an extension, or of a test), and
    its events to the union the log decodes into."""
    if kind.name in KINDS and KINDS[kind.name] is not kind:
        raise ValueError(f"there is an actor kind {kind.name!r} already")
    UNION.add(kind.events)
    KINDS[kind.name] = kind


def kind_of(stream: str) -> Kind[Any]:
    """The kind of the actor whose stream is ``stream``."""
    kind = KINDS.get(stream.partition(".")[0])  # on every commit: no other call
    if kind is None:
        raise NotFoundError(
            f"stream {stream!r} is of no actor kind steward has (its name starts "
            f"with one of: {', '.join(sorted(f'{k}.' for k in KINDS))})"
        )
    return kind
