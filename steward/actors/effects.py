"""What a committed step asks the host to do, as plain values.

An actor kind's ``effects`` function (pure) turns a committed decision into
these; a recorded `LlmRequested` or `ToolRequested`, in a stream of any kind,
is a `CallModel` or `CallTool` without asking the kind. The host carries them
out and feeds each result back to the actor as
an input, keyed by its request id, so a result delivered twice is refused by
the decider. Nothing here does anything: the host and the effect handlers
under ``steward/effects/llm`` and ``steward/effects/tools`` do.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from steward.actors.prompt import Prompt
from steward.events import Event
from steward.events.protocol import (
    CancelRequested,
    EffectClaimed,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolRequested,
    ToolResulted,
)

__all__ = [
    "status",
    "ArmTimer",
    "CallModel",
    "CallTool",
    "Create",
    "Deliver",
    "Effect",
    "ModelCall",
    "Pending",
    "Told",
    "Claims",
    "Want",
    "cancel",
    "cancel_key",
    "claim_on",
    "claim_takes",
    "claimable",
    "claimed",
    "notify_key",
    "spawn_key",
    "take_key",
    "unclaimed",
]


class CallModel(msgspec.Struct, frozen=True, kw_only=True):
    """Ask the model ``request``; its answer (`LlmResponded`, `LlmFailed`)
    comes back to the requesting stream."""

    request: LlmRequested


class CallTool(msgspec.Struct, frozen=True, kw_only=True):
    """Run tool call ``request``; its `ToolResulted` comes back."""

    request: ToolRequested


class ArmTimer(msgspec.Struct, frozen=True, kw_only=True):
    """At ``due`` (epoch seconds), give the stream `WakeDue(timer_id)`. A timer
    a later decision superseded still fires: its decider refuses it, so timers
    need no cancelling."""

    timer_id: str
    due: float


class Deliver(msgspec.Struct, frozen=True, kw_only=True):
    """Give ``stream`` the input ``input`` (a child's result to its parent's
    ``reply_to``, a cancel to a child). ``key`` names the delivery, so it is
    in flight once; with ``stamp`` the host sets the input's ``at`` to the
    time it delivers."""

    key: str
    stream: str
    input: Event
    stamp: bool = False


class Create(msgspec.Struct, frozen=True, kw_only=True):
    """Start actor ``stream`` with ``input`` (its first event), unless the
    stream has events already; ``key`` and ``stamp`` as for `Deliver`."""

    key: str
    stream: str
    input: Event
    stamp: bool = False


Effect = CallModel | CallTool | ArmTimer | Deliver | Create


class ModelCall(msgspec.Struct, frozen=True, kw_only=True):
    """What a model call needs of the state that asked it: the prompt and
    its profile (the host knows whose stream asks)."""

    prompt: Prompt
    profile: str | None = None
    table: str | None = None
    """The ``[models.<name>]`` table the call goes to, when the actor names one."""
    labels: dict[str, str] = {}
    """What the host's log line of the call says of it besides its stream
    and request (a staged run's conversation, mode, stage, tools, reasoning)."""


class WantKind(enum.StrEnum):
    """What answers a want, which says who carries it out."""

    LLM = "llm"
    """A model call's answer (or its failure), carried out by the host."""
    TOOL = "tool"
    """A tool call's result, carried out by the host."""
    TIMER = "timer"
    """The host, when it is due: a `WakeDue` of the stream itself."""
    CREATE = "create"
    """The opening input of another stream (a child created)."""
    SPAWN = "spawn"
    """The opening input of a child the stream's actor spawned (a run's
    subagents)."""
    DELIVER = "deliver"
    """An input delivered to another stream (a result, a cancel)."""
    TAKE = "take"
    """The stream's own input that takes it off a queue."""
    APPROVAL = "approval"
    """A person (`Surface.waiting` and `answer`, a capability of any kind):
    the host never carries it out."""


class Want(msgspec.Struct, frozen=True, kw_only=True):
    """An effect a recorded event asks for that is not carried out until an
    event (of this stream or another) answers ``key``: a timer by its
    `WakeDue`, a delivery or creation by the input it gives; a timer is due
    at ``due_at``."""

    key: str
    kind: WantKind
    due_at: float | None = None


class Told(msgspec.Struct, frozen=True, kw_only=True):
    """What an actor's committed event tells the people on a channel:
    ``message`` is published on the channel's outbound subject (its
    ``type``, ``text`` and the ids that say whose it is)."""

    channel: str
    message: dict[str, str]


class Pending(msgspec.Struct, frozen=True, kw_only=True):
    """What one recorded event changes in the effects still to carry out:
    the ones it asks for, the keys it answers, and whether the actor ended
    (then none of its own is wanted any more). The pending projection keeps
    these, and a host routes the events that asked for them again on start,
    so a timer, delivery or creation survives a crash."""

    wants: tuple[Want, ...] = ()
    answers: tuple[str, ...] = ()
    ended: bool = False


def status(state: Any) -> str:
    """``state``'s status: `Surface.status` of the kinds (run, workflow,
    task) whose states keep it in a ``status`` field."""
    return str(state.status)


def calls_pending(event: Event) -> Pending | None:
    """What a model or tool call's request or answer changes in the effects
    still to carry out, for a stream of any kind (the request and answer
    events are the same for every kind); ``None`` for another event."""
    match event:
        case LlmRequested(request_id=rid):
            return Pending(wants=(Want(key=rid, kind=WantKind.LLM),))
        case ToolRequested(request_id=rid):  # (an approved call's approval too)
            return Pending(wants=(Want(key=rid, kind=WantKind.TOOL),))
        case (
            LlmResponded(request_id=rid)
            | LlmFailed(request_id=rid)
            | ToolResulted(request_id=rid)
        ):
            return Pending(answers=(rid,))
    return None


def spawn_key(child: str) -> str:
    """The key of creating child ``child`` (its `Create`, its pending want),
    answered when the child is created or its result is in."""
    return f"spawn:{child}"


def notify_key(child: str) -> str:
    """The key of delivering child ``child``'s result to its ``reply_to``."""
    return f"notify:{child}"


def take_key(run_id: str) -> str:
    """The key of a host taking queued run ``run_id`` (its `RunTaken`)."""
    return f"take:{run_id}"


def cancel(reason: str, at: float) -> CancelRequested:
    """An operator's cancel in the shared vocabulary (the `Surface.cancel` of
    the kinds that take it: the run, the task)."""
    return CancelRequested(reason=reason, at=at)


def cancel_key(child: str) -> str:
    """The key of delivering a cancel to child ``child``."""
    return f"cancel:{child}"


Claims = tuple[tuple[str, str, float], ...]
"""The (request, worker, until) claims on an actor's effects in flight,
which every kind that makes model or tool calls keeps in its state (a
worker's `EffectClaimed`, until its answer)."""


def claim_takes(held: tuple[str, float] | None, claim: EffectClaimed) -> bool:
    """Whether ``claim`` may take its effect, given the (worker, until) of
    the claim ``held`` on it: none is held, its own worker renews it, or its
    time has passed (that worker died)."""
    return held is None or held[0] == claim.worker or held[1] <= claim.at


def claim_on(claims: Claims, request_id: str) -> tuple[str, float] | None:
    """The (worker, until) of the claim on effect ``request_id``, if any."""
    return next(((w, u) for r, w, u in claims if r == request_id), None)


def claimable(claims: Claims, claim: EffectClaimed) -> bool:
    """Whether ``claim`` may take its effect, given the ``claims`` held."""
    return claim_takes(claim_on(claims, claim.request_id), claim)


def claimed(claims: Claims, claim: EffectClaimed) -> Claims:
    """``claims`` with ``claim`` in place of any earlier one on its effect."""
    return (
        *unclaimed(claims, claim.request_id),
        (claim.request_id, claim.worker, claim.until),
    )


def unclaimed(claims: Claims, request_id: str) -> Claims:
    """``claims`` less the one on ``request_id`` (answered)."""
    if not claims:
        return claims
    return tuple([c for c in claims if c[0] != request_id])
