"""Staged runs (spec 004) through the host, on both logs: a model that
answers by the stage its system prompt is of, and the invariants of the
spec's §2 read from what the run recorded and the prompts the provider got
(the user's mode and reasoning kept, each stage's tools, advisory QA, an
authoritative delivery), the recoveries of §10, and the QA report shown by
``steward runs show``."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from unit import test_kind_contract as contract

from steward import cli, events, replay
from steward.actors.effects import notify_key
from steward.actors.prompt import Prompt
from steward.actors.run import events as run_events
from steward.actors.run import staged as run_staged
from steward.actors.run import stages
from steward.actors.run.stage_prompts import load_prompts
from steward.config import Settings
from steward.effects.llm import ScriptedProvider
from steward.effects.llm.base import RequestInfo
from steward.effects.llm.scripted import Reply, ReplyError
from steward.effects.tools import ToolRegistry
from steward.events import ToolCall
from steward.kinds import KINDS

TOOLS = ToolRegistry.with_builtins().specs()
NAMES = tuple(t.name for t in TOOLS)
PROMPTS = load_prompts()
TEXT = "Summarize notes.txt"

STAGE_LINES = {
    stage: PROMPTS[stages.STAGE_PROMPTS[stage]].splitlines()[0]
    for stage in stages.STAGES
}
"""The first line of each stage's own prompt: which stage a system prompt
is of."""

READ = ToolCall(id="c-read", name="files.read", args={"path": "notes.txt"})
LIST = ToolCall(id="c-list", name="files.list", args={})
MISSING = ToolCall(id="c-missing", name="files.read", args={"path": "missing.txt"})

WARMUP = (
    "<ide_reasoning>\nAnalyze: summarize the notes\nResearch: the notes file\n"
    "Plan: read notes.txt\nReflect: it may be missing\nAction: files.read\n"
    "Delivery: NEEDS_WORK\n</ide_reasoning>\nI will read the notes."
)
ANSWER = "The notes say hello."
REPORT = {"verdict": "pass", "findings": [], "guidance": ""}

DEFAULTS: dict[str, str | Reply] = {
    "warmup": WARMUP,
    "act": ANSWER,
    "tool_followup": ANSWER,
    "micro_step": ANSWER,
    "delivery_check": f"{ANSWER}\nDelivery: DONE",
    "qa_review": json.dumps(REPORT),
}
"""What the model says at a stage once its script for it is played."""


def staged(
    *, mode: str = "agent", reasoning: bool = True, qa: bool = True
) -> run_events.RunSettings:
    """The settings of a staged run with the builtin tools."""
    return msgspec.structs.replace(
        Settings().run_settings(tools=TOOLS),
        protocol="native",
        policy="staged",
        mode=mode,
        reasoning=reasoning,
        qa=qa,
        prompts=PROMPTS,
        project_root="/work/project",
    )


def stage_of(prompt: Prompt) -> stages.Stage:
    """The stage whose prompt ``prompt``'s system prompt holds (exactly one)."""
    found = [s for s, line in STAGE_LINES.items() if line in prompt.system]
    assert len(found) == 1, prompt.system
    return found[0]


class Model:
    """A model that answers by stage: each run plays ``script[stage]`` in
    order at that stage, then `DEFAULTS`; every prompt is kept by run."""

    def __init__(self, **script: list[str | Reply]) -> None:
        self.script = script
        self.asked: dict[str, list[tuple[str, Prompt]]] = {}

    def __call__(self, prompt: Prompt, info: RequestInfo) -> str | Reply:
        stage = stage_of(prompt)
        seen = self.asked.setdefault(info.actor_id, [])
        seen.append((stage, prompt))
        n = sum(1 for s, _ in seen if s == stage)
        replies = self.script.get(stage, [])
        return replies[n - 1] if n <= len(replies) else DEFAULTS[stage]


async def run(
    make_host: Any, log: Any, model: Model, settings: run_events.RunSettings
) -> list[Any]:
    """The events of a run ``stg-1`` with ``settings`` (see `runs`)."""
    return (await runs(make_host, log, model, {"stg-1": settings}))["stg-1"]


