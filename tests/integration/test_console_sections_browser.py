"""The kinds' sections of the console in a real browser (Debian's Chromium
driven by Playwright, as `test_console_browser.py` does): a workflow's phase
graph with the path taken, followed to a phase's run; a session's and a
task's sections, their markup shown as text. Screenshots of the three pages
go to the folder the browser tests print. Skipped, saying so, where no
Chromium is installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from console_actors import MARKUP, Actors, make_actors
from console_browser import WAIT, chromium, launch, tab
from console_site import Served
from playwright.sync_api import Browser, Page, expect, sync_playwright

pytestmark = pytest.mark.slow

chromium()  # (or the module is skipped)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Actors]:
    tmp = tmp_path_factory.mktemp("sections-browser")
    return tmp, make_actors(tmp)


@pytest.fixture(scope="module")
def served(site: tuple[Path, Actors]) -> Iterator[Served]:
    tmp, _ = site
    with Served(tmp, "--db", str(tmp / "log.db")) as console:
        yield console


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        yield launch(playwright)


@pytest.fixture
def page(browser: Browser, served: Served) -> Iterator[Page]:
    with tab(browser, served.url) as opened:
        yield opened


def test_a_workflow_page_shows_the_path_taken_and_leads_to_a_phase_run(
    page: Page, site: tuple[Path, Actors], shots: Path
) -> None:
    """The phase graph marks the three phases visited and the three edges
    taken (not the one to ``ship``); a click on a phase opens its latest
    run, which answers the workflow; the path and the timeline lead to each
    phase run too."""
    _, actors = site
    workflow_id = actors.workflow.partition(".")[2]
    page.goto(f"/actor?stream={actors.workflow}")
    graph = page.locator("svg.graph")
    expect(graph).to_be_visible(timeout=WAIT)
    expect(graph.locator("g.graph-node.visited")).to_have_count(3)
    expect(graph.locator("g.graph-node:not(.visited)")).to_have_attribute(
        "data-key", "ship"
    )
    expect(graph.locator("g.edge.taken")).to_have_count(3)
    expect(page.locator(".section-note").first).to_contain_text(f"Build {MARKUP}")
    expect(page.locator("a.path-step")).to_have_text(
        ["design #1", "implement #1", "review #1", "implement #2", "review #2"]
    )
    page.screenshot(path=shots / "workflow.png", full_page=True)

    page.locator('a.graph-node-link:has(g[data-key="review"])').click()
    expect(page.locator("h1")).to_contain_text(
        f"run.{workflow_id}:review:5", timeout=WAIT
    )
    expect(page.locator("a.parent")).to_have_text(actors.workflow)

    page.locator("a.parent").click()
    page.locator("a.path-step", has_text="implement #1").click()
    expect(page.locator("h1")).to_contain_text(
        f"run.{workflow_id}:implement:2", timeout=WAIT
    )

    page.goto(f"/actor?stream={actors.workflow}&view=timeline")
    expect(page.locator("tr.child a.child-bar")).to_have_count(5, timeout=WAIT)
    expect(page.locator("tr.child rect").first).to_be_visible()
    page.screenshot(path=shots / "workflow-timeline.png", full_page=True)
    page.locator("tr.child a.child-bar").first.click()
    expect(page.locator("h1")).to_contain_text(
        f"run.{workflow_id}:design:1", timeout=WAIT
    )


def test_a_session_page_shows_memory_with_markup_as_text(
    page: Page, site: tuple[Path, Actors], shots: Path
) -> None:
    """The session's segments, memory and schedules; a memory value holding
    a script is shown as its text and never runs (the fixture checks)."""
    _, actors = site
    page.goto(f"/actor?stream={actors.session}")
    core = page.locator('[data-title="Core memory"] table td').nth(1)
    expect(core).to_have_text(f"Kiel {MARKUP}", timeout=WAIT)
    expect(page.locator('[data-title="Segments"] tbody tr')).to_have_count(2)
    expect(
        page.locator('[data-title="Schedules and timers"] tbody td').first
    ).to_have_text("daily")
    assert page.locator("main script").count() == 0
    page.screenshot(path=shots / "session.png", full_page=True)


def test_a_task_page_shows_its_evaluation_tree_and_leads_to_its_subtask(
    page: Page, site: tuple[Path, Actors], shots: Path
) -> None:
    """The evaluation tree nests each call in its form or iteration; the
    subtask under its call opens the subtask's page."""
    _, actors = site
    page.goto(f"/actor?stream={actors.task}")
    tree = page.locator("ul.tree")
    expect(tree).to_be_visible(timeout=WAIT)
    expect(tree.locator(":scope > li > .branch")).to_have_text(
        ["bind p", "loop iteration 1 of 2", "loop iteration 2 of 2"]
    )
    expect(tree.locator(".branch-detail").first).to_contain_text(f"planned: {MARKUP}")
    page.screenshot(path=shots / "task.png", full_page=True)
    tree.locator("a.section-link").click()
    expect(page.locator("h1")).to_contain_text("task.t1/sub/1", timeout=WAIT)
    expect(page.locator("a.parent")).to_have_text(actors.task)
