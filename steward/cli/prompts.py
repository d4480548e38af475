"""`steward prompts`: the staged policy's prompts, and what a stage composes.

`list` prints each prompt's name, its first line and the file it comes from
(the shipped one, or the prompt directory's: ``--dir``, else the profile's
``[agents.NAME] prompts``, of ``--profile`` or the default profile). `show
NAME` prints a prompt's text; `show --stage S` the system prompt a staged
run composes at stage S for the chosen mode and reasoning switch, after a
header line naming the prompts composed and the tools the stage allows.
There the variables are left as ``{{name}}``, where a run fills them in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from steward.actors.run import stages
from steward.actors.run.stage_prompts import (
    load_prompts,
    prompt_problems,
    prompt_sources,
)
from steward.cli.env import EXIT_INPUT, Env, shown
from steward.cli.output import columns, cut
from steward.errors import StewardError

__all__ = ["cmd_prompts_list", "cmd_prompts_show", "stage_header"]

FIRST_LINE_CHARS = 70
"""The characters of a prompt's first line `list` shows."""

TOOLS_RULE: dict[stages.Access, str] = {
    "all": "all the run's tools",
    "read_only": "the run's read-only tools (named *.read, *.list, *.search, "
    "*.read_*, *.list_*, *.search_*)",
    "none": "none",
}
"""How the header of `show --stage` words what the stage allows."""

SHOWN_AS_WRITTEN = {name: f"{{{{{name}}}}}" for name in stages.ALLOWED_VARIABLES}
"""Each variable's value as `show --stage` fills it in: itself, as written."""


def _directory(env: Env, args: argparse.Namespace) -> Path | None:
    """The prompt directory: ``--dir``, else the profile's (``--profile``,
    the default one by default; ``[agents.NAME] prompts``), else none (the
    shipped prompts only)."""
    if args.dir is not None:
        return Path(args.dir)
    profile = env.settings.profile(args.profile or "default")
    return None if profile.prompts is None else Path(profile.prompts)


def _checked(directory: Path | None) -> bool:
    """Whether the prompts load; each problem printed on standard error."""
    problems = prompt_problems(directory)
    for problem in problems:
        print(shown(problem), file=sys.stderr)
    return not problems


async def cmd_prompts_list(env: Env, args: argparse.Namespace) -> int:
    directory = _directory(env, args)
    if not _checked(directory):
        return EXIT_INPUT
    prompts = load_prompts(directory)
    sources = prompt_sources(directory)
    rows = [
        (
            name,
            cut(text.strip().partition("\n")[0], FIRST_LINE_CHARS),
            "shipped"
            if directory is None or not Path(sources[name]).is_relative_to(directory)
            else sources[name],
        )
        for name, text in prompts.items()
    ]
    for line in columns(("NAME", "FIRST LINE", "SOURCE"), rows):
        env.out(line)
    return 0


def stage_header(policy: stages.StagePolicy) -> str:
    """One line saying what ``policy`` composes and allows."""
    return (
        f"# stage {policy.stage}, mode {policy.mode}, reasoning "
        f"{'on' if policy.reasoning else 'off'} "
        f"(requires {policy.reasoning_format or 'none'}); tools: "
        f"{TOOLS_RULE[stages.tool_access(policy.mode, policy.stage)]}; "
        f"prompts: {', '.join(policy.prompts)}"
    )


async def cmd_prompts_show(env: Env, args: argparse.Namespace) -> int:
    if args.name is not None and args.stage is not None:
        raise StewardError("give a prompt's NAME or --stage STAGE, not both")
    if args.name is None and args.stage is None:
        raise StewardError(
            "give a prompt's NAME (`steward prompts list` names them) or --stage STAGE"
        )
    if args.name is not None and (args.mode, args.reasoning) != (None, None):
        raise StewardError("--mode and --reasoning go with --stage, not with a NAME")
    directory = _directory(env, args)
    if not _checked(directory):
        return EXIT_INPUT
    prompts = load_prompts(directory)
    if args.name is not None:
        if args.name not in prompts:
            raise StewardError(
                f"no prompt {args.name!r}; `steward prompts list` names them"
            )
        env.out(prompts[args.name].rstrip("\n"))
        return 0
    policy = stages.policy(
        args.mode or "agent", (args.reasoning or "on") == "on", args.stage, ()
    )
    env.out(stage_header(policy))
    env.out("")
    env.out(stages.compose(prompts, policy, SHOWN_AS_WRITTEN))
    return 0