async def runs(
    make_host: Any, log: Any, model: Model, settings: dict[str, run_events.RunSettings]
) -> dict[str, list[Any]]:
    """Runs (by id, their settings) through a host answered by ``model``,
    each to its end; the events of each, once every stream of the log
    replays to its decisions and keeps the kind contract."""
    host = await make_host(ScriptedProvider(model))
    for run_id, its in settings.items():
        created = run_events.RunCreated(run_id=run_id, input_text=TEXT, settings=its)
        await host.submit(f"run.{run_id}", created)
    recorded = {}
    for run_id in settings:
        records = await ended(log, f"run.{run_id}")
        recorded[run_id] = [r.event for r in records]
    assert await host.settle(30)
    await verified(log)
    return recorded


async def verified(log: Any) -> None:
    """Every stream of ``log`` replays to its recorded decisions and keeps
    the kind contract (its wants answered by the log's other streams)."""
    samples = tuple(
        [
            contract.Sample("this test", stream, tuple(await log.read(stream)))
            for stream in await log.streams()
        ]
    )
    # the runs have no parent: their end's delivery is for nobody, as the
    # golden runs nobody waits on (`contract.NOBODY_WAITS`)
    nobody = {
        ("this test", s.stream, notify_key(s.stream.removeprefix("run."))): "top"
        for s in samples
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contract, "golden_samples", lambda: samples)
        for sample in samples:
            assert replay.verify(sample.records, kinds=KINDS) is None, sample.stream
            for name, check in contract.CHECKS.items():
                if name == "pending":
                    contract.check_effects_pending(
                        KINDS.of(sample.stream), sample, open_at_end=nobody
                    )
                else:
                    check(KINDS.of(sample.stream), sample)


async def ended(log: Any, stream: str) -> list[Any]:
    """``stream``'s records once its run completed or failed."""
    for _ in range(1_000):
        records = await log.read(stream)
        if records and replay.rebuild(records, kinds=KINDS).status in (
            "completed",
            "failed",
        ):
            return list(records)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{stream} did not end")


def of(kind: type[Any], recorded: list[Any]) -> list[Any]:
    return [e for e in recorded if isinstance(e, kind)]


def entered(recorded: list[Any]) -> list[str]:
    return [e.stage for e in of(run_events.StageEntered, recorded)]


def follow_the_policy(
    recorded: list[Any], asked: list[tuple[str, Prompt]], settings: Any
) -> None:
    """Each stage entered has the user's mode and reasoning and the
    policy's tools and prompts, and the prompt its model call got is of that
    stage, offers just those tools and composes just those prompts."""
    stages_entered = of(run_events.StageEntered, recorded)
    assert [s for s, _ in asked] == [e.stage for e in stages_entered]
    for event, (_, prompt) in zip(stages_entered, asked, strict=True):
        policy = stages.policy(settings.mode, settings.reasoning, event.stage, NAMES)
        assert (event.mode, event.reasoning) == (settings.mode, settings.reasoning)
        assert event.tools == policy.tools
        assert event.prompts == policy.prompts
        assert tuple(sorted(t.name for t in prompt.tools)) == policy.tools
        for name in set(stages.REASONING_PROMPTS.values()):
            shown = PROMPTS[name].strip() in prompt.system
            assert shown == (name in policy.prompts), (event.stage, name)
        other = "chat" if settings.mode == "agent" else "agent"
        assert PROMPTS[f"{settings.mode}/mode_addition"].strip() in prompt.system
        assert PROMPTS[f"{other}/mode_addition"].strip() not in prompt.system


@pytest.fixture
def workspace(tmp_path: Path, make_host: Any) -> Path:
    """The hosts' workspace (``make_host`` makes it), holding ``notes.txt``."""
    path = tmp_path / "workspace"
    (path / "notes.txt").write_text("hello\n")
    return path


@pytest.fixture
def host_of(workspace: Path, make_host: Any) -> Any:
    """``make_host``, once the workspace holds the notes."""
    return make_host


