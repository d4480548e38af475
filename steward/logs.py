"""The log lines of `serve` and `worker`: JSON lines when they are not on a
terminal, each carrying the actor it is about, and no secret.

The host says which actor it works for with `about` (a context variable,
so each effect's task keeps its own): the stream, the kind and the actor's
id, and for a model or tool call its request id and, for a staged run, the
stage. `Context` adds those to every log record; `JsonLines` writes a record
as one JSON object. Both write the value of any environment variable whose
name says it is a secret (``*_KEY``, ``*_TOKEN``, ``*_SECRET``,
``*PASSWORD*``) as ``[redacted]``, wherever it appears.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping

__all__ = ["Context", "JsonLines", "about", "configure", "secrets_of"]

_ACTOR: contextvars.ContextVar[tuple[str, Mapping[str, str]] | None] = (
    contextvars.ContextVar("steward_actor", default=None)
)
FIELDS = ("stream", "kind", "actor_id", "request_id", "stage")
"""What a line may say of the actor it is about, in this order."""
_SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET)$|PASSWORD", re.I)
REDACTED = "[redacted]"


class about:  # noqa: N801  (used as a function: ``with logs.about(...)``)
    """Log lines written inside are about actor ``stream`` (``KIND.ID``),
    with ``more`` of `FIELDS` (``request_id``, ``stage``). Cheap: it runs
    for every step; the fields are spelled out only when a line is written."""

    __slots__ = ("said", "token")

    def __init__(self, stream: str, **more: str) -> None:
        self.said = (stream, more)

    def __enter__(self) -> None:
        self.token = _ACTOR.set(self.said)

    def __exit__(self, *exc: object) -> None:
        _ACTOR.reset(self.token)


def secrets_of(
    environ: Mapping[str, str], *, any_name: bool = False
) -> tuple[str, ...]:
    """The values of ``environ``'s variables whose names say they are
    secrets (with ``any_name``, of all of them), longest first (one that
    holds another is replaced whole)."""
    found = {
        v
        for k, v in environ.items()
        if (any_name or _SECRET_NAME.search(k)) and len(v) >= 6
    }
    return tuple(sorted(found, key=len, reverse=True))


def _redacted(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


class Context(logging.Filter):
    """Adds the actor a record is about (`about`) to it, as attributes named
    by `FIELDS`."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = _ACTOR.get()
        if said is not None:
            stream, more = said
            kind, _, actor_id = stream.partition(".")
            record.stream, record.kind, record.actor_id = stream, kind, actor_id
            for name, value in more.items():
                setattr(record, name, value)
        return True


class JsonLines(logging.Formatter):
    """A record as one JSON object: ``at`` (UTC, ISO 8601), ``level``,
    ``logger``, ``message``, what it says of its actor, and ``error`` (the
    traceback) when it has one; secrets redacted."""

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value:
                line[name] = str(value)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        # each value redacted before it is encoded (where a secret's quotes
        # or backslashes would be escaped)
        clean = {k: _redacted(v, self.secrets) for k, v in line.items()}
        return json.dumps(clean, ensure_ascii=False)


class _Human(logging.Formatter):
    """A line for a person: time, level, logger, the actor's stream in
    brackets, the message; secrets redacted."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.secrets = secrets

    def formatMessage(self, record: logging.LogRecord) -> str:
        stream = getattr(record, "stream", None)
        said = super().formatMessage(record)
        if stream:
            head, _, message = said.partition(f"{record.name}: ")
            said = f"{head}{record.name}: [{stream}] {message}"
        return said

    def format(self, record: logging.LogRecord) -> str:
        # the whole line, its traceback included
        return _redacted(super().format(record), self.secrets)


def configure(
    level: int, *, json_lines: bool | None = None, secret_names: Iterable[str] = ()
) -> None:
    """Log steward's lines at ``level`` (other libraries' warnings) to
    standard error: JSON lines when ``json_lines`` (``None``: when standard
    error is not a terminal), else lines for a person; each with its actor,
    no secret of the environment (the variables `secrets_of` finds, and
    those named in ``secret_names``: the ``${VAR}`` of ``[mcp]`` tables,
    say)."""
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    named = {n: os.environ[n] for n in secret_names if os.environ.get(n)}
    both = {*secrets_of(os.environ), *secrets_of(named, any_name=True)}
    secrets = tuple(sorted(both, key=len, reverse=True))
    root = logging.getLogger()
    ours = [
        h
        for h in root.handlers
        if type(h) is logging.StreamHandler and h.stream is sys.stderr
    ]  # basicConfig's (`steward.cli.main`); another's is left as it is
    for handler in ours:
        handler.addFilter(Context())
        handler.setFormatter(JsonLines(secrets) if json_lines else _Human(secrets))
    root.setLevel(logging.WARNING)
    logging.getLogger("steward").setLevel(level)
