"""The git tools a workflow run's worktree is kept with (not offered to models).

``git.worktree_add`` makes the run's worktree: a new branch from the target
branch, checked out in a directory of its own, where every phase works.
``git.pull_request`` commits what is left uncommitted, pushes the branch
(when the repository has an ``origin``) and opens a pull request with ``gh``
or ``az``; a missing command is said in its output, not a failure.
``git.worktree_remove`` commits what is left (so nothing is lost: the branch
keeps it) and removes the worktree. Each is a workflow's `ToolRequested`,
carried out by the host like any tool call, its `ToolResulted` the
workflow's input; each is safe to run again (a host that died mid-way runs
it again on start).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any, Literal

import msgspec

from steward.effects.tools.base import Tool, ToolContext, tool
from steward.errors import ToolError

__all__ = ["TOOLS", "git"]

_IDENTITY = ("-c", "user.name=steward", "-c", "user.email=steward@localhost")
"""Commits made for a run when the repository names nobody."""


class AddArgs(msgspec.Struct, frozen=True, kw_only=True):
    repository: str
    path: str
    branch: str
    base: str


class RemoveArgs(msgspec.Struct, frozen=True, kw_only=True):
    repository: str
    path: str
    branch: str
    message: str


class PullRequestArgs(msgspec.Struct, frozen=True, kw_only=True):
    tool: Literal["gh", "az"]
    repository: str
    path: str
    branch: str
    base: str
    title: str
    body: str = ""


async def git(*argv: str, cwd: str | Path) -> str:
    """``git ARGV`` in ``cwd``: its standard output, stripped.

    Raises:
        ToolError: git is missing, or the command failed (with its stderr).
    """
    return await _run("git", *argv, cwd=cwd)


async def _run(*argv: str, cwd: str | Path) -> str:
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            # a push that needs a password fails, rather than wait for one
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except FileNotFoundError as e:
        if not Path(cwd).exists():  # a missing cwd is a FileNotFoundError too
            raise ToolError(f"{cwd} does not exist") from None
        raise ToolError(f"{argv[0]} is not installed: {e.strerror}") from None
    except NotADirectoryError:
        raise ToolError(f"{cwd} is not a directory") from None
    try:
        out, err = await process.communicate()
    except BaseException:  # a timeout or a cancel: the command stops too
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    if process.returncode != 0:
        said = (
            " ".join(err.decode(errors="replace").split())
            or f"exit {process.returncode}"
        )
        command = [a for a in argv if not a.startswith("user.")]  # the identity
        command = [a for a in command if a != "-c"][:3]
        raise ToolError(f"`{' '.join(command)}` failed in {cwd}: {said}")
    return out.decode(errors="replace").strip()


async def _branch_exists(repository: str, branch: str) -> bool:
    try:
        await git(
            "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repository
        )
    except ToolError:
        return False
    return True


async def _commit_all(path: str, message: str) -> int:
    """Commit every change in worktree ``path``; how many files changed."""
    changed = await git("status", "--porcelain", cwd=path)
    if not changed:
        return 0
    await git("add", "-A", cwd=path)
    identity = () if await _has_identity(path) else _IDENTITY
    await git(*identity, "commit", "-q", "-m", message, cwd=path)
    return len(changed.splitlines())


async def _has_identity(path: str) -> bool:
    try:
        await git("config", "--get", "user.email", cwd=path)
    except ToolError:
        return False
    return True


@tool("git.worktree_add", args_type=AddArgs, timeout=120.0, offered=False)
async def worktree_add(args: AddArgs, *, ctx: ToolContext) -> str:
    """Make a workflow run's worktree: branch ``branch`` from ``base``,
    checked out at ``path``."""
    if not Path(args.repository).is_dir():
        raise ToolError(f"the repository {args.repository} is not a directory")
    root = await git("rev-parse", "--show-toplevel", cwd=args.repository)
    path = Path(args.path)
    if (path / ".git").exists():  # made already, by this call's earlier try
        head = await git("rev-parse", "HEAD", cwd=path)
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ToolError(
                f"the directory {path.parent} could not be made: {e.strerror}"
            ) from None
        if await _branch_exists(root, args.branch):
            await git("worktree", "add", "-q", str(path), args.branch, cwd=root)
        else:
            await git(
                "worktree",
                "add",
                "-q",
                "-b",
                args.branch,
                str(path),
                args.base,
                cwd=root,
            )
        head = await git("rev-parse", "HEAD", cwd=path)
    return json.dumps({"path": str(path), "branch": args.branch, "head": head})


@tool("git.worktree_remove", args_type=RemoveArgs, timeout=120.0, offered=False)
async def worktree_remove(args: RemoveArgs, *, ctx: ToolContext) -> str:
    """Commit what a workflow run's worktree holds uncommitted, then remove
    the worktree (its branch stays)."""
    path = Path(args.path)
    if not path.exists():
        return f"{path} is gone already; branch {args.branch} stays"
    committed = await _commit_all(str(path), args.message)
    head = await git("rev-parse", "--short", "HEAD", cwd=path)
    await git("worktree", "remove", "--force", str(path), cwd=args.repository)
    await git("worktree", "prune", cwd=args.repository)
    files = "1 change" if committed == 1 else f"{committed} changes"
    kept = f", {files} committed" if committed else ""
    return f"removed {path}; branch {args.branch} at {head}{kept}"


@tool("git.pull_request", args_type=PullRequestArgs, timeout=300.0, offered=False)
async def pull_request(args: PullRequestArgs, *, ctx: ToolContext) -> str:
    """Open a pull request of a workflow run's branch with ``gh`` or ``az``."""
    if shutil.which(args.tool) is None:
        return (
            f"{args.tool} is not installed: no pull request was opened; branch "
            f"{args.branch} holds the work (open one by hand)"
        )
    await _commit_all(args.path, args.title)
    remotes = (await git("remote", cwd=args.path)).split()
    if "origin" not in remotes:
        return f"the repository has no origin to push {args.branch} to: no pull request"
    await git("push", "-q", "-u", "origin", args.branch, cwd=args.path)
    if args.tool == "gh":
        argv = ["gh", "pr", "create", "--base", args.base, "--head", args.branch]
        argv += ["--title", args.title, "--body", args.body or args.title]
    else:
        argv = ["az", "repos", "pr", "create", "--source-branch", args.branch]
        argv += ["--target-branch", args.base, "--title", args.title]
        argv += ["--description", args.body or args.title]
    return await _run(*argv, cwd=args.path)


TOOLS: tuple[Tool[Any], ...] = (worktree_add, worktree_remove, pull_request)
"""Registered by `ToolRegistry.with_builtins`, offered to no model."""
