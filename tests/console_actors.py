"""A log holding a workflow run, a chat session and a task, each with text
holding markup, recorded through the command line with scripted models
(importable as ``console_actors``): what the console's kind sections show."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from console_site import steward
from support import PLAN, act
from workflow_files import HEAD, edge, node

MARKUP = "<script>alert(1)</script>"
"""Text the sections must show as text, never run."""


@dataclass(frozen=True)
class Actors:
    """The actors of `make_actors`, by stream."""

    workflow: str
    """design -> implement -> review (changes asked) -> implement ->
    review (approved): a loop back, and an edge to ``ship`` never taken."""
    session: str
    """Four turns: core memory set, a schedule made, a compaction the memory
    writer remembers, then ``/new`` and a turn in the second segment."""
    task: str
    """A plan call whose model asks a subtask, then a loop of two calls."""


_WORKFLOW = (
    HEAD
    + f'name = "Build {MARKUP}"\n'
    + node("design")
    + node("implement")
    + node("review")
    + node("ship")
    + edge("design", "implement")
    + edge("implement", "review")
    + edge("review", "implement", when='decision == "changes_requested"')
    + edge("review", "ship", 2, when=f'decision == "{MARKUP}"')
)


def _finish(output: str, decision: str | None = None) -> list[dict[str, object]]:
    metadata = {"routingDecision": decision} if decision else {}
    return [
        {"text": p}
        for p in (*PLAN, act(type="finish", output=output, metadata=metadata))
    ]


_PHASES = [
    *_finish("the design"),
    *_finish("built it"),
    *_finish("return JSON", "changes_requested"),
    *_finish("built it again"),
    *_finish("fine", "approved"),
]

_WRITER = json.dumps(
    {
        "operations": [
            {
                "op": "add",
                "level": 1,
                "module": "identity",
                "key": "name",
                "value": f"Ada {MARKUP}",
            }
        ],
        "summary": "Ada said hello.",
    }
)

_TURNS = [
    *PLAN,
    act(
        type="tool_call",
        name="memory.core_set",
        args={"key": "city", "value": f"Kiel {MARKUP}"},
    ),
    act(
        type="tool_call",
        name="schedule.create",
        args={"name": "daily", "cron": "0 9 * * *", "task": "Any news?"},
    ),
    act(type="finish", output="Noted."),
    act(type="send_message", message="reply 2"),
    act(type="send_message", message="reply 3"),
    act(type="send_message", message="reply 4"),
]

_PROGRAM = """\
(defatom plan (params goal) (instructions "Plan {{goal}}.")
  (description "plan a piece of work"))
(defatom summarize (params text) (instructions "Summarize: {{text}}")
  (description "summarize a text") (subtasks false))
(bind p (plan "the report"))
(loop 2 (summarize (content p)))
"""

_ASK = {
    "type": "atomic",
    "description": "summarize the notes",
    "inputs": {"text": "long notes"},
    "template_hints": ["summarize"],
}

_TASK_REPLIES = [
    json.dumps({"status": "CONTINUATION", "subtask_request": _ASK}),
    "short notes",
    f"planned: {MARKUP}",
    "one",
    "two",
]


def make_actors(tmp: Path) -> Actors:
    """Record the actors an `Actors` names in ``tmp/log.db``."""
    (tmp / "steward.toml").write_text(
        "[session]\ndebounce_ms = 10\nmax_turns_per_context = 2\n"
    )
    (tmp / "wf.toml").write_text(_WORKFLOW)
    (tmp / "wf.json").write_text(json.dumps({"replies": _PHASES}))
    said = steward(tmp, "--script", "wf.json", "workflow", "run", "wf.toml")
    workflow = said.strip().splitlines()[-1].split()[-1]

    (tmp / "chat.json").write_text(
        json.dumps({"replies": _TURNS, "subagent_replies": [_WRITER]})
    )
    lines = "I am Ada\nhow are you\nbye\n/new\nhello again\n"
    stdin, sys.stdin = sys.stdin, io.StringIO(lines)
    try:
        steward(tmp, "--script", "chat.json", "chat")
    finally:
        sys.stdin = stdin

    (tmp / "p.sexp").write_text(_PROGRAM)
    (tmp / "t.json").write_text(json.dumps({"replies": _TASK_REPLIES}))
    steward(tmp, "--script", "t.json", "task", "run", "p.sexp", "--id", "t1")
    return Actors(
        workflow=f"workflow.{workflow}", session="session.cli:local", task="task.t1"
    )