# -- a whole run --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [
        (
            True,
            ["warmup", "act", "micro_step", "delivery_check", "qa_review", "qa_review"],
        ),
        (False, ["act", "tool_followup", "delivery_check", "qa_review", "qa_review"]),
    ],
)
async def test_a_staged_run_goes_through_its_stages_and_completes(
    host_of: Any, log: Any, reasoning: bool, expected: list[str]
) -> None:
    """§3.2 and §2.4: a staged run plans (with reasoning), acts with a tool,
    follows its result up, delivers and is reviewed by QA with a read-only
    tool; every stage has the policy's tools and prompts, the answer
    delivered is the run's output, and its stream replays."""
    model = Model(
        act=[Reply(tool_calls=(READ,))], qa_review=[Reply(tool_calls=(LIST,))]
    )
    settings = staged(reasoning=reasoning)
    recorded = await run(host_of, log, model, settings)
    assert entered(recorded) == expected
    follow_the_policy(recorded, model.asked["stg-1"], settings)
    requested = [(e.name, e.args) for e in of(events.ToolRequested, recorded)]
    assert requested == [("files.read", READ.args), ("files.list", {})]
    assert [e.ok for e in of(events.ToolResulted, recorded)] == [True, True]
    assert [e.text for e in of(run_events.OutputUpdated, recorded)] == [ANSWER]
    assert [e.output for e in of(run_events.AnswerDelivered, recorded)] == [ANSWER]
    assert [e.report for e in of(run_events.QaReported, recorded)] == [REPORT]
    assert of(run_events.SystemNoteAdded, recorded) == []
    done = of(run_events.RunCompleted, recorded)
    assert [e.output for e in done] == [ANSWER]
    assert recorded[-1] == done[0]
    followup = model.asked["stg-1"][2 if reasoning else 1][1]
    assert followup.messages[-1].role == "tool"
    assert followup.messages[-1].content == "hello\n"


async def test_the_warmup_is_kept_only_as_its_outcome(host_of: Any, log: Any) -> None:
    """§4.3: the warmup's reasoning block is recorded as its outcome
    (ReasoningRecorded), and the next prompt holds that outcome and the
    reply's visible text, never the block."""
    model = Model()
    recorded = await run(host_of, log, model, staged())
    assert of(run_events.ReasoningRecorded, recorded) == [
        run_events.ReasoningRecorded(
            stage="warmup",
            plan_delta="read notes.txt",
            next_action="files.read",
            known_risks="it may be missing",
            delivery_state="NEEDS_WORK",
        )
    ]
    (_, act), *later = model.asked["stg-1"][1:]
    said = [m.content for m in act.messages]
    assert said == [
        TEXT,
        "I will read the notes.\n\nReasoning outcome: plan: read notes.txt; "
        "next: files.read; risks: it may be missing; delivery: NEEDS_WORK",
    ]
    for _, prompt in [(None, act), *later]:
        for message in prompt.messages:
            assert "<ide_reasoning>" not in message.content
            assert "summarize the notes" not in message.content


# -- §2.1 the mode is the user's ----------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "ask"),
    [
        ("agent", "Switching to chat mode now."),
        ("chat", "Switching to agent mode now."),
    ],
)
async def test_a_reply_asking_to_switch_mode_is_text(
    host_of: Any, log: Any, mode: str, ask: str
) -> None:
    """§2.1 mode invariance: a reply that asks to switch mode is the draft
    answer, like any text; every stage after it keeps the user's mode and
    reasoning, its tools and its mode's prompt."""
    model = Model(act=[ask], delivery_check=[f"{ask}\nDelivery: DONE"])
    settings = staged(mode=mode)
    recorded = await run(host_of, log, model, settings)
    assert [e.text for e in of(run_events.OutputUpdated, recorded)] == [ask]
    after = recorded.index(of(run_events.OutputUpdated, recorded)[0])
    later = of(run_events.StageEntered, recorded[after:])
    assert [e.stage for e in later] == ["delivery_check", "qa_review"]
    assert all((e.mode, e.reasoning) == (mode, True) for e in later)
    follow_the_policy(recorded, model.asked["stg-1"], settings)
    assert of(run_events.RunCompleted, recorded)[0].output == ask


# -- §2.4 the stage owns the tools --------------------------------------------------


