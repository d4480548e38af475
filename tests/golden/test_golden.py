"""Old logs replay: every committed golden log folds and verifies with today's code.

A change that breaks a golden log is a bug, fixed with an upcaster
(`steward.events.UPCASTERS`), never by editing the golden file. See
README.md beside this file, and make_golden.py for how the logs were recorded.
"""

from __future__ import annotations

import json
import shutil
import typing
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest

from steward import events, replay
from steward.actors.effects import Create
from steward.actors.run import events as run_events
from steward.actors.session import events as session_events
from steward.actors.workflow import events as workflow_events
from steward.bus import SqliteEventLog
from steward.config import DEFAULT_SYSTEM_PROMPT
from steward.events import Recorded
from steward.kinds import KINDS, kind_of

GOLDEN = Path(__file__).resolve().parent


class Final(NamedTuple):
    """What a run's folded state must say at the end of its golden log."""

    status: str
    output: str = ""
    reason: str | None = None
    """The start of the run's ``reason`` (``None``: it has none)."""


EXPECTED: dict[str, dict[str, Final]] = {
    "json_protocol": {
        "json-protocol": Final("completed", "Report written to report.txt."),
    },
    "json_invalid": {
        "json-invalid": Final(
            "failed", reason="the model's reply was not a valid command after 1 retry"
        ),
    },
    "native_protocol": {
        "native-protocol": Final(
            "completed", "Wrote notes.md; the workspace holds it."
        ),
    },
    "native_finish": {
        "native-finish": Final("completed", "The workspace is empty."),
    },
    "tool_rounds": {
        "tool-rounds": Final("failed", reason="tool-call loop limit reached"),
    },
    "approvals": {"approvals": Final("completed", "Trashed old.txt; kept keep.txt.")},
    "budget_pause": {
        "budget-pause": Final("completed", "Finished on an approved budget."),
    },
    "budget_fail": {
        "budget-fail": Final("failed", reason="tokens budget spent: 605 of 50"),
    },
    "sleep_wake": {"sleep-wake": Final("completed", "Woke twice.")},
    "subagents": {
        "subagents": Final("completed", "Four words, in English."),
        "subagents-1": Final("completed", "Four words."),
        "subagents-2": Final("completed", "English."),
    },
    "queued": {"queued": Final("completed", "Listed and said so.")},
    "cancel": {
        "cancel": Final("cancelled", reason="stopped by an operator"),
        "cancel-1": Final("cancelled", reason="parent run was cancelled"),
    },
    "model_errors": {
        "model-errors": Final(
            "failed", reason="model call failed: transport: scripted transport"
        ),
    },
    "streams": {"streams": Final("completed", "Streamed and priced.")},
    "claims": {"claims": Final("completed", "Listed the workspace.")},
    "session": {
        "cli:golden-t1": Final("completed", "Hello, Ada."),
        "cli:golden-t2": Final("completed", "A fresh start."),
    },
    "session_memory": {
        "cli:memory-t1": Final("completed", "Hello."),
        "cli:memory-t2": Final("completed", "Noted."),
        "cli:memory-t3": Final("completed", "Bye."),
    },
    "session_subagents": {
        "cli:subs-t1": Final("completed", "A scout runs; weather every hour."),
        "cli:subs-s1": Final("completed", "Two open issues."),
        "cli:subs-s2": Final("completed", '{"silent": true}'),
        "cli:subs-t2": Final("completed", "No more weather."),
    },
    "session_direct": {},
    "session_revision_2": {},
    "session_revision_3": {
        "cli:three-t1": Final("completed", "Hello, Ada."),
        "cli:three-t2": Final("completed", "A scout is on it."),
        "cli:three-s1": Final("completed", "Three."),
        "cli:three-t3": Final("completed", "You are welcome."),
    },
    "session_revision_4": {
        "cli:four-t1": Final("completed", "The notes say hello."),
        "cli:four-t2": Final("completed", "Switching to chat mode now: /mode chat"),
        "cli:four-t3": Final("completed", "Still hello."),
    },
    "session_revision_1": {
        "cli:later-t1": Final("completed", "Hello."),
        "cli:later-t2": Final("completed", "Noted."),
        "cli:later-t3": Final("completed", "Bye."),
    },
    "workflow": {
        "wf-loop-design-1": Final("completed", "The design."),
        "wf-loop-implement-2": Final(
            "failed", reason="model call failed: transport: scripted outage"
        ),
        "wf-loop-implement-3": Final("completed", "Built it."),
        "wf-loop-review-4": Final("completed", "Return JSON."),
        "wf-loop-implement-5": Final("completed", "Returns JSON now."),
        "wf-loop-review-6": Final("completed", "Approved."),
        "wf-fail-design-1": Final(
            "failed", reason="model call failed: transport: scripted outage"
        ),
        "wf-cancel-design-1": Final(
            "cancelled", reason="its workflow wf-cancel was cancelled"
        ),
    },
    "workflow_worktree": {"wf-tree-write-1": Final("completed", "Wrote note.md.")},
}
EXPECTED["workflow_revision_1"] = {
    run_id.replace("-", ":").replace("wf:", "wf-", 1): final
    for run_id, final in EXPECTED["workflow"].items()
}
EXPECTED["workflow_revision_2"] = EXPECTED["workflow_revision_1"]
EXPECTED["workflow_revision_3"] = {
    "wf-gate:check:1": Final("completed", "Checked."),
    "wf-spin:a:1": Final("completed", "Spun a."),
    "wf-spin:b:2": Final("completed", "Spun b."),
    "wf-spin:a:3": Final("completed", "Spun a again."),
    "wf-cancel:check:1": Final(
        "cancelled", reason="its workflow wf-cancel was cancelled"
    ),
}
EXPECTED["tasks"] = {}  # its tasks' calls are in their own streams: no runs
EXPECTED["staged"] = {
    "stg-agent": Final("completed", "The notes say hello."),
    "stg-chat": Final("completed", "They say hello."),
}
EXPECTED["staged_compressed"] = {
    "stg-long": Final(
        "completed", "The notes say hello; the workspace holds notes.txt."
    ),
}
EXPECTED["staged_revision_5"] = {
    "stg-batch": Final("completed", "The notes say hello."),
    "stg-cancel": Final("completed", "The notes say hello."),
}
"""Each golden log's runs (by run id) and their final states."""

SESSIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "session": {"session.cli:golden": ("start over", "A fresh start.")},
    "session_memory": {"session.cli:memory": ("bye", "Bye.")},
    "session_revision_1": {"session.cli:later": ("bye", "Bye.")},
    "session_revision_3": {"session.cli:three": ("thanks", "You are welcome.")},
    "session_revision_4": {
        "session.cli:four": (
            "what do the notes say?",
            "The notes say hello.\n\nReasoning outcome: plan: read notes.txt; "
            "next: files.read; risks: none; delivery: DONE",
            "switch to chat mode",
            "Switching to chat mode now: /mode chat\n\nReasoning outcome: plan: "
            "answer; next: files.read; risks: none; delivery: DONE",
            "and now?",
            "Still hello.",
        )
    },
    "session_revision_2": {
        "session.cli:paths": ("/etc/hosts is broken", "Check its permissions."),
        "session.cli:paths-fork0a1b2c": (
            "/etc/hosts is broken",
            "Check its permissions.",
        ),
    },
    "session_subagents": {
        "session.cli:subs": (
            "scout the issues, and watch the weather hourly",
            "Two open issues.",
            "A scout runs; weather every hour.",
            "stop the weather checks",
            "No more weather.",
        )
    },
    "session_direct": {
        "session.cli:direct": (
            "hello",
            "Hello, Ada.",
            "what do I drink?",
            "Tea it is.",
            "and tomorrow?",
            "(the turn failed: the model call failed: transport: scripted outage)",
        )
    },
}
"""Each golden log's sessions and the messages of their last segment."""

WORKFLOWS: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "workflow": {
        "workflow.wf-loop": (
            "completed",
            ("design", "implement", "implement", "review", "implement", "review"),
        ),
        "workflow.wf-fail": ("failed", ("design",)),
        "workflow.wf-cancel": ("cancelled", ("design",)),
    },
    "workflow_worktree": {"workflow.wf-tree": ("completed", ("write",))},
}
WORKFLOWS["workflow_revision_1"] = WORKFLOWS["workflow"]
WORKFLOWS["workflow_revision_2"] = WORKFLOWS["workflow"]
WORKFLOWS["workflow_revision_3"] = {
    "workflow.wf-gate": ("completed", ("check",)),
    "workflow.wf-spin": ("failed", ("a", "b", "a")),
    "workflow.wf-cancel": ("cancelled", ("check",)),
}
"""Each golden log's workflow runs: their status and the phases they started."""

