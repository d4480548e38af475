"""The ``steward`` command.

Every command reads settings from ``steward.toml`` (or ``--config``) and
``STEWARD_*`` variables, and works on the event log at ``--log`` (default: the
``[log] url`` setting, ``.steward/steward.db``). Only commands that write
create a log, and only the default ``.steward/`` directory is created. Errors
caused by input are one line on stderr and a non-zero exit, never a
traceback; a closed standard output ends a command quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn, get_args
from wsgiref.simple_server import WSGIServer

import msgspec
import prometheus_client
from msgspec.structs import replace

from steward import events, replay
from steward.actors import run as run_actor
from steward.actors.llm import ModelRouter, Provider, RequestInfo
from steward.actors.tools import ToolRegistry
from steward.bus import EventLog, log_file, open_log
from steward.config import LogConfig, Settings, load_settings
from steward.config.settings import Port
from steward.errors import ConfigError, NotFoundError, StewardError
from steward.host import Host, run_stream
from steward.hostlock import Holder, HostLock
from steward.ingress import Egress, Ingress
from steward.projections.metrics import endpoint_registry
from steward.projections.store import Projector

EXIT_FAILED = 1
EXIT_INPUT = 2
EXIT_MISMATCH = 3
EXIT_WAITING = 4
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141
"""The reader of standard output went away: 128 + SIGPIPE, as the shell
reports a process that signal ended."""
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


@dataclass
class Env:
    """What every command works with: settings and where the log is."""

    settings: Settings
    db: Path
    """The SQLite file of the projections (for the embedded log, the log's own)."""
    script: str | None
    out: Callable[[str], None]
    log_url: str = ""
    """The event log: the ``db`` file, or a ``nats://`` URL."""

    def __post_init__(self) -> None:
        self.log_url = self.log_url or str(self.db)

    @property
    def distributed(self) -> bool:
        return self.log_url.partition("://")[0] in ("nats", "tls")


# -- helpers --------------------------------------------------------------------


def _env(settings: Settings, args: argparse.Namespace) -> Env:
    """Where the log and the projections are, from the options and settings.

    ``--log`` wins over ``--db``, which wins over ``[log] url``; ``--backend``
    without ``--log`` picks that backend's default when ``[log] url`` is of the
    other. An embedded log keeps its projections in its own file; a ``nats://``
    log keeps them in ``--db`` or ``[log] projections``.
    """
    url = args.log or settings.log.url
    file = _log_file(url, args)
    if args.backend is not None and (file is None) != (args.backend == "jetstream"):
        if args.log is not None:
            raise StewardError(
                f"--backend {args.backend} does not fit --log {args.log}"
            )
        url = DEFAULT_NATS_URL if file is not None else LogConfig().url
        file = _log_file(url, args)
    if file is None:
        db = Path(args.db or settings.log.projections or ".steward/projections.db")
        return Env(settings=settings, db=db, script=args.script, out=print, log_url=url)
    if args.log is None and args.db is not None:
        file = Path(args.db)
    return Env(settings=settings, db=file, script=args.script, out=print)


def _log_file(url: str, args: argparse.Namespace) -> Path | None:
    """`steward.bus.log_file`, its error naming where ``url`` came from."""
    try:
        return log_file(url)
    except ConfigError as e:
        source = "--log" if args.log is not None else "settings: log.url"
        raise ConfigError(source, url, e.problem) from None


DEFAULT_DIR = Path(LogConfig().url).parent
"""The one directory steward creates by itself (``.steward``)."""


def _directory(file: Path) -> None:
    """Make sure ``file``'s directory exists: create the default one, refuse
    to create any other (a mistyped path should not become a new log)."""
    parent = file.parent
    if parent.is_dir():
        return
    if parent == DEFAULT_DIR:
        parent.mkdir()
        return
    raise NotFoundError(
        f"no directory {parent} for {file}; create it first (steward creates "
        f"only its default {DEFAULT_DIR}/ by itself)"
    )


@contextlib.asynccontextmanager
async def _opened(
    env: Env, *, create: bool = True
) -> AsyncIterator[tuple[EventLog, Projector]]:
    """The log and the projections; an embedded log must exist already
    unless ``create`` (commands that only read never create one)."""
    if not (create or env.distributed or env.db.exists()):
        raise NotFoundError(f"no log at {env.db}; --log names another")
    _directory(env.db)
    if env.distributed:
        log = await open_log(env.log_url)
    else:
        log = await open_log(str(env.db), synchronous=env.settings.log.synchronous)
    projector = await Projector.open(env.db)
    try:
        yield log, projector
    finally:
        await projector.close()
        await log.close()


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


def _checked_provider(env: Env) -> Provider:
    """The model provider a hosting command needs, with its settings checked
    (model, key, claims): called before a log is opened or created, so bad
    settings leave nothing behind."""
    if env.distributed:
        env.settings.check_claims()
    return _provider(env)


def _host(env: Env, log: EventLog, projector: Projector, **kw: Any) -> Host:
    tools = ToolRegistry.with_builtins(
        output_limit=env.settings.tools.output_limit,
        timeout=env.settings.tools.timeout,
    )
    return Host(
        log,
        provider=kw.pop("provider", None) or _checked_provider(env),
        tools=tools,
        workspace=Path(env.settings.tools.workspace),
        llm_concurrency=env.settings.llm_max_concurrency,
        tool_timeout=env.settings.tools.timeout,
        projector=projector,
        worker_id=_worker_id() if env.distributed else None,
        claim_seconds=env.settings.log.claim_seconds,
        **kw,
    )


def _worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def _new_run(env: Env, text: str, profile: str) -> events.RunCreated:
    tools = ToolRegistry.with_builtins()
    allowed = (
        env.settings.agents[profile].tools if profile in env.settings.agents else None
    )
    settings = env.settings.run_settings(profile, tools.specs(allowed))
    return events.RunCreated(
        run_id="r" + secrets.token_hex(6),
        input_text=text,
        settings=settings,
        profile=profile,
    )


async def _records(log: EventLog, run_id: str) -> list[events.Recorded]:
    records = await log.read(run_stream(run_id))
    if not records:
        raise NotFoundError(
            f"no run {run_id!r} in the log; `steward runs list` shows them"
        )
    return records


def _step_line(rec: events.Recorded) -> str:
    from steward.projections.store import summary

    run_id = rec.stream.removeprefix("run.")
    kind = events.type_name(rec.event)
    return f"{run_id:>18} v{rec.version:<3} {kind:<17} {summary(rec.event, 100)}"


def _stream_deltas(host: Host) -> None:
    """Echo the model's text to stderr as it streams, one line per reply."""
    streaming: set[str] = set()

    def on_delta(info: RequestInfo, text: str) -> None:
        if info.request_id not in streaming:
            streaming.add(info.request_id)
            sys.stderr.write(f"  {info.run_id} model> ")
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
            or isinstance(event, events.ApprovalRequested)
            or (isinstance(event, events.BudgetExceeded) and event.policy == "pause")
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


_ENDS = (events.RunCompleted, events.RunFailed, events.RunCancelled)


async def _see_run(
    env: Env,
    log: EventLog,
    projector: Projector,
    root: str,
    quiet: bool,
    *,
    created: events.RunCreated | None = None,
    stream: bool = False,
    provider: Provider | None = None,
) -> int:
    """Carry run ``root`` (creating it first from ``created``, if given) until
    it ends, waits for a person, or Ctrl-C; the exit status, with what it
    means said. On a SQLite log held by another host (a `serve`), the run is
    handed to that host (recorded queued) and followed in the log; should
    that host stop, this process takes the log over and hosts the run."""
    provider = provider or _checked_provider(env)
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
                await Host(log).submit(run_stream(root), queued)
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
        host = _host(env, log, projector, provider=provider, scope=root)
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
    created: events.RunCreated | None,
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


async def _stopped(log: EventLog, root: str) -> bool:
    """Whether run ``root`` ended, or it or a subagent waits for a person."""
    state = replay.rebuild(await log.read(run_stream(root)))
    return (
        state.status in events.TERMINAL
        or await _waiting_for_person(log, state) is not None
    )


def _awaited(state: run_actor.Run) -> str | None:
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
    state = replay.rebuild(await log.read(run_stream(root)))
    if watch.pipe_closed:  # stdout is gone: say on stderr how the run stands
        if state.status not in events.TERMINAL:
            print(
                f"output closed: run {root} is left {state.status}; `steward "
                f"serve` carries it on, `steward runs cancel {root}` ends it",
                file=sys.stderr,
                flush=True,
            )
        return EXIT_PIPE
    if state.status in events.TERMINAL:
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
    log: EventLog, state: run_actor.Run
) -> tuple[run_actor.Run, str] | None:
    """The run of ``state``'s tree (itself first, then its subagents) that
    waits for a person, and what it waits for."""
    need = _awaited(state)
    if need is not None:
        return state, need
    for child in state.children:
        found = await _waiting_for_person(
            log, replay.rebuild(await log.read(run_stream(child)))
        )
        if found is not None:
            return found
    return None