def refusal(tool: str, stage: str, allowed: str) -> str:
    return (
        f"{tool} is not a tool of the {stage} stage; the tools you may call "
        f"here: {allowed}."
    )


async def test_a_write_in_qa_review_is_refused(
    host_of: Any, log: Any, workspace: Path
) -> None:
    """§2.3 and §2.4 tool invariance: QA's call of files.write is refused,
    naming the read-only tools, and nothing is written; the run completes
    with the delivered answer."""
    write = ToolCall(
        id="c-write", name="files.write", args={"path": "qa.txt", "content": "x"}
    )
    model = Model(qa_review=[Reply(tool_calls=(write,))])
    settings = staged()
    recorded = await run(host_of, log, model, settings)
    assert of(run_events.SystemNoteAdded, recorded) == [
        run_events.SystemNoteAdded(
            reason="tool_error",
            content=refusal("files.write", "qa_review", "files.list, files.read"),
            call_id="c-write",
            tool="files.write",
        )
    ]
    assert of(events.ToolRequested, recorded) == []
    assert not (workspace / "qa.txt").exists()
    assert entered(recorded)[-2:] == ["qa_review", "qa_review"]
    follow_the_policy(recorded, model.asked["stg-1"], settings)
    assert of(run_events.RunCompleted, recorded)[0].output == ANSWER


async def test_any_tool_in_delivery_check_is_refused(host_of: Any, log: Any) -> None:
    """§2.4 tool invariance: the delivery check offers no tools; a read it
    calls is refused, naming none, never made, and the check is asked
    again."""
    model = Model(delivery_check=[Reply(tool_calls=(READ,))])
    settings = staged(reasoning=False)
    recorded = await run(host_of, log, model, settings)
    notes = of(run_events.SystemNoteAdded, recorded)
    assert [(n.reason, n.content, n.call_id) for n in notes] == [
        ("tool_error", refusal("files.read", "delivery_check", "none"), "c-read")
    ]
    assert of(events.ToolRequested, recorded) == []
    assert entered(recorded) == ["act", "delivery_check", "delivery_check", "qa_review"]
    follow_the_policy(recorded, model.asked["stg-1"], settings)
    assert of(run_events.RunCompleted, recorded)[0].output == ANSWER


async def test_chat_mode_acts_with_read_only_tools(
    host_of: Any, log: Any, workspace: Path
) -> None:
    """§2.4 tool invariance: in chat mode act offers only the read-only
    tools; files.write is refused naming them, files.read is made."""
    write = ToolCall(
        id="c-write", name="files.write", args={"path": "x.txt", "content": "x"}
    )
    model = Model(act=[Reply(tool_calls=(write, READ))])
    settings = staged(mode="chat", reasoning=False)
    recorded = await run(host_of, log, model, settings)
    notes = of(run_events.SystemNoteAdded, recorded)
    assert [(n.reason, n.content, n.call_id) for n in notes] == [
        (
            "tool_error",
            refusal("files.write", "act", "files.list, files.read"),
            "c-write",
        )
    ]
    assert [e.name for e in of(events.ToolRequested, recorded)] == ["files.read"]
    assert not (workspace / "x.txt").exists()
    follow_the_policy(recorded, model.asked["stg-1"], settings)
    followup = model.asked["stg-1"][1][1]
    assert [(m.role, m.tool_call_id) for m in followup.messages[-2:]] == [
        ("tool", "c-write"),
        ("tool", "c-read"),
    ]


async def test_an_invented_tool_is_refused_and_never_made(
    host_of: Any, log: Any
) -> None:
    """§2.4 tool invariance: a tool name the model invents is refused,
    naming the stage's tools, and no effect is requested for it."""
    invented = ToolCall(id="c-invented", name="shell.exec", args={"cmd": "rm -rf /"})
    model = Model(act=[Reply(tool_calls=(invented,))])
    settings = staged()
    recorded = await run(host_of, log, model, settings)
    notes = of(run_events.SystemNoteAdded, recorded)
    assert [(n.reason, n.content, n.tool) for n in notes] == [
        (
            "tool_error",
            refusal("shell.exec", "act", "files.list, files.read, files.write"),
            "shell.exec",
        )
    ]
    assert of(events.ToolRequested, recorded) == []
    assert of(run_events.ApprovalRequested, recorded) == []
    follow_the_policy(recorded, model.asked["stg-1"], settings)
    assert of(run_events.RunCompleted, recorded)[0].output == ANSWER