TASKS: dict[str, dict[str, tuple[str, str]]] = {
    "tasks": {
        "task.t-de": ("completed", "Owls: they fly at night."),
        "task.t-sub": ("completed", "Wrote owls.txt; it says owls hunt at night."),
        "task.t-sub/sub/1": ("completed", "Owls hunt at night."),
        "task.t-loop": ("failed", "limit iterations"),
        "task.t-fail": ("failed", "call"),
        "task.t-cancel": ("failed", "cancelled"),
        "task.t-cancel/sub/1": ("failed", "cancelled"),
    },
}
"""Each golden log's tasks: their status and output, or their error's kind
(and limit)."""

NAMES = sorted({p.stem for p in GOLDEN.glob("*.jsonl")} | set(EXPECTED))


@cache
def load(name: str) -> tuple[Recorded, ...]:
    """The records of golden log ``name``, decoded as an export is read."""
    path = GOLDEN / f"{name}.jsonl"
    if not path.exists():
        pytest.fail(
            f"{path.name} is gone: restore it from git (a golden log is never "
            "deleted) or take it out of EXPECTED with its scenario"
        )
    records = []
    for n, line in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            records.append(events.recorded_from_json(line, union=KINDS.union))
        except msgspec.DecodeError as e:  # a ValidationError is one too
            pytest.fail(
                f"{path.name}:{n}: an event no longer decodes ({e}): its type was "
                "changed in place; add an upcaster (steward.events.UPCASTERS) "
                "and never edit a golden log"
            )
    return tuple(records)


def by_stream(records: typing.Iterable[Recorded]) -> dict[str, list[Recorded]]:
    streams: dict[str, list[Recorded]] = {}
    for r in records:
        streams.setdefault(r.stream, []).append(r)
    return streams


def check_replays(name: str, records: typing.Iterable[Recorded]) -> None:
    """Each stream of ``records`` is contiguous and verifies; each run ends as
    EXPECTED says, each session's last segment holds what SESSIONS says."""
    streams = by_stream(records)
    runs = {s: r for s, r in streams.items() if s.startswith("run.")}
    assert name in EXPECTED, (
        f"golden log {name} has no final states: add them to EXPECTED in {__file__}"
    )
    assert sorted(runs) == sorted(f"run.{run_id}" for run_id in EXPECTED[name])
    others = {s: r for s, r in streams.items() if s not in runs}
    sessions, workflows = SESSIONS.get(name, {}), WORKFLOWS.get(name, {})
    tasks = TASKS.get(name, {})
    assert sorted(others) == sorted([*sessions, *workflows, *tasks])
    for stream_name, stream in others.items():
        assert [r.version for r in stream] == list(range(1, len(stream) + 1))
        assert replay.verify(stream, kinds=KINDS) is None, (
            f"{name}: {stream_name} no longer replays"
        )
        state = replay.rebuild(stream, kinds=KINDS)
        if stream_name in sessions:
            messages = tuple(m.content for m in state.messages)
            assert messages == sessions[stream_name]
        elif stream_name in tasks:
            error = state.error
            said = state.output
            if error is not None:
                said = " ".join(filter(None, (error.kind, error.limit)))
            assert (state.status, said) == tasks[stream_name]
        else:
            phases = tuple(
                r.event.node
                for r in stream
                if isinstance(r.event, workflow_events.PhaseStarted)
            )
            assert (state.status, phases) == workflows[stream_name]
    for run_id, final in EXPECTED[name].items():
        stream = runs[f"run.{run_id}"]
        assert [r.version for r in stream] == list(range(1, len(stream) + 1))
        mismatch = replay.verify(stream, kinds=KINDS)
        assert mismatch is None, (
            f"{name}: run {run_id} no longer replays at version {mismatch.version}: "
            f"{mismatch.problem}\n  recorded: {mismatch.recorded}\n"
            f"  decided:  {mismatch.decided}\nkeep old logs working (an "
            "upcaster, or a decider that still decides old inputs the old way)"
        )
        state = replay.rebuild(stream, kinds=KINDS)
        reason = state.reason
        if final.reason is not None and reason is not None:
            reason = reason[: len(final.reason)]
        assert (state.status, state.output, reason) == final, run_id


