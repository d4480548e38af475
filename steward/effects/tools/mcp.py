"""MCP tool servers: the tools of a Model Context Protocol server, called as
any built-in tool is.

Each ``[mcp.<name>]`` server is a `Toolset` of the registry: its tools are
``<name>.<tool>``, with the server's own JSON schema, and go through the same
effect, claim, approval, time limit and output limit as the built-in ones. A
run records the specs it was offered when it is created, so replay never
asks a server anything.

One client session per server per process, held by a task of its own (the
SDK's sessions live in an anyio task group that must be left by the task
that entered it). It is started the first time a tool list or a call needs
it, and started again, after a pause that doubles with each failure (up to
`MAX_PAUSE`), when the server exited, the connection failed, or an HTTP
server restarted and no longer knows the session. What a server says is a
tool error the model reads, never an exception out of a call.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import contextvars
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx2
import msgspec
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)
from mcp_types.jsonrpc import CONNECTION_CLOSED

from steward.config.settings import McpServerConfig
from steward.effects.tools.base import AnyArgs, NotReached, Tool, ToolContext
from steward.errors import ToolError, describe

__all__ = [
    "MAX_PAUSE",
    "MAX_SCHEMA_BYTES",
    "MAX_TOOLS",
    "McpServer",
    "rendered",
    "servers",
    "variables",
]

log = logging.getLogger("steward.mcp")

MAX_TOOLS = 128
"""The tools of one server offered at most (an actor records their specs)."""
MAX_SCHEMA_BYTES = 16_384
"""The largest description and schema of one tool offered, in bytes."""
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

START_SECONDS = 30.0
"""How long a server may take to start and answer (a call's time limit
counts from when its server is up, `Toolset.ready`)."""

ERROR_LINES = 3
"""The last lines of a stdio server's standard error that an error about
its start says."""

_SAY_STATUS = '"$0" "$@"; s=$?; echo "steward: the server exited with status $s" >&2'
_STATUS = re.compile(r"steward: the server exited with status (\d+)")

MAX_PAUSE = 30.0
"""The longest pause, in seconds, before starting a failed server again."""
_FIRST_PAUSE = 0.25
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_json = msgspec.json.Encoder()


def servers(
    configs: Mapping[str, McpServerConfig],
    *,
    timeout: float,
    logs: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[McpServer, ...]:
    """An `McpServer` for each ``[mcp.<name>]`` table, none started; a stdio
    server's standard error goes to ``logs/<name>.log`` (with ``logs``)."""
    return tuple(
        McpServer(
            name,
            config,
            timeout=timeout,
            errlog=None if logs is None else logs / f"{name}.log",
            environ=environ,
        )
        for name, config in sorted(configs.items())
    )


def variables(configs: Mapping[str, McpServerConfig]) -> list[str]:
    """The environment variables ``${VAR}`` in the tables' ``env`` and
    ``headers`` name: secrets, by the look of it (`steward.logs` keeps
    their values out of log lines)."""
    return sorted(
        {
            m.group(1)
            for config in configs.values()
            for value in (*config.env.values(), *config.headers.values())
            for m in _VARIABLE.finditer(value)
        }
    )


