"""The command line's grammar: the core's commands (serving, the log,
replay, fork, the console), and each kind's command group, which the kind
names (`Surface.commands`: a module whose ``add_commands`` adds it)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from steward.cli.codes import DEFAULT_NATS_URL
from steward.cli.grammar import (
    EXIT_STATUSES,
    FOREGROUND,
    STREAM,
    Parser,
    an_id,
    command,
    output_option,
    port,
)

if TYPE_CHECKING:
    from steward.actors.kind import Kinds

cmd_console = command("steward.cli.console", "cmd_console")
cmd_demo = command("steward.cli.demo", "cmd_demo")
cmd_export = command("steward.cli.history", "cmd_export")
cmd_fork = command("steward.cli.history", "cmd_fork")
cmd_log_migrate = command("steward.cli.migrate", "cmd_log_migrate")
cmd_mcp_call = command("steward.cli.mcp", "cmd_mcp_call")
cmd_mcp_list = command("steward.cli.mcp", "cmd_mcp_list")
cmd_rebuild = command("steward.cli.history", "cmd_rebuild")
cmd_replay = command("steward.cli.history", "cmd_replay")
cmd_serve = command("steward.cli.serve", "cmd_serve")
cmd_worker = command("steward.cli.serve", "cmd_worker")
cmd_workers = command("steward.cli.workers", "cmd_workers")


_EVERY_COMMAND = "options of every command (before it or after it)"


def _global_options(group: argparse._ActionsContainer, default: str | None) -> None:
    """The options every command takes, given before it (to ``steward``
    itself, where ``default`` is None) or after it (to each command, where
    ``default`` is `argparse.SUPPRESS`: an option not given there leaves the
    value given before the command, and one given there wins)."""
    group.add_argument(
        "--config",
        default=default,
        help="settings file (default: ./steward.toml if present)",
    )
    group.add_argument(
        "--db",
        default=default,
        help="SQLite file of the embedded event log (default: [log] url, "
        ".steward/steward.db); with a nats:// log, of the projections. Its "
        "directory must exist (only .steward/ is created); a database of "
        "another program is refused",
    )
    group.add_argument(
        "--log",
        metavar="URL",
        default=default,
        help="the event log: a SQLite file (a path, sqlite:///abs/path or "
        "sqlite://rel/path; only commands that write create it), or "
        "nats://host:4222[,host2:4222]?stream=NAME&replicas=3 (or tls://) for "
        "JetStream (default: [log] url)",
    )
    group.add_argument(
        "--backend",
        choices=("sqlite", "jetstream"),
        default=default,
        help="the kind of event log, when --log does not say: sqlite uses "
        f"[log] url or .steward/steward.db, jetstream [log] url or {DEFAULT_NATS_URL}",
    )
    group.add_argument(
        "--script",
        default=default,
        help="play the model's replies from this YAML/JSON script",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=False if default is None else default,
        help="log debug details",
    )


def _metrics_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve Prometheus metrics at http://ADDRESS:PORT/metrics (default: "
        "[metrics] port; none unless set; 0 takes a free port)",
    )


def build_parser(kinds: Kinds) -> argparse.ArgumentParser:
    """The ``steward`` command's grammar, with the command groups of
    ``kinds``."""
    p = Parser(
        prog="steward",
        description="An event-sourced actor runtime for LLM agents. Every step of "
        "every run is an event in one append-only log; runs can be replayed, "
        "verified and forked from it.",
        epilog=f"{EXIT_STATUSES[:-1]}; 1 also for an operator's command (runs "
        "cancel|approve|deny, workflow pause|resume|cancel) that the run's state "
        "does not allow.",
    )
    _global_options(p.add_argument_group(_EVERY_COMMAND), None)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "serve",
        help="host the actors over the log until stopped",
        description="Host every actor of the log (runs, sessions) until "
        "stopped; on a nats:// log also take inbound messages of the "
        "[channels] and publish the answers. Ctrl-C or SIGTERM stops taking "
        "messages, lets the model and tool calls in flight finish and records "
        "them (up to 60 s; a second Ctrl-C stops at once).",
    )
    s.set_defaults(fn=cmd_serve)
    _metrics_option(s)
    s = sub.add_parser(
        "worker",
        help="share a nats:// log's work (model and tool calls, timers) with "
        "other workers until stopped",
        description="Join the workers of a nats:// log and carry out the "
        "effects of the partitions this worker is given (`steward workers` "
        "lists them), until stopped. A worker builds no projections.",
    )
    s.set_defaults(fn=cmd_worker)
    _metrics_option(s)
    s = sub.add_parser(
        "workers",
        help="list the live workers of a nats:// log and what each holds",
        description="The live `serve` and `worker` processes of a nats:// "
        "log: the partitions each holds (a stream's effects are carried out "
        "by the holder of its partition), its share, the calls it has in "
        "flight, the effects it waits to carry out and the actors it keeps "
        "in memory.",
    )
    s.set_defaults(fn=cmd_workers)
    output_option(s, listing=True)

    lg = sub.add_parser("log", help="manage a nats:// event log itself")
    lsub = lg.add_subparsers(dest="log_command", required=True, metavar="ACTION")
    s = lsub.add_parser(
        "migrate",
        help="copy a nats:// log made before partitions into a partitioned one",
        description="Copy the nats:// log (--log, [log] url) made before "
        "partitions (one worker holds all its work) into the new, partitioned "
        "log --to names, commit by commit in the log's order: every stream's "
        "events at the same versions, with the same ids, times, correlation "
        "and causation ids (positions too, where the old log has no gaps). "
        "Then both are read side by side and every event compared. Stop "
        "every serve and worker on the old log first (a hosted log is "
        "refused). A target that is not empty is refused; a migration that "
        "stopped part-way goes on with --resume, copying nothing twice. The "
        "old stream is left as it was. On a long log, prints its position "
        "each second on standard error. Exit 1 when the comparison finds a "
        "difference.",
    )
    s.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the new log: nats://host:4222?stream=NEW&prefix=new.ev (on the "
        "same servers its stream and prefix must differ from the old log's; "
        "partitions= as for any new log, default 16; replicas default to the "
        "old log's)",
    )
    s.add_argument(
        "--resume",
        action="store_true",
        help="go on with a migration into --to that stopped part-way",
    )
    output_option(s, listing=False)
    s.set_defaults(fn=cmd_log_migrate)

    s = sub.add_parser(
        "replay",
        help="rebuild a run's (or any actor's) state from the log",
        description="Rebuild an actor's state from its events in the log and "
        "print it: a run's status, counts and output; for a stream of another "
        "kind, its kind, its number of events and its state, a line per field "
        "(a value longer than 200 characters cut at …; --output json gives "
        "the state whole).",
    )
    s.add_argument("id", type=an_id, help=STREAM)
    output_option(s, listing=False)
    s.add_argument(
        "--verify",
        action="store_true",
        help="re-decide every recorded input; exit 3 at the first mismatch",
    )
    s.set_defaults(fn=cmd_replay)

    s = sub.add_parser(
        "fork",
        help="copy a run (or any actor) up to a version and continue it",
        description="Copy a run up to a version into a new run and continue "
        f"that, printing each step. {FOREGROUND} A stream of another kind "
        "(KIND.ID) is copied into KIND.ID-forkXXXXXX, re-decided step by step; "
        "a `steward serve` on the log carries out what its last step asks for. "
        "A session's fork is a chat of its own on the same channel, which "
        "`steward sessions send` talks to.",
        epilog=EXIT_STATUSES,
    )
    s.add_argument("id", type=an_id, help=STREAM)
    s.add_argument(
        "--at",
        type=int,
        required=True,
        metavar="VERSION",
        help="the fork gets the run's events up to this version, where a step "
        "ends (a refusal lists those versions)",
    )
    s.add_argument("--no-run", action="store_true", help="only create the fork")
    s.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    s.set_defaults(fn=cmd_fork)

    ev = sub.add_parser("events", help="export a run's (or any actor's) events")
    esub = ev.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    s = esub.add_parser("export", help="a stream's events as JSON lines")
    s.add_argument("id", type=an_id, help=STREAM)
    s.add_argument("-o", "--output", help="file to write (default: stdout)")
    s.set_defaults(fn=cmd_export)

    pr = sub.add_parser("projections", help="manage the read models")
    psub = pr.add_subparsers(
        dest="projections_command", required=True, metavar="ACTION"
    )
    s = psub.add_parser(
        "rebuild",
        help="drop the read models and replay the whole log",
        description="Drop the read models and replay the whole log into them. "
        "On a long log, prints its position each second on standard error.",
    )
    s.set_defaults(fn=cmd_rebuild)

    for kind in kinds:
        if kind.surface.commands is not None:
            importlib.import_module(kind.surface.commands).add_commands(sub)

    mcp = sub.add_parser(
        "mcp",
        help="the configured MCP tool servers, and a tool tried by hand",
        description="Model Context Protocol servers are configured in "
        "[mcp.NAME] tables (command + args + env for a stdio server, url + "
        "headers for streamable HTTP; ${VAR} in env and headers is read from "
        "the environment). Their tools are NAME.tool; a profile's runs are "
        "offered those of the servers its [agents.NAME] mcp list names, and a "
        "task program may call those of [task] mcp.",
    )
    msub = mcp.add_subparsers(dest="mcp_command", required=True, metavar="ACTION")
    s = msub.add_parser(
        "list",
        help="each server, reachable or not, and its tools",
        description="Start (or reach) each configured server, list the tools "
        "its table offers (tools, less deny), and stop it again: a line a "
        "server (name, transport, command or URL, ok or why it is "
        "unreachable), then a line a tool. Exit 1 when a server is unreachable.",
    )
    output_option(s, listing=True)
    s.set_defaults(fn=cmd_mcp_list)
    s = msub.add_parser(
        "call",
        help="call a server's tool by hand and print its result",
        description="Call NAME.tool once, through the same registry runs use "
        "(allow and deny lists, time limit, output limit), and print its "
        "result; a tool's error is printed on standard error (exit 1). Bad "
        "--args or a name that is no server's tool: one line, exit 2.",
    )
    s.add_argument("tool", metavar="NAME.tool", help="the server's tool")
    s.add_argument(
        "--args", default="{}", help="its arguments, a JSON object (default: {})"
    )
    output_option(s, listing=False)
    s.set_defaults(fn=cmd_mcp_call)

    s = sub.add_parser(
        "console",
        help="serve the operator console: a web page over the log",
        description="Serve a web page over the log and its projections until "
        "stopped: every kind's actors, filtered and paged, with counts by "
        "status; an actor's summary, its history (raw events, requests with "
        "their answers, a timeline), what it waits for and the prompt of "
        "each model call; cancel, fork at a step, replay --verify and a "
        "download of its events as JSON lines. Pages update as events are "
        "committed. It listens on 127.0.0.1 unless told otherwise; on any "
        "other address [console] token (STEWARD_CONSOLE_TOKEN) must be set, "
        "and every page and action asks for it.",
    )
    s.add_argument(
        "--port",
        type=port,
        metavar="PORT",
        help="the port to listen on (default: [console] port, 8080; 0 takes a "
        "free port)",
    )
    s.add_argument(
        "--address",
        metavar="ADDRESS",
        help="the address to listen on (default: [console] address, 127.0.0.1)",
    )
    s.set_defaults(fn=cmd_console)

    s = sub.add_parser(
        "demo", help="a scripted run with a tool, a subagent and a sleep"
    )
    s.set_defaults(fn=cmd_demo)
    for each in _commands(p):
        _global_options(each.add_argument_group(_EVERY_COMMAND), argparse.SUPPRESS)
    return p


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers of every command and action under ``parser``."""
    for action in parser._actions:  # argparse lists its subparsers nowhere else
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield command
                yield from _commands(command)
