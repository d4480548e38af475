"""Routing and dispatch: the host's work, read from the log.

Routing is driven from the log, not from memory: the dispatcher follows the
log from the projector's checkpoint and asks each record's kind for its
effects (`steward.actors.effects`): a model call (`steward.effects.llm.effect`),
a tool call (`steward.effects.tools.effect`), a timer (`steward.effects.timers`),
or an input of another stream (an actor to create, a result to the stream its
creator named in ``reply_to``, a child to cancel). On start, the requested but
unanswered effects and the due timers are read from the ``pending`` projection
and routed again, so a crash delays work and never loses it. Each effect runs
in a task of its own, at most one per effect key.

One shortcut: the task that commits a model's answer makes the next model
call that commit asks for (a run's model loop is one task), and the
dispatcher skips a request already in flight; after a restart the pending
projection routes it as any other. The actors a decision starts (a session's
turn run, a subagent, a workflow's phase) have no such shortcut: the
dispatcher creates each as it routes the committed decision, in a commit of
its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

import msgspec

from steward import events, logs
from steward.actors.effects import (
    ArmTimer,
    CallModel,
    CallTool,
    Create,
    Deliver,
    Effect,
)
from steward.actors.kind import Kinds
from steward.bus import EventLog, PartitionedLog
from steward.clock import Clock
from steward.effects.timers import Timers
from steward.events import Event, Recorded
from steward.host.calls import Calls
from steward.host.mailbox import Mailboxes
from steward.host.pending import Checkpoints, PendingIndex
from steward.host.states import States
from steward.metrics import HOST as METRICS

log = logging.getLogger("steward.host")

Listener = Callable[[Recorded], None]


class Dispatcher:
    """Follows the log and starts what each committed record asks for."""

    def __init__(
        self,
        log: EventLog,
        kinds: Kinds,
        states: States,
        mailboxes: Mailboxes,
        calls: Calls,
        clock: Clock,
        *,
        projector: Any,
        scope: str | None,
    ) -> None:
        self._log = log
        self._kinds = kinds
        self._states = states
        self._mailboxes = mailboxes
        self._calls = calls
        self._clock = clock
        self._projector = projector
        # The run whose tree alone this host carries out (`steward run`), by
        # its correlation id; None carries every run in the log (a serve).
        self._scope = scope
        self.timers = Timers(clock, self._wake)
        """The timers armed, each firing its stream's `WakeDue`."""
        self.listeners: list[Listener] = []
        """Called with every record the dispatcher sees."""
        self.draining = False
        """Set by `Host.drain`: no more model or tool calls, no more timers."""
        self.inflight: set[str] = set()
        """The keys of the effects being carried out."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """The tasks carrying them out."""
        self.position = 0
        """The position of the last record the dispatcher has read."""
        self.routed = 0
        """The position of the last record the dispatcher has routed."""
        self.held: frozenset[int] | None = None
        """The partitions of a shared log this host holds (`hold`); ``None``:
        it carries out every stream's effects (one host on its log)."""
        self.index: PendingIndex | None = None
        """What the held streams wait for, for a host without projections
        (a worker): kept from the records of its partitions."""
        self._partition_of = getattr(log, "partition_of", None)
        self._shared = cast(PartitionedLog, log)  # used only with `index`
        self.following: asyncio.Task[None] | None = None
        """The task following the log (`start_following`)."""
        self._holding = asyncio.Lock()
        self._caught: frozenset[int] | None = None  # the share `hold` took last
        self.checkpoints: Checkpoints | None = None
        """Where a worker saves what its partitions wait for, and loads what
        their last holder saved (`steward.bus.jetstream.checkpoints`)."""
        self._last: dict[int, int] = {}  # partition -> last record applied
        self._saved: dict[int, int] = {}  # partition -> position last saved

    async def resume(self, progress: Callable[[int], None] | None = None) -> None:
        """Catch the projections up with the log and route again what is
        pending there (unanswered effects, due timers); from its head when
        there is no projector."""
        if self._projector is not None:
            await self._projector.catch_up(self._log, progress)
            self.position = self._projector.position
            await self.reroute()
        else:
            self.position = await self._log.head()
        self.routed = self.position

    def owns(self, stream: str) -> bool:
        """Whether this host carries out ``stream``'s effects: it holds the
        stream's partition, or every stream."""
        held = self.held
        if held is None:
            return True
        assert self._partition_of is not None
        return self._partition_of(stream) in held

    async def reroute(self, partitions: frozenset[int] | None = None) -> None:
        """Route again each record that asked for an effect still pending
        (in the ``pending`` projection, or the index) of the streams this
        host holds (of ``partitions`` only, if given)."""

        def wanted(stream: str) -> bool:
            if not self.owns(stream):
                return False
            return partitions is None or (
                self._partition_of is not None
                and self._partition_of(stream) in partitions
            )

        index = self.index
        if index is not None:
            sources = index.sources(wanted)
        else:
            assert self._projector is not None
            sources = [
                (stream, version)
                for stream, version in await self._projector.pending_sources()
                if wanted(stream)
            ]
        for stream, version in sources:
            try:
                for rec in await self._log.read(stream, version):
                    if rec.version == version:
                        started = await self.route(rec)
                        if index is not None:
                            index.routed(stream, version, started)
            except Exception:  # one bad source must not hold up the others
                log.exception("routing %s v%d again failed", stream, version)

    async def hold(self, held: frozenset[int]) -> None:
        """Carry out the effects of the streams of partitions ``held`` from
        now on (a worker's share of a shared log, `Membership`): let go of
        the others, read what the new ones still wait for, route it, and
        follow the held partitions only (a host with projections follows
        the whole log for them, and routes what it holds)."""
        if self.held is not None:
            self.held &= held  # what is let go stops at once, even while
            # another share's records are still being read
        async with self._holding:
            before = self._caught or frozenset()
            self.held = held
            self._caught = held
            released, acquired = before - held, held - before
            if released:
                for stream in self._states.streams():
                    if not self.owns(stream):
                        self._states.forget(stream)
                if self.index is not None:
                    await self._save(released)  # for their next holder
                    self.index.forget(self.owns)
            if self.index is None:  # a host with projections: they say it
                if acquired:
                    await self._projector.catch_up(self._log)
                    await self.reroute(acquired)
                return
            following = self.following
            if following is not None:  # follow the new set from where it was
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
                self.position = self.routed
            try:
                for partition in sorted(acquired):
                    await self._catch_up(partition)
            except BaseException:
                # not taken after all: `Membership` lets their leases go,
                # and a later heartbeat takes them again
                self.held = self._caught = held - acquired
                self.index.forget(self.owns)
                raise
            finally:
                if following is not None:
                    self.start_following()
            await self.reroute(acquired)

    async def _catch_up(self, partition: int) -> None:
        """Read what ``partition``'s records up to `position` still want:
        from what its last holder saved, and the records after it (from its
        first record when nothing was saved)."""
        index = self.index
        assert index is not None
        after = 0
        saved = None
        self._last.pop(partition, None)
        self._saved.pop(partition, None)
        if self.checkpoints is not None:
            saved = await self.checkpoints.load(partition)
        if saved is not None and saved[0] <= self.position:
            after, wants = saved
            index.load(w for w in wants if self._in_partition(partition, w[0]))
            self._last[partition] = self._saved[partition] = after
        while True:
            page = await self._shared.read_all(after, partition=partition)
            for rec in page:
                if rec.position > self.position:
                    return
                index.apply(rec)
                self._last[partition] = rec.position
                self._states.saw(rec.stream, rec.version)
            if not page:
                return
            after = page[-1].position

    def _in_partition(self, partition: int, stream: str) -> bool:
        return self._shared.partition_of(stream) == partition

    async def save_checkpoints(self) -> None:
        """Save what each partition held waits for, where its records
        moved since the last save (`checkpoints`)."""
        async with self._holding:
            await self._save(self._caught or frozenset())

    async def _save(self, partitions: frozenset[int]) -> None:
        """Save the wants of ``partitions`` with the position of the last
        record of each they include (all at once: a bucket that does not
        answer costs one wait)."""
        index, checkpoints = self.index, self.checkpoints
        if index is None or checkpoints is None:
            return
        saves, at = [], []
        for p in sorted(partitions):
            position = self._last.get(p)
            if position is None or self._saved.get(p) == position:
                continue
            wants = index.saved(partial(self._in_partition, p))
            saves.append(checkpoints.save(p, position, wants))
            at.append((p, position))
        for (p, position), done in zip(at, await asyncio.gather(*saves), strict=True):
            if done:
                self._saved[p] = position

    def start_following(self) -> asyncio.Task[None]:
        """Start `follow` in a task (`hold` restarts it on another share)."""
        self.following = asyncio.create_task(self.follow())
        return self.following

    async def head(self) -> int:
        """The newest position this host follows: the log's, or its held
        partitions' (a worker)."""
        if self.index is not None:
            return await self._shared.head(self.held or frozenset())
        return await self._log.head()

    async def follow(self) -> None:
        """Route each record of the log (of the held partitions, for a
        worker) from `position` on, until cancelled."""
        # the event types any kind routes, and the model and tool requests
        # of every kind
        requests = {events.LlmRequested, events.ToolRequested}
        routed = self._kinds.routed | requests
        states = self._states
        inflight = self.inflight
        index = self.index
        last = self._last if self.checkpoints is not None else None
        if index is None:
            records = self._log.subscribe(self.position)
        elif self.held:  # a worker follows the partitions it holds
            records = self._shared.subscribe(self.position, self.held)
        else:
            return
        async for rec in records:
            self.position = rec.position
            states.saw(rec.stream, rec.version)
            if index is not None:
                index.apply(rec)
                if last is not None:
                    last[self._shared.partition_of(rec.stream)] = rec.position
            event = rec.event
            if type(event) in routed and not (
                # the usual request: its run's model loop has taken it already
                type(event) is events.LlmRequested and event.request_id in inflight
            ):
                try:
                    started = await self.route(rec)
                    if index is not None:  # what it wants and nobody asks is void
                        index.routed(rec.stream, rec.version, started)
                except Exception:
                    log.exception("routing %s failed", rec.id)
            if self._projector is not None:
                self._projector.offer(rec)
            for listener in self.listeners:
                try:
                    listener(rec)
                except Exception:  # a listener's fault must not stop routing
                    log.exception("a listener of %s failed", rec.id)
            self.routed = rec.position

    async def route(self, rec: Recorded) -> list[str]:
        """Start what committed event ``rec`` asks for, as its kind says; the
        keys of the effects it asks for."""
        if self._scope is not None and rec.correlation_id != self._scope:
            return []  # another run's: the serve's work, not this host's
        if not self.owns(rec.stream):
            return []  # another worker's
        event = rec.event
        # A model or tool request is a call to make, in a stream of any kind;
        # started without reading any state (usually the answering task took
        # a model call already).
        if type(event) is events.LlmRequested:
            rid = event.request_id
            if rid not in self.inflight and not self._calls.answered(rec, rid):
                self._start(rec, CallModel(request=event))
            return [rid]
        if type(event) is events.ToolRequested:
            self._start(rec, CallTool(request=event))
            return [event.request_id]
        kind = self._kinds.of(rec.stream)
        if kind.reactor.effects is None:
            return []
        states = self._states
        at = states.cached_at(rec.stream, rec.version)
        if at is None:
            at = await states.at(rec.stream, rec.version)
        latest, _ = await states.get(rec.stream)
        started = []
        for effect in kind.reactor.effects(rec, at, latest):
            self._start(rec, effect)
            started.append(_key(effect))
        return started

    def _start(self, rec: Recorded, effect: Effect) -> None:
        """Carry out ``effect``, which committed event ``rec`` asked for
        (while draining: no call and no timer, see `Host.drain`)."""
        if self.draining and isinstance(effect, CallModel | CallTool | ArmTimer):
            return
        match effect:
            case CallModel(request=request):
                # the call's task takes the log lines' actor with its context
                with logs.about(rec.stream, request_id=request.request_id):
                    work = partial(self._call_model, rec, request)
                    self._spawn(request.request_id, work)
            case CallTool(request=request):
                with logs.about(rec.stream, request_id=request.request_id):
                    work = partial(self._calls.tool, rec, request)
                    self._spawn(request.request_id, work)
            case ArmTimer(timer_id=timer_id, due=due):
                self.timers.arm(rec.stream, timer_id, due)
            case Deliver(key=key):
                self._spawn(key, partial(self._deliver, effect, rec.id))
            case Create(key=key):
                self._spawn(key, partial(self._create, effect, rec.id))

    def _spawn(self, key: str, work: Callable[[], Awaitable[object]]) -> None:
        """Carry out ``work()`` in a task of its own, unless effect ``key`` is
        in flight already. The coroutine is made inside the task, so a task
        cancelled before it starts leaves none behind never awaited."""
        if key in self.inflight:
            return
        self.inflight.add(key)

        async def run() -> None:
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("effect %s failed", key)
            else:
                if self.index is not None:
                    self.index.carried(key)
            finally:
                self.inflight.discard(key)

        task = asyncio.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _call_model(self, rec: Recorded, request: events.LlmRequested) -> None:
        """Answer model request ``request``, then each next request that this
        host's commit of the answer makes: a run's model loop is one task, not
        a task per call."""
        inflight = self.inflight
        try:
            while True:
                commit = await self._calls.model(rec, request)
                follow = commit.records[-1] if commit and commit.records else None
                if follow is None or not isinstance(follow.event, events.LlmRequested):
                    return
                if self.draining or not self.owns(rec.stream):
                    return  # the next host asks it, or the stream's holder
                if follow.event.request_id in inflight:
                    return  # the dispatcher started it already
                inflight.discard(request.request_id)
                rec, request = follow, follow.event
                inflight.add(request.request_id)
        except Exception:
            log.exception("effect %s failed", request.request_id)
        finally:
            inflight.discard(request.request_id)

    async def _deliver(self, deliver: Deliver, cause: str) -> None:
        """Give another stream its input (each process counts those it made)."""
        input = self._stamped(deliver.input, deliver.stamp)
        submit = self._mailboxes.submit
        if await submit(deliver.stream, input, causation_id=cause) is not None:
            METRICS.effects["deliver"] += 1

    async def _create(self, create: Create, cause: str) -> None:
        """Start actor ``create.stream``, unless it has started already (an
        opening input is not read for: its kind refuses it on a begun stream)."""
        opens = self._kinds.of(create.stream).decider.opens
        opening = isinstance(create.input, opens)
        if not opening and (await self._states.get(create.stream))[1] > 0:
            return
        input = self._stamped(create.input, create.stamp)
        submit = self._mailboxes.submit
        if await submit(create.stream, input, causation_id=cause) is not None:
            METRICS.effects["spawn"] += 1

    def _stamped(self, input: Event, stamp: bool) -> Event:
        """``input`` with ``at`` the time now, when ``stamp`` asks for it."""
        return msgspec.structs.replace(input, at=self._clock.now()) if stamp else input

    def _wake(self, stream: str, wake: events.WakeDue) -> None:
        """A timer came due: give its stream the `WakeDue` (unless another
        worker holds the stream now: it armed the timer again)."""
        if not self.owns(stream):
            return
        self._spawn(wake.timer_id, partial(self._fire, stream, wake))

    async def _fire(self, stream: str, wake: events.WakeDue) -> None:
        if await self._mailboxes.submit(stream, wake) is not None:
            METRICS.effects["timer"] += 1


def _key(effect: Effect) -> str:
    """The key of ``effect``: what answers it, and what its pending want is."""
    match effect:
        case CallModel(request=request) | CallTool(request=request):
            return request.request_id
        case ArmTimer(timer_id=timer_id):
            return timer_id
        case Deliver(key=key) | Create(key=key):
            return key
    raise TypeError(f"an effect of no known type: {effect!r}")
