"""What a request the fake API received says, in either dialect's form:
the wire tests read the system prompt and messages from these."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fake_api import Request

from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS


def text_of(content: Any) -> str:
    """A message's text, of either dialect's content forms."""
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""


def system_of(request: Request) -> str:
    """The request's system prompt (Anthropic's ``system``, or OpenAI's
    system messages)."""
    body = request.body
    system = text_of(body.get("system"))
    return system + "".join(
        text_of(m["content"]) for m in body["messages"] if m["role"] == "system"
    )


def tools_of(request: Request) -> dict[str, Any]:
    """The tools the request offers, by wire name: their JSON schemas."""
    offered = {}
    for tool in request.body.get("tools", []):
        if "function" in tool:  # OpenAI's
            offered[tool["function"]["name"]] = tool["function"]["parameters"]
        else:
            offered[tool["name"]] = tool["input_schema"]
    return offered


def tool_results(request: Request) -> list[tuple[str, str]]:
    """The tool results the request holds: (call id, content)."""
    found = []
    for m in request.body["messages"]:
        if m["role"] == "tool":
            found.append((m["tool_call_id"], text_of(m["content"])))
        elif isinstance(m["content"], list):
            found += [
                (b["tool_use_id"], text_of(b.get("content")))
                for b in m["content"]
                if b.get("type") == "tool_result"
            ]
    return found


def tool_calls(request: Request) -> list[tuple[str, str, dict[str, Any]]]:
    """The assistant's tool calls the request holds: (id, wire name, args)."""
    found = []
    for m in request.body["messages"]:
        if m["role"] != "assistant":
            continue
        for call in m.get("tool_calls") or []:
            function = call["function"]
            args = json.loads(function["arguments"])
            found.append((call["id"], function["name"], args))
        if isinstance(m["content"], list):
            found += [
                (b["id"], b["name"], b["input"])
                for b in m["content"]
                if b.get("type") == "tool_use"
            ]
    return found


@contextlib.asynccontextmanager
async def hosted(
    tmp: Path,
    provider: Any,
    clock: FakeClock,
    *,
    tools: ToolRegistry | None = None,
    workspace: Path | None = None,
) -> AsyncIterator[tuple[Host, SqliteEventLog]]:
    """A started host over a new SQLite log in ``tmp`` whose model is
    ``provider`` (an SDK's, against the fake API), with the built-in tools
    (or ``tools``), working in ``workspace`` (``tmp/workspace``, made, by
    default); the host, the provider and the log closed after."""
    log = await SqliteEventLog.open(tmp / "log.db", union=KINDS.union)
    if workspace is None:
        workspace = tmp / "workspace"
        workspace.mkdir(exist_ok=True)
    host = Host(
        log,
        provider=provider,
        tools=tools or ToolRegistry.with_builtins(),
        workspace=workspace,
        clock=clock,
        kinds=KINDS,
    )
    await host.start()
    try:
        yield host, log
    finally:
        await host.stop()
        await provider.aclose()
        await log.close()
