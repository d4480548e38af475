"""The run kind's commands on the command line (run, runs and prompts): their grammar,
each command's function imported from its module when it runs."""

from __future__ import annotations

import argparse
from typing import get_args

from steward.actors.run import events as run_events
from steward.actors.run import stages
from steward.cli.grammar import (
    EXIT_STATUSES,
    FOREGROUND,
    REFUSED,
    STREAM,
    an_id,
    command,
    list_command,
    non_blank,
    output_option,
    seconds,
)

cmd_prompts_list = command("steward.cli.prompts", "cmd_prompts_list")
cmd_prompts_show = command("steward.cli.prompts", "cmd_prompts_show")
cmd_run = command("steward.actors.run.cli", "cmd_run")
cmd_runs_approve = command("steward.actors.run.cli", "cmd_runs_approve")
cmd_runs_cancel = command("steward.actors.run.cli", "cmd_runs_cancel")
cmd_runs_deny = command("steward.actors.run.cli", "cmd_runs_deny")
cmd_runs_show = command("steward.actors.run.cli", "cmd_runs_show")
cmd_start = command("steward.actors.run.cli", "cmd_start")


RUN_ID = "the run's id (`steward runs list` shows them), or its stream run.ID"


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


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the kind's commands to ``sub``, the ``steward`` command's."""
    s = sub.add_parser(
        "run",
        help="run TEXT to completion, streaming each step",
        description=f"Run TEXT to completion, printing each step. {FOREGROUND}",
        epilog=EXIT_STATUSES,
    )
    s.add_argument("text", type=non_blank, help="the run's input (not blank)")
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
    list_command(
        rsub,
        "run",
        "the newest runs",
        get_args(run_events.RunStatus),
        "only runs in this status",
    )
    s = rsub.add_parser(
        "show",
        help="a run's (or any actor's) timeline: step, kind, duration, tokens",
        description="A run's timeline, from the runs projection: step, kind, "
        "duration, tokens. A workflow run's phase path, each attempt with its "
        "routing decision (or why it failed) and run, and the transitions "
        "taken. For an actor of another kind (a session), its events from the "
        "log: version, type, time and a one-line summary.",
    )
    s.add_argument("id", type=an_id, help=STREAM)
    s.add_argument(
        "--prompts", action="store_true", help="rebuild and print every prompt"
    )
    output_option(s, listing=False)
    s.set_defaults(fn=cmd_runs_show)
    s = rsub.add_parser(
        "start",
        help="queue a new run for a running `serve` (or worker) to take",
        description="Record a new run, queued (status pending) until a host "
        "takes it, and print its id. Exits 0 once it is recorded; says so on "
        "standard error when no host took it within --wait seconds.",
    )
    s.add_argument("text", type=non_blank, help="the run's input (not blank)")
    s.add_argument("--profile", default="default", help="agent profile ([agents.NAME])")
    _staged_options(s)
    s.add_argument(
        "--wait",
        type=seconds,
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
        f"{REFUSED}",
    )
    s.add_argument("id", type=an_id, help=RUN_ID)
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
        f"so it goes on. {REFUSED}",
    )
    s.add_argument("id", type=an_id, help=RUN_ID)
    s.add_argument(
        "--request", type=an_id, help="request id (default: the oldest waiting)"
    )
    s.set_defaults(fn=cmd_runs_approve)
    s = rsub.add_parser(
        "deny",
        help="deny the tool call a run waits on",
        description="Deny the tool call (or the spent budget) a run waits on; the "
        f"model is told why. {REFUSED}",
    )
    s.add_argument("id", type=an_id, help=RUN_ID)
    s.add_argument("--reason", required=True, help="why; the model sees it")
    s.add_argument(
        "--request", type=an_id, help="request id (default: the oldest waiting)"
    )
    s.set_defaults(fn=cmd_runs_deny)

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