@pytest.mark.parametrize("name", NAMES)
def test_golden_log_replays(name: str) -> None:
    """A golden log decodes, each run re-decides exactly, and ends as expected."""
    check_replays(name, load(name))


def test_a_run_keeps_the_system_prompt_it_was_created_with() -> None:
    """A run recorded before the default system prompt's spelling was fixed
    ("AI-Assistent") asks its model with that prompt still, so it replays
    as it was decided; the default is no event field's, so none pinned."""
    stream = by_stream(load("json_protocol"))["run.json-protocol"]
    asked = next(r for r in stream if isinstance(r.event, events.LlmRequested))
    call = kind_of(asked.stream).reactor.model_call
    assert call is not None
    state = replay.rebuild(stream, asked.version, kinds=KINDS)
    system = call(state, asked.event, None, None).prompt.system
    assert "highly complex AI-Assistent!" in system
    assert DEFAULT_SYSTEM_PROMPT.replace("Assistant", "Assistent") in system
    pinned = json.loads((GOLDEN / "defaults.json").read_text())
    assert pinned["RunSettings.system_prompt"] == "''"  # recorded, not defaulted


def test_a_revision_1_session_compacts_once_its_writer_has_written() -> None:
    """In ``session_revision_1`` the compaction due after the third turn is
    decided with the first writer's answer, and asks the second writer,
    which reads the messages that left the window."""
    stream = by_stream(load("session_revision_1"))["session.cli:later"]
    steps = [
        (type(r.event).__name__, getattr(r.event, "request_id", None))
        for r in stream
        if isinstance(
            r.event, session_events.ContextCompacted | session_events.MemoryWritten
        )
    ]
    assert steps == [
        ("ContextCompacted", "cli:later/memory/1"),
        ("MemoryWritten", "cli:later/memory/1"),
        ("ContextCompacted", "cli:later/memory/2"),
        ("MemoryWritten", "cli:later/memory/2"),
    ]
    state = replay.rebuild(stream, kinds=KINDS)
    assert [(i.key, i.value) for i in state.memory] == [
        ("name", "Ada"),
        ("drink", "tea"),
    ]
    assert state.summary == "Ada likes tea." and state.revision == 1


def runs_started(streams: dict[str, list[Recorded]], session: str) -> dict[str, Any]:
    """The first input of each run ``session`` starts, as its effects start
    them now, by run stream: each the run's recorded first event."""
    kind = kind_of("session.")
    assert kind.reactor.effects is not None
    state, started = kind.decider.initial, {}
    for rec in streams[session]:
        state = kind.decider.evolve(state, rec.event)
        for effect in kind.reactor.effects(rec, state, state):
            if isinstance(effect, Create):
                started[effect.stream] = effect.input
    assert sorted(started) == sorted(s for s in streams if s.startswith("run."))
    for stream, created in started.items():
        first = streams[stream][0].event
        assert msgspec.structs.replace(created, at=first.at) == first, stream
    return started


def test_a_revision_3_session_starts_its_runs_as_it_did() -> None:
    """The runs of ``session_revision_3`` start as the session's effects
    start them now: a turn's conversation ends with the turn's message, a
    subagent's with its task, the window after a compaction with a
    question. A change to what a chat's model is asked fails here. (The
    runs of sessions recorded before replay from their recorded first
    event, so they replay as they were decided.)"""
    streams = by_stream(load("session_revision_3"))
    started = runs_started(streams, "session.cli:three")
    last = {
        s: (e.conversation[0].role, e.conversation[-1].content)
        for s, e in started.items()
        if isinstance(e, run_events.RunCreated)
    }
    assert last == {
        "run.cli:three-t1": ("user", "I am Ada"),
        "run.cli:three-t2": ("user", "count the open issues"),
        "run.cli:three-s1": ("user", "Count the open issues."),
        "run.cli:three-t3": ("system", "thanks"),
    }
    window = started["run.cli:three-t3"].conversation  # type: ignore[attr-defined]
    assert [m.role for m in window] == [
        "system",
        "user",
        "assistant",
        "assistant",
        "user",
    ]


