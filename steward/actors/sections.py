"""What a kind shows of an actor beyond its summary and history: sections of
plain display data (pure), which the console renders the same for every
kind (`steward.actors.kind.Surface.sections`).

A section is one of three shapes:

- a `Table`: a title, its columns and rows of cells;
- a `Tree`: nested `Branch` values (a task's evaluation);
- a `Graph`: nodes and edges, the path taken through them marked (a
  workflow's phases and transitions).

Every text is plain text: the console escapes it. A cell, branch or node may
link to another actor by its stream (``KIND.ID``), and carry a status word
the console styles as it styles an actor's status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["Branch", "Cell", "Edge", "Graph", "Node", "Section", "Table", "Tree"]


@dataclass(frozen=True)
class Cell:
    """One value of a table's row or a graph's path: its text, the stream of
    an actor it links to, and a status word."""

    text: str
    link: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class Table:
    """A titled table; each row has a cell per column."""

    shape: ClassVar[str] = "table"
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    empty: str = "none"
    """What is said when there are no rows."""
    note: str = ""
    """A line under the title (what the table counts, what is current)."""


@dataclass(frozen=True)
class Branch:
    """One node of a `Tree`: its label, a line of detail, a status, a link,
    and the branches under it."""

    label: str
    detail: str = ""
    status: str | None = None
    link: str | None = None
    children: tuple[Branch, ...] = ()


@dataclass(frozen=True)
class Tree:
    """A titled tree of branches, in order."""

    shape: ClassVar[str] = "tree"
    title: str
    roots: tuple[Branch, ...]
    empty: str = "none"
    note: str = ""


@dataclass(frozen=True)
class Node:
    """A node of a `Graph`, by ``key``: its label, status, a line of detail,
    the actor it links to, and whether the path taken went through it."""

    key: str
    label: str
    status: str | None = None
    detail: str = ""
    link: str | None = None
    visited: bool = False


@dataclass(frozen=True)
class Edge:
    """An edge of a `Graph` from node ``source`` to node ``target``, its
    label, and how many times the path taken went along it."""

    source: str
    target: str
    label: str = ""
    taken: int = 0


@dataclass(frozen=True)
class Graph:
    """A titled graph: its nodes (the first is where it starts), its edges,
    and the path taken through it, a cell per node visited, in order."""

    shape: ClassVar[str] = "graph"
    title: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    path: tuple[Cell, ...] = ()
    note: str = ""


Section = Table | Tree | Graph
"""One section of an actor's page."""