# -- §2.3 QA is advisory ------------------------------------------------------------


async def test_qa_cannot_replace_the_answer(host_of: Any, log: Any) -> None:
    """§2.3 QA is advisory: a QA reply that says what the answer should be
    instead is its report; the output is the delivered answer, byte for byte
    the output of the same run without QA."""
    says = "The final answer should instead be: the notes are empty."
    model = Model(qa_review=[says])
    both = {"stg-qa-on": staged(qa=True), "stg-qa-off": staged(qa=False)}
    recorded = await runs(host_of, log, model, both)
    with_qa, without = recorded["stg-qa-on"], recorded["stg-qa-off"]
    assert [e.report for e in of(run_events.QaReported, with_qa)] == [
        {"verdict": "unparsed", "text": says}
    ]
    delivered = of(run_events.AnswerDelivered, with_qa)[0].output
    output = of(run_events.RunCompleted, with_qa)[0].output
    assert output == delivered == ANSWER
    assert of(run_events.QaReported, without) == []
    assert "qa_review" not in entered(without)
    assert of(run_events.RunCompleted, without)[0].output.encode() == output.encode()


# -- §2.5 delivery is authoritative -------------------------------------------------


async def test_nothing_changes_the_answer_once_delivered(
    host_of: Any, log: Any
) -> None:
    """§2.5 completion is authoritative: the delivery gate sends a
    NEEDS_WORK check back to act; once an answer is delivered no output
    update follows (QA reads, then reports), and the run's output is the
    delivered answer, not the last draft."""
    final = "The notes say hello, and nothing else."
    model = Model(
        act=["A first draft.", ANSWER],
        delivery_check=[
            "A first draft.\nDelivery: NEEDS_WORK",
            f"{final}\nDelivery: DONE",
        ],
        qa_review=[Reply(tool_calls=(READ,)), "Replace the answer with: nothing."],
    )
    recorded = await run(host_of, log, model, staged(reasoning=False))
    gates = of(run_events.SystemNoteAdded, recorded)
    assert [(n.reason, n.content) for n in gates] == [
        ("delivery_gate", PROMPTS["stages/delivery_gate"].strip())
    ]
    assert entered(recorded) == [
        "act",
        "delivery_check",
        "act",
        "delivery_check",
        "qa_review",
        "qa_review",
    ]
    (delivered,) = of(run_events.AnswerDelivered, recorded)
    assert delivered.output == final
    after = recorded[recorded.index(delivered) :]
    assert of(run_events.OutputUpdated, after) == []
    assert of(run_events.RunCompleted, recorded)[0].output == final
    assert [e.text for e in of(run_events.OutputUpdated, recorded)] == [
        "A first draft.",
        ANSWER,
    ]


# -- §2.2 the reasoning switch is the user's ----------------------------------------


@pytest.mark.parametrize(
    ("mode", "reasoning"), [("agent", True), ("agent", False), ("chat", True)]
)
async def test_reasoning_prompts_follow_the_users_switch(
    host_of: Any, log: Any, mode: str, reasoning: bool
) -> None:
    """§2.2 reasoning invariance: in agent mode with reasoning on, every
    stage's prompt has its reasoning prompt (macro in the warmup, micro
    after, QA's own in QA); with it off, or in chat mode, none has, and
    there is no warmup; every stage records the switch as the user set it."""
    model = Model(act=[Reply(tool_calls=(READ,))])
    settings = staged(mode=mode, reasoning=reasoning)
    recorded = await run(host_of, log, model, settings)
    on = mode == "agent" and reasoning
    expected = {
        "warmup": "agent/reasoning_macro",
        "act": "agent/reasoning_micro",
        "micro_step": "agent/reasoning_micro",
        "delivery_check": "agent/reasoning_micro",
        "qa_review": "qa/review_micro_reasoning",
    }
    reasoning_prompts = set(expected.values())
    shown = [
        (event.stage, [p for p in event.prompts if p in reasoning_prompts])
        for event in of(run_events.StageEntered, recorded)
    ]
    if on:
        assert shown == [(stage, [expected[stage]]) for stage, _ in shown]
        assert [stage for stage, _ in shown] == [
            "warmup",
            "act",
            "micro_step",
            "delivery_check",
            "qa_review",
        ]
    else:
        assert shown == [(stage, []) for stage, _ in shown]
        assert [stage for stage, _ in shown] == [
            "act",
            "tool_followup",
            "delivery_check",
            "qa_review",
        ]
    for _, prompt in model.asked["stg-1"]:
        has = "Reasoning is required at this step." in prompt.system
        assert has == on
    assert {e.reasoning for e in of(run_events.StageEntered, recorded)} == {reasoning}
    follow_the_policy(recorded, model.asked["stg-1"], settings)


