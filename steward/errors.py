"""Every error steward raises on purpose.

::

    StewardError
    ├── ConcurrencyError        another writer appended to the stream first
    ├── LogWriteError           the event log could not be written
    │   └── NotALogError        the file is another program's, not a steward log
    ├── LogReadError            a stored event could not be read or decoded
    ├── ConfigError             a settings file or variable is invalid
    ├── WorkflowFileError       a workflow definition file is invalid
    ├── ScriptError             a scripted-model script is invalid or exhausted
    ├── ToolError               a tool could not be found, validated or run
    │   └── PathEscapeError     a files.* path points outside the workspace
    ├── ProviderError           a model provider failed (typed: ``kind``)
    ├── NotFoundError           a run, stream or file the caller named is absent
    ├── NoHostError             nothing hosts the log, so nothing would answer
    └── NotAllowedError         the actor's state does not allow the command

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


class NotALogError(LogWriteError):
    """A file given as a log (or projections) file is not steward's: another
    program's SQLite database, or no SQLite database at all. steward leaves
    it as it is."""

    def __init__(self, file: str, problem: str) -> None:
        self.file = file
        self.problem = problem
        super().__init__(
            f"{file} is not a steward log: {problem}; steward leaves it as it "
            "is: name a new file or a steward log"
        )


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


class NoHostError(StewardError):
    """Nothing hosts the log (no ``serve`` or ``worker``), so what a command
    sent (a chat's message, a workflow run) would wait for an answer that
    nothing gives; the message says what to start."""


class NotAllowedError(StewardError):
    """An operator's command that the actor's state does not allow (a
    cancel of a run that ended, an approval of a run that waits for none):
    ``subject`` names the actor (``run r1``), ``status`` is its status and
    ``problem`` says what it does not allow (``it cannot be cancelled``)."""

    def __init__(self, subject: str, status: str, problem: str) -> None:
        self.subject = subject
        self.status = status
        self.problem = problem
        super().__init__(f"{subject} is {status}: {problem}")


def describe(error: BaseException) -> str:
    """``error`` as one line, ``Type: message``, for an event a person or a
    model reads; an exception whose message itself fails is still named."""
    try:
        message = " ".join(str(error).split())
    except Exception:
        message = ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