class McpServer:
    """One ``[mcp.<name>]`` server, as this process speaks to it."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        timeout: float,
        errlog: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Server ``name`` of ``config``, not started.

        Args:
            timeout: Seconds a call may take when the table sets none (and
                starting the server may take).
            errlog: The file a stdio server's standard error is added to;
                ``None`` leaves it this process's.
            environ: Where ``${VAR}`` is looked up; ``None`` is ``os.environ``.
        """
        self.name = name
        self.config = config
        self._errlog = errlog
        self.timeout = config.timeout or timeout
        # what the client waits for a start or an answer: a call's own time
        # limit is the registry's, counted once its server is up
        self._waits = max(self.timeout, START_SECONDS)
        self._environ = os.environ if environ is None else environ
        self._lock = asyncio.Lock()
        self._session: _Session | None = None
        self._failures = 0
        self._next_try = 0.0
        self.left_out: dict[str, str] = {}
        """The server's tools its last listing left out, and why (a name
        no API takes, a schema that is not an object's, too many)."""

    @property
    def idempotent(self) -> bool:
        """Whether its calls may be made again after a crash (its table's)."""
        return self.config.idempotent

    @property
    def target(self) -> str:
        """What it runs or reaches, for people: the command line or the URL."""
        if self.config.url is not None:
            return self.config.url
        return " ".join([str(self.config.command), *self.config.args])

    async def tools(self) -> tuple[Tool[Any], ...]:
        """Its tools the table offers (``tools``, less ``deny``), as the
        registry holds them (`steward.effects.tools.registry.Toolset`).

        Raises:
            ToolError: the server could not be started or listed.
        """
        try:
            listed = await self._ask(lambda client: _all_tools(client))
        except ConnectionError as e:
            raise ToolError(str(e)) from None
        allowed = self.config.tools
        denied = frozenset(self.config.deny)
        approval = self.config.require_approval
        offered = []
        left_out: dict[str, str] = {}
        for t in listed:
            if (allowed is not None and t.name not in allowed) or t.name in denied:
                continue
            schema = _schema(t.input_schema)
            problem = _unfit(t.name, t.description or "", schema)
            if problem is not None:
                log.info("mcp server %s left out %r: %s", self.name, t.name, problem)
                left_out[t.name] = problem
                continue
            offered.append(
                Tool(
                    name=f"{self.name}.{t.name}",
                    description=t.description or "",
                    args_type=AnyArgs,
                    fn=_Call(self, t.name),
                    parameters=schema,
                    requires_approval=approval is True
                    or (isinstance(approval, list) and t.name in approval),
                    timeout=self.config.timeout,
                    idempotent=self.config.idempotent,
                )
            )
            if len(offered) == MAX_TOOLS:
                left_out["..."] = f"more than {MAX_TOOLS} tools: the rest"
                break
        self.left_out = left_out
        return tuple(offered)

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        """Call the server's ``tool`` with ``args``; its result as text.

        Raises:
            ToolError: the server answered with an error, or (for a server
                that is not ``idempotent``) it went away during the call.
            ConnectionError: it went away during the call of an
                ``idempotent`` server (a retry may succeed).
        """
        result = await self._ask(lambda client: client.call_tool(tool, args))
        text = rendered(result)
        if result.is_error:
            raise ToolError(text or f"{self.name}.{tool} failed and said nothing")
        return text

    async def ready(self) -> None:
        """Start its session now, unless one is live (`Toolset.ready`).

        Raises:
            NotReached: the server could not be started.
        """
        await self._live()

    async def close(self) -> None:
        """Stop its session (and a stdio server's process) if it has one."""
        async with self._lock:
            if self._session is not None:
                await self._session.close()
                self._session = None

    async def _ask(self, request: Any) -> Any:
        """``request(client)`` on a live session; once more on a new session
        when the server says it no longer knows this one (an HTTP server
        restarted: the request was not carried out)."""
        for attempt in (1, 2):
            session = await self._live()
            try:
                answer = await request(session.client)
            except MCPError as e:
                if e.code == CONNECTION_CLOSED or not session.alive:
                    await self._lost(session, e)
                if attempt == 1 and _unknown_session(e):
                    await self._drop(session)
                    continue
                raise ToolError(f"{self.name}: {e.message}") from None
            except (OSError, httpx2.HTTPError, ExceptionGroup) as e:
                await self._lost(session, e)
            else:
                self._failures = 0
                return answer
        raise AssertionError("unreachable")  # pragma: no cover

    async def _live(self) -> _Session:
        async with self._lock:
            if self._session is not None and self._session.alive:
                return self._session
            if self._session is not None:
                await self._session.close()
                self._session = None
            pause = self._next_try - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            said = self._errors_said()
            try:
                self._session = await _Session.open(self._connect, self._waits)
            except Exception as e:
                self._failed()
                # nothing reached the server: a retry is safe for any server
                raise NotReached(
                    f"{self.name}: could not start: {_said(e)}{said()}"
                ) from None
            log.info("mcp server %s started (%s)", self.name, self.target)
            return self._session

    async def _lost(self, session: _Session, error: BaseException) -> None:
        """The session went away during a request: gone, and the request's
        outcome unknown."""
        await self._drop(session)
        self._failed()
        said = f"{self.name}: the server went away during the call ({_said(error)})"
        if self.config.idempotent:
            raise ConnectionError(said)
        raise ToolError(f"{said}; its outcome is unknown") from None

    async def _drop(self, session: _Session) -> None:
        async with self._lock:
            if self._session is session:
                self._session = None
        await session.close()

    def _errors_said(self) -> Callable[[], str]:
        """What a stdio server is about to write to its standard error (its
        ``errlog``), as the end of a one-line error: its last lines, and
        where the rest is. Called before a start; the returned function
        after it failed."""
        errlog = self._errlog
        if errlog is None or self.config.command is None:
            return str
        try:
            start = errlog.stat().st_size
        except OSError:
            start = 0

        def said() -> str:
            try:
                with errlog.open("rb") as f:
                    f.seek(start)
                    text = f.read().decode(errors="replace")
            except OSError:
                return ""
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            exited = ""
            if lines and (status := _STATUS.fullmatch(lines[-1])) is not None:
                exited = f"; it exited with status {status[1]}"
                lines.pop()
            if not lines:
                return f"{exited}; it wrote nothing to its standard error ({errlog})"
            last = " | ".join(lines[-ERROR_LINES:])
            return f"{exited}; its standard error ends: {last} (all of it in {errlog})"

        return said

    def _failed(self) -> None:
        self._failures += 1
        pause = min(MAX_PAUSE, _FIRST_PAUSE * 2 ** (self._failures - 1))
        self._next_try = time.monotonic() + pause

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[Client]:
        config = self.config
        if config.url is not None:
            headers = {
                k: self._expand(v, f"headers.{k}") for k, v in config.headers.items()
            }
            async with httpx2.AsyncClient(headers=headers, timeout=self._waits) as http:
                transport = streamable_http_client(config.url, http_client=http)
                async with Client(transport, read_timeout_seconds=self._waits) as c:
                    yield c
            return
        assert config.command is not None
        command, args = config.command, list(config.args)
        if self._errlog is not None and os.name == "posix":
            # run by a shell that says its exit status in the errlog (the
            # SDK keeps its process to itself); stdin and stdout are the
            # server's own, untouched
            command, args = "/bin/sh", ["-c", _SAY_STATUS, command, *args]
        params = StdioServerParameters(
            command=command,
            args=args,
            env={k: self._expand(v, f"env.{k}") for k, v in config.env.items()} or None,
        )
        with contextlib.ExitStack() as files:
            errors = sys.stderr
            if self._errlog is not None:
                self._errlog.parent.mkdir(parents=True, exist_ok=True)
                errors = files.enter_context(self._errlog.open("a"))
            transport = stdio_client(params, errlog=errors)
            async with Client(transport, read_timeout_seconds=self._waits) as client:
                yield client

    def _expand(self, value: str, key: str) -> str:
        def variable(m: re.Match[str]) -> str:
            try:
                return self._environ[m.group(1)]
            except KeyError:
                raise ToolError(
                    f"mcp.{self.name}.{key}: ${{{m.group(1)}}} is not set in "
                    "the environment"
                ) from None

        return _VARIABLE.sub(variable, value)


