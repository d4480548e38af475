"""Where a section's graph is drawn (pure): its nodes in columns by their
distance from the first node, edges forward as curves from column to
column, edges back (a loop) as arcs over the top; the page draws the result
as inline SVG.

The layout is simple on purpose: graphs of a few dozen nodes (a workflow's
phases), read at a glance, with nothing fetched and nothing computed in the
browser.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from steward.actors.sections import Edge, Graph, Node

__all__ = ["Box", "Drawing", "Line", "draw"]

WIDTH = 160
HEIGHT = 46
GAP_X = 150
"""Room between columns, for the labels of the edges forward."""
GAP_Y = 34
PAD = 12
ARC = 26
"""How far above the nodes the first arc back rises; each next one rises
`ARC_STEP` more, so that they do not overlap."""
ARC_STEP = 16
LABEL_CHARS = 24


@dataclass(frozen=True)
class Box:
    """A node where it is drawn (its top left corner)."""

    node: Node
    x: float
    y: float
    label: str
    """Its label, cut to fit."""


@dataclass(frozen=True)
class Line:
    """An edge as an SVG path, and where its label goes."""

    edge: Edge
    path: str
    label_x: float
    label_y: float
    label: str
    """Its label, cut to fit, with how many times it was taken."""


@dataclass(frozen=True)
class Drawing:
    """A graph laid out: its size, its boxes and its lines."""

    width: float
    height: float
    boxes: tuple[Box, ...]
    lines: tuple[Line, ...]
    box_width: float = WIDTH
    box_height: float = HEIGHT


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _columns(graph: Graph) -> dict[str, int]:
    """Each node's column: its distance from the first node along the edges
    (a node none reaches: from the first that reaches it, or its own)."""
    after: dict[str, list[str]] = {n.key: [] for n in graph.nodes}
    for edge in graph.edges:
        if edge.source in after and edge.target in after:
            after[edge.source].append(edge.target)
    column: dict[str, int] = {}
    for start in graph.nodes:
        if start.key in column:
            continue
        column[start.key] = 0
        todo = deque([start.key])
        while todo:
            key = todo.popleft()
            for target in after[key]:
                if target not in column:
                    column[target] = column[key] + 1
                    todo.append(target)
    return column


def draw(graph: Graph) -> Drawing:
    """Where ``graph``'s nodes and edges are drawn."""
    column = _columns(graph)
    back = {
        n
        for n, e in enumerate(graph.edges)
        if e.source in column
        and e.target in column
        and column[e.target] <= column[e.source]
    }
    top = PAD + (ARC + ARC_STEP * len(back) + 12 if back else 0)
    rows: dict[int, int] = {}
    boxes: dict[str, Box] = {}
    for node in graph.nodes:
        col = column[node.key]
        row = rows.get(col, 0)
        rows[col] = row + 1
        boxes[node.key] = Box(
            node=node,
            x=PAD + col * (WIDTH + GAP_X),
            y=top + row * (HEIGHT + GAP_Y),
            label=_cut(node.label, 20),
        )
    lines = []
    arcs = 0
    for n, edge in enumerate(graph.edges):
        source, target = boxes.get(edge.source), boxes.get(edge.target)
        if source is None or target is None:
            continue
        times = f" ×{edge.taken}" if edge.taken > 1 else ""
        label = _cut(edge.label, LABEL_CHARS) + times
        if n in back:
            arcs += 1
            x1, x2 = source.x + WIDTH / 2 + 8, target.x + WIDTH / 2 - 8
            y1, y2 = source.y, target.y
            peak = min(y1, y2) - ARC - ARC_STEP * arcs
            if edge.source == edge.target:
                x2 = x1 - 16
            # a cubic's middle is 3/4 of the way to its control points
            control = (peak - 0.25 * (y1 + y2) / 2) / 0.75
            path = (
                f"M{x1:.0f},{y1:.0f} C{x1:.0f},{control:.0f} "
                f"{x2:.0f},{control:.0f} {x2:.0f},{y2:.0f}"
            )
            lines.append(Line(edge, path, (x1 + x2) / 2, peak - 4, label))
        else:
            x1, y1 = source.x + WIDTH, source.y + HEIGHT / 2
            x2, y2 = target.x, target.y + HEIGHT / 2
            bend = (x2 - x1) / 2
            path = (
                f"M{x1:.0f},{y1:.0f} C{x1 + bend:.0f},{y1:.0f} "
                f"{x2 - bend:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
            )
            lines.append(Line(edge, path, (x1 + x2) / 2, (y1 + y2) / 2 - 6, label))
    columns = max(column.values(), default=0) + 1
    most = max(rows.values(), default=1)
    return Drawing(
        width=2 * PAD + columns * WIDTH + (columns - 1) * GAP_X,
        height=top + most * (HEIGHT + GAP_Y) - GAP_Y + PAD,
        boxes=tuple(boxes.values()),
        lines=tuple(lines),
    )
