"""The model and tool calls an actor asked for and has no answer to yet, and
the claims workers hold on them: the sub-state every kind that calls models
or tools embeds in its own (DESIGN §2: folded from events, pure).

A kind folds each event through `Outstanding.apply` as well as its own
``evolve`` (only the shared vocabulary's requests, answers and claims change
it), and its reactor reads it back (`steward.actors.kind.Reactor.outstanding`):
the host makes a call the actor still `awaits`, fences it with the `claim`
on it, and the decider `accepts` a worker's `EffectClaimed` only for a call
it awaits whose claim that worker may take (none held, its own, or lapsed).
What a call is for (its tool's name and arguments, the prompt a model call
answers) stays in the kind's own state.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from steward.actors.effects import Claims, claim_on, claimable, claimed, unclaimed
from steward.events import Event
from steward.events.protocol import (
    EffectClaimed,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    ToolRequested,
    ToolResulted,
)

__all__ = ["CHANGES", "NONE", "Outstanding", "folded", "kept"]

CHANGES: frozenset[type[Event]] = frozenset(
    {LlmRequested, ToolRequested, LlmResponded, LlmFailed, ToolResulted, EffectClaimed}
)
"""The event types `Outstanding.apply` does not pass over."""


class Outstanding(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The calls asked for and not yet answered (by request id, in the
    order asked) and the (request, worker, until) claims held on them."""

    requested: tuple[str, ...] = ()
    claims: Claims = ()

    def apply(self, event: Event) -> Outstanding:
        """This sub-state after ``event`` (itself for any event that does not
        request, answer or claim a call)."""
        match event:
            case LlmRequested(request_id=rid) | ToolRequested(request_id=rid):
                return self.asked(rid)
            case (
                LlmResponded(request_id=rid)
                | LlmFailed(request_id=rid)
                | ToolResulted(request_id=rid)
            ):
                return self.answered(rid)
            case EffectClaimed():
                return Outstanding(
                    requested=self.requested, claims=claimed(self.claims, event)
                )
            case _:
                return self

    def asked(self, request_id: str) -> Outstanding:
        """This sub-state with call ``request_id`` asked for (`apply` of its
        request, for a kind that folds each event type by a function of its
        own)."""
        return Outstanding(requested=(*self.requested, request_id), claims=self.claims)

    def answered(self, request_id: str) -> Outstanding:
        """This sub-state with call ``request_id`` no longer awaited (`apply`
        of its answer, or the actor gave up on it)."""
        requested, claims = self.requested, self.claims
        if request_id in requested:
            requested = (
                ()
                if len(requested) == 1
                else tuple(r for r in requested if r != request_id)
            )
        elif not claims:
            return self
        if claims:
            claims = unclaimed(claims, request_id)
        if not requested and not claims:
            return NONE  # (most answers: no new value to make)
        return Outstanding(requested=requested, claims=claims)

    def awaits(self, request_id: str) -> bool:
        """Whether call ``request_id`` was asked for and has no answer yet."""
        return request_id in self.requested

    def claim(self, request_id: str) -> tuple[str, float] | None:
        """The (worker, until) of the claim on call ``request_id``, if any."""
        return claim_on(self.claims, request_id)

    def accepts(self, claim: EffectClaimed) -> bool:
        """Whether ``claim`` may take its call: one awaited, and no other
        live worker's claim on it."""
        return claim.request_id in self.requested and claimable(self.claims, claim)


NONE = Outstanding()
"""No call awaited, no claim held."""


def kept(state: Any) -> Outstanding:
    """The `Outstanding` a kind's state keeps in its ``outstanding`` field:
    the `steward.actors.kind.Reactor.outstanding` of such a kind."""
    outstanding: Outstanding = state.outstanding
    return outstanding


S = TypeVar("S", bound=msgspec.Struct)


def folded(state: S, event: Event) -> S:
    """``state`` (a kind's, keeping an `Outstanding` in its ``outstanding``
    field) with ``event`` folded into that sub-state: a kind's ``evolve``
    ends with it."""
    if type(event) in CHANGES:
        return msgspec.structs.replace(state, outstanding=kept(state).apply(event))
    return state
