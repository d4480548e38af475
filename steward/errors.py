"""Every error steward raises on purpose.

::

    StewardError
    ├── ConcurrencyError        another writer appended to the stream first
    ├── LogWriteError           the event log could not be written
    ├── LogReadError            a stored event could not be read or decoded
    ├── ConfigError             a settings file or variable is invalid
    ├── WorkflowFileError       a workflow definition file is invalid
    ├── ScriptError             a scripted-model script is invalid or exhausted
    ├── ToolError               a tool could not be found, validated or run
    │   └── PathEscapeError     a files.* path points outside the workspace
    ├── ProviderError           a model provider failed (typed: ``kind``)
    └── NotFoundError           a run, stream or file the caller named is absent

Errors carry their data as attributes and read as a sentence that says what to
do; the command line prints ``str(error)`` as one line and exits non-zero.
"""

from __future__ import annotations


class StewardError(Exception):
    """Root of every error steward raises on purpose."""


class ConcurrencyError(StewardError):
    """The stream moved past the version the writer expected."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        self.stream = stream
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"stream {stream} is at version {actual}, not {expected}: "
            "another writer got there first; reload and retry"
        )


class LogWriteError(StewardError):
    """The event log refused or failed a write."""


class LogReadError(StewardError):
    """A stored event could not be read or decoded."""


class ConfigError(StewardError):
    """A settings file, key or environment variable is invalid."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        super().__init__(f"{source}: {key}: {problem}")


class WorkflowFileError(StewardError):
    """A workflow definition file is invalid: ``place`` names the node, edge
    or field (``node 2 "review"``), ``problem`` says what is wrong."""

    def __init__(self, file: str, place: str, problem: str) -> None:
        self.file = file
        self.place = place
        self.problem = problem
        super().__init__(f"{file}: {place}: {problem}")


class ScriptError(StewardError):
    """A scripted-model script is invalid or has run out of replies."""


class ToolError(StewardError):
    """A tool could not be found, its arguments validated, or it failed."""


class PathEscapeError(ToolError):
    """A files.* path resolves outside the workspace directory."""

    def __init__(self, path: str, workspace: str) -> None:
        self.path = path
        self.workspace = workspace
        super().__init__(
            f"path {path!r} resolves outside the workspace {workspace}: "
            "use a relative path inside it"
        )


class ProviderError(StewardError):
    """A model provider failed; ``kind`` says how and ``retryable`` what to do.

    ``retry_after`` is the wait in seconds the server asked for (``Retry-After``),
    ``status`` the HTTP status it answered with; both are ``None`` when unknown.
    """

    KINDS = (
        "auth",
        "config",
        "timeout",
        "rate_limit",
        "transport",
        "invalid_response",
        "internal",
    )

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        self.kind = kind
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        super().__init__(f"{kind}: {message}")


class NotFoundError(StewardError):
    """A run, stream or file the caller named does not exist."""


def describe(error: BaseException) -> str:
    """``error`` as one line, ``Type: message``, for an event a person or a
    model reads; an exception whose message itself fails is still named."""
    try:
        message = " ".join(str(error).split())
    except Exception:
        message = ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
