"""Workflow runs through the real host and log, and from the command line.

Random phase graphs and phase outcomes play through a `Host` on a real
SQLite log: every stream (the workflow's and each phase's run) folds to the
state the host holds live and verifies. The example workflow runs end to end
with its scripted reviewer that first asks for changes and then approves;
`runs show` draws the loop, and replay verifies.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import hypothesis
import msgspec
from hypothesis import strategies as st
from support import children_started
from workflow_files import EXAMPLE, SCRIPT

from steward import cli, events, replay
from steward.actors.prompt import Prompt
from steward.actors.run.events import LATEST_REVISION, RunSettings
from steward.actors.run.state import run_stream
from steward.actors.workflow import decider as wf
from steward.actors.workflow import events as workflow_events
from steward.actors.workflow.decider import workflow_stream
from steward.actors.workflow.events import EdgeDef, NodeDef, WorkflowDef
from steward.actors.workflow.projection import WORKFLOWS
from steward.bus import SqliteEventLog
from steward.effects.llm import Reply, ReplyError, RequestInfo, ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS, kind_of
from steward.projections.store import Projector

ROOT = Path(__file__).parent.parent.parent
TERMINAL = {"completed", "failed", "cancelled"}
MAX_PHASES = 12
KEYS = ("a", "b", "c")
GUARDS = (
    'decision == "approved"',
    'decision == "changes_requested"',
    "report.score >= 0.5",
)


@st.composite
def graphs(draw: st.DrawFn) -> WorkflowDef:
    keys = KEYS[: draw(st.integers(1, len(KEYS)))]
    settings = RunSettings(planning_gate=False, revision=LATEST_REVISION)
    nodes = tuple(
        NodeDef(
            key=k,
            provider="default",
            max_retries=draw(st.integers(0, 1)),
            settings=settings,
        )
        for k in keys
    )
    edges = []
    for source in keys:
        targets = draw(st.lists(st.sampled_from(keys), max_size=2))
        for priority, target in enumerate(targets, start=1):
            when = draw(st.one_of(st.none(), st.sampled_from(GUARDS)))
            edges.append(
                EdgeDef(
                    source=source,
                    target=target,
                    priority=priority,
                    auto=when is None,
                    when=when,
                )
            )
    return WorkflowDef(key="random", version=1, nodes=nodes, edges=tuple(edges))


outcomes = st.one_of(
    st.fixed_dictionaries(
        {
            "routingDecision": st.sampled_from(
                ["approved", "changes_requested", "retry", "nonsense"]
            ),
            "score": st.floats(0, 1),
        }
    ),
    st.just("fail"),
)


def _player(plays: list[Any]) -> Any:
    """The model: each call takes the next outcome (a finish with that
    metadata, or a failure); past the list, it approves."""
    left = list(plays)

    def reply(prompt: Prompt, info: RequestInfo) -> Reply:
        play = left.pop(0) if left else {"routingDecision": "approved"}
        if play == "fail":  # the run fails
            return Reply(error=ReplyError(kind="invalid_request", message="no"))
        finish = {"type": "finish", "output": f"report of {info.actor_id}"}
        return Reply(text=json.dumps({**finish, "metadata": play}))

    return reply


async def _play(db: Path, defn: WorkflowDef, plays: list[Any]) -> None:
    log = await SqliteEventLog.open(db, union=KINDS.union)
    host = Host(
        log,
        provider=ScriptedProvider(_player(plays)),
        tools=ToolRegistry.with_builtins(),
        workspace=db.parent,
        kinds=KINDS,
    )
    await host.start()
    stream = workflow_stream("wf")
    try:
        created = workflow_events.WorkflowCreated(workflow_id="wf", definition=defn)
        assert await host.submit(stream, created) is not None
        deadline = asyncio.get_running_loop().time() + 20
        cancelled = False
        while True:
            state = (await host.state(stream))[0]
            runs = await log.streams("run.")
            live = [(await host.state(r))[0] for r in runs]
            if state.status in TERMINAL and all(r.status in TERMINAL for r in live):
                break
            if state.runs > MAX_PHASES and not cancelled:  # a loop with no end
                cancel = workflow_events.WorkflowCancelRequested(reason="long enough")
                cancelled = await host.submit(stream, cancel) is not None
            assert asyncio.get_running_loop().time() < deadline, state
            await asyncio.sleep(0.01)
        assert await host.settle()  # a straggling effect tries (and is refused)
        for name in [stream, *await log.streams("run.")]:
            records = await log.read(name)
            assert [r.version for r in records] == list(range(1, len(records) + 1))
            live_state = (await host.state(name))[0]
            assert kind_of(name).fold(r.event for r in records) == live_state, name
            assert replay.verify(records, kinds=KINDS) is None, name
    finally:
        await host.stop()
        await log.close()


@hypothesis.settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
@hypothesis.given(defn=graphs(), plays=st.lists(outcomes, max_size=10))
def test_random_workflows_fold_to_the_live_state_and_verify(
    defn: WorkflowDef, plays: list[Any]
) -> None:
    """Any graph and phase outcomes: each stream folds to the host's live
    state, and `steward replay --verify` passes for the workflow."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "log.db"
        asyncio.run(_play(db, defn, plays))
        assert cli.main(["--db", str(db), "replay", "workflow.wf", "--verify"]) == 0


