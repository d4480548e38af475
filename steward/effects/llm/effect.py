"""The model-call effect: ask a provider, within limits, with retries.

`ModelCalls` is what a host carries a model call out with: the provider (or
the router of models by profile), the priority limiter of calls in flight
(interactive before subagent calls, Klaw's rule), each model's rate limits,
retries with backoff (each failed attempt recorded), the stream seen by
listeners and, when the model records streams, recorded in the log, and the
cost of the call at the model's prices. The host decides whether the call is
still wanted, builds its prompt and records its answer; this makes it.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from prometheus_client import Gauge

from steward import events
from steward.actors.prompt import Prompt
from steward.bus import Commit
from steward.clock import Clock
from steward.effects.llm.base import (
    AssistantDelta,
    Provider,
    RequestInfo,
    ResultEvent,
    StreamEvent,
    ToolUseEvent,
    collect,
)
from steward.effects.llm.limits import PRIORITIES, PriorityLimiter
from steward.effects.llm.registry import ModelRouter
from steward.effects.llm.retry import backoff_delay
from steward.errors import ProviderError, describe
from steward.events import Event, Recorded
from steward.metrics import HOST as METRICS

__all__ = ["DeltaListener", "EffectPort", "ModelCalls"]

LLM_WAITING = Gauge(
    "steward_llm_waiting", "Model calls waiting for a slot", ["priority"]
)

DeltaListener = Callable[[RequestInfo, str], None]


class EffectPort(Protocol):
    """What an effect handler needs of the host that runs it."""

    clock: Clock
    worker_id: str | None
    """Set when hosts share the log: then a call is claimed before it is made."""

    async def submit(
        self, stream: str, input: Event, *, causation_id: str | None = None
    ) -> Commit | None: ...

    async def claim(self, rec: Recorded, request_id: str) -> bool:
        """Take effect ``request_id`` for this worker; whether it is ours."""
        ...


class ModelCalls:
    """The model calls of one host: provider, limits, retries, listeners."""

    def __init__(
        self, provider: Provider | None, *, concurrency: int = 2, retries: int = 2
    ) -> None:
        self.provider = provider
        self.retries = retries
        """Retries of a retryable failure, for a provider that is no router
        (a router says per model)."""
        self.slots = PriorityLimiter(concurrency)
        for priority in PRIORITIES:
            LLM_WAITING.labels(priority).set_function(_waiting(self.slots, priority))
        self.delta_listeners: list[DeltaListener] = []
        self._names: dict[tuple[str | None, str | None], tuple[str, str]] = {}

    def named(self, info: RequestInfo, answer: Event | None = None) -> tuple[str, str]:
        """The provider and model request ``info`` goes to (`_named`);
        ``("", "")`` when its set-up failed (``answer`` says why)."""
        assert self.provider is not None
        try:
            return self._named(info)
        except Exception:  # the profile or its table is gone: the answer says
            return "", ""

    def _named(self, info: RequestInfo) -> tuple[str, str]:
        """`_named`, kept per profile and table (a router's look-up may copy
        its settings)."""
        key = (info.profile, info.table)
        found = self._names.get(key)
        if found is None:
            assert self.provider is not None
            found = self._names[key] = _named(self.provider, info)
        return found

    async def answer(
        self, port: EffectPort, rec: Recorded, prompt: Prompt, info: RequestInfo
    ) -> Event | None:
        """The answer to model request ``info`` (recorded as ``rec``), after
        its retries: `LlmResponded` or `LlmFailed`; ``None`` if another worker
        has it. Each failed attempt it retries is recorded (`LlmAttemptFailed`),
        and so is each attempt's stream when the model records streams."""
        assert self.provider is not None
        provider = self.provider
        retries = self.retries
        record = False
        if isinstance(provider, ModelRouter):
            model = provider.model(info.profile, info.table)
            retries, record = model.max_retries, model.record_stream
        # A provider whose replies are whole before they are given (the
        # scripted one) hands over the result alone when no one watches the
        # stream's events: what `collect` would return, without the stream.
        whole: Callable[[Prompt, RequestInfo], Awaitable[ResultEvent]] | None = None
        on_event: Callable[[StreamEvent], None] | None = None
        keep_stream: _KeepStream = _keep_nothing  # called only when `record`
        if record or self.delta_listeners:
            on_event, keep_stream = self._watchers(port, rec, info, record)
        else:
            target = (
                provider.provider(info.profile, info.table)
                if isinstance(provider, ModelRouter)
                else provider
            )
            whole = getattr(target, "result", None)

        named = self._named(info)
        rate = None
        if isinstance(provider, ModelRouter):
            rate = provider.rate_limiter(info, port.clock.now, port.clock.sleep)
        tokens = 0
        if rate is not None and rate.tpm is not None:
            sent = len(prompt.system) + sum(len(m.content) for m in prompt.messages)
            tokens = sent // 4
        attempt = 0
        while True:
            attempt += 1
            started = port.clock.now()  # from the slot's taking, below
            try:
                if rate is not None:
                    await rate.acquire(tokens)
                asked = port.clock.now()
                if not self.slots.take(info.priority):
                    await self.slots.acquire(info.priority)
                METRICS.waited(info.priority, port.clock.now() - asked)
                try:
                    # claimed once a slot is free, so a worker never holds
                    # more calls than it can make
                    if (
                        attempt == 1
                        and port.worker_id is not None
                        and not await port.claim(rec, info.request_id)
                    ):
                        return None
                    if attempt == 1:
                        METRICS.effects["llm"] += 1
                    started = port.clock.now()
                    if whole is not None:
                        result = await whole(prompt, info)
                    else:
                        first = _FirstToken(port.clock, on_event)
                        result = await collect(provider.stream(prompt, info), first)
                        if first.at is not None:
                            METRICS.first_token(*named, first.at - started)
                finally:
                    self.slots.release()
            except ProviderError as e:
                METRICS.model_failed(*named, e.kind, port.clock.now() - started)
                if record:
                    await keep_stream(attempt, complete=False)
                message = str(e).removeprefix(f"{e.kind}: ")
                if e.retryable and attempt <= retries:
                    delay = backoff_delay(attempt, e.retry_after, rand=random.random())
                    note = events.LlmAttemptFailed(
                        request_id=info.request_id,
                        attempt=attempt,
                        kind=e.kind,
                        message=message,
                        status=e.status,
                        retry_after=e.retry_after,
                        delay=delay,
                        at=port.clock.now(),
                    )
                    if await port.submit(rec.stream, note, causation_id=rec.id) is None:
                        return note  # the request was answered or the run ended
                    await port.clock.sleep(delay)
                    continue
                return events.LlmFailed(
                    request_id=info.request_id,
                    kind=e.kind,
                    message=message,
                    at=port.clock.now(),
                )
            except Exception as e:  # a provider bug must not kill the host
                METRICS.model_failed(*named, "internal", port.clock.now() - started)
                if record:
                    await keep_stream(attempt, complete=False)
                return events.LlmFailed(
                    request_id=info.request_id,
                    kind="internal",
                    message=describe(e),
                    at=port.clock.now(),
                )
            now = port.clock.now()
            METRICS.effect_seconds["llm"].observe(max(0.0, now - started))
            if record:
                await keep_stream(attempt, complete=True)
            price = getattr(provider, "cost", None)
            cost = price(info, result.usage) if price is not None else 0.0
            METRICS.model(*named).answered(now - started, result.usage, cost)
            return events.LlmResponded(
                request_id=info.request_id,
                text=result.text,
                tool_calls=result.tool_calls,
                usage=result.usage,
                cost_usd=cost,
                attempts=attempt,
                at=now,
                reasoning=result.reasoning,
            )

    def _watchers(
        self, port: EffectPort, rec: Recorded, info: RequestInfo, record: bool
    ) -> tuple[Callable[[StreamEvent], None], _KeepStream]:
        """For a model call someone watches: what sees each stream event
        (delta listeners, and the stream kept when ``record``), and what
        records an attempt's kept stream (called only when ``record``)."""
        seen: list[dict[str, Any]] = []

        def on_event(event: StreamEvent) -> None:
            if record:
                seen.append({"seq": len(seen) + 1, **msgspec.to_builtins(event)})
            if isinstance(event, AssistantDelta):
                for listener in self.delta_listeners:
                    listener(info, event.text)

        async def keep_stream(attempt: int, complete: bool) -> None:
            recorded = events.LlmStreamRecorded(
                request_id=info.request_id,
                attempt=attempt,
                events=tuple(seen),
                complete=complete,
                at=port.clock.now(),
            )
            seen.clear()
            await port.submit(rec.stream, recorded, causation_id=rec.id)

        return on_event, keep_stream


