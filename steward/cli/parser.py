"""The command line's grammar: every command, its options and its help."""

from __future__ import annotations

import argparse
import importlib
import unicodedata
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NoReturn, get_args

import msgspec

from steward.actors.run import events as run_events
from steward.actors.run import stages
from steward.cli.codes import DEFAULT_NATS_URL, EXIT_INPUT, FORMATS
from steward.config.settings import Port

Command = Callable[[Any, argparse.Namespace], Awaitable[int]]
"""What a command line runs: ``fn(env, args)``, its exit status."""


def _command(module: str, name: str) -> Command:
    """Command ``name`` of ``module``, imported when it runs: a command
    loads what it uses (an SDK, a web server) and no other's."""

    async def run(env: Any, args: argparse.Namespace) -> int:
        fn = getattr(importlib.import_module(module), name)
        return int(await fn(env, args))

    run.__name__ = run.__qualname__ = name
    return run


cmd_chat = _command("steward.actors.session.chat", "cmd_chat")
cmd_console = _command("steward.cli.console", "cmd_console")
cmd_demo = _command("steward.cli.demo", "cmd_demo")
cmd_export = _command("steward.cli.history", "cmd_export")
cmd_fork = _command("steward.cli.history", "cmd_fork")
cmd_log_migrate = _command("steward.cli.migrate", "cmd_log_migrate")
cmd_mcp_call = _command("steward.cli.mcp", "cmd_mcp_call")
cmd_mcp_list = _command("steward.cli.mcp", "cmd_mcp_list")
cmd_pause = _command("steward.actors.workflow.cli", "cmd_pause")
cmd_prompts_list = _command("steward.cli.prompts", "cmd_prompts_list")
cmd_prompts_show = _command("steward.cli.prompts", "cmd_prompts_show")
cmd_rebuild = _command("steward.cli.history", "cmd_rebuild")
cmd_replay = _command("steward.cli.history", "cmd_replay")
cmd_resume = _command("steward.actors.workflow.cli", "cmd_resume")
cmd_run = _command("steward.actors.run.cli", "cmd_run")
cmd_runs_approve = _command("steward.actors.run.cli", "cmd_runs_approve")
cmd_runs_cancel = _command("steward.actors.run.cli", "cmd_runs_cancel")
cmd_runs_deny = _command("steward.actors.run.cli", "cmd_runs_deny")
cmd_runs_list = _command("steward.actors.run.cli", "cmd_runs_list")
cmd_runs_show = _command("steward.actors.run.cli", "cmd_runs_show")
cmd_serve = _command("steward.cli.serve", "cmd_serve")
cmd_sessions_list = _command("steward.actors.session.cli", "cmd_sessions_list")
cmd_sessions_send = _command("steward.actors.session.cli", "cmd_sessions_send")
cmd_sessions_show = _command("steward.actors.session.cli", "cmd_sessions_show")
cmd_start = _command("steward.actors.run.cli", "cmd_start")
cmd_task_cancel = _command("steward.actors.task.cli", "cmd_task_cancel")
cmd_task_list = _command("steward.actors.task.cli", "cmd_task_list")
cmd_task_run = _command("steward.actors.task.cli", "cmd_task_run")
cmd_task_show = _command("steward.actors.task.cli", "cmd_task_show")
cmd_task_validate = _command("steward.actors.task.cli", "cmd_task_validate")
cmd_validate = _command("steward.actors.workflow.cli", "cmd_validate")
cmd_worker = _command("steward.cli.serve", "cmd_worker")
cmd_workers = _command("steward.cli.workers", "cmd_workers")
cmd_workflow_cancel = _command("steward.actors.workflow.cli", "cmd_cancel")
cmd_workflow_list = _command("steward.actors.workflow.cli", "cmd_list")
cmd_workflow_run = _command("steward.actors.workflow.cli", "cmd_run")


def _an_id(text: str) -> str:
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


