"""The built-in files.* tools: what they do, and that they stay in the workspace."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

from steward.effects.tools import ToolContext, ToolOutcome, ToolRegistry, files
from steward.errors import PathEscapeError, ToolError


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def outside(tmp_path: pathlib.Path) -> pathlib.Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret")
    return out


async def _call(workspace: pathlib.Path, name: str, **args: Any) -> ToolOutcome:
    ctx = ToolContext(workspace=workspace, stream="run.run-1")
    return await ToolRegistry.with_builtins().call(name, args, ctx=ctx)


def _escape(path: str, workspace: pathlib.Path) -> str:
    return str(PathEscapeError(path, str(workspace.resolve())))


# -- what they do -----------------------------------------------------------------


async def test_write_read_list_round_trip(workspace: pathlib.Path) -> None:
    """A written file reads back unchanged and shows up in the listing."""
    wrote = await _call(workspace, "files.write", path="notes.md", content="hi\n")
    assert wrote == ToolOutcome(ok=True, output="wrote 3 bytes to notes.md")
    assert await _call(workspace, "files.read", path="notes.md") == ToolOutcome(
        ok=True, output="hi\n"
    )
    listed = await _call(workspace, "files.list")
    assert listed == ToolOutcome(ok=True, output="notes.md")


async def test_write_creates_parent_directories(workspace: pathlib.Path) -> None:
    """files.write creates the missing folders of its path inside the workspace."""
    outcome = await _call(workspace, "files.write", path="a/b/c.txt", content="x")
    assert outcome.output == "wrote 1 bytes to a/b/c.txt"
    assert (workspace / "a" / "b" / "c.txt").read_text() == "x"


async def test_append_adds_to_the_end_and_counts_utf8_bytes(
    workspace: pathlib.Path,
) -> None:
    """mode=append keeps what is there; the count is of UTF-8 bytes."""
    await _call(workspace, "files.write", path="log.txt", content="one\n")
    outcome = await _call(
        workspace, "files.write", path="log.txt", content="né\n", mode="append"
    )
    assert outcome.output == "appended 4 bytes to log.txt"
    assert (workspace / "log.txt").read_text(encoding="utf-8") == "one\nné\n"


async def test_replace_overwrites(workspace: pathlib.Path) -> None:
    """The default mode replaces the file's content."""
    await _call(workspace, "files.write", path="f.txt", content="long old text")
    await _call(workspace, "files.write", path="f.txt", content="new")
    assert (workspace / "f.txt").read_text() == "new"


async def test_read_offset_and_limit_select_lines(workspace: pathlib.Path) -> None:
    """offset skips lines and limit caps how many come back."""
    (workspace / "f.txt").write_text("l0\nl1\nl2\nl3\n")
    some = await _call(workspace, "files.read", path="f.txt", offset=1, limit=2)
    assert some.output == "l1\nl2\n"
    rest = await _call(workspace, "files.read", path="f.txt", offset=3)
    assert rest.output == "l3\n"


async def test_read_rejects_a_negative_offset(workspace: pathlib.Path) -> None:
    """offset must be >= 0, checked by validation with its path."""
    outcome = await _call(workspace, "files.read", path="f.txt", offset=-1)
    assert outcome.error == (
        "invalid arguments for files.read: Expected `int` >= 0 - at `$.offset`"
    )


async def test_unknown_argument_is_refused(workspace: pathlib.Path) -> None:
    """A misspelt argument is reported instead of silently ignored."""
    outcome = await _call(workspace, "files.read", file="f.txt")
    assert outcome.error == (
        "invalid arguments for files.read: Object contains unknown field `file`"
    )


async def test_list_is_sorted_and_marks_directories(workspace: pathlib.Path) -> None:
    """files.list sorts by name and ends directory names with `/`."""
    (workspace / "b.txt").write_text("")
    (workspace / "a").mkdir()
    (workspace / "a" / "inner.txt").write_text("")
    (workspace / "c").mkdir()
    assert (await _call(workspace, "files.list")).output == "a/\nb.txt\nc/"
    assert (await _call(workspace, "files.list", path="a")).output == "inner.txt"
    assert (await _call(workspace, "files.list", path="c")).output == (
        "(empty directory)"
    )


async def test_dotdot_that_stays_inside_is_allowed(workspace: pathlib.Path) -> None:
    """A `..` that does not leave the workspace is fine."""
    (workspace / "sub").mkdir()
    (workspace / "f.txt").write_text("ok")
    outcome = await _call(workspace, "files.read", path="sub/../f.txt")
    assert outcome.output == "ok"


async def test_symlink_inside_the_workspace_is_allowed(
    workspace: pathlib.Path,
) -> None:
    """A symlink whose target is inside the workspace is followed."""
    (workspace / "real.txt").write_text("real")
    (workspace / "link.txt").symlink_to(workspace / "real.txt")
    assert (await _call(workspace, "files.read", path="link.txt")).output == "real"


