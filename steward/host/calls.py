"""Model and tool calls: whether a call is still wanted, and its answer recorded.

The effect handlers make the calls (`steward.effects.llm.effect`,
`steward.effects.tools.effect`); this is the host's side of each. A request
read back from the log (after a restart, or written by another process) is
carried out only while its actor still waits on it, and a model's prompt
rebuilt from such a state is checked against the hash the decider recorded.
With worker ids a call is claimed first (`steward.host.claims`).

An effect never leaves a run stuck: a provider that fails to set up, an
answer the log will not take (too large, say) after a few tries, an
exception anywhere in the call, each is recorded as the call's failure
(`LlmFailed` with the usage of a paid reply, a failed `ToolResulted`), which
the decider acts on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Protocol

from steward import events
from steward.actors.kind import Kind, Kinds
from steward.actors.prompt import PromptCache, prompt_matches
from steward.bus import Commit
from steward.clock import Clock
from steward.effects.llm import RequestInfo
from steward.effects.llm.effect import ModelCalls
from steward.effects.tools import ToolContext, ToolRegistry
from steward.effects.tools.base import OUTCOME_UNKNOWN
from steward.effects.tools.effect import call_tool
from steward.errors import StewardError, describe
from steward.events import Event, Recorded
from steward.host.claims import Claims
from steward.host.mailbox import Mailboxes
from steward.host.states import States
from steward.host.traces import Traces

log = logging.getLogger("steward.host")

_RECORD_RETRIES = (0.2, 1.0)
"""Pauses before each new try to record an effect's answer the log refused (a
busy file, an unconfirmed publish); when the last fails too, the failure is
recorded instead, so the run goes on (`Calls._record_answer`)."""


class Port(Protocol):
    """The host, as the calls hand it on: to a model call (to claim it and
    record its failed attempts, `EffectPort`) and to a tool (to read an
    actor's state or give it an input, `Actors`)."""

    clock: Clock
    worker_id: str | None

    async def submit(
        self, stream: str, input: Event, *, causation_id: str | None = None
    ) -> Commit | None: ...

    async def claim(self, rec: Recorded, request_id: str) -> bool: ...

    async def state(self, stream: str) -> tuple[Any, int]: ...


class Calls:
    """The host's model and tool calls."""

    def __init__(
        self,
        host: Port,
        kinds: Kinds,
        states: States,
        mailboxes: Mailboxes,
        claims: Claims,
        models: ModelCalls,
        prompt_cache: PromptCache,
        *,
        tools: ToolRegistry | None,
        workspace: Path,
        reads: Any,
        tool_timeout: float,
        traces: Traces | None = None,
    ) -> None:
        self._traces = traces
        self._host = host
        self._clock = host.clock
        self._kinds = kinds
        self._states = states
        self._mailboxes = mailboxes
        self._claims = claims
        self._models = models
        self._prompt_cache = prompt_cache
        self._tools = tools
        self._workspace = workspace
        self._reads = reads
        self._tool_timeout = tool_timeout

    def answered(self, rec: Recorded, request_id: str) -> bool:
        """Whether model request ``request_id`` (recorded as ``rec``) is known
        to be answered: the newest state this host holds no longer waits on it."""
        cached = self._states.cached(rec.stream)
        return (
            cached is not None
            and cached[1] > rec.version
            and not _awaits(self._kinds.of(rec.stream), cached[0], request_id)
        )

    async def model(self, rec: Recorded, request: events.LlmRequested) -> Commit | None:
        """Ask the model ``request`` and submit its answer; the answer's commit."""
        kept = self._mailboxes.take_prompt(request.request_id)
        kind = self._kinds.of(rec.stream)
        rid = request.request_id
        states = self._states
        # the cached state taken without a coroutine, as it nearly always is
        state = states.cached_at(rec.stream, rec.version)
        if state is None:
            # A request read back from the log (after a restart, or written by
            # another process, maybe with its answer in the same commit, as a
            # fork's copy) is asked only while the actor still waits on it.
            if not _awaits(kind, (await states.get(rec.stream))[0], rid):
                return None
            state = await states.at(rec.stream, rec.version)
        if not _awaits(kind, state, rid) or kind.reactor.model_call is None:
            return None  # answered already; nothing to do
        call = kind.reactor.model_call(state, request, self._prompt_cache, kept)
        if call.labels:
            said = " ".join(f"{k}={v}" for k, v in call.labels.items())
            stage = call.labels.get("stage")
            extra = {} if stage is None else {"stage": str(stage)}
            log.info("model call %s of %s: %s", rid, rec.stream, said, extra=extra)
        else:
            log.debug("model call %s of %s", rid, rec.stream)
        prompt = call.prompt
        info = RequestInfo(
            stream=rec.stream,
            request_id=rid,
            priority=request.priority,
            profile=call.profile,
            table=call.table,
            iteration=request.iteration,
        )
        answer: Event | None
        # The decider hashed this very prompt when this host committed the
        # request; state read back from the log (after a restart, or written
        # by another process, maybe by other code) is checked.
        own = states.own(rec.stream, rec.version)
        if not own and not prompt_matches(
            prompt, request.prompt_hash, self._prompt_cache
        ):
            answer = events.LlmFailed(
                request_id=request.request_id,
                kind="internal",
                message="the prompt rebuilt from the log does not match the "
                "recorded hash; the run's code or settings changed under it",
                at=self._clock.now(),
            )
        else:
            began_ns = time.time_ns()
            try:
                answer = await self._models.answer(self._host, rec, prompt, info)
            except Exception as e:  # a provider's set-up (profile, key) failed
                answer = events.LlmFailed(
                    request_id=request.request_id,
                    kind="internal",
                    message=describe(e),
                    at=self._clock.now(),
                )
            finally:
                if self._claims.renewing:
                    await self._claims.stop_renewing(request.request_id)
            if self._traces is not None and answer is not None:
                provider, model = self._models.named(info, answer)
                self._traces.chat(
                    rec.stream,
                    rec.correlation_id,
                    rid,
                    provider,
                    model,
                    began_ns,
                    time.time_ns(),
                    answer,
                )
        if answer is None:
            return None
        return await self._record_answer(rec, answer)

    async def tool(self, rec: Recorded, request: events.ToolRequested) -> None:
        """Make tool call ``request`` and submit its result."""
        state, _ = await self._states.get(rec.stream)
        rid = request.request_id
        kind = self._kinds.of(rec.stream)
        if not _awaits(kind, state, rid):
            return  # answered already (read back from the log, as a fork's copy)
        assert self._tools is not None
        if self._tools.once_only(request.name):  # known without asking a server
            taken = await self._claims.once(rec, rid)
            if taken == "unknown":
                await self._record_answer(rec, _outcome_unknown(request, self._clock))
                return
            if taken == "theirs":
                return
        elif not await self._claims.claim(rec, rid):
            return  # another worker runs it, or it is answered already
        try:  # from here on the claim taken is let go, whatever happens
            own = (
                None
                if kind.reactor.workspace is None
                else kind.reactor.workspace(state)
            )
            ctx = ToolContext(
                workspace=self._workspace if own is None else Path(own),
                stream=rec.stream,
                request_id=rid,
                actors=self._host,
                reads=self._reads,
                now=self._clock.now(),
            )
            began_ns = time.time_ns()
            result = await call_tool(
                self._tools,
                request,
                ctx,
                timeout=self._tool_timeout,
                clock=self._clock,
            )
            if self._traces is not None:
                self._traces.tool(
                    rec.stream,
                    rec.correlation_id,
                    rid,
                    request.name,
                    began_ns,
                    time.time_ns(),
                    result.ok,
                )
        finally:
            self._claims.ended(rid)
            if self._claims.renewing:
                await self._claims.stop_renewing(rid)
        await self._record_answer(rec, result)

    async def _record_answer(self, rec: Recorded, answer: Event) -> Commit | None:
        """Submit an effect's ``answer``; if that fails, the failure instead.

        A call made (and maybe paid for) is always recorded: an answer the
        log cannot take (too large for the backend, or one the decider
        breaks on) becomes an `LlmFailed` with its usage and cost, or a
        failed `ToolResulted`, which the decider acts on like any failure.
        """
        submit = self._mailboxes.submit
        problem = ""
        for pause in (0.0, *_RECORD_RETRIES):
            if pause:
                log.warning("stream %s: %s; trying again", rec.stream, problem)
                await asyncio.sleep(pause)  # the log's time, not the run's
            try:
                return await submit(rec.stream, answer, causation_id=rec.id)
            except Exception as e:
                problem = f"the answer was not recorded: {describe(e)}"
                if not isinstance(e, StewardError):
                    break  # the answer's own fault: it will not go in
                # the log's (a busy file, an unconfirmed publish): may pass
        failed = _unrecordable(answer, problem)
        if failed is None:
            raise StewardError(f"stream {rec.stream}: {problem}")
        log.warning("stream %s: %s", rec.stream, failed)
        return await submit(rec.stream, failed, causation_id=rec.id)


def _outcome_unknown(request: events.ToolRequested, clock: Clock) -> Event:
    """The result of a call that must not be made twice (its tool is not
    idempotent) and that a host which is gone began."""
    return events.ToolResulted(
        request_id=request.request_id,
        ok=False,
        error=f"{request.name}: the host stopped during this call; {OUTCOME_UNKNOWN}",
        retryable=False,
        at=clock.now(),
    )


def _awaits(kind: Kind[Any], state: Any, request_id: str) -> bool:
    """Whether the actor at ``state`` still waits for effect ``request_id``
    (a kind that cannot say is taken to wait: its decider refuses a late
    answer)."""
    outstanding = kind.reactor.outstanding
    return True if outstanding is None else outstanding(state).awaits(request_id)


def _unrecordable(answer: Event, message: str) -> Event | None:
    """The failure to record when an effect's ``answer`` cannot be: the
    model call's usage and cost kept, the message cut to a readable length."""
    message = message[:2_000]
    match answer:
        case events.LlmResponded():
            return events.LlmFailed(
                request_id=answer.request_id,
                kind="internal",
                message=message,
                usage=answer.usage,
                cost_usd=answer.cost_usd,
                at=answer.at,
            )
        case events.ToolResulted():
            return events.ToolResulted(
                request_id=answer.request_id,
                ok=False,
                error=message,
                retryable=False,
                at=answer.at,
            )
        case _:
            return None
