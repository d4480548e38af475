"""The staged policy: what a staged run's model may use at each stage.

A pure function of the user's two switches and the stage (spec 004 §2, §4,
§5.2, §6): ``(mode, reasoning, stage, the run's tools) -> StagePolicy``,
the tools the stage allows, the prompts its system prompt is composed of
and the reasoning it requires. The mode and the reasoning switch belong to
the user: a policy echoes them unchanged, whatever the stage.

=============== ======================== ===========================
stage           tools (agent / chat)     reasoning (agent, on)
=============== ======================== ===========================
warmup          none / none              macro (``<ide_reasoning>``)
act             all / read-only          micro
tool_followup   all / read-only          micro
micro_step      all / read-only          micro
delivery_check  none / none              micro
qa_review       read-only / read-only    micro (QA's own prompt)
=============== ======================== ===========================

In chat mode, or with reasoning off, no stage requires reasoning; whether
to run ``warmup`` then is the caller's choice. Beside the policy: `compose`
(the system prompt from the prompt texts) and the reasoning helpers
(`split_reasoning`, `outcome_of`, `outcome_text`) that keep only a compact
`ReasoningOutcome` of a reply's ``<ide_reasoning>`` block (spec §4.3). None
of them raises on any model text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Literal, get_args

import msgspec

from steward.actors.task.templates import PLACEHOLDER, placeholders

__all__ = [
    "ALLOWED_VARIABLES",
    "MODES",
    "PROMPT_NAMES",
    "REASONING_BLOCK",
    "RECOVERY_PROMPTS",
    "STAGES",
    "Access",
    "Mode",
    "ReasoningOutcome",
    "Stage",
    "StagePolicy",
    "compose",
    "outcome_of",
    "outcome_text",
    "interpolate",
    "placeholders",
    "policy",
    "read_only",
    "split_reasoning",
    "tool_access",
]

Mode = Literal["agent", "chat"]
"""The user's mode: agent works with every tool, chat only reads."""
MODES: tuple[Mode, ...] = get_args(Mode)

Stage = Literal[
    "warmup", "act", "tool_followup", "micro_step", "delivery_check", "qa_review"
]
"""A step of a staged run, in the order a run goes through them."""
STAGES: tuple[Stage, ...] = get_args(Stage)

Access = Literal["all", "read_only", "none"]
"""Which of the run's tools a stage allows."""

READ_ONLY_VERBS = ("read", "list", "search")
"""A tool is read-only when the last dotted segment of its name is one of
these, or starts with one and ``_`` (``files.read``, ``memory.search``,
``index.read_symbol``)."""

STAGE_PROMPTS: Mapping[Stage, str] = MappingProxyType(
    {
        "warmup": "stages/warmup",
        "act": "stages/act",
        "tool_followup": "stages/tool_followup",
        "micro_step": "stages/micro_step",
        "delivery_check": "stages/delivery_check",
        "qa_review": "qa/system",
    }
)
"""Each stage's own prompt."""

REASONING_PROMPTS: Mapping[Stage, str] = MappingProxyType(
    {
        "warmup": "agent/reasoning_macro",
        "act": "agent/reasoning_micro",
        "tool_followup": "agent/reasoning_micro",
        "micro_step": "agent/reasoning_micro",
        "delivery_check": "agent/reasoning_micro",
        "qa_review": "qa/review_micro_reasoning",
    }
)
"""The reasoning prompt each stage adds in agent mode with reasoning on."""

MODE_PROMPTS: Mapping[Mode, str] = MappingProxyType(
    {"agent": "agent/mode_addition", "chat": "chat/mode_addition"}
)
"""The addition each mode makes to the base prompt (it never asks to switch)."""

RECOVERY_PROMPTS: tuple[str, ...] = (
    "recovery/empty_response",
    "recovery/asks_for_files",
    "recovery/tool_failure",
    "stages/delivery_gate",
)
"""The corrections a staged run sends as a user message: after an empty
reply, after a reply that asks the user for files or diffs, after a failed
tool call, and when delivery is still ``NEEDS_WORK`` (spec §10)."""

PROMPT_NAMES: tuple[str, ...] = (
    "base/system",
    "base/project_root_context",
    "agent/mode_addition",
    "chat/mode_addition",
    "agent/reasoning_macro",
    "agent/reasoning_micro",
    "stages/warmup",
    "stages/act",
    "stages/tool_followup",
    "stages/micro_step",
    "stages/delivery_check",
    "qa/system",
    "qa/review_micro_reasoning",
    "qa/report_schema",
    *RECOVERY_PROMPTS,
)
"""Every prompt the package ships, by name (its path under the prompt
directory, without ``.md``)."""

ALLOWED_VARIABLES = frozenset(
    {"project_root", "user_input", "tool_summary", "last_step_outcome"}
)
"""The variables a prompt may use, as ``{{name}}`` (spec §5.3)."""


