"""The tool effect: run one requested tool call and say how it went.

The host decides whether the call is still wanted and claims it; this makes
the call through the registry (which never raises for a tool's problem) and
turns the outcome into the `ToolResulted` the actor gets back, counting it
in the process's metrics.
"""

from __future__ import annotations

from steward.clock import Clock
from steward.effects.tools.base import ToolContext
from steward.effects.tools.registry import ToolRegistry
from steward.events.protocol import ToolRequested, ToolResulted
from steward.metrics import HOST as METRICS

__all__ = ["call_tool"]


async def call_tool(
    tools: ToolRegistry,
    request: ToolRequested,
    ctx: ToolContext,
    *,
    timeout: float,
    clock: Clock,
) -> ToolResulted:
    """Make tool call ``request``; its result (an error is a result too)."""
    METRICS.effects["tool"] += 1
    started = clock.now()
    outcome = await tools.call(
        request.name, request.args, ctx=ctx, timeout=request.timeout or timeout
    )
    took = max(0.0, clock.now() - started)
    METRICS.effect_seconds["tool"].observe(took)
    # a name the model made up is no label of its own: the labels stay few
    METRICS.tool_call(
        request.name if request.name in tools else "unknown", outcome.ok, took
    )
    return ToolResulted(
        request_id=request.request_id,
        ok=outcome.ok,
        output=outcome.output,
        error=outcome.error,
        retryable=outcome.retryable,
        truncated=outcome.truncated,
        at=clock.now(),
    )
