"""Workflow definition files (TOML or YAML): read, checked, made a run.

A file holds a ``[workflow]`` table (``key``, ``version``, ``name``,
``max_steps``: the phase executions a run may start), the nodes in order
(``[[nodes]]``: ``key``, ``type``, ``provider``, ``profile``, ``prompt``,
``max_retries``; a run starts at the first) and the edges (``[[edges]]``:
``source``, ``target``, ``priority``, and ``auto = true`` or a ``when``
guard)::

    [workflow]
    key = "design-implement-review"
    version = 1

    [[nodes]]
    key = "design"
    provider = "default"          # a [models.<name>] table
    prompt = "Design {input.feature}."

    [[edges]]
    source = "design"
    target = "implement"
    priority = 1
    auto = true

Every problem is a `WorkflowFileError` naming the file, the node, edge or
field, and what is wrong; the checks of the graph are the workflow actor's
own (`steward.actors.workflow.graph.problems`).
"""

from __future__ import annotations

import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from steward.actors.run.stage_prompts import with_prompts
from steward.actors.workflow.events import (
    WORKFLOW_REVISION,
    EdgeDef,
    GitDef,
    NodeDef,
    WorkflowCreated,
    WorkflowDef,
    Worktree,
)
from steward.actors.workflow.graph import inputs_named, problems
from steward.config import Settings
from steward.effects.tools.git import git as run_git
from steward.errors import ConfigError, StewardError, ToolError, WorkflowFileError
from steward.events.protocol import ToolSpec

__all__ = [
    "BRANCH_TOKENS",
    "branch_name",
    "created",
    "load_definition",
    "mcp_of",
    "sanitize_ref",
    "worktree",
]


class _Workflow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: str
    version: int
    name: str = ""
    max_steps: int | None = None


