"""The staged policy (spec 004): each mode × reasoning × stage gets its tool
subset, prompts and reasoning requirement, and the user's mode and
reasoning switch come back unchanged; the system prompt is composed in
order; a model's reasoning block is reduced to its outcome, whatever the
text."""

from __future__ import annotations

import ast
import itertools
import time
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st
from test_purity import FORBIDDEN, module_state

from steward.actors.run import stages
from steward.actors.run.stages import (
    ALLOWED_VARIABLES,
    MODES,
    PROMPT_NAMES,
    STAGES,
    ReasoningOutcome,
    StagePolicy,
    compose,
    outcome_of,
    outcome_text,
    placeholders,
    policy,
    read_only,
    split_reasoning,
)

READS = ("files.list", "files.read", "memory.search", "index.read_symbol")
WRITES = ("files.write", "memory.core_set", "script.run", "subagent_spawn")
TOOLS = (*WRITES, *READS)
MATRIX = list(itertools.product(MODES, (True, False), STAGES))
STAGE_PROMPT = {
    "warmup": "stages/warmup",
    "act": "stages/act",
    "tool_followup": "stages/tool_followup",
    "micro_step": "stages/micro_step",
    "delivery_check": "stages/delivery_check",
    "qa_review": "qa/system",
}


def _expected(mode: stages.Mode, reasoning: bool, stage: stages.Stage) -> StagePolicy:
    """The policy spec 004 asks for, written out case by case."""
    if stage in ("warmup", "delivery_check"):
        tools: tuple[str, ...] = ()
    elif stage == "qa_review" or mode == "chat":
        tools = tuple(sorted(READS))
    else:
        tools = tuple(sorted(TOOLS))
    prompts = [
        "base/system",
        "base/project_root_context",
        f"{mode}/mode_addition",
        STAGE_PROMPT[stage],
    ]
    reasons = mode == "agent" and reasoning
    if reasons:
        prompts.append(
            "agent/reasoning_macro"
            if stage == "warmup"
            else "qa/review_micro_reasoning"
            if stage == "qa_review"
            else "agent/reasoning_micro"
        )
    if stage == "qa_review":
        prompts.append("qa/report_schema")
    return StagePolicy(
        stage=stage,
        mode=mode,
        reasoning=reasoning,
        tools=tools,
        prompts=tuple(prompts),
        reasoning_format=(
            None if not reasons else "macro" if stage == "warmup" else "micro"
        ),
    )


@pytest.mark.parametrize(("mode", "reasoning", "stage"), MATRIX)
def test_each_mode_reasoning_and_stage_gets_its_policy(
    mode: stages.Mode, reasoning: bool, stage: stages.Stage
) -> None:
    """Every cell of the matrix: its tools, prompts and reasoning format."""
    assert policy(mode, reasoning, stage, TOOLS) == _expected(mode, reasoning, stage)


def test_the_matrix_is_whole() -> None:
    """Two modes, two reasoning settings, six stages, in the run's order."""
    assert MODES == ("agent", "chat")
    assert STAGES == (
        "warmup",
        "act",
        "tool_followup",
        "micro_step",
        "delivery_check",
        "qa_review",
    )
    assert len(MATRIX) == 24


@hypothesis.given(
    mode=st.sampled_from(MODES),
    reasoning=st.booleans(),
    stage=st.sampled_from(STAGES),
    tools=st.lists(st.text(max_size=20) | st.sampled_from(TOOLS), max_size=12),
)
def test_the_users_mode_and_reasoning_come_back_unchanged(
    mode: stages.Mode, reasoning: bool, stage: stages.Stage, tools: list[str]
) -> None:
    """Whatever the stage and the tools, the policy carries the mode and the
    reasoning switch it was given; it allows only tools the run has, sorted,
    once each; and no prompt it composes belongs to the other mode."""
    got = policy(mode, reasoning, stage, tools)
    assert (got.mode, got.reasoning, got.stage) == (mode, reasoning, stage)
    assert set(got.tools) <= set(tools)
    assert list(got.tools) == sorted(set(got.tools))
    other = "chat" if mode == "agent" else "agent"
    assert f"{other}/mode_addition" not in got.prompts
    assert f"{mode}/mode_addition" in got.prompts
    if not reasoning or mode == "chat":
        assert got.reasoning_format is None
        assert not any("reasoning" in name for name in got.prompts)
    else:
        assert got.reasoning_format is not None


