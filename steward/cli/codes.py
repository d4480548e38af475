"""The command line's exit statuses and defaults: what `--help` and every
command share, importing nothing (`steward.cli.env` re-exports them)."""

from __future__ import annotations

from typing import Literal

EXIT_FAILED = 1
EXIT_REFUSED = 1
"""An operator's command (cancel, approve, deny, pause, resume) that the
state of the run it names does not allow (`steward.errors.NotAllowedError`)."""
EXIT_INPUT = 2
EXIT_MISMATCH = 3
EXIT_WAITING = 4
EXIT_NO_ANSWER = 5
"""No answer came: nothing hosts the log (`steward.errors.NoHostError`,
said at once), or `sessions send` waited its ``--timeout``."""
EXIT_UNFINISHED = 6
"""`run`, `fork`: the run stopped without finishing (it stalled, or ran out
of model calls: `steward.actors.run.events.UNFINISHED`) and answered what it had."""
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141
"""The reader of standard output went away: 128 + SIGPIPE, as the shell
reports a process that signal ended."""
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")
"""The values of ``--output`` (``-o``)."""
