"""What a tool is: an async callable, the Struct of its arguments, its policy.

A tool takes one argument, a frozen msgspec Struct the registry has already
validated, and a keyword-only `ToolContext`; it returns a string or any value
msgspec can encode (sent to the model as JSON). It raises `ToolError` for a
problem the model should hear about and not retry as-is (a missing file, a path
outside the workspace). A ValueError, or an OSError about what the arguments
name (`is_argument_error`), is not retried either: the same call would fail the
same way. Anything else it raises counts as a transient failure.
"""

from __future__ import annotations

import errno
import inspect
import pathlib
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from steward.errors import ToolError

__all__ = [
    "OUTCOME_UNKNOWN",
    "Actors",
    "AnyArgs",
    "NotReached",
    "ReadModels",
    "Tool",
    "ToolContext",
    "ToolFn",
    "is_argument_error",
    "tool",
]

A = TypeVar("A", bound=msgspec.Struct)
A_contra = TypeVar("A_contra", bound=msgspec.Struct, contravariant=True)
R = TypeVar("R")


class Actors(Protocol):
    """The host, to a tool that reads an actor's state or gives it an input
    (the ``memory.*`` tools and their session)."""

    async def state(self, stream: str) -> tuple[Any, int]: ...

    async def submit(
        self, stream: str, input: Any, *, causation_id: str | None = None
    ) -> Any: ...


class ReadModels(Protocol):
    """The projections, to a tool that reads them (``memory.search``)."""

    async def search_memory(
        self, session_id: str, query: str, limit: int
    ) -> list[tuple[str, str, float]]:
        """(source, text, rank) of session ``session_id``'s memory items and
        messages that best match ``query``, best first."""
        ...


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool may know about the call beyond its arguments."""

    workspace: pathlib.Path
    """The directory the run's files tools are confined to."""
    stream: str = ""
    """The stream of the actor that asked for the call (``KIND.ID``; empty
    where no actor asks: ``steward mcp call``)."""
    request_id: str = ""
    """The tool call's request id."""
    actors: Actors | None = None
    """The host running the call; ``None`` where no host is (a unit test)."""
    reads: ReadModels | None = None
    """The host's projections; ``None`` when it keeps none."""
    now: float = 0.0
    """When the call started, on the host's clock."""

    @property
    def actor_id(self) -> str:
        """The id of the actor that asked for the call (its stream's ID)."""
        return self.stream.partition(".")[2]


OUTCOME_UNKNOWN = (
    "whether it took effect is unknown, and it is not made again (the tool is "
    "not idempotent): check before calling it again"
)
"""What the model is told of a call of a tool that is not idempotent, cut
off where it may have taken effect."""


class NotReached(ConnectionError):
    """A call that never reached the program that serves its tool (an MCP
    server that could not be started): making it again is safe, whether or
    not the tool is idempotent."""


class AnyArgs(msgspec.Struct, frozen=True, kw_only=True):
    """The arguments of a tool whose schema another program owns (an MCP
    server's): whatever the model sent, as it sent it."""

    values: dict[str, Any]


class ToolFn(Protocol[A_contra]):
    """The shape of a tool's implementation."""

    def __call__(self, args: A_contra, /, *, ctx: ToolContext) -> Awaitable[Any]: ...


