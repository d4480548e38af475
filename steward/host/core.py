"""The host: the pieces of the shell put together, and its lifecycle.

`Host` holds the state cache (`steward.host.states`), the mailboxes and the
commit loop (`steward.host.mailbox`), the claims of a worker sharing its log
(`steward.host.claims`), the model and tool calls (`steward.host.calls`) and
the dispatcher that follows the log (`steward.host.dispatch`); it starts,
settles, drains and stops them, and is what the rest of steward holds: it
takes inputs (`Host.submit`) and reads states (`Host.state`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from steward.actors.kind import Kinds
from steward.actors.prompt import PromptCache
from steward.bus import Commit, EventLog
from steward.clock import Clock, SystemClock
from steward.effects.llm import Provider
from steward.effects.llm.effect import DeltaListener, ModelCalls
from steward.effects.tools import ToolRegistry
from steward.effects.tools.base import ReadModels
from steward.errors import StewardError
from steward.events import Event, Recorded
from steward.host.calls import Calls
from steward.host.claims import Claims
from steward.host.dispatch import Dispatcher, Listener
from steward.host.mailbox import Mailboxes
from steward.host.pending import Checkpoints, Inputs, Membership, PendingIndex
from steward.host.states import States
from steward.host.traces import Traces

CHECKPOINT_SECONDS = 10.0
"""How often a worker saves what its partitions wait for, for their next
holder (`steward.bus.jetstream.checkpoints`); it saves too whenever it lets
a partition go."""


class Host:
    """Hosts run actors over an event log; see `steward.host`."""

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
        kinds: Kinds,
        membership: Membership | None = None,
        reads: ReadModels | None = None,
        inputs: Inputs | None = None,
        traces: Traces | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        self.log = log
        self.traces = traces
        """Where this host's spans go (`steward.host.traces`); ``None``: none."""
        self.kinds = kinds
        """The actor kinds this host serves (its log decodes their events)."""
        union = getattr(log, "union", None)  # a log of steward's has one
        if union is not None and not set(kinds.union.types) <= set(union.types):
            raise ValueError(
                f"the log decodes only some of the events of {kinds}: open it "
                "with union=kinds.union"
            )
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
        # What building and hashing one prompt lends the next (system prompts,
        # message digests): deciders keep no state, so the host keeps it.
        prompt_cache = PromptCache()
        self.states = States(log, kinds)
        """The state cache."""
        self.mailboxes = Mailboxes(
            log,
            kinds,
            self.states,
            prompt_cache,
            max_conflict_retries=max_conflict_retries,
        )
        """The streams' mailboxes and the commit loop behind `submit`."""
        self.mailboxes.traces = traces
        self.claims = Claims(
            self.mailboxes,
            self.states,
            kinds,
            self.clock,
            worker_id=worker_id,
            claim_seconds=claim_seconds,
        )
        """This worker's claims, when hosts share the log."""
        self.models = ModelCalls(
            provider, concurrency=llm_concurrency, retries=llm_retries
        )
        """The model calls' effect handler: limits, retries, listeners."""
        calls = Calls(
            self,
            kinds,
            self.states,
            self.mailboxes,
            self.claims,
            self.models,
            prompt_cache,
            tools=tools,
            workspace=self.workspace,
            reads=reads if reads is not None else projector,
            tool_timeout=tool_timeout,
            traces=traces,
        )
        self.dispatcher = Dispatcher(
            log,
            kinds,
            self.states,
            self.mailboxes,
            calls,
            self.clock,
            projector=projector,
            scope=scope,
        )
        """Follows the log and starts the effects its records ask for."""
        self.timers = self.dispatcher.timers
        """The timers' effect handler, armed by the dispatcher."""
        self.membership = membership
        """This host's place among the workers of a shared log: it carries
        out the effects of the partitions it holds (``None``: of all)."""
        if membership is not None:
            self.dispatcher.held = frozenset()
            if projector is None:  # a worker: it keeps what it waits for
                self.dispatcher.index = PendingIndex(kinds)
                # and follows only what it holds: another stream's state is
                # read afresh for each input it gives it
                self.states.follows = self.dispatcher.owns
                if inputs is not None:  # and hands those inputs to their holder
                    self.mailboxes.forward = inputs.send
                # and saves them for the next holder of each partition
                self.dispatcher.checkpoints = checkpoints
        self.inputs = inputs
        """Inputs sent to the partitions this worker holds, and by it to
        the others' holders."""
        self._holding_listeners: list[Callable[[frozenset[int]], None]] = []
        self._dispatching: asyncio.Task[None] | None = None
        self._timing: asyncio.Task[None] | None = None
        self._sweeping: asyncio.Task[None] | None = None
        self._saving: asyncio.Task[None] | None = None

    # -- inputs and states --------------------------------------------------------

    async def submit(
        self, stream: str, input: Event, *, causation_id: str | None = None
    ) -> Commit | None:
        """Decide ``input`` on ``stream`` and record it; ``None`` when refused."""
        return await self.mailboxes.submit(stream, input, causation_id=causation_id)

    async def state(self, stream: str) -> tuple[Any, int]:
        """The current state and version of ``stream`` (cached).

        A read that overlapped a commit of this host may return the stream
        as it was before; such a state is never cached nor decided on (an
        input refused on it would be refused wrongly): it is read again.
        """
        return await self.states.get(stream)

    async def claim(self, rec: Recorded, request_id: str) -> bool:
        """Take effect ``request_id`` for this worker; whether it is ours.

        Without a worker id (one host on its log) every effect is ours.
        """
        return await self.claims.claim(rec, request_id)

    # -- lifecycle ----------------------------------------------------------------

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` with every recorded event the dispatcher sees."""
        self.dispatcher.listeners.append(listener)

    def listen_deltas(self, listener: DeltaListener) -> None:
        """Call ``listener`` with each piece of model text as it streams in.

        Deltas are for people watching; the log records the whole reply once.
        """
        self.models.delta_listeners.append(listener)

    def listen_holding(self, listener: Callable[[frozenset[int]], None]) -> None:
        """Call ``listener`` with the partitions of a shared log this host
        holds, whenever they change (once it has taken the new ones, or
        failed to)."""
        self._holding_listeners.append(listener)

    async def start(self, progress: Callable[[int], None] | None = None) -> None:
        """Resume unanswered effects and due timers, then follow the log.

        ``progress`` is called with the position the projections reached,
        after each batch of their catch-up with the log.
        """
        if self.provider is None or self.tools is None:
            raise StewardError("a host needs a provider and tools to start")
        self.started_at = self.clock.now()
        dispatcher = self.dispatcher
        await dispatcher.resume(progress)
        if self.membership is not None:
            await self.membership.join(self._hold, self._busy)
        self._timing = asyncio.create_task(self.timers.run())
        self._dispatching = dispatcher.start_following()
        if self.worker_id is not None and (
            self.projector is not None or dispatcher.index is not None
        ):
            self._sweeping = asyncio.create_task(self.claims.sweep(dispatcher.reroute))
        if dispatcher.checkpoints is not None:
            self._saving = asyncio.create_task(self._save_checkpoints())

    async def _hold(self, held: frozenset[int]) -> None:
        """Carry out the effects of partitions ``held`` (`Dispatcher.hold`),
        and decide the inputs other workers send them."""
        try:
            await self.dispatcher.hold(held)
        finally:  # what it holds now: all of held, or less if taking failed
            holds = self.dispatcher.held
            for listener in self._holding_listeners:
                listener(held if holds is None else holds)
        if self.inputs is not None:
            submit = self.mailboxes.submit

            async def decide(stream: str, input: Event, cause: str | None) -> Any:
                return await submit(stream, input, causation_id=cause, here=True)

            await self.inputs.answer(held, decide)

    async def _save_checkpoints(self) -> None:
        """Save what the partitions held wait for every `CHECKPOINT_SECONDS`
        (a worker that dies hands over its last save)."""
        while True:
            await asyncio.sleep(CHECKPOINT_SECONDS)
            try:
                await self.dispatcher.save_checkpoints()
            except Exception as e:  # the next round tries again
                logging.getLogger("steward.host").debug("saving wants: %s", e)

    def _busy(self) -> dict[str, int]:
        """How busy this host is, for its heartbeat among the workers."""
        dispatcher = self.dispatcher
        return {
            "in_flight": len(dispatcher.inflight),
            "waiting": len(dispatcher.index) if dispatcher.index is not None else 0,
            "cached": self.states.sizes()[0],
        }

    async def settle(self, timeout: float = 60.0) -> bool:
        """Wait until this host has routed everything in the log and no
        effect it started is in flight (their answers recorded, and what
        those asked for done too); timers armed for later are not waited
        for. ``False`` when ``timeout`` seconds pass first: what is still in
        flight is in the log, and the next host carries it out."""
        dispatcher = self.dispatcher
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if not dispatcher.inflight and dispatcher.routed >= await dispatcher.head():
                await asyncio.sleep(0.02)  # what the last answer's commit asks
                if (
                    not dispatcher.inflight
                    and dispatcher.routed >= await dispatcher.head()
                ):
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
        dispatcher = self.dispatcher
        dispatcher.draining = True
        if self._timing is not None:
            self._timing.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Done when nothing is in flight and the dispatcher has routed what
        # the log held (and what answers since then recorded): an answer just
        # recorded may still ask for a delivery. Others' later commits on a
        # shared log are not waited for.
        target = await dispatcher.head()
        while dispatcher.inflight or dispatcher.routed < max(
            target, self.mailboxes.last_commit
        ):
            if loop.time() >= deadline or (abandon is not None and abandon.is_set()):
                return False
            await asyncio.sleep(0.02)
        return True

    def in_flight(self) -> int:
        """The effects this host carries out now (model and tool calls,
        deliveries, creations)."""
        return len(self.dispatcher.inflight)

    async def stop(self) -> None:
        """Stop following the log and cancel effects still in flight."""
        if self.membership is not None:
            await self.membership.leave()
        if self.inputs is not None:
            await self.inputs.close()
        running = (
            self._dispatching,
            self.dispatcher.following,
            self._timing,
            self._sweeping,
            self._saving,
            *self.dispatcher.tasks,
            *self.claims.tasks,
        )
        for task in running:
            if task is not None:
                task.cancel()
        for task in running:
            if task is not None:
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        await self.mailboxes.join()
        if self.traces is not None:
            await self.traces.settle()
        if self.tools is not None:
            await self.tools.close()  # an MCP stdio server's process with it
        if self.projector is not None:
            await self.projector.catch_up(self.log)
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()
