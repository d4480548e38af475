"""``script.run``: a task program's ``(system:run_script COMMAND)``.

The command runs in ``sh`` in the actor's workspace (its files tools'
directory), with the registry's time limit, standard input closed; at its
time limit, or when its call is cancelled, its whole process group is
killed (what it started in the background too). Its
result is JSON, ``{"exit": N, "output": "..."}`` (standard output and error,
interleaved as written): a command that fails is an answer the program reads
(a test run that fails tells the Director-Evaluator loop what to fix), not a
failed call. Offered to no model: only a program's own form calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from typing import Any

import msgspec

from steward.effects.tools.base import Tool, ToolContext, tool
from steward.errors import ToolError

__all__ = ["TOOLS", "run_script"]


class ScriptArgs(msgspec.Struct, frozen=True, kw_only=True):
    command: str


@tool("script.run", args_type=ScriptArgs, offered=False)
async def run_script(args: ScriptArgs, *, ctx: ToolContext) -> str:
    """Run a shell command in the workspace; its exit status and output."""
    if not args.command.strip():
        raise ToolError("script.run needs a command")
    if not ctx.workspace.is_dir():
        raise ToolError(f"the workspace {ctx.workspace} is not a directory")
    process = await asyncio.create_subprocess_shell(
        args.command,
        cwd=ctx.workspace,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
        start_new_session=True,  # its own process group, to stop it whole
    )
    try:
        out, _ = await process.communicate()
    except BaseException:  # a timeout or a cancel: the command stops too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its children too
        await process.wait()
        raise
    output = out.decode(errors="replace")
    return json.dumps({"exit": process.returncode, "output": output})


TOOLS: tuple[Tool[Any], ...] = (run_script,)
"""Registered by `ToolRegistry.with_builtins`, offered to no model."""
