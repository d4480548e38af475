"""What a staged run (spec 004) asks the model at each stage, as the
provider's HTTP server receives it.

A host whose provider is the official SDK (both dialects) runs a staged
run, agent mode with reasoning on, against the local server of `fake_api`;
the model answers by the stage its system prompt is of. The assertions
read the request bodies: each stage offers just its tools (none to plan or
deliver, the read-only ones to QA, under their wire names), its system
prompt is the stage's prompts composed, and the reasoning block of an
earlier reply reaches the model only as its outcome (§4.3).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import Dialect
from fake_api import FakeAPI, Reply, Request, sse_reply
from wire import hosted, system_of, text_of, tool_results

from steward import replay
from steward.actors.run import events as run_events
from steward.actors.run import stages
from steward.actors.run.stage_prompts import load_prompts
from steward.clock import FakeClock
from steward.config import Settings
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

RUN = "stg-wire"
STREAM = f"run.{RUN}"
TEXT = "Summarize notes.txt"
ROOT = "/work/project"
TOOLS = ToolRegistry.with_builtins().specs()
NAMES = tuple(t.name for t in TOOLS)
PROMPTS = load_prompts()

WARMUP = (
    "<ide_reasoning>\nAnalyze: summarize the notes\nResearch: the notes file\n"
    "Plan: read notes.txt\nReflect: it may be missing\nAction: files.read\n"
    "Delivery: NEEDS_WORK\n</ide_reasoning>\nI will read the notes."
)
MICRO = (
    "<ide_reasoning>\n- the read showed hello\nAction: answer\n"
    "Delivery: NEEDS_WORK\n</ide_reasoning>\nThe notes say hello."
)
ANSWER = "The notes say hello."
REPORT = {"verdict": "pass", "findings": [], "guidance": ""}


def history_of(request: Request) -> str:
    """Everything the request's messages but the system prompt hold, as
    its JSON text: texts, tool calls and tool results."""
    messages = [m for m in request.body["messages"] if m["role"] != "system"]
    return json.dumps(messages)


def assistant_texts(request: Request) -> list[str]:
    return [
        text_of(m["content"])
        for m in request.body["messages"]
        if m["role"] == "assistant" and text_of(m["content"])
    ]


def tools_of(request: Request) -> list[str]:
    """The wire names of the tools the request offers, sorted."""
    offered = []
    for tool in request.body.get("tools") or []:
        offered.append(tool["function"]["name"] if "function" in tool else tool["name"])
    return sorted(offered)


def wire(names: tuple[str, ...]) -> list[str]:
    """Steward's tool names as both APIs spell them (``files.read`` is
    ``files_read``: a dot is no valid character of a tool name there)."""
    return sorted(name.replace(".", "_") for name in names)


def stage_of(request: Request) -> stages.Stage:
    """The stage whose own prompt the request's system prompt holds."""
    system = system_of(request)
    found = [
        stage
        for stage in stages.STAGES
        if PROMPTS[stages.STAGE_PROMPTS[stage]].splitlines()[0] in system
    ]
    assert len(found) == 1, system
    return found[0]


@dataclass
class Staged:
    """A host running a staged run through ``dialect``'s SDK against ``api``."""

    host: Host
    log: Any
    api: FakeAPI
    dialect: Dialect

    @property
    def asked(self) -> list[Request]:
        return [r for r in self.api.requests if r.path == self.dialect.path]


@pytest.fixture
async def staged(
    tmp_path: Path, api: FakeAPI, dialect: Dialect, clock: FakeClock
) -> AsyncIterator[Staged]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    async with hosted(tmp_path, dialect.build(api), clock) as (host, log):
        yield Staged(host=host, log=log, api=api, dialect=dialect)


def settings() -> run_events.RunSettings:
    return msgspec.structs.replace(
        Settings().run_settings(tools=TOOLS),
        protocol="native",
        policy="staged",
        mode="agent",
        reasoning=True,
        qa=True,
        prompts=PROMPTS,
        project_root=ROOT,
    )


