"""`steward prompts`: list names every prompt with its first line and
source; show prints a prompt, or the system prompt a stage composes after a
header naming its prompts and tools; a bad name, stage or file is refused
in one line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward import cli
from steward.actors.run.stage_prompts import load_prompts
from steward.actors.run.stages import PROMPT_NAMES


def steward(*argv: str) -> int:
    return cli.main(list(argv))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no steward.toml of the checkout's is read


def test_list_names_every_prompt_with_its_first_line_and_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header, then a line per prompt in PROMPT_NAMES order: its name, its
    first line cut to 70 characters, shipped; and nothing is written."""
    assert steward("prompts", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "FIRST", "LINE", "SOURCE"]
    assert [line.split()[0] for line in lines[1:]] == list(PROMPT_NAMES)
    assert all(line.endswith("  shipped") for line in lines[1:])
    first = load_prompts()["base/system"].splitlines()[0]
    assert first[:69] in lines[1] and "…" in lines[1]
    assert list(tmp_path.iterdir()) == []


def test_list_shows_a_profiles_file_as_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --dir, a prompt the directory has is that file, first line and
    all; the rest stay shipped."""
    mine = tmp_path / "profile" / "stages" / "act.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("My own act prompt: {{user_input}}\n")
    assert steward("prompts", "list", "--dir", str(tmp_path / "profile")) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "My own act prompt" in lines["stages/act"]
    assert lines["stages/act"].endswith(str(mine))
    assert lines["stages/warmup"].endswith("shipped")


def test_show_prints_a_prompts_text(capsys: pytest.CaptureFixture[str]) -> None:
    """show NAME prints the prompt as it is, variables unfilled."""
    assert steward("prompts", "show", "stages/tool_followup") == 0
    out = capsys.readouterr().out
    assert out == load_prompts()["stages/tool_followup"].rstrip("\n") + "\n"
    assert "{{tool_summary}}" in out


def test_show_stage_composes_the_system_prompt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """show --stage: a header naming the prompts in order, the tools rule
    and the reasoning required; then the prompts joined, variables left as
    {{name}}."""
    assert steward("prompts", "show", "--stage", "qa_review") == 0
    out = capsys.readouterr().out
    header, blank, *body = out.splitlines()
    prompts = load_prompts()
    assert header == (
        "# stage qa_review, mode agent, reasoning on (requires micro); tools: "
        "the run's read-only tools (named *.read, *.list, *.search, *.read_*, "
        "*.list_*, *.search_*); prompts: base/system, base/project_root_context, "
        "agent/mode_addition, qa/system, qa/review_micro_reasoning, "
        "qa/report_schema"
    )
    assert blank == ""
    text = "\n".join(body)
    assert text.startswith(prompts["base/system"].strip())
    assert text.endswith(prompts["qa/report_schema"].strip())
    assert "`{{project_root}}`" in text
    positions = [
        text.index(prompts[name].strip())
        for name in ("base/system", "agent/mode_addition", "qa/system")
    ]
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("argv", "tools", "has", "lacks"),
    [
        (
            ["--stage", "act", "--mode", "chat"],
            "the run's read-only tools",
            "chat/mode_addition",
            "reasoning",
        ),
        (
            ["--stage", "warmup", "--reasoning", "on"],
            "none",
            "agent/reasoning_macro",
            "chat/",
        ),
        (
            ["--stage", "delivery_check", "--reasoning", "off"],
            "none",
            "stages/delivery_check",
            "reasoning",
        ),
        (["--stage", "tool_followup"], "all the run's tools", "reasoning_micro", "qa/"),
    ],
)
def test_show_stage_follows_mode_and_reasoning(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    tools: str,
    has: str,
    lacks: str,
) -> None:
    """The header follows the policy for the mode and switch given."""
    assert steward("prompts", "show", *argv) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert f"tools: {tools}" in header.split(";")[1]
    prompts = header.split("prompts: ")[1]
    assert has in prompts and lacks not in prompts


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["show", "stages/nope"],
            "steward: no prompt 'stages/nope'; `steward prompts list` names them",
        ),
        (
            ["show", "--stage", "review"],
            "steward prompts show: error: argument --stage: invalid choice: "
            "'review' (choose from 'warmup', 'act', 'tool_followup', "
            "'micro_step', 'delivery_check', 'qa_review'); see `steward prompts "
            "show --help`",
        ),
        (
            ["show"],
            "steward: give a prompt's NAME (`steward prompts list` names them) "
            "or --stage STAGE",
        ),
        (
            ["show", "base/system", "--stage", "act"],
            "steward: give a prompt's NAME or --stage STAGE, not both",
        ),
        (
            ["show", "base/system", "--mode", "chat"],
            "steward: --mode and --reasoning go with --stage, not with a NAME",
        ),
    ],
)
def test_a_bad_name_or_stage_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    """Exit 2 with one line saying what is wrong; nothing on stdout."""
    try:
        code = steward("prompts", *argv)
    except SystemExit as e:  # argparse's own refusal
        code = int(str(e.code))
    captured = capsys.readouterr()
    assert (code, captured.err, captured.out) == (2, expected + "\n", "")


def test_a_directory_with_an_unknown_variable_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each problem of --dir's files on its own line, exit 2, no listing."""
    bad = tmp_path / "p" / "qa" / "system.md"
    bad.parent.mkdir(parents=True)
    bad.write_text("Review.\n  {{answer}}\n")
    assert steward("prompts", "list", "--dir", str(tmp_path / "p")) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{bad}:2:3: {{{{answer}}}}: 'answer' is not")
    assert len(captured.err.splitlines()) == 1


def test_show_reads_the_configured_profiles_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --dir, the default profile's [agents.NAME] prompts, or
    --profile's; a profile with none shows the shipped prompt."""
    for name in ("mine", "theirs"):
        (tmp_path / name / "base").mkdir(parents=True)
        (tmp_path / name / "base" / "system.md").write_text(f"{name} system\n")
    (tmp_path / "steward.toml").write_text(
        '[agents.default]\nprompts = "mine"\n\n[agents.other]\nprompts = "theirs"\n'
        "\n[agents.plain]\n"
    )
    assert steward("prompts", "show", "base/system") == 0
    assert capsys.readouterr().out == "mine system\n"
    assert steward("prompts", "show", "base/system", "--profile", "other") == 0
    assert capsys.readouterr().out == "theirs system\n"
    assert steward("prompts", "show", "base/system", "--profile", "plain") == 0
    assert capsys.readouterr().out == load_prompts()["base/system"].rstrip("\n") + "\n"
    assert steward("prompts", "list", "--profile", "other") == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[1].endswith(str(Path("theirs/base/system.md")))
    assert steward("prompts", "show", "base/system", "--profile", "nobody") == 2
    assert "agents.nobody: no such agent profile" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", "  \n\t\n"])
def test_an_empty_prompt_file_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    (tmp_path / "own" / "stages").mkdir(parents=True)
    (tmp_path / "own" / "stages" / "act.md").write_text(text)
    assert steward("prompts", "list", "--dir", "own") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{Path('own/stages/act.md')}: stages/act: the prompt file is empty; write "
        "the prompt in it, or delete it to use the shipped one"
    ]
