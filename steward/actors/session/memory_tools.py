"""The ``memory.*`` tools of a session's turns: archival search, and core
memory read and written.

A turn's run (and its subagents) belong to the session named by the run's
``context_id``. ``memory.search`` reads the session's memory views
(`steward.actors.session.projection.search`: memory items and every message,
FTS5); ``memory.core_get`` reads core memory from the session's state;
``memory.core_set`` gives the session a `CoreMemorySet` input, so the change
is the session's own event, replayed like any other. A run outside a session
hears so as a tool error.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from steward.actors.session.events import CoreMemorySet
from steward.actors.session.state import (
    core_memory_text,
    core_set_problem,
    session_stream,
)
from steward.actors.session.tools import Args as _Args
from steward.actors.session.tools import session_of
from steward.effects.tools.base import Tool, ToolContext, tool
from steward.errors import ToolError

__all__ = ["TOOLS", "core_get", "core_set", "search"]


class SearchArgs(_Args, frozen=True, kw_only=True):
    """Arguments of ``memory.search``."""

    query: Annotated[str, msgspec.Meta(description="Words to look for.")]
    limit: Annotated[
        int, msgspec.Meta(ge=1, le=50, description="Most results to return.")
    ] = 10


class CoreGetArgs(_Args, frozen=True, kw_only=True):
    """Arguments of ``memory.core_get`` (none)."""


class CoreSetArgs(_Args, frozen=True, kw_only=True):
    """Arguments of ``memory.core_set``."""

    key: Annotated[str, msgspec.Meta(description="The fact's name, e.g. `name`.")]
    value: Annotated[
        str | None,
        msgspec.Meta(description="Its value; null removes the key."),
    ]


@tool("memory.search", args_type=SearchArgs)
async def search(args: SearchArgs, *, ctx: ToolContext) -> Any:
    """Search this chat's archival memory (memory items and every earlier
    message, all segments) for the query's words; the best matches first."""
    session_id, _ = await session_of(ctx, "memory")
    if ctx.reads is None:
        raise ToolError("this host keeps no projections to search")
    hits = await ctx.reads.search_memory(session_id, args.query, args.limit)
    return [{"source": source, "text": text} for source, text, _ in hits]


@tool("memory.core_get", args_type=CoreGetArgs)
async def core_get(args: CoreGetArgs, *, ctx: ToolContext) -> str:
    """This chat's core memory (always in your context too) and the memory
    items you see, a line each."""
    _, state = await session_of(ctx, "memory")
    return core_memory_text(state) or "(core memory is empty)"


@tool("memory.core_set", args_type=CoreSetArgs)
async def core_set(args: CoreSetArgs, *, ctx: ToolContext) -> str:
    """Set a fact in this chat's core memory (kept across /new and shown in
    every turn); a null value removes the key. Keep it short: core memory
    holds 2000 characters."""
    session_id, state = await session_of(ctx, "memory")
    problem = core_set_problem(state, args.key, args.value)
    if problem is not None:
        raise ToolError(problem)
    assert ctx.actors is not None
    change = CoreMemorySet(
        request_id=ctx.request_id, key=args.key, value=args.value, run_id=ctx.actor_id
    )
    if await ctx.actors.submit(session_stream(session_id), change) is None:
        raise ToolError(f"the session refused to set {args.key!r}")
    return f"core memory {args.key!r} " + ("removed" if args.value is None else "set")


TOOLS: tuple[Tool[Any], ...] = (search, core_get, core_set)
