"""The workflow kind's commands on the command line (workflow): their grammar,
each command's function imported from its module when it runs."""

from __future__ import annotations

import argparse

from steward.cli.grammar import (
    REFUSED,
    an_id,
    command,
    list_command,
)

cmd_pause = command("steward.actors.workflow.cli", "cmd_pause")
cmd_resume = command("steward.actors.workflow.cli", "cmd_resume")
cmd_validate = command("steward.actors.workflow.cli", "cmd_validate")
cmd_workflow_cancel = command("steward.actors.workflow.cli", "cmd_cancel")
cmd_workflow_run = command("steward.actors.workflow.cli", "cmd_run")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the kind's commands to ``sub``, the ``steward`` command's."""
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
    list_command(
        wsub,
        "workflow",
        "the workflow runs, the last active first, one a line after a header",
        ("pending", "running", "paused", "completed", "failed", "cancelled"),
    )
    for name, fn, what, reason in (
        ("pause", cmd_pause, "start no more phases (the one running ends)", True),
        ("resume", cmd_resume, "go on with a paused run", False),
        ("cancel", cmd_workflow_cancel, "stop a run and cancel its phase", True),
    ):
        s = wsub.add_parser(
            name, help=what, description=f"{what.capitalize()}. {REFUSED}"
        )
        s.add_argument("id", type=an_id, help="the workflow run's id (or workflow.ID)")
        if reason:
            s.add_argument(
                "--reason", default=f"{name} by operator", help="why, recorded"
            )
        s.set_defaults(fn=fn)
