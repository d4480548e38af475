"""Fixtures for the EventLog contract suite: every test runs once per backend.

A backend joins the suite by adding its name to ``BACKENDS`` and an opener to
``_OPENERS``; the tests themselves stay unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from nats_server import NatsServer

from steward.bus import EventLog, JetStreamEventLog, SqliteEventLog

BACKENDS = ["sqlite", "jetstream"]

LogFactory = Callable[[], Awaitable[EventLog]]


def _sqlite_opener(request: pytest.FixtureRequest) -> LogFactory:
    path: Path = request.getfixturevalue("tmp_path") / "log.db"

    async def open_sqlite() -> EventLog:
        return await SqliteEventLog.open(path)

    return open_sqlite


_js_logs = itertools.count(1)


def _jetstream_opener(request: pytest.FixtureRequest) -> LogFactory:
    # A stream (and subject prefix: streams may not share subjects) of its own
    # per test, so every test starts from an empty log.
    server: NatsServer = request.getfixturevalue("nats_server")
    n = next(_js_logs)

    async def open_jetstream() -> EventLog:
        return await JetStreamEventLog.open(
            server.url, stream=f"CONTRACT_{n}", prefix=f"contract.t{n}"
        )

    return open_jetstream


_OPENERS: dict[str, Callable[[pytest.FixtureRequest], LogFactory]] = {
    "sqlite": _sqlite_opener,
    "jetstream": _jetstream_opener,
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    name: str = request.param
    return name


@pytest.fixture
async def make_log(
    backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[LogFactory]:
    """Open handles on one fresh log of the backend (as separate processes would).

    Every handle opened is closed when the test ends.
    """
    open_handle = _OPENERS[backend](request)
    opened: list[EventLog] = []

    async def make() -> EventLog:
        handle = await open_handle()
        opened.append(handle)
        return handle

    try:
        yield make
    finally:
        for handle in reversed(opened):
            await handle.close()


@pytest.fixture
async def log(make_log: LogFactory) -> EventLog:
    """A fresh, empty log of the backend under test."""
    return await make_log()