class _Call:
    """A server's tool as the registry calls it."""

    def __init__(self, server: McpServer, tool: str) -> None:
        self._server = server
        self._tool = tool

    async def __call__(self, args: AnyArgs, /, *, ctx: ToolContext) -> str:
        return await self._server.call(self._tool, args.values)


class _Session:
    """A client session held open by a task of its own until `close`."""

    def __init__(self) -> None:
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.client: Client

    @classmethod
    async def open(cls, connect: Any, timeout: float) -> _Session:
        session = cls()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        # a context of its own: its log lines are about no run in particular
        session._task = asyncio.create_task(
            session._hold(connect, ready), context=contextvars.Context()
        )
        try:
            async with asyncio.timeout(timeout):
                session.client = await asyncio.shield(ready)
        except BaseException:
            await session.close()
            raise
        return session

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)

    async def _hold(self, connect: Any, ready: asyncio.Future[Client]) -> None:
        try:
            async with connect() as client:
                if ready.done():  # the opener gave up waiting
                    return
                ready.set_result(client)
                await self._stop.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(
                    e if isinstance(e, Exception) else ConnectionError(_said(e))
                )
            elif not self._stop.is_set():
                log.warning("mcp session ended: %s", _said(e))
            if not isinstance(e, Exception):
                raise


