"""MCP servers' tools in the registry, against real servers built with the
SDK (`mcp_server.py`), over stdio and over streamable HTTP: listed with
their schemas as ``NAME.tool``, allow and deny lists, approval, a server's
error, content types, a crash in the middle of a call, a restart between
calls, a server that is down, secrets in headers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mcp_support import calls, http_server, stdio
from support import act

from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.actors.session import chats
from steward.actors.workflow.definition import load_definition, mcp_of
from steward.cli.env import Env
from steward.config import Settings, load_settings
from steward.config.settings import AgentProfile, McpServerConfig, RunConfig
from steward.effects.llm import ScriptedProvider
from steward.effects.tools import ToolContext, ToolRegistry
from steward.effects.tools.mcp import McpServer
from steward.errors import ConfigError
from steward.kinds import KINDS

pytestmark = pytest.mark.slow

EXAMPLE_WORKFLOW = (
    Path(__file__).parents[2] / "examples/workflows/design-implement-review.toml"
)


def registry(*servers: McpServer) -> ToolRegistry:
    tools = ToolRegistry.with_builtins()
    for server in servers:
        tools.add_toolset(server)
    return tools


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, stream="run.r1")


@pytest.fixture
async def closing() -> Any:
    made: list[ToolRegistry] = []
    yield made.append
    for tools in made:
        await tools.close()


async def test_a_servers_tools_are_listed_as_name_tool_with_its_schema(
    tmp_path: Path, closing: Any
) -> None:
    tools = registry(McpServer("notes", stdio(tmp_path), timeout=10))
    closing(tools)
    await tools.load(["notes"])
    specs = {s.name: s for s in tools.specs()}
    assert {
        "notes.add",
        "notes.search",
        "notes.delete",
        "notes.fail",
        "notes.die",
        "notes.hold",
        "notes.media",
    } <= set(specs)
    add = specs["notes.add"]
    assert add.description == "Add a note."
    assert add.parameters["type"] == "object"
    assert add.parameters["properties"]["text"]["type"] == "string"
    assert add.parameters["required"] == ["text"]
    assert not add.requires_approval
    assert not any("spaced" in name for name in specs)  # a name no API takes
    assert calls(tmp_path) == []  # listing calls nothing


async def test_the_allow_and_deny_lists_and_approval_decide_what_is_offered(
    tmp_path: Path, closing: Any
) -> None:
    table = stdio(
        tmp_path,
        tools=["add", "search", "delete"],
        deny=["delete"],
        require_approval=["add"],
    )
    tools = registry(McpServer("notes", table, timeout=10))
    closing(tools)
    await tools.load(["notes"])
    offered = {s.name: s.requires_approval for s in tools.specs()}
    assert {k: v for k, v in offered.items() if k.startswith("notes.")} == {
        "notes.add": True,
        "notes.search": False,
    }
    # a denied tool is never called, whatever the model asks
    denied = await tools.call("notes.delete", {"index": 1}, ctx=ctx(tmp_path))
    assert not denied.ok and "unknown tool 'notes.delete'" in (denied.error or "")
    assert calls(tmp_path) == []


async def test_a_call_answers_and_a_servers_error_is_an_error_the_model_reads(
    tmp_path: Path, closing: Any
) -> None:
    tools = registry(McpServer("notes", stdio(tmp_path), timeout=10))
    closing(tools)
    added = await tools.call("notes.add", {"text": "buy milk"}, ctx=ctx(tmp_path))
    assert (added.ok, added.output) == (True, "added note 1")
    found = await tools.call("notes.search", {"query": "milk"}, ctx=ctx(tmp_path))
    assert found.ok and "buy milk" in found.output
    failed = await tools.call("notes.fail", {}, ctx=ctx(tmp_path))
    assert not failed.ok and not failed.retryable
    assert "Error executing tool fail" in (failed.error or "")
    bad = await tools.call("notes.add", {"txt": 1}, ctx=ctx(tmp_path))
    assert not bad.ok and "text" in (bad.error or "")  # the server's own check
    assert calls(tmp_path) == ["add buy milk", "search milk", "fail "]


async def test_images_and_resources_are_recorded_as_text_runs_show_can_display(
    tmp_path: Path, closing: Any
) -> None:
    tools = registry(McpServer("notes", stdio(tmp_path), timeout=10))
    closing(tools)
    media = await tools.call("notes.media", {}, ctx=ctx(tmp_path))
    assert media.ok
    assert media.output == (
        "a picture and a file\n"
        "[image image/png, 32 bytes]\n"
        "[resource file:///notes.txt]\none\ntwo"
    )


async def test_the_output_limit_confines_a_servers_result(
    tmp_path: Path, closing: Any
) -> None:
    tools = ToolRegistry.with_builtins(output_limit=20)
    tools.add_toolset(McpServer("notes", stdio(tmp_path), timeout=10))
    closing(tools)
    await tools.call("notes.add", {"text": "x" * 100}, ctx=ctx(tmp_path))
    said = await tools.call("notes.search", {"query": "x"}, ctx=ctx(tmp_path))
    assert said.truncated
    assert said.output == "x" * 20 + "\n…[truncated 80 characters]"


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_server_that_dies_in_a_call_is_an_error_and_starts_again(
    tmp_path: Path, closing: Any, idempotent: bool
) -> None:
    server = McpServer("notes", stdio(tmp_path, idempotent=idempotent), timeout=10)
    tools = registry(server)
    closing(tools)
    died = await tools.call("notes.die", {}, ctx=ctx(tmp_path))
    assert not died.ok
    assert "notes: the server went away during the call" in (died.error or "")
    # not idempotent: the model decides; idempotent: the run's retries may
    assert ("outcome is unknown" in (died.error or "")) is not idempotent
    assert died.retryable is idempotent
    again = await tools.call("notes.add", {"text": "after"}, ctx=ctx(tmp_path))
    assert again.ok, again.error
    assert calls(tmp_path) == ["die ", "add after"]


@pytest.mark.parametrize("legacy", [False, True])
async def test_an_http_server_restarted_between_calls_is_reached_again(
    tmp_path: Path, closing: Any, legacy: bool
) -> None:
    """Of the 2025 protocol, the restarted server no longer knows the
    session: the call is made once more on a new one (it did not run)."""
    with http_server(tmp_path, legacy=legacy) as web:
        tools = registry(McpServer("web", McpServerConfig(url=web.url), timeout=10))
        closing(tools)
        first = await tools.call("web.add", {"text": "one"}, ctx=ctx(tmp_path))
        assert first.ok, first.error
        web.stop()
        web.start()
        second = await tools.call("web.add", {"text": "two"}, ctx=ctx(tmp_path))
        assert second.ok, second.error
    assert calls(tmp_path) == ["add one", "add two"]


async def test_a_server_that_is_down_is_a_tool_error_until_it_is_up(
    tmp_path: Path, closing: Any
) -> None:
    with http_server(tmp_path) as web:
        web.stop()
        tools = registry(McpServer("web", McpServerConfig(url=web.url), timeout=5))
        closing(tools)
        down = await tools.call("web.add", {"text": "one"}, ctx=ctx(tmp_path))
        assert not down.ok and down.retryable
        assert "web: could not start" in (down.error or "")
        web.start()
        up = await tools.call("web.add", {"text": "two"}, ctx=ctx(tmp_path))
        assert up.ok, up.error
    assert calls(tmp_path) == ["add two"]


async def test_a_header_secret_comes_from_the_environment(
    tmp_path: Path, closing: Any
) -> None:
    with http_server(tmp_path, token="s3cret") as web:
        table = McpServerConfig(
            url=web.url, headers={"Authorization": "Bearer ${TOKEN}"}
        )
        right = McpServer("web", table, timeout=5, environ={"TOKEN": "s3cret"})
        wrong = McpServer("bad", table, timeout=5, environ={"TOKEN": "guess"})
        unset = McpServer("unset", table, timeout=5, environ={})
        tools = registry(right, wrong, unset)
        closing(tools)
        ok = await tools.call("web.add", {"text": "one"}, ctx=ctx(tmp_path))
        assert ok.ok, ok.error
        refused = await tools.call("bad.add", {"text": "two"}, ctx=ctx(tmp_path))
        assert not refused.ok and "bad: could not start" in (refused.error or "")
        missing = await tools.call("unset.add", {"text": "3"}, ctx=ctx(tmp_path))
        assert missing.error == (
            "unset: could not start: mcp.unset.headers.Authorization: ${TOKEN} "
            "is not set in the environment"
        )
    assert calls(tmp_path) == ["add one"]


def test_a_table_needs_a_command_or_a_url_and_not_both(tmp_path: Path) -> None:
    for table in ("", 'command = "x"\nurl = "http://h/mcp"'):
        (tmp_path / "s.toml").write_text(f"[mcp.notes]\n{table}\n")
        with pytest.raises(ConfigError) as e:
            load_settings(tmp_path / "s.toml", env={})
        assert "mcp.notes" in str(e.value)
        assert "give command (a stdio server) or url (HTTP)" in str(e.value)


def test_a_profile_or_task_naming_no_configured_server_is_refused(
    tmp_path: Path,
) -> None:
    for table in ('[agents.default]\nmcp = ["web"]', '[task]\nmcp = ["web"]'):
        (tmp_path / "s.toml").write_text(table + "\n")
        with pytest.raises(ConfigError) as e:
            load_settings(tmp_path / "s.toml", env={})
        assert "mcp[0]: no [mcp.web] server is configured" in str(e.value)


def test_a_server_named_as_built_in_tools_is_refused(tmp_path: Path) -> None:
    settings = Settings(mcp={"files": stdio(tmp_path)})
    env = Env(
        settings=settings,
        db=tmp_path / "log.db",
        script=None,
        out=print,
        kinds=KINDS,
    )
    with pytest.raises(ConfigError) as e:
        env.tools()
    assert str(e.value).startswith("settings: mcp.files: tools named files.*")


async def test_a_run_offered_a_servers_tool_calls_it_after_approval(
    tmp_path: Path, make_host: Any, log: Any, closing: Any
) -> None:
    """Through the host, on both logs: a profile's run is offered the
    server's tools; one that asks for approval waits for it, then runs."""
    settings = Settings(
        run=RunConfig(planning_gate=False),
        agents={"default": AgentProfile(mcp=["notes"], tools=["files.read"])},
        mcp={"notes": stdio(tmp_path, require_approval=True)},
    )
    tools = registry(McpServer("notes", settings.mcp["notes"], timeout=10))
    closing(tools)
    await tools.load(["notes"])
    run = settings.run_settings("default", tools.specs())
    assert [t.name for t in run.tools] == [
        "files.read",
        *(n for n in tools.names() if n.startswith("notes.")),
    ]
    seen: list[str] = []

    def reply(prompt: Any, info: Any) -> str:
        seen.append(prompt.messages[-1].content)
        if len(seen) == 1:
            return act(type="tool_call", name="notes.add", args={"text": "milk"})
        return act(type="finish", output="noted")

    host = await make_host(ScriptedProvider(reply), tools)
    stream = run_stream("r1")
    await host.submit(
        stream, run_events.RunCreated(run_id="r1", input_text="note milk", settings=run)
    )
    for _ in range(400):
        state, _ = await host.state(stream)
        if state.approvals:
            break
        await asyncio.sleep(0.025)
    assert calls(tmp_path) == []  # nothing runs before a person approves
    decided = run_events.ApprovalDecided(
        request_id=state.approvals[0].request_id, approved=True
    )
    assert await host.submit(stream, decided) is not None
    for _ in range(400):
        state, _ = await host.state(stream)
        if state.status == "completed":
            break
        await asyncio.sleep(0.025)
    assert state.status == "completed", state
    assert calls(tmp_path) == ["add milk"]
    assert "added note 1" in seen[1]


