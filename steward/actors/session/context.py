"""The context of a session's turn: a pure function of what the session holds.

Five layers, in Klaw's order (spec 003, §3.3): the system prompt, core
memory (with the memory items a turn sees), the last summary, a sliding
window of the current segment's messages, and the tool descriptions; after
the summary, the sender's newest messages in other chats (Clifford's
cross-channel blocks, spec 000). The budget is the model's context
budget less the safety margin (10%); the fixed layers are placed first and
the window keeps the newest messages that fit, at most ``sliding_window`` of
them (``subagent_window`` for a subagent); it may be empty when the fixed
layers fill the budget. With ``whole_turns`` (sessions of revision 3 on), a
window that leaves older messages out never starts with an answer: the
answers before its first question leave with their question. The turn's
own messages are the run's input, counted with the fixed layers.

Tokens are counted behind `TokenCounter`; `estimate` (characters / 4,
rounded up) is the default: no tokenizer to download, and the margin covers
its error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import msgspec

from steward.actors.session.events import Elsewhere, SessionSettings
from steward.events.protocol import ChatMessage, ToolSpec

__all__ = ["Context", "TokenCounter", "budget_of", "build_context", "estimate"]

TokenCounter = Callable[[str], int]
"""How many tokens a text is, for the budget (a pure function)."""


def estimate(text: str) -> int:
    """A fast token estimate: a token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """A turn's context: the ``messages`` before the turn's own input (core
    memory and summary as system messages, then the window), how many of the
    segment's messages the window shows, and the budget it was fitted to."""

    messages: tuple[ChatMessage, ...]
    window: int
    budget: int
    fixed_tokens: int


def budget_of(settings: SessionSettings, model: str) -> int:
    """The usable context budget of ``model``: its budget (or the default)
    less the safety margin."""
    budget = settings.default_budget_tokens
    for known in settings.models:
        if known.name == model and known.context_budget is not None:
            budget = known.context_budget
    return int(budget * (1 - settings.safety_margin))


def build_context(
    settings: SessionSettings,
    *,
    model: str,
    system_prompt: str,
    core_memory: str,
    summary: str | None,
    segment: Sequence[ChatMessage],
    pending: str,
    tools: Sequence[ToolSpec] = (),
    elsewhere: Sequence[Elsewhere] = (),
    subagent: bool = False,
    whole_turns: bool = False,
    count: TokenCounter = estimate,
) -> Context:
    """The context of a turn whose own input is ``pending``, over the current
    ``segment``'s messages (oldest first); see the module docstring."""
    head: list[ChatMessage] = []
    if core_memory:
        head.append(ChatMessage(role="system", content=f"Core memory:\n{core_memory}"))
    if summary:
        head.append(ChatMessage(role="system", content=f"Summary so far:\n{summary}"))
    if elsewhere:
        said = "\n".join(f"[{m.session_id}] {m.role}: {m.text}" for m in elsewhere)
        head.append(
            ChatMessage(role="system", content=f"Recently in other chats:\n{said}")
        )
    tool_text = "\n".join(f"{t.name}: {t.description}" for t in tools)
    fixed = (
        count(system_prompt)
        + sum(count(m.content) for m in head)
        + count(tool_text)
        + count(pending)
    )
    budget = budget_of(settings, model)
    remaining = budget - fixed
    limit = settings.subagent_window if subagent else settings.sliding_window
    window: list[ChatMessage] = []
    for message in reversed(segment[-limit:] if limit > 0 else ()):
        cost = count(message.content)
        if cost > remaining:
            break
        window.append(message)
        remaining -= cost
    window.reverse()
    if whole_turns and len(window) < len(segment):
        while window and window[0].role != "user":
            window.pop(0)
    return Context(
        messages=(*head, *window),
        window=len(window),
        budget=budget,
        fixed_tokens=fixed,
    )
