"""Fixtures shared by every test directory."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats_server import NatsServer

from steward.actors.kind import Kinds
from steward.bus import EventLog, JetStreamEventLog, SqliteEventLog
from steward.clock import FakeClock
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS
from steward.projections.store import Projector


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one folder the console's browser tests save their screenshots
    in (printed: run with ``-s`` to see where)."""
    folder = tmp_path_factory.mktemp("console-screenshots")
    print(f"\nscreenshots of the console: {folder}")
    return folder


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server (JetStream, temporary store) for the whole session."""
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server of the test's own (JetStream), for what must not share one."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop()


_streams = itertools.count(1)


@pytest.fixture
def kinds() -> Kinds:
    """The actor kinds the test's log, hosts and projections serve:
    steward's; a module that runs a kind of its own overrides this fixture
    (``support.with_kinds``)."""
    return KINDS


@pytest.fixture(params=["sqlite", "jetstream"])
async def open_log_handle(
    request: pytest.FixtureRequest, tmp_path: Path, kinds: Kinds
) -> AsyncIterator[Callable[[], Awaitable[EventLog]]]:
    """Opens handles on one fresh log of each backend, as processes would.

    Every test that uses it (or ``log``) runs once per backend: the contract
    suite and the host tests. A stream (and subject prefix: streams may not
    share subjects) of its own per test, so every test starts from an empty
    log; every handle opened is closed when the test ends.
    """
    opened: list[EventLog] = []
    if request.param == "sqlite":

        async def open_one() -> EventLog:
            return await SqliteEventLog.open(tmp_path / "log.db", union=kinds.union)

    else:
        server: NatsServer = request.getfixturevalue("nats_server")
        n = next(_streams)

        async def open_one() -> EventLog:
            return await JetStreamEventLog.open(
                server.url, stream=f"HOST_{n}", prefix=f"host.t{n}", union=kinds.union
            )

    async def track() -> EventLog:
        handle = await open_one()
        opened.append(handle)
        return handle

    try:
        yield track
    finally:
        for handle in reversed(opened):
            await handle.close()


@pytest.fixture
async def log(open_log_handle: Callable[[], Awaitable[EventLog]]) -> EventLog:
    """A fresh event log: the host tests run on both backends."""
    return await open_log_handle()


HostFactory = Callable[..., Any]


@pytest.fixture
async def make_host(
    tmp_path: Path, log: EventLog, clock: FakeClock, kinds: Kinds
) -> AsyncIterator[HostFactory]:
    """Build started hosts over the test's log; all are stopped at the end."""
    made: list[tuple[Host, Projector]] = []
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    async def make(provider: Any, tools: ToolRegistry | None = None, **kw: Any) -> Host:
        projector = await Projector.open(tmp_path / "log.db", kinds)
        host = Host(
            log,
            kinds=kinds,
            provider=provider
            if not isinstance(provider, list)
            else ScriptedProvider(provider),
            tools=tools or ToolRegistry.with_builtins(),
            workspace=workspace,
            clock=kw.pop("clock", clock),
            projector=projector,
            **kw,
        )
        made.append((host, projector))
        await host.start()
        return host

    try:
        yield make
    finally:
        for host, projector in made:
            await host.stop()
            await projector.close()
