"""The staged policy's prompt files (spec 004 §5): the shipped set loads
whole; a profile's directory replaces the files it has and falls back for
the rest; a variable other than the four allowed is refused at load,
naming the file, line, column and variable; no prompt tells the model to
switch modes or leaves reasoning to it."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from steward.actors.run.stage_prompts import (
    SHIPPED,
    load_prompts,
    prompt_problems,
    prompt_sources,
)
from steward.actors.run.stages import (
    MODES,
    PROMPT_NAMES,
    STAGES,
    compose,
    placeholders,
    policy,
)
from steward.errors import ConfigError

SHIPPED_DIR = Path(str(resources.files("steward").joinpath(SHIPPED)))


def test_the_shipped_set_holds_every_prompt() -> None:
    """Every name in PROMPT_NAMES loads, as non-empty text, and nothing else
    ships; the shipped set has no problem."""
    prompts = load_prompts()
    assert list(prompts) == list(PROMPT_NAMES)
    assert all(text.strip() for text in prompts.values())
    files = sorted(
        p.relative_to(SHIPPED_DIR).as_posix() for p in SHIPPED_DIR.rglob("*")
    )
    assert [f for f in files if f.endswith(".md")] == sorted(
        f"{name}.md" for name in PROMPT_NAMES
    )
    assert prompt_problems() == []


@pytest.mark.parametrize(
    ("name", "variables"),
    [
        ("base/project_root_context", {"project_root"}),
        ("stages/act", {"user_input"}),
        ("stages/tool_followup", {"tool_summary", "last_step_outcome"}),
        ("recovery/tool_failure", {"last_step_outcome"}),
        ("base/system", set()),
        ("qa/system", set()),
    ],
)
def test_shipped_prompts_use_the_variables_they_need(
    name: str, variables: set[str]
) -> None:
    """The prompts that carry a value use exactly its variable."""
    assert {n for n, _ in placeholders(load_prompts()[name])} == variables


def test_the_shipped_prompts_ask_for_what_the_spec_requires() -> None:
    """Macro reasoning names its six sections and starts delivery at
    NEEDS_WORK; micro asks 3-8 bullets; QA is advisory and reports the
    schema's fields; asks_for_files says to proceed autonomously."""
    p = load_prompts()
    macro = p["agent/reasoning_macro"]
    for section in ("Analyze", "Research", "Plan", "Reflect", "Action"):
        assert f"{section}:" in macro
    assert "Delivery: NEEDS_WORK" in macro and "<ide_reasoning>" in macro
    assert "3 to 8 bullets" in p["agent/reasoning_micro"]
    assert "never rewrite" in p["qa/system"] and "read-only" in p["qa/system"]
    for field in ('"verdict"', '"findings"', '"severity"', '"guidance"'):
        assert field in p["qa/report_schema"]
    assert "autonomously" in p["recovery/asks_for_files"]
    assert "Delivery: DONE" in p["stages/delivery_check"]
    assert "changed parameters" in p["recovery/tool_failure"]


def _write(root: Path, name: str, text: str) -> Path:
    path = root / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_profiles_directory_overrides_and_falls_back(tmp_path: Path) -> None:
    """A file the directory has replaces the shipped one; the others stay
    shipped, and their sources say which is which."""
    mine = _write(tmp_path, "stages/act", "Do it: {{user_input}}\n")
    prompts = load_prompts(tmp_path)
    shipped = load_prompts()
    assert prompts["stages/act"] == "Do it: {{user_input}}\n"
    assert {k: v for k, v in prompts.items() if k != "stages/act"} == {
        k: v for k, v in shipped.items() if k != "stages/act"
    }
    sources = prompt_sources(tmp_path)
    assert sources["stages/act"] == str(mine)
    assert Path(sources["base/system"]).is_relative_to(SHIPPED_DIR)


