"""The task kind's commands on the command line (task): their grammar,
each command's function imported from its module when it runs."""

from __future__ import annotations

import argparse

from steward.cli.grammar import (
    REFUSED,
    an_id,
    command,
    list_command,
    output_option,
)

cmd_task_cancel = command("steward.actors.task.cli", "cmd_task_cancel")
cmd_task_run = command("steward.actors.task.cli", "cmd_task_run")
cmd_task_show = command("steward.actors.task.cli", "cmd_task_show")
cmd_task_validate = command("steward.actors.task.cli", "cmd_task_validate")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the kind's commands to ``sub``, the ``steward`` command's."""
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
    s.add_argument("id", type=an_id, help="the task's id (or task.ID)")
    s.add_argument(
        "--prompts",
        action="store_true",
        help="rebuild and print each call's messages as the model received them",
    )
    output_option(s, listing=False)
    s.set_defaults(fn=cmd_task_show)
    list_command(
        tsub,
        "task",
        "the tasks, the last active first, one a line after a header",
        ("running", "completed", "failed"),
        "only those",
    )
    s = tsub.add_parser(
        "cancel",
        help="stop a task and cancel its subtask",
        description=f"Stop a task and cancel its subtask in flight. {REFUSED}",
    )
    s.add_argument("id", type=an_id, help="the task's id (or task.ID)")
    s.add_argument("--reason", default="cancel by operator", help="why, recorded")
    s.set_defaults(fn=cmd_task_cancel)
