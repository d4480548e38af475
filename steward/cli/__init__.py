"""The ``steward`` command.

Every command reads settings from ``steward.toml`` (or ``--config``) and
``STEWARD_*`` variables, and works on the event log at ``--log`` (default: the
``[log] url`` setting, ``.steward/steward.db``). Only commands that write
create a log, and only the default ``.steward/`` directory is created. Errors
caused by input are one line on stderr and a non-zero exit (2; 1 for an
operator's command the actor's state does not allow), never a traceback; a
``STEWARD_*`` variable that names no setting is one warning line, and the
command goes on; a closed standard output ends a command quietly.

The package, one job a module: `parser` (the core's grammar, and each
kind's command group, from its package's ``grammar`` module), `grammar`
(the argument types and options they share), `env` (settings, the log, exit
statuses), `serve`, `history` (replay, fork, export, projections),
`listing` (every kind's ``list``), `prompts`, `demo` and the others (the
core's commands), `hosting` (a run hosted and watched in the foreground),
`output` (the columns, cut values and JSON lines of the list and show
commands). A kind's own commands are in its package (`steward.actors.run.cli`,
...).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from steward.cli.codes import EXIT_INPUT, EXIT_NO_ANSWER, EXIT_PIPE, EXIT_REFUSED
from steward.cli.parser import build_parser
from steward.errors import NoHostError, NotAllowedError, StewardError

if TYPE_CHECKING:
    from steward.actors.kind import Kinds
    from steward.cli.env import Env

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None, kinds: Kinds | None = None) -> int:
    """Run the command ``argv`` (default: the process's arguments) over the
    actor kinds ``kinds`` (default: steward's, `steward.kinds.KINDS`); its
    exit status.

    Each command imports what it uses when it runs (`steward.cli.parser`),
    so ``steward --help`` and the commands that read the log start at once.
    """
    if kinds is None:
        from steward.kinds import KINDS

        kinds = KINDS
    args = build_parser(kinds).parse_args(argv)
    # warnings of every library; -v: steward's own debug lines too (not
    # httpcore's or aiosqlite's)
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose:
        logging.getLogger("steward").setLevel(logging.DEBUG)
    try:
        from steward.cli.env import env_of
        from steward.config import load_settings
        from steward.effects.tools.files import TOOLS

        # the tools ``[tools] require_approval`` may name: the files tools
        approvable = tuple(t.name for t in TOOLS)
        settings = load_settings(args.config, unknown=_warn, tools=approvable)
        if settings.task.scorer is not None:
            from steward.actors.task.programs import with_scorer

            kinds = with_scorer(kinds, settings.task.scorer)
        env = env_of(settings, args, kinds)
        fn: Callable[[Env, argparse.Namespace], Coroutine[Any, Any, int]] = args.fn
        code = _run(_closing(env, fn(env, args)))
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except NotAllowedError as e:
        print(f"steward: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except NoHostError as e:
        print(f"steward: {e}", file=sys.stderr)
        return EXIT_NO_ANSWER
    except StewardError as e:
        print(f"steward: {e}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `steward ... | head`: end quietly, as `yes | head` does. Output still
        # buffered would fail again at exit, so it goes to devnull (the recipe
        # of Python's signal module documentation).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE


async def _closing(env: Env, command: Coroutine[Any, Any, int]) -> int:
    """``command``'s exit status, the ``[mcp]`` servers it started stopped."""
    try:
        return await command
    finally:
        await env.close()


def _warn(message: str) -> None:
    print(f"steward: warning: {message}", file=sys.stderr)


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # not on every platform
        return asyncio.run(coro)
    return uvloop.run(coro)