def test_a_revision_4_session_starts_its_staged_runs_as_it_did() -> None:
    """The runs of ``session_revision_4`` start as the session's effects
    start them now: in the mode and with the reasoning the user set, not
    what a model said (the second turn's reply asks for chat mode; the
    third turn runs in it only after the user's ``/mode chat``); the next
    turn's conversation holds an earlier turn's reasoning as its outcome
    only, and its provider reasoning not at all."""
    streams = by_stream(load("session_revision_4"))
    started = runs_started(streams, "session.cli:four")
    switches = {
        s: (e.settings.mode, e.settings.reasoning)
        for s, e in started.items()
        if isinstance(e, run_events.RunCreated)
    }
    assert switches == {
        "run.cli:four-t1": ("agent", True),
        "run.cli:four-t2": ("agent", True),
        "run.cli:four-t3": ("chat", True),
    }
    second = started["run.cli:four-t2"]
    assert isinstance(second, run_events.RunCreated)
    history = [m.content for m in second.conversation]
    assert "Reasoning outcome: plan: read notes.txt" in history[-2]
    assert not any(
        "<ide_reasoning" in text or "notes.txt; read it" in text for text in history
    )


def test_a_revision_2_workflow_cancel_names_its_phase_in_flight() -> None:
    """In ``workflow_revision_2`` the cancelled run's `WorkflowCancelled`
    names the phase run it cancelled; in the logs before, none did."""
    named = {
        name: [
            r.event.phase_run_id
            for r in load(name)
            if isinstance(r.event, workflow_events.WorkflowCancelled)
        ]
        for name in ("workflow", "workflow_revision_1", "workflow_revision_2")
    }
    assert named == {
        "workflow": [None],
        "workflow_revision_1": [None],
        "workflow_revision_2": ["wf-cancel:design:1"],
    }


def test_a_revision_3_workflow_reads_no_decision_as_missing_and_is_bounded() -> None:
    """In ``workflow_revision_3`` a phase with no routing decision takes no
    ``decision != "approved"`` edge (the run completes after it), and a loop
    of auto edges fails at the ``max_steps`` its definition records."""
    streams = by_stream(load("workflow_revision_3"))
    gate = [r.event for r in streams["workflow.wf-gate"]]
    assert not [e for e in gate if isinstance(e, workflow_events.TransitionTaken)]
    assert gate[-1] == workflow_events.WorkflowCompleted(last="check")
    spin = [r.event for r in streams["workflow.wf-spin"]]
    created = spin[0]
    assert isinstance(created, workflow_events.WorkflowCreated)
    assert (created.revision, created.definition.max_steps) == (3, 3)
    assert spin[-1] == workflow_events.WorkflowFailed(
        reason="max_steps 3 reached: node b would run again (attempt 2) after 3 "
        "phase executions; if the loop is meant to go on, raise max_steps"
    )


def test_every_event_type_has_a_golden_log() -> None:
    """Each event type of every kind steward has appears in some golden log."""
    union = {t.__name__ for k in KINDS for t in k.decider.events}
    seen = {events.type_name(r.event) for name in NAMES for r in load(name)}
    missing = sorted(union - seen)
    assert not missing, (
        f"no golden log holds {', '.join(missing)}: record one with "
        "`.venv/bin/python tests/golden/make_golden.py NAME` (a new scenario "
        "that records them; see that script's docstring)"
    )


def test_no_recorded_default_changes() -> None:
    """A field at its default is not stored, so an old event reads whatever
    default the code has now: every default pinned in defaults.json stays
    as it is, and each new field's is pinned."""
    pinned = json.loads((GOLDEN / "defaults.json").read_text())
    now = events.field_defaults(KINDS.union.types)
    changed = [
        f"{k}: {pinned[k]} -> {now[k]}" for k in now if pinned.get(k, now[k]) != now[k]
    ]
    assert not changed, (
        "a recorded default changed, which changes every event stored with "
        f"the old one ({'; '.join(changed)}): keep it, and add a new field"
    )
    retired = {k for k in pinned if k.partition(".")[0] in run_events.RETIRED}
    gone = sorted(pinned.keys() - now.keys() - retired)
    assert not gone, (
        f"{', '.join(gone)} lost a default or is gone: an old event without "
        "it no longer decodes; keep the field and its default"
    )
    new = sorted(now.keys() - pinned.keys())
    assert not new, (
        f"{', '.join(new)} not pinned yet: run "
        "`.venv/bin/python tests/golden/make_golden.py --pin-defaults`"
    )


