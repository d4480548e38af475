"""The tool registry: specs, validation, and every way a call can go wrong."""

from __future__ import annotations

import asyncio
import datetime
import errno
import pathlib
from typing import Any, Literal

import msgspec
import pytest

from steward.effects.tools import Tool, ToolContext, ToolOutcome, ToolRegistry, tool
from steward.effects.tools.registry import parameters_schema
from steward.errors import PathEscapeError, ToolError


class Point(msgspec.Struct, frozen=True, kw_only=True):
    x: int
    y: int = 0


class EchoArgs(msgspec.Struct, frozen=True, kw_only=True):
    """Arguments of echo."""

    text: str
    times: int = 1
    style: Literal["plain", "loud"] = "plain"
    at: Point | None = None
    points: list[Point] = []


class Node(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    children: list[Node] = []


class NoArgs(msgspec.Struct, frozen=True, kw_only=True):
    pass


@tool("echo", requires_approval=True, max_retries=3)
async def echo(args: EchoArgs, *, ctx: ToolContext) -> str:
    """Say the text back."""
    return args.text * args.times


@tool("nothing")
async def nothing(args: NoArgs, *, ctx: ToolContext) -> str:
    return ""


def _ctx(tmp_path: pathlib.Path | None = None) -> ToolContext:
    return ToolContext(workspace=tmp_path or pathlib.Path("."), stream="run.run-1")


def _registry(*tools: Tool[Any], **kwargs: Any) -> ToolRegistry:
    return ToolRegistry([echo, nothing, *tools], **kwargs)


def _raising(exc: BaseException) -> Tool[NoArgs]:
    async def fn(args: NoArgs, *, ctx: ToolContext) -> str:
        raise exc

    return Tool(name="bad", description="", args_type=NoArgs, fn=fn)


def _returning(value: object, name: str = "out") -> Tool[NoArgs]:
    async def fn(args: NoArgs, *, ctx: ToolContext) -> object:
        return value

    return Tool(name=name, description="", args_type=NoArgs, fn=fn)


# -- declaring and describing ---------------------------------------------------


def test_decorator_takes_args_type_and_description_from_the_function() -> None:
    """@tool reads the args Struct off the first parameter and the docstring."""
    assert echo.args_type is EchoArgs
    assert echo.description == "Say the text back."
    assert (echo.requires_approval, echo.max_retries, echo.timeout) == (True, 3, None)


def test_tool_refuses_a_sync_function() -> None:
    """A tool must be `async def`, checked when it is declared."""

    def sync(args: NoArgs, *, ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ToolError, match="must be `async def`"):
        Tool(name="sync", description="", args_type=NoArgs, fn=sync)  # type: ignore[arg-type]


def test_tool_refuses_args_type_that_is_not_a_struct() -> None:
    """args_type must be a msgspec Struct, checked when it is declared."""
    with pytest.raises(ToolError, match="args_type must be a msgspec Struct"):
        Tool(name="t", description="", args_type=dict, fn=echo.fn)  # type: ignore[arg-type,type-var]


def test_schema_is_a_plain_object_with_required_fields_and_types() -> None:
    """parameters is `type: object` with properties/required and no $ref."""
    schema = parameters_schema(EchoArgs)
    assert schema["type"] == "object"
    assert schema["required"] == ["text"]
    props = schema["properties"]
    assert props["text"] == {"type": "string"}
    assert props["times"] == {"type": "integer", "default": 1}
    assert props["style"]["enum"] == ["loud", "plain"]
    assert "$ref" not in msgspec.json.encode(schema).decode()
    assert "title" not in schema and "description" not in schema


def test_schema_inlines_nested_structs() -> None:
    """A nested Struct's schema is inlined where it is used, not referenced."""
    props = parameters_schema(EchoArgs)["properties"]
    point = {
        "type": "object",
        "properties": {
            "x": {"type": "integer"},
            "y": {"type": "integer", "default": 0},
        },
        "required": ["x"],
    }
    assert props["at"]["anyOf"] == [point, {"type": "null"}]
    assert props["points"]["items"] == point


def test_schema_of_a_recursive_struct_keeps_defs_under_an_object() -> None:
    """A recursive Struct keeps $defs, but the top level is still an object."""
    schema = parameters_schema(Node)
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    assert "Node" in schema["$defs"]


def test_schema_of_empty_args_has_properties_and_required() -> None:
    """A tool without arguments still gets empty properties and required."""
    assert parameters_schema(NoArgs) == {
        "type": "object",
        "properties": {},
        "required": [],
    }


def test_specs_are_sorted_and_carry_approval_and_retries() -> None:
    """specs() is sorted by name and carries requires_approval and max_retries."""
    specs = ToolRegistry([nothing, echo]).specs()
    assert [s.name for s in specs] == ["echo", "nothing"]
    assert specs[0].requires_approval is True
    assert specs[0].max_retries == 3
    assert specs[0].description == "Say the text back."
    assert specs[0].parameters == parameters_schema(EchoArgs)
    assert (specs[1].requires_approval, specs[1].max_retries) == (False, None)


def test_specs_keep_only_allowed_names() -> None:
    """specs(allowed) keeps those names and skips ones not registered."""
    specs = _registry().specs(allowed=["nothing", "files.read"])
    assert [s.name for s in specs] == ["nothing"]
    assert _registry().specs(allowed=[]) == ()


def test_register_refuses_a_taken_name() -> None:
    """Two tools cannot share a name."""
    with pytest.raises(ToolError, match="a tool named echo is already registered"):
        _registry(echo)


def test_get_names_the_tool_or_lists_the_others() -> None:
    """get() returns the tool, or raises ToolError listing what exists."""
    registry = _registry()
    assert registry.get("echo") is echo
    assert "echo" in registry and "nope" not in registry
    assert registry.names() == ("echo", "nothing")
    with pytest.raises(ToolError, match="unknown tool 'nope'; available tools: echo"):
        registry.get("nope")


def test_with_builtins_registers_the_files_tools() -> None:
    """with_builtins() holds files.read, files.write and files.list, offered
    to models, and the git tools of workflow worktrees and a task program's
    script.run, offered to none."""
    registry = ToolRegistry.with_builtins()
    assert registry.names() == (
        "files.list",
        "files.read",
        "files.write",
        "git.pull_request",
        "git.worktree_add",
        "git.worktree_remove",
        "script.run",
    )
    assert [s.name for s in registry.specs()] == [
        "files.list",
        "files.read",
        "files.write",
    ]


# -- calling ----------------------------------------------------------------------


async def test_call_runs_the_tool_with_validated_args() -> None:
    """A good call returns ok with the tool's string output."""
    outcome = await _registry().call("echo", {"text": "ab", "times": 2}, ctx=_ctx())
    assert outcome == ToolOutcome(ok=True, output="abab")


async def test_unknown_tool_lists_available_tools_sorted() -> None:
    """An unknown name is a non-retryable outcome listing the tools, sorted."""
    outcome = await ToolRegistry([nothing, echo]).call("ehco", {}, ctx=_ctx())
    assert outcome == ToolOutcome(
        ok=False,
        error="unknown tool 'ehco'; available tools: echo, nothing",
        retryable=False,
    )


async def test_invalid_argument_type_pins_the_field_path() -> None:
    """A wrongly typed argument names the tool, the problem and its `$.path`."""
    outcome = await _registry().call("echo", {"text": 5}, ctx=_ctx())
    assert not outcome.ok and not outcome.retryable
    assert outcome.error == (
        "invalid arguments for echo: Expected `str`, got `int` - at `$.text`"
    )


async def test_invalid_nested_argument_pins_the_nested_path() -> None:
    """msgspec's path reaches into nested Structs and lists."""
    args = {"text": "a", "points": [{"x": 1}, {"x": "2"}]}
    outcome = await _registry().call("echo", args, ctx=_ctx())
    assert outcome.error is not None
    assert outcome.error.endswith("at `$.points[1].x`")


async def test_missing_argument_is_not_retryable() -> None:
    """A missing required argument says which one, and is not retryable."""
    outcome = await _registry().call("echo", {}, ctx=_ctx())
    assert outcome == ToolOutcome(
        ok=False,
        error="invalid arguments for echo: Object missing required field `text`",
        retryable=False,
    )


async def test_validation_happens_before_the_tool_runs() -> None:
    """Invalid arguments never reach the tool function."""
    ran = False

    async def fn(args: EchoArgs, *, ctx: ToolContext) -> str:
        nonlocal ran
        ran = True
        return ""

    spy = Tool(name="spy", description="", args_type=EchoArgs, fn=fn)
    await ToolRegistry([spy]).call("spy", {"text": None}, ctx=_ctx())
    assert ran is False


async def test_tool_exception_is_a_retryable_outcome() -> None:
    """Any exception other than ToolError becomes `Type: message`, retryable."""
    outcome = await _registry(_raising(RuntimeError("disk\nhiccup"))).call(
        "bad", {}, ctx=_ctx()
    )
    assert outcome == ToolOutcome(ok=False, error="RuntimeError: disk hiccup")


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENAMETOOLONG, "File name too long"),
        OSError(errno.ENOTDIR, "Not a directory"),
        OSError(errno.EISDIR, "Is a directory"),
        OSError(errno.ELOOP, "Too many levels of symbolic links"),
        OSError(errno.EINVAL, "Invalid argument"),
        PermissionError(errno.EACCES, "Permission denied"),
        PermissionError("no entry"),
        FileNotFoundError("gone"),
        ValueError("embedded null byte"),
    ],
    ids=repr,
)
async def test_an_error_the_arguments_caused_is_not_retryable(
    exc: Exception,
) -> None:
    """An OSError about the path a call names, or a ValueError, would fail the
    same way again: a one-line error the model sees, not retried."""
    outcome = await _registry(_raising(exc)).call("bad", {}, ctx=_ctx())
    assert outcome.error is not None and "\n" not in outcome.error
    assert outcome.error.startswith(type(exc).__name__)
    assert not outcome.ok and not outcome.retryable


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EIO, "Input/output error"),
        OSError(errno.ENOSPC, "No space left on device"),
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        OSError("no errno"),
    ],
    ids=repr,
)
async def test_a_transient_os_error_stays_retryable(exc: Exception) -> None:
    """An I/O error, a full disk or a dropped connection may pass: retryable."""
    outcome = await _registry(_raising(exc)).call("bad", {}, ctx=_ctx())
    assert not outcome.ok and outcome.retryable


