"""What every command works with: the settings, the log and projections it
opens, its exit statuses and its progress lines."""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from steward import events
from steward.actors.kind import Kinds
from steward.bus import EventLog, log_file, open_log
from steward.bus.sqlite import check_file

# the commands' exit statuses, here too (`steward.cli.codes`)
from steward.cli.codes import (
    DEFAULT_NATS_URL as DEFAULT_NATS_URL,
)
from steward.cli.codes import (
    EXIT_FAILED as EXIT_FAILED,
)
from steward.cli.codes import (
    EXIT_INPUT as EXIT_INPUT,
)
from steward.cli.codes import (
    EXIT_INTERRUPTED as EXIT_INTERRUPTED,
)
from steward.cli.codes import (
    EXIT_MISMATCH as EXIT_MISMATCH,
)
from steward.cli.codes import (
    EXIT_NO_ANSWER as EXIT_NO_ANSWER,
)
from steward.cli.codes import (
    EXIT_PIPE as EXIT_PIPE,
)
from steward.cli.codes import (
    EXIT_REFUSED as EXIT_REFUSED,
)
from steward.cli.codes import (
    EXIT_UNFINISHED as EXIT_UNFINISHED,
)
from steward.cli.codes import (
    EXIT_WAITING as EXIT_WAITING,
)
from steward.config import LogConfig, Settings
from steward.errors import ConfigError, NotFoundError, StewardError, ToolError
from steward.events.protocol import ToolSpec
from steward.projections.store import Projector

if TYPE_CHECKING:  # imported by the commands that use them (an SDK each)
    from steward.effects.tools import ToolRegistry
    from steward.host.traces import Traces


@dataclass
class Env:
    """What every command works with: settings and where the log is."""

    settings: Settings
    db: Path
    """The SQLite file of the projections (for the embedded log, the log's own)."""
    script: str | None
    out: Callable[[str], None]
    kinds: Kinds
    """The actor kinds the commands serve (the log decodes their events)."""
    log_url: str = ""
    """The event log: the ``db`` file, or a ``nats://`` URL."""
    _tools: ToolRegistry | None = field(default=None, repr=False)
    _traces: Traces | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.log_url = self.log_url or str(self.db)

    def tools(self) -> ToolRegistry:
        """This process's tools: the built-in ones and those of the ``[mcp]``
        servers, each server started the first time its tools are needed
        (one client session per server, however many hosts and commands of
        the process use it).

        Raises:
            ConfigError: an ``[mcp.<name>]`` server's name is taken by the
                built-in tools.
        """
        if self._tools is None:
            from steward.effects.tools import ToolRegistry, mcp

            config = self.settings.tools
            tools = ToolRegistry.with_builtins(
                output_limit=config.output_limit,
                timeout=config.timeout,
                extra=self.kinds.tools,  # a session's turns offer them
            )
            logs = self.db.parent / "mcp"  # a stdio server's standard error
            servers = mcp.servers(self.settings.mcp, timeout=config.timeout, logs=logs)
            for server in servers:
                try:
                    tools.add_toolset(server)
                except ToolError as e:
                    raise ConfigError(
                        "settings", f"mcp.{server.name}", str(e)
                    ) from None
            self._tools = tools
        return self._tools

    def traces(self) -> Traces | None:
        """Where this process's hosts send their spans (``[otel]``); ``None``
        for nowhere.

        Raises:
            ConfigError: the exporter asked for is not installed.
        """
        if self._traces is None:
            from steward.host.traces import from_settings

            config = self.settings.otel
            try:
                self._traces = from_settings(config.exporter, config.endpoint)
            except ImportError as e:
                raise ConfigError("settings", "otel.exporter", str(e)) from None
        return self._traces

    async def close(self) -> None:
        """Stop the ``[mcp]`` servers this process started, and send the
        spans still buffered."""
        if self._tools is not None:
            await self._tools.close()
        if self._traces is not None:
            self._traces.shutdown()

    async def offered(self, servers: list[str]) -> tuple[ToolSpec, ...]:
        """What a new actor may be offered: the built-in tools of runs and
        the tools of the ``[mcp]`` servers named in ``servers`` (listed
        now), sorted by name.

        Raises:
            ToolError: a server could not be started or listed.
        """
        from steward.effects.tools import ToolRegistry

        tools = self.tools()
        await tools.load(servers)
        served = frozenset(servers)
        specs = (
            *ToolRegistry.with_builtins().specs(),
            *(s for s in tools.specs() if s.name.partition(".")[0] in served),
        )
        return tuple(sorted(specs, key=lambda s: s.name))

    @property
    def distributed(self) -> bool:
        return self.log_url.partition("://")[0] in ("nats", "tls")


_HIDDEN = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f"  # control characters but \t and \n
    r"\u202a-\u202e\u2066-\u2069"  # bidirectional overrides and isolates
    r"\ud800-\udfff]"  # lone surrogates
)
"""What a terminal must not be given raw: control characters but line
breaks and tabs (an escape sequence's start, a NUL, a carriage return),
the bidirectional overrides that reorder what is shown, lone surrogates."""


def shown(text: str) -> str:
    """``text`` as a terminal may be given it: each `_HIDDEN` character
    written as its JSON and Python escape (``\\u001b``), so JSON stays
    JSON; a CRLF line end is a line end. Model replies, messages and ids
    are text from outside."""
    return _HIDDEN.sub(_escaped, text.replace("\r\n", "\n"))


def _escaped(found: re.Match[str]) -> str:
    return f"\\u{ord(found[0]):04x}"


def _out(text: str) -> None:
    print(shown(text))


