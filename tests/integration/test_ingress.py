"""Ingress and egress over a real nats-server, a real SQLite log and a host."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats_server import NatsServer
from support import act

from steward import events
from steward.actors.llm import ScriptedProvider
from steward.actors.run_effects import run_stream
from steward.bus import SqliteEventLog
from steward.config.settings import AgentProfile, RunConfig, Settings
from steward.host import Host
from steward.ingress import (
    DEADLETTER_STREAM,
    Egress,
    Ingress,
    inbound_schema_json,
    message_run_id,
)

SCHEMA = Path(__file__).parents[2] / "docs" / "inbound-message.v1.schema.json"
SETTINGS = Settings(
    run=RunConfig(planning_gate=False),
    agents={"default": AgentProfile(), "helper": AgentProfile()},
)
CHANNELS = {"web": "default", "ops": "helper", "orphan": "missing"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    running = NatsServer(tmp_path / "nats")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Setup:
    host: Host
    log: SqliteEventLog
    client: Any
    ingress: Ingress

    async def request(
        self, channel: str, payload: Any, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        msg = await self.client.request(
            f"steward.inbound.{channel}", data, timeout=5, headers=headers
        )
        reply: dict[str, Any] = json.loads(msg.data)
        return reply


@pytest.fixture
async def setup(
    server: NatsServer, log: SqliteEventLog, make_host: Any
) -> AsyncIterator[Setup]:
    # A first message with nothing done yet answers the user and ends the run
    # (Clifford's rule), so each run is: message "hi", completed "hi".
    provider = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    host = await make_host(provider)
    steward_nc = await nats.connect(server.url)
    client = await nats.connect(server.url)
    ingress = Ingress(steward_nc, host, SETTINGS, CHANNELS, max_bytes=1024)
    egress = Egress(steward_nc, host)
    try:
        egress.start()
        await ingress.start()
        await steward_nc.flush()
        yield Setup(host, log, client, ingress)
    finally:
        await ingress.stop()
        await egress.close()
        await client.close()
        await steward_nc.close()


async def wait_done(host: Host, run_id: str, timeout: float = 10.0) -> Any:
    """Poll the run's state until it is over."""
    stream = run_stream(run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        host._cache.pop(stream, None)
        state, _ = await host.state(stream)
        if state.status in events.TERMINAL:
            return state
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run_id} stayed {state.status}")
        await asyncio.sleep(0.01)


async def collect(sub: Any, count: int) -> list[Any]:
    return [await sub.next_msg(timeout=5) for _ in range(count)]


def test_the_committed_schema_is_the_generated_one() -> None:
    """docs/inbound-message.v1.schema.json is what `inbound_schema_json` says."""
    assert SCHEMA.read_text() == inbound_schema_json(), (
        "regenerate it: python -m steward.ingress > docs/inbound-message.v1.schema.json"
    )


async def test_a_message_starts_a_run_that_replies_on_its_channel(
    setup: Setup,
) -> None:
    """A valid message starts a run; updates and outbound replies are published."""
    outbound = await setup.client.subscribe("steward.outbound.web")
    updates = await setup.client.subscribe("steward.runs.*.updates")
    await setup.client.flush()

    reply = await setup.request(
        "web", {"text": "say hi", "user_id": "u1", "context_id": "c1"}
    )

    assert reply["ok"] is True and reply["duplicate"] is False
    run_id = reply["run_id"]
    state = await wait_done(setup.host, run_id)
    assert state.status == "completed" and state.output == "hi"
    created = state.created
    assert (created.channel_id, created.user_id, created.context_id) == (
        "web",
        "u1",
        "c1",
    )
    assert created.profile == "default" and created.input_text == "say hi"

    said = [json.loads(m.data) for m in await collect(outbound, 2)]
    assert said == [
        {"run_id": run_id, "channel": "web", "type": "message", "text": "hi"},
        {"run_id": run_id, "channel": "web", "type": "completed", "text": "hi"},
    ]
    records = await setup.log.read(run_stream(run_id))
    got = await collect(updates, len(records))
    assert {m.subject for m in got} == {f"steward.runs.{run_id}.updates"}
    seen = [json.loads(m.data) for m in got]
    assert [(u["run_id"], u["version"], u["type"]) for u in seen] == [
        (run_id, r.version, events.type_name(r.event)) for r in records
    ]
    assert seen[0]["summary"] == "say hi"


async def test_the_same_message_id_starts_one_run(setup: Setup) -> None:
    """A redelivered message_id answers with the same run and starts no other."""
    payload = {"text": "once", "message_id": "msg-1"}

    first = await setup.request("web", payload)
    second = await setup.request("web", payload)
    other_channel = await setup.request("ops", payload)

    run_id = message_run_id("web", "msg-1")
    assert first == {"ok": True, "run_id": run_id, "duplicate": False}
    assert second == {"ok": True, "run_id": run_id, "duplicate": True}
    assert other_channel["run_id"] != run_id
    await wait_done(setup.host, run_id)
    await wait_done(setup.host, other_channel["run_id"])
    created = [
        r
        for r in await setup.log.read(run_stream(run_id))
        if isinstance(r.event, events.RunCreated)
    ]
    assert len(created) == 1
    assert sorted(await setup.log.streams("run.")) == sorted(
        [run_stream(run_id), run_stream(other_channel["run_id"])]
    )