# -- what they refuse -------------------------------------------------------------


async def test_missing_file_is_a_clear_non_retryable_error(
    workspace: pathlib.Path,
) -> None:
    """Reading a missing file says so and points at files.list; not retryable."""
    outcome = await _call(workspace, "files.read", path="nope.txt")
    assert outcome == ToolOutcome(
        ok=False,
        error="no file 'nope.txt' in the workspace; files.list shows what is there",
        retryable=False,
    )


async def test_missing_directory_is_a_clear_error(workspace: pathlib.Path) -> None:
    """Listing a missing directory says so; not retryable."""
    outcome = await _call(workspace, "files.list", path="nope")
    assert outcome.error == "no directory 'nope' in the workspace"
    assert not outcome.retryable


async def test_read_of_a_directory_points_at_list(workspace: pathlib.Path) -> None:
    """Reading a directory says to list it instead."""
    (workspace / "d").mkdir()
    outcome = await _call(workspace, "files.read", path="d")
    assert outcome.error == "'d' is a directory; use files.list to see inside it"


async def test_list_of_a_file_points_at_read(workspace: pathlib.Path) -> None:
    """Listing a file says to read it instead."""
    (workspace / "f.txt").write_text("")
    outcome = await _call(workspace, "files.list", path="f.txt")
    assert outcome.error == "'f.txt' is a file, not a directory; use files.read"


async def test_write_through_a_file_is_refused(workspace: pathlib.Path) -> None:
    """A path whose folder part is an existing file is a clear error."""
    (workspace / "f.txt").write_text("")
    outcome = await _call(workspace, "files.write", path="f.txt/x", content="")
    assert outcome.error == "cannot create 'f.txt/x': a part of its path is a file"


async def test_binary_file_is_refused(workspace: pathlib.Path) -> None:
    """A file that is not UTF-8 text is a clear error."""
    (workspace / "b.bin").write_bytes(b"\xff\xfe\x00")
    outcome = await _call(workspace, "files.read", path="b.bin")
    assert outcome.error == "'b.bin' is not UTF-8 text"


LONG = "a" * 300
"""A file name longer than any file system allows (255 bytes)."""
_LONG_SHOWN = f"{LONG[:60]!r}… (300 characters)"


@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        (
            "files.read",
            {"path": LONG},
            f"cannot use path {_LONG_SHOWN}: File name too long",
        ),
        (
            "files.write",
            {"path": LONG, "content": "x"},
            f"cannot use path {_LONG_SHOWN}: File name too long",
        ),
        (
            "files.write",
            {"path": f"{LONG}/notes.md", "content": "x"},
            f"cannot use path {f'{LONG}/notes.md'[:60]!r}… (309 characters): "
            "File name too long",
        ),
        (
            "files.list",
            {"path": LONG},
            f"cannot use path {_LONG_SHOWN}: File name too long",
        ),
        (
            "files.read",
            {"path": "d/" * 3000},
            f"cannot use path {('d/' * 30)!r}… (6000 characters): File name too long",
        ),
        (
            "files.read",
            {"path": "f.txt/x"},
            "cannot use path 'f.txt/x': Not a directory",
        ),
        (
            "files.read",
            {"path": "d"},
            "'d' is a directory; use files.list to see inside it",
        ),
        (
            "files.write",
            {"path": "d", "content": "x"},
            "'d' is a directory, not a file",
        ),
        ("files.read", {"path": "loop"}, "path 'loop' is a loop of symbolic links"),
        ("files.list", {"path": "loop"}, "path 'loop' is a loop of symbolic links"),
        ("files.read", {"path": "a\0b"}, "path 'a\\x00b' contains a NUL character"),
        (
            "files.write",
            {"path": "a\0b", "content": "x"},
            "path 'a\\x00b' contains a NUL character",
        ),
        ("files.list", {"path": "a\0b"}, "path 'a\\x00b' contains a NUL character"),
    ],
    ids=[
        "read-long-name",
        "write-long-name",
        "write-long-folder",
        "list-long-name",
        "read-long-path",
        "read-through-a-file",
        "read-a-directory",
        "write-a-directory",
        "read-a-symlink-loop",
        "list-a-symlink-loop",
        "read-nul",
        "write-nul",
        "list-nul",
    ],
)
async def test_a_bad_path_is_a_one_line_error_the_model_can_correct(
    workspace: pathlib.Path, name: str, args: dict[str, Any], error: str
) -> None:
    """A path the OS refuses is a one-line, non-retryable error naming it, from
    the registry's call, never an exception or a retryable failure."""
    (workspace / "f.txt").write_text("")
    (workspace / "d").mkdir()
    (workspace / "loop").symlink_to(workspace / "pool")
    (workspace / "pool").symlink_to(workspace / "loop")
    outcome = await _call(workspace, name, **args)
    assert outcome == ToolOutcome(ok=False, error=error, retryable=False)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may read and write anything")
