"""A workflow definition's rules (pure): what makes one valid, which
transition a finished phase takes, what a phase is handed from upstream,
and the routing decision of a phase's result.

Shared by the workflow decider (`steward.actors.workflow.decider`), its
effects and the definition files' loader (`steward.actors.workflow.definition`),
so a file is checked by the very rules a run follows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from steward.actors.workflow.events import Artifact, EdgeDef, NodeDef, WorkflowDef
from steward.actors.workflow.guards import GuardError, evaluate, parse

__all__ = [
    "MAX_CHARS_PER_ARTIFACT",
    "MAX_CONTEXT_CHARS_TOTAL",
    "MAX_UPSTREAM_ARTIFACTS",
    "ROUTING_DECISIONS",
    "Decision",
    "auto_loops",
    "choose",
    "guard_context",
    "handoff",
    "head_tail",
    "inputs_named",
    "node_of",
    "predecessors",
    "problems",
    "render_prompt",
    "routing_decision",
    "upstream_text",
]

MAX_UPSTREAM_ARTIFACTS = 4
"""Upstream reports a phase is handed, at most (Alphred's hand-off policy v1)."""
MAX_CONTEXT_CHARS_TOTAL = 32_000
"""Characters of upstream reports a phase is handed, at most, all together."""
MAX_CHARS_PER_ARTIFACT = 12_000
"""Characters of one upstream report a phase is handed, at most."""

ROUTING_DECISIONS = ("approved", "changes_requested", "blocked", "retry")
"""The typed routing decisions a phase's result may carry."""

Decision = Literal["approved", "changes_requested", "blocked", "retry", "no_route"]

_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
_INPUT = re.compile(r"\{input\.([A-Za-z_][A-Za-z0-9_-]*)\}")


def problems(definition: WorkflowDef) -> list[tuple[str, str]]:
    """What is wrong with ``definition``: (place, problem) pairs, in file
    order; the place names the node or edge (``node "review"``, ``edge 3
    (review -> implement)``)."""
    found: list[tuple[str, str]] = []
    if not _KEY.fullmatch(definition.key):
        found.append(("workflow", _key_problem("key", definition.key)))
    if definition.version < 1:
        found.append(("workflow", f"version is {definition.version}; it starts at 1"))
    if definition.max_steps is not None and definition.max_steps < 1:
        steps = definition.max_steps
        found.append(("workflow", f"max_steps is {steps}; at least 1"))
    if not definition.nodes:
        found.append(("workflow", "it has no nodes; a run starts at the first"))
    seen: dict[str, int] = {}
    for n, node in enumerate(definition.nodes, start=1):
        place = f'node {n} "{node.key}"'
        if node.key in seen:
            found.append((place, f"duplicate key: node {seen[node.key]} has it"))
        else:
            seen[node.key] = n
        if not _KEY.fullmatch(node.key):
            found.append((place, _key_problem("key", node.key)))
        if node.type == "agent" and not node.provider:
            found.append((place, "an agent node needs a provider (a [models] name)"))
        if node.max_retries < 0:
            found.append((place, f"max_retries is {node.max_retries}; at least 0"))
    priorities: dict[tuple[str, int], int] = {}
    for n, edge in enumerate(definition.edges, start=1):
        place = f"edge {n} ({edge.source} -> {edge.target})"
        for end, key in (("source", edge.source), ("target", edge.target)):
            if key not in seen:
                found.append((place, f"its {end} {key!r} is no node"))
        taken = priorities.setdefault((edge.source, edge.priority), n)
        if taken != n:
            found.append(
                (
                    place,
                    f"priority {edge.priority} is edge {taken}'s too; the edges "
                    f"of one source need distinct priorities",
                )
            )
        if edge.auto and edge.when is not None:
            found.append((place, "it is auto and has a guard; give it one of them"))
        elif not edge.auto and edge.when is None:
            found.append((place, "it needs auto = true or a when guard"))
        elif edge.when is not None:
            try:
                parse(edge.when)
            except GuardError as e:
                found.append((place, f"its guard {edge.when!r} does not parse at {e}"))
    return found


def _key_problem(field: str, key: str) -> str:
    return (
        f"{field} {key!r} must be lower-case letters, digits, _ and -, "
        "starting with a letter or digit"
    )


def node_of(definition: WorkflowDef, key: str) -> NodeDef:
    """Node ``key`` of ``definition``."""
    return next(n for n in definition.nodes if n.key == key)


def choose(
    definition: WorkflowDef, node: str, context: Mapping[str, Any]
) -> EdgeDef | None:
    """The transition a completed ``node`` takes: its edges by priority
    (lowest first), the first that is ``auto`` or whose guard holds in
    ``context``; ``None`` when none does (the run completes)."""
    edges = sorted((e for e in definition.edges if e.source == node), key=_priority)
    for edge in edges:
        if edge.auto:
            return edge
        if edge.when is not None and evaluate(parse(edge.when), dict(context)):
            return edge
    return None


def _priority(edge: EdgeDef) -> int:
    return edge.priority


def auto_loops(definition: WorkflowDef) -> list[tuple[str, ...]]:
    """The cycles a run can leave only by failing (at ``max_steps``, say):
    each of their nodes' first edge by priority is ``auto``, so it is taken
    whatever the phase reports, and those edges close a cycle. Each cycle
    once, its nodes in the order taken, starting at the first in node order.
    A cycle with a guarded edge before an ``auto`` one can be left, and is
    none of them."""
    forced: dict[str, str] = {}
    for node in definition.nodes:
        edges = sorted(
            (e for e in definition.edges if e.source == node.key), key=_priority
        )
        if edges and edges[0].auto:
            forced[node.key] = edges[0].target
    loops: list[tuple[str, ...]] = []
    seen: set[str] = set()
    for node in definition.nodes:
        path: list[str] = []
        at: str | None = node.key
        while at is not None and at not in seen and at not in path:
            path.append(at)
            at = forced.get(at)
        seen.update(path)
        if at is not None and at in path:
            cycle = path[path.index(at) :]
            first = min(cycle, key=[n.key for n in definition.nodes].index)
            start = cycle.index(first)
            loops.append(tuple(cycle[start:] + cycle[:start]))
    return loops


def guard_context(
    node: str, attempt: int, decision: str | None, metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """What a finished phase's guards read: ``decision`` (its routing
    decision), ``report`` (its structured report, the result's metadata),
    ``node`` and ``attempt``; any other first name reads the report, so
    ``needs_revision`` is ``report.needs_revision``. A ``decision`` of
    ``None`` (the phase gave none) is a missing path, not the report's
    ``decision`` field: every comparison with it is false."""
    context = {**metadata, "report": dict(metadata), "node": node, "attempt": attempt}
    if decision is None:
        context.pop("decision", None)
    else:
        context["decision"] = decision
    return context


def routing_decision(metadata: Mapping[str, Any]) -> tuple[Decision, str | None]:
    """The typed routing decision of a result's ``metadata`` and the key it
    came from: ``routingDecision`` when it is one of `ROUTING_DECISIONS`,
    else ``routing_decision`` when that is, else ``no_route``. The report's
    text is never read for it."""
    for key in ("routingDecision", "routing_decision"):
        value = metadata.get(key)
        if isinstance(value, str) and value in ROUTING_DECISIONS:
            return value, key  # type: ignore[return-value]
    return "no_route", None


def predecessors(definition: WorkflowDef, node: str) -> list[str]:
    """The direct predecessors of ``node`` (sources of edges into it), in
    node order."""
    sources = {e.source for e in definition.edges if e.target == node}
    return [n.key for n in definition.nodes if n.key in sources]


def head_tail(chars: int, limit: int) -> tuple[int, int]:
    """How many characters of the head and of the tail of a text of
    ``chars`` are kept under ``limit``: all of it (tail 0) when it fits,
    else half each (the head the larger by one)."""
    if chars <= limit:
        return chars, 0
    head = (limit + 1) // 2
    return head, limit - head


def handoff(
    definition: WorkflowDef, node: str, reports: Mapping[str, tuple[int, str, str]]
) -> tuple[tuple[Artifact, ...], tuple[str, ...]]:
    """What phase ``node`` is handed: the latest successful report
    (``reports``: node to (attempt, run id, text)) of each direct
    predecessor, in node order, at most `MAX_UPSTREAM_ARTIFACTS`, each cut
    to `MAX_CHARS_PER_ARTIFACT` and all to `MAX_CONTEXT_CHARS_TOTAL`; and the
    predecessors with a report that the caps left out."""
    artifacts: list[Artifact] = []
    dropped: list[str] = []
    budget = MAX_CONTEXT_CHARS_TOTAL
    for key in predecessors(definition, node):
        if key not in reports:
            continue
        attempt, run_id, text = reports[key]
        limit = min(MAX_CHARS_PER_ARTIFACT, budget)
        if len(artifacts) == MAX_UPSTREAM_ARTIFACTS or limit <= 0:
            dropped.append(key)
            continue
        head, tail = head_tail(len(text), limit)
        artifacts.append(
            Artifact(
                node=key,
                attempt=attempt,
                run_id=run_id,
                chars=len(text),
                included=head + tail,
                truncated=head + tail < len(text),
                head=head if head + tail < len(text) else 0,
                tail=tail,
            )
        )
        budget -= head + tail
    return tuple(artifacts), tuple(dropped)


def upstream_text(
    artifacts: tuple[Artifact, ...], reports: Mapping[str, tuple[int, str, str]]
) -> str:
    """The context envelope (v1) of ``artifacts``: a heading per report
    (whose, how much of it), then its kept text; "" for none."""
    parts = []
    for a in artifacts:
        text = reports[a.node][2]
        if a.truncated:
            kept = (
                f"{text[: a.head]}\n[... {a.chars - a.included} characters cut ...]\n"
            )
            kept += text[len(text) - a.tail :] if a.tail else ""
            size = f"first {a.head} and last {a.tail} of {a.chars} characters"
        else:
            kept, size = text, f"{a.chars} characters"
        parts.append(
            f"### {a.node} (attempt {a.attempt}, run {a.run_id}; {size})\n{kept}"
        )
    if not parts:
        return ""
    return "## Upstream reports (context envelope v1)\n\n" + "\n\n".join(parts)


def inputs_named(definition: WorkflowDef) -> list[str]:
    """The workflow inputs the prompts name (``{input.NAME}``), sorted."""
    return sorted({m for n in definition.nodes for m in _INPUT.findall(n.prompt)})


def render_prompt(template: str, inputs: Mapping[str, str]) -> str:
    """``template`` with each ``{input.NAME}`` made input NAME (one with no
    value is kept as written)."""
    return _INPUT.sub(lambda m: inputs.get(m.group(1), m.group(0)), template)
