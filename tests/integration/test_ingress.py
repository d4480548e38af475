"""Ingress and egress over a real nats-server, a real SQLite log and a host:
inbound messages go to their chat's session, whose answers go out on the
channel (Klaw's ``MessageProcessorIntegrationTest``, with a scripted model).

The host's clock is a `FakeClock`: a message waits for its debounce until the
test moves the clock past it (`past_debounce`), and the debounce is longer
than any wait here, so a reply can only come from the fake clock's time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats_server import NatsServer
from support import SPAWN_SCOUT, act

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.actors.session import events as session_events
from steward.actors.session.chats import answer
from steward.actors.session.state import session_stream
from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.config.settings import AgentProfile, RunConfig, SessionConfig, Settings
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.egress import Egress
from steward.host import Host
from steward.ingress import (
    DEADLETTER_STREAM,
    Ingress,
    inbound_schema_json,
)
from steward.kinds import KINDS, kind_of

SCHEMA = Path(__file__).parents[2] / "docs" / "inbound-message.v1.schema.json"
DEBOUNCE = 60.0
"""Seconds a message waits for its turn: longer than any wait of these tests
(`answered` gives up after 10 s), so only the fake clock can make it pass."""
SETTINGS = Settings(
    run=RunConfig(planning_gate=False),
    agents={"default": AgentProfile(), "helper": AgentProfile()},
    session=SessionConfig(debounce_ms=int(DEBOUNCE * 1000), max_message_chars=500),
)
CHANNELS = {"web": "default", "ops": "helper", "orphan": "missing"}


@pytest.fixture
def server(nats: NatsServer) -> NatsServer:
    """A nats-server of the test's own (conftest's ``nats``)."""
    return nats


@dataclass
class Setup:
    host: Host
    log: SqliteEventLog
    client: Any
    ingress: Ingress
    clock: FakeClock

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
    server: NatsServer, log: SqliteEventLog, make_host: Any, clock: FakeClock
) -> AsyncIterator[Setup]:
    # A first message with nothing done yet answers the user and ends the run
    # (Clifford's rule), so each run is: message "hi", completed "hi".
    provider = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    async with serving(server, log, make_host, clock, provider) as running:
        yield running


@contextlib.asynccontextmanager
async def serving(
    server: NatsServer,
    log: SqliteEventLog,
    make_host: Any,
    clock: FakeClock,
    provider: Any,
    tools: ToolRegistry | None = None,
) -> AsyncIterator[Setup]:
    """A host answering with ``provider`` on the fake ``clock`` (so the
    debounce waits until the test moves it), its ingress and egress."""
    host = await make_host(provider, tools=tools, clock=clock)
    steward_nc = await nats.connect(server.url)
    client = await nats.connect(server.url)
    ingress = Ingress(steward_nc, host, SETTINGS, CHANNELS, max_bytes=1024)
    egress = Egress(steward_nc, host)
    try:
        await egress.start()
        await ingress.start()
        await steward_nc.flush()
        yield Setup(host, log, client, ingress, clock)
    finally:
        await ingress.stop()
        await egress.close()
        await client.close()
        await steward_nc.close()


async def past_debounce(setup: Setup, *replies: dict[str, Any]) -> None:
    """The messages ``replies`` acknowledged wait for their debounce: once
    the host has routed them (their timers armed on the fake clock), each
    session holds its message's `DebounceArmed` and no turn has taken the
    message while the clock stood still. Then the clock moves past the
    debounce."""
    assert await setup.host.settle(timeout=5.0)
    for reply in replies:
        session = await setup.log.read(session_stream(reply["session_id"]))
        assert any(isinstance(r.event, session_events.DebounceArmed) for r in session)
        assert not [
            r
            for r in session
            if isinstance(r.event, session_events.TurnStarted)
            and reply["message_id"] in r.event.message_ids
        ], "a turn started before the clock moved past the debounce"
    setup.clock.advance(DEBOUNCE + 0.1)


async def answered(setup: Setup, reply: dict[str, Any]) -> str:
    """The session's answer to the message ``reply`` acknowledged."""
    stream = session_stream(reply["session_id"])
    text = await asyncio.wait_for(
        answer(setup.log, stream, reply["message_id"], asyncio.Event()), 10
    )
    assert text is not None
    return text


