"""Workflow definition files (TOML or YAML): read, checked, made a run.

A file holds a ``[workflow]`` table (``key``, ``version``, ``name``), the
nodes in order (``[[nodes]]``: ``key``, ``type``, ``provider``, ``profile``,
``prompt``, ``max_retries``; a run starts at the first) and the edges
(``[[edges]]``: ``source``, ``target``, ``priority``, and ``auto = true`` or a
``when`` guard)::

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
own (`steward.actors.workflow_graph.problems`).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from steward.actors.workflow_graph import inputs_named, problems
from steward.config import Settings
from steward.errors import ConfigError, WorkflowFileError
from steward.events.run import ToolSpec
from steward.events.workflow import EdgeDef, NodeDef, WorkflowCreated, WorkflowDef

__all__ = ["created", "load_definition"]


class _Workflow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: str
    version: int
    name: str = ""


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


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    workflow: _Workflow
    nodes: tuple[_Node, ...] = ()
    edges: tuple[_Edge, ...] = ()


_PATH = re.compile(r"`\$((?:\.\w+|\[\d+\])*)`")


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
        raise WorkflowFileError(str(file), *_where(str(e))) from None
    definition = WorkflowDef(
        key=parsed.workflow.key,
        version=parsed.workflow.version,
        name=parsed.workflow.name,
        nodes=tuple(NodeDef(**msgspec.structs.asdict(n)) for n in parsed.nodes),
        edges=tuple(EdgeDef(**msgspec.structs.asdict(e)) for e in parsed.edges),
    )
    found = problems(definition)
    if settings is not None:
        found += _settings_problems(definition, settings)
    if found:
        place, problem = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise WorkflowFileError(str(file), place, problem + more)
    return definition


def _read(file: Path) -> Any:
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkflowFileError(str(file), "(file)", "no such file") from None
    except OSError as e:
        problem = f"cannot be read: {e.strerror}"
        raise WorkflowFileError(str(file), "(file)", problem) from None
    except UnicodeDecodeError as e:
        problem = f"is not UTF-8 text: {e}"
        raise WorkflowFileError(str(file), "(file)", problem) from None
    suffix = file.suffix.lower()
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise WorkflowFileError(str(file), "(file)", f"invalid TOML: {e}") from e
    if suffix in (".yaml", ".yml"):
        try:
            raw = yaml.safe_load(text)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark
            place = f"line {mark.line + 1}" if mark is not None else "(file)"
            problem = f"invalid YAML: {e.problem}"
            raise WorkflowFileError(str(file), place, problem) from None
        except yaml.YAMLError as e:
            problem = f"invalid YAML: {e}"
            raise WorkflowFileError(str(file), "(file)", problem) from None
        if not isinstance(raw, dict):
            raise WorkflowFileError(str(file), "(file)", "is no mapping of tables")
        return raw
    raise WorkflowFileError(
        str(file), "(file)", "is neither TOML (.toml) nor YAML (.yaml, .yml)"
    )


def _where(message: str) -> tuple[str, str]:
    """A msgspec validation message as (place, problem): ``$.nodes[1].key``
    is ``node 2``, field ``key``."""
    found = _PATH.search(message)
    problem = message[: found.start()].rstrip(" -") if found else message
    if found is None:
        return "(file)", problem
    path = found[1]
    node = re.match(r"\.(nodes|edges)\[(\d+)\](?:\.(\w+))?", path)
    if node is not None:
        what = "node" if node[1] == "nodes" else "edge"
        field = f" {node[3]}" if node[3] else ""
        return f"{what} {int(node[2]) + 1}{field}", problem
    return path.lstrip(".") or "(file)", problem


def _settings_problems(
    definition: WorkflowDef, settings: Settings
) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    models = ", ".join(sorted(settings.models)) or "none"
    for n, node in enumerate(definition.nodes, start=1):
        place = f'node {n} "{node.key}"'
        if node.provider is not None and node.provider not in settings.models:
            found.append(
                (place, f"provider {node.provider!r} is no [models] table ({models})")
            )
        if node.profile not in settings.agents:
            known = ", ".join(sorted(settings.agents))
            found.append(
                (place, f"profile {node.profile!r} is no [agents] profile ({known})")
            )
    return found


def created(
    definition: WorkflowDef,
    settings: Settings,
    workflow_id: str,
    inputs: dict[str, str],
    tools: tuple[ToolSpec, ...] = (),
    file: str | None = None,
) -> WorkflowCreated:
    """The first event of workflow run ``workflow_id``: the definition with
    each node's run settings resolved now (its profile's, asking its
    provider's model), and the inputs its prompts name.

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
        run = settings.run_settings(node.profile, tools)
        if node.provider is not None:
            if node.provider not in settings.models:
                raise ConfigError(
                    "settings", f"models.{node.provider}", "no such model table"
                )
            model = settings.models[node.provider]
            run = msgspec.structs.replace(run, model=model.model or model.provider)
        nodes.append(msgspec.structs.replace(node, settings=run))
    return WorkflowCreated(
        workflow_id=workflow_id,
        definition=msgspec.structs.replace(definition, nodes=tuple(nodes)),
        inputs=inputs,
        file=file,
    )
