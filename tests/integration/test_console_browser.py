"""`steward console` in a real browser: Debian's Chromium driven by
Playwright (``executable_path``; Playwright's own browser download is not
used). Skipped, saying so, where no Chromium is installed (`.ci/run`
installs it). Screenshots of the main pages go to a folder the tests
print."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from console_browser import WAIT, chromium, launch, tab
from console_site import ARGS, XSS, Served, Site, approving, make_log, steward
from playwright.sync_api import Browser, Page, expect, sync_playwright
from support import start_run

pytestmark = pytest.mark.slow

chromium()  # (or the module is skipped)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Site]:
    tmp = tmp_path_factory.mktemp("browser")
    return tmp, make_log(tmp, queued=2)


@pytest.fixture(scope="module")
def served(site: tuple[Path, Site]) -> Iterator[Served]:
    tmp, _ = site
    with Served(tmp, "--db", str(tmp / "log.db")) as console:
        yield console


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[Browser]:
    """Chromium, started after the log is made (Playwright's loop runs on
    this thread while it lasts)."""
    with sync_playwright() as playwright:
        yield launch(playwright)


@pytest.fixture
def page(browser: Browser, served: Served) -> Iterator[Page]:
    with tab(browser, served.url) as opened:
        yield opened


def test_list_filter_open_a_run_and_its_views(
    page: Page, site: tuple[Path, Site], shots: Path
) -> None:
    """Open the list, filter it, click into the run with a subagent, see its
    events, switch views, show a model call's prompt, follow the child."""
    _, runs = site
    page.goto("/")
    expect(page.locator("a.actor-link")).to_have_count(5, timeout=WAIT)
    page.screenshot(path=shots / "list.png", full_page=True)
    page.fill("input[name=q]", "show me")
    page.click("form.filters button")
    expect(page.locator("a.actor-link")).to_have_count(1, timeout=WAIT)
    page.click(f"a.actor-link:text-is('{runs.root}')")
    expect(page.locator("#status")).to_have_text("completed", timeout=WAIT)
    expect(page.locator("tr.event .type").last).to_have_text("RunCompleted")
    page.screenshot(path=shots / "run.png", full_page=True)
    page.click("#view-compact")
    expect(page.locator("tr.answer").first).to_be_visible(timeout=WAIT)
    page.click("#view-timeline")
    expect(page.locator("td.bar svg rect").first).to_be_visible(timeout=WAIT)
    page.screenshot(path=shots / "timeline.png", full_page=True)
    page.click("#view-raw")
    page.locator("a.prompt-link").first.click()
    expect(page.locator(".prompt pre.system").first).to_contain_text(
        "[system]", timeout=WAIT
    )
    page.click("a.child")
    expect(page.locator("h1")).to_contain_text(runs.child, timeout=WAIT)
    expect(page.locator("a.parent")).to_have_text(f"run.{runs.root}")


def test_a_reply_with_markup_is_shown_as_text_and_never_runs(
    page: Page, site: tuple[Path, Site]
) -> None:
    """A model's reply holding a script and an image with onerror is shown
    as its text; no dialog opens (the page fixture checks), nothing runs."""
    _, runs = site
    page.goto(f"/actor?stream=run.{runs.root}&type=OutputUpdated")
    summary = page.locator("tr.event summary.text").first
    expect(summary).to_contain_text(XSS, timeout=WAIT)
    summary.click()
    expect(page.locator("tr.event pre.json").first).to_contain_text("onerror=alert(2)")
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0


def test_cancel_a_run_from_its_page(page: Page, site: tuple[Path, Site]) -> None:
    """The cancel button records the run's cancel; the page says so."""
    _, runs = site
    page.goto(f"/actor?stream=run.{runs.queued[0]}")
    expect(page.locator("#status")).to_have_text("pending", timeout=WAIT)
    page.fill("#cancel-form input[name=reason]", "from the browser")
    page.click("#cancel")
    expect(page.locator("#said")).to_have_text(
        "cancel recorded; it is now cancelled", timeout=WAIT
    )
    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.locator("tr.event .type").last).to_have_text("RunCancelled")