def _input(text: str) -> str:
    """A run's input, as given, unless it is blank (a run of nothing)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "the run's input is empty; give the text the run is to work on"
        )
    return text


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


def _port(text: str) -> int:
    try:
        return msgspec.convert(int(text), Port)
    except (ValueError, msgspec.ValidationError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port (0-65535)"
        ) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds (0 or more)"
        )
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return value


def _metrics_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics at http://ADDRESS:PORT/metrics (default: "
        "[metrics] port; none unless set; 0 takes a free port)",
    )


def _staged_options(parser: argparse.ArgumentParser) -> None:
    """``--mode`` and ``--reasoning``: the user's switches of a staged run."""
    parser.add_argument(
        "--mode",
        choices=["agent", "chat"],
        help="a staged profile's mode for this run (default: the profile's); "
        "no stage changes it",
    )
    parser.add_argument(
        "--reasoning",
        choices=["on", "off"],
        help="whether a staged run reasons (default: the profile's); no stage "
        "changes it",
    )


def _output_option(parser: argparse.ArgumentParser, listing: bool) -> None:
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


def _prompt_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        metavar="DIR",
        help="a prompt directory, laid out as the shipped one (base/system.md, "
        "stages/act.md, ...); a prompt it has no file for is the shipped one "
        "(default: the profile's [agents.NAME] prompts, else the shipped "
        "prompts only)",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="the agent profile whose prompt directory to read (default: default)",
    )


_LIMIT = (
    "at most this many (default: 20); a list cut short ends with a line saying "
    "how many more there are (with --output json, on standard error)"
)

