"""The prompt of a run's next model call: a pure function of its state.

The system prompt (the run's own, then in the ``json`` protocol the command
protocol and the tool listing), the conversation the run started from, and
the newest entries of its transcript within the entry and token limits.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Protocol

import msgspec

from steward.actors.prompt import Prompt
from steward.actors.run import staged
from steward.actors.run.events import RunSettings
from steward.actors.run.stages import compose
from steward.events.protocol import ChatMessage, ToolSpec


class PromptState(Protocol):
    """What a prompt is built from: the fields of the run's state
    (`steward.actors.run.decider.Run`) it reads. A protocol, so this module needs
    nothing of the decider that imports it."""

    @property
    def settings(self) -> RunSettings: ...
    @property
    def conversation(self) -> tuple[ChatMessage, ...]: ...
    @property
    def transcript(self) -> tuple[ChatMessage, ...]: ...
    @property
    def transcript_totals(self) -> tuple[int, ...]: ...
    @property
    def offered(self) -> tuple[ToolSpec, ...]: ...
    @property
    def stage(self) -> str: ...
    @property
    def summary(self) -> str: ...


JSON_PROTOCOL = """\
Reply with exactly one JSON object per message, one of:
{"type": "note", "category": "requirements" | "plan" | ..., "content": "..."}
{"type": "decision", "content": "...", "importance": "low" | "high"}
{"type": "tool_call", "name": "<tool>", "args": {...}}
{"type": "set_output", "output": "...", "mode": "replace" | "append"}
{"type": "send_message", "message": "..."}
{"type": "finish", "output": "...", "mode": "replace" | "append"}
{"type": "spawn_subagent", "subagent": {"task": "...", "tools": ["..."]}}
{"type": "spawn_subagents", "subagents": [{"task": "..."}, ...]}
{"type": "sleep", "delaySeconds": 60} (or "wakeAt": "<ISO time>", or "cron": "<expr>")
Record note(category="requirements") and note(category="plan") before you call
tools, set output or finish."""

FINISH_TOOL = ToolSpec(
    name="finish",
    description=(
        "End the run with your final answer as `output`; put anything structured "
        "the caller reads (such as a workflow's routingDecision) in `metadata`. "
        "Call it alone, once your other calls have answered. A reply with no "
        "tool call also ends the run, its text the answer."
    ),
    parameters={
        "type": "object",
        "properties": {
            "output": {"type": "string", "description": "the final answer"},
            "metadata": {"type": "object", "description": "structured result"},
        },
        "required": ["output"],
    },
)
"""The tool a run of the ``native`` protocol finishes with (from revision 3):
the ``finish`` command of the ``json`` protocol, so a native run can give its
result ``metadata``. The run's own: a configured tool of that name is not
offered beside it."""


def native_tools(settings: RunSettings) -> tuple[ToolSpec, ...]:
    """The tools a ``native`` run's model is offered: its own, and from
    revision 3 `FINISH_TOOL` in place of any of that name."""
    if settings.revision < 3:
        return settings.tools
    return (*(t for t in settings.tools if t.name != FINISH_TOOL.name), FINISH_TOOL)


def build_prompt(state: PromptState) -> Prompt:
    """The prompt for the run's next model call: a pure function of its state.
    A staged run's system prompt and tools are its stage's (`run_staged`)."""
    settings = state.settings
    system, tools = _system(settings), state.offered
    summary: tuple[ChatMessage, ...] = ()
    if settings.policy == "staged":
        system, tools = _staged(state)
        if state.summary:  # what left the window, summarized (spec 004 §7)
            text = f"[summary of the work so far]\n{state.summary}"
            summary = (ChatMessage(role="user", content=text),)
    return Prompt(
        model=settings.model,
        system=system,
        messages=(*state.conversation, *summary, *_window(state)),
        tools=tools,
        protocol=settings.protocol,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
    )


def _staged(state: PromptState) -> tuple[str, tuple[ToolSpec, ...]]:
    """A staged run's system prompt (its stage's prompts composed, the
    variables filled) and the tools its stage offers."""
    settings = state.settings
    stage = staged.stage_policy(settings, state.stage)
    values = staged.variables(
        settings, state.conversation, state.transcript, stage.tools
    )
    prompts = {**dict.fromkeys(stage.prompts, ""), **settings.prompts}
    tools = tuple(t for t in settings.tools if t.name in stage.tools)
    return compose(prompts, stage, values), tools


def _system(settings: RunSettings) -> str:
    """The system prompt for ``settings``: its own, then in the ``json``
    protocol the command protocol and the tool listing."""
    system = settings.system_prompt
    if settings.protocol == "json":
        system = f"{system}\n\n{JSON_PROTOCOL}".strip()
        if settings.tools:
            listing = "\n".join(
                f"- {t.name}: {t.description} parameters: "
                + msgspec.json.encode(t.parameters).decode()
                for t in settings.tools
            )
            system += "\n\nTools:\n" + listing
    return system


def _window(state: PromptState) -> tuple[ChatMessage, ...]:
    """The newest transcript entries within the entry and token limits."""
    return state.transcript[window_start(state) :]


def window_start(state: PromptState) -> int:
    """Where the window of the newest transcript entries within the entry
    and token limits starts.

    Tokens are estimated as characters / 4. The newest entry is always kept, so
    the model sees the result it must act on. In the native protocol a window
    never starts on a tool message whose call it no longer shows.
    """
    settings = state.settings
    transcript, totals = state.transcript, state.transcript_totals
    if not transcript:
        return 0
    # Entries start.. fit when the total before ``start`` is at least
    # everything minus the budget: the first such start is a binary search.
    over = totals[-1] - settings.transcript_token_limit
    start = bisect_left(totals, over) + 1 if over > 0 else 0
    start = max(start, len(transcript) - max(settings.transcript_limit, 1))
    start = min(start, len(transcript) - 1)
    while len(transcript) - start > 1 and transcript[start].role == "tool":
        start += 1
    if transcript[start].role == "tool":
        # The lone newest entry answers a call: show the message that made it.
        while start > 0 and transcript[start].role == "tool":
            start -= 1
    return start