# -- the policy -------------------------------------------------------------------


class StagePolicy(msgspec.Struct, frozen=True):
    """What a stage allows and asks of the model."""

    stage: Stage
    mode: Mode
    """The user's mode, as given."""
    reasoning: bool
    """The user's reasoning switch, as given."""
    tools: tuple[str, ...]
    """The names of the tools the stage allows, sorted."""
    prompts: tuple[str, ...]
    """The prompts of its system prompt, in the order they are composed."""
    reasoning_format: Literal["macro", "micro"] | None
    """The reasoning the stage requires of every reply, if any."""


def read_only(name: str) -> bool:
    """Whether the tool ``name`` only reads (see `READ_ONLY_VERBS`)."""
    verb = name.rpartition(".")[2]
    return any(verb == v or verb.startswith(f"{v}_") for v in READ_ONLY_VERBS)


def tool_access(mode: Mode, stage: Stage) -> Access:
    """Which of the run's tools ``stage`` allows in ``mode`` (spec §6):
    planning and delivering use none, QA and chat mode only read."""
    if stage in ("warmup", "delivery_check"):
        return "none"
    if stage == "qa_review" or mode == "chat":
        return "read_only"
    return "all"


def policy(
    mode: Mode, reasoning: bool, stage: Stage, tools: Sequence[str]
) -> StagePolicy:
    """The policy of ``stage`` for a run in ``mode`` with the reasoning
    switch ``reasoning`` whose tools are named ``tools``.

    Raises:
        ValueError: ``mode`` or ``stage`` is none of `MODES` or `STAGES`.
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is none of {', '.join(MODES)}")
    if stage not in STAGES:
        raise ValueError(f"stage {stage!r} is none of {', '.join(STAGES)}")
    access = tool_access(mode, stage)
    allowed = sorted(
        {
            name
            for name in tools
            if access == "all" or (access == "read_only" and read_only(name))
        }
    )
    reasons = mode == "agent" and reasoning
    prompts = [
        "base/system",
        "base/project_root_context",
        MODE_PROMPTS[mode],
        STAGE_PROMPTS[stage],
    ]
    if reasons:
        prompts.append(REASONING_PROMPTS[stage])
    if stage == "qa_review":
        prompts.append("qa/report_schema")
    return StagePolicy(
        stage=stage,
        mode=mode,
        reasoning=reasoning,
        tools=tuple(allowed),
        prompts=tuple(prompts),
        reasoning_format=(
            None if not reasons else "macro" if stage == "warmup" else "micro"
        ),
    )


# -- composing the system prompt ----------------------------------------------------


def compose(
    prompts: Mapping[str, str], policy: StagePolicy, variables: Mapping[str, str]
) -> str:
    """The system prompt of ``policy``: each of its prompts (by name, from
    ``prompts``) with its variables filled in, stripped, the non-empty ones
    joined by a blank line.

    Only `ALLOWED_VARIABLES` are filled, each with its value in
    ``variables`` or nothing; another ``{{name}}`` is left as it is (the
    loader refuses a prompt file holding one). Values are not read again, so
    a ``{{...}}`` in a user's input stays text.

    Raises:
        KeyError: a prompt the policy names is not in ``prompts``.
    """
    parts = []
    for name in policy.prompts:
        if name not in prompts:
            raise KeyError(f"no prompt {name!r} (the policy of {policy.stage} uses it)")
        parts.append(interpolate(prompts[name], variables).strip())
    return "\n\n".join(part for part in parts if part)


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    """``text`` with each `ALLOWED_VARIABLES` placeholder filled with its
    value in ``variables`` (or nothing), in one pass; another ``{{name}}``
    is left as it is."""

    def filled(found: re.Match[str]) -> str:
        name = found[1]
        return variables.get(name, "") if name in ALLOWED_VARIABLES else found[0]

    return PLACEHOLDER.sub(filled, text)


# -- reasoning ---------------------------------------------------------------------

REASONING_BLOCK = re.compile(
    r"<ide_reasoning\s*>(.*?)(?:</ide_reasoning\s*>|\Z)", re.IGNORECASE | re.DOTALL
)
"""An ``<ide_reasoning>`` block; group 1 is its inner text. A block the
reply never closes (cut off at its token limit) runs to the reply's end."""

_SECTIONS: Mapping[str, str] = MappingProxyType(
    {
        "analyze": "analyze",
        "analyse": "analyze",
        "analysis": "analyze",
        "research": "research",
        "plan": "plan",
        "reflect": "reflect",
        "reflection": "reflect",
        "risk": "reflect",
        "risks": "reflect",
        "known risks": "reflect",
        "action": "action",
        "actions": "action",
        "next": "action",
        "next action": "action",
        "next actions": "action",
        "next step": "action",
        "next steps": "action",
        "delivery": "delivery",
    }
)
"""The headings a reasoning block's sections are read by, lowercased, and
the section each opens."""