_RUN_ID = "the run's id (`steward runs list` shows them), or its stream run.ID"
_STREAM = (
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
_REFUSED = (
    "Exit 1 when the run's state does not allow it: one line on standard error "
    "says its status, and nothing is recorded."
)
_FOREGROUND = (
    "The run is hosted here, or, when a `steward serve` hosts the log, handed "
    "to it and followed; Ctrl-C stops following and says how the run goes on."
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, as steward's others are
    (argparse prints its usage block first); its subparsers are of this class
    too."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_INPUT, f"{self.prog}: error: {message}; see `{self.prog} --help`\n"
        )


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
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
    _output_option(s, listing=True)

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
    _output_option(s, listing=False)
    s.set_defaults(fn=cmd_log_migrate)

    s = sub.add_parser(
        "run",
        help="run TEXT to completion, streaming each step",
        description=f"Run TEXT to completion, printing each step. {_FOREGROUND}",
        epilog=EXIT_STATUSES,
    )
    s.add_argument("text", type=_input, help="the run's input (not blank)")
    s.add_argument("--profile", default="default", help="agent profile ([agents.NAME])")
    _staged_options(s)
    s.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    s.add_argument(
        "--stream",
        action="store_true",
        help="echo the model's text to stderr as it streams in",
    )
    s.set_defaults(fn=cmd_run)

    runs = sub.add_parser("runs", help="list, inspect, start, cancel or approve runs")
    rsub = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    s = rsub.add_parser("list", help="the newest runs")
    s.add_argument(
        "--status",
        choices=get_args(run_events.RunStatus),
        help="only runs in this status",
    )
    s.add_argument("--limit", type=_positive, default=20, help=_LIMIT)
    _output_option(s, listing=True)
    s.set_defaults(fn=cmd_runs_list)
    s = rsub.add_parser(
        "show",
        help="a run's (or any actor's) timeline: step, kind, duration, tokens",
        description="A run's timeline, from the runs projection: step, kind, "
        "duration, tokens. A workflow run's phase path, each attempt with its "
        "routing decision (or why it failed) and run, and the transitions "
        "taken. For an actor of another kind (a session), its events from the "
        "log: version, type, time and a one-line summary.",
    )
    s.add_argument("id", type=_an_id, help=_STREAM)
    s.add_argument(
        "--prompts", action="store_true", help="rebuild and print every prompt"
    )
    _output_option(s, listing=False)
    s.set_defaults(fn=cmd_runs_show)
    s = rsub.add_parser(
        "start",
        help="queue a new run for a running `serve` (or worker) to take",
        description="Record a new run, queued (status pending) until a host "
        "takes it, and print its id. Exits 0 once it is recorded; says so on "
        "standard error when no host took it within --wait seconds.",
    )
    s.add_argument("text", type=_input, help="the run's input (not blank)")
    s.add_argument("--profile", default="default", help="agent profile ([agents.NAME])")
    _staged_options(s)
    s.add_argument(
        "--wait",
        type=_seconds,
        default=3.0,
        metavar="SECONDS",
        help="how long to watch for a host to take the run (default: %(default)g; "
        "0 does not wait)",
    )
    s.set_defaults(fn=cmd_start)
    s = rsub.add_parser(
        "cancel",
        help="cancel a run and its children",
        description="Cancel a pending, running or waiting run and its children. "
        f"{_REFUSED}",
    )
    s.add_argument("id", type=_an_id, help=_RUN_ID)
    s.add_argument(
        "--reason",
        default="cancelled by operator",
        help="recorded with the cancellation (default: %(default)s)",
    )
    s.set_defaults(fn=cmd_runs_cancel)
    s = rsub.add_parser(
        "approve",
        help="approve the tool call a run waits on",
        description="Approve the tool call (or the spent budget) a run waits on, "
        f"so it goes on. {_REFUSED}",
    )
    s.add_argument("id", type=_an_id, help=_RUN_ID)
    s.add_argument(
        "--request", type=_an_id, help="request id (default: the oldest waiting)"
    )
    s.set_defaults(fn=cmd_runs_approve)
    s = rsub.add_parser(
        "deny",
        help="deny the tool call a run waits on",
        description="Deny the tool call (or the spent budget) a run waits on; the "
        f"model is told why. {_REFUSED}",
    )
    s.add_argument("id", type=_an_id, help=_RUN_ID)
    s.add_argument("--reason", required=True, help="why; the model sees it")
    s.add_argument(
        "--request", type=_an_id, help="request id (default: the oldest waiting)"
    )
    s.set_defaults(fn=cmd_runs_deny)

    s = sub.add_parser(
        "replay",
        help="rebuild a run's (or any actor's) state from the log",
        description="Rebuild an actor's state from its events in the log and "
        "print it: a run's status, counts and output; for a stream of another "
        "kind, its kind, its number of events and its state, a line per field "
        "(a value longer than 200 characters cut at …; --output json gives "
        "the state whole).",
    )
    s.add_argument("id", type=_an_id, help=_STREAM)
    _output_option(s, listing=False)
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
        f"that, printing each step. {_FOREGROUND} A stream of another kind "
        "(KIND.ID) is copied into KIND.ID-forkXXXXXX, re-decided step by step; "
        "a `steward serve` on the log carries out what its last step asks for. "
        "A session's fork is a chat of its own on the same channel, which "
        "`steward sessions send` talks to.",
        epilog=EXIT_STATUSES,
    )
    s.add_argument("id", type=_an_id, help=_STREAM)
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
    s.add_argument("id", type=_an_id, help=_STREAM)
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

    s = sub.add_parser(
        "chat",
        help="chat with a session: each line a message, each answer printed",
        description="Chat with session cli:ID. Each line is a message; "
        "commands (/new /model /models /memory /status /help) are answered at "
        "once, other messages after the debounce quiet time ([session] "
        "debounce_ms) by a turn (a run, or one model call in a chat of "
        "[session] direct_chats); in a terminal the reply is printed as the "
        "model writes it. What subagents and schedules send the chat is "
        "printed as [NAME] text. When standard input is not a terminal, "
        "one message per line, each answer printed, exit 0 at the end of input: "
        "`printf 'hello\\n/status\\n' | steward --script s.yaml chat`. On an "
        "embedded log no `serve` holds, this process hosts it while the chat "
        "lasts (a model must be configured); beside a `serve` it records the "
        "messages and reads the answers from the log (no model of its own "
        "needed). An empty line is answered with why. Ctrl-D ends once what "
        "runs is recorded (up to 60 s); Ctrl-C or SIGTERM stops once the model "
        "calls in flight are recorded and their reply printed (a second Ctrl-C "
        "at once; exit 130). On a log nothing hosts (a nats:// log with no "
        "serve or worker) it says so at once and exits 5.",
    )
    s.add_argument(
        "--chat",
        default="local",
        type=_an_id,
        metavar="ID",
        help="the chat id: the session is cli:ID (default: local)",
    )
    s.set_defaults(fn=cmd_chat)

    sessions = sub.add_parser(
        "sessions", help="list or inspect chat sessions, or send one a message"
    )
    ssub = sessions.add_subparsers(
        dest="sessions_command", required=True, metavar="ACTION"
    )
    s = ssub.add_parser("list", help="the sessions, the last active first")
    s.add_argument("--limit", type=_positive, default=20, help=_LIMIT)
    _output_option(s, listing=True)
    s.set_defaults(fn=cmd_sessions_list)
    s = ssub.add_parser(
        "show",
        help="a session's segments, memory, schedules and messages",
        description="A session from the read models: its model, its segments "
        "(each with when it began and the messages it took), "
        "core memory, the memory writer's summary and items (archived ones "
        "marked), its cron schedules with their next firing, and its newest "
        "messages (subagents' answers too) with their segment and run.",
    )
    s.add_argument(
        "id", type=_an_id, help="the session id, CHANNEL:CHAT (as cli:local)"
    )
    s.add_argument(
        "--messages",
        type=_positive,
        default=40,
        metavar="N",
        help="show the newest N messages (default: 40)",
    )
    _output_option(s, listing=False)
    s.set_defaults(fn=cmd_sessions_show)
    s = ssub.add_parser(
        "send",
        help="send a session a message and print its answer (a serve answers)",
        description="Record a message to session ID (opened with the [session] "
        "settings if new) and wait for its answer, which a running `steward "
        "serve` (or `steward chat`) on the log gives: a command's at once, a "
        "turn's after the debounce. Exit 5 when none can come (nothing hosts "
        "the log: said at once) or none came in time; the message stays "
        "recorded.",
    )
    s.add_argument(
        "id", type=_an_id, help="the session id, CHANNEL:CHAT (as telegram:42)"
    )
    s.add_argument("text", help="the message")
    s.add_argument("--sender", help="who sends it (for cross-channel context)")
    s.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the answer (default: 120)",
    )
    s.add_argument(
        "--no-wait",
        action="store_true",
        help="print the message id once recorded; do not wait for the answer",
    )
    s.set_defaults(fn=cmd_sessions_send)

    workflow = sub.add_parser(
        "workflow",
        help="check or run a workflow of phases; pause, resume or cancel one",
        description="A workflow file (TOML or YAML) is a graph of phases: "
        "nodes, each a fresh agent run, and edges taken after a phase "
        "completes, by priority, when auto or when their guard holds "
        '(decision == "changes_requested", report.score >= 0.8 and ...). '
        "See examples/workflows/.",
    )
    wsub = workflow.add_subparsers(
        dest="workflow_command", required=True, metavar="ACTION"
    )
    s = wsub.add_parser(
        "validate",
        help="check a workflow file; exit 2 with the first problem",
        description="Check FILE: its fields, the graph (duplicate node keys, "
        "edges to unknown nodes, two edges of one source with one priority, "
        "guards that do not parse) and that each node's provider and profile "
        "are configured. A problem is one line naming the file, the node or "
        "edge and what is wrong; the exit status is then 2.",
    )
    s.add_argument("file", help="the workflow file (.toml, .yaml or .yml)")
    s.set_defaults(fn=cmd_validate)
    s = wsub.add_parser(
        "run",
        help="run a workflow file: a line per phase, its id last",
        description="Check FILE, record a workflow run of it and carry it "
        "until it ends: a line per phase started and completed (with its "
        "routing decision) and per transition taken; then its end, and its id "
        "on the last line. Exit 0 when it completed, 1 when it failed or was "
        "cancelled, 2 for a bad file or a missing input, 130 on Ctrl-C (the "
        "run stays recorded; `steward serve` carries it on). Beside a `serve` "
        "the run is recorded for it and followed in the log; on a nats:// log "
        "with no serve or worker, nothing is recorded and it exits 5.",
    )
    s.add_argument("file", help="the workflow file (.toml, .yaml or .yml)")
    s.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a value for {input.NAME} in the prompts (repeatable)",
    )
    s.add_argument(
        "--id",
        help="the workflow run's id: letters, digits, _ and - (default: wf-<random>)",
    )
    s.add_argument(
        "--repo",
        metavar="PATH",
        help="run the phases in a git worktree of this repository on a new "
        "branch, removed when the run ends (default: the file's [git] "
        "repository; neither: the tools' workspace)",
    )
    s.add_argument(
        "--base",
        metavar="BRANCH",
        help="the branch the worktree's branch starts from (default: the "
        "file's [git] target_branch, else the repository's current branch)",
    )
    s.add_argument(
        "--branch",
        metavar="NAME",
        help="the worktree's branch, a name or a template with {tree-key} "
        "{run-id} {node-key} {issue-id} {timestamp} {short-hash} {date} "
        "(default: [git] branch_template, else [workflow] branch_template, "
        "steward/{tree-key}/{run-id}); made a valid ref",
    )
    s.add_argument("--issue", help="the value of {issue-id} in the branch's name")
    s.add_argument("--quiet", action="store_true", help="print only the end and the id")
    s.set_defaults(fn=cmd_workflow_run)
    s = wsub.add_parser(
        "list",
        help="the workflow runs, the last active first, one a line after a header",
    )
    s.add_argument(
        "--status",
        choices=["pending", "running", "paused", "completed", "failed", "cancelled"],
        help="only those in this status",
    )
    s.add_argument("--limit", type=_positive, default=20, help=_LIMIT)
    _output_option(s, listing=True)
    s.set_defaults(fn=cmd_workflow_list)
    for name, fn, what, reason in (
        ("pause", cmd_pause, "start no more phases (the one running ends)", True),
        ("resume", cmd_resume, "go on with a paused run", False),
        ("cancel", cmd_workflow_cancel, "stop a run and cancel its phase", True),
    ):
        s = wsub.add_parser(
            name, help=what, description=f"{what.capitalize()}. {_REFUSED}"
        )
        s.add_argument("id", type=_an_id, help="the workflow run's id (or workflow.ID)")
        if reason:
            s.add_argument(
                "--reason", default=f"{name} by operator", help="why, recorded"
            )
        s.set_defaults(fn=fn)

    task = sub.add_parser(
        "task",
        help="check or run a task program; show, list or cancel tasks",
        description="A task program is an S-expression over atomic templates "
        "(TOML or YAML files, one each, with declared params and {{param}} "
        "placeholders): bind, let, if, progn, quote, and, or, defatom, lambda, "
        "loop, director-evaluator-loop, system:run_script, call-tool, and "
        "calls of templates by name. Each call of a template is a model "
        "conversation recorded in the log, so a task resumes, replays and "
        "forks. See examples/tasks/.",
    )
    tsub = task.add_subparsers(dest="task_command", required=True, metavar="ACTION")
    s = tsub.add_parser(
        "validate",
        help="check templates and programs; exit 2 with a line per problem",
        description="Check PATH: a template file (.toml, .yaml, .yml), a "
        "program file (.sexp, .lisp, .task) or a directory of both. Each "
        "problem is one line, FILE:LINE:COLUMN: what is wrong (an unclosed "
        "paren, a placeholder that is no declared parameter, fresh context "
        "with inherited context, an unknown key); the exit status is then 2.",
    )
    s.add_argument("path", help="a template file, a program file or a directory")
    s.set_defaults(fn=cmd_task_validate)
    s = tsub.add_parser(
        "run",
        help="run a task program: a line per call, its id last",
        description="Check PROGRAM and the templates, record a task of it and "
        "carry it until it ends: a line per call started (template and "
        "arguments) and finished (status, turns, tokens, result), per tool "
        "call and subtask; then its output (or its error, with the results it "
        "had), and its id on the last line. Exit 0 when it completed, 1 when "
        "it failed, 2 for a bad file, 130 on Ctrl-C (the task stays "
        "recorded; `steward serve` carries it on without calling a finished "
        "call again).",
    )
    s.add_argument("program", help="the program file")
    s.add_argument(
        "--templates",
        metavar="DIR",
        help="the directory of template files (default: [task] templates, "
        "./templates, when it exists)",
    )
    s.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable the program sees at its top (repeatable)",
    )
    s.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="TEXT",
        help="a context item (a note, a file's description) its calls may "
        "be given, by their context settings (repeatable)",
    )
    s.add_argument(
        "--id", help="the task's id: letters, digits, _ and - (default: task-<random>)"
    )
    s.add_argument("--quiet", action="store_true", help="print only the end and the id")
    s.set_defaults(fn=cmd_task_run)
    s = tsub.add_parser(
        "show",
        help="a task's evaluation as a tree: forms, calls, subtasks, iterations",
        description="Draw task ID's evaluation, evaluating its program again "
        "over its recorded results: each form, each call with its result, "
        "turns and tokens, the subtasks it spawned (their trees inside), each "
        "loop iteration; then its output or its error with its partial "
        "results.",
    )
    s.add_argument("id", type=_an_id, help="the task's id (or task.ID)")
    s.add_argument(
        "--prompts",
        action="store_true",
        help="rebuild and print each call's messages as the model received them",
    )
    _output_option(s, listing=False)
    s.set_defaults(fn=cmd_task_show)
    s = tsub.add_parser(
        "list", help="the tasks, the last active first, one a line after a header"
    )
    s.add_argument(
        "--status", choices=["running", "completed", "failed"], help="only those"
    )
    s.add_argument("--limit", type=_positive, default=20, help=_LIMIT)
    _output_option(s, listing=True)
    s.set_defaults(fn=cmd_task_list)
    s = tsub.add_parser(
        "cancel",
        help="stop a task and cancel its subtask",
        description=f"Stop a task and cancel its subtask in flight. {_REFUSED}",
    )
    s.add_argument("id", type=_an_id, help="the task's id (or task.ID)")
    s.add_argument("--reason", default="cancel by operator", help="why, recorded")
    s.set_defaults(fn=cmd_task_cancel)

    prompts = sub.add_parser(
        "prompts",
        help="list or show the staged policy's prompts, or what a stage composes",
        description="A staged run's system prompt is composed, per stage, of "
        "Markdown prompts shipped with steward (base, project root, the mode's "
        "addition, the stage's prompt, its reasoning prompt when reasoning is "
        "on in agent mode); a profile may give a directory of its own in the "
        "same layout, whose files replace the shipped ones of the same name. A "
        "prompt may use {{project_root}}, {{user_input}}, {{tool_summary}} and "
        "{{last_step_outcome}} only; a file with another variable is refused, "
        "naming the file, its line and column and the variable (exit 2).",
    )
    prsub = prompts.add_subparsers(
        dest="prompts_command", required=True, metavar="ACTION"
    )
    s = prsub.add_parser(
        "list",
        help="each prompt's name, first line and source",
        description="Each prompt, one a line after a header: its name, its "
        "first line (cut to 70 characters) and where it comes from (shipped, or "
        "the file of --dir that replaces it).",
    )
    _prompt_dir_option(s)
    s.set_defaults(fn=cmd_prompts_list)
    s = prsub.add_parser(
        "show",
        help="a prompt's text, or the system prompt of a stage",
        description="With NAME, that prompt's text. With --stage (and no "
        "NAME), the system prompt a staged run composes at that stage, after "
        "a header line naming the prompts composed, the tools the stage allows "
        "and the reasoning it requires; the variables are left as {{name}}, "
        "where a run fills them in. An unknown NAME is one line, exit 2.",
    )
    s.add_argument("name", nargs="?", metavar="NAME", help="the prompt, as base/system")
    s.add_argument("--stage", choices=stages.STAGES, help="compose this stage's")
    s.add_argument(
        "--mode",
        choices=stages.MODES,
        help="with --stage: the user's mode (default: agent)",
    )
    s.add_argument(
        "--reasoning",
        choices=("on", "off"),
        help="with --stage: the user's reasoning switch (default: on)",
    )
    _prompt_dir_option(s)
    s.set_defaults(fn=cmd_prompts_show)

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
    _output_option(s, listing=True)
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
    _output_option(s, listing=False)
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
        type=_port,
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
    for command in _commands(p):
        _global_options(command.add_argument_group(_EVERY_COMMAND), argparse.SUPPRESS)
    return p


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers of every command and action under ``parser``."""
    for action in parser._actions:  # argparse lists its subparsers nowhere else
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield command
                yield from _commands(command)