class _Node(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: str
    type: Literal["agent"] = "agent"
    provider: str | None = None
    profile: str = "default"
    prompt: str = ""
    max_retries: int = 0


class _Edge(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source: str
    target: str
    priority: int
    auto: bool = False
    when: str | None = None


class _Git(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    repository: str | None = None
    target_branch: str | None = None
    branch_template: str | None = None
    pull_request: Literal["gh", "az"] | None = None
    keep: bool = False


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    workflow: _Workflow
    nodes: tuple[_Node, ...] = ()
    edges: tuple[_Edge, ...] = ()
    git: _Git | None = None


_PATH = re.compile(r"`\$((?:\.\w+|\[\d+\])*)`")
_ITEM = re.compile(r"\.(nodes|edges)\[(\d+)\]")
_UNKNOWN = re.compile(r"Object contains unknown field (`.*`)")
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def load_definition(path: str | Path, settings: Settings | None = None) -> WorkflowDef:
    """The workflow file ``path`` holds, checked; with ``settings``, each
    node's provider and profile must be configured there too.

    Raises:
        WorkflowFileError: the first problem found (with how many more).
    """
    file = Path(path)
    raw = _read(file)
    try:
        parsed = msgspec.convert(raw, _File)
    except msgspec.ValidationError as e:
        raise _error(file, *_where(str(e), raw)) from None
    definition = WorkflowDef(
        key=parsed.workflow.key,
        version=parsed.workflow.version,
        name=parsed.workflow.name,
        max_steps=parsed.workflow.max_steps,
        nodes=tuple(NodeDef(**_fields(n)) for n in parsed.nodes),
        edges=tuple(EdgeDef(**_fields(e)) for e in parsed.edges),
        git=None
        if parsed.git is None
        else GitDef(**msgspec.structs.asdict(parsed.git)),
    )
    found = problems(definition)
    template = definition.git.branch_template if definition.git else None
    if template is not None and (unknown := _unknown_tokens(template)):
        found.append(("git branch_template", unknown))
    if settings is not None:
        found += _settings_problems(definition, settings)
    if found:
        place, problem = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise _error(file, place, problem + more)
    return definition


def _error(file: Path, place: str, problem: str) -> WorkflowFileError:
    """The error, each part on one line: a key or guard may hold a newline."""
    return WorkflowFileError(_one_line(str(file)), _one_line(place), _one_line(problem))


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _fields(struct: msgspec.Struct) -> dict[str, Any]:
    return msgspec.structs.asdict(struct)


def _read(file: Path) -> Any:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _error(file, "(file)", "no such file") from None
    except OSError as e:
        raise _error(file, "(file)", f"cannot be read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise _error(file, "(file)", f"is not UTF-8 text: {e}") from None
    suffix = file.suffix.lower()
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            # Python 3.11's error has the position only in its message.
            at = _TOML_AT.search(str(e))
            if at is None:
                raise _error(file, "(file)", f"invalid TOML: {e}") from None
            place = f"line {at[1]}, column {at[2]}"
            problem = f"invalid TOML: {str(e)[: at.start()]}"
            raise _error(file, place, problem) from None
    if suffix in (".yaml", ".yml"):
        try:
            raw = yaml.safe_load(text)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark
            place = "(file)"
            if mark is not None:
                place = f"line {mark.line + 1}, column {mark.column + 1}"
            problem = f"invalid YAML: {e.problem or e.context or 'cannot be parsed'}"
            raise _error(file, place, problem) from None
        except yaml.YAMLError as e:
            raise _error(file, "(file)", f"invalid YAML: {e}") from None
        if raw is None:
            raise _error(file, "(file)", "is empty; it needs a workflow table")
        if not isinstance(raw, dict):
            raise _error(file, "(file)", "is no mapping of tables")
        return raw
    raise _error(file, "(file)", "is neither TOML (.toml) nor YAML (.yaml, .yml)")


def _where(message: str, raw: Any) -> tuple[str, str]:
    """A msgspec validation message as (place, problem), the place named as
    the graph's checks name it: ``$.nodes[1].max_retries`` of a node keyed
    ``review`` is ``node 2 "review", field max_retries``."""
    found = _PATH.search(message)
    problem = message[: found.start()].removesuffix(" - at ") if found else message
    path = found[1] if found else ""
    schema: type[msgspec.Struct] = _File
    place, rest = "(file)", path
    if item := _ITEM.match(path):
        schema = _Node if item[1] == "nodes" else _Edge
        place, rest = _item_place(raw, item[1], int(item[2])), path[item.end() :]
    elif path.startswith(".workflow"):
        schema, place, rest = _Workflow, "workflow", path.removeprefix(".workflow")
    if rest:
        field = rest.lstrip(".")
        place = field if place == "(file)" else f"{place}, field {field}"
    if (unknown := _UNKNOWN.fullmatch(problem)) and not rest:
        known = ", ".join(schema.__struct_fields__)
        return place, f"unknown field {unknown[1]}; the fields are {known}"
    return place, problem.replace("Object missing required", "missing required")


def _item_place(raw: Any, table: str, n: int) -> str:
    """Node or edge ``n`` (0-based) of ``raw``, named as `problems` names
    it, from what of its key (or ends) is there to read."""
    entries = raw.get(table) if isinstance(raw, dict) else None
    entry = entries[n] if isinstance(entries, list) and n < len(entries) else None
    entry = entry if isinstance(entry, dict) else {}
    if table == "nodes":
        key = entry.get("key")
        return f'node {n + 1} "{key}"' if isinstance(key, str) else f"node {n + 1}"
    source, target = entry.get("source"), entry.get("target")
    if isinstance(source, str) and isinstance(target, str):
        return f"edge {n + 1} ({source} -> {target})"
    return f"edge {n + 1}"


def _settings_problems(
    definition: WorkflowDef, settings: Settings
) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    models = ", ".join(sorted(settings.models)) or "none"
    for n, node in enumerate(definition.nodes, start=1):
        place = f'node {n} "{node.key}"'
        if node.provider and node.provider not in settings.models:
            found.append(
                (place, f"provider {node.provider!r} is no [models] table ({models})")
            )
        if node.profile not in settings.agents:
            known = ", ".join(sorted(settings.agents))
            found.append(
                (place, f"profile {node.profile!r} is no [agents] profile ({known})")
            )
    return found


def mcp_of(definition: WorkflowDef, settings: Settings) -> list[str]:
    """The ``[mcp]`` servers the profiles of ``definition``'s nodes use.

    Raises:
        ConfigError: a profile names a server that is not configured.
    """
    named: dict[str, None] = {}
    for profile in dict.fromkeys(node.profile for node in definition.nodes):
        agent = settings.profile(profile)
        named.update(
            dict.fromkeys(settings.servers(agent.mcp, f"agents.{profile}.mcp"))
        )
    return list(named)


def created(
    definition: WorkflowDef,
    settings: Settings,
    workflow_id: str,
    inputs: dict[str, str],
    tools: tuple[ToolSpec, ...] = (),
    file: str | None = None,
    worktree: Worktree | None = None,
) -> WorkflowCreated:
    """The first event of workflow run ``workflow_id``: the definition with
    each node's run settings resolved now (its profile's, asking its
    provider's model) and its ``max_steps`` (the file's, else ``[workflow]
    max_steps``), and the inputs its prompts name.

    Raises:
        WorkflowFileError: an input the prompts name has no value.
        ConfigError: a node's provider or profile is not configured.
    """
    missing = [name for name in inputs_named(definition) if name not in inputs]
    if missing:
        names = ", ".join(missing)
        raise WorkflowFileError(
            file or definition.key,
            "inputs",
            f"no value for {names}: pass --input {missing[0]}=VALUE",
        )
    nodes = []
    for node in definition.nodes:
        run = with_prompts(
            settings.run_settings(node.profile, tools), settings, node.profile
        )
        if node.provider is not None:
            if node.provider not in settings.models:
                raise ConfigError(
                    "settings", f"models.{node.provider}", "no such model table"
                )
            model = settings.models[node.provider]
            run = msgspec.structs.replace(
                run, model=model.model or model.provider, model_table=node.provider
            )
        nodes.append(msgspec.structs.replace(node, settings=run))
    steps = definition.max_steps or settings.workflow.max_steps
    return WorkflowCreated(
        workflow_id=workflow_id,
        definition=msgspec.structs.replace(
            definition, nodes=tuple(nodes), max_steps=steps
        ),
        inputs=inputs,
        file=file,
        worktree=worktree,
        revision=WORKFLOW_REVISION,
    )


BRANCH_TOKENS = (
    "tree-key",
    "run-id",
    "node-key",
    "issue-id",
    "timestamp",
    "short-hash",
    "date",
)
"""The tokens of a worktree branch's template (Alphred's)."""

_TOKEN = re.compile(r"\{([^{}]*)\}")


def _unknown_tokens(template: str) -> str | None:
    unknown = [t for t in _TOKEN.findall(template) if t not in BRANCH_TOKENS]
    if not unknown:
        return None
    known = ", ".join(f"{{{t}}}" for t in BRANCH_TOKENS)
    return f"unknown token {{{unknown[0]}}} in {template!r}; the tokens are {known}"


def branch_name(template: str, tokens: dict[str, str]) -> str:
    """``template`` with its tokens filled in, made a valid branch name
    (`sanitize_ref`).

    Raises:
        WorkflowFileError: the template names a token there is not.
    """
    if (unknown := _unknown_tokens(template)) is not None:
        raise WorkflowFileError("branch", "template", unknown)
    return sanitize_ref(_TOKEN.sub(lambda m: tokens.get(m.group(1), ""), template))


_REF_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]+|@\{")


def sanitize_ref(name: str) -> str:
    """``name`` made a valid git branch name: what git refuses (spaces,
    control characters, ``~ ^ : ? * [ \\``, ``@{``, ``..``) made ``-``,
    each ``/``-part without a leading ``.`` or ``-`` or a trailing ``.`` or
    ``.lock``, empty parts dropped; ``steward-branch`` if nothing is left."""
    name = _REF_BAD.sub("-", name)
    name = re.sub(r"\.{2,}", ".", name)
    parts = []
    for part in name.split("/"):
        part = re.sub(r"-{2,}", "-", part).strip(".-")
        while part.endswith(".lock"):
            part = part.removesuffix(".lock").rstrip(".-")
        if part:
            parts.append(part)
    branch = "/".join(parts)
    return branch if branch not in ("", "@", "HEAD") else "steward-branch"


async def worktree(
    definition: WorkflowDef,
    settings: Settings,
    workflow_id: str,
    *,
    repository: str | None = None,
    base: str | None = None,
    branch: str | None = None,
    issue: str | None = None,
    now: datetime | None = None,
) -> Worktree | None:
    """Where workflow run ``workflow_id`` works: a worktree of ``repository``
    (else the file's ``[git] repository``; neither: none) on a new branch
    from ``base`` (else ``[git] target_branch``, else the repository's
    current branch). The branch is named by ``branch`` (a name or template),
    else ``[git] branch_template``, else ``[workflow] branch_template``.

    Raises:
        WorkflowFileError: the repository is no git repository, the base
            branch does not exist (or is a detached HEAD), or the branch
            exists already.
        StewardError: ``branch`` names a token there is not.
        ConfigError: ``[workflow] branch_template``, used, names a token
            there is not.
    """
    git = definition.git or GitDef()
    repo = repository or git.repository
    if repo is None:
        return None
    try:
        root = await run_git("rev-parse", "--show-toplevel", cwd=repo)
        base = (
            base
            or git.target_branch
            or await run_git("rev-parse", "--abbrev-ref", "HEAD", cwd=root)
        )
    except ToolError as e:
        raise WorkflowFileError(repo, "repository", str(e)) from None
    if base == "HEAD":
        problem = (
            "the repository is on a detached HEAD: name the branch to start "
            "from with --base (or [git] target_branch)"
        )
        raise WorkflowFileError(repo, "base", problem)
    try:
        commit = f"{base}^{{commit}}"
        short = await run_git(
            "rev-parse", "--verify", "-q", "--short", commit, cwd=root
        )
    except ToolError:
        problem = f"no branch or commit {base!r} to start the worktree's branch from"
        raise WorkflowFileError(repo, "base", problem) from None
    when = now or datetime.now(UTC)
    tokens = {
        "tree-key": definition.key,
        "run-id": workflow_id,
        "node-key": definition.nodes[0].key,
        "issue-id": issue or "",
        "timestamp": when.strftime("%Y%m%d%H%M%S"),
        "short-hash": short,
        "date": when.strftime("%Y-%m-%d"),
    }
    template = branch or git.branch_template or settings.workflow.branch_template
    if (unknown := _unknown_tokens(template)) is not None:
        if branch:
            raise StewardError(f"--branch: {unknown}")
        if not git.branch_template:  # the file's own is checked when it is read
            raise ConfigError("settings", "workflow.branch_template", unknown)
    name = branch_name(template, tokens)
    try:
        await run_git("rev-parse", "--verify", "-q", f"refs/heads/{name}", cwd=root)
    except ToolError:
        pass  # a new branch, as it should be
    else:
        problem = (
            f"branch {name} exists already: name a new one with --branch (a "
            "template with {run-id} gives each run its own)"
        )
        raise WorkflowFileError(repo, "branch", problem)
    return Worktree(
        repository=root,
        path=str(Path(settings.workflow.worktrees).resolve() / workflow_id),
        branch=name,
        base=base,
        pull_request=git.pull_request,
        keep=git.keep,
    )