@pytest.mark.parametrize(("mode", "reasoning", "stage"), MATRIX)
def test_no_write_tool_where_the_stage_or_mode_only_reads(
    mode: stages.Mode, reasoning: bool, stage: stages.Stage
) -> None:
    """Chat mode, qa_review and delivery_check never get a write tool;
    delivery_check and warmup get no tool at all."""
    got = policy(mode, reasoning, stage, TOOLS)
    if mode == "chat" or stage in ("qa_review", "delivery_check"):
        assert not set(got.tools) & set(WRITES), (mode, stage, got.tools)
        assert all(read_only(name) for name in got.tools)
    if stage in ("delivery_check", "warmup"):
        assert got.tools == ()


@pytest.mark.parametrize(
    ("name", "reads"),
    [
        ("files.read", True),
        ("files.list", True),
        ("memory.search", True),
        ("index.read_symbol", True),
        ("schedule.list", True),
        ("read", True),
        ("files.write", False),
        ("files.reader", False),
        ("memory.core_get", False),
        ("read.write", False),
        ("files.read.delete", False),
        ("", False),
    ],
)
def test_a_tool_is_read_only_by_its_last_segment(name: str, reads: bool) -> None:
    """read, list, search, or read_/list_/search_ at the start of the last
    dotted segment; nothing else (a name is not read-only by its prefix)."""
    assert read_only(name) is reads