async def wait_done(host: Host, run_id: str, timeout: float = 10.0) -> Any:
    """Poll the run's state, as its log records it, until it is over."""
    stream = run_stream(run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = kind_of(stream).fold(r.event for r in await host.log.read(stream))
        if state.status in run_events.TERMINAL:
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


async def test_simple_message_processed_end_to_end(setup: Setup) -> None:
    """A valid message goes to its chat's session (opened with the channel's
    profile); the turn's run answers it, and the reply goes out on the
    channel; the run's updates are published, its messages are not (it
    answers the session)."""
    outbound = await setup.client.subscribe("steward.outbound.web")
    updates = await setup.client.subscribe("steward.runs.*.updates")
    await setup.client.flush()

    reply = await setup.request(
        "web", {"text": "say hi", "user_id": "u1", "context_id": "c1"}
    )

    assert reply["ok"] is True and reply["duplicate"] is False
    assert reply["session_id"] == "web:c1"
    await past_debounce(setup, reply)
    assert await answered(setup, reply) == "hi"
    said = json.loads((await outbound.next_msg(timeout=5)).data)
    assert said == {
        "session_id": "web:c1",
        "channel": "web",
        "chat_id": "c1",
        "type": "reply",
        "text": "hi",
        "run_id": "web:c1-t1",
        "status": "completed",
    }
    state = await wait_done(setup.host, "web:c1-t1")
    created = state.created
    assert (created.channel_id, created.user_id, created.context_id) == (
        "web",
        "u1",
        "web:c1",
    )
    assert created.input_text == "say hi" and created.reply_to == "session.web:c1"
    records = await setup.log.read(run_stream("web:c1-t1"))
    got = await collect(updates, len(records))
    assert {m.subject for m in got} == {"steward.runs.web:c1-t1.updates"}
    seen = [json.loads(m.data) for m in got]
    assert [(u["run_id"], u["version"], u["type"]) for u in seen] == [
        ("web:c1-t1", r.version, events.type_name(r.event)) for r in records
    ]


async def test_a_forked_session_tells_the_channel_nothing(setup: Setup) -> None:
    """A fork of a chat (`steward fork`) is no one's chat: what it answers
    is recorded, and nothing of it goes out on the channel."""
    outbound = await setup.client.subscribe("steward.outbound.web")
    await setup.client.flush()
    first = await setup.request("web", {"text": "hello", "context_id": "c1"})
    await past_debounce(setup, first)
    assert await answered(setup, first) == "hi"
    assert json.loads((await outbound.next_msg(timeout=5)).data)["text"] == "hi"
    steps = replay.commits(await setup.log.read("session.web:c1"), kinds=KINDS)
    fork = "web:c1-fork0a1b2c"
    copy = replay.fork_events(
        steps, "web:c1", fork, kind_of("session.x").surface.detach, kinds=KINDS
    )
    await setup.log.append(f"session.{fork}", copy, 0, correlation_id=fork)

    forked = await setup.request(
        "web", {"text": "/model", "context_id": "c1-fork0a1b2c"}
    )
    assert forked["session_id"] == fork
    assert await answered(setup, forked) == "model: default"  # recorded
    after = await setup.request("web", {"text": "/models", "context_id": "c1"})
    await answered(setup, after)
    said = json.loads((await outbound.next_msg(timeout=5)).data)
    assert (said["session_id"], said["message_id"]) == ("web:c1", after["message_id"])


async def test_tool_call_returned_by_llm_is_executed(
    server: NatsServer, log: SqliteEventLog, make_host: Any, clock: FakeClock
) -> None:
    """A turn whose model calls a tool: the tool runs, its result goes back
    to the model, and the turn's answer goes out."""
    replies = [
        act(
            type="tool_call", name="files.write", args={"path": "a.txt", "content": "x"}
        ),
        act(type="finish", output="Wrote a.txt."),
    ]
    provider = ScriptedProvider(replies)
    async with serving(server, log, make_host, clock, provider) as setup:
        reply = await setup.request("web", {"text": "write a.txt", "user_id": "u1"})
        await past_debounce(setup, reply)
        assert await answered(setup, reply) == "Wrote a.txt."
    run = [r.event for r in await log.read(run_stream("web:u1-t1"))]
    [result] = [e for e in run if isinstance(e, events.ToolResulted)]
    assert result.ok and result.request_id == "web:u1-t1/tool/1"


async def test_response_sent_to_gateway_for_commands_and_refusals(
    setup: Setup,
) -> None:
    """A command's answer and a refusal go out on the channel too, naming the
    message they answer; a chat with no context_id is its user's."""
    outbound = await setup.client.subscribe("steward.outbound.ops")
    await setup.client.flush()
    reply = await setup.request("ops", {"text": "/model", "user_id": "u7"})
    assert reply["session_id"] == "ops:u7"
    said = json.loads((await outbound.next_msg(timeout=5)).data)
    assert (said["type"], said["text"], said["message_id"]) == (
        "command",
        "model: default",
        reply["message_id"],
    )
    big = await setup.request("ops", {"text": "  \t ", "user_id": "u7"})
    said = json.loads((await outbound.next_msg(timeout=5)).data)
    assert said["type"] == "refused" and said["message_id"] == big["message_id"]
    assert "empty message" in said["text"]


# -- a subagent's answer (Klaw's SubagentSilentLogicTest, end to end) ---------


async def told_by_subagent(
    server: NatsServer,
    log: SqliteEventLog,
    make_host: Any,
    clock: FakeClock,
    answer: str,
) -> tuple[session_events.SubagentAnswered, list[dict[str, Any]]]:
    """A turn on channel ``web`` spawns subagent ``scout``, whose run answers
    ``answer``: the session's `SubagentAnswered`, and everything that went
    out on ``steward.outbound.web`` until the answer of a command sent after
    it was recorded (egress publishes in log order, so what the subagent's
    answer made go out came before that)."""
    turn = [
        SPAWN_SCOUT,
        act(type="finish", output="On it."),
    ]
    provider = ScriptedProvider(
        turn, subagent_replies=[act(type="finish", output=answer)], per_run=True
    )
    tools = ToolRegistry.with_builtins(extra=KINDS.tools)
    async with serving(server, log, make_host, clock, provider, tools) as setup:
        outbound = await setup.client.subscribe("steward.outbound.web")
        await setup.client.flush()
        reply = await setup.request(
            "web", {"text": "count the issues", "context_id": "c1"}
        )
        await past_debounce(setup, reply)
        assert await answered(setup, reply) == "On it."
        stream = session_stream("web:c1")

        async def subagent_answered() -> list[events.Recorded]:
            return [
                r
                for r in await log.read(stream)
                if isinstance(r.event, session_events.SubagentAnswered)
            ]

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not (found := await subagent_answered()):
            assert loop.time() < deadline, "the subagent never answered"
            await asyncio.sleep(0.01)
        [recorded] = found
        assert isinstance(recorded.event, session_events.SubagentAnswered)
        command = await setup.request("web", {"text": "/model", "context_id": "c1"})
        said = []
        while not said or said[-1]["type"] != "command":
            said.append(json.loads((await outbound.next_msg(timeout=5)).data))
        assert said[-1]["message_id"] == command["message_id"]
    return recorded.event, said


REPLY = {
    "session_id": "web:c1",
    "channel": "web",
    "chat_id": "c1",
    "type": "reply",
    "text": "On it.",
    "run_id": "web:c1-t1",
    "status": "completed",
}


async def test_response_with_silent_true_not_sent_to_gateway_end_to_end(
    server: NatsServer, log: SqliteEventLog, make_host: Any, clock: FakeClock
) -> None:
    """A subagent that answers ``{"silent": true}``: the session records the
    answer as silent, and nothing of it goes out on the channel (only the
    turn's reply and the later command's answer do)."""
    silent = json.dumps({"silent": True, "note": "nothing new"})
    told, said = await told_by_subagent(server, log, make_host, clock, silent)
    assert told.silent and told.text == silent
    assert (told.run_id, told.name) == ("web:c1-s1", "scout")
    assert said[:-1] == [REPLY]


async def heard(
    server: NatsServer,
    log: SqliteEventLog,
    make_host: Any,
    clock: FakeClock,
    answer: str,
) -> None:
    """Subagent ``scout``'s ``answer``, not silent, goes out on the channel as
    a ``subagent`` message naming its run and name, beside the turn's reply
    (in either order: the subagent runs while the turn finishes)."""
    told, said = await told_by_subagent(server, log, make_host, clock, answer)
    assert not told.silent and told.text == answer
    assert sorted(said[:-1], key=lambda m: str(m["type"])) == [
        REPLY,
        {
            "session_id": "web:c1",
            "channel": "web",
            "chat_id": "c1",
            "type": "subagent",
            "text": answer,
            "run_id": "web:c1-s1",
            "name": "scout",
        },
    ]


async def test_response_without_silent_field_sent_to_gateway_end_to_end(
    server: NatsServer, log: SqliteEventLog, make_host: Any, clock: FakeClock
) -> None:
    """A subagent's plain-text answer goes out on the channel."""
    await heard(server, log, make_host, clock, "Two open issues.")


async def test_response_with_silent_false_sent_to_gateway_end_to_end(
    server: NatsServer, log: SqliteEventLog, make_host: Any, clock: FakeClock
) -> None:
    """A subagent's JSON answer with ``"silent": false`` goes out as it is."""
    await heard(server, log, make_host, clock, '{"silent": false, "issues": 2}')


async def test_the_same_message_id_is_taken_once(setup: Setup) -> None:
    """A redelivered message_id is answered ``duplicate`` and taken once; the
    same id in another chat is another message."""
    payload = {"text": "once", "message_id": "msg-1", "context_id": "c2"}

    first = await setup.request("web", payload)
    second = await setup.request("web", payload)
    other_channel = await setup.request("ops", payload)

    assert first == {
        "ok": True,
        "session_id": "web:c2",
        "message_id": "msg-1",
        "duplicate": False,
    }
    assert second == {**first, "duplicate": True}
    assert other_channel["session_id"] == "ops:c2"
    assert other_channel["duplicate"] is False
    await past_debounce(setup, first, other_channel)
    await answered(setup, first)
    await answered(setup, other_channel)
    taken = [
        r
        for r in await setup.log.read(session_stream("web:c2"))
        if isinstance(r.event, session_events.MessageReceived)
    ]
    assert len(taken) == 1


async def test_msgpack_is_accepted_with_its_content_type(setup: Setup) -> None:
    """A msgpack payload with Content-Type application/msgpack is taken."""
    data = msgspec.msgpack.encode({"text": "packed", "message_id": "p1"})

    reply = await setup.request(
        "web", data, headers={"Content-Type": "application/msgpack"}
    )

    assert reply["ok"] is True, reply
    assert reply["session_id"] == "web:default"
    await past_debounce(setup, reply)
    await answered(setup, reply)
    state = await wait_done(setup.host, "web:default-t1")
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
        "web",
        json.dumps({"text": "x" * 600}).encode(),
        None,
        "too_long",
        "600 characters, more than the 500",
        id="too-long",
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
    assert await setup.log.streams("session.") == []  # nothing half-created
    assert await setup.log.streams("run.") == []

    good = await setup.request("web", {"text": "after the bad one"})
    assert good["ok"] is True
    await past_debounce(setup, good)
    assert await answered(setup, good) == "hi"


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
    """Valid JSON with an escaped lone surrogate is taken, the surrogate
    recorded as U+FFFD; a message that is not JSON is still refused."""
    data = b'{"text": "odd \\ud800 text", "message_id": "lone"}'
    reply = await setup.request("web", data)
    assert reply["ok"] is True, reply
    await past_debounce(setup, reply)
    await answered(setup, reply)
    state = await wait_done(setup.host, "web:default-t1")
    assert state.created.input_text == "odd \ufffd text"
    refused = await setup.request("web", b'{"text": "cut \\ud800')
    assert refused["ok"] is False and refused["error"]["code"] == "not_json"
