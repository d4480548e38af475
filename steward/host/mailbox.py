"""The mailboxes and the commit loop: how an input becomes a commit.

For an input the host takes the actor's state from its cache (or the log),
asks the stream's kind to decide, and appends ``[input, *decisions]`` as one
commit at the expected version; on a conflict it forgets the state, reads it
again and retries. A stream is decided by one task at a time: an input for
an idle stream is decided in the submitter's own task, and inputs that
arrive meanwhile wait in the stream's mailbox for one task that drains it.
Text from outside (a model's reply, a tool's output) with a lone surrogate
is recorded made encodable (U+FFFD).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from steward import events, logs
from steward.actors.kind import Kind, Kinds
from steward.actors.prompt import Prompt, PromptCache
from steward.bus import Commit, EventLog
from steward.errors import ConcurrencyError, StewardError
from steward.events import Event
from steward.host.states import States
from steward.host.traces import Traces
from steward.metrics import COUNTED, ended
from steward.metrics import HOST as METRICS

log = logging.getLogger("steward.host")

_KEPT_PROMPTS = 10_000
"""Prompts kept for calls not yet made before the host forgets them (a
forgotten prompt is built again from the state)."""


@dataclass
class _Mailbox:
    queue: deque[_Item] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


@dataclass
class _Item:
    input: Event
    causation_id: str | None
    done: asyncio.Future[Commit | None]


Forward = Callable[[str, Event, str | None], Awaitable["Commit | None | bool"]]


class Mailboxes:
    """The streams' mailboxes, and the decide-and-commit loop that empties
    them into the log."""

    def __init__(
        self,
        log: EventLog,
        kinds: Kinds,
        states: States,
        prompt_cache: PromptCache,
        *,
        max_conflict_retries: int = 20,
    ) -> None:
        self._log = log
        self.traces: Traces | None = None
        """Where the steps' spans go (`Host` sets it); ``None``: nowhere."""
        self._kinds = kinds
        self._states = states
        self._prompt_cache = prompt_cache
        self._max_conflict_retries = max_conflict_retries
        self._mailboxes: dict[str, _Mailbox] = {}
        # Prompts of this host's own model requests, as the decider built
        # them, until the call takes them.
        self._prompts: dict[str, Prompt] = {}
        self.forward: Forward | None = None
        """Sends an input to the worker holding its stream: its commit,
        ``None`` when refused, ``False`` when no worker answered."""
        self.last_commit = 0
        """The position of this host's newest commit to a stream it follows."""

    async def submit(
        self,
        stream: str,
        input: Event,
        *,
        causation_id: str | None = None,
        here: bool = False,
    ) -> Commit | None:
        """Decide ``input`` on ``stream`` and record it; ``None`` when refused.

        An input for a stream this host does not follow goes to the worker
        holding it, when there is one (`forward`; not when ``here``, as for
        an input another worker sent): its commit comes back without its
        records."""
        if not here and self.forward and not self._states.follows(stream):
            sent = await self.forward(stream, input, causation_id)
            if sent is None or isinstance(sent, Commit):  # (False: no holder)
                return sent
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
            with logs.about(stream):
                return await self._decide_and_commit(stream, input, causation_id)
        except Exception:
            log.exception("stream %s: input %s failed", stream, _brief(input))
            raise
        finally:
            if box.queue:
                box.task = asyncio.create_task(self._drain(stream, box))
            else:
                del self._mailboxes[stream]

    def take_prompt(self, request_id: str) -> Prompt | None:
        """The prompt the decider built for this host's model request
        ``request_id``, if it is still kept (once: the call takes it)."""
        return self._prompts.pop(request_id, None)

    async def join(self) -> None:
        """Wait for the tasks draining mailboxes now to finish."""
        for box in list(self._mailboxes.values()):
            if box.task is not None:
                await asyncio.gather(box.task, return_exceptions=True)

    async def _drain(self, stream: str, box: _Mailbox) -> None:
        # Started only when inputs queued up behind an inline decision; it
        # ends when the mailbox is empty so idle streams cost nothing.
        with logs.about(stream):
            await self._drain_all(stream, box)

    async def _drain_all(self, stream: str, box: _Mailbox) -> None:
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
        kind = self._kinds.of(stream)
        states = self._states
        # An input that begins a stream this host knows nothing of is decided
        # on the initial state, without a read: the append at version 0
        # fails if the stream has events after all (a restarted effect's).
        guess = self._opens_unseen(kind, stream, input)
        for _ in range(self._max_conflict_retries):
            if guess:
                state, version = kind.decider.initial, 0
            else:
                state, version = states.cached(stream) or await states.get(stream)
            try:
                commit = await self._commit(stream, input, causation_id, state, version)
            except ConcurrencyError:
                if not guess:
                    METRICS.conflicts += 1
                guess = False
                states.forget(stream)
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
        kind = self._kinds.of(stream)
        started = time.perf_counter()
        began_ns = 0 if self.traces is None else time.time_ns()
        decided = kind.decide_and_fold(input, state, self._prompt_cache)
        if decided is None:
            METRICS.refusals += 1
            log.debug("stream %s refused %s", stream, events.type_name(input))
            return None
        decisions, after, prompt = decided
        batch = [input, *decisions]
        correlation_id = kind.correlation_of(state, input)
        commit = await self._log.append(
            stream,
            batch,
            version,
            correlation_id=correlation_id,
            causation_id=causation_id,
        )
        self._recorded(commit, batch, after, prompt)
        status = kind.surface.status
        statuses = None if status is None else (status(state), status(after))
        METRICS.step(kind.name, time.perf_counter() - started, len(batch), statuses)
        if statuses is not None and statuses[0] != statuses[1]:
            log.info("%s %s: %s", kind.name, statuses[1], events.type_name(input))
        if self.traces is not None:
            now = time.time_ns()
            last = commit.last_version
            traces = self.traces
            traces.step(kind.name, stream, correlation_id, input, last, began_ns, now)
            if statuses is not None and ended(*statuses):
                outcome = statuses[1]
                traces.ended(kind.name, stream, correlation_id, outcome, now, self._log)
        return commit

    def _recorded(
        self, commit: Commit, batch: Sequence[Event], after: Any, prompt: Prompt | None
    ) -> None:
        """Keep what this host's own commit of a decided ``batch`` tells."""
        METRICS.commits += 1
        if self._states.follows(commit.stream):  # (what `Host.drain` waits for)
            self.last_commit = max(self.last_commit, commit.last_position)
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
        self._states.committed(commit.stream, after, commit.last_version)

    def _opens_unseen(self, kind: Kind[Any], stream: str, input: Event) -> bool:
        """Whether ``input`` begins ``stream`` (`Decider.opens`) and this host
        knows nothing of the stream (no commit, cached state or routed
        record): then it is decided on the initial state, unread, and the
        append at version 0 checks."""
        return isinstance(input, kind.decider.opens) and self._states.unseen(stream)


def _brief(input: Event) -> str:
    """An input named for a log line: its type and request, not its text
    (a model's reply may be megabytes)."""
    request = getattr(input, "request_id", None)
    name = events.type_name(input)
    return f"{name} {request}" if request is not None else name