def test_a_live_page_shows_new_events_without_reloading(
    page: Page, site: tuple[Path, Site]
) -> None:
    """An event another process commits appears on an open page, without a
    reload (a value set on the page's window survives)."""
    tmp, runs = site
    run = runs.queued[1]
    page.goto(f"/actor?stream=run.{run}")
    expect(page.locator("body[data-live-open]")).to_have_count(1, timeout=WAIT)
    page.evaluate("window.notReloaded = true")
    steward(tmp, "runs", "cancel", run, "--reason", "from another process")
    expect(page.locator("#status")).to_have_text("cancelled", timeout=WAIT)
    expect(page.locator("tr.event .type").last).to_have_text("RunCancelled")
    assert page.evaluate("window.notReloaded") is True


def test_fork_at_a_step_and_follow_the_fork(
    page: Page, site: tuple[Path, Site], shots: Path
) -> None:
    """A fork from the timeline lands on the fork's page, which holds the
    steps up to the one forked at; verify says ok."""
    _, runs = site
    page.goto(f"/actor?stream=run.{runs.root}&view=timeline")
    page.locator("tr.step button.fork-here").nth(1).click()
    expect(page.locator("#said")).to_contain_text(
        f"forked run.{runs.root} at version 6 as run.{runs.root}-fork", timeout=WAIT
    )
    expect(page.locator("h1")).to_contain_text("-fork")
    expect(page.locator("#event-count")).to_have_text("6")
    page.click("#verify")
    expect(page.locator("#verify-result")).to_contain_text("verify: ok", timeout=WAIT)
    page.screenshot(path=shots / "verify.png")


def test_approve_a_waiting_run_and_watch_it_complete(
    browser: Browser, tmp_path: Path, shots: Path
) -> None:
    """A run waiting on a person shows the call and its arguments as text;
    Approve records the answer in place (no reload), and the page follows
    the run, carried on by the serve, to its completion."""
    with approving(tmp_path) as serving, tab(browser, serving.url) as page:
        run = start_run(
            tmp_path, "write notes", "--db", str(tmp_path / "log.db"), "--script",
            "s.json",
        )  # fmt: skip
        page.goto(f"/actor?stream=run.{run}")
        approval = page.locator("tr.approval")
        expect(approval).to_have_count(1, timeout=WAIT)
        expect(approval.locator("td.tool")).to_have_text("files.write")
        expect(approval.locator("pre.args")).to_contain_text(ARGS["content"])
        expect(page.locator("#status")).to_have_text("waiting")
        page.screenshot(path=shots / "approval.png", full_page=True)
        page.evaluate("window.notReloaded = true")
        approval.locator("button.approve").click()
        expect(page.locator("#said")).to_contain_text("approved", timeout=WAIT)
        expect(page.locator("#status")).to_have_text("completed", timeout=WAIT)
        expect(page.locator("tr.approval")).to_have_count(0)
        expect(page.locator("tr.event .type").last).to_have_text("RunCompleted")
        assert page.evaluate("window.notReloaded") is True
    assert (tmp_path / "notes.md").read_text() == ARGS["content"]


def test_batch_cancel_from_a_filtered_list(
    page: Page, site: tuple[Path, Site], shots: Path
) -> None:
    """On a list filtered to three queued runs, cancel the one ticked, then
    all shown: the page says how many were cancelled and skipped, and the
    rows say cancelled."""
    tmp, _ = site
    for n in range(3):
        steward(tmp, "runs", "start", f"batch {n}", "--wait", "0")
    page.goto("/?q=batch")
    rows = page.locator("table.actors tbody tr")
    expect(rows).to_have_count(3, timeout=WAIT)
    page.locator("input.pick").first.check()
    page.fill("#batch-cancel input[name=reason]", "from the list")
    page.click("#cancel-selected")
    expect(page.locator("#said")).to_have_text("1 of 1 cancelled", timeout=WAIT)
    expect(page.locator("table.actors .status-cancelled")).to_have_count(1)
    page.click("#cancel-shown")
    expect(page.locator("#said")).to_have_text(
        "2 of 3 cancelled; skipped 1 that refused it (ended already)", timeout=WAIT
    )
    expect(page.locator("table.actors .status-cancelled")).to_have_count(3)
    expect(page.locator("form.filters input[name=q]")).to_have_value("batch")
    page.screenshot(path=shots / "batch-cancel.png", full_page=True)
