"""The staged policy's prompts: Markdown files, read and checked.

The package ships one file per prompt under ``steward/prompts/staged/``, its
name the prompt's (`steward.actors.run.stages.PROMPT_NAMES`) and ``.md``:
``base/system.md``, ``stages/act.md``, ``qa/report_schema.md``... A profile
may name a directory of its own in the same layout; a prompt it has no file
for is the shipped one. A file may use the variables of
`steward.actors.run.stages.ALLOWED_VARIABLES` (``{{project_root}}``,
``{{user_input}}``, ``{{tool_summary}}``, ``{{last_step_outcome}}``) and no
other: a file holding another ``{{name}}``, or a ``{{`` that opens no
placeholder, is refused at load, naming the file, the line and column and
the variable. So is a file that names no prompt (a misspelt path would
otherwise never be read).
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import msgspec

from steward.actors.run import stages
from steward.actors.run.events import RunSettings
from steward.config import Settings
from steward.errors import ConfigError

__all__ = [
    "with_prompts",
    "SHIPPED",
    "SUFFIX",
    "load_prompts",
    "prompt_problems",
    "prompt_sources",
]

SUFFIX = ".md"
SHIPPED = "prompts/staged"
"""Where the shipped prompts are, inside the ``steward`` package."""


def _shipped() -> Traversable:
    return resources.files("steward").joinpath(SHIPPED)


def _files(root: Traversable, prefix: str = "") -> Iterator[tuple[str, Traversable]]:
    """Each ``.md`` file under ``root``, with its prompt name, by name."""
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            yield from _files(entry, f"{prefix}{entry.name}/")
        elif entry.name.endswith(SUFFIX):
            yield f"{prefix}{entry.name[: -len(SUFFIX)]}", entry


def _place(text: str, offset: int) -> str:
    """``offset`` of ``text`` as ``LINE:COLUMN``, both from 1."""
    line = text.count("\n", 0, offset) + 1
    return f"{line}:{offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


def _text_problems(file: str, text: str) -> list[ConfigError]:
    """Each ``{{name}}`` of ``text`` (the file ``file``) that is no allowed
    variable, and each ``{{`` that opens no placeholder, in text order."""
    allowed = ", ".join(f"{{{{{v}}}}}" for v in sorted(stages.ALLOWED_VARIABLES))
    found = stages.placeholders(text)
    problems = [
        (offset, f"{{{{{name}}}}}", f"{name!r} is not a variable a prompt may use")
        for name, offset in found
        if name not in stages.ALLOWED_VARIABLES
    ]
    opened = {offset for _, offset in found}
    start = text.find("{{")
    while start != -1:
        if start not in opened:
            problems.append((start, "{{", "opens no placeholder {{name}}"))
        start = text.find("{{", start + 2)
    return [
        ConfigError(f"{file}:{_place(text, offset)}", key, f"{problem}; use {allowed}")
        for offset, key, problem in sorted(problems)
    ]


def _read(
    root: Traversable, where: str
) -> tuple[dict[str, tuple[str, str]], list[ConfigError]]:
    """The prompts under ``root`` (its name ``where``), each name's text and
    file, and the problems of its files."""
    found: dict[str, tuple[str, str]] = {}
    problems: list[ConfigError] = []
    for name, entry in _files(root):
        file = str(entry)
        if name not in stages.PROMPT_NAMES:
            problems.append(
                ConfigError(
                    file,
                    name,
                    f"no prompt of a staged run is called {name!r}; the files "
                    f"under {where} are named "
                    + ", ".join(f"{n}{SUFFIX}" for n in stages.PROMPT_NAMES),
                )
            )
            continue
        try:
            text = entry.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            problems.append(ConfigError(file, name, f"cannot be read as UTF-8: {e}"))
            continue
        if not text.strip():  # jtrefon/ai-ide's "Prompt file is empty"
            problems.append(
                ConfigError(
                    file,
                    name,
                    "the prompt file is empty; write the prompt in it, or "
                    "delete it to use the shipped one",
                )
            )
            continue
        problems += _text_problems(file, text)
        found[name] = (text, file)
    return found, problems


def _loaded(
    directory: Path | None,
) -> tuple[dict[str, tuple[str, str]], list[ConfigError]]:
    """Every prompt's text and the file it comes from (the shipped set,
    overridden by ``directory``'s files), and every problem on the way."""
    shipped, problems = _read(_shipped(), "the shipped prompts")
    missing = [name for name in stages.PROMPT_NAMES if name not in shipped]
    if missing:  # the package itself is broken: not the user's to fix
        problems.append(
            ConfigError(
                str(_shipped()),
                ", ".join(missing),
                "the package ships no such prompt; reinstall steward",
            )
        )
    if directory is None:
        return shipped, problems
    if not directory.is_dir():
        problems.append(
            ConfigError(
                str(directory),
                "prompt directory",
                "there is no such directory; name one laid out as "
                f"{SHIPPED} is (base/system{SUFFIX}, stages/act{SUFFIX}, ...)",
            )
        )
        return shipped, problems
    own, own_problems = _read(directory, str(directory))
    return {**shipped, **own}, problems + own_problems


def prompt_problems(directory: Path | None = None) -> list[str]:
    """Every problem of the prompts (the shipped ones, and ``directory``'s
    when given), one line each, ``FILE:LINE:COLUMN: {{name}}: what is
    wrong`` where a file's text is at fault."""
    return [str(problem) for problem in _loaded(directory)[1]]


def load_prompts(directory: Path | None = None) -> dict[str, str]:
    """Every prompt's text by name: the shipped ones, or ``directory``'s
    where it has a file of that name.

    Raises:
        ConfigError: the first problem `prompt_problems` would name.
    """
    prompts, problems = _loaded(directory)
    if problems:
        raise problems[0]
    return {name: prompts[name][0] for name in stages.PROMPT_NAMES}


def prompt_sources(directory: Path | None = None) -> dict[str, str]:
    """The file each prompt comes from, by name: ``directory``'s own, else
    the shipped one (files with problems too: see `prompt_problems`)."""
    return {name: file for name, (_, file) in _loaded(directory)[0].items()}


def with_prompts(run: RunSettings, settings: Settings, profile: str) -> RunSettings:
    """``run`` with its prompts, when it is staged: the shipped ones, or
    those of its profile's directory (``[agents.NAME] prompts``), recorded in
    its settings so a replay composes the same system prompts.

    Raises:
        ConfigError: the profile's prompts have a problem.
    """
    if run.policy != "staged" or run.prompts:
        return run
    agent = settings.agents.get(profile)
    directory = Path(agent.prompts) if agent and agent.prompts else None
    return msgspec.structs.replace(run, prompts=load_prompts(directory))