class _KeepStream(Protocol):
    def __call__(self, attempt: int, complete: bool) -> Awaitable[None]: ...


async def _keep_nothing(attempt: int, complete: bool) -> None:
    pass


class _FirstToken:
    """Passes a stream's events on (to ``then``), noting when the first
    piece of the answer (text or a tool call) came."""

    __slots__ = ("at", "clock", "then")

    def __init__(
        self, clock: Clock, then: Callable[[StreamEvent], None] | None
    ) -> None:
        self.at: float | None = None
        self.clock = clock
        self.then = then

    def __call__(self, event: StreamEvent) -> None:
        if self.at is None and isinstance(event, AssistantDelta | ToolUseEvent):
            self.at = self.clock.now()
        if self.then is not None:
            self.then(event)


def _named(provider: Provider, info: RequestInfo) -> tuple[str, str]:
    """The provider and model a call of ``info`` goes to, as the metrics
    label them (the configured ``[models]`` table's, so a bounded set)."""
    if isinstance(provider, ModelRouter):
        model = provider.model(info.profile, info.table)
        return model.provider, model.model or model.provider
    return type(provider).__name__.removesuffix("Provider").lower(), ""


def _waiting(limiter: PriorityLimiter, priority: str) -> Callable[[], float]:
    return lambda: limiter.depth()[priority]
