"""Task template files (TOML or YAML): read, checked, each problem placed.

A file holds one atomic template (`steward.actors.task.events.Template`), its keys
those of the template, with the context settings under
``context_management``::

    name = "summarize"            # the file's name without .toml if left out
    params = ["path", "focus"]
    description = "Summarize a file"
    matches = ["summary", "digest"]
    instructions = "Summarize {{path}}, with an eye to {{focus}}."

    [context_management]
    inherit_context = "none"
    fresh_context = "enabled"

or the same in YAML (``.yaml``, ``.yml``). Every problem is a `Problem`
naming the file, the line and column it is at (1-based; ``1:1`` where it has
no place of its own), and what is wrong: a syntax error where the parser
stopped, an unknown key or a wrong type at its key, a placeholder that is no
declared parameter at its ``{{``. The template's own checks are
`steward.actors.task.templates.check`.
"""

from __future__ import annotations

import functools
import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import yaml

from steward.actors.kind import Kinds
from steward.actors.task import decider as task_actor
from steward.actors.task import templates as task_templates
from steward.actors.task.eval import defined_atoms, reserved_problems
from steward.actors.task.events import (
    TASK_REVISION,
    ContextManagement,
    TaskCreated,
    TaskLimits,
    Template,
)
from steward.actors.task.lang import ParseError, parse
from steward.config import Settings
from steward.effects.tools import ToolRegistry
from steward.errors import ConfigError
from steward.events.protocol import ToolSpec

__all__ = [
    "FILE_KEYS",
    "PROGRAM_SUFFIXES",
    "created",
    "load_program",
    "program_problems",
    "validate",
    "with_scorer",
    "Problem",
    "load_template",
    "load_templates",
    "template_dir_problems",
    "template_file_problems",
]

SUFFIXES = (".toml", ".yaml", ".yml")
"""The endings of template files (compared without case)."""

SCRIPT_SUFFIXES = (".script.yaml", ".script.yml")
"""The endings of a scripted model's scripts, which a directory of
templates may hold beside them (not templates)."""

FILE_KEYS: tuple[str, ...] = (
    *(key for key in Template.__struct_fields__ if key not in ("context", "source")),
    "context_management",
)
"""The keys a template file may have: the template's fields, its ``context``
written ``context_management`` and its ``source`` left to the loader."""