# -- §10 recoveries -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "prompt"),
    [
        ("", "recovery/empty_response"),
        ("Please send me the diff", "recovery/asks_for_files"),
        (Reply(tool_calls=(MISSING,)), "recovery/tool_failure"),
    ],
    ids=["empty", "asks_for_files", "tool_failure"],
)
async def test_a_recovery_sends_its_prompt_and_the_run_goes_on(
    host_of: Any, log: Any, reply: str | Reply, prompt: str
) -> None:
    """§10 (and §2.1, §2.4: no recovery changes the mode or the stage's
    tools): an empty reply, one asking the user for files and a failed tool
    call each get their stage's recovery prompt (the failure filled in),
    which the next call shows the model, and the run goes on to deliver."""
    model = Model(act=[reply])
    settings = staged(reasoning=False)
    recorded = await run(host_of, log, model, settings)
    (note,) = of(run_events.SystemNoteAdded, recorded)
    assert note.reason == "recovery"
    if prompt == "recovery/tool_failure":
        (result,) = of(events.ToolResulted, recorded)
        assert not result.ok and "missing.txt" in (result.error or "")
        failed = f"Tool files.read failed: {result.error}"
        assert note.content == PROMPTS[prompt].strip().replace(
            "{{last_step_outcome}}", failed
        )
    else:
        assert note.content == PROMPTS[prompt].strip()
    (_, after), *_ = model.asked["stg-1"][1:]
    assert after.messages[-1].content == f"[system] {note.content}"
    assert of(run_events.OutputUpdated, recorded)[-1].text == ANSWER
    assert of(run_events.RunCompleted, recorded)[0].output == ANSWER
    follow_the_policy(recorded, model.asked["stg-1"], settings)


@pytest.mark.parametrize(
    ("reply", "why", "stage", "before"),
    [
        ("", "empty response", "act", 0),
        ("Please send me the diff", "asks for files", "act", 0),
        # the first failure is act's; the follow-up stage takes five more
        (Reply(tool_calls=(MISSING,)), "tool failure", "tool_followup", 1),
    ],
    ids=["empty", "asks_for_files", "tool_failure"],
)
@pytest.mark.parametrize("revision", [4, run_events.LATEST_REVISION])
async def test_past_its_recoveries_a_staged_run_fails(
    host_of: Any,
    log: Any,
    reply: str | Reply,
    why: str,
    stage: str,
    before: int,
    revision: int,
) -> None:
    """§10 and §2.5: a model that keeps needing a recovery gets
    MAX_RECOVERIES of them in a stage (from revision 5; before, in the
    whole run), then the run fails naming the limit; it is never completed
    without a delivered answer (a bug: five replies without progress ended
    it "stalled", completed with a made-up output)."""
    limit = run_staged.MAX_RECOVERIES
    model = Model(act=[reply] * (limit + 1), tool_followup=[reply] * (limit + 1))
    settings = msgspec.structs.replace(staged(reasoning=False), revision=revision)
    recorded = await run(host_of, log, model, settings)
    notes = of(run_events.SystemNoteAdded, recorded)
    taken = limit + before if revision >= 5 else limit
    assert Counter(n.reason for n in notes) == {"recovery": taken}
    (failed,) = of(run_events.RunFailed, recorded)
    where = f" in its {stage} stage" if revision >= 5 else ""
    assert failed.reason == (
        f"a staged run took {limit} recoveries and corrections{where}, and needed "
        f"another: {why}"
    )
    assert of(run_events.AnswerDelivered, recorded) == []
    assert of(run_events.RunCompleted, recorded) == []
    assert len(model.asked["stg-1"]) == taken + 1


