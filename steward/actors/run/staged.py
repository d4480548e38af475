"""What a staged run reads and says (spec 004), pure: the run decider
(`steward.actors.run.decider`) asks it which stage comes next, what the stage's
policy is, how a reply reads, and what a recovery or correction says.

A staged run goes: ``warmup`` (when the user's mode is ``agent`` and
reasoning is on: plan, no tools), then ``act`` (the stage's tools), after
tool results ``tool_followup`` (or ``micro_step`` when reasoning is on),
until the model answers without tools; then ``delivery_check`` (no tools:
the final answer, ``Delivery: DONE``), and ``qa_review`` (read-only tools,
an advisory report). The mode and reasoning are the user's: every stage
gets them as they were set. A tool the stage does not offer is refused,
naming those it does.
"""

from __future__ import annotations

import re
from typing import Any

from steward.actors.run.events import RunSettings
from steward.actors.run.stages import (
    ReasoningOutcome,
    Stage,
    StagePolicy,
    outcome_of,
    policy,
    split_reasoning,
)
from steward.actors.task.values import json_value, unfenced
from steward.events.protocol import ChatMessage

__all__ = [
    "ACTING",
    "Reading",
    "followup_stage",
    "first_stage",
    "last_failure",
    "reading",
    "stage_policy",
    "summary",
    "user_input",
    "variables",
]

ACTING: frozenset[str] = frozenset({"act", "tool_followup", "micro_step"})
"""The stages whose replies call tools to do the work."""

MAX_RECOVERIES = 5
"""Recoveries and delivery-gate corrections a staged run takes, at most:
past them it fails, rather than loop."""

_ASKS_FOR_FILES = re.compile(
    r"\b(please|could you|can you|would you|kindly)\b[^.?!\n]{0,40}?"
    r"\b(send|share|provide|paste|upload|attach|give)\b[^.?!\n]{0,30}?"
    r"\b(files?|diffs?|contents|code|logs?)\b"
    r"|\b(send|share|give|show)\s+me\s+(the\s+|your\s+|a\s+)?"
    r"(files?|diffs?|contents|code|logs?)\b",
    re.IGNORECASE,
)
"""A reply asking the user for files or diffs (spec 004 §10.2): a request
to them, not an answer that mentions providing code."""
_DONE = re.compile(
    r"^[ \t]*+\**+[ \t]*+delivery[ \t]*+\**+[ \t]*+:[ \t]*+\**+[ \t]*+DONE\b[^\n]*",
    re.I | re.M,
)
"""A line saying ``Delivery: DONE`` (possessive, so no text makes it slow)."""


def first_stage(settings: RunSettings) -> Stage:
    """The stage a staged run starts in: warmup when it reasons."""
    return "warmup" if _reasons(settings) else "act"


def followup_stage(settings: RunSettings) -> Stage:
    """The stage after tool results: a micro step when the run reasons."""
    return "micro_step" if _reasons(settings) else "tool_followup"


def _reasons(settings: RunSettings) -> bool:
    return settings.mode == "agent" and settings.reasoning


def stage_policy(settings: RunSettings, stage: str) -> StagePolicy:
    """The policy of ``stage`` for a run of ``settings``: its tools of the
    run's own (the user's mode and reasoning as they were set)."""
    names = [t.name for t in settings.tools]
    return policy(settings.mode, settings.reasoning, stage, names)  # type: ignore[arg-type]


def user_input(conversation: tuple[ChatMessage, ...]) -> str:
    """A run's own input: the last user message of the conversation it
    started from (a session turn's earlier chat comes before it)."""
    return next((m.content for m in reversed(conversation) if m.role == "user"), "")


def variables(
    settings: RunSettings,
    conversation: tuple[ChatMessage, ...],
    transcript: tuple[ChatMessage, ...],
    tools: tuple[str, ...],
) -> dict[str, str]:
    """The values of a staged run's prompt variables, from its state."""
    last = next((m.content for m in reversed(transcript) if m.role == "tool"), "")
    return {
        "project_root": settings.project_root,
        "user_input": user_input(conversation),
        "tool_summary": ", ".join(tools) or "none",
        "last_step_outcome": last[:2000],
    }


def last_failure(transcript: tuple[ChatMessage, ...]) -> str:
    """The newest failed tool call's message in ``transcript`` (what the
    tool-failure recovery names as ``{{last_step_outcome}}``, though a call
    of the same batch answered after it)."""
    failed = (m.content for m in reversed(transcript) if m.role == "tool")
    return next((text for text in failed if _failed(text)), "")[:2000]


def summary(goal: str, entries: tuple[ChatMessage, ...], plans: tuple[str, ...]) -> str:
    """The structured summary of a staged run's transcript ``entries`` that
    left its window (spec 004 §7): its goal, the plans its reasoning
    recorded (the decisions; the last is the current plan), the tool
    failures among them (open issues) and the newest tool outputs, each cut
    short. Built from the entries alone, the same every time; the entries
    hold no reasoning block (a reply keeps only its outcome)."""
    failures = [m.content for m in entries if m.role == "tool" and _failed(m.content)]
    outputs = [
        m.content for m in entries if m.role == "tool" and not _failed(m.content)
    ]
    sections = {
        "Goals": [goal],
        "Decisions": list(plans[-5:]),
        "Current plan": list(plans[-1:]),
        "Open issues": failures[-5:],
        "Important tool outputs": outputs[-5:],
    }
    lines = []
    for title, items in sections.items():
        lines.append(f"## {title}")
        lines += [f"- {_cut(_scrubbed(item))}" for item in items] or ["- (none)"]
    return "\n".join(lines)


_TAG = re.compile(r"</?\s*ide_reasoning\s*>", re.IGNORECASE)


def _scrubbed(text: str) -> str:
    """``text`` without reasoning blocks or stray reasoning tags (a tool's
    output may hold any text)."""
    return _TAG.sub("", split_reasoning(text)[1])


def _failed(content: str) -> bool:
    return content.startswith(("Tool ", "error:")) and "failed" in content[:200]


def _cut(text: str, limit: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


class Reading:
    """What a staged run's reply says: its visible text (the reasoning
    block taken out), the outcome of its reasoning if it had any, whether it
    is empty, asks the user for files, says its delivery is done, and (in
    QA) its report."""

    __slots__ = ("done", "empty", "asks_for_files", "outcome", "report", "visible")

    def __init__(self, text: str, stage: str) -> None:
        block, visible = split_reasoning(text)
        self.outcome: ReasoningOutcome | None = (
            outcome_of(block) if block is not None else None
        )
        self.asks_for_files = bool(_ASKS_FOR_FILES.search(visible))
        said_done = self.outcome is not None and self.outcome.delivery_state == "DONE"
        self.done = bool(_DONE.search(visible)) or said_done
        self.visible = _DONE.sub("", visible).strip()
        self.empty = not self.visible
        self.report: dict[str, Any] | None = (
            _report(visible) if stage == "qa_review" else None
        )


def reading(text: str, stage: str) -> Reading:
    """How a staged run reads reply ``text`` in ``stage``; never raises."""
    return Reading(text, stage)


def _report(text: str) -> dict[str, Any]:
    """A QA reply's report: its JSON object, or the text kept as it is."""
    data = json_value(unfenced(text))
    if isinstance(data, dict):
        return data
    return {"verdict": "unparsed", "text": text.strip()}