def test_the_example_workflow_loops_once_and_completes(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """design -> implement -> review asks for changes -> implement again ->
    review approves: the run completes, its id on the last line; `runs show`
    draws the path with the loop; the workflow and its runs verify; the
    read models (the phases' model streams recorded too) rebuild identically."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEWARD_MODELS_DEFAULT_RECORD_STREAM", "true")
    base = ["--db", "log.db", "--script", str(SCRIPT)]
    code = cli.main(
        [*base, "workflow", "run", str(EXAMPLE), "--input", "feature=a /health route"]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    workflow_id = out[-1]
    assert out[-2] == f"workflow {workflow_id} completed"
    assert '  review -> implement (when decision == "changes_requested")' in out
    assert (
        "  phase implement started (attempt 2, given design, review): "
        + (f"{workflow_id}:implement:4")
        in out
    )

    assert cli.main(["--db", "log.db", "runs", "show", workflow_id]) == 0
    shown = capsys.readouterr().out
    assert "path: design > implement > review > implement > review" in shown
    rows = [line.split() for line in shown.splitlines()]
    assert ["review", "#1", "completed", "changes_requested"] in [r[:4] for r in rows]
    assert ["review", "#2", "completed", "approved"] in [r[:4] for r in rows]

    assert (
        cli.main(["--db", "log.db", "replay", f"workflow.{workflow_id}", "--verify"])
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"
    for n, phase in enumerate(["design", "implement", "review", "implement", "review"]):
        run = f"{workflow_id}:{phase}:{n + 1}"
        assert cli.main(["--db", "log.db", "replay", run, "--verify"]) == 0
    capsys.readouterr()

    before = _tables(tmp_path / "log.db")
    # design and implement, routed by auto edges, gave no decision: no row
    assert [r[4] for r in sorted(before["routing_decisions"], key=lambda r: r[6])] == [
        "changes_requested",
        "approved",
    ]
    streamed: dict[tuple[str, int], list[int]] = {}
    for row in before["run_node_stream_events"]:
        streamed.setdefault((row[1], row[2]), []).append(row[3])
    assert sorted(streamed) == [
        ("design", 1),
        ("implement", 1),
        ("implement", 2),
        ("review", 1),
        ("review", 2),
    ]
    for sequences in streamed.values():  # gap-free per node attempt
        assert sorted(sequences) == list(range(1, len(sequences) + 1))
    assert cli.main(["--db", "log.db", "projections", "rebuild"]) == 0
    assert _tables(tmp_path / "log.db") == before


TABLES = WORKFLOWS.tables


def _tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3").fetchall()
            for t in TABLES
        }
    finally:
        conn.close()


async def _projected(
    records: list[events.Recorded], path: Path
) -> dict[str, list[tuple[object, ...]]]:
    """The workflow tables a projection file at ``path`` holds once
    ``records`` are applied to it."""
    projector = await Projector.open(path, kinds=KINDS)
    try:
        await projector.apply(records)
        await projector.flush()
    finally:
        await projector.close()
    return _tables(path)


async def test_the_golden_workflows_project_as_alphreds_tables(tmp_path: Path) -> None:
    """The golden workflow log's runs as the projection's tables: one node
    row per attempt (unique), a routing decision and an artifact per
    completed phase, one diagnostics row per attempt that ended for good."""
    lines = (ROOT / "tests" / "golden" / "workflow.jsonl").read_bytes().splitlines()
    records = [events.recorded_from_json(line, union=KINDS.union) for line in lines]
    tables = await _projected(records, tmp_path / "views.db")
    runs = {r[0]: (r[7], r[9]) for r in tables["workflow_runs"]}
    assert runs == {
        "wf-loop": ("completed", 6),
        "wf-fail": ("failed", 1),
        "wf-cancel": ("cancelled", 1),
    }
    loop_nodes = [
        (r[2], r[3], r[4], r[5]) for r in tables["run_nodes"] if r[0] == "wf-loop"
    ]
    assert sorted(loop_nodes) == [  # (node, attempt, status, tries)
        ("design", 1, "completed", 1),
        ("hotfix", 1, "skipped", 0),
        ("implement", 1, "completed", 2),  # a failed try, then its retry
        ("implement", 2, "completed", 1),
        ("review", 1, "completed", 1),
        ("review", 2, "completed", 1),
    ]
    decisions = [
        (r[1], r[2], r[4]) for r in tables["routing_decisions"] if r[0] == "wf-loop"
    ]
    assert sorted(decisions) == [  # design and implement: auto edges, no decision
        ("review", 1, "changes_requested"),
        ("review", 2, "approved"),
    ]
    cancelled = [(r[2], r[3], r[4]) for r in tables["run_nodes"] if r[0] == "wf-cancel"]
    assert cancelled == [("design", 1, "cancelled")]  # its run answered failed
    assert len([r for r in tables["phase_artifacts"] if r[0] == "wf-loop"]) == 5
    diagnostics = {
        (r[0], r[1], r[2]): (r[3], r[4]) for r in tables["run_node_diagnostics"]
    }
    assert diagnostics[("wf-loop", "implement", 1)] == ("completed", 2)
    assert diagnostics[("wf-fail", "design", 1)] == ("failed", 1)
    assert diagnostics[("wf-cancel", "design", 1)] == ("failed", 1)
    assert len(diagnostics) == 7  # five attempts of wf-loop, one each of the others


def _decided(workflow_id: str, inputs: list[events.Event]) -> list[events.Recorded]:
    """The records of workflow run ``workflow_id`` given ``inputs`` (a
    `ChildFinished` for the phase in flight, its stream filled in),
    decided by the workflow decider as a host would."""
    state, log = wf.initial, list[events.Event]()
    for item in inputs:
        input = item
        if isinstance(item, events.ChildFinished):
            assert state.current is not None
            run_id = wf.phase_of(state, state.current).run_id
            assert run_id is not None
            input = msgspec.structs.replace(
                item, stream=run_stream(run_id), at=float(len(log))
            )
        assert isinstance(input, events.Event)
        decided = wf.decide(input, state)
        assert decided is not None, input
        log += [input, *decided]
        state = kind_of(f"workflow.{workflow_id}").fold([input, *decided], state)
    return [
        events.Recorded(
            stream=f"workflow.{workflow_id}",
            version=n,
            position=n,
            at=float(n),
            event=e,
        )
        for n, e in enumerate(log, start=1)
    ]


async def test_routing_decisions_hold_the_outcomes_routing_read(
    tmp_path: Path,
) -> None:
    """A phase with no decision routed by an auto edge has no row; one with
    no decision whose edges none matched has a ``no_route`` row (the run
    completed without a route); one with a decision has its decision's row,
    whatever edge it took; a last node with no edges and no decision, none."""
    nodes = tuple(NodeDef(key=k, provider="default") for k in ("a", "b", "c"))
    approved = 'decision == "approved"'
    guarded = WorkflowDef(
        key="g",
        version=1,
        nodes=nodes,
        edges=(
            EdgeDef(source="a", target="b", priority=1, auto=True),
            EdgeDef(source="b", target="c", priority=1, when=approved),
        ),
    )
    chain = WorkflowDef(
        key="c",
        version=1,
        nodes=nodes[:2],
        edges=(EdgeDef(source="a", target="b", priority=1, auto=True),),
    )
    nothing = events.ChildFinished(
        stream=run_stream(""), status="completed", output="r"
    )
    says = msgspec.structs.replace(nothing, metadata={"routingDecision": "approved"})
    revision = workflow_events.WORKFLOW_REVISION
    records = [
        *_decided(
            "g",
            [
                workflow_events.WorkflowCreated(
                    workflow_id="g", definition=guarded, revision=revision
                ),
                nothing,
                nothing,
            ],
        ),
        *_decided(
            "c",
            [
                workflow_events.WorkflowCreated(
                    workflow_id="c", definition=chain, revision=revision
                ),
                says,
                nothing,
            ],
        ),
    ]
    assert isinstance(records[-1].event, workflow_events.WorkflowCompleted)
    rows = (await _projected(records, tmp_path / "views.db"))["routing_decisions"]
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows] == [
        ("c", "a", 1, "approved", "routingDecision"),
        ("g", "b", 1, "no_route", None),
    ]


def test_a_phase_in_flight_when_its_workflow_is_cancelled_shows_cancelled(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """Cancelled with its phase in flight and no host to deliver the cancel:
    `runs show` and the run_nodes view say the phase is cancelled, not
    running, also after `projections rebuild`; and still once its run
    answers failed, as a cancelled run does."""
    monkeypatch.chdir(tmp_path)
    node = NodeDef(key="design", provider="default")
    defn = WorkflowDef(key="k", version=1, nodes=(node,))

    async def record(*inputs: events.Event) -> None:
        async with await SqliteEventLog.open(
            tmp_path / "log.db", union=KINDS.union
        ) as log:
            host = Host(log, kinds=KINDS)  # records, starts nothing (no host routes it)
            for input in inputs:
                assert await host.submit(workflow_stream("w"), input) is not None

    def phase_status() -> tuple[list[str], list[tuple[object, ...]]]:
        assert cli.main(["--db", "log.db", "runs", "show", "w"]) == 0
        shown = [line.split() for line in capsys.readouterr().out.splitlines()]
        row = next(r for r in shown if r[:2] == ["design", "#1"])
        assert cli.main(["--db", "log.db", "workflow", "list"]) == 0  # catches up
        capsys.readouterr()
        return row[:3], _tables(tmp_path / "log.db")["run_nodes"]

    opening = workflow_events.WorkflowCreated(
        workflow_id="w", definition=defn, revision=workflow_events.WORKFLOW_REVISION
    )
    asyncio.run(record(opening, workflow_events.WorkflowCancelRequested(reason="no")))
    row, nodes = phase_status()
    assert row == ["design", "#1", "cancelled"]
    assert [(r[2], r[4]) for r in nodes] == [("design", "cancelled")]
    assert cli.main(["--db", "log.db", "projections", "rebuild"]) == 0
    assert phase_status() == (row, nodes)

    answer = events.ChildFinished(
        stream=run_stream("w:design:1"),
        status="cancelled",
        output="its workflow w was cancelled",
    )
    asyncio.run(record(answer))
    assert phase_status() == (row, nodes)


def test_a_node_talks_to_its_providers_table(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """A node whose provider is [models.other] asks that table's model, even
    when its model id says nothing (two scripted tables, two scripts)."""
    monkeypatch.chdir(tmp_path)
    finish = {"type": "finish", "output": "from {}"}
    for name in ("default", "other"):
        reply = json.dumps({**finish, "output": f"from {name}"})
        (tmp_path / f"{name}.json").write_text(json.dumps({"replies": [reply]}))
    (tmp_path / "steward.toml").write_text(
        "[run]\nplanning_gate = false\n\n"
        '[models.default]\nprovider = "scripted"\nscript = "default.json"\n\n'
        '[models.other]\nprovider = "scripted"\nscript = "other.json"\n'
    )
    (tmp_path / "wf.toml").write_text(
        '[workflow]\nkey = "two"\nversion = 1\n\n'
        '[[nodes]]\nkey = "a"\nprovider = "other"\n\n'
        '[[nodes]]\nkey = "b"\nprovider = "default"\n\n'
        '[[edges]]\nsource = "a"\ntarget = "b"\npriority = 1\nauto = true\n'
    )
    assert cli.main(["--db", "log.db", "workflow", "run", "wf.toml", "--id", "w"]) == 0
    capsys.readouterr()
    assert cli.main(["--db", "log.db", "runs", "show", "w"]) == 0
    lines = capsys.readouterr().out
    assert "completed" in lines

    async def reports() -> list[str]:
        async with await SqliteEventLog.open(
            tmp_path / "log.db", union=KINDS.union
        ) as log:
            return [
                r.event.report
                for r in await log.read("workflow.w")
                if isinstance(r.event, workflow_events.PhaseCompleted)
            ]

    assert asyncio.run(reports()) == ["from other", "from default"]


def test_a_native_phase_routes_on_its_finish_tools_metadata(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """A phase whose profile calls tools natively finishes with the finish
    tool (revision 3); the workflow routes on its metadata, as on a json
    finish's, and records the decision."""
    monkeypatch.chdir(tmp_path)
    finish = {
        "id": "c1",
        "name": "finish",
        "args": {"output": "Looks right.", "metadata": {"routingDecision": "approved"}},
    }
    done = json.dumps({"type": "finish", "output": "Shipped."})
    script = {"replies": [{"text": "", "tool_calls": [finish]}, done]}
    (tmp_path / "s.json").write_text(json.dumps(script))
    (tmp_path / "steward.toml").write_text(
        "[run]\nplanning_gate = false\n\n"
        '[agents.reviewer]\nprotocol = "native"\n\n'
        '[models.default]\nprovider = "scripted"\nscript = "s.json"\n'
    )
    (tmp_path / "wf.toml").write_text(
        '[workflow]\nkey = "review"\nversion = 1\n\n'
        '[[nodes]]\nkey = "review"\nprovider = "default"\nprofile = "reviewer"\n\n'
        '[[nodes]]\nkey = "ship"\nprovider = "default"\n\n'
        '[[nodes]]\nkey = "rework"\nprovider = "default"\n\n'
        '[[edges]]\nsource = "review"\ntarget = "ship"\npriority = 1\n'
        "when = 'decision == \"approved\"'\n\n"
        '[[edges]]\nsource = "review"\ntarget = "rework"\npriority = 2\n'
        "auto = true\n"
    )
    assert cli.main(["--db", "log.db", "workflow", "run", "wf.toml", "--id", "w"]) == 0
    capsys.readouterr()

    async def recorded() -> list[events.Event]:
        async with await SqliteEventLog.open(
            tmp_path / "log.db", union=KINDS.union
        ) as log:
            return [r.event for r in await log.read("workflow.w")]

    log = asyncio.run(recorded())
    started = [e.node for e in log if isinstance(e, workflow_events.PhaseStarted)]
    assert started == ["review", "ship"]
    [review] = [e for e in log if isinstance(e, workflow_events.PhaseCompleted)][:1]
    assert (review.report, review.decision) == ("Looks right.", "approved")
    assert isinstance(log[-1], workflow_events.WorkflowCompleted)


def test_a_workflow_run_forks_under_its_own_ids(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """`steward fork workflow.ID --at V` copies the run to where review asked
    for changes: the copy's phases are its own runs (the next one starts
    under the fork's id) and it verifies."""
    monkeypatch.chdir(tmp_path)
    base = ["--db", "log.db", "--script", str(SCRIPT)]
    run = [*base, "workflow", "run", str(EXAMPLE), "--input", "feature=x", "--id", "w"]
    assert cli.main([*run, "--quiet"]) == 0
    capsys.readouterr()

    async def records(stream: str) -> list[events.Recorded]:
        async with await SqliteEventLog.open(
            tmp_path / "log.db", union=KINDS.union
        ) as log:
            return await log.read(stream)

    original = asyncio.run(records("workflow.w"))
    at = next(
        r.version
        for r in original
        if isinstance(r.event, workflow_events.PhaseStarted) and r.event.attempt == 2
    )
    assert cli.main(["--db", "log.db", "fork", "workflow.w", "--at", str(at)]) == 0
    forked = capsys.readouterr().out.splitlines()[0].split()[-1]
    copy = asyncio.run(records(forked))
    first, last = copy[0].event, copy[-1].event
    new_id = forked.removeprefix("workflow.")
    assert (
        isinstance(first, workflow_events.WorkflowCreated)
        and first.workflow_id == new_id
    )
    assert isinstance(last, workflow_events.PhaseStarted)
    assert (last.node, last.run_id) == ("implement", f"{new_id}:implement:4")
    assert replay.verify(copy, kinds=KINDS) is None
    # only the phase in flight starts, by a running host or a later one; the
    # copied phases that ended are not run again
    spawn = f"spawn:{new_id}:implement:4"
    assert children_started(copy) == ([f"run.{new_id}:implement:4"], [spawn])


async def test_an_attempt_failed_while_paused_then_cancelled_has_diagnostics(
    tmp_path: Path,
) -> None:
    """A phase fails while its run is paused (its retry never taken), then
    the run is cancelled: that attempt ended, and its diagnostics say so."""
    node = NodeDef(key="a", provider="default", max_retries=1)
    defn = WorkflowDef(key="k", version=1, nodes=(node,))
    state, log = wf.initial, []
    failed = events.ChildFinished(
        stream=run_stream("w-a-1"), status="failed", output="boom"
    )
    for input in (
        workflow_events.WorkflowCreated(workflow_id="w", definition=defn),
        workflow_events.WorkflowPauseRequested(),
        msgspec.structs.replace(failed, at=2.0),
        workflow_events.WorkflowCancelRequested(),
    ):
        decided = wf.decide(input, state)
        assert decided is not None, input
        log += [input, *decided]
        state = kind_of("workflow.w").fold([input, *decided], state)
    records = [
        events.Recorded(
            stream="workflow.w", version=n, position=n, at=float(n), event=e
        )
        for n, e in enumerate(log, start=1)
    ]
    rows = (await _projected(records, tmp_path / "views.db"))["run_node_diagnostics"]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [("a", 1, "failed", 1)]


def test_workflow_list_shows_each_run_with_its_status(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """`workflow list` prints a header, then each run: id, status, workflow
    and version, phases started; --status keeps those in one status."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--db", "log.db", "workflow", "list"]) == 2  # no log yet
    capsys.readouterr()
    base = ["--db", "log.db", "--script", str(SCRIPT)]
    run = [*base, "workflow", "run", str(EXAMPLE), "--input", "feature=x"]
    assert cli.main([*run, "--id", "w1", "--quiet"]) == 0
    capsys.readouterr()
    assert cli.main(["--db", "log.db", "workflow", "list"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["id", "status", "workflow", "phases"]
    assert row.split()[:5] == ["w1", "completed", "design-implement-review", "v1", "5"]
    assert cli.main(["--db", "log.db", "workflow", "list", "--status", "failed"]) == 0
    assert capsys.readouterr().out == "no failed ones\n"
