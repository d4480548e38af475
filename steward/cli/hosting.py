"""Hosting a run in the foreground: the model provider and the host a
command needs, and the watch over a run (`run`, `fork`, `demo`) until it
ends, waits for a person or is interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

from msgspec.structs import replace

from steward import events
from steward.actors.run import events as run_events
from steward.actors.run import state as run_state
from steward.actors.run.state import run_stream
from steward.bus import EventLog
from steward.cli.env import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PIPE,
    EXIT_UNFINISHED,
    EXIT_WAITING,
    Env,
    shown,
)
from steward.effects.llm import ModelRouter, Provider, RequestInfo
from steward.errors import ConfigError, NoHostError, StewardError
from steward.host import Host
from steward.hostlock import Holder, HostLock
from steward.projections.store import Projector


def _provider(env: Env) -> Provider:
    router = ModelRouter(env.settings, env.script)
    model = router.model("default")
    if model.provider == "scripted" and model.script is None:
        raise ConfigError(
            "settings",
            "models.default",
            "no model is configured: pass --script FILE, set [models.default] in "
            "steward.toml, or set ANTHROPIC_API_KEY or OPENAI_API_KEY",
        )
    router.provider("default")  # a missing key or model id fails here, in one line
    return router


def checked_provider(env: Env) -> Provider:
    """The model provider a hosting command needs, with its settings checked
    (model, key, claims): called before a log is opened or created, so bad
    settings leave nothing behind."""
    if env.distributed:
        env.settings.check_claims()
    return _provider(env)


def new_host(env: Env, log: EventLog, projector: Projector | None, **kw: Any) -> Host:
    return Host(
        log,
        provider=kw.pop("provider", None) or checked_provider(env),
        tools=env.tools(),
        traces=env.traces(),
        workspace=Path(env.settings.tools.workspace),
        llm_concurrency=env.settings.llm_max_concurrency,
        tool_timeout=env.settings.tools.timeout,
        projector=projector,
        worker_id=kw.pop("worker_id", None)
        or (worker_id() if env.distributed else None),
        claim_seconds=env.settings.log.claim_seconds,
        kinds=env.kinds,
        **kw,
    )


def pair(text: str, option: str) -> tuple[str, str]:
    """``NAME=VALUE`` given to ``option``, as (name, value).

    Raises:
        StewardError: it is not NAME=VALUE.
    """
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise StewardError(f"{option} {text!r} is not NAME=VALUE")
    return name, value


async def follow(
    env: Env,
    log: EventLog,
    stream: str,
    interrupted: asyncio.Event,
    *,
    quiet: bool,
    line: Callable[[events.Event], str | None],
    ended: Callable[[Any], bool],
) -> Any:
    """Print a line (``line``) for each of ``stream``'s events as they are
    recorded, until its state is ``ended`` or Ctrl-C; its state then."""
    seen = 0
    kind = env.kinds.of(stream)
    state = kind.decider.initial
    while True:
        for rec in await log.read(stream, seen + 1):
            seen = rec.version
            state = kind.decider.evolve(state, rec.event)
            said = line(rec.event)
            if said and not quiet:
                env.out(shown(said))
        if ended(state) or interrupted.is_set():
            return state
        try:
            await asyncio.wait_for(interrupted.wait(), 0.05)
        except TimeoutError:
            pass


@contextlib.asynccontextmanager
async def foreground(
    env: Env, log: EventLog, projector: Projector, provider: Provider, what: str
) -> AsyncIterator[Host]:
    """The host a command that records an actor and follows it submits to:
    its own, started, when it takes an embedded log's host lock (it then
    carries the actor out, and stops on leaving); else one that only
    submits, beside the `serve` or workers that host the log.

    Raises:
        NoHostError: nothing hosts the log, so nothing would carry out
            ``what`` (checked before anything is recorded).
    """
    lock = None if env.distributed else HostLock(env.db)
    host: Host | None = None
    try:
        if lock is not None and lock.acquire():
            host = new_host(env, log, projector, provider=provider)
            await host.start()
        elif no_host := await why_unhosted(env, log, what):
            raise no_host
        yield host or Host(log, kinds=env.kinds)
    finally:
        if host is not None:
            await host.stop()
        if lock is not None:
            lock.release()


async def why_unhosted(env: Env, log: EventLog, what: str) -> NoHostError | None:
    """Why nothing would answer ``what`` on the log, or ``None`` when a
    process hosts every actor of it: the `serve` holding an embedded log's
    host lock, a `serve` or `worker` on a shared one (it answers on NATS)."""
    if env.distributed:  # a JetStream log
        if await cast(Any, log).host() is not None:
            return None
        start = "`steward serve` or `steward worker`"
    else:
        lock = HostLock(env.db)
        holder = lock.holder()
        if holder is not None and holder.scope is None:
            return None
        if holder is not None:  # a `run` that hosts its own run alone
            return NoHostError(f"nothing would answer {what}: {lock.refusal()}")
        start = "`steward serve`"
    return NoHostError(
        f"nothing hosts the log {env.log_url}, so nothing would answer {what}: "
        f"start {start} on it"
    )


def worker_id() -> str:
    """A new id for a host on a shared log: where it runs, and a nonce."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def _step_line(rec: events.Recorded) -> str:
    from steward.projections.summary import summary

    run_id = rec.stream.removeprefix("run.")
    kind = events.type_name(rec.event)
    return f"{run_id:>18} v{rec.version:<3} {kind:<17} {summary(rec.event, 100)}"