_CONTEXT_KEYS: tuple[str, ...] = ContextManagement.__struct_fields__
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_TOML_AT_END = re.compile(r"\s*\(at end of document\)$")
_MSGSPEC_AT = re.compile(r" - at `\$((?:\.\w+|\[\d+\])*)`$")
_MISSING = re.compile(r"Object missing required field `(\w+)`")


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One problem of a template file, where it is (1-based line and column)
    and what it is: ``message`` starts with the key it is about (``file``
    for the file as a whole, ``invalid TOML`` or ``invalid YAML`` for a
    syntax error)."""

    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message}"


def load_template(path: Path) -> Template:
    """The template the file at ``path`` holds, checked.

    Raises:
        ConfigError: the file's first problem, as ``file:line:column: key:
            problem`` (with how many more there are).
    """
    template, problems = template_file_problems(path)
    if problems:
        raise _error(problems[0], len(problems) - 1)
    assert template is not None  # a template that was not built is a problem
    return template


def load_templates(directory: Path) -> tuple[Template, ...]:
    """Every template of the template files directly in ``directory``
    (`SUFFIXES`), sorted by name.

    Raises:
        ConfigError: the directory does not exist, or its files have
            problems (two files defining one name among them): each one on
            a line of its own.
    """
    templates, problems = _read_directory(directory)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        listed = "\n".join(str(problem) for problem in problems)
        raise ConfigError(str(directory), "template files", f"{count}:\n{listed}")
    return tuple(sorted(templates, key=lambda template: template.name))


def template_dir_problems(directory: Path) -> list[Problem]:
    """Every problem of the template files directly in ``directory``, file by
    file in the order of their names, then each name that two files define.

    Raises:
        ConfigError: the directory does not exist.
    """
    _, problems = _read_directory(directory)
    return problems


def template_file_problems(path: Path) -> tuple[Template | None, list[Problem]]:
    """The template the file at ``path`` holds and every problem found in it.

    The template is ``None`` when it could not be built (the file could not
    be read or parsed, or a value has the wrong type); with problems of its
    own (an undeclared placeholder, say) it is built and returned beside
    them. The name is the file's stem unless the file names one; ``source``
    is ``path`` as given.
    """
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        return None, [_at(file, "", 0, "file", f"cannot be read: {e.strerror}")]
    except UnicodeDecodeError as e:
        return None, [_at(file, "", 0, "file", f"is not UTF-8 text: {e}")]
    raw, problem = _parse(path, text)
    if problem is not None:
        return None, [problem]
    problems = [
        _at_key(
            file,
            text,
            str(key),
            "",
            f"unknown key; the keys are {', '.join(FILE_KEYS)}",
        )
        for key in raw
        if key not in FILE_KEYS
    ]
    fields = {key: raw[key] for key in FILE_KEYS if key in raw}
    fields.setdefault("name", path.stem)
    fields["source"] = file
    if "context_management" in fields:
        context = fields.pop("context_management")
        if isinstance(context, dict):
            known = ", ".join(_CONTEXT_KEYS)
            problems += [
                _at_key(
                    file,
                    text,
                    str(key),
                    "context_management",
                    f"unknown key; the keys of context_management are {known}",
                )
                for key in context
                if key not in _CONTEXT_KEYS
            ]
            context = {k: v for k, v in context.items() if k in _CONTEXT_KEYS}
        fields["context"] = context
    try:
        template = msgspec.convert(fields, Template)
    except msgspec.ValidationError as e:
        return None, [*problems, _type_problem(file, text, str(e))]
    problems += [
        _template_problem(file, text, found) for found in task_templates.check(template)
    ]
    problems += [
        _at_key(file, text, key, "", sentence)
        for key, _, sentence in (p.partition(": ") for p in reserved_problems(template))
    ]
    return template, problems


# -- reading ----------------------------------------------------------------------


def _read_directory(directory: Path) -> tuple[list[Template], list[Problem]]:
    """The templates built from the files of ``directory`` and all their
    problems, a name defined by an earlier file (by file name) last."""
    if not directory.is_dir():
        problem = "is not a directory" if directory.exists() else "no such directory"
        raise ConfigError(
            str(directory), "(directory)", f"{problem}; name a directory of templates"
        )
    files = sorted(
        path
        for path in directory.iterdir()
        if path.suffix.lower() in SUFFIXES
        and path.is_file()
        and not path.name.lower().endswith(SCRIPT_SUFFIXES)
    )
    templates: list[Template] = []
    problems: list[Problem] = []
    duplicates: list[Problem] = []
    defined: dict[str, str] = {}
    for path in files:
        template, found = template_file_problems(path)
        problems += found
        if template is None:
            continue
        if template.name in defined:
            duplicates.append(
                _at_key(
                    str(path),
                    path.read_text(encoding="utf-8"),
                    "name",
                    "",
                    f"template {template.name!r} is also defined in "
                    f"{defined[template.name]}; give each template its own name",
                )
            )
            continue
        defined[template.name] = str(path)
        templates.append(template)
    return templates, problems + duplicates


def _parse(path: Path, text: str) -> tuple[dict[Any, Any], Problem | None]:
    """The mapping the file's ``text`` holds, or the problem that stopped it
    being read (a syntax error at its place)."""
    file = str(path)
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as e:
            # Python 3.11's error has the position only in its message.
            message = str(e)
            if at := _TOML_AT.search(message):
                problem = Problem(
                    file=file,
                    line=int(at[1]),
                    column=int(at[2]),
                    message=f"invalid TOML: {message[: at.start()]}",
                )
                return {}, problem
            if at_end := _TOML_AT_END.search(message):
                sentence = f"{message[: at_end.start()]} at the end of the file"
                return {}, _at(file, text, len(text), "invalid TOML", sentence)
            return {}, _at(file, text, 0, "invalid TOML", message)
    if suffix in (".yaml", ".yml"):
        try:
            raw = yaml.safe_load(text)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            sentence = e.problem or e.context or "cannot be parsed"
            if mark is None:
                return {}, _at(file, text, 0, "invalid YAML", sentence)
            problem = Problem(
                file=file,
                line=mark.line + 1,
                column=mark.column + 1,
                message=f"invalid YAML: {sentence}",
            )
            return {}, problem
        except yaml.YAMLError as e:
            return {}, _at(file, text, 0, "invalid YAML", str(e))
        if raw is None:
            sentence = "is empty; a template needs at least its instructions"
            return {}, _at(file, text, 0, "file", sentence)
        if not isinstance(raw, dict):
            sentence = (
                f"holds a {type(raw).__name__}, not a mapping of a template's keys"
            )
            return {}, _at(file, text, 0, "file", sentence)
        return raw, None
    sentence = "is neither TOML (.toml) nor YAML (.yaml, .yml)"
    return {}, _at(file, text, 0, "file", sentence)


# -- placing problems -------------------------------------------------------------


def _type_problem(file: str, text: str, message: str) -> Problem:
    """A msgspec validation message as a problem at the key it is about
    (``context`` named as the file names it, ``context_management``)."""
    found = _MSGSPEC_AT.search(message)
    sentence = message[: found.start()] if found else message
    path = found[1] if found else ""
    names = re.findall(r"\.(\w+)", path)
    if names and names[0] == "context":
        names[0] = "context_management"
        path = ".context_management" + path.removeprefix(".context")
    if missing := _MISSING.fullmatch(sentence):
        return _at_key(file, text, missing[1], "", "is missing; every template has it")
    if not names:
        return _at(file, text, 0, "file", sentence)
    sentence = sentence[:1].lower() + sentence[1:]
    within = names[0] if len(names) > 1 else ""
    return _at_key(file, text, names[-1], within, sentence, shown=path.lstrip("."))


def _template_problem(
    file: str, text: str, found: task_templates.TemplateProblem
) -> Problem:
    """A template's problem at its place: an undeclared placeholder at its
    first ``{{`` after its key (or anywhere), any other at its key."""
    key_offset = _key_offset(text, found.key, 0)
    if found.placeholder is not None:
        start = 0 if key_offset is None else key_offset
        for offset in (start, 0):
            for name, at in task_templates.placeholders(text[offset:]):
                if name == found.placeholder:
                    return _at(file, text, offset + at, found.key, found.message)
    return _at(file, text, key_offset or 0, found.key, found.message)


def _at_key(
    file: str,
    text: str,
    key: str,
    within: str,
    sentence: str,
    *,
    shown: str | None = None,
) -> Problem:
    """A problem at the first line that sets ``key`` (after the line that
    sets ``within``, if one is given), named ``shown`` (``within.key`` or
    ``key`` unless given); at the line of ``within``, or 1:1, if no line
    does."""
    start = 0
    if within:
        start = _key_offset(text, within, 0) or 0
    offset = _key_offset(text, key, start)
    if offset is None:
        offset = start
    if shown is None:
        shown = f"{within}.{key}" if within else key
    return _at(file, text, offset, shown, sentence)


def _key_offset(text: str, key: str, start: int) -> int | None:
    """The offset of ``key`` on the first line from ``start`` that sets it:
    ``key =`` or ``key:``, quoted or not, after a dotted prefix or as a
    ``[key]`` table; ``None`` if no line does."""
    pattern = re.compile(
        r"^[ \t]*\[?[ \t]*[\"']?(?:[\w-]+\.)*("
        + re.escape(key)
        + r")[\"']?[ \t]*[=:\].]",
        re.MULTILINE,
    )
    found = pattern.search(text, start)
    return None if found is None else found.start(1)


def _at(file: str, text: str, offset: int, key: str, sentence: str) -> Problem:
    """A problem at ``offset`` of ``text``, its message ``key: sentence``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Problem(file=file, line=line, column=column, message=f"{key}: {sentence}")


def _error(problem: Problem, more: int) -> ConfigError:
    """``problem`` as a `ConfigError` that reads as it does (``file:line:
    column: key: sentence``), with how many ``more`` problems there are."""
    # Every message is "key: sentence" (`_at`, `_parse`), which ConfigError
    # joins with ": " again.
    key, _, sentence = problem.message.partition(": ")
    if more:
        sentence += f" (and {more} more)"
    return ConfigError(f"{problem.file}:{problem.line}:{problem.column}", key, sentence)


# -- programs ------------------------------------------------------------------------

PROGRAM_SUFFIXES = (".sexp", ".lisp", ".task")
"""The endings of program files (`steward task validate` reads these)."""


def program_problems(path: Path, text: str | None = None) -> list[Problem]:
    """Every problem of the program in the file at ``path`` (or ``text``):
    a reading error where the reader stopped; a malformed ``defatom``; each
    problem of a template it defines (`task_templates.check`)."""
    file = str(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            return [Problem(file=file, line=1, column=1, message=f"file: {e}")]
    try:
        program = parse(text)
    except ParseError as e:
        return [Problem(file=file, line=e.line, column=e.column, message=e.reason)]
    try:
        atoms = defined_atoms(program, file)
    except ValueError as e:
        line, column, message = _positioned(str(e))
        return [Problem(file=file, line=line, column=column, message=message)]
    problems = []
    for atom in atoms:
        found = [*task_templates.template_problems(atom), *reserved_problems(atom)]
        at = max(text.find(f"defatom {atom.name}"), 0)
        problems += [_at(file, text, at, f"defatom {atom.name}", p) for p in found]
    return problems


def load_program(path: Path) -> str:
    """The text of the program file at ``path``, checked.

    Raises:
        ConfigError: the file cannot be read, or its first problem (as
            ``file:line:column: problem``).
    """
    problems = program_problems(path)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(
            f"{first.file}:{first.line}:{first.column}", "program", first.message + more
        )
    return path.read_text(encoding="utf-8")


def validate(path: Path) -> list[Problem]:
    """Every problem of a template file, a program file, or a directory of
    both: its template files (`SUFFIXES`; a scripted model's
    ``*.script.yaml`` is no template) and programs (`PROGRAM_SUFFIXES`),
    then those of each directory in it."""
    if path.is_dir():
        problems = template_dir_problems(path)
        for entry in sorted(path.iterdir()):
            if entry.is_dir():
                problems.extend(validate(entry))
            elif entry.suffix.lower() in PROGRAM_SUFFIXES:
                problems.extend(program_problems(entry))
        return problems
    if not path.exists():
        return [Problem(file=str(path), line=1, column=1, message="file: no such file")]
    if path.suffix.lower() in SUFFIXES:
        return template_file_problems(path)[1]
    return program_problems(path)


def created(
    program: str,
    settings: Settings,
    task_id: str,
    *,
    templates: tuple[Template, ...] = (),
    args: dict[str, Any] | None = None,
    context: tuple[str, ...] = (),
    tools: ToolRegistry | None = None,
    source: str = "",
) -> TaskCreated:
    """The first event of task ``task_id``: ``program`` with the
    ``templates`` it may call, its arguments and context items, the specs of
    the tools its templates name (from ``tools``) and the ``[task]`` limits.

    Raises:
        ConfigError: a template names a tool the registry does not have, or
            its model a ``[models]`` table there is none of.
    """
    registry = tools or ToolRegistry.with_builtins()
    config = settings.task
    atoms = templates
    try:
        atoms = (*templates, *defined_atoms(parse(program), source))
    except (ParseError, ValueError):
        pass  # the task fails on it, naming the problem
    named = sorted({name for t in atoms for name in t.tools})
    for name in named:
        server = name.partition(".")[0]
        if settings.serves(name) and server not in config.mcp:
            raise ConfigError(
                "settings",
                "task.mcp",
                f"{name} is a tool of [mcp.{server}], which [task] mcp does not "
                f'list: add mcp = ["{server}"] to [task]',
            )
    unknown = [name for name in named if name not in registry]
    if unknown:
        raise ConfigError(
            "templates",
            "tools",
            f"no tool {', '.join(unknown)} (there are: {', '.join(registry.names())})",
        )
    tables = {t.model for t in atoms if t.model} | ({config.model} - {None})
    missing = sorted(str(m) for m in tables if m not in settings.models)
    if missing:
        raise ConfigError(
            "templates",
            "model",
            f"no [models.{missing[0]}] table (there are: {', '.join(settings.models)})",
        )
    specs = _specs(registry, named)
    unoffered = sorted(set(named) - {spec.name for spec in specs})
    if unoffered:
        raise ConfigError(
            "templates",
            "tools",
            f"{', '.join(unoffered)} is offered to no model (a program calls it: "
            "system:run_script, call-tool)",
        )
    approved = set(settings.tools.require_approval)
    waits = sorted(s.name for s in specs if s.requires_approval or s.name in approved)
    if waits:
        raise ConfigError(
            "templates",
            "tools",
            f"{', '.join(waits)} needs a person's approval, which a task's "
            "calls do not wait for yet; leave it out of the templates' tools",
        )
    return TaskCreated(
        task_id=task_id,
        program=program,
        templates=templates,
        args=args or {},
        tools=specs,
        limits=TaskLimits(
            max_depth=config.max_depth,
            max_turns=config.max_turns,
            max_tokens=config.max_tokens,
            max_calls=config.max_calls,
        ),
        context=context,
        model=config.model,
        source=source,
        revision=TASK_REVISION,
    )


def with_scorer(kinds: Kinds, name: str) -> Kinds:
    """``kinds`` with its task kind choosing subtask templates by scorer
    ``name`` (``module:function``).

    Raises:
        ConfigError: ``name`` names no function that can be imported.
    """
    module, _, function = name.partition(":")
    try:
        scorer = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(
            "settings",
            "task.scorer",
            f"{name!r} is no importable module:function ({e})",
        ) from None
    if not callable(scorer):
        raise ConfigError("settings", "task.scorer", f"{name!r} is not a function")
    kind = kinds.get("task")
    if kind is None:
        return kinds
    return kinds.replaced(
        kind.replaced(decide=functools.partial(task_actor.decide, scorer=scorer))
    )


def _specs(registry: ToolRegistry, names: list[str]) -> tuple[ToolSpec, ...]:
    """The specs of tools ``names``, offered to models or not (a template
    that names one offers it)."""
    offered = {spec.name: spec for spec in registry.specs(names)}
    return tuple(offered[n] for n in names if n in offered)


_POSITIONED = re.compile(r"line (\d+), column (\d+): (.*)", re.S)


def _positioned(message: str) -> tuple[int, int, str]:
    m = _POSITIONED.match(message)
    if m is None:
        return 1, 1, message
    return int(m.group(1)), int(m.group(2)), m.group(3)
