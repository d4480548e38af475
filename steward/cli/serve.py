"""The long-running hosts: `serve` and `worker`, with their metrics endpoint
and the inbound services of a NATS log.

SIGTERM or SIGINT stops one gracefully (Klaw's shutdown): it takes no more
inbound messages, lets the model and tool calls in flight finish and
records their answers (up to `SHUTDOWN_SECONDS`; a second signal stops at
once), then closes. Nothing accepted is lost either way: what is not done
is in the log, and the next host carries it out.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from wsgiref.simple_server import WSGIServer

import prometheus_client

from steward import logs
from steward.bus import EventLog, JetStreamEventLog
from steward.bus.jetstream.checkpoints import Checkpoints
from steward.bus.jetstream.inputs import Inputs
from steward.bus.jetstream.members import Membership
from steward.bus.jetstream.outbound import Told
from steward.bus.jetstream.reads import RemoteReads, answer_reads
from steward.cli.console import exposed, served
from steward.cli.env import Env, ensure_place, opened, progress
from steward.cli.hosting import checked_provider, new_host, worker_id
from steward.cli.migrate import unpartitioned
from steward.console.app import Console
from steward.effects.llm import Provider
from steward.effects.tools import mcp
from steward.egress import Egress
from steward.errors import ConfigError, StewardError
from steward.host import Host
from steward.hostlock import HostLock
from steward.ingress import Ingress
from steward.metrics import HOST as METRICS
from steward.projections.metrics import endpoint_registry
from steward.projections.store import Projector

log_ = logging.getLogger("steward.serve")

SHUTDOWN_SECONDS = 60.0
"""How long a stopping host waits for the calls in flight."""

Closer = Callable[[], Awaitable[None]]


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
    # JSON lines for a log collector; lines for a person on a terminal: at
    # info (what starts, what is held, each actor's end), -v debug
    level = logging.DEBUG if args.verbose else logging.INFO
    logs.configure(level, secret_names=mcp.variables(env.settings.mcp))
    provider = checked_provider(env)  # bad settings fail before the log is made
    console = env.settings.console
    if services and console.serve:
        exposed(console.token, console.address)
    lock = None
    if not env.distributed:
        ensure_place(env.db)
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
    async with opened(env) as (log, projector):
        membership = None
        if isinstance(log, JetStreamEventLog):
            membership = Membership(
                log,
                worker_id(),
                role="serve" if services else "worker",
                lease=env.settings.log.lease_seconds,
            )
        worker = membership is not None and not services
        host = new_host(
            env,
            log,
            # a worker builds no projections: it keeps what it waits for,
            # and its tools read them by asking `serve`
            None if worker else projector,
            provider=provider,
            membership=membership,
            worker_id=membership.worker if membership is not None else None,
            reads=RemoteReads(log) if worker else None,
            inputs=Inputs(log) if membership is not None else None,
            checkpoints=Checkpoints(log) if worker else None,
        )
        stop, again = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(
                sig, lambda: again.set() if stop.is_set() else stop.set()
            )
        metrics = _metrics_endpoint(env, args.metrics_port)
        try:
            egress = None
            if isinstance(log, JetStreamEventLog):
                # before the host joins: its first share is caught up too
                told = Told(log)
                egress = Egress(log.connection, host, env.settings.outbound, told=told)
                await egress.start()
            await host.start(progress("catching up", await log.head()))
            intake, outlets = await _start_services(env, log, host, egress)
            if isinstance(log, JetStreamEventLog):  # `host_of` finds it
                command = "serve" if services else f"worker {host.worker_id}"
                await log.advertise(f"steward {command}, pid {os.getpid()}")
            role = "serving" if services else f"working as {host.worker_id} on"
            env.out(f"steward {role} {env.log_url} (ctrl-c to stop)")
            sys.stdout.flush()  # seen at once through a pipe (`serve | tee`)
            log_.info(
                "%s started on %s, pid %d%s%s",
                "serve" if services else f"worker {host.worker_id}",
                env.log_url,
                os.getpid(),
                "" if membership is None else f", holding {_held(membership.held)}",
                "" if metrics is None else f", metrics on port {metrics.server_port}",
            )
            if isinstance(log, JetStreamEventLog) and not log.partitions:
                log_.warning("%s", unpartitioned(log))
            gauges = asyncio.create_task(
                _gauges(host, None if worker else projector, membership)
            )
            page = None
            if services and env.settings.console.serve:
                page = _console(env, log, projector, host)
            await stop.wait()
            gauges.cancel()
            if page is not None:
                await page()
            for close in intake:
                await close()
            await drain(env, host, again)
            for close in outlets:
                await close()
            await host.stop()
        finally:
            if metrics is not None:
                metrics.shutdown()
                metrics.server_close()
    return 0


def _console(env: Env, log: EventLog, projector: Projector, host: Host) -> Closer:
    """The operator console of ``[console] serve``, over this serve's log,
    projections and host; what stops it."""
    config = env.settings.console
    console = Console(
        log,
        projector,
        env.kinds,
        token=config.token,
        _host=host,
        keeps_current=False,  # the host applies every record it follows
    )
    server = served(env, console, config.address, config.port)
    serving = asyncio.create_task(server.serve(sockets=[server.listening]))

    async def close() -> None:
        server.should_exit = True
        await serving

    return close


def _held(partitions: frozenset[int]) -> str:
    """``partitions`` as a person reads them: ``partitions 0-4, 9``."""
    if not partitions:
        return "no partitions"
    ranges: list[list[int]] = []
    for p in sorted(partitions):
        if ranges and p == ranges[-1][1] + 1:
            ranges[-1][1] = p
        else:
            ranges.append([p, p])
    said = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
    return f"partition{'s' if len(partitions) > 1 else ''} {said}"


GAUGE_SECONDS = 2.0
"""How often the gauges read from the log and the members are refreshed."""


async def _gauges(
    host: Host, projector: Projector | None, membership: Membership | None
) -> None:
    """Keep the gauges a scrape reads (`steward.metrics.HostMetrics`) fresh:
    the timers armed, the projections' lag behind the log, the live members
    by role and the partitions this one holds."""
    while True:
        try:
            METRICS.timers = len(host.timers)
            if projector is not None:
                head = await host.log.head()
                METRICS.projection_lag = max(0, head - projector.position)
            if membership is not None:
                members = await membership.members()
                METRICS.members = dict(Counter(m.role for m in members))
                METRICS.partitions_held = len(membership.held)
        except Exception as e:  # a lost connection: the next round tries again
            log_.debug("refreshing the gauges failed: %s", e)
        await asyncio.sleep(GAUGE_SECONDS)


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


async def drain(env: Env, host: Host, abandon: asyncio.Event) -> None:
    """Let the calls in flight finish (`Host.drain`), saying so when any are."""
    waiting = host.in_flight()
    if waiting:
        env.out(
            f"stopping: letting what is in flight finish ({waiting} calls and "
            f"deliveries; up to {SHUTDOWN_SECONDS:g}s, a second ctrl-c stops at once)"
        )
        sys.stdout.flush()
    if not await host.drain(SHUTDOWN_SECONDS, abandon):
        env.out(
            f"stopped with {host.in_flight()} calls or deliveries in flight: they "
            "are in the log, and the next host carries them out"
        )


async def _start_services(
    env: Env, log: EventLog, host: Host, egress: Egress | None
) -> tuple[list[Closer], list[Closer]]:
    """On a NATS log, in `serve` and every worker alike: the egress, and
    ingress for the configured channels (one queue group over every host,
    so services are answered while any host runs); `serve` answers the
    workers' reads of its projections too.

    Returns the closers of what takes messages in (closed first) and of
    what sends them out (closed once the calls in flight are answered).
    """
    if egress is None:
        if env.settings.channels:
            raise ConfigError(
                "settings",
                "channels",
                "inbound channels need a nats:// event log ([log] url or --log)",
            )
        return [], []
    outlets: list[Closer] = [egress.close]
    projector = host.projector
    if projector is not None:
        # the workers' tools read the projections this serve keeps
        outlets.append(await answer_reads(log, projector))
    intake: list[Closer] = []
    if env.settings.channels:
        for profile in env.settings.channels.values():
            env.settings.profile(profile)  # an unknown profile fails here, named
        ingress = Ingress(
            egress.nc,
            host,
            env.settings,
            env.settings.channels,
            reads=projector if projector is not None else RemoteReads(log),
            replicas=getattr(log, "replicas", 1),
        )
        await ingress.start()
        intake.append(ingress.stop)
        env.out(f"inbound channels: {', '.join(sorted(env.settings.channels))}")
    return intake, outlets