async def _all_tools(client: Client) -> list[Any]:
    """Every page of the server's tool list."""
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(100):  # a server whose pages never end is cut off
        page = await client.list_tools(cursor=cursor)
        found.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return found


def rendered(result: CallToolResult) -> str:
    """A tool result's content as the text recorded and shown to the model:
    text as it is; an image, a sound or a binary resource as a line naming
    its type and size; an embedded text resource under a line naming it; the
    structured content as JSON when nothing else says it."""
    parts = [_block(block) for block in result.content]
    if result.structured_content is not None and not any(
        isinstance(b, TextContent) for b in result.content
    ):
        parts.append(_json.encode(result.structured_content).decode())
    return "\n".join(parts)


def _block(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        return f"[{block.type} {block.mime_type}, {_size(block.data)} bytes]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        if isinstance(resource, BlobResourceContents):
            mime = resource.mime_type or "application/octet-stream"
            return f"[resource {resource.uri} {mime}, {_size(resource.blob)} bytes]"
        return f"[resource {resource.uri}]\n{resource.text}"
    if isinstance(block, ResourceLink):
        return f"[resource link {block.uri}: {block.name}]"
    return f"[{getattr(block, 'type', 'content')}]"  # a newer kind of block


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A server's input schema as models are offered it: an object at the
    top (with ``properties`` and ``required``), its ``title`` left out."""
    out = {k: v for k, v in schema.items() if k != "title"}
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    out.setdefault("required", [])
    return out


def _unfit(name: str, description: str, schema: dict[str, Any]) -> str | None:
    """Why a server's tool cannot be offered to a model, if it cannot: a
    name no API takes, a schema that is not an object's, one too large to
    record with every actor it is offered to."""
    if not _TOOL_NAME.fullmatch(name):
        return "its name is not 1-64 letters, digits, _, - or ."
    if (
        schema.get("type") != "object"
        or not isinstance(schema.get("properties"), dict)
        or not isinstance(schema.get("required"), list)
    ):
        return "its input schema is not an object's (type, properties, required)"
    size = len(_json.encode(schema)) + len(description)
    if size > MAX_SCHEMA_BYTES:
        return f"its description and schema take {size} bytes, over {MAX_SCHEMA_BYTES}"
    return None


def _unknown_session(error: MCPError) -> bool:
    """Whether an HTTP server said it does not know the session (it
    restarted): the request was refused before a tool ran."""
    return "session not found" in error.message.lower()


def _said(error: BaseException) -> str:
    """One line for ``error``, the first of a group's."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    if isinstance(error, ToolError):
        return str(error)
    return describe(error) if isinstance(error, Exception) else type(error).__name__
