"""The console's pure layouts: a section's graph in columns with its loops
as arcs over the top (`steward.console.drawing`), and the timeline's child
actors each under the step that started it (`steward.console.reads`)."""

from __future__ import annotations

import re

import msgspec
from unit.test_kind_contract import sample

from steward.actors.sections import Edge, Graph, Node
from steward.actors.workflow import events as workflow_events
from steward.console import reads
from steward.console.drawing import HEIGHT, draw
from steward.kinds import KINDS


def test_a_graph_is_drawn_in_columns_with_its_loops_over_the_top() -> None:
    """Each node stands in the column of its distance from the first (one
    none reaches starts a column 0 of its own, under the first); an edge
    forward runs between columns, one back (or to itself) rises over the
    nodes; everything is inside the drawing."""
    graph = Graph(
        title="g",
        nodes=tuple(Node(key=k, label=k) for k in "abcd"),
        edges=(
            Edge("a", "b"),
            Edge("b", "c"),
            Edge("c", "b", taken=2),
            Edge("c", "c"),
        ),
    )
    drawn = draw(graph)
    at = {box.node.key: (box.x, box.y) for box in drawn.boxes}
    assert at["a"][0] < at["b"][0] < at["c"][0]
    assert at["d"][0] == at["a"][0] and at["d"][1] > at["a"][1]
    top = min(y for _, y in at.values())
    forward, back, itself = drawn.lines[1], drawn.lines[2], drawn.lines[3]
    assert back.label_y < top and itself.label_y < back.label_y
    assert back.label.endswith(" ×2") and forward.label == ""
    for line in drawn.lines:
        numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", line.path)]
        xs, ys = numbers[0::2], numbers[1::2]
        assert 0 <= min(xs) and max(xs) <= drawn.width, line
        assert 0 <= min(ys) and max(ys) <= drawn.height, line
    assert all(y + HEIGHT <= drawn.height for _, y in at.values())


def _life(stream: str, start: float, cause: str | None) -> reads.Life:
    row = reads.ActorRow(
        stream=stream,
        kind="run",
        id=stream.partition(".")[2],
        status="completed",
        created=start,
        updated=start + 1,
        text="",
        parent=None,
        output="done",
        tokens=0,
        cost=0.0,
    )
    return reads.Life(row, start, start + 1, 3, cause)


def test_a_child_goes_under_the_step_that_started_it() -> None:
    """A child whose first record names a record of the parent as its cause
    is a bar under that record's step, whenever it began; one that names
    none is under the last step begun before it."""
    records = [
        msgspec.structs.replace(rec, at=1000.0 + rec.version)
        for rec in sample("workflow", "workflow.wf-loop").records
    ]
    started = [r for r in records if isinstance(r.event, workflow_events.PhaseStarted)]
    second = started[1]
    caused = _life("run.caused", start=2000.0, cause=second.id)
    orphan = _life("run.orphan", start=records[20].at + 0.5, cause=None)
    bars = reads.timeline(records, KINDS, [caused, orphan])
    steps = [n for n, bar in enumerate(bars) if bar.step]

    def step_above(child: str) -> reads.Bar:
        at = next(n for n, bar in enumerate(bars) if bar.child == child)
        return bars[max(n for n in steps if n < at)]

    above = step_above("run.caused")
    assert above.first <= second.version <= above.last
    above = step_above("run.orphan")
    head = max(r.version for r in records[:21] if KINDS.of(r.stream).is_input(r.event))
    assert above.first == head
    orphan_bar = next(bar for bar in bars if bar.child == "run.orphan")
    assert (orphan_bar.start, orphan_bar.end) == (
        orphan.start - records[0].at,
        orphan.end - records[0].at,
    )