_HEADING = re.compile(
    r"[ \t]*+(?:[-*+][ \t]++)?(?:#{1,6}+[ \t]*+)?(?:\d{1,3}+[.)][ \t]*+)?[*_ \t]*+"
    r"(?P<name>[A-Za-z]++(?:[ \t][A-Za-z]++)?)[ \t*_]*+(?::(?P<rest>.*))?"
)
"""A line opening a section: ``Plan: ...``, ``## Plan``, ``**Plan:** ...``,
``- Action: ...``, ``1. Reflect``. Without a colon, the line must hold the
heading alone (so a sentence starting "Plan the ..." stays text).
Possessive quantifiers keep a long line of blanks linear."""

_BULLET = re.compile(r"^\s*+(?:[-*+•]|\d{1,3}+[.)])\s++")
_DONE = re.compile(r"DONE(?![A-Za-z0-9_])")
"""Delivery is done when its section starts with the word DONE (capitals,
as the prompts ask; anything else, ``NEEDS_WORK`` included, is not)."""

OUTCOME_CHARS = 200
"""The most characters each part of a `ReasoningOutcome` keeps."""


class ReasoningOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What the history keeps of a reasoning block (spec §4.3)."""

    plan_delta: str = ""
    """What changed in the plan: the Plan section's items, on one line."""
    next_action: str = ""
    """The tool calls to make next: the Action section, on one line."""
    known_risks: str = ""
    """The Reflect section's first line."""
    delivery_state: Literal["DONE", "NEEDS_WORK"] = "NEEDS_WORK"
    """``DONE`` only when the Delivery section starts with it."""


def split_reasoning(text: str) -> tuple[str | None, str]:
    """The inner text of ``text``'s reasoning blocks (joined by a blank line;
    ``None`` when it has none) and ``text`` without them, stripped. Blocks
    are taken out until none is left, so text around one cannot join into
    another that stays visible."""
    blocks: list[str] = []
    rest = text
    while found := [m[1].strip() for m in REASONING_BLOCK.finditer(rest)]:
        blocks += found
        rest = REASONING_BLOCK.sub("", rest)
    return ("\n\n".join(blocks) if blocks else None), rest.strip()


def _sections(block: str) -> dict[str, list[str]]:
    """The lines of each section of ``block``, by section. Lines before the
    first heading belong to none, and so do those under a heading said a
    second time (the first one counts)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in block.splitlines():
        found = _HEADING.fullmatch(line)
        name = None if found is None else _SECTIONS.get(found["name"].lower())
        if found is None or name is None:
            if current is not None and line.strip():
                current.append(line.strip())
        elif name in sections:
            current = None
        else:
            current = sections[name] = []
            if rest := (found["rest"] or "").strip(" \t*_"):
                current.append(rest)
    return sections


def _one_line(lines: list[str], separator: str = "; ") -> str:
    """``lines`` without their bullets, on one line, cut to `OUTCOME_CHARS`."""
    items = (_BULLET.sub("", line).strip() for line in lines)
    text = " ".join(separator.join(item for item in items if item).split())
    if len(text) > OUTCOME_CHARS:
        text = text[: OUTCOME_CHARS - 1].rstrip() + "…"
    return text


def outcome_of(block: str) -> ReasoningOutcome:
    """The outcome of the reasoning ``block`` (its inner text), read from
    its sections: Plan, Action, Reflect (or Risks) and Delivery, each a
    heading and the text up to the next one. Any text gives an outcome; one
    without the sections gives empty parts and ``NEEDS_WORK``."""
    sections = _sections(block)
    delivery = _one_line(sections.get("delivery", [])[:1]).lstrip("*_`\"' \t")
    return ReasoningOutcome(
        plan_delta=_one_line(sections.get("plan", [])),
        next_action=_one_line(sections.get("action", [])),
        known_risks=_one_line(sections.get("reflect", [])[:1]),
        delivery_state="DONE" if _DONE.match(delivery) else "NEEDS_WORK",
    )


def outcome_text(outcome: ReasoningOutcome) -> str:
    """``outcome`` as one compact paragraph for the history, its empty parts
    left out: ``Reasoning outcome: plan: ...; next: ...; risks: ...;
    delivery: NEEDS_WORK``."""
    parts = [
        f"{label}: {' '.join(value.split())}"
        for label, value in (
            ("plan", outcome.plan_delta),
            ("next", outcome.next_action),
            ("risks", outcome.known_risks),
        )
        if value.strip()
    ]
    parts.append(f"delivery: {outcome.delivery_state}")
    return "Reasoning outcome: " + "; ".join(parts)
