"""An MCP server for the tests, built with the official SDK.

``python tests/mcp_server.py`` speaks over stdio; ``--http PORT`` serves
streamable HTTP on 127.0.0.1:PORT (``--token T`` refuses a request without
``Authorization: Bearer T``). What it keeps lives in the directory
``MCP_STATE`` (default: the working directory), so a restarted server, or the
test, sees what an earlier one did: ``notes.txt`` (one note a line) and
``calls.txt`` (one line a call: tool and argument). ``MCP_TOOLS=2`` serves a
second version of the tool list (``add`` described anew, ``extra`` added);
``--legacy`` speaks the 2025 protocol only (sessions with ids).
``MCP_START_DELAY=S`` waits S seconds before it serves (a slow start).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

STATE = Path(os.environ.get("MCP_STATE", "."))
VERSION = os.environ.get("MCP_TOOLS", "1")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()

app = MCPServer("test-notes")


def _called(tool: str, arg: str = "") -> None:
    with (STATE / "calls.txt").open("a") as f:
        f.write(f"{tool} {arg}\n")


def _notes() -> list[str]:
    file = STATE / "notes.txt"
    return file.read_text().splitlines() if file.exists() else []


@app.tool(description="Add a note." if VERSION == "1" else "Add a note (version 2).")
def add(text: str) -> str:
    _called("add", text)
    with (STATE / "notes.txt").open("a") as f:
        f.write(text.replace("\n", " ") + "\n")
    return f"added note {len(_notes())}"


@app.tool()
def search(query: str) -> list[str]:
    """Find the notes that contain query."""
    _called("search", query)
    return [n for n in _notes() if query in n]


@app.tool()
def delete(index: int) -> str:
    """Delete a note."""
    _called("delete", str(index))
    return "deleted"


@app.tool()
def fail() -> str:
    """Always fails."""
    _called("fail")
    raise ValueError("the disk is full")


@app.tool()
def die() -> str:
    """Exits the server in the middle of the call."""
    _called("die")
    os._exit(3)


@app.tool()
def hold(name: str) -> str:
    """Waits until the file release exists, then answers."""
    _called("hold", name)
    while not (STATE / "release").exists():
        time.sleep(0.05)
    return f"held {name}"


@app.tool(name="spaced name")
def spaced() -> str:
    """A tool whose name no model API takes."""
    return "never offered"


@app.tool()
def media() -> Any:
    """Answers with an image, an embedded resource and text."""
    _called("media")
    return CallToolResult(
        content=[
            TextContent(text="a picture and a file"),
            ImageContent(data=PNG, mime_type="image/png"),
            EmbeddedResource(
                resource=TextResourceContents(
                    uri="file:///notes.txt", mime_type="text/plain", text="one\ntwo"
                )
            ),
        ]
    )


if VERSION != "1":

    @app.tool()
    def extra() -> str:
        """A tool the second version adds."""
        return "extra"


def _guarded(inner: Any, token: str) -> Any:
    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send(
                    {"type": "http.response.start", "status": 401, "headers": []}
                )
                await send({"type": "http.response.body", "body": b"no token"})
                return
        await inner(scope, receive, send)

    return guarded


def _legacy(inner: Any) -> Any:
    """``inner`` as a server of the 2025 protocol only: it answers the 2026
    probe ``server/discover`` with "method not found", so a client falls
    back to the initialize handshake and a session id (which a restarted
    server no longer knows)."""

    async def legacy(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = json.loads(body or b"{}")
        if isinstance(request, dict) and request.get("method") == "server/discover":
            error = {"code": -32601, "message": "Method not found"}
            said = {"jsonrpc": "2.0", "id": request.get("id"), "error": error}
            headers = [(b"content-type", b"application/json")]
            await send(
                {"type": "http.response.start", "status": 200, "headers": headers}
            )
            await send(
                {"type": "http.response.body", "body": json.dumps(said).encode()}
            )
            return
        replayed = False

        async def again() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await inner(scope, again, send)

    return legacy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    parser.add_argument("--token")
    parser.add_argument("--legacy", action="store_true", help="2025 protocol only")
    args = parser.parse_args()
    time.sleep(float(os.environ.get("MCP_START_DELAY", "0")))
    if args.http is None:
        app.run()
        return
    import uvicorn

    web = app.streamable_http_app()
    served = _legacy(web) if args.legacy else web
    served = served if args.token is None else _guarded(served, args.token)
    uvicorn.run(served, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()