@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        ("files.read", {"path": "locked/f.txt"}, "'locked/f.txt' is not readable"),
        (
            "files.write",
            {"path": "locked/f.txt", "content": "x"},
            "'locked/f.txt' is not writable",
        ),
        ("files.list", {"path": "locked"}, "'locked' is not readable"),
    ],
)
async def test_a_path_without_permission_is_a_clear_error(
    workspace: pathlib.Path, name: str, args: dict[str, Any], error: str
) -> None:
    """A path the process may not use is a non-retryable error naming it."""
    locked = workspace / "locked"
    locked.mkdir()
    (locked / "f.txt").write_text("")
    locked.chmod(0)
    try:
        outcome = await _call(workspace, name, **args)
    finally:
        locked.chmod(0o700)
    assert outcome == ToolOutcome(ok=False, error=error, retryable=False)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("files.read", {}),
        ("files.write", {"content": "pwned"}),
        ("files.list", {}),
    ],
)
@pytest.mark.parametrize("path", ["../outside/secret.txt", "a/../../outside", ".."])
async def test_dotdot_escape_is_refused(
    workspace: pathlib.Path,
    outside: pathlib.Path,
    name: str,
    args: dict[str, Any],
    path: str,
) -> None:
    """A `..` that climbs out of the workspace is refused by every files tool."""
    outcome = await _call(workspace, name, path=path, **args)
    assert outcome == ToolOutcome(
        ok=False, error=_escape(path, workspace), retryable=False
    )
    assert (outside / "secret.txt").read_text() == "top secret"


@pytest.mark.parametrize("name", ["files.read", "files.write", "files.list"])
async def test_absolute_path_is_refused(
    workspace: pathlib.Path, outside: pathlib.Path, name: str
) -> None:
    """An absolute path is refused, even one that points inside the workspace."""
    for path in (str(outside / "secret.txt"), str(workspace / "f.txt")):
        args = {"content": "x"} if name == "files.write" else {}
        outcome = await _call(workspace, name, path=path, **args)
        assert outcome.error == _escape(path, workspace)
        assert outcome.error.endswith(": use a relative path inside it")
        assert not outcome.retryable


async def test_symlink_to_a_file_outside_is_refused(
    workspace: pathlib.Path, outside: pathlib.Path
) -> None:
    """A symlink resolving outside cannot be read or written through."""
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    read = await _call(workspace, "files.read", path="link.txt")
    assert read.error == _escape("link.txt", workspace)
    write = await _call(workspace, "files.write", path="link.txt", content="x")
    assert write.error == _escape("link.txt", workspace)
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_symlinked_directory_outside_is_refused(
    workspace: pathlib.Path, outside: pathlib.Path
) -> None:
    """A path through a symlinked directory that leads outside is refused."""
    (workspace / "d").symlink_to(outside, target_is_directory=True)
    for name, args in [
        ("files.list", {"path": "d"}),
        ("files.read", {"path": "d/secret.txt"}),
        ("files.write", {"path": "d/new.txt", "content": "x"}),
    ]:
        outcome = await _call(workspace, name, **args)
        assert outcome.error == _escape(args["path"], workspace), name
    assert not (outside / "new.txt").exists()


async def test_dangling_symlink_outside_cannot_be_created_through(
    workspace: pathlib.Path, outside: pathlib.Path
) -> None:
    """Writing through a dangling link to outside does not create the target."""
    (workspace / "link.txt").symlink_to(outside / "made.txt")
    outcome = await _call(workspace, "files.write", path="link.txt", content="x")
    assert outcome.error == _escape("link.txt", workspace)
    assert not (outside / "made.txt").exists()


def test_resolve_raises_path_escape_error(workspace: pathlib.Path) -> None:
    """resolve() raises PathEscapeError naming the path and the workspace."""
    with pytest.raises(PathEscapeError, match=r"path '\.\./x' resolves outside") as e:
        files.resolve(workspace, "../x")
    assert e.value.path == "../x"
    assert e.value.workspace == str(workspace.resolve())


def test_resolve_refuses_a_missing_workspace(tmp_path: pathlib.Path) -> None:
    """A workspace that does not exist is a ToolError, not silently created."""
    with pytest.raises(ToolError, match="is not a directory; create it first"):
        files.resolve(tmp_path / "nope", "f.txt")


def test_resolve_refuses_a_nul_character(workspace: pathlib.Path) -> None:
    """A NUL in a path is a ToolError rather than an OS-level ValueError."""
    with pytest.raises(ToolError, match="contains a NUL character"):
        files.resolve(workspace, "a\0b")
