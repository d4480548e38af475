"""Every model request of a staged run says, in its event and its log line,
its conversation, run, the user's mode, its stage, how many tools it offers
and whether it reasons (spec 004 §9.1), and each of its stages keeps the
invariants of §2 and §9.2 in the recorded log."""

from __future__ import annotations

from pathlib import Path

from steward import events, replay
from steward.actors.run import reactor as run_effects
from steward.actors.run.events import ContextCompressed, StageEntered
from steward.actors.run.prompt import build_prompt
from steward.actors.run.stages import policy
from steward.events import LlmRequested
from steward.kinds import KINDS

GOLDEN = Path(__file__).parents[1] / "golden" / "staged.jsonl"


def _streams() -> dict[str, list[events.Recorded]]:
    streams: dict[str, list[events.Recorded]] = {}
    for line in GOLDEN.read_bytes().splitlines():
        rec = events.recorded_from_json(line, union=KINDS.union)
        streams.setdefault(rec.stream, []).append(rec)
    return streams


def test_each_request_is_labelled_with_its_stage_mode_tools_and_reasoning() -> None:
    for stream, records in _streams().items():
        for rec in records:
            if not isinstance(rec.event, LlmRequested):
                continue
            state = replay.rebuild(records, rec.version, kinds=KINDS)
            call = run_effects.model_call(state, rec.event)
            entered = records[rec.version - 2].event  # recorded just before
            assert isinstance(entered, StageEntered), stream
            assert call.labels == {
                "conversation": state.run_id,
                "run": state.run_id,
                "mode": state.settings.mode,
                "stage": entered.stage,
                "tools": str(len(entered.tools)),
                "reasoning": "on" if state.settings.reasoning else "off",
            }
            assert len(call.prompt.tools) == len(entered.tools)


def test_the_recorded_stages_keep_the_users_mode_reasoning_and_tools() -> None:
    """Mode, reasoning and tool invariance (§9.2), held in the log: every
    stage entered has the run's mode and reasoning as set, and the tools the
    policy gives that stage; every tool requested is one of its stage's."""
    for stream, records in _streams().items():
        settings = records[0].event.settings  # type: ignore[attr-defined]
        names = [t.name for t in settings.tools]
        stage = None
        for rec in records:
            match rec.event:
                case StageEntered() as entered:
                    assert (entered.mode, entered.reasoning) == (
                        settings.mode,
                        settings.reasoning,
                    ), stream
                    given = policy(
                        settings.mode, settings.reasoning, entered.stage, names
                    )
                    assert entered.tools == given.tools, (stream, entered.stage)
                    stage = entered
                case events.ToolRequested(name=name):
                    assert stage is not None and name in stage.tools, (stream, name)
                case _:
                    pass


def test_entries_that_left_the_window_are_shown_as_their_summary() -> None:
    """Context compression (spec 004 §7): once entries leave a staged run's
    window, its prompts show their structured summary (goals, decisions,
    current plan, open issues, tool outputs), never a reasoning block, and
    the summary is what the log recorded."""
    golden = GOLDEN.with_name("staged_compressed.jsonl")
    lines = golden.read_bytes().splitlines()
    records = [events.recorded_from_json(line, union=KINDS.union) for line in lines]
    summaries = [r for r in records if isinstance(r.event, ContextCompressed)]
    assert summaries, "the run's transcript outgrew its window"
    first = summaries[0].event
    for title in ("Goals", "Decisions", "Current plan", "Open issues"):
        assert f"## {title}" in first.summary
    assert "read notes.txt and list the files" in first.summary  # its plan
    assert "missing.txt" in summaries[1].event.summary  # the failed tool
    asked = [
        r
        for r in records
        if isinstance(r.event, LlmRequested) and r.version > summaries[0].version
    ]
    for rec in asked:
        state = replay.rebuild(records, rec.version, kinds=KINDS)
        prompt = build_prompt(state)
        shown = [m.content for m in prompt.messages]
        assert shown[1] == f"[summary of the work so far]\n{state.summary}"
        assert not any("<ide_reasoning" in text for text in shown)