async def test_an_exception_that_cannot_be_shown_is_still_an_outcome() -> None:
    """A tool's exception whose message itself raises is reported by its type."""

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no words")

    outcome = await _registry(_raising(Unprintable())).call("bad", {}, ctx=_ctx())
    assert outcome == ToolOutcome(ok=False, error="Unprintable")


async def test_args_whose_own_check_raises_anything_are_invalid_arguments() -> None:
    """An args Struct whose __post_init__ raises (not a ValueError) is an
    invalid-arguments outcome, not an exception out of call."""

    class Checked(msgspec.Struct, frozen=True, kw_only=True):
        n: int = 0

        def __post_init__(self) -> None:
            raise LookupError("n unknown")

    async def fn(args: Checked, *, ctx: ToolContext) -> str:
        return ""

    checked = Tool(name="checked", description="", args_type=Checked, fn=fn)
    outcome = await _registry(checked).call("checked", {}, ctx=_ctx())
    assert outcome == ToolOutcome(
        ok=False,
        error="invalid arguments for checked: LookupError: n unknown",
        retryable=False,
    )


async def test_output_whose_encoding_raises_anything_is_an_outcome() -> None:
    """A returned value whose encoding raises (here a tzinfo's RuntimeError)
    is a tool bug reported as an outcome, not an exception out of call."""

    class Broken(datetime.tzinfo):
        def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
            raise RuntimeError("no offset")

    value = datetime.datetime(2024, 1, 1, tzinfo=Broken())
    outcome = await _registry(_returning(value)).call("out", {}, ctx=_ctx())
    assert outcome == ToolOutcome(
        ok=False,
        error="out returned a value that is not JSON: RuntimeError: no offset",
        retryable=False,
    )