def test_a_field_at_its_default_is_not_stored() -> None:
    """Settings left as they are add nothing to a stored event; the Structs
    a prompt hash encodes keep every field (their bytes were hashed)."""
    bare = run_events.RunCreated(
        run_id="r1", input_text="go", settings=run_events.RunSettings()
    )
    assert msgspec.msgpack.decode(events.encode(bare)) == {
        "type": "RunCreated",
        "run_id": "r1",
        "input_text": "go",
        "settings": {},
    }
    assert events.decode(events.encode(bare), union=KINDS.union) == bare
    changed = run_events.RunCreated(
        run_id="r1", input_text="go", settings=run_events.RunSettings(max_iterations=7)
    )
    stored = msgspec.msgpack.decode(events.encode(changed))
    assert stored["settings"] == {"max_iterations": 7}
    assert events.decode(events.encode(changed), union=KINDS.union) == changed
    message = events.ChatMessage(role="user", content="hi")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(message)) == {
        "role": "user",
        "content": "hi",
        "tool_calls": [],
        "tool_call_id": None,
    }


async def test_golden_sqlite_log_opens_and_replays(tmp_path: Path) -> None:
    """A log file written by an earlier SqliteEventLog opens and reads back the
    same events as its export; its runs replay."""
    path = tmp_path / "subagents.db"
    shutil.copyfile(GOLDEN / "subagents.db", path)
    log = await SqliteEventLog.open(path, union=KINDS.union)
    try:
        records = await log.read_all()
        streams = {s: await log.read(s) for s in await log.streams("run.")}
    finally:
        await log.close()
    assert tuple(records) == load("subagents")
    assert streams == by_stream(records)
    check_replays("subagents", records)


def test_an_exported_old_event_shape_is_upcast(monkeypatch) -> None:
    """An exported (or golden) line of a retired event type is read through
    its upcaster, as the log's own reads are, so a golden log can be kept."""
    monkeypatch.setitem(
        events.UPCASTERS,
        "NoteTaken",
        lambda old: {"type": "NoteRecorded", "category": "old", "content": old["text"]},
    )
    line = (
        '{"id": "run.r1/2", "stream": "run.r1", "version": 2, "position": 7, '
        '"at": 1.5, "correlation_id": "r1", "causation_id": null, '
        '"event": {"type": "NoteTaken", "text": "legacy"}}'
    )
    rec = events.recorded_from_json(line, union=KINDS.union)
    assert rec.event == run_events.NoteRecorded(category="old", content="legacy")
    assert (rec.stream, rec.version, rec.position, rec.at) == ("run.r1", 2, 7, 1.5)
    with pytest.raises(msgspec.ValidationError):
        events.recorded_from_json(
            line.replace("NoteTaken", "NoteLost"), union=KINDS.union
        )


def test_a_run_result_of_old_logs_reads_as_a_child_finished() -> None:
    """A run's result was delivered as ``SubagentFinished`` with a ``result``
    naming the child by its run id; it reads as the `ChildFinished` naming
    the child by its stream, its fields at their retired defaults when the
    old event left them out (``SubagentFinished.at``,
    ``SubagentResult.metadata`` and ``.outcome`` in defaults.json)."""
    pinned = json.loads((GOLDEN / "defaults.json").read_text())
    bare = {
        "type": "SubagentFinished",
        "result": {"run_id": "r1/sub/1", "status": "failed", "output": "boom"},
    }
    read = events.decode(msgspec.msgpack.encode(bare), union=KINDS.union)
    assert read == events.ChildFinished(
        stream="run.r1/sub/1", status="failed", output="boom"
    )
    assert repr(read.at) == pinned["SubagentFinished.at"]
    assert repr(read.metadata) == pinned["SubagentResult.metadata"]
    assert repr(read.outcome) == pinned["SubagentResult.outcome"]
    full = {
        **bare,
        "at": 7.5,
        "result": {
            **bare["result"],
            "metadata": {"routingDecision": "approved"},
            "outcome": "Reasoning outcome: delivery: DONE",
        },
    }
    line = msgspec.json.encode(
        {
            "stream": "run.r1",
            "version": 3,
            "position": 9,
            "at": 7.5,
            "correlation_id": None,
            "causation_id": None,
            "event": full,
        }
    )
    assert events.recorded_from_json(
        line, union=KINDS.union
    ).event == events.ChildFinished(
        stream="run.r1/sub/1",
        status="failed",
        output="boom",
        metadata={"routingDecision": "approved"},
        outcome="Reasoning outcome: delivery: DONE",
        at=7.5,
    )