async def test_msgpack_is_accepted_with_its_content_type(setup: Setup) -> None:
    """A msgpack payload with Content-Type application/msgpack starts a run."""
    data = msgspec.msgpack.encode({"text": "packed", "message_id": "p1"})

    reply = await setup.request(
        "web", data, headers={"Content-Type": "application/msgpack"}
    )

    assert reply["ok"] is True, reply
    state = await wait_done(setup.host, reply["run_id"])
    assert state.created.input_text == "packed"


BAD = [
    pytest.param("web", b"{not json", None, "not_json", "not valid JSON", id="json"),
    pytest.param(
        "web",
        b"\xc1",
        {"Content-Type": "application/msgpack"},
        "not_msgpack",
        "not valid msgpack",
        id="msgpack",
    ),
    pytest.param(
        "web",
        b'{"user_id": "u1"}',
        None,
        "bad_schema",
        "missing required field `text`",
        id="missing-text",
    ),
    pytest.param(
        "web",
        b'{"text": 7}',
        None,
        "bad_schema",
        r"got `int` - at `\$.text`",
        id="text-type",
    ),
    pytest.param(
        "web", b'{"text": ""}', None, "bad_schema", r"at `\$.text`", id="empty-text"
    ),
    pytest.param(
        "web",
        b'{"text": "hi", "version": 2}',
        None,
        "bad_schema",
        r"at `\$.version`",
        id="version",
    ),
    pytest.param(
        "web",
        json.dumps({"text": "x" * 2000}).encode(),
        None,
        "too_large",
        "more than the 1024",
        id="too-large",
    ),
    pytest.param(
        "nowhere",
        b'{"text": "hi"}',
        None,
        "unknown_channel",
        "channel 'nowhere' is not configured",
        id="unknown-channel",
    ),
    pytest.param(
        "orphan",
        b'{"text": "hi"}',
        None,
        "no_agent",
        "agent profile 'missing'",
        id="no-agent",
    ),
]


@pytest.mark.parametrize(("channel", "data", "headers", "code", "message"), BAD)
async def test_a_bad_message_gets_an_error_and_a_dead_letter(
    setup: Setup,
    channel: str,
    data: bytes,
    headers: dict[str, str] | None,
    code: str,
    message: str,
) -> None:
    """A refused message is answered with its code and kept as a dead letter."""
    dead = await setup.client.subscribe("steward.deadletter.inbound.>")
    await setup.client.flush()

    reply = await setup.request(channel, data, headers)

    assert reply["ok"] is False
    assert reply["error"]["code"] == code
    assert re.search(message, reply["error"]["message"]), reply
    letter = await dead.next_msg(timeout=5)
    assert letter.subject == f"steward.deadletter.inbound.{channel}"
    assert letter.data == data
    assert letter.headers["Steward-Error-Code"] == code
    assert re.search(message, letter.headers["Steward-Error"])
    kept = await setup.client.jetstream().get_last_msg(
        DEADLETTER_STREAM, letter.subject
    )
    assert (kept.data, kept.headers) == (letter.data, letter.headers)
    assert await setup.log.streams("run.") == []  # nothing half-created

    good = await setup.request("web", {"text": "after the bad one"})
    assert good["ok"] is True
    await wait_done(setup.host, good["run_id"])


async def test_a_message_without_reply_subject_is_still_dead_lettered(
    setup: Setup,
) -> None:
    """A fire-and-forget bad message is kept though nobody listens for it."""
    await setup.client.publish("steward.inbound.web", b"nope")
    await setup.client.flush()

    js = setup.client.jetstream()
    for _ in range(100):
        info = await js.stream_info(DEADLETTER_STREAM)
        if info.state.messages:
            break
        await asyncio.sleep(0.05)
    letter = await js.get_last_msg(DEADLETTER_STREAM, "steward.deadletter.inbound.web")
    assert letter.data == b"nope"
    assert letter.headers["Steward-Error-Code"] == "not_json"


async def test_a_lone_surrogate_in_a_message_is_recorded_replaced(
    setup: Setup,
) -> None:
    """Valid JSON with an escaped lone surrogate starts its run, the surrogate
    recorded as U+FFFD; a message that is not JSON is still refused."""
    data = b'{"text": "odd \\ud800 text", "message_id": "lone"}'
    reply = await setup.request("web", data)
    assert reply["ok"] is True, reply
    state = await wait_done(setup.host, reply["run_id"])
    assert state.created.input_text == "odd \ufffd text"
    refused = await setup.request("web", b'{"text": "cut \\ud800')
    assert refused["ok"] is False and refused["error"]["code"] == "not_json"