async def test_exception_without_message_is_named() -> None:
    """An exception with no message is reported by its type alone."""
    outcome = await _registry(_raising(KeyError())).call("bad", {}, ctx=_ctx())
    assert outcome.error == "KeyError"
    assert outcome.retryable


async def test_tool_error_is_not_retryable() -> None:
    """A ToolError reaches the model as its own message, not retryable."""
    outcome = await _registry(_raising(ToolError("no such thing"))).call(
        "bad", {}, ctx=_ctx()
    )
    assert outcome == ToolOutcome(ok=False, error="no such thing", retryable=False)


async def test_path_escape_error_is_not_retryable() -> None:
    """PathEscapeError is a ToolError, so it is not retryable either."""
    error = PathEscapeError("../x", "/ws")
    outcome = await _registry(_raising(error)).call("bad", {}, ctx=_ctx())
    assert outcome == ToolOutcome(ok=False, error=str(error), retryable=False)


async def test_tool_timeout_is_a_retryable_outcome() -> None:
    """A tool past its own timeout is cancelled; the outcome says after how long."""
    never = asyncio.Event()

    @tool("hang", timeout=0.05)
    async def hang(args: NoArgs, *, ctx: ToolContext) -> str:
        await never.wait()
        return ""

    outcome = await _registry(hang).call("hang", {}, ctx=_ctx(), timeout=60)
    assert outcome == ToolOutcome(ok=False, error="hang timed out after 0.05 s")