def expected_system(stage: str, last_step_outcome: str = "") -> str:
    """The system prompt of ``stage``: its prompts composed with the run's
    values (written out here, not taken from the run's code)."""
    policy = stages.policy("agent", True, stage, NAMES)  # type: ignore[arg-type]
    values = {
        "project_root": ROOT,
        "user_input": TEXT,
        "tool_summary": ", ".join(policy.tools) or "none",
        "last_step_outcome": last_step_outcome,
    }
    return stages.compose(PROMPTS, policy, values)


async def test_each_stage_asks_with_its_own_tools_and_prompts(
    staged: Staged,
) -> None:
    """The warmup and the delivery check offer no tools, act and the micro
    step the run's tools, QA only the read-only ones; each request's
    system prompt is its stage's prompts composed (the reasoning prompt
    included); after the warmup no request holds a reasoning block, only
    its outcome; the run delivers and QA's report is recorded."""
    qa_calls = 0

    def respond(request: Request) -> Reply:
        nonlocal qa_calls
        stage = stage_of(request)
        call: tuple[str, str, dict[str, Any]] | None = None
        text = ""
        if stage == "warmup":
            text = WARMUP
        elif stage == "act":
            call = ("c-read", "files_read", {"path": "notes.txt"})
        elif stage == "micro_step":
            text = MICRO
        elif stage == "delivery_check":
            text = f"{ANSWER}\nDelivery: DONE"
        else:
            qa_calls += 1
            if qa_calls == 1:
                call = ("c-list", "files_list", {})
            else:
                text = json.dumps(REPORT)
        if call is None:
            return sse_reply(staged.dialect.frames([text]))
        call_id, name, args = call
        frames = staged.dialect.frames([], [(call_id, name, [json.dumps(args)])])
        return sse_reply(frames)

    staged.api.respond = respond
    created = run_events.RunCreated(run_id=RUN, input_text=TEXT, settings=settings())
    assert await staged.host.submit(STREAM, created) is not None
    state = None
    for _ in range(1_000):
        state = replay.rebuild(await staged.log.read(STREAM), kinds=KINDS)
        if state.status in ("completed", "failed"):
            break
        await asyncio.sleep(0.01)
    assert state is not None and state.status == "completed", state
    assert await staged.host.settle(30)
    assert state.output == ANSWER
    assert state.qa_report == REPORT

    asked = staged.asked
    assert [stage_of(r) for r in asked] == [
        "warmup",
        "act",
        "micro_step",
        "delivery_check",
        "qa_review",
        "qa_review",
    ]
    warmup, act, micro, delivery, qa, qa_again = asked

    read_only = ("files.list", "files.read")
    assert tools_of(warmup) == []
    assert tools_of(act) == wire(NAMES) == ["files_list", "files_read", "files_write"]
    assert tools_of(micro) == wire(NAMES)
    assert tools_of(delivery) == []
    assert tools_of(qa) == tools_of(qa_again) == wire(read_only)

    assert system_of(warmup) == expected_system("warmup")
    assert system_of(act) == expected_system("act")
    assert system_of(micro) == expected_system("micro_step", "hello\n")
    assert system_of(delivery) == expected_system("delivery_check", "hello\n")
    assert system_of(qa) == expected_system("qa_review", "hello\n")
    for request, stage in zip(asked, [stage_of(r) for r in asked], strict=True):
        system = system_of(request)
        assert PROMPTS[stages.STAGE_PROMPTS[stage]].splitlines()[0] in system
        reasoning = stages.REASONING_PROMPTS[stage]
        assert PROMPTS[reasoning].strip() in system, stage

    for request in asked[1:]:
        history = history_of(request)
        assert "<ide_reasoning" not in history
        assert "Research: the notes file" not in history
        assert "the read showed hello" not in history
    outcome = (
        "Reasoning outcome: plan: read notes.txt; next: files.read; "
        "risks: it may be missing; delivery: NEEDS_WORK"
    )
    assert assistant_texts(act) == [f"I will read the notes.\n\n{outcome}"]
    assert assistant_texts(delivery)[-1] == (
        f"{ANSWER}\n\nReasoning outcome: next: answer; delivery: NEEDS_WORK"
    )
    assert tool_results(micro) == [("c-read", "hello\n")]
    assert tool_results(qa_again)[-1][0] == "c-list"
    assert replay.verify(await staged.log.read(STREAM), kinds=KINDS) is None