def test_an_unknown_variable_is_refused_naming_file_place_and_variable(
    tmp_path: Path,
) -> None:
    """``{{repo}}`` on line 2, column 7 of a profile's stages/act.md is a
    ConfigError naming all three and the variables allowed."""
    path = _write(tmp_path, "stages/act", "Do it.\nSee:  {{repo}} and {{user_input}}\n")
    with pytest.raises(ConfigError) as refused:
        load_prompts(tmp_path)
    error = refused.value
    assert error.source == f"{path}:2:7"
    assert error.key == "{{repo}}"
    assert str(error).startswith(f"{path}:2:7: {{{{repo}}}}: 'repo' is not a variable")
    assert "{{project_root}}" in str(error) and "{{user_input}}" in str(error)


def test_every_problem_is_listed_in_order(tmp_path: Path) -> None:
    """prompt_problems names each bad variable and each stray ``{{``, of
    every file, each at its place; a misspelt file is named too."""
    act = _write(tmp_path, "stages/act", "{{a}} {{ user_input }}\n{{b}} {{ not closed")
    _write(tmp_path, "qa/system", "fine {{tool_summary}}")
    stray = _write(tmp_path, "stage/act", "x")
    problems = prompt_problems(tmp_path)
    assert [p.split(": ", 2)[:2] for p in problems] == [
        [str(stray), "stage/act"],
        [f"{act}:1:1", "{{a}}"],
        [f"{act}:2:1", "{{b}}"],
        [f"{act}:2:7", "{{"],
    ]
    assert "no prompt of a staged run is called 'stage/act'" in problems[0]


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    """A profile naming a directory that is not there is told so."""
    with pytest.raises(ConfigError, match="no such directory"):
        load_prompts(tmp_path / "nope")


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """A prompt file that cannot be read as UTF-8 is named."""
    path = tmp_path / "base" / "system.md"
    path.parent.mkdir()
    path.write_bytes(b"\xff\xfe bad")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: base/system: cannot")):
        load_prompts(tmp_path)


def test_every_stage_composes_from_the_shipped_set() -> None:
    """Each mode × reasoning × stage composes without a missing prompt, and
    each variable given shows up where its prompt is used."""
    prompts = load_prompts()
    values = {"project_root": "/srv/proj", "user_input": "fix the bug"}
    for mode in MODES:
        for reasoning in (True, False):
            for stage in STAGES:
                text = compose(prompts, policy(mode, reasoning, stage, ()), values)
                assert "/srv/proj" in text
                assert ("fix the bug" in text) == (stage == "act")
                assert "{{" not in text


FORBIDDEN_PHRASES = (
    r"switch\w*\s+(?:\w+\s+){0,3}mode",
    r"mode\s+(?:\w+\s+){0,3}switch",
    r"change\s+(?:the\s+|your\s+)?mode",
    r"(?:chat|agent|plan|act)\s+mode\s+instead",
    r"(?:skip|omit|leave\s+out|drop)\s+(?:\w+\s+){0,2}reasoning",
    r"reasoning\s+(?:\w+\s+){0,3}(?:optional|if\s+you\s+(?:like|want|wish|prefer))",
    r"(?:whether|if)\s+to\s+(?:include\s+|use\s+|do\s+)?reason",
    r"(?:may|can|might)\s+(?:choose\s+to\s+)?(?:skip|omit)",
)
"""What a prompt must not say (spec §2): switch modes, or decide whether to
reason."""


def _forbidden(text: str) -> list[str]:
    flat = " ".join(text.lower().split())
    return [found[0] for p in FORBIDDEN_PHRASES for found in re.finditer(p, flat)]


def test_no_prompt_switches_modes_or_leaves_reasoning_to_the_model() -> None:
    """Every shipped prompt is free of mode switching and optional reasoning."""
    found = {
        name: hits
        for name, text in load_prompts().items()
        if (hits := _forbidden(text))
    }
    assert found == {}


@pytest.mark.parametrize(
    "text",
    [
        "If editing is needed, switch to agent mode.",
        "Ask the user to switch\ninto chat mode.",
        "You may skip the reasoning block when the task is simple.",
        "Reasoning is optional.",
        "Decide whether to include reasoning.",
        "Answer in chat mode instead.",
    ],
)
def test_the_phrase_check_catches_a_bad_prompt(text: str) -> None:
    """The grep above is not vacuous: each of these is caught."""
    assert _forbidden(text)
