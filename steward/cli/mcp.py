"""`steward mcp`: the configured MCP tool servers, and a tool tried by hand.

`list` starts each ``[mcp.<name>]`` server (or reaches it), lists the tools
the table offers and stops it again: one header line a server (its name,
transport, what it runs or reaches, and ``ok`` or why it is unreachable),
then one line a tool. `call NAME.tool --args JSON` makes one call through
the same registry runs use (allow and deny lists, time limit, output limit)
and prints its result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

from steward.cli.env import EXIT_FAILED, Env, shown
from steward.cli.output import columns, cut, json_line
from steward.effects.tools import ToolContext
from steward.effects.tools.mcp import McpServer
from steward.errors import StewardError, ToolError

__all__ = ["cmd_mcp_call", "cmd_mcp_list"]

DESCRIPTION_CHARS = 70
"""The characters of a tool's description `list` shows."""


async def cmd_mcp_list(env: Env, args: argparse.Namespace) -> int:
    registry = env.tools()
    servers = [s for s in registry.toolsets if isinstance(s, McpServer)]
    if not servers:
        print(
            "steward: no [mcp.<name>] server is configured (docs/mcp.md)",
            file=sys.stderr,
        )
        return 0
    unreachable = 0
    for server in servers:
        transport = "http" if server.config.url is not None else "stdio"
        target = server.target
        try:
            await registry.load([server.name])
            error = None
        except ToolError as e:
            error = str(e).removeprefix(f"{server.name}: ")
            unreachable += 1
        specs = registry.specs(
            [n for n in registry.names() if n.startswith(f"{server.name}.")]
        )
        left_out = server.left_out
        if args.output == "json":
            env.out(
                json_line(
                    {
                        "server": server.name,
                        "transport": transport,
                        "target": target,
                        "reachable": error is None,
                        "error": error,
                        "tools": [
                            {
                                "name": s.name,
                                "description": s.description,
                                "requires_approval": s.requires_approval,
                                "parameters": s.parameters,
                            }
                            for s in specs
                        ],
                        "left_out": left_out,
                    }
                )
            )
            continue
        status = "ok" if error is None else f"unreachable: {error}"
        env.out(f"{server.name}  {transport}  {target}  {shown(status)}")
        rows = [
            (
                f"  {s.name}",
                cut(s.description, DESCRIPTION_CHARS)
                + ("  (asks for approval)" if s.requires_approval else ""),
            )
            for s in specs
        ]
        for line in columns(("  TOOL", "DESCRIPTION"), rows) if rows else []:
            env.out(line)
        for name, why in left_out.items():
            env.out(shown(f"  left out: {name}: {why}"))
    return EXIT_FAILED if unreachable else 0


async def cmd_mcp_call(env: Env, args: argparse.Namespace) -> int:
    server = args.tool.partition(".")[0]
    if not env.settings.serves(args.tool):
        known = ", ".join(sorted(env.settings.mcp)) or "none"
        raise StewardError(
            f"{args.tool!r} is no MCP server's tool (NAME.tool); configured "
            f"servers: {known}"
        )
    try:
        values = json.loads(args.args)
    except json.JSONDecodeError as e:
        raise StewardError(f"--args is not JSON: {e}") from None
    if not isinstance(values, dict):
        raise StewardError('--args must be a JSON object, as \'{"text": "hi"}\'')
    registry = env.tools()
    outcome = await registry.call(
        args.tool,
        values,
        ctx=ToolContext(workspace=Path(env.settings.tools.workspace)),
    )
    if args.output == "json":
        said = msgspec.structs.asdict(outcome)
        env.out(json_line({"tool": args.tool, "server": server, **said}))
    elif outcome.ok:
        env.out(outcome.output)
    if not outcome.ok:
        if args.output != "json":
            print(f"steward: {shown(outcome.error or 'failed')}", file=sys.stderr)
        return EXIT_FAILED
    return 0
