"""The actor host: the imperative shell around the pure deciders.

The host owns every piece of I/O and names no actor kind: a stream's kind
(from the first part of its name, in the `Kinds` table the host serves) gives its
decider and says what its committed decisions ask for. For an input the host
loads (or takes from its cache) the actor's state, asks the kind to decide,
and appends ``[input, *decisions]`` as one commit at the expected version; on
a conflict it reloads and retries.
A stream is decided by one task at a time: an input for an idle stream is
decided in the submitter's own task, and inputs that arrive meanwhile wait in
the stream's mailbox for one task that drains it.

Routing is driven from the log, not from memory: a dispatcher follows the log
from the projector's checkpoint and asks each record's kind for its effects
(`steward.actors.effects`): a model call (`steward.actors.llm.effect`), a
tool call (`steward.actors.tools.effect`), a timer (`steward.actors.timers`),
or an input of another stream (an actor to create, a result to the stream
its creator named in ``reply_to``, a child to cancel). On start, the requested but
unanswered effects and the due timers are read from the ``pending``
projection and routed again, so a crash delays work and never loses it.
Effects are at-least-once; their recording is exactly-once because ``decide``
refuses a result whose request is no longer pending. One shortcut: the task
that commits a model's answer makes the next model call that commit asks for
(a run's model loop is one task), and the dispatcher skips a request already
in flight; after a restart the pending projection routes it as any other.
The actors a decision starts (a session's turn run, a subagent, a workflow's
phase) have no such shortcut: the dispatcher creates each as it routes the
committed decision, in a commit of its own.

An effect never leaves a run stuck: a provider that fails to set up, an
answer the log will not take (too large, say) after a few tries, an
exception anywhere in the call, each is recorded as the call's failure
(`LlmFailed` with the usage of a paid reply, a failed `ToolResulted`), which
the decider acts on. Text from outside with a lone surrogate is recorded made
encodable (U+FFFD). With worker ids (hosts sharing a JetStream log) each call
is claimed in the log first and the claim renewed while the call runs.

A queued run (``RunCreated.queued``: `steward runs start`) waits, pending,
until a host that sees it, live or in the pending projection, records
`RunTaken`; the decider refuses a second host's. A host scoped to one run
(`steward run`) carries out that run and its subagents only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import msgspec

from steward import events
from steward.actors.effects import (
    ArmTimer,
    CallModel,
    CallTool,
    Create,
    Deliver,
    Effect,
)
from steward.actors.kind import Kind, Kinds
from steward.actors.llm import (
    Provider,
    RequestInfo,
)
from steward.actors.llm.effect import DeltaListener, ModelCalls
from steward.actors.prompt import Prompt, PromptCache, prompt_matches
from steward.actors.timers import Timers, sleep_or
from steward.actors.tools import ToolContext, ToolRegistry
from steward.actors.tools.effect import call_tool
from steward.bus import Commit, EventLog
from steward.clock import Clock, SystemClock
from steward.errors import ConcurrencyError, StewardError, describe
from steward.events import Event, Recorded
from steward.kinds import KINDS
from steward.metrics import COUNTED
from steward.metrics import HOST as METRICS

log = logging.getLogger("steward.host")

_KEPT_PROMPTS = 10_000
"""Prompts kept for calls not yet made before the host forgets them (a
forgotten prompt is built again from the state)."""

_STALE_READS = 50
"""Reads of a stream that may come back older than a known commit (a replica
that lags) before `Host.state` gives up."""

_CACHED_STATES = 2_048
"""Streams whose state a host keeps in memory; past this, the states written
longest ago are forgotten (and folded from the log again when needed), so a
host serving runs for months holds the active ones, not every run it saw."""

_RECORD_RETRIES = (0.2, 1.0)
"""Pauses before each new try to record an effect's answer the log refused (a
busy file, an unconfirmed publish); when the last fails too, the failure is
recorded instead, so the run goes on (`Host._record_answer`)."""

_KNOWN_VERSIONS = 100_000
"""Streams whose newest committed version a host remembers, forgetting those
written longest ago: a stream idle for that many others' commits has no read
in flight that could overlap its last commit."""

Listener = Callable[[Recorded], None]


@dataclass
class _Mailbox:
    queue: deque[_Item] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


@dataclass
class _Item:
    input: Event
    causation_id: str | None
    done: asyncio.Future[Commit | None]


class Host:
    """Hosts run actors over an event log; see the module docstring."""

    def __init__(
        self,
        log: EventLog,
        *,
        provider: Provider | None = None,
        tools: ToolRegistry | None = None,
        workspace: Path | str = ".",
        clock: Clock | None = None,
        llm_concurrency: int = 2,
        tool_timeout: float = 30.0,
        llm_retries: int = 2,
        projector: Any = None,
        max_conflict_retries: int = 20,
        worker_id: str | None = None,
        claim_seconds: float = 300.0,
        scope: str | None = None,
        kinds: Kinds = KINDS,
    ) -> None:
        self.log = log
        self.kinds = kinds
        """The actor kinds this host serves (its log decodes their events)."""
        self.provider = provider
        self.tools = tools
        self.workspace = Path(workspace)
        self.clock: Clock = clock or SystemClock()
        self.projector = projector
        self.started_at: float | None = None
        """When `start` began: this host carries out effects from then on
        (``None``: it only records, as `steward sessions send`'s)."""
        # With a worker id, hosts share one log: each model or tool call is
        # claimed in the run's log first, and abandoned claims are retaken.
        self.worker_id = worker_id
        self.claim_seconds = claim_seconds
        # The run whose tree alone this host carries out (`steward run`), by
        # its correlation id; None carries every run in the log (a serve).
        self.scope = scope
        # This worker's claims being renewed while their calls run.
        self._renewals: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        # the effect handlers: model calls and timers (tool calls go through
        # `call_tool` with the registry)
        self.models = ModelCalls(
            provider, concurrency=llm_concurrency, retries=llm_retries
        )
        self.timers = Timers(self.clock, self._wake)
        self._tool_timeout = tool_timeout
        self._max_conflict_retries = max_conflict_retries
        self._cache: dict[str, tuple[Any, int]] = {}
        # Prompts of this host's own model requests, as the decider built
        # them, until the call takes them.
        self._prompts: dict[str, Prompt] = {}
        # What building and hashing one prompt lends the next (system prompts,
        # message digests): deciders keep no state, so the host keeps it.
        self._prompt_cache = PromptCache()
        # Streams whose cached state this host folded from its own commit of
        # the decider's output: their prompts need no hash check.
        self._own: dict[str, int] = {}
        # The newest version of each stream this host knows to be committed
        # (its own commits, and what the dispatcher saw): a read that returns
        # less started before that commit and must not become the state.
        self._known: dict[str, int] = {}
        self._mailboxes: dict[str, _Mailbox] = {}
        self._inflight: set[str] = set()
        self._draining = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._listeners: list[Listener] = []
        self._dispatcher: asyncio.Task[None] | None = None
        self._timer_task: asyncio.Task[None] | None = None
        self.position = 0
        self._routed = 0
        """The position of the last record the dispatcher has routed."""
        self._last_commit = 0
        """The position of this host's newest commit."""

    # -- inputs -------------------------------------------------------------------

    async def submit(
        self, stream: str, input: Event, *, causation_id: str | None = None
    ) -> Commit | None:
        """Decide ``input`` on ``stream`` and record it; ``None`` when refused."""
        box = self._mailboxes.get(stream)
        if box is not None:
            # Someone decides this stream now; it drains the mailbox after.
            done: asyncio.Future[Commit | None]
            done = asyncio.get_running_loop().create_future()
            box.queue.append(_Item(input, causation_id, done))
            return await done
        # An idle stream is decided right here (no task, no future: most
        # inputs find their stream idle); later arrivals queue in its mailbox.
        box = self._mailboxes[stream] = _Mailbox()
        try:
            return await self._decide_and_commit(stream, input, causation_id)
        except Exception:
            log.exception("stream %s: input %s failed", stream, _brief(input))
            raise
        finally:
            if box.queue:
                box.task = asyncio.create_task(self._drain(stream, box))
            else:
                del self._mailboxes[stream]

    async def _drain(self, stream: str, box: _Mailbox) -> None:
        # Started only when inputs queued up behind an inline decision; it
        # ends when the mailbox is empty so idle streams cost nothing.
        while box.queue:
            item = box.queue.popleft()
            try:
                commit = await self._decide_and_commit(
                    stream, item.input, item.causation_id
                )
            except Exception as e:  # a handler never lets an error escape
                log.exception("stream %s: input %s failed", stream, _brief(item.input))
                if not item.done.done():
                    item.done.set_exception(e)
            else:
                if not item.done.done():
                    item.done.set_result(commit)
        del self._mailboxes[stream]

    async def _decide_and_commit(
        self, stream: str, input: Event, causation_id: str | None
    ) -> Commit | None:
        kind = self.kinds.of(stream)
        # An input that begins a stream this host knows nothing of is decided
        # on the initial state, without a read: the append at version 0
        # fails if the stream has events after all (a restarted effect's).
        guess = self._opens_unseen(kind, stream, input)
        for _ in range(self._max_conflict_retries):
            if guess:
                state, version = kind.decider.initial, 0
            else:
                state, version = self._cache.get(stream) or await self.state(stream)
            try:
                commit = await self._commit(stream, input, causation_id, state, version)
            except ConcurrencyError:
                if not guess:
                    METRICS.conflicts += 1
                guess = False
                self._forget(stream)
                continue
            except UnicodeEncodeError:
                # Text from outside (a model's reply, a tool's output, a
                # message) with a lone surrogate: recorded made encodable.
                clean = events.encodable(input)
                if clean == input:
                    raise
                log.info("stream %s: %s made encodable", stream, type(input).__name__)
                input = clean
                continue
            if commit is None and guess:
                guess = False  # refused on a guess: decide on what the log holds
                continue
            return commit
        raise StewardError(
            f"stream {stream}: gave up after {self._max_conflict_retries} conflicts"
        )

    async def _commit(
        self,
        stream: str,
        input: Event,
        causation_id: str | None,
        state: Any,
        version: int,
    ) -> Commit | None:
        """Decide ``input`` on ``state`` (at ``version``) and append the step."""
        kind = self.kinds.of(stream)
        decided = kind.decide_and_fold(input, state, self._prompt_cache)
        if decided is None:
            METRICS.refusals += 1
            log.debug("stream %s refused %s", stream, events.type_name(input))
            return None
        decisions, after, prompt = decided
        batch = [input, *decisions]
        correlation_id = kind.correlation_of(state, input)
        commit = await self.log.append(
            stream,
            batch,
            version,
            correlation_id=correlation_id,
            causation_id=causation_id,
        )
        self._recorded(commit, batch, after, prompt)
        return commit

    def _recorded(
        self, commit: Commit, batch: Sequence[Event], after: Any, prompt: Prompt | None
    ) -> None:
        """Keep what this host's own commit of a decided ``batch`` tells."""
        METRICS.commits += 1
        self._last_commit = max(self._last_commit, commit.last_position)
        for event in batch:
            if type(event) in COUNTED:
                METRICS.record(event)
        if prompt is not None:
            # the model call will send the prompt the decider hashed
            request = batch[-1]
            assert isinstance(request, events.LlmRequested)
            if len(self._prompts) >= _KEPT_PROMPTS:
                self._prompts.clear()
            self._prompts[request.request_id] = prompt
        stream, version = commit.stream, commit.last_version
        cached = self._cache.get(stream)
        if cached is None or cached[1] <= version:  # not a newer state's place
            self._keep(stream, after, version)
            self._own[stream] = version
        self._know(stream, version)

    def _opens_unseen(self, kind: Kind[Any], stream: str, input: Event) -> bool:
        """Whether ``input`` begins ``stream`` (`Decider.opens`) and this host
        knows nothing of the stream (no commit, cached state or routed
        record): then it is decided on the initial state, unread, and the
        append at version 0 checks."""
        return (
            isinstance(input, kind.decider.opens)
            and stream not in self._known
            and stream not in self._cache
        )

    async def state(self, stream: str) -> tuple[Any, int]:
        """The current state and version of ``stream`` (cached).

        A read that overlapped a commit of this host may return the stream
        as it was before; such a state is never cached nor decided on (an
        input refused on it would be refused wrongly): it is read again.
        """
        cached = self._cache.get(stream)
        if cached is not None:
            return cached
        for attempt in range(_STALE_READS):
            recorded = await self.log.read(stream)
            version = recorded[-1].version if recorded else 0
            cached = self._cache.get(stream)
            if cached is not None and cached[1] >= version:
                return cached  # a commit while we read cached a newer state
            if version >= self._known.get(stream, 0):
                break
            await asyncio.sleep(0.001 * (1 + attempt))
        else:
            raise StewardError(
                f"stream {stream}: the log keeps returning version {version}, "
                f"older than the committed {self._known.get(stream, version)}"
            )
        state = self.kinds.of(stream).fold(r.event for r in recorded)
        self._keep(stream, state, version)
        return state, version

    def _keep(self, stream: str, state: Any, version: int) -> None:
        """Cache ``state`` as ``stream``'s, newest last; forget the oldest
        tenth once more than `_CACHED_STATES` are held."""
        cache = self._cache
        cache.pop(stream, None)
        cache[stream] = (state, version)
        if len(cache) > _CACHED_STATES:
            for old in list(islice(cache, len(cache) - _CACHED_STATES * 9 // 10)):
                self._forget(old)

    def _forget(self, stream: str) -> None:
        """Drop the cached state of ``stream``: the next look folds the log."""
        self._cache.pop(stream, None)
        self._own.pop(stream, None)

    def _know(self, stream: str, version: int) -> None:
        known = self._known
        if version > known.get(stream, 0):
            known.pop(stream, None)
            known[stream] = version
            if len(known) > _KNOWN_VERSIONS:
                for old in list(islice(known, len(known) - _KNOWN_VERSIONS * 9 // 10)):
                    del known[old]

    def _cached_at(self, stream: str, version: int) -> Any:
        """The cached state of ``stream`` if it is at ``version``."""
        cached = self._cache.get(stream)
        return cached[0] if cached is not None and cached[1] == version else None

    async def _state_at(self, stream: str, version: int) -> Any:
        cached = self._cached_at(stream, version)
        if cached is not None:
            return cached
        recorded = await self.log.read(stream)
        kind = self.kinds.of(stream)
        return kind.fold(r.event for r in recorded if r.version <= version)

    # -- lifecycle ----------------------------------------------------------------

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with every recorded event the dispatcher sees."""
        self._listeners.append(listener)

    def listen_deltas(self, listener: DeltaListener) -> None:
        """Call ``listener`` with each piece of model text as it streams in.

        Deltas are for people watching; the log records the whole reply once.
        """
        self.models.delta_listeners.append(listener)

    async def start(self, progress: Callable[[int], None] | None = None) -> None:
        """Resume unanswered effects and due timers, then follow the log.

        ``progress`` is called with the position the projections reached,
        after each batch of their catch-up with the log.
        """
        if self.provider is None or self.tools is None:
            raise StewardError("a host needs a provider and tools to start")
        self.started_at = self.clock.now()
        if self.projector is not None:
            await self.projector.catch_up(self.log, progress)
            self.position = self.projector.position
            for stream, version in await self.projector.pending_sources():
                for rec in await self.log.read(stream, version):
                    if rec.version == version:
                        await self._route(rec)
        else:
            self.position = await self.log.head()
        self._routed = self.position
        self._timer_task = asyncio.create_task(self.timers.run())
        self._dispatcher = asyncio.create_task(self._dispatch())
        if self.worker_id is not None and self.projector is not None:
            self._sweeper = asyncio.create_task(self._sweep())

    async def settle(self, timeout: float = 60.0) -> bool:
        """Wait until this host has routed everything in the log and no
        effect it started is in flight (their answers recorded, and what
        those asked for done too); timers armed for later are not waited
        for. ``False`` when ``timeout`` seconds pass first: what is still in
        flight is in the log, and the next host carries it out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if not self._inflight and self._routed >= await self.log.head():
                await asyncio.sleep(0.02)  # what the last answer's commit asks
                if not self._inflight and self._routed >= await self.log.head():
                    return True
            await asyncio.sleep(0.01)
        return False

    async def drain(
        self, timeout: float = 60.0, abandon: asyncio.Event | None = None
    ) -> bool:
        """A graceful stop's first half: start no more model or tool calls and
        fire no more timers, and wait until the calls in flight have
        finished and their answers are recorded (with the deliveries those
        make: a turn's reply reaches its session). What they ask next stays
        in the log, for the next host. ``False`` when ``timeout`` seconds
        pass, or ``abandon`` is set, first: `stop` then cancels the calls
        still running, which the next host makes again."""
        self._draining = True
        if self._timer_task is not None:
            self._timer_task.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Done when nothing is in flight and the dispatcher has routed what
        # the log held (and what answers since then recorded): an answer just
        # recorded may still ask for a delivery. Others' later commits on a
        # shared log are not waited for.
        target = await self.log.head()
        while self._inflight or self._routed < max(target, self._last_commit):
            if loop.time() >= deadline or (abandon is not None and abandon.is_set()):
                return False
            await asyncio.sleep(0.02)
        return True

    def in_flight(self) -> int:
        """The effects this host carries out now (model and tool calls,
        deliveries, creations)."""
        return len(self._inflight)

    async def stop(self) -> None:
        """Stop following the log and cancel effects still in flight."""
        running = (self._dispatcher, self._timer_task, self._sweeper, *self._tasks)
        for task in running:
            if task is not None:
                task.cancel()
        for task in running:
            if task is not None:
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        for box in list(self._mailboxes.values()):
            if box.task is not None:
                await asyncio.gather(box.task, return_exceptions=True)
        if self.projector is not None:
            await self.projector.catch_up(self.log)
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()

    async def _dispatch(self) -> None:
        # the event types any kind routes, and the model and tool requests
        # of every kind
        requests = {events.LlmRequested, events.ToolRequested}
        routed = self.kinds.routed | requests
        known = self._known
        inflight = self._inflight
        async for rec in self.log.subscribe(self.position):
            self.position = rec.position
            # Most records are of this host's own commits, known already
            # (and then the cached state is at least as new).
            if rec.version > known.get(rec.stream, 0):
                self._know(rec.stream, rec.version)
                cached = self._cache.get(rec.stream)
                if cached is not None and cached[1] < rec.version:
                    # another process wrote this stream: our cached state is stale
                    self._forget(rec.stream)
            event = rec.event
            if type(event) in routed and not (
                # the usual request: its run's model loop has taken it already
                type(event) is events.LlmRequested and event.request_id in inflight
            ):
                try:
                    await self._route(rec)
                except Exception:
                    log.exception("routing %s failed", rec.id)
            if self.projector is not None:
                self.projector.offer(rec)
            for listener in self._listeners:
                try:
                    listener(rec)
                except Exception:  # a listener's fault must not stop routing
                    log.exception("a listener of %s failed", rec.id)
            self._routed = rec.position

    # -- routing ------------------------------------------------------------------

    async def _route(self, rec: Recorded) -> None:
        """Start what committed event ``rec`` asks for, as its kind says."""
        if self.scope is not None and rec.correlation_id != self.scope:
            return  # another run's: the serve's work, not this host's
        event = rec.event
        # A model or tool request is a call to make, in a stream of any kind;
        # started without reading any state (usually the answering task took
        # a model call already).
        if type(event) is events.LlmRequested:
            rid = event.request_id
            if rid not in self._inflight and not self._answered(rec, rid):
                self._start(rec, CallModel(request=event))
            return
        if type(event) is events.ToolRequested:
            self._start(rec, CallTool(request=event))
            return
        kind = self.kinds.of(rec.stream)
        if kind.reactor.effects is None:
            return
        at = self._cached_at(rec.stream, rec.version)
        if at is None:
            at = await self._state_at(rec.stream, rec.version)
        latest, _ = await self.state(rec.stream)
        for effect in kind.reactor.effects(rec, at, latest):
            self._start(rec, effect)

    def _start(self, rec: Recorded, effect: Effect) -> None:
        """Carry out ``effect``, which committed event ``rec`` asked for
        (while draining: no call and no timer, see `drain`)."""
        if self._draining and isinstance(effect, CallModel | CallTool | ArmTimer):
            return
        match effect:
            case CallModel(request=request):
                self._spawn_effect(
                    request.request_id, partial(self._call_model, rec, request)
                )
            case CallTool(request=request):
                self._spawn_effect(
                    request.request_id, partial(self._call_tool, rec, request)
                )
            case ArmTimer(timer_id=timer_id, due=due):
                self.timers.arm(rec.stream, timer_id, due)
            case Deliver(key=key):
                self._spawn_effect(key, partial(self._deliver, effect, rec.id))
            case Create(key=key):
                self._spawn_effect(key, partial(self._create, effect, rec.id))

    def _spawn_effect(self, key: str, work: Callable[[], Awaitable[object]]) -> None:
        """Carry out ``work()`` in a task of its own, unless effect ``key`` is
        in flight already. The coroutine is made inside the task, so a task
        cancelled before it starts leaves none behind never awaited."""
        if key in self._inflight:
            return
        self._inflight.add(key)

        async def run() -> None:
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("effect %s failed", key)
            finally:
                self._inflight.discard(key)

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, deliver: Deliver, cause: str) -> None:
        """Give another stream its input (each process counts those it made)."""
        input = self._stamped(deliver.input, deliver.stamp)
        if await self.submit(deliver.stream, input, causation_id=cause) is not None:
            METRICS.effects["deliver"] += 1

    async def _create(self, create: Create, cause: str) -> None:
        """Start actor ``create.stream``, unless it has started already (an
        opening input is not read for: its kind refuses it on a begun stream)."""
        opening = isinstance(create.input, self.kinds.of(create.stream).decider.opens)
        if not opening and (await self.state(create.stream))[1] > 0:
            return
        input = self._stamped(create.input, create.stamp)
        if await self.submit(create.stream, input, causation_id=cause) is not None:
            METRICS.effects["spawn"] += 1

    def _stamped(self, input: Event, stamp: bool) -> Event:
        """``input`` with ``at`` the time now, when ``stamp`` asks for it."""
        return msgspec.structs.replace(input, at=self.clock.now()) if stamp else input

    # -- effects ------------------------------------------------------------------

    def _answered(self, rec: Recorded, request_id: str) -> bool:
        """Whether model request ``request_id`` (recorded as ``rec``) is known
        to be answered: the newest state this host holds no longer waits on it."""
        cached = self._cache.get(rec.stream)
        return (
            cached is not None
            and cached[1] > rec.version
            and not _awaits(self.kinds.of(rec.stream), cached[0], request_id)
        )

    async def _call_model(self, rec: Recorded, request: events.LlmRequested) -> None:
        """Answer model request ``request``, then each next request that this
        host's commit of the answer makes: a run's model loop is one task, not
        a task per call."""
        try:
            while True:
                commit = await self._model_call(rec, request)
                follow = commit.records[-1] if commit and commit.records else None
                if follow is None or not isinstance(follow.event, events.LlmRequested):
                    return
                if self._draining:
                    return  # the next host asks it
                if follow.event.request_id in self._inflight:
                    return  # the dispatcher started it already
                self._inflight.discard(request.request_id)
                rec, request = follow, follow.event
                self._inflight.add(request.request_id)
        except Exception:
            log.exception("effect %s failed", request.request_id)
        finally:
            self._inflight.discard(request.request_id)

    async def _model_call(
        self, rec: Recorded, request: events.LlmRequested
    ) -> Commit | None:
        """Ask the model ``request`` and submit its answer; the answer's commit."""
        kept = self._prompts.pop(request.request_id, None)
        kind = self.kinds.of(rec.stream)
        rid = request.request_id
        # the cached state taken without a coroutine, as it nearly always is
        state = self._cached_at(rec.stream, rec.version)
        if state is None:
            # A request read back from the log (after a restart, or written by
            # another process, maybe with its answer in the same commit, as a
            # fork's copy) is asked only while the actor still waits on it.
            if not _awaits(kind, (await self.state(rec.stream))[0], rid):
                return None
            state = await self._state_at(rec.stream, rec.version)
        if not _awaits(kind, state, rid) or kind.reactor.model_call is None:
            return None  # answered already; nothing to do
        call = kind.reactor.model_call(state, request, self._prompt_cache, kept)
        prompt = call.prompt
        info = RequestInfo(
            run_id=call.actor_id,
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
        own = self._own.get(rec.stream) == rec.version
        if not own and not prompt_matches(
            prompt, request.prompt_hash, self._prompt_cache
        ):
            answer = events.LlmFailed(
                request_id=request.request_id,
                kind="internal",
                message="the prompt rebuilt from the log does not match the "
                "recorded hash; the run's code or settings changed under it",
                at=self.clock.now(),
            )
        else:
            try:
                answer = await self.models.answer(self, rec, prompt, info)
            except Exception as e:  # a provider's set-up (profile, key) failed
                answer = events.LlmFailed(
                    request_id=request.request_id,
                    kind="internal",
                    message=describe(e),
                    at=self.clock.now(),
                )
            finally:
                if self._renewals:
                    await self._stop_renewing(request.request_id)
        if answer is None:
            return None
        return await self._record_answer(rec, answer)

    async def _record_answer(self, rec: Recorded, answer: Event) -> Commit | None:
        """Submit an effect's ``answer``; if that fails, the failure instead.

        A call made (and maybe paid for) is always recorded: an answer the
        log cannot take (too large for the backend, or one the decider
        breaks on) becomes an `LlmFailed` with its usage and cost, or a
        failed `ToolResulted`, which the decider acts on like any failure.
        """
        problem = ""
        for pause in (0.0, *_RECORD_RETRIES):
            if pause:
                log.warning("stream %s: %s; trying again", rec.stream, problem)
                await asyncio.sleep(pause)  # the log's time, not the run's
            try:
                return await self.submit(rec.stream, answer, causation_id=rec.id)
            except Exception as e:
                problem = f"the answer was not recorded: {describe(e)}"
                if not isinstance(e, StewardError):
                    break  # the answer's own fault: it will not go in
                # the log's (a busy file, an unconfirmed publish): may pass
        failed = _unrecordable(answer, problem)
        if failed is None:
            raise StewardError(f"stream {rec.stream}: {problem}")
        log.warning("stream %s: %s", rec.stream, failed)
        return await self.submit(rec.stream, failed, causation_id=rec.id)

    async def claim(self, rec: Recorded, request_id: str) -> bool:
        """Take effect ``request_id`` for this worker; whether it is ours.

        Without a worker id (one host on its log) every effect is ours.
        """
        if self.worker_id is None:
            return True
        # A moment's jitter, then a look at the state this host follows: when
        # every worker sees a request at once, most find it claimed already
        # and step back without a commit that could only conflict.
        await asyncio.sleep(random.uniform(0, 0.005))
        state, _ = await self.state(rec.stream)
        kind = self.kinds.of(rec.stream)
        held = (
            None
            if kind.reactor.claim is None
            else kind.reactor.claim(state, request_id)
        )
        if (
            held is not None
            and held[0] != self.worker_id
            and held[1] > self.clock.now()
        ):
            return False
        claim = self._claim_of(request_id)
        if await self.submit(rec.stream, claim, causation_id=rec.id) is None:
            return False
        stop = asyncio.Event()
        renewing = asyncio.create_task(self._renew(rec, request_id, stop))
        self._tasks.add(renewing)
        renewing.add_done_callback(self._tasks.discard)
        self._renewals[request_id] = (renewing, stop)
        return True

    async def _renew(self, rec: Recorded, request_id: str, stop: asyncio.Event) -> None:
        """Renew this worker's claim on ``request_id`` every third of
        ``claim_seconds`` until ``stop`` is set (its call ended), so a call
        that takes long is not retaken from a live worker (a heartbeat, as
        Temporal's activities send). The decider accepts a renewal by the
        claim's own worker; a refusal (the call was answered) ends it."""
        while not stop.is_set():
            await sleep_or(self.clock, self.claim_seconds / 3, stop)
            if stop.is_set():
                return
            claim = self._claim_of(request_id)
            try:
                if await self.submit(rec.stream, claim, causation_id=rec.id) is None:
                    return
            except Exception:
                log.exception("renewing the claim on %s failed", request_id)

    def _claim_of(self, request_id: str) -> events.EffectClaimed:
        """This worker's claim on ``request_id`` from now (new or renewed)."""
        assert self.worker_id is not None
        now = self.clock.now()
        return events.EffectClaimed(
            request_id=request_id,
            worker=self.worker_id,
            until=now + self.claim_seconds,
            at=now,
        )

    async def _stop_renewing(self, request_id: str) -> None:
        """Stop renewing this worker's claim on ``request_id`` (if it is)."""
        renewal = self._renewals.pop(request_id, None)
        if renewal is not None:
            renewing, stop = renewal
            stop.set()
            await asyncio.gather(renewing, return_exceptions=True)

    async def _sweep(self) -> None:
        """Retake effects whose worker died: route pending ones again, often.

        A live worker's claim refuses the retry; an expired one lets it in.
        """
        assert self.projector is not None
        while True:
            await self.clock.sleep(max(0.05, self.claim_seconds / 4))
            try:
                for stream, version in await self.projector.pending_sources():
                    for rec in await self.log.read(stream, version):
                        if rec.version == version:
                            await self._route(rec)
            except Exception:
                log.exception("sweeping abandoned effects failed")

    async def _call_tool(self, rec: Recorded, request: events.ToolRequested) -> None:
        state, _ = await self.state(rec.stream)
        rid = request.request_id
        if not _awaits(self.kinds.of(rec.stream), state, rid):
            return  # answered already (read back from the log, as a fork's copy)
        if not await self.claim(rec, rid):
            return  # another worker runs it, or it is answered already
        kind = self.kinds.of(rec.stream)
        own = None if kind.reactor.workspace is None else kind.reactor.workspace(state)
        ctx = ToolContext(
            workspace=self.workspace if own is None else Path(own),
            run_id=rec.stream.partition(".")[2],
            stream=rec.stream,
            request_id=rid,
            actors=self,
            reads=self.projector,
            now=self.clock.now(),
        )
        assert self.tools is not None
        try:
            result = await call_tool(
                self.tools, request, ctx, timeout=self._tool_timeout, clock=self.clock
            )
        finally:
            if self._renewals:
                await self._stop_renewing(rid)
        await self._record_answer(rec, result)

    def _wake(self, stream: str, wake: events.WakeDue) -> None:
        """A timer came due: give its stream the `WakeDue`."""
        self._spawn_effect(wake.timer_id, partial(self._fire, stream, wake))

    async def _fire(self, stream: str, wake: events.WakeDue) -> None:
        if await self.submit(stream, wake) is not None:
            METRICS.effects["timer"] += 1


def _brief(input: Event) -> str:
    """An input named for a log line: its type and request, not its text
    (a model's reply may be megabytes)."""
    request = getattr(input, "request_id", None)
    name = events.type_name(input)
    return f"{name} {request}" if request is not None else name


def _awaits(kind: Kind[Any], state: Any, request_id: str) -> bool:
    """Whether the actor at ``state`` still waits for effect ``request_id``
    (a kind that cannot say is taken to wait: its decider refuses a late
    answer)."""
    return (
        True if kind.reactor.awaits is None else kind.reactor.awaits(state, request_id)
    )


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
