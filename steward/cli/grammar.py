"""The command line's shared grammar: the argument types, options and
texts every command group uses (the core's, `steward.cli.parser`, and each
kind's, its package's ``grammar`` module), and a command named by its module,
imported when it runs."""

from __future__ import annotations

import argparse
import importlib
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import msgspec

from steward.cli.codes import EXIT_INPUT, FORMATS
from steward.config.settings import Port

__all__ = [
    "EXIT_STATUSES",
    "FOREGROUND",
    "LIMIT",
    "REFUSED",
    "STREAM",
    "Command",
    "Parser",
    "an_id",
    "command",
    "list_command",
    "non_blank",
    "output_option",
    "port",
    "positive",
    "seconds",
]

Command = Callable[[Any, argparse.Namespace], Awaitable[int]]
"""What a command line runs: ``fn(env, args)``, its exit status."""


def command(module: str, name: str) -> Command:
    """Command ``name`` of ``module``, imported when it runs: a command
    loads what it uses (an SDK, a web server) and no other's."""

    async def run(env: Any, args: argparse.Namespace) -> int:
        fn = getattr(importlib.import_module(module), name)
        return int(await fn(env, args))

    run.__name__ = run.__qualname__ = name
    return run


def an_id(text: str) -> str:
    """An ID argument (of a run, a stream, a session, a chat, a request), as
    given, unless it cannot name anything: empty, or holding bytes that are
    not UTF-8 (lone surrogates here) or a control character."""
    if not text:
        raise argparse.ArgumentTypeError("an empty id names nothing")
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is None:
        return text
    what = (
        "a byte that is not UTF-8"
        if unicodedata.category(bad) == "Cs"
        else f"the control character {repr(bad)[1:-1]}"
    )
    raise argparse.ArgumentTypeError(f"{text!r} holds {what}; an id is printable text")


def non_blank(text: str) -> str:
    """A run's input, as given, unless it is blank (a run of nothing)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the run's input is empty; give the text the run is to work on"
        )
    return text


def port(text: str) -> int:
    try:
        return msgspec.convert(int(text), Port)
    except (ValueError, msgspec.ValidationError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port (0-65535)"
        ) from None


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (0 or more)"
        )
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return value


def output_option(parser: argparse.ArgumentParser, listing: bool) -> None:
    each = "an object per row" if listing else "one object on one line"
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="text",
        help="text (default): for a person, columns as wide as their "
        "contents, long values cut at …; json: JSON lines for a program, "
        f"{each}, every value whole",
    )


LIMIT = (
    "at most this many (default: 20); a list cut short ends with a line saying "
    "how many more there are (with --output json, on standard error)"
)

STREAM = (
    "an id as `runs list`, `sessions list` or `workflow list` print it, or a "
    "stream KIND.ID (run.ID, session.ID, workflow.ID); an id that names actors "
    "of several kinds is refused, naming their streams"
)

EXIT_STATUSES = (
    "exit status: 0 the run completed, 1 it failed or was cancelled, 2 bad input, "
    "3 replay --verify found a mismatch, 4 the run waits for a person "
    "(`steward runs approve|deny ID`), 5 no answer (nothing hosts the log, or "
    "`sessions send` timed out), 6 the run stopped unfinished (it stalled, or "
    "ran out of model calls), 130 interrupted (Ctrl-C)."
)
REFUSED = (
    "Exit 1 when the run's state does not allow it: one line on standard error "
    "says its status, and nothing is recorded."
)
FOREGROUND = (
    "The run is hosted here, or, when a `steward serve` hosts the log, handed "
    "to it and followed; Ctrl-C stops following and says how the run goes on."
)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, as steward's others are
    (argparse prints its usage block first); its subparsers are of this class
    too."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_INPUT, f"{self.prog}: error: {message}; see `{self.prog} --help`\n"
        )


cmd_list = command("steward.cli.listing", "cmd_list")


def list_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    kind: str,
    help: str,
    statuses: Sequence[str] = (),
    status_help: str = "only those in this status",
) -> None:
    """Add ``list`` to a kind's actions (``sub``): the command every kind
    with a `Listed` shares, with ``--status`` when it has ``statuses``."""
    s = sub.add_parser("list", help=help)
    if statuses:
        s.add_argument("--status", choices=statuses, help=status_help)
    s.add_argument("--limit", type=positive, default=20, help=LIMIT)
    output_option(s, listing=True)
    s.set_defaults(fn=cmd_list, listed_kind=kind)