async def test_a_session_and_a_workflow_use_the_servers_of_their_profiles(
    tmp_path: Path, make_host: Any, log: Any, closing: Any
) -> None:
    """A session opened with a profile that names a server records its
    tools for its turns; a workflow's phases' profiles name the servers it
    lists before it is created."""
    settings = Settings(
        agents={"default": AgentProfile(), "noting": AgentProfile(mcp=["notes"])},
        mcp={"notes": stdio(tmp_path, tools=["add"])},
    )
    tools = ToolRegistry.with_builtins(extra=KINDS.tools)
    tools.add_toolset(McpServer("notes", settings.mcp["notes"], timeout=10))
    closing(tools)
    host = await make_host([], tools)
    plain = await chats.open_session(settings, host, "cli:plain")
    noting = await chats.open_session(settings, host, "cli:noting", "noting")
    offered = {}
    for stream in (plain, noting):
        (opened, *_) = await log.read(stream)
        offered[stream] = {t.name for t in opened.event.settings.run.tools}
    assert "notes.add" in offered[noting]
    assert "memory.search" in offered[noting]  # the session's own, as ever
    assert not any(n.startswith("notes.") for n in offered[plain])

    definition = load_definition(EXAMPLE_WORKFLOW)
    assert mcp_of(definition, settings) == []
    uses = msgspec.structs.replace(
        settings, agents={"default": AgentProfile(mcp=["notes"])}
    )
    assert mcp_of(definition, uses) == ["notes"]


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_call_that_times_out_is_retried_only_if_idempotent(
    tmp_path: Path, closing: Any, idempotent: bool
) -> None:
    """Cut off by its time limit, a call may have taken effect: the run's
    retries make it again only for an idempotent server."""
    table = stdio(tmp_path, idempotent=idempotent, timeout=1.0)
    tools = registry(McpServer("notes", table, timeout=10))
    closing(tools)
    assert tools.once_only("notes.hold") is not idempotent  # known unlisted
    held = await tools.call("notes.hold", {"name": "a"}, ctx=ctx(tmp_path))
    (tmp_path / "release").touch()
    assert not held.ok and "timed out after 1 s" in (held.error or "")
    assert held.retryable is idempotent
    assert ("whether it took effect is unknown" in (held.error or "")) is not idempotent


def test_a_server_name_that_cannot_name_tools_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('[mcp."a.b"]\nurl = "http://h/mcp"\n')
    with pytest.raises(ConfigError) as e:
        load_settings(tmp_path / "s.toml", env={})
    assert "mcp.a.b: a server's name is 1-40 letters, digits, _ or -" in str(e.value)


async def test_a_servers_start_is_not_counted_against_a_calls_time_limit(
    tmp_path: Path, closing: Any
) -> None:
    """A server that takes 1.5 s to start, whose calls may take 1 s: the
    first call, and one after the server died and starts again, each get
    their whole second (the time limit counts from when the server is up)."""
    table = stdio(tmp_path, timeout=1.0, env={"MCP_START_DELAY": "1.5"})
    tools = registry(McpServer("notes", table, timeout=10))
    closing(tools)
    first = await tools.call("notes.add", {"text": "a"}, ctx=ctx(tmp_path))
    assert first.ok, first.error
    died = await tools.call("notes.die", {}, ctx=ctx(tmp_path))
    assert not died.ok
    again = await tools.call("notes.add", {"text": "b"}, ctx=ctx(tmp_path))
    assert again.ok, again.error
    assert calls(tmp_path) == ["add a", "die ", "add b"]