def _stream_deltas(host: Host) -> None:
    """Echo the model's text to stderr as it streams, one line per reply."""
    streaming: set[str] = set()

    def on_delta(info: RequestInfo, text: str) -> None:
        if info.request_id not in streaming:
            streaming.add(info.request_id)
            sys.stderr.write(f"  {info.actor_id} model> ")
        sys.stderr.write(text)
        sys.stderr.flush()

    def on_record(rec: events.Recorded) -> None:
        event = rec.event
        if isinstance(
            event, events.LlmResponded | events.LlmFailed | events.LlmAttemptFailed
        ):
            if event.request_id in streaming:
                streaming.discard(event.request_id)
                sys.stderr.write("\n")

    host.listen_deltas(on_delta)
    host.listen(on_record)


class _Watch:
    """What a foreground command watches in the log while its run goes on:
    it prints the steps of run ``root`` and its subagents (each once), and
    notes when the run ends or one of them stops for a person."""

    def __init__(self, env: Env, root: str, quiet: bool) -> None:
        self.env = env
        self.root = root
        self.quiet = quiet
        self.printed = 0
        """The position of the last step printed."""
        self.stopped = asyncio.Event()
        """Set when the run ended or a run of it waits for a person, or when
        standard output closed (`pipe_closed`)."""
        self.pipe_closed = False

    def see(self, rec: events.Recorded) -> None:
        if rec.correlation_id != self.root or rec.position <= self.printed:
            return
        self.printed = rec.position
        if not self.quiet and not self.pipe_closed:
            try:
                self.env.out(_step_line(rec))
            except BrokenPipeError:  # `steward run ... | head`: the command ends
                self.pipe_closed = True
                self.stopped.set()
        event = rec.event
        if (
            (rec.stream == run_stream(self.root) and isinstance(event, _ENDS))
            or isinstance(event, run_events.ApprovalRequested)
            or (
                isinstance(event, run_events.BudgetExceeded) and event.policy == "pause"
            )
        ):
            self.stopped.set()

    async def until_stopped(
        self, log: EventLog, interrupted: asyncio.Event, timeout: float | None = None
    ) -> bool | None:
        """Wait for the run to stop or for Ctrl-C: whether it stopped, or
        ``None`` when neither came within ``timeout`` seconds. A stop the log
        no longer shows (an approval given at once) is waited past."""
        while True:
            stopped = await self._until_stopped(interrupted, timeout)
            if not stopped or self.pipe_closed or await _stopped(log, self.root):
                return stopped
            self.stopped.clear()

    async def _until_stopped(
        self, interrupted: asyncio.Event, timeout: float | None
    ) -> bool | None:
        stopped = asyncio.ensure_future(self.stopped.wait())
        interrupt = asyncio.ensure_future(interrupted.wait())
        await asyncio.wait(
            {stopped, interrupt}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        stopped.cancel()
        interrupt.cancel()
        if self.stopped.is_set():
            return True
        return False if interrupted.is_set() else None


_ENDS = (run_events.RunCompleted, run_events.RunFailed, run_events.RunCancelled)


async def see_run(
    env: Env,
    log: EventLog,
    projector: Projector,
    root: str,
    quiet: bool,
    *,
    created: run_events.RunCreated | None = None,
    stream: bool = False,
    provider: Provider | None = None,
) -> int:
    """Carry run ``root`` (creating it first from ``created``, if given) until
    it ends, waits for a person, or Ctrl-C; the exit status, with what it
    means said. On a SQLite log held by another host (a `serve`), the run is
    handed to that host (recorded queued) and followed in the log; should
    that host stop, this process takes the log over and hosts the run."""
    provider = provider or checked_provider(env)
    watch = _Watch(env, root, quiet)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    lock = None if env.distributed else HostLock(env.db)
    try:
        if lock is not None and not lock.acquire(scope=root):
            holder = lock.holder()
            if holder is not None and holder.scope is not None:
                print(
                    f"the log is held by {holder}, which hosts only its run "
                    f"{holder.scope}; run {root} starts when it ends",
                    file=sys.stderr,
                    flush=True,
                )
            watch.printed = await log.head()
            if created is not None:
                queued = replace(created, queued=True)
                await Host(log, kinds=env.kinds).submit(run_stream(root), queued)
                created = None
            stopped = await _follow_log(log, watch, interrupted, lock)
            if stopped is not None:
                close = getattr(provider, "aclose", None)
                if close is not None:
                    await close()
                return await _ending(env, log, watch, stopped, holder)
            # the other host stopped and this process took the log over
            while batch := await log.read_all(watch.printed):
                for rec in batch:
                    watch.see(rec)
                watch.printed = batch[-1].position
        host = new_host(env, log, projector, provider=provider, scope=root)
        if stream:
            _stream_deltas(host)
        stopped = await _host_run(host, log, watch, interrupted, created)
        return await _ending(env, log, watch, stopped, None)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if lock is not None:
            lock.release()


async def _host_run(
    host: Host,
    log: EventLog,
    watch: _Watch,
    interrupted: asyncio.Event,
    created: run_events.RunCreated | None,
) -> bool:
    """Host the log (creating the run from ``created``, if given) until
    ``watch`` says its run stopped, or Ctrl-C; whether it stopped."""
    host.listen(watch.see)
    await host.start()
    try:
        target = run_stream(watch.root)
        if created is not None:
            await host.submit(target, created)
        if await _stopped(log, watch.root):
            return True
        return bool(await watch.until_stopped(log, interrupted))
    finally:
        await host.stop()


async def _follow_log(
    log: EventLog, watch: _Watch, interrupted: asyncio.Event, lock: HostLock
) -> bool | None:
    """Follow the log past ``watch.printed`` while another process hosts it,
    until the run stops or Ctrl-C (whether it stopped); ``None`` once this
    process took the host lock (the other host ended)."""

    async def follow(since: int) -> None:
        async for rec in log.subscribe(since):
            watch.see(rec)

    follower = asyncio.create_task(follow(watch.printed))
    try:
        if await _stopped(log, watch.root):
            return True
        while True:
            stopped = await watch.until_stopped(log, interrupted, _TAKE_OVER_EVERY)
            if stopped is not None:
                return stopped
            if lock.acquire(scope=watch.root):
                return None
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower


_TAKE_OVER_EVERY = 0.5
"""Seconds between a follower's tries to take the log over from its host."""


def _run(records: list[events.Recorded]) -> run_state.Run:
    """The state of the run whose records are ``records``."""
    return run_state.fold(r.event for r in records)


async def _stopped(log: EventLog, root: str) -> bool:
    """Whether run ``root`` ended, or it or a subagent waits for a person."""
    state = _run(await log.read(run_stream(root)))
    return (
        state.status in run_events.TERMINAL
        or await _waiting_for_person(log, state) is not None
    )


def _awaited(state: run_state.Run) -> str | None:
    """What a person must decide for run ``state`` to go on, if anything."""
    if state.status != "waiting":
        return None
    run_id = state.run_id
    if state.budget_hold is not None:
        return (
            f"its budget is spent: `steward runs approve {run_id}` lifts it, "
            f"`steward runs deny {run_id} --reason WHY` fails the run"
        )
    if state.approvals:
        return (
            f"its call to {state.approvals[0].name} needs approval: `steward runs "
            f"approve {run_id}` or `steward runs deny {run_id} --reason WHY`"
        )
    return None


async def _ending(
    env: Env,
    log: EventLog,
    watch: _Watch,
    stopped: bool,
    holder: Holder | None,
) -> int:
    """Say how run ``watch.root`` stands now that its command returns; the
    exit status."""
    root = watch.root
    records = await log.read(run_stream(root))
    state = _run(records)
    if watch.pipe_closed:  # stdout is gone: say on stderr how the run stands
        if state.status not in run_events.TERMINAL:
            print(
                f"output closed: run {root} is left {state.status}; `steward "
                f"serve` carries it on, `steward runs cancel {root}` ends it",
                file=sys.stderr,
                flush=True,
            )
        return EXIT_PIPE
    if state.status in run_events.TERMINAL:
        ended = next(
            (
                r.event
                for r in reversed(records)
                if type(r.event) is run_events.RunCompleted
            ),
            None,
        )
        if ended is not None and ended.reason in run_events.UNFINISHED:
            env.out(f"run {root} completed unfinished ({ended.reason})")
            env.out(state.output)
            return EXIT_UNFINISHED
        env.out(f"run {root} {state.status}")
        if state.status == "completed":
            env.out(state.output)
            return 0
        env.out(f"reason: {state.reason}")
        return EXIT_FAILED
    waiting = await _waiting_for_person(log, state)
    if stopped and waiting is not None:
        run, need = waiting
        of = "" if run.run_id == root else f" (a subagent of {root})"
        env.out(f"run {run.run_id}{of} is waiting for a person: {need}")
        env.out("a running `steward serve` carries the run on from there")
        return EXIT_WAITING
    if holder is not None and holder.scope is None:
        left = f"run {root} goes on in the host that has the log ({holder})"
    elif holder is not None:
        left = (
            f"run {root} is left {state.status}, queued; `steward serve` takes it "
            f"once {holder} ends"
        )
    else:
        left = f"run {root} is left {state.status}; `steward serve` resumes it"
    print(
        f"interrupted: {left}; `steward runs cancel {root}` ends it",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_INTERRUPTED


async def _waiting_for_person(
    log: EventLog, state: run_state.Run
) -> tuple[run_state.Run, str] | None:
    """The run of ``state``'s tree (itself first, then its subagents) that
    waits for a person, and what it waits for."""
    need = _awaited(state)
    if need is not None:
        return state, need
    for child in state.children:
        found = await _waiting_for_person(log, _run(await log.read(run_stream(child))))
        if found is not None:
            return found
    return None
