"""The tools a host can run, what the model is told about them, and calling them.

`ToolRegistry.call` is an effect handler's step: it never raises for a tool's
problem. An unknown name, bad arguments, any exception, a timeout all come back
as a `ToolOutcome` with a one-line error the model can read, and ``retryable``
says whether running the same call again could help (`is_argument_error`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec

from steward.effects.tools import files
from steward.effects.tools import git as git_tools
from steward.effects.tools import script as script_tools
from steward.effects.tools.base import (
    OUTCOME_UNKNOWN,
    AnyArgs,
    NotReached,
    Tool,
    ToolContext,
    ToolFn,
    is_argument_error,
    tool,
)
from steward.errors import ToolError, describe
from steward.events.protocol import ToolSpec

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_TIMEOUT",
    "Tool",
    "ToolContext",
    "ToolFn",
    "ToolOutcome",
    "ToolRegistry",
    "Toolset",
    "tool",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds a call may take when neither the tool nor the caller says."""
DEFAULT_OUTPUT_LIMIT = 16_384
"""Characters of output kept; a model's context is the scarce resource."""

_log = logging.getLogger(__name__)
_json = msgspec.json.Encoder()


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a call went, shaped like the `ToolResulted` event it becomes."""

    ok: bool
    output: str = ""
    error: str | None = None
    retryable: bool = True
    truncated: bool = False


class Toolset(Protocol):
    """Tools another program serves (an MCP server's), each named
    ``NAME.tool``, listed the first time they are needed."""

    name: str

    @property
    def idempotent(self) -> bool:
        """Whether its tools' calls may be made again after a crash."""
        ...

    async def tools(self) -> tuple[Tool[Any], ...]:
        """Its tools, as the registry holds them.

        Raises:
            ToolError: they could not be listed (the server is down, say).
        """
        ...

    async def ready(self) -> None:
        """Have its server started and connected, for a call to be made now
        (a server's start-up is not counted against a call's time limit).

        Raises:
            NotReached: it could not be started.
        """
        ...

    async def close(self) -> None:
        """Stop its server, if this process started one."""
        ...


class ToolRegistry:
    """The tools one host offers, by name."""

    def __init__(
        self,
        tools: Iterable[Tool[Any]] = (),
        *,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """A registry holding ``tools``.

        Args:
            tools: Registered in order; a repeated name is an error.
            output_limit: Characters of a tool's output kept before truncating.
            timeout: Seconds a call may take when neither the tool nor the
                caller says.
        """
        if output_limit < 1:
            raise ToolError(f"output_limit must be at least 1, not {output_limit}")
        if timeout <= 0:
            raise ToolError(f"timeout must be positive, not {timeout}")
        self.output_limit = output_limit
        self.timeout = timeout
        self._tools: dict[str, Tool[Any]] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._toolsets: dict[str, Toolset] = {}
        self._loaded: set[str] = set()
        for t in tools:
            self.register(t)

    @classmethod
    def with_builtins(
        cls,
        *,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        timeout: float = DEFAULT_TIMEOUT,
        extra: Iterable[Tool[Any]] = (),
    ) -> ToolRegistry:
        """A registry holding the built-in tools (``files.read/write/list``;
        the ``git.*`` a workflow's worktree is kept with and the
        ``script.run`` of a task program's ``system:run_script``, both
        offered to no model), and ``extra``: the tools kinds give their
        actors (`Kinds.tools`: a session's turns' ``memory.*``,
        ``subagent_spawn`` and ``schedule.*``)."""
        tools = (*files.TOOLS, *git_tools.TOOLS, *script_tools.TOOLS, *extra)
        return cls(tools, output_limit=output_limit, timeout=timeout)

    def register(self, tool: Tool[Any]) -> None:
        """Add a tool; its name must not be taken yet."""
        if tool.name in self._tools:
            raise ToolError(
                f"a tool named {tool.name} is already registered; "
                "give the new one another name"
            )
        # Derived once: specs() is called for every run that starts.
        self._schemas[tool.name] = (
            parameters_schema(tool.args_type)
            if tool.parameters is None
            else tool.parameters
        )
        self._tools[tool.name] = tool

    def add_toolset(self, toolset: Toolset) -> None:
        """Serve the tools of ``toolset`` as ``NAME.tool``, listed the first
        time `load` or a call needs them."""
        prefix = f"{toolset.name}."
        taken = [n for n in self._tools if n.startswith(prefix)]
        if toolset.name in self._toolsets or taken:
            raise ToolError(
                f"tools named {prefix}* are already registered; give the server "
                f"{toolset.name!r} another name"
            )
        self._toolsets[toolset.name] = toolset

    @property
    def toolsets(self) -> tuple[Toolset, ...]:
        """The toolsets added, by name."""
        return tuple(self._toolsets[n] for n in sorted(self._toolsets))

    async def load(self, names: Iterable[str]) -> None:
        """List and register the tools of toolsets ``names`` not yet loaded.

        Raises:
            ToolError: one is not added, or could not be listed (naming it).
        """
        for name in names:
            toolset = self._toolsets.get(name)
            if toolset is None:
                raise ToolError(f"no tool server {name!r} is configured")
            if name in self._loaded:
                continue
            for t in await toolset.tools():
                if t.name.partition(".")[0] != name:
                    raise ToolError(f"{name}: its tool {t.name!r} is not {name}.*")
                if t.name not in self._tools:
                    self.register(t)
            self._loaded.add(name)

    async def close(self) -> None:
        """Stop the toolsets' servers (a host that stops calls this)."""
        for toolset in self._toolsets.values():
            await toolset.close()

    def get(self, name: str) -> Tool[Any]:
        """The tool called ``name``; `ToolError` listing the others if none."""
        try:
            return self._tools[name]
        except KeyError:
            raise ToolError(self._unknown(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted."""
        return tuple(sorted(self._tools))

    def specs(self, allowed: Iterable[str] | None = None) -> tuple[ToolSpec, ...]:
        """What the model is told about the tools it is offered, sorted by name.

        ``allowed`` keeps only those names (``None`` keeps all). A name that is
        not registered is skipped rather than refused: a profile may list tools
        that only some hosts offer.
        """
        keep = None if allowed is None else frozenset(allowed)
        return tuple(
            ToolSpec(
                name=t.name,
                description=t.description,
                parameters=self._schemas[t.name],
                requires_approval=t.requires_approval,
                max_retries=t.max_retries,
            )
            for name, t in sorted(self._tools.items())
            if t.offered and (keep is None or name in keep)
        )

    async def call(
        self,
        name: str,
        args: dict[str, Any],
        *,
        ctx: ToolContext,
        timeout: float | None = None,
    ) -> ToolOutcome:
        """Validate ``args`` and run tool ``name``; never raises for its problems.

        The time limit is the tool's own ``timeout``, else ``timeout``, else the
        registry's default. Every `Exception` becomes an outcome; cancelling the
        caller still cancels the call (and a KeyboardInterrupt or SystemExit
        still stops the process).
        """
        t = await self._find(name)
        if isinstance(t, ToolOutcome):
            return t
        try:
            parsed = (
                AnyArgs(values=args)
                if t.parameters is not None
                else msgspec.convert(args, t.args_type)
            )
        except msgspec.ValidationError as e:
            return ToolOutcome(
                ok=False,
                error=f"invalid arguments for {name}: {_one_line(str(e))}",
                retryable=False,
            )
        except Exception as e:  # an args Struct's own check raised something else
            return ToolOutcome(
                ok=False,
                error=f"invalid arguments for {name}: {describe(e)}",
                retryable=False,
            )

        limit = self.timeout
        if t.timeout is not None:
            limit = t.timeout
        elif timeout is not None:
            limit = timeout
        toolset = self._toolsets.get(name.partition(".")[0])
        try:
            if toolset is not None:  # its start-up is not the call's time
                await toolset.ready()
            deadline = asyncio.timeout(limit)
            async with deadline:
                result = await t.fn(parsed, ctx=ctx)
        except ToolError as e:
            return ToolOutcome(ok=False, error=_one_line(str(e)), retryable=False)
        except TimeoutError as e:
            # A TimeoutError the tool raised itself (a socket, say) is a plain
            # transient failure, not our deadline.
            if not deadline.expired():
                return _unless_once(t, ToolOutcome(ok=False, error=describe(e)))
            failed = ToolOutcome(ok=False, error=f"{name} timed out after {limit:g} s")
            return _unless_once(t, failed)
        except Exception as e:
            if isinstance(e, ConnectionError):  # a server gone: said, no traceback
                _log.warning("tool %s: %s", name, describe(e))
            else:
                _log.warning("tool %s raised", name, exc_info=True)
            failed = ToolOutcome(
                ok=False, error=describe(e), retryable=not is_argument_error(e)
            )
            return failed if isinstance(e, NotReached) else _unless_once(t, failed)

        if isinstance(result, str):
            output = result
        else:
            try:
                output = _json.encode(result).decode()
            except Exception as e:
                # The same value would fail again: a bug in the tool, not luck.
                return ToolOutcome(
                    ok=False,
                    error=f"{name} returned a value that is not JSON: {describe(e)}",
                    retryable=False,
                )
        return self._bounded(output)

    def once_only(self, name: str) -> bool:
        """Whether a call of ``name`` must not be made twice: its tool, or the
        toolset it belongs to (listed or not, up or down), is not idempotent."""
        t = self._tools.get(name)
        if t is not None:
            return not t.idempotent
        toolset = self._toolsets.get(name.partition(".")[0])
        return toolset is not None and not toolset.idempotent

    async def _find(self, name: str) -> Tool[Any] | ToolOutcome:
        server = name.partition(".")[0]
        if name not in self._tools and server in self._toolsets:
            try:
                await self.load([server])
            except ToolError as e:
                # the server may be back for the next try
                return ToolOutcome(ok=False, error=_one_line(str(e)))
        t = self._tools.get(name)
        if t is None:
            return ToolOutcome(ok=False, error=self._unknown(name), retryable=False)
        return t

    def _bounded(self, output: str) -> ToolOutcome:
        over = len(output) - self.output_limit
        if over <= 0:
            return ToolOutcome(ok=True, output=output)
        return ToolOutcome(
            ok=True,
            output=f"{output[: self.output_limit]}\n…[truncated {over} characters]",
            truncated=True,
        )

    def _unknown(self, name: str) -> str:
        available = ", ".join(self.names()) or "none"
        return f"unknown tool {name!r}; available tools: {available}"


def _unless_once(tool: Tool[Any], failed: ToolOutcome) -> ToolOutcome:
    """``failed`` as it stands, or, for a tool that is not idempotent (a call
    cut off may have taken effect), not to be retried, its outcome unknown."""
    if tool.idempotent or not failed.retryable:
        return failed
    return ToolOutcome(
        ok=False,
        error=f"{failed.error}; {OUTCOME_UNKNOWN}",
        retryable=False,
    )


def parameters_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments as a plain object, refs inlined.

    Models expect ``{"type": "object", "properties": ..., "required": ...}`` at
    the top. A recursive Struct cannot be inlined; its schema keeps ``$defs``
    (with ``$ref``s into them) beside the top-level object. The Struct's
    docstring is left out: it is written for programmers, and the model reads
    the tool's own description.
    """
    raw = msgspec.json.schema(args_type)
    defs: dict[str, Any] = raw.get("$defs", {})
    root = _def_name(raw["$ref"])
    schema: dict[str, Any]
    try:
        schema = _inline(defs[root], defs, frozenset({root}))
    except _Recursive:
        schema = {**defs[root], "$defs": defs}
    schema.pop("title", None)
    schema.pop("description", None)
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    return schema


class _Recursive(Exception):
    """A type refers to itself, so its schema cannot be inlined."""


def _inline(node: Any, defs: dict[str, Any], seen: frozenset[str]) -> Any:
    if isinstance(node, list):
        return [_inline(v, defs, seen) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _def_name(ref)
        if target in seen:
            raise _Recursive(target)
        out.update(_inline(defs[target], defs, seen | {target}))
    # `title` is msgspec's class name: noise to a model. Only a schema object
    # (never a `properties` map, whose keys are field names) is stripped.
    out.update(
        (k, _inline(v, defs, seen))
        for k, v in _strip_title(node).items()
        if k != "$ref"
    )
    return out


def _strip_title(schema: dict[str, Any]) -> dict[str, Any]:
    if schema.get("type") == "object" and isinstance(schema.get("title"), str):
        return {k: v for k, v in schema.items() if k != "title"}
    return schema


def _def_name(ref: str) -> str:
    return ref.removeprefix("#/$defs/")


def _one_line(text: str) -> str:
    return " ".join(text.split())