async def test_a_staged_run_out_of_model_calls_fails_undelivered(
    host_of: Any, log: Any
) -> None:
    """§2.5 and the delivery gate: a staged run whose model calls run out
    (max_iterations) before an answer passed the delivery check fails,
    naming the limit; it never completes with an answer never delivered."""
    model = Model(
        act=[Reply(tool_calls=(LIST,))], tool_followup=[Reply(tool_calls=(READ,))]
    )
    settings = msgspec.structs.replace(staged(reasoning=False), max_iterations=2)
    recorded = await run(host_of, log, model, settings)
    assert len(model.asked["stg-1"]) == 2
    assert of(run_events.RunCompleted, recorded) == []
    (failed,) = of(run_events.RunFailed, recorded)
    assert "max_iterations" in failed.reason and "2" in failed.reason


ERROR = Reply(error=ReplyError(kind="auth", message="key revoked", retryable=False))


@pytest.mark.parametrize(
    ("qa", "changes"),
    [
        ([""] * (run_staged.MAX_RECOVERIES + 1), {}),
        ([ERROR], {}),
        ([Reply(tool_calls=(LIST,))] * 3, {"max_tool_call_rounds": 2}),
    ],
    ids=["recoveries", "model_error", "tool_rounds"],
)
async def test_qa_s_trouble_never_takes_the_delivered_answer_back(
    host_of: Any, log: Any, qa: list[str | Reply], changes: dict[str, Any]
) -> None:
    """§2.5 completion is authoritative, §2.3 QA is advisory: once an
    answer is delivered, QA that needs a recovery past the limit, whose
    model call fails, or that uses up the tool rounds ends the run
    completed with the delivered answer, never failed."""
    model = Model(act=[Reply(tool_calls=(READ,))], qa_review=qa)
    settings = msgspec.structs.replace(staged(reasoning=False), **changes)
    recorded = await run(host_of, log, model, settings)
    (delivered,) = of(run_events.AnswerDelivered, recorded)
    assert of(run_events.RunFailed, recorded) == []
    assert [e.output for e in of(run_events.RunCompleted, recorded)] == [
        delivered.output
    ]
    assert of(run_events.QaReported, recorded) == []
    assert of(run_events.OutputUpdated, recorded[recorded.index(delivered) :]) == []


# -- the QA report, shown -----------------------------------------------------------


def test_runs_show_shows_the_qa_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """§2.3: the QA report is an artifact shown to the user: ``steward runs
    show`` of a staged run (``steward run --profile staged``) has a line
    with the report and its verdict, and the output is the answer."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("hello\n")
    (tmp_path / "steward.toml").write_text(
        '[tools]\nworkspace = "ws"\n\n[agents.staged]\nprotocol = "native"\n'
        'policy = "staged"\nreasoning = true\n'
    )
    report = {"verdict": "concerns", "findings": [], "guidance": "cite the file"}
    replies = [
        {"text": WARMUP},
        {"tool_calls": [{"id": "c1", "name": "files.read", "args": READ.args}]},
        {"text": ANSWER},
        {"text": f"{ANSWER}\nDelivery: DONE"},
        {"text": json.dumps(report)},
    ]
    (tmp_path / "s.json").write_text(json.dumps({"replies": replies}))
    base = ["--db", "log.db", "--script", "s.json"]
    assert cli.main([*base, "run", "-q", TEXT, "--profile", "staged"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == ANSWER
    assert cli.main([*base, "runs", "list", "-o", "json"]) == 0
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert cli.main([*base, "runs", "show", listed["id"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    (shown,) = [line for line in lines if "QaReported" in line]
    assert '"verdict":"concerns"' in shown and '"guidance":"cite the file"' in shown
    assert lines[-1] == f"output: {ANSWER}"