class Tool(msgspec.Struct, Generic[A], frozen=True, kw_only=True):
    """A tool as the registry holds it: its name, its arguments, how to call it."""

    name: str
    """What the model calls it, e.g. ``files.read``."""
    description: str
    """What it does, in words the model reads."""
    args_type: type[A]
    """The frozen, keyword-only Struct its arguments are validated into."""
    fn: ToolFn[A]
    """The async implementation."""
    requires_approval: bool = False
    """Whether a person must approve each call before it runs."""
    max_retries: int | None = None
    """Retries of a retryable failure; ``None`` takes the run's setting."""
    timeout: float | None = None
    """Seconds a call may take; ``None`` takes the caller's or registry's."""
    offered: bool = True
    """Whether models are told of it (`ToolRegistry.specs`); ``False`` for a
    tool the host runs for an actor's own decisions (a workflow's git)."""
    parameters: dict[str, Any] | None = None
    """The JSON schema of its arguments as another program gave it (an MCP
    server's tool): offered as it is, and the arguments reach ``fn`` as the
    ``args_type`` Struct `AnyArgs`, unchecked here (the server checks them).
    ``None`` derives the schema from ``args_type``."""
    idempotent: bool = True
    """Whether a call may be made again when the host died during it; a call
    of a tool that is not is recorded as failed with its outcome unknown
    instead (`steward.host.calls`)."""

    def __post_init__(self) -> None:
        # Checked here so a mis-declared tool fails when the module is imported,
        # not when a model first calls it in the middle of a run.
        if not (
            isinstance(self.args_type, type)
            and issubclass(self.args_type, msgspec.Struct)
        ):
            raise ToolError(
                f"tool {self.name}: args_type must be a msgspec Struct, "
                f"not {self.args_type!r}"
            )
        if not callable(self.fn) or not (
            inspect.iscoroutinefunction(self.fn)
            or inspect.iscoroutinefunction(type(self.fn).__call__)
        ):
            raise ToolError(
                f"tool {self.name}: its function must be `async def`; "
                "wrap blocking work in asyncio.to_thread"
            )


def tool(
    name: str,
    *,
    description: str | None = None,
    args_type: type[A] | None = None,
    requires_approval: bool = False,
    max_retries: int | None = None,
    timeout: float | None = None,
    offered: bool = True,
) -> Callable[[ToolFn[A]], Tool[A]]:
    """Declare an async function as a tool.

    Args:
        name: What the model calls it.
        description: Defaults to the function's docstring.
        args_type: Defaults to the annotation of the function's first parameter.
        requires_approval: Whether each call waits for a person's approval.
        max_retries: Retries of a retryable failure; ``None`` takes the run's.
        timeout: Seconds a call may take; ``None`` takes the caller's.
        offered: Whether models are told of it.
    """

    def declare(fn: ToolFn[A]) -> Tool[A]:
        return Tool(
            name=name,
            description=description
            if description is not None
            else inspect.getdoc(fn) or "",
            args_type=args_type if args_type is not None else _first_arg_type(fn),
            fn=fn,
            requires_approval=requires_approval,
            max_retries=max_retries,
            timeout=timeout,
            offered=offered,
        )

    return declare


def _first_arg_type(fn: Callable[..., Any]) -> Any:
    """The annotation of a function's first parameter, resolved."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise ToolError(f"{fn.__qualname__} takes no arguments; a tool takes one")
    try:
        hints = typing.get_type_hints(fn)
    except NameError as e:
        raise ToolError(
            f"{fn.__qualname__}: cannot resolve its annotations ({e}); "
            "define the args Struct at module level or pass args_type="
        ) from e
    if params[0].name not in hints:
        raise ToolError(
            f"{fn.__qualname__}: annotate its first parameter with the args "
            "Struct or pass args_type="
        )
    return hints[params[0].name]


_ARGUMENT_ERRNOS = frozenset(
    {
        errno.ENAMETOOLONG,  # a name (or the whole path) too long
        errno.ENOENT,  # nothing there
        errno.ENOTDIR,  # a file where a directory is expected
        errno.EISDIR,  # a directory where a file is expected
        errno.EEXIST,  # something already there
        errno.EACCES,  # permission denied
        errno.EPERM,  # operation not permitted
        errno.EROFS,  # a read-only file system
        errno.ELOOP,  # a loop of symbolic links
        errno.EINVAL,  # an invalid name
    }
)
_ARGUMENT_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def is_argument_error(error: BaseException) -> bool:
    """Whether ``error`` says the call's arguments are wrong, so running the
    same call again would fail the same way: a ValueError, or an OSError about
    the path it names (too long, missing, a directory or not one, not
    permitted, a symlink loop). A full disk, an I/O error or a dropped
    connection is not: those may pass."""
    if isinstance(error, OSError):
        return isinstance(error, _ARGUMENT_OS_ERRORS) or error.errno in _ARGUMENT_ERRNOS
    return isinstance(error, ValueError)
