"""What each kind shows of its actors on their console pages, over HTTP: a
workflow's phase graph with the path taken and its routing decisions, a
session's segments, memory and schedules, a task's evaluation tree; and the
timeline's child actors as bars under the steps that started them. Text
from the log is escaped in every one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from console_actors import MARKUP, Actors, make_actors
from console_site import Served, steward

pytestmark = pytest.mark.slow

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Actors]:
    tmp = tmp_path_factory.mktemp("sections")
    return tmp, make_actors(tmp)


@pytest.fixture(scope="module")
def web(site: tuple[Path, Actors]) -> Iterator[httpx.Client]:
    tmp, _ = site
    with (
        Served(tmp, "--db", str(tmp / "log.db")) as console,
        httpx.Client(base_url=console.url, timeout=20) as client,
    ):
        yield client


def _page(web: httpx.Client, stream: str, **query: str) -> str:
    answer = web.get("/actor", params={"stream": stream, **query})
    assert answer.status_code == 200, answer.text
    assert MARKUP not in answer.text, "text from the log is not escaped"
    return answer.text


def _section(page: str, title: str) -> str:
    """The HTML of the section titled ``title``."""
    found = re.search(
        rf'<div class="kind-section \w+" id="section-\d+" data-title="{title}">'
        r"(.*?)\n</div>",
        page,
        re.DOTALL,
    )
    assert found is not None, f"no section {title!r} in the page"
    return found[1]


def _rows(html: str) -> list[list[str]]:
    """The text of each cell of each body row of the first table in ``html``."""
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [
        [
            re.sub(r"<[^>]+>", "", cell)
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    ]


def _started(tmp: Path, stream: str, kind: str) -> dict[str, int]:
    """The version of each event of type ``kind`` in ``stream``, by the run
    or task it starts (its ``run_id`` or ``task_id``)."""
    found = {}
    for line in steward(tmp, "events", "export", stream).splitlines():
        rec = json.loads(line)
        if rec["event"]["type"] == kind:
            event = rec["event"]
            found[event.get("run_id") or event["task_id"]] = rec["version"]
    return found


def test_a_workflow_page_draws_its_phase_graph_and_the_path_taken(
    web: httpx.Client, site: tuple[Path, Actors]
) -> None:
    """Every phase is a node, every transition an edge; those the run went
    through are marked with how often, and the path lists each phase run in
    order, linked to its page; the definition's markup is text."""
    _, actors = site
    graph = _section(_page(web, actors.workflow), "Phase graph")
    nodes = re.findall(
        r'<g class="graph-node( visited)? status-(\w+)" data-key="(\w+)"', graph
    )
    assert nodes == [
        (" visited", "completed", "design"),
        (" visited", "completed", "implement"),
        (" visited", "completed", "review"),
        ("", "skipped", "ship"),
    ]
    edges = re.findall(
        r'data-source="(\w+)" data-target="(\w+)" data-taken="(\d+)"', graph
    )
    assert edges == [
        ("design", "implement", "1"),
        ("implement", "review", "2"),
        ("review", "implement", "1"),
        ("review", "ship", "0"),
    ]
    workflow_id = actors.workflow.partition(".")[2]
    path = re.findall(
        r'class="path-step status-(\w+)" href="([^"]+)"[^>]*>([^<]+)<', graph
    )
    assert [(status, text) for status, _, text in path] == [
        ("completed", "design #1"),
        ("completed", "implement #1"),
        ("completed", "review #1"),
        ("completed", "implement #2"),
        ("completed", "review #2"),
    ]
    assert path[3][1] == f"/actor?stream=run.{workflow_id}%3Aimplement%3A4"
    assert f"Build {ESCAPED} (v1)" in graph
    assert f"decision == &#34;{ESCAPED}&#34; (not taken)" in graph


