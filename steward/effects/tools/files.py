"""The built-in ``files.*`` tools, confined to the run's workspace directory.

Every path is relative to ``ctx.workspace``. An absolute path, a ``..`` that
climbs out, or a symlink whose real target lies outside is refused with
`PathEscapeError`: the check is on the fully resolved real path, so no chain of
links or dots gets around it. Any other path the operating system refuses (too
long, a file where a folder should be, not permitted, a symlink loop) is a
`ToolError` naming the path: the model's mistake to correct, not a failure to
retry.

The I/O runs in a worker thread (`asyncio.to_thread`): a model can ask for a
large file or a workspace on a slow disk, and blocking the event loop would
stall every other actor on the host, not just this run. A timed-out call's
thread finishes on its own; its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import pathlib
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import msgspec

from steward.effects.tools.base import Tool, ToolContext, is_argument_error, tool
from steward.errors import PathEscapeError, ToolError

__all__ = ["ListArgs", "ReadArgs", "TOOLS", "WriteArgs", "list_files", "read", "write"]

_PATH = "Path relative to the workspace, e.g. `notes/plan.md`."


# A model that misspells an argument (`file` for `path`) hears so, rather than
# having it silently ignored: hence forbid_unknown_fields.
class ReadArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``files.read``."""

    path: Annotated[str, msgspec.Meta(description=_PATH)]
    offset: Annotated[
        int, msgspec.Meta(ge=0, description="Lines to skip from the start.")
    ] = 0
    limit: (
        Annotated[int, msgspec.Meta(ge=1, description="Most lines to return.")] | None
    ) = None


class WriteArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``files.write``."""

    path: Annotated[str, msgspec.Meta(description=_PATH)]
    content: Annotated[str, msgspec.Meta(description="Text to write (UTF-8).")]
    mode: Annotated[
        Literal["replace", "append"],
        msgspec.Meta(description="Replace the file or append to its end."),
    ] = "replace"


class ListArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Arguments of ``files.list``."""

    path: Annotated[
        str, msgspec.Meta(description="Directory relative to the workspace.")
    ] = "."


@tool("files.read")
async def read(args: ReadArgs, *, ctx: ToolContext) -> str:
    """Read a text file in the workspace, optionally a range of its lines."""
    with _path_errors(args.path):
        return await asyncio.to_thread(_read, ctx.workspace, args)


@tool("files.write")
async def write(args: WriteArgs, *, ctx: ToolContext) -> str:
    """Write or append text to a file in the workspace, creating its folders."""
    with _path_errors(args.path):
        return await asyncio.to_thread(_write, ctx.workspace, args)


@tool("files.list")
async def list_files(args: ListArgs, *, ctx: ToolContext) -> str:
    """List a workspace directory, one entry a line; folders end with `/`."""
    with _path_errors(args.path):
        return await asyncio.to_thread(_list, ctx.workspace, args)


TOOLS: tuple[Tool[Any], ...] = (read, write, list_files)
"""The built-ins, in the order `ToolRegistry.with_builtins` registers them."""


def resolve(workspace: pathlib.Path, path: str) -> pathlib.Path:
    """The real path ``path`` names inside ``workspace``.

    Raises:
        PathEscapeError: it is absolute or resolves outside the workspace.
        ToolError: the workspace is missing or the path is malformed.
    """
    root = workspace.resolve()
    if not root.is_dir():
        raise ToolError(f"the workspace {root} is not a directory; create it first")
    if "\0" in path:
        raise ToolError(f"path {path!r} contains a NUL character")
    if pathlib.PurePath(path).is_absolute():
        raise PathEscapeError(path, str(root))
    # resolve() follows every symlink (dangling ones too) and folds `..` after
    # them, so the containment check sees where the I/O would really land.
    try:
        target = (root / path).resolve()
    except RuntimeError:  # what Python 3.11 raises for a loop of symlinks
        raise ToolError(f"path {_shown(path)} is a loop of symbolic links") from None
    if not target.is_relative_to(root):
        raise PathEscapeError(path, str(root))
    return target


@contextlib.contextmanager
def _path_errors(path: str) -> Iterator[None]:
    """Turn an OSError that ``path`` caused into a `ToolError` naming it."""
    try:
        yield
    except OSError as e:
        if not is_argument_error(e):
            raise  # a full disk, an I/O error: transient, the registry retries
        reason = e.strerror or type(e).__name__
        raise ToolError(f"cannot use path {_shown(path)}: {reason}") from None


def _shown(path: str) -> str:
    """``path`` quoted for a message, cut short if long."""
    if len(path) <= 80:
        return repr(path)
    return f"{path[:60]!r}… ({len(path)} characters)"


def _read(workspace: pathlib.Path, args: ReadArgs) -> str:
    target = resolve(workspace, args.path)
    stop = None if args.limit is None else args.offset + args.limit
    try:
        with target.open(encoding="utf-8", newline="") as f:
            return "".join(itertools.islice(f, args.offset, stop))
    except FileNotFoundError:
        raise ToolError(
            f"no file {args.path!r} in the workspace; files.list shows what is there"
        ) from None
    except IsADirectoryError:
        raise ToolError(
            f"{args.path!r} is a directory; use files.list to see inside it"
        ) from None
    except UnicodeDecodeError:
        raise ToolError(f"{args.path!r} is not UTF-8 text") from None
    except PermissionError:
        raise ToolError(f"{args.path!r} is not readable") from None


def _write(workspace: pathlib.Path, args: WriteArgs) -> str:
    target = resolve(workspace, args.path)
    data = args.content.encode("utf-8")
    try:
        # target is resolved and inside the workspace, so its parents are too.
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("ab" if args.mode == "append" else "wb") as f:
            f.write(data)
    except IsADirectoryError:
        raise ToolError(f"{args.path!r} is a directory, not a file") from None
    except (FileExistsError, NotADirectoryError):
        raise ToolError(
            f"cannot create {args.path!r}: a part of its path is a file"
        ) from None
    except PermissionError:
        raise ToolError(f"{args.path!r} is not writable") from None
    verb = "appended" if args.mode == "append" else "wrote"
    shown = target.relative_to(workspace.resolve()).as_posix()
    return f"{verb} {len(data)} bytes to {shown}"


def _list(workspace: pathlib.Path, args: ListArgs) -> str:
    target = resolve(workspace, args.path)
    try:
        entries = [
            f"{entry.name}/" if entry.is_dir() else entry.name
            for entry in sorted(target.iterdir(), key=lambda e: e.name)
        ]
    except FileNotFoundError:
        raise ToolError(f"no directory {args.path!r} in the workspace") from None
    except NotADirectoryError:
        raise ToolError(
            f"{args.path!r} is a file, not a directory; use files.read"
        ) from None
    except PermissionError:
        raise ToolError(f"{args.path!r} is not readable") from None
    return "\n".join(entries) if entries else "(empty directory)"
