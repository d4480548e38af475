"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from steward.actors.llm import ScriptedProvider
from steward.actors.tools import ToolRegistry
from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.host import Host
from steward.projections.store import Projector


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteEventLog]:
    opened = await SqliteEventLog.open(tmp_path / "log.db")
    try:
        yield opened
    finally:
        await opened.close()


HostFactory = Callable[..., Any]


@pytest.fixture
async def make_host(
    tmp_path: Path, log: SqliteEventLog, clock: FakeClock
) -> AsyncIterator[HostFactory]:
    """Build started hosts over the test's log; all are stopped at the end."""
    made: list[tuple[Host, Projector]] = []
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    async def make(provider: Any, tools: ToolRegistry | None = None, **kw: Any) -> Host:
        projector = await Projector.open(tmp_path / "log.db")
        host = Host(
            log,
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