async def test_call_timeout_applies_when_the_tool_has_none() -> None:
    """Without a tool timeout, the call's timeout argument is the limit."""
    never = asyncio.Event()

    @tool("hang")
    async def hang(args: NoArgs, *, ctx: ToolContext) -> str:
        await never.wait()
        return ""

    outcome = await _registry(hang).call("hang", {}, ctx=_ctx(), timeout=0.01)
    assert outcome.error == "hang timed out after 0.01 s"


async def test_registry_default_timeout_applies_last() -> None:
    """Without tool or call timeouts, the registry's default is the limit."""
    never = asyncio.Event()

    @tool("hang")
    async def hang(args: NoArgs, *, ctx: ToolContext) -> str:
        await never.wait()
        return ""

    registry = _registry(hang, timeout=0.01)
    outcome = await registry.call("hang", {}, ctx=_ctx())
    assert outcome.error == "hang timed out after 0.01 s"


async def test_timeout_error_raised_by_the_tool_is_not_our_deadline() -> None:
    """A TimeoutError the tool raises itself is reported as such, not as ours."""
    outcome = await _registry(_raising(TimeoutError("socket"))).call(
        "bad", {}, ctx=_ctx()
    )
    assert outcome == ToolOutcome(ok=False, error="TimeoutError: socket")


async def test_long_output_is_truncated_with_a_marker() -> None:
    """Output over output_limit is cut to it and ends with a marker; still ok."""
    registry = _registry(_returning("x" * 25), output_limit=10)
    outcome = await registry.call("out", {}, ctx=_ctx())
    assert outcome == ToolOutcome(
        ok=True, output="x" * 10 + "\n…[truncated 15 characters]", truncated=True
    )


async def test_output_at_the_limit_is_not_truncated() -> None:
    """Output exactly output_limit long is kept whole."""
    registry = _registry(_returning("x" * 10), output_limit=10)
    outcome = await registry.call("out", {}, ctx=_ctx())
    assert outcome == ToolOutcome(ok=True, output="x" * 10)


async def test_non_string_output_is_json_encoded() -> None:
    """A returned value other than str reaches the model as JSON."""
    registry = _registry(_returning({"n": 1, "p": Point(x=2)}))
    outcome = await registry.call("out", {}, ctx=_ctx())
    assert outcome == ToolOutcome(ok=True, output='{"n":1,"p":{"x":2,"y":0}}')


async def test_unencodable_output_is_not_retryable() -> None:
    """A value msgspec cannot encode is a tool bug: ok=False, not retryable."""
    registry = _registry(_returning(object()))
    outcome = await registry.call("out", {}, ctx=_ctx())
    assert not outcome.ok and not outcome.retryable
    assert outcome.error is not None
    assert outcome.error.startswith("out returned a value that is not JSON")


async def test_cancelling_the_caller_cancels_the_call() -> None:
    """Cancellation is not swallowed into an outcome."""
    never = asyncio.Event()

    @tool("hang")
    async def hang(args: NoArgs, *, ctx: ToolContext) -> str:
        await never.wait()
        return ""

    task = asyncio.create_task(_registry(hang).call("hang", {}, ctx=_ctx()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_registry_refuses_nonsense_limits() -> None:
    """output_limit and timeout must be positive."""
    with pytest.raises(ToolError, match="output_limit must be at least 1"):
        ToolRegistry(output_limit=0)
    with pytest.raises(ToolError, match="timeout must be positive"):
        ToolRegistry(timeout=0)