def env_of(settings: Settings, args: argparse.Namespace, kinds: Kinds) -> Env:
    """Where the log and the projections are, from the options and settings,
    for the actor kinds ``kinds``.

    ``--log`` wins over ``--db``, which wins over ``[log] url``; ``--backend``
    without ``--log`` picks that backend's default when ``[log] url`` is of the
    other. An embedded log keeps its projections in its own file; a ``nats://``
    log keeps them in ``--db`` or ``[log] projections``.
    """
    url = args.log or settings.log.url
    file = _log_file(url, args)
    if args.backend is not None and (file is None) != (args.backend == "jetstream"):
        if args.log is not None:
            raise StewardError(
                f"--backend {args.backend} does not fit --log {args.log}"
            )
        url = DEFAULT_NATS_URL if file is not None else LogConfig().url
        file = _log_file(url, args)
    if file is None:
        db = Path(args.db or settings.log.projections or ".steward/projections.db")
        return Env(
            settings=settings,
            db=db,
            script=args.script,
            out=_out,
            kinds=kinds,
            log_url=url,
        )
    if args.log is None and args.db is not None:
        file = Path(args.db)
    return Env(settings=settings, db=file, script=args.script, out=_out, kinds=kinds)


def _log_file(url: str, args: argparse.Namespace) -> Path | None:
    """`steward.bus.log_file`, its error naming where ``url`` came from."""
    try:
        return log_file(url)
    except ConfigError as e:
        source = "--log" if args.log is not None else "settings: log.url"
        raise ConfigError(source, url, e.problem) from None


DEFAULT_DIR = Path(LogConfig().url).parent
"""The one directory steward creates by itself (``.steward``)."""


def ensure_place(file: Path) -> None:
    """Make sure ``file`` may hold steward's log (or projections): refuse
    another program's database (`steward.bus.sqlite.check_file`), create the
    default directory, refuse to create any other (a mistyped path should not
    become a new log)."""
    check_file(file)
    parent = file.parent
    if parent.is_dir():
        return
    if parent == DEFAULT_DIR:
        parent.mkdir()
        return
    raise NotFoundError(
        f"no directory {parent} for {file}; create it first (steward creates "
        f"only its default {DEFAULT_DIR}/ by itself)"
    )


@contextlib.asynccontextmanager
async def opened(
    env: Env, *, create: bool = True
) -> AsyncIterator[tuple[EventLog, Projector]]:
    """The log and the projections; an embedded log must exist already
    unless ``create`` (commands that only read never create one)."""
    if not (create or env.distributed or env.db.exists()):
        raise NotFoundError(f"no log at {env.db}; --log names another")
    ensure_place(env.db)
    if env.distributed:
        log = await open_log(env.log_url, union=env.kinds.union)
    else:
        log = await open_log(
            str(env.db),
            synchronous=env.settings.log.synchronous,
            union=env.kinds.union,
        )
    projector = await Projector.open(env.db, env.kinds)
    try:
        yield log, projector
    finally:
        await projector.close()
        await log.close()


async def stream_records(
    log: EventLog, stream: str, missing: str | None = None
) -> list[events.Recorded]:
    """Every record of ``stream``, which must be in the log (``missing``
    says so when it is not: default, that no such stream is)."""
    records = await log.read(stream)
    if records:
        return records
    raise NotFoundError(missing or f"no stream {stream!r} in the log")


async def resolved(log: EventLog, name: str, kinds: Kinds) -> str:
    """The stream in ``log`` that a command's ID argument names, of a kind
    in ``kinds``.

    ``KIND.ID`` naming a stream the log holds is that stream. Any other name
    is an actor's id as the list commands print it (``r1f6...``,
    ``cli:local``, ``wf-...``): the one stream ``KIND.NAME`` of any kind that
    the log holds. A name that none names is refused, one that several name
    too, each naming what it looked for or found.
    """
    prefix, dot, _ = name.partition(".")
    if dot and prefix in kinds and await log.version(name):
        return name
    found = [s for s in (f"{k}.{name}" for k in kinds.names) if await log.version(s)]
    if len(found) == 1:
        return found[0]
    if found:
        raise StewardError(
            f"{name!r} names {len(found)} streams, {' and '.join(found)}; "
            "give the one you mean in full"
        )
    if dot and prefix in kinds:
        raise NotFoundError(f"no stream {name!r} in the log")
    if dot:
        kinds.of(name)  # of no kind: one line naming the kinds there are
    looked = [f"{k}.{name}" for k in kinds.names]
    raise NotFoundError(
        f"no actor {name!r} in the log (no stream {', '.join(looked[:-1])} or "
        f"{looked[-1]}); each kind's `list` command shows their ids"
    )


PROGRESS_EVERY = 1.0
"""Seconds between progress lines of long work (on standard error)."""


def progress(
    what: str, head: int, unit: str = "position", per: int = 1, rate: str = "events"
) -> Callable[[int], None]:
    """A reporter of ``what`` reaching positions towards ``head``: a line on
    standard error at most every `PROGRESS_EVERY` seconds, none for quick
    work, counting in ``unit``s of ``per`` positions (its ``rate`` a
    second)."""
    started = last = time.monotonic()
    total = head // per

    def report(position: int) -> None:
        nonlocal last
        now = time.monotonic()
        done = position // per
        if now - last < PROGRESS_EVERY or done >= total:
            return
        last = now
        speed = done / max(now - started, 1e-9)
        print(
            f"{what}: {unit} {done:,} of {total:,} ({done / total:.0%}, "
            f"{speed:,.0f} {rate}/s)",
            file=sys.stderr,
            flush=True,
        )

    return report