def test_an_unknown_mode_or_stage_is_refused() -> None:
    """A policy is never made for a mode or stage the spec does not name."""
    with pytest.raises(ValueError, match="mode 'plan'"):
        policy("plan", True, "act", TOOLS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stage 'review'"):
        policy("agent", True, "review", TOOLS)  # type: ignore[arg-type]


def test_prompt_names_cover_every_policy_and_recovery() -> None:
    """Every prompt a policy composes and every recovery prompt is shipped
    (named in PROMPT_NAMES), each once."""
    used = {name for cell in MATRIX for name in policy(*cell, TOOLS).prompts}
    assert used | set(stages.RECOVERY_PROMPTS) == set(PROMPT_NAMES)
    assert len(PROMPT_NAMES) == len(set(PROMPT_NAMES)) == 18
    assert {
        "recovery/empty_response",
        "recovery/asks_for_files",
        "recovery/tool_failure",
        "stages/delivery_gate",
    } <= set(PROMPT_NAMES)


# -- compose ------------------------------------------------------------------------

PROMPTS = {name: f"<{name}>" for name in PROMPT_NAMES}


def test_compose_joins_the_prompts_in_the_policys_order() -> None:
    """base, project root, mode addition, stage, reasoning, schema: joined
    by one blank line each, in that order."""
    got = compose(PROMPTS, policy("agent", True, "qa_review", TOOLS), {})
    assert got == "\n\n".join(
        [
            "<base/system>",
            "<base/project_root_context>",
            "<agent/mode_addition>",
            "<qa/system>",
            "<qa/review_micro_reasoning>",
            "<qa/report_schema>",
        ]
    )


def test_compose_fills_the_allowed_variables_only() -> None:
    """Each allowed variable is filled (with or without blanks inside its
    braces), a missing one with nothing; another {{name}} stays as written;
    a value's own {{...}} is not filled again; the result is stripped."""
    prompts = {
        **PROMPTS,
        "base/system": "  root={{project_root}} in={{ user_input }} x={{other}}\n",
        "stages/act": "tools={{tool_summary}} last={{last_step_outcome}}|",
    }
    variables = {"project_root": "/p", "user_input": "{{tool_summary}}"}
    got = compose(prompts, policy("chat", False, "act", TOOLS), variables)
    assert got.startswith("root=/p in={{tool_summary}} x={{other}}\n\n")
    assert got.endswith("tools= last=|")
    assert got == compose(prompts, policy("chat", False, "act", TOOLS), variables)


def test_compose_leaves_out_a_prompt_that_renders_empty() -> None:
    """A prompt that is only an empty variable adds no blank lines."""
    prompts = {**PROMPTS, "stages/act": "{{user_input}}\n"}
    got = compose(prompts, policy("agent", False, "act", ()), {})
    assert "\n\n\n" not in got
    assert got.endswith("<agent/mode_addition>")


def test_compose_names_a_missing_prompt() -> None:
    """A prompt the policy uses but the mapping lacks is a KeyError naming it."""
    prompts = {k: v for k, v in PROMPTS.items() if k != "stages/warmup"}
    with pytest.raises(KeyError, match="stages/warmup"):
        compose(prompts, policy("agent", True, "warmup", ()), {})


def test_placeholders_name_each_variable_and_its_offset() -> None:
    """Each {{ name }} with the offset of its braces, in order; a brace pair
    around no name is none."""
    text = "a {{x}} b {{ user_input }} {{}} {{x}}"
    assert placeholders(text) == [("x", 2), ("user_input", 10), ("x", 32)]
    assert ALLOWED_VARIABLES == {
        "project_root",
        "user_input",
        "tool_summary",
        "last_step_outcome",
    }


# -- reasoning ------------------------------------------------------------------------

MACRO = """\
Sure. <IDE_Reasoning>
Analyze: the user wants a fix.
Research: parser.py
## Plan
1. read parser.py
2. fix the off-by-one
Reflect: the tests may be slow
and flaky
**Action:** call files.read on parser.py
Delivery: NEEDS_WORK
</ide_reasoning>
I will read parser.py first."""


def test_split_reasoning_takes_the_block_out_of_the_reply() -> None:
    """The block's inner text, and the reply without it, stripped; the tag
    in any case."""
    block, reply = split_reasoning(MACRO)
    assert block is not None
    assert block.startswith("Analyze: the user wants a fix.")
    assert block.endswith("Delivery: NEEDS_WORK")
    assert reply == "Sure. \nI will read parser.py first."


def test_split_reasoning_without_a_block_is_none_and_the_reply() -> None:
    """No block: None, and the reply stripped."""
    assert split_reasoning("  just an answer\n") == (None, "just an answer")


def test_an_unclosed_block_runs_to_the_end() -> None:
    """A block cut off before its closing tag is reasoning to the end (it
    never reaches the visible reply); several blocks are joined."""
    assert split_reasoning("ok <ide_reasoning>\n- a\n- b") == ("- a\n- b", "ok")
    text = "<ide_reasoning>one</ide_reasoning>mid<ide_reasoning>two</ide_reasoning>"
    assert split_reasoning(text) == ("one\n\ntwo", "mid")
    nested = "a <ide_<ide_reasoning>x</ide_reasoning>reasoning>y</ide_reasoning> b"
    assert split_reasoning(nested) == ("x\n\ny", "a  b")


def test_outcome_of_reads_the_sections() -> None:
    """Plan's items on one line, Action, Reflect's first line, Delivery."""
    block, _ = split_reasoning(MACRO)
    assert block is not None
    assert outcome_of(block) == ReasoningOutcome(
        plan_delta="read parser.py; fix the off-by-one",
        next_action="call files.read on parser.py",
        known_risks="the tests may be slow",
        delivery_state="NEEDS_WORK",
    )


@pytest.mark.parametrize(
    ("delivery", "state"),
    [
        ("Delivery: DONE", "DONE"),
        ("Delivery: **DONE** - all tests pass", "DONE"),
        ("## Delivery\nDONE.", "DONE"),
        ("- Delivery: DONE", "DONE"),
        ("Delivery: NEEDS_WORK", "NEEDS_WORK"),
        ("Delivery: not DONE yet", "NEEDS_WORK"),
        ("Delivery: done", "NEEDS_WORK"),
        ("Delivery: DONEISH", "NEEDS_WORK"),
        ("Delivery:\n\nDONE", "DONE"),
        ("DONE", "NEEDS_WORK"),
        ("Plan: DONE", "NEEDS_WORK"),
    ],
)
def test_delivery_is_done_only_when_its_section_starts_with_done(
    delivery: str, state: str
) -> None:
    """DONE (the word, in capitals) first in the Delivery section; anything
    else, or no Delivery section, is NEEDS_WORK."""
    assert outcome_of(f"Plan: x\n{delivery}").delivery_state == state


def test_a_sentence_that_starts_like_a_heading_is_text() -> None:
    """ "Plan the ..." without a colon is part of the section it is in; the
    first of two sections of one name counts; risks count as Reflect."""
    got = outcome_of(
        "Plan: a\nPlan the rollout carefully\nRisks: none known\n"
        "Plan: overwritten?\nDelivery: DONE"
    )
    assert got.plan_delta == "a; Plan the rollout carefully"
    assert got.known_risks == "none known"
    assert got.delivery_state == "DONE"


def test_a_long_plan_is_cut() -> None:
    """Each part keeps at most 200 characters, the cut marked."""
    got = outcome_of("Plan: " + "x" * 500)
    assert len(got.plan_delta) == 200 and got.plan_delta.endswith("…")


def test_micro_bullets_without_sections_give_an_empty_outcome() -> None:
    """Bullets with no headings: nothing to keep but NEEDS_WORK."""
    assert outcome_of("- read the file\n- it failed\n- retry") == ReasoningOutcome()


def test_outcome_text_is_one_compact_paragraph() -> None:
    """Its parts in order, the empty ones left out, delivery always there."""
    full = ReasoningOutcome(
        plan_delta="a; b", next_action="read x", known_risks="r", delivery_state="DONE"
    )
    assert outcome_text(full) == (
        "Reasoning outcome: plan: a; b; next: read x; risks: r; delivery: DONE"
    )
    assert outcome_text(ReasoningOutcome(next_action="go\n now")) == (
        "Reasoning outcome: next: go now; delivery: NEEDS_WORK"
    )


@hypothesis.given(text=st.text())
def test_the_reasoning_helpers_take_any_text(text: str) -> None:
    """Any reply: split, outcome and its text never raise; the reply left has
    no block; the outcome's text is one line."""
    block, reply = split_reasoning(text)
    assert stages.REASONING_BLOCK.search(reply) is None
    if "<ide_reasoning" not in text.lower():
        assert (block, reply) == (None, text.strip())
    outcome = outcome_of(block if block is not None else text)
    assert outcome.delivery_state in ("DONE", "NEEDS_WORK")
    rendered = outcome_text(outcome)
    assert rendered.startswith("Reasoning outcome: ") and "\n" not in rendered
    assert all(len(part) <= 200 for part in (outcome.plan_delta, outcome.next_action))


@hypothesis.given(
    lines=st.lists(
        st.sampled_from(
            ["Plan:", "## Delivery", "**Action**", "- Reflect: r", "DONE", " ", ""]
        )
        | st.text(alphabet=" \t*_#-:1.)PlanDONE\n<>/", max_size=30),
        max_size=20,
    )
)
def test_outcome_of_takes_any_heading_soup(lines: list[str]) -> None:
    """Headings, bullets, markers and blanks in any order give an outcome."""
    outcome = outcome_of("\n".join(lines))
    assert outcome.delivery_state in ("DONE", "NEEDS_WORK")


def test_a_long_line_of_blanks_is_read_in_linear_time() -> None:
    """Lines of 200 000 blanks around heading markers and words, none a
    heading, do not make the heading pattern backtrack (a pattern with
    adjacent blank runs takes minutes on them)."""
    blanks = " " * 200_000
    text = "\n".join(
        [blanks + "!", "- **" + blanks + "!", "Plan" + blanks + "the!", "- " + blanks]
    )
    started = time.perf_counter()
    assert outcome_of(text) == ReasoningOutcome()
    assert time.perf_counter() - started < 1.0


# -- purity ---------------------------------------------------------------------------


def test_the_policy_module_is_pure() -> None:
    """stages.py imports no I/O, clock or randomness and keeps no module
    state (its tables are read-only), as a decider module must."""
    path = Path(stages.__file__)
    tree = ast.parse(path.read_text())
    imported = [
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    bad = [
        n for n in imported if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert not bad
    structs = frozenset({"StagePolicy", "ReasoningOutcome"})
    assert module_state("steward/actors/run/stages.py", path.read_text(), structs) == []
