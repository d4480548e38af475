"""Traces, through the OpenTelemetry SDK's in-memory exporter: a run with a
subagent and a tool call, carried out by two workers of one JetStream log,
is one trace: the root run's ``invoke_agent`` span, the subagent's under it,
and under each its steps, its ``chat`` spans (with the GenAI conventions'
attributes) and its ``execute_tool`` span. Without the SDK, importing the
host imports none of OpenTelemetry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from nats_server import NatsServer
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from support import act

from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog
from steward.bus.jetstream.inputs import Inputs
from steward.bus.jetstream.members import Membership, until_shared
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.host.traces import Traces
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

SETTINGS = run_events.RunSettings(
    tools=ToolRegistry.with_builtins().specs(), planning_gate=False
)


def reply(prompt: Any, info: Any) -> str:
    """The coordinator spawns a helper, then finishes; the helper lists the
    files, then answers."""
    said = " ".join(m.content for m in prompt.messages)
    if info.actor_id == "r1":
        if "listed" not in said:
            return act(type="spawn_subagent", subagent={"task": "List the files."})
        return act(type="finish", output="the helper listed them")
    if "files.list" not in said:
        return act(type="tool_call", name="files.list", args={"path": "."})
    return act(type="send_message", message="listed")


@pytest.fixture
async def workers(nats: NatsServer, tmp_path: Any) -> AsyncIterator[tuple[Any, ...]]:
    exporter = InMemorySpanExporter()
    traces = Traces(exporter)
    async with AsyncExitStack() as stack:
        hosts = []
        for n in (1, 2):
            log = await JetStreamEventLog.open(
                nats.url, stream="T", prefix="t", union=KINDS.union
            )
            stack.push_async_callback(log.close)
            workspace = tmp_path / f"w{n}"
            workspace.mkdir()
            host = Host(
                log,
                provider=ScriptedProvider(reply),
                tools=ToolRegistry.with_builtins(),
                workspace=workspace,
                worker_id=f"w{n}",
                membership=Membership(log, f"w{n}", lease=5.0),
                inputs=Inputs(log),
                traces=traces,
                kinds=KINDS,
            )
            await host.start()
            stack.push_async_callback(host.stop)
            hosts.append(host)
        await until_shared(hosts[0].log, 2, timeout=30)
        yield hosts, exporter, traces
    traces.shutdown()


async def test_a_run_with_a_subagent_across_two_workers_is_one_trace(
    workers: tuple[Any, ...],
) -> None:
    hosts, exporter, traces = workers
    starter = Host(hosts[0].log, kinds=KINDS)
    created = run_events.RunCreated(run_id="r1", input_text="go", settings=SETTINGS)
    await starter.submit(run_stream("r1"), created)
    for _ in range(600):
        state, _ = await hosts[0].state(run_stream("r1"))
        if state.status in ("completed", "failed"):
            break
        await asyncio.sleep(0.05)
    assert state.status == "completed", state
    for host in hosts:
        assert await host.settle(30)
    await traces.settle()
    spans = exporter.get_finished_spans()

    assert len({s.context.trace_id for s in spans}) == 1  # one trace
    by_id = {s.context.span_id: s for s in spans}
    agents = [s for s in spans if s.name == "invoke_agent run"]
    root = next(s for s in agents if s.attributes["gen_ai.agent.id"] == "r1")
    (child,) = [s for s in agents if s is not root]
    assert root.parent is None
    assert child.parent.span_id == root.context.span_id
    assert child.attributes["steward.outcome"] == "completed"

    def under(span: Any) -> list[str]:
        return sorted(
            s.name
            for s in spans
            if s.parent and s.parent.span_id == span.context.span_id
        )

    assert "execute_tool files.list" in under(child)
    assert "execute_tool files.list" not in under(root)
    assert under(root).count("chat") == 2  # the scripted model is named by none
    assert any(name.startswith("step run") for name in under(root))
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 4  # two of the root's, two of the helper's
    for chat in chats:
        assert chat.attributes["gen_ai.conversation.id"] == "r1"
        assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
        assert chat.attributes["gen_ai.usage.input_tokens"] >= 0
        assert by_id.get(chat.parent.span_id) in (root, child)
    tool = next(s for s in spans if s.name == "execute_tool files.list")
    assert tool.attributes["gen_ai.tool.name"] == "files.list"
    steps = [s for s in spans if s.name.startswith("step ")]
    assert steps and all(s.end_time >= s.start_time for s in steps)


def test_the_host_imports_no_opentelemetry() -> None:
    code = (
        "import sys, steward.host, steward.cli.serve\n"
        "found = [m for m in sys.modules if m.startswith('opentelemetry.sdk')]\n"
        "assert not found, found\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
