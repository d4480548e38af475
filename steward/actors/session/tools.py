"""The tools a session's turns have beyond memory: subagents and schedules.

``subagent_spawn`` runs a task as a subagent of the session (isolated
context, its own model), whose reply goes to the chat unless it answers
``{"silent": true}``; ``schedule.create`` / ``schedule.list`` /
``schedule.delete`` keep cron schedules whose firings run as such subagents.
Each tool gives the session an input (`SubagentAsked`, `ScheduleAsked`), so
the change is the session's own event, replayed like any other; a problem
(a bad cron expression, an unknown model, too many subagents) is the tool's
error, in the words the session's decider would refuse it with.

`session_of` finds the session a calling run belongs to (the run's
``context_id``); the ``memory.*`` tools use it too.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from steward.actors.cron import next_firing
from steward.actors.session.events import ScheduleAsked, SubagentAsked
from steward.actors.session.state import (
    Session,
    schedule_problem,
    session_stream,
    subagent_problem,
)
from steward.effects.tools.base import Tool, ToolContext, tool
from steward.errors import ToolError
from steward.isotime import iso_time

__all__ = [
    "TOOLS",
    "Args",
    "schedule_create",
    "schedule_delete",
    "schedule_list",
    "session_of",
    "subagent_spawn",
]


class Args(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model that misspells an argument hears so (forbid_unknown_fields)."""


_Name = Annotated[str, msgspec.Meta(description="A short name, e.g. `weather`.")]
_Task = Annotated[
    str,
    msgspec.Meta(
        description='What to do, in words. Answer {"silent": true} to send nothing.'
    ),
]
_Model = Annotated[
    str | None,
    msgspec.Meta(description="A configured model's name; null: the default."),
]


class SpawnArgs(Args, frozen=True, kw_only=True):
    """Arguments of ``subagent_spawn``."""

    name: _Name
    task: _Task
    model: _Model = None


class CreateArgs(Args, frozen=True, kw_only=True):
    """Arguments of ``schedule.create``."""

    name: _Name
    cron: Annotated[
        str,
        msgspec.Meta(description="When, in cron's five fields (UTC): `0 9 * * 1-5`."),
    ]
    task: _Task
    model: _Model = None


class ListArgs(Args, frozen=True, kw_only=True):
    """Arguments of ``schedule.list`` (none)."""


class DeleteArgs(Args, frozen=True, kw_only=True):
    """Arguments of ``schedule.delete``."""

    name: _Name


async def session_of(ctx: ToolContext, tools: str) -> tuple[str, Session]:
    """The session the calling run belongs to, and its state; ``tools``
    names the tools for the error when there is none."""
    if ctx.actors is None:
        raise ToolError(f"the {tools} tools need a host; none runs this call")
    caller, _ = await ctx.actors.state(ctx.stream) if ctx.stream else (None, 0)
    created = getattr(caller, "created", None)
    session_id = getattr(created, "context_id", None)
    if session_id:
        state, version = await ctx.actors.state(session_stream(session_id))
        if version and isinstance(state, Session):
            return session_id, state
    raise ToolError(
        f"{ctx.stream or 'a call of no actor'} belongs to no chat session: the {tools} "
        "tools work in a session's turns"
    )


async def _give(ctx: ToolContext, session_id: str, input: Any, what: str) -> None:
    """Give the session ``input``; a refusal is the tool's error."""
    assert ctx.actors is not None
    if await ctx.actors.submit(session_stream(session_id), input) is None:
        raise ToolError(f"the session refused {what}")


@tool("subagent_spawn", args_type=SpawnArgs)
async def subagent_spawn(args: SpawnArgs, *, ctx: ToolContext) -> str:
    """Run a task in the background as a subagent (it sees only the newest
    few messages); its answer is sent to this chat when it is done, unless
    it answers {"silent": true}."""
    session_id, state = await session_of(ctx, "subagent")
    problem = subagent_problem(state, args.name, args.task, args.model)
    if problem is not None:
        raise ToolError(problem)
    asked = SubagentAsked(
        request_id=ctx.request_id,
        name=args.name,
        task=args.task,
        model=args.model,
        run_id=ctx.actor_id,
    )
    await _give(ctx, session_id, asked, f"subagent {args.name!r}")
    return f"subagent {args.name!r} started; its answer comes to the chat"


@tool("schedule.create", args_type=CreateArgs)
async def schedule_create(args: CreateArgs, *, ctx: ToolContext) -> str:
    """Create (or replace) a cron schedule: at each firing its task runs as
    a subagent, whose answer is sent to this chat unless it is
    {"silent": true}."""
    session_id, state = await session_of(ctx, "schedule")
    problem = schedule_problem(state, args.name, args.cron, args.task, args.model)
    if problem is not None:
        raise ToolError(problem)
    asked = ScheduleAsked(
        request_id=ctx.request_id,
        name=args.name,
        cron=args.cron,
        task=args.task,
        model=args.model,
        run_id=ctx.actor_id,
        at=ctx.now,
    )
    await _give(ctx, session_id, asked, f"schedule {args.name!r}")
    first = iso_time(next_firing(args.cron, asked.at))  # as the session computed it
    return f"schedule {args.name!r} set ({args.cron}); it fires first at {first}"


@tool("schedule.list", args_type=ListArgs)
async def schedule_list(args: ListArgs, *, ctx: ToolContext) -> list[dict[str, Any]]:
    """This chat's schedules: name, cron, task, model and next firing."""
    _, state = await session_of(ctx, "schedule")
    return [
        {
            "name": s.name,
            "cron": s.cron,
            "task": s.task,
            "model": s.model,
            "next": iso_time(s.due),
        }
        for s in state.schedules
    ]


@tool("schedule.delete", args_type=DeleteArgs)
async def schedule_delete(args: DeleteArgs, *, ctx: ToolContext) -> str:
    """Delete one of this chat's schedules by name."""
    session_id, state = await session_of(ctx, "schedule")
    problem = schedule_problem(state, args.name, None, "", None)
    if problem is not None:
        raise ToolError(problem)
    asked = ScheduleAsked(
        request_id=ctx.request_id, name=args.name, run_id=ctx.actor_id, at=ctx.now
    )
    await _give(ctx, session_id, asked, f"to delete schedule {args.name!r}")
    return f"schedule {args.name!r} deleted"


TOOLS: tuple[Tool[Any], ...] = (
    subagent_spawn,
    schedule_create,
    schedule_list,
    schedule_delete,
)