def test_a_workflow_page_lists_each_routing_decision(
    web: httpx.Client, site: tuple[Path, Actors]
) -> None:
    """Each phase that finished says where the run went from it, on what
    verdict, why and when, with its phase run linked."""
    _, actors = site
    rows = _rows(_section(_page(web, actors.workflow), "Routing decisions"))
    workflow_id = actors.workflow.partition(".")[2]
    assert [row[:4] for row in rows] == [
        ["design", "implement", "no_route", "auto (edge priority 1)"],
        ["implement", "review", "no_route", "auto (edge priority 1)"],
        [
            "review",
            "implement",
            "changes_requested (routingDecision)",
            "guard decision == &#34;changes_requested&#34; held (edge priority 1)",
        ],
        ["implement", "review", "no_route", "auto (edge priority 1)"],
        [
            "review",
            "(end)",
            "approved (routingDecision)",
            "no transition matched: the run completed",
        ],
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", row[4]) for row in rows)
    assert [row[5] for row in rows] == [
        f"{workflow_id}:{node}:{n}"
        for n, node in enumerate(
            ["design", "implement", "review", "implement", "review"], start=1
        )
    ]


def test_a_session_page_shows_its_segments_memory_and_schedules(
    web: httpx.Client, site: tuple[Path, Actors]
) -> None:
    """The segments with what each holds (``/new`` began the second), core
    memory and the memory writer's item (their markup as text), and the
    schedule a turn made."""
    _, actors = site
    page = _page(web, actors.session)
    segments = _rows(_section(page, "Segments"))
    assert [[row[0], *row[2:]] for row in segments] == [
        ["s0", "4", "3", "1", "4"],
        ["s1", "1", "1", "0", "0"],
    ]
    assert all(row[1].endswith("Z") for row in segments)
    assert _rows(_section(page, "Core memory")) == [["city", f"Kiel {ESCAPED}"]]
    [item] = _rows(_section(page, "Memory items"))
    assert item[:4] == ["m1", "1", "identity.name", f"Ada {ESCAPED}"]
    assert item[-1] == "active"
    [schedule] = _rows(_section(page, "Schedules and timers"))
    assert schedule[:3] == ["daily", "0 9 * * *", "Any news?"]
    assert schedule[4].endswith("T09:00:00.000Z") and schedule[5] == "0"


Branches = list[tuple[str, "Branches"]]


class _Tree(HTMLParser):
    """The branches of the first ``ul.tree``: each one's label and the
    branches under it."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: Branches = []
        self.open: list[Branches] = []
        self.label: str | None = None
        self.done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.done:
            return
        if tag == "ul" and not self.open and ("class", "tree") in attrs:
            self.open.append(self.roots)
        elif tag == "ul" and self.open:
            self.open.append(self.open[-1][-1][1])  # the last branch's children
        elif tag == "span" and ("class", "branch") in attrs and self.open:
            self.label = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "ul" and self.open:
            self.open.pop()
            self.done = not self.open
        elif tag == "span" and self.label is not None:
            self.open[-1].append((self.label, []))
            self.label = None

    def handle_data(self, data: str) -> None:
        if self.label is not None:
            self.label += data


def test_a_task_page_shows_its_evaluation_tree(
    web: httpx.Client, site: tuple[Path, Actors]
) -> None:
    """The calls in evaluation order, each inside the form or loop iteration
    that made it, the subtask under the call that asked for it (linked); a
    result's markup is text."""
    _, actors = site
    tree = _section(_page(web, actors.task), "Evaluation tree")
    parsed = _Tree()
    parsed.feed(tree)
    subtask = ("subtask t1/sub/1: summarize", [])
    call = 'summarize {"text": "planned: <script>alert(1)</script>"}'
    assert parsed.roots == [
        ("bind p", [('call 1: plan {"goal": "the report"}', [subtask])]),
        ("loop iteration 1 of 2", [(f"call 2: {call}", [])]),
        ("loop iteration 2 of 2", [(f"call 3: {call}", [])]),
    ]
    assert 'href="/actor?stream=task.t1%2Fsub%2F1"' in tree
    assert f"planned: {ESCAPED} (2 turns" in tree
    assert tree.count('<span class="status status-completed">completed</span>') == 3


def _timeline(page: str) -> list[tuple[str, int, int, str | None]]:
    """The timeline's rows: each one's class, first and last version, and the
    actor it links to (a child's)."""
    rows = re.findall(
        r'<tr class="(step|call|child)[^"]*">\s*<td class="num">(\d+)(?:–(\d+))?</td>'
        r'\s*<td>(?:↳ )?(?:<a class="child-bar" href="/actor\?stream=([^"]+)">)?',
        page,
    )
    return [
        (what, int(first), int(last or first), child or None)
        for what, first, last, child in rows
    ]


@pytest.mark.parametrize(
    ("actor", "kind", "prefix"),
    [
        ("workflow", "PhaseStarted", "run."),
        ("session", "TurnStarted", "run."),
        ("task", "SubtaskSpawned", "task."),
    ],
)
def test_the_timeline_nests_each_child_under_the_step_that_started_it(
    web: httpx.Client, site: tuple[Path, Actors], actor: str, kind: str, prefix: str
) -> None:
    """A phase run, a session's turn, a subtask: each child is a bar linked
    to its page, right under the step that recorded its start."""
    tmp, actors = site
    stream = getattr(actors, actor)
    rows = _timeline(_page(web, stream, view="timeline"))
    started = _started(tmp, stream, kind)
    assert started, f"no {kind} in {stream}"
    children = {}
    step: tuple[int, int] | None = None
    for what, first, last, child in rows:
        if what == "step":
            step = (first, last)
        elif what == "child":
            assert step is not None and child is not None
            children[child.replace("%3A", ":").replace("%2F", "/")] = step
    assert sorted(children) == sorted(f"{prefix}{c}" for c in started)
    for child, version in started.items():
        first, last = children[f"{prefix}{child}"]
        assert first <= version <= last, (child, version, (first, last))


def test_the_sections_are_a_fragment_of_their_own_and_a_run_has_none(
    web: httpx.Client, site: tuple[Path, Actors]
) -> None:
    """A live page fetches its sections alone; a kind that shows none has
    no sections on its page."""
    _, actors = site
    fragment = web.get("/actor", params={"stream": actors.task, "fragment": "sections"})
    assert fragment.status_code == 200
    assert "Evaluation tree" in fragment.text and "<html" not in fragment.text
    phase = re.search(
        r'href="/actor\?stream=(run\.[^"]+)"', _page(web, actors.workflow)
    )
    assert phase is not None
    run = web.get(f"/actor?stream={phase[1]}")
    assert run.status_code == 200 and 'id="sections"' not in run.text