# -- commands -------------------------------------------------------------------


async def cmd_run(env: Env, args: argparse.Namespace) -> int:
    created = _new_run(env, args.text, args.profile)
    provider = _checked_provider(env)  # bad settings fail before the log is made
    async with _opened(env) as (log, projector):
        return await _see_run(
            env,
            log,
            projector,
            created.run_id,
            args.quiet,
            created=created,
            stream=args.stream,
            provider=provider,
        )


async def cmd_start(env: Env, args: argparse.Namespace) -> int:
    created = replace(_new_run(env, args.text, args.profile), queued=True)
    stream = run_stream(created.run_id)
    async with _opened(env) as (log, projector):
        host = Host(log, projector=projector)
        await host.submit(stream, created)
        env.out(created.run_id)
        if args.wait > 0 and not await _taken(log, stream, args.wait):
            where = "`steward serve`"
            if env.distributed:
                where = "`steward worker` or `steward serve`"
            print(
                f"run {created.run_id} is queued, but no host took it within "
                f"{args.wait:g}s; start {where} on {env.log_url} to run it",
                file=sys.stderr,
            )
    return 0


async def _taken(log: EventLog, stream: str, seconds: float) -> bool:
    """Whether a host takes queued run ``stream`` within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        if any(isinstance(r.event, events.RunTaken) for r in await log.read(stream)):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)


async def cmd_serve(env: Env, args: argparse.Namespace) -> int:
    return await _serve(env, args, services=True)


async def cmd_worker(env: Env, args: argparse.Namespace) -> int:
    if not env.distributed:
        raise ConfigError(
            "settings",
            "log.url",
            "a worker shares a nats:// log with others; give --log nats://... "
            "(on an embedded log, run `steward serve`)",
        )
    return await _serve(env, args, services=False)


async def _serve(env: Env, args: argparse.Namespace, *, services: bool) -> int:
    provider = _checked_provider(env)  # bad settings fail before the log is made
    lock = None
    if not env.distributed:
        _directory(env.db)
        lock = HostLock(env.db)
    if lock is not None and not lock.acquire():
        raise StewardError(lock.refusal())
    try:
        return await _serve_log(env, args, provider, services=services)
    finally:
        if lock is not None:
            lock.release()


async def _serve_log(
    env: Env, args: argparse.Namespace, provider: Provider, *, services: bool
) -> int:
    async with _opened(env) as (log, projector):
        host = _host(env, log, projector, provider=provider)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        metrics = _metrics_endpoint(env, args.metrics_port)
        try:
            await host.start(_progress("catching up", await log.head()))
            closers = await _start_services(env, log, host) if services else []
            role = "serving" if services else f"working as {host.worker_id} on"
            env.out(f"steward {role} {env.log_url} (ctrl-c to stop)")
            sys.stdout.flush()  # seen at once through a pipe (`serve | tee`)
            await stop.wait()
            for close in reversed(closers):
                await close()
            await host.stop()
        finally:
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
    return 0


def _metrics_endpoint(env: Env, port: int | None) -> WSGIServer | None:
    """Serve Prometheus metrics on ``port`` (else ``[metrics] port``), if any."""
    config = env.settings.metrics
    if port is None:
        port = config.port
    if port is None:
        return None
    try:
        server, _ = prometheus_client.start_http_server(
            port, config.address, registry=endpoint_registry(env.db)
        )
    except OSError as e:
        raise ConfigError(
            "settings",
            "metrics.port",
            f"cannot serve metrics on {config.address}:{port}: {e.strerror}; "
            "choose another port (--metrics-port or [metrics] port)",
        ) from None
    env.out(f"metrics: http://{config.address}:{server.server_port}/metrics")
    return server


async def _start_services(
    env: Env, log: EventLog, host: Host
) -> list[Callable[[], Awaitable[None]]]:
    """On a NATS log: egress always, ingress for the configured channels.

    Returns the closers, in start order.
    """
    connection = getattr(log, "connection", None)
    if connection is None:
        if env.settings.channels:
            raise ConfigError(
                "settings",
                "channels",
                "inbound channels need a nats:// event log ([log] url or --log)",
            )
        return []
    egress = Egress(connection, host)
    egress.start()
    closers: list[Callable[[], Awaitable[None]]] = [egress.close]
    if env.settings.channels:
        for profile in env.settings.channels.values():
            env.settings.profile(profile)  # an unknown profile fails here, named
        ingress = Ingress(
            connection,
            host,
            env.settings,
            env.settings.channels,
            replicas=getattr(log, "replicas", 1),
        )
        await ingress.start()
        closers.append(ingress.stop)
        env.out(f"inbound channels: {', '.join(sorted(env.settings.channels))}")
    return closers


async def cmd_runs_list(env: Env, args: argparse.Namespace) -> int:
    async with _opened(env, create=False) as (log, projector):
        await projector.catch_up(log)
        where, params = ("WHERE status=?", [args.status]) if args.status else ("", [])
        rows = await projector.query(
            f"SELECT id, status, kind, iterations, input_tokens + output_tokens, "
            f"input_text FROM runs {where} ORDER BY created_at DESC, id LIMIT ?",
            [*params, args.limit],
        )
    if not rows:
        env.out("no runs yet" if not args.status else f"no {args.status} runs")
        return 0
    env.out(f"{'id':<22} {'status':<10} {'kind':<11} {'iter':>4} {'tokens':>7}  input")
    for run_id, status, kind, iterations, tokens, text in rows:
        text = " ".join(str(text).split())[:60]
        env.out(
            f"{run_id:<22} {status:<10} {kind:<11} {iterations:>4} {tokens:>7}  {text}"
        )
    return 0


async def cmd_runs_show(env: Env, args: argparse.Namespace) -> int:
    async with _opened(env, create=False) as (log, projector):
        records = await _records(log, args.id)
        await projector.catch_up(log)
        run = await projector.query(
            "SELECT status, kind, parent_run_id, iterations, input_tokens, "
            "output_tokens, output_text, reason, cost_usd FROM runs WHERE id=?",
            [args.id],
        )
        steps = await projector.query(
            "SELECT seq, kind, duration, tokens, cost_usd, summary FROM run_steps "
            "WHERE run_id=? ORDER BY seq",
            [args.id],
        )
    status, kind, parent, iterations, tin, tout, output, reason, cost = run[0]
    env.out(
        f"run {args.id}  {status}  {kind}" + (f"  parent {parent}" if parent else "")
    )
    env.out(
        f"iterations {iterations}  tokens in {tin} out {tout}"
        + (f"  cost ${cost:.6f}" if cost else "")
    )
    env.out(f"{'step':>4}  {'kind':<17} {'duration':>9} {'tokens':>7}  detail")
    for seq, step_kind, duration, tokens, step_cost, text in steps:
        dur = f"{duration:.3f}s" if duration is not None else ""
        tok = str(tokens) if tokens is not None else ""
        if step_cost:
            text = f"${step_cost:.6f} {text}"
        env.out(f"{seq:>4}  {step_kind:<17} {dur:>9} {tok:>7}  {text}")
    if output:
        env.out(f"output: {output}")
    if reason:
        env.out(f"reason: {reason}")
    if args.prompts:
        for rec in records:
            if isinstance(rec.event, events.LlmRequested):
                prompt = run_actor.build_prompt(replay.rebuild(records, rec.version))
                env.out(f"--- prompt for {rec.event.request_id} (v{rec.version})")
                env.out(f"[system] {prompt.system}")
                for message in prompt.messages:
                    env.out(f"[{message.role}] {message.content}")
    return 0


async def _operator_input(
    env: Env, run_id: str, make: Callable[[run_actor.Run], events.Event]
) -> int:
    async with _opened(env) as (log, projector):
        await _records(log, run_id)
        host = Host(log, projector=projector)
        stream = run_stream(run_id)
        state, _ = await host.state(stream)
        commit = await host.submit(stream, make(state))
        state, _ = await host.state(stream)
    if commit is None:
        env.out(f"run {run_id} is {state.status}: nothing to do")
        return 1
    env.out(f"run {run_id} is now {state.status}")
    return 0


async def cmd_runs_cancel(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(
        env, args.id, lambda s: events.CancelRequested(reason=args.reason)
    )


def _approval(
    args: argparse.Namespace, approved: bool
) -> Callable[[run_actor.Run], events.Event]:
    def make(state: run_actor.Run) -> events.Event:
        waiting = [a.request_id for a in state.approvals]
        if state.budget_hold is not None:
            waiting.append(state.budget_hold)
        if not waiting:
            raise StewardError(f"run {args.id} is not waiting for an approval")
        request_id = args.request or waiting[0]
        return events.ApprovalDecided(
            request_id=request_id, approved=approved, reason=getattr(args, "reason", "")
        )

    return make


async def cmd_runs_approve(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(env, args.id, _approval(args, True))


async def cmd_runs_deny(env: Env, args: argparse.Namespace) -> int:
    return await _operator_input(env, args.id, _approval(args, False))


async def cmd_replay(env: Env, args: argparse.Namespace) -> int:
    async with _opened(env, create=False) as (log, _):
        records = await _records(log, args.id)
    state = replay.rebuild(records)
    env.out(f"run {args.id}: {len(records)} events, status {state.status}")
    env.out(
        f"iterations {state.iteration}, tool calls {state.tool_calls}, "
        f"tokens in {state.input_tokens} out {state.output_tokens}"
    )
    if state.output:
        env.out(f"output: {state.output}")
    if state.reason:
        env.out(f"reason: {state.reason}")
    if not args.verify:
        return 0
    return _report(env, replay.verify(records))


def _report(env: Env, mismatch: replay.Mismatch | None) -> int:
    if mismatch is None:
        env.out("verify: ok")
        return 0
    env.out(f"verify: MISMATCH at version {mismatch.version}: {mismatch.problem}")
    env.out(f"  input:      {mismatch.input!r}")
    env.out(f"  recorded:   {list(mismatch.recorded)!r}")
    decided = None if mismatch.decided is None else list(mismatch.decided)
    env.out(f"  re-decided: {decided!r}")
    return EXIT_MISMATCH


async def cmd_fork(env: Env, args: argparse.Namespace) -> int:
    new_id = args.id.split("-fork")[0] + "-fork" + secrets.token_hex(3)
    async with _opened(env, create=False) as (log, projector):  # the run's log
        records = await _records(log, args.id)
        kept = _fork_steps(replay.commits(records), args.at)
        provider = None if args.no_run else _checked_provider(env)
        # Every input re-decided, and all of them recorded in one commit: a
        # host beside this process (a serve) sees the copy whole and carries
        # out only what its last step asks for.
        copy: list[events.Event] = []
        state = run_actor.initial
        for step in kept:
            event = replay.remap(step[0].event, args.id, new_id)
            if isinstance(event, events.RunCreated):
                event = replace(event, parent_run_id=None, root_run_id=None)
            decided = run_actor.decide(event, state)
            if decided is None:
                raise StewardError(
                    f"the fork refused the input at version {step[0].version}"
                )
            copy += [event, *decided]
            state = run_actor.fold([event, *decided], state)
        await log.append(run_stream(new_id), copy, 0, correlation_id=new_id)
        env.out(f"forked {args.id} at version {args.at} as {new_id}")
        if provider is None:
            return 0
        return await _see_run(
            env, log, projector, new_id, args.quiet, provider=provider
        )


def _fork_steps(
    steps: list[list[events.Recorded]], at: int
) -> list[list[events.Recorded]]:
    """The steps a fork at version ``at`` copies: those up to the one ending
    there. Any other version is refused, naming the versions that work."""
    ends = [step[-1].version for step in steps]
    if at in ends:
        return steps[: ends.index(at) + 1]
    if at > ends[-1]:
        problem = f"version {at} is past the run's last version {ends[-1]}"
    elif at < 1:
        problem = f"version {at} is before the run's first step"
    else:
        step = next(step for step in steps if step[-1].version > at)
        problem = (
            f"version {at} is inside a step "
            f"(versions {step[0].version}..{step[-1].version})"
        )
    raise StewardError(
        f"{problem}; fork at a version where a step ends: {_near(ends, at)}"
    )


def _near(versions: list[int], at: int) -> str:
    """Sorted ``versions`` as a short list: all of up to ten; of more, the
    first two, the last two and the two around ``at``, with … for the rest."""
    if len(versions) <= 10:
        return ", ".join(map(str, versions))
    n = len(versions)
    i = bisect.bisect_left(versions, at)
    shown = sorted({0, 1, n - 2, n - 1} | {j for j in (i - 1, i) if 0 <= j < n})
    parts: list[str] = []
    for before, j in itertools.pairwise([-1, *shown]):
        if j > before + 1:
            parts.append("…")
        parts.append(str(versions[j]))
    return ", ".join(parts)


async def cmd_export(env: Env, args: argparse.Namespace) -> int:
    async with _opened(env, create=False) as (log, _):
        records = await _records(log, args.id)
    lines = b"".join(events.recorded_to_json(r) + b"\n" for r in records)
    if args.output and args.output != "-":
        Path(args.output).write_bytes(lines)
        env.out(f"wrote {len(records)} events to {args.output}")
    else:
        out = sys.stdout.buffer
        rest = memoryview(lines)
        while rest:  # a write cut short by a reader going away returns a count
            rest = rest[out.write(rest) :]
        out.flush()
    return 0


async def cmd_rebuild(env: Env, args: argparse.Namespace) -> int:
    async with _opened(env) as (log, projector):
        head = await log.head()
        position = await projector.rebuild(log, _progress("projections", head))
    env.out(f"projections rebuilt through position {position}")
    return 0


PROGRESS_EVERY = 1.0
"""Seconds between progress lines of long work (on standard error)."""


def _progress(what: str, head: int) -> Callable[[int], None]:
    """A reporter of ``what`` reaching positions towards ``head``: a line on
    standard error at most every `PROGRESS_EVERY` seconds, none for quick work."""
    started = last = time.monotonic()

    def report(position: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < PROGRESS_EVERY or position >= head:
            return
        last = now
        rate = position / max(now - started, 1e-9)
        print(
            f"{what}: position {position:,} of {head:,} ({position / head:.0%}, "
            f"{rate:,.0f} events/s)",
            file=sys.stderr,
            flush=True,
        )

    return report


async def cmd_demo(env: Env, args: argparse.Namespace) -> int:
    _directory(env.db)
    lock = HostLock(env.db)
    if not lock.acquire():
        raise StewardError(lock.refusal())
    lock.release()
    workspace = env.db.parent / "demo-workspace"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{env.db}{suffix}").unlink(missing_ok=True)
    script = resources.files("steward") / "demo.yaml"
    with resources.as_file(script) as path:
        env.script = str(path)
        tools = replace(env.settings.tools, workspace=str(workspace))
        env.settings = replace(env.settings, tools=tools)
        created = _new_run(
            env,
            "Write a note, have a helper read it back, rest a moment, then report.",
            "default",
        )
        env.out(f"demo: run {created.run_id} (scripted model, workspace {workspace})")
        async with _opened(env) as (log, projector):
            status = await _see_run(
                env, log, projector, created.run_id, False, created=created
            )
    env.out("")
    await cmd_runs_show(env, argparse.Namespace(id=created.run_id, prompts=False))
    env.out("")
    async with _opened(env) as (log, _):
        streams = await log.streams("run.")
        worst = 0
        for stream in streams:
            records = await log.read(stream)
            mismatch = replay.verify(records)
            if mismatch is not None:
                env.out(f"{stream}:")
                worst = max(worst, _report(env, mismatch))
    if worst == 0:
        env.out(f"verify: ok ({len(streams)} runs re-decided from the log)")
    return worst or status


# -- parser ---------------------------------------------------------------------


def _backend_option(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--backend",
        choices=("sqlite", "jetstream"),
        default=default,
        help="the kind of event log, when --log does not say: sqlite uses "
        f"[log] url or .steward/steward.db, jetstream [log] url or {DEFAULT_NATS_URL}",
    )


def _port(text: str) -> int:
    try:
        return msgspec.convert(int(text), Port)
    except (ValueError, msgspec.ValidationError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port (0-65535)"
        ) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (0 or more)"
        )
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return value


def _metrics_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics at http://ADDRESS:PORT/metrics (default: "
        "[metrics] port; none unless set; 0 takes a free port)",
    )


_RUN_ID = "the run's id (`steward runs list` shows them)"

EXIT_STATUSES = (
    "exit status: 0 the run completed, 1 it failed or was cancelled, 2 bad input, "
    "3 replay --verify found a mismatch, 4 the run waits for a person "
    "(`steward runs approve|deny ID`), 130 interrupted (Ctrl-C)."
)
_FOREGROUND = (
    "The run is hosted here, or, when a `steward serve` hosts the log, handed "
    "to it and followed; Ctrl-C stops following and says how the run goes on."
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, as steward's others are
    (argparse prints its usage block first); its subparsers are of this class
    too."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_INPUT, f"{self.prog}: error: {message}; see `{self.prog} --help`\n"
        )


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="steward",
        description="An event-sourced actor runtime for LLM agents. Every step of "
        "every run is an event in one append-only log; runs can be replayed, "
        "verified and forked from it.",
        epilog=EXIT_STATUSES,
    )
    p.add_argument(
        "--config", help="settings file (default: ./steward.toml if present)"
    )
    p.add_argument(
        "--db",
        help="SQLite file of the embedded event log (default: [log] url, "
        ".steward/steward.db); with a nats:// log, of the projections. Its "
        "directory must exist (only .steward/ is created)",
    )
    p.add_argument(
        "--log",
        metavar="URL",
        help="the event log: a SQLite file (a path, sqlite:///abs/path or "
        "sqlite://rel/path; only commands that write create it), or "
        "nats://host:4222[,host2:4222]?stream=NAME&replicas=3 (or tls://) for "
        "JetStream (default: [log] url)",
    )
    _backend_option(p, None)
    p.add_argument(
        "--script", help="play the model's replies from this YAML/JSON script"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("serve", help="host the actors over the log until stopped")
    s.set_defaults(fn=cmd_serve)
    # also after the command, as in `steward serve --backend jetstream`
    _backend_option(s, argparse.SUPPRESS)
    _metrics_option(s)
    s = sub.add_parser(
        "worker",
        help="share a nats:// log's work (model and tool calls, timers) with "
        "other workers until stopped",
    )
    s.set_defaults(fn=cmd_worker)
    _backend_option(s, argparse.SUPPRESS)
    _metrics_option(s)

    s = sub.add_parser(
        "run",
        help="run TEXT to completion, streaming each step",
        description=f"Run TEXT to completion, printing each step. {_FOREGROUND}",
        epilog=EXIT_STATUSES,
    )
    s.add_argument("text", help="the run's input")
    s.add_argument("--profile", default="default", help="agent profile ([agents.NAME])")
    s.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    s.add_argument(
        "--stream",
        action="store_true",
        help="echo the model's text to stderr as it streams in",
    )
    s.set_defaults(fn=cmd_run)

    runs = sub.add_parser("runs", help="list, inspect, start, cancel or approve runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    s = rsub.add_parser("list", help="the newest runs")
    s.add_argument(
        "--status", choices=get_args(events.RunStatus), help="only runs in this status"
    )
    s.add_argument(
        "--limit", type=_positive, default=20, help="at most this many (default: 20)"
    )
    s.set_defaults(fn=cmd_runs_list)
    s = rsub.add_parser("show", help="a run's timeline: step, kind, duration, tokens")
    s.add_argument("id", help=_RUN_ID)
    s.add_argument(
        "--prompts", action="store_true", help="rebuild and print every prompt"
    )
    s.set_defaults(fn=cmd_runs_show)
    s = rsub.add_parser(
        "start",
        help="queue a new run for a running `serve` (or worker) to take",
        description="Record a new run, queued (status pending) until a host "
        "takes it, and print its id. Exits 0 once it is recorded; says so on "
        "standard error when no host took it within --wait seconds.",
    )
    s.add_argument("text", help="the run's input")
    s.add_argument("--profile", default="default", help="agent profile ([agents.NAME])")
    s.add_argument(
        "--wait",
        type=_seconds,
        default=3.0,
        metavar="SECONDS",
        help="how long to watch for a host to take the run (default: %(default)g; "
        "0 does not wait)",
    )
    s.set_defaults(fn=cmd_start)
    s = rsub.add_parser("cancel", help="cancel a run and its children")
    s.add_argument("id", help=_RUN_ID)
    s.add_argument(
        "--reason",
        default="cancelled by operator",
        help="recorded with the cancellation (default: %(default)s)",
    )
    s.set_defaults(fn=cmd_runs_cancel)
    s = rsub.add_parser("approve", help="approve the tool call a run waits on")
    s.add_argument("id", help=_RUN_ID)
    s.add_argument("--request", help="request id (default: the oldest waiting)")
    s.set_defaults(fn=cmd_runs_approve)
    s = rsub.add_parser("deny", help="deny the tool call a run waits on")
    s.add_argument("id", help=_RUN_ID)
    s.add_argument("--reason", required=True, help="why; the model sees it")
    s.add_argument("--request", help="request id (default: the oldest waiting)")
    s.set_defaults(fn=cmd_runs_deny)

    s = sub.add_parser("replay", help="rebuild a run's state from the log")
    s.add_argument("id", help=_RUN_ID)
    s.add_argument(
        "--verify",
        action="store_true",
        help="re-decide every recorded input; exit 3 at the first mismatch",
    )
    s.set_defaults(fn=cmd_replay)

    s = sub.add_parser(
        "fork",
        help="copy a run up to a version and continue it",
        description="Copy a run up to a version into a new run and continue "
        f"that, printing each step. {_FOREGROUND}",
        epilog=EXIT_STATUSES,
    )
    s.add_argument("id", help=_RUN_ID)
    s.add_argument(
        "--at",
        type=int,
        required=True,
        metavar="VERSION",
        help="the fork gets the run's events up to this version, where a step "
        "ends (a refusal lists those versions)",
    )
    s.add_argument("--no-run", action="store_true", help="only create the fork")
    s.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    s.set_defaults(fn=cmd_fork)

    ev = sub.add_parser("events", help="export a run's events")
    esub = ev.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    s = esub.add_parser("export", help="a run's events as JSON lines")
    s.add_argument("id", help=_RUN_ID)
    s.add_argument("-o", "--output", help="file to write (default: stdout)")
    s.set_defaults(fn=cmd_export)

    pr = sub.add_parser("projections", help="manage the read models")
    psub = pr.add_subparsers(
        dest="projections_command", required=True, metavar="ACTION"
    )
    s = psub.add_parser(
        "rebuild",
        help="drop the read models and replay the whole log",
        description="Drop the read models and replay the whole log into them. "
        "On a long log, prints its position each second on standard error.",
    )
    s.set_defaults(fn=cmd_rebuild)

    s = sub.add_parser(
        "demo", help="a scripted run with a tool, a subagent and a sleep"
    )
    s.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = load_settings(args.config)
        env = _env(settings, args)
        fn: Callable[[Env, argparse.Namespace], Coroutine[Any, Any, int]] = args.fn
        code = _run(fn(env, args))
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except StewardError as e:
        print(f"steward: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `steward ... | head`: end quietly, as `yes | head` does. Output still
        # buffered would fail again at exit, so it goes to devnull (the recipe
        # of Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # not on every platform
        return asyncio.run(coro)
    return uvloop.run(coro)


if __name__ == "__main__":
    raise SystemExit(main())
