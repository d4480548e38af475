"""The JetStream log's inbox: the nats-py internals `InboxClient` relies on, and
the public path the log falls back to without it.

The first two tests fail when a nats-py release changes what `InboxClient`
overrides; they say what to do. Every other test talks to a real nats-server.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats
import nats.aio.client
import nats.aio.msg
import nats.protocol.parser
import pytest
from nats_server import NatsServer

from steward import events
from steward.actors.run import events as run_events
from steward.bus import JetStreamEventLog
from steward.bus.jetstream.client import InboxClient
from steward.bus.jetstream.inbox import Msg
from steward.kinds import KINDS

Opener = Callable[..., Awaitable[JetStreamEventLog]]

_WHAT_TO_DO = (
    "so steward.bus.jetstream.client.InboxClient no longer takes over the "
    "log's inbox and JetStream reads take nats-py's slower public path; "
    "update InboxClient to this nats-py (see its docstring), or remove it if "
    "`python -m benchmarks --only log` shows the public path is now as fast"
)


def note(n: int) -> events.Event:
    """A small event told apart by ``n``."""
    return run_events.NoteRecorded(category="test", content=str(n))


@pytest.fixture
async def open_js(nats_server: NatsServer) -> AsyncIterator[Opener]:
    """Open handles on one fresh stream of the session's server; all closed after."""
    opened: list[JetStreamEventLog] = []

    async def make(**kw: Any) -> JetStreamEventLog:
        n = len(opened) + 1
        kw.setdefault("stream", f"INBOX_{id(opened)}_{n}")
        kw.setdefault("prefix", f"inbox.t{id(opened)}.{n}")
        log = await JetStreamEventLog.open(nats_server.url, **kw, union=KINDS.union)
        opened.append(log)
        return log

    try:
        yield make
    finally:
        for log in reversed(opened):
            await log.close()


def test_nats_py_has_the_process_msg_the_inbox_client_overrides() -> None:
    """nats-py's Client._process_msg still has the signature InboxClient overrides."""
    method = nats.aio.client.Client._process_msg
    assert InboxClient.fits, (
        f"nats-py {nats.aio.client.__version__} changed its private "
        f"Client._process_msg (now {inspect.signature(method)}), {_WHAT_TO_DO}"
    )


def test_nats_py_s_parser_still_calls_process_msg() -> None:
    """nats-py's protocol parser hands every message to Client._process_msg."""
    source = inspect.getsource(nats.protocol.parser.Parser)
    assert "._process_msg(sid, subject, reply, payload, hdr)" in source, (
        f"nats-py {nats.aio.client.__version__}'s protocol parser no longer "
        f"calls Client._process_msg as it did, {_WHAT_TO_DO}"
    )


async def test_the_inbox_client_takes_the_log_s_messages(open_js: Opener) -> None:
    """With this nats-py, the inbox's messages reach the log without nats-py's queue."""
    log = await open_js()
    await log.append("run.r1", [note(1), note(2)], 0)
    assert [r.event for r in await log.read("run.r1")] == [note(1), note(2)]
    assert isinstance(log.connection, InboxClient)
    assert log.connection.stats["in_msgs"] >= 3  # an ack, a message, a status
    assert log._mux.delivered == 0, (
        "the log's inbox messages went through nats-py's subscription queue, "
        + _WHAT_TO_DO
    )


async def test_without_the_inbox_client_the_log_works_through_nats_py(
    open_js: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When InboxClient does not fit nats-py, the log reads, appends and follows
    through nats-py's public subscription callback."""
    monkeypatch.setattr(InboxClient, "fits", False)
    log = await open_js(heartbeat=0.2)
    assert not isinstance(log.connection, InboxClient)
    assert await log.version("run.r1") == 0  # a 404 status answers
    first = await log.append("run.r1", [note(1), note(2)], 0)
    await log.append("run.r2", [note(3)], 0)
    assert [r.event for r in await log.read("run.r1")] == [note(1), note(2)]
    assert [r.event for r in await log.read_all()] == [note(1), note(2), note(3)]
    assert await log.streams("run.") == ["run.r1", "run.r2"]
    assert await log.head() == (await log.read_all())[-1].position

    followed = log.subscribe(first.last_position)
    assert (await anext(followed)).event == note(3)
    live = asyncio.ensure_future(anext(followed))
    seen = log._mux.delivered
    deadline = asyncio.get_running_loop().time() + 10
    while log._mux.delivered == seen:  # a heartbeat (a status message) comes
        assert asyncio.get_running_loop().time() < deadline, "no heartbeat came"
        await asyncio.sleep(0.05)
    await log.append("run.r1", [note(4)], 2)
    assert (await asyncio.wait_for(live, 10)).event == note(4)
    await followed.aclose()
    assert log._mux.delivered > 0


def test_a_status_message_from_nats_py_reads_as_it_came() -> None:
    """A message nats-py parsed keeps its status, description and headers."""
    parsed = nats.aio.msg.Msg(
        _client=None,  # type: ignore[arg-type]
        subject="_INBOX.x.7",
        reply="",
        data=b"",
        headers={
            "Status": "408",
            "Description": "Request Timeout",
            "Nats-Pending-Messages": "500",
        },
    )
    msg = Msg.of(parsed)
    assert (msg.subject, msg.status) == ("_INBOX.x.7", "408")
    assert msg.header(b"Nats-Pending-Messages") == "500"
    assert msg.number(b"Nats-Pending-Messages") == 500
    assert msg.header(b"Status") is None
    assert msg.describe() == "408 Request Timeout"


def test_a_stream_message_from_nats_py_reads_as_it_came() -> None:
    """A message of the stream nats-py parsed has no status and keeps its headers."""
    parsed = nats.aio.msg.Msg(
        _client=None,  # type: ignore[arg-type]
        subject="steward.ev.run.r1",
        reply="$JS.ACK.S.c.1.7.1.0.0",
        data=b"\x97",
        headers={"Nats-Sequence": "7", "Nats-Subject": "steward.ev.run.r1"},
    )
    msg = Msg.of(parsed)
    assert msg.status is None
    assert msg.number(b"Nats-Sequence") == 7
    assert msg.header(b"Nats-Subject") == "steward.ev.run.r1"
    assert (msg.reply, msg.data) == ("$JS.ACK.S.c.1.7.1.0.0", b"\x97")
