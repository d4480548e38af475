"""The console's operator actions over HTTP: approve and deny what a run
waits on a person for (a `steward serve` serving the console carries the
run on), cancel a batch from a filtered list, and the lists' created-time
filter; each refused without the page's CSRF value."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from console_site import ARGS, Served, Site, approving, csrf, make_log, steward
from support import start_run

pytestmark = pytest.mark.slow


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with approving(tmp_path) as console:
        yield console


@pytest.fixture
def web(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=20) as client:
        yield client


def until(web: httpx.Client, stream: str, holds: Callable[[str], bool]) -> str:
    """The page of ``stream`` once ``holds`` it (read again until then, for
    up to 30 s: the serve carries the run on meanwhile)."""
    deadline = time.monotonic() + 30
    page = ""
    while time.monotonic() < deadline:
        page = web.get("/actor", params={"stream": stream}).text
        if holds(page):
            return page
        time.sleep(0.05)
    raise AssertionError(f"{stream}'s page never showed what was awaited:\n{page}")


def _waiting(web: httpx.Client, tmp: Path, text: str) -> tuple[str, str, str]:
    """Start a run; its stream, its page once it waits for approval, and
    the request it waits on."""
    run = start_run(tmp, text, "--db", str(tmp / "log.db"), "--script", "s.json")
    stream = f"run.{run}"
    page = until(web, stream, lambda p: 'class="approval"' in p)
    request = re.search(r'name="request" value="([^"]+)"', page)
    assert request is not None
    return stream, page, request[1]


def _answers(tmp: Path, stream: str) -> list[dict[str, object]]:
    exported = steward(tmp, "events", "export", stream.partition(".")[2])
    return [
        json.loads(line)["event"]
        for line in exported.splitlines()
        if json.loads(line)["event"]["type"] == "ApprovalDecided"
    ]


def test_approve_from_the_page_and_the_run_goes_on(
    web: httpx.Client, tmp_path: Path
) -> None:
    """A run waiting on a person shows the call and its arguments (as
    text); Approve records the run's answer, and the serve makes the call
    and completes the run."""
    stream, page, request = _waiting(web, tmp_path, "write notes")
    assert '<td class="tool">files.write</td>' in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt; hi" in page
    assert "<script>alert(3)" not in page
    done = web.post(
        f"/actor/approve?stream={stream}",
        data={"csrf": csrf(page), "request": request},
        headers={"Origin": str(web.base_url).rstrip("/")},
    )
    assert done.status_code == 303
    landed = web.get(done.headers["location"]).text
    assert f"{request} approved; it is now" in landed
    until(web, stream, lambda p: 'id="status">completed<' in p)
    assert (tmp_path / "notes.md").read_text() == ARGS["content"]
    (answer,) = _answers(tmp_path, stream)
    assert answer["request_id"] == request and answer["approved"] is True
    run = stream.partition(".")[2]
    assert "verify: ok" in steward(tmp_path, "replay", run, "--verify")


def test_deny_from_the_page_tells_the_run_why(
    web: httpx.Client, tmp_path: Path
) -> None:
    """Deny with a reason records the run's denial; the call is not made,
    the model is told the reason, and the run goes on to its end."""
    stream, page, request = _waiting(web, tmp_path, "write notes, be told no")
    done = web.post(
        f"/actor/deny?stream={stream}",
        data={"csrf": csrf(page), "request": request, "reason": "not on a Friday"},
    )
    assert done.status_code == 303
    assert f"{request} denied" in web.get(done.headers["location"]).text
    final = until(web, stream, lambda p: 'id="status">completed<' in p)
    assert 'class="approval"' not in final
    assert not (tmp_path / "notes.md").exists()
    (answer,) = _answers(tmp_path, stream)
    assert answer["approved"] is False and answer["reason"] == "not on a Friday"
    shown = steward(tmp_path, "runs", "show", stream.partition(".")[2], "--prompts")
    assert "A person denied the call to files.write: not on a Friday" in shown


def test_an_answer_needs_the_csrf_value_and_a_request_waited_on(
    web: httpx.Client, tmp_path: Path
) -> None:
    """Approve without the page's CSRF value, from another origin, or for a
    request the run does not wait on is refused and records nothing; the
    run still waits."""
    stream, page, request = _waiting(web, tmp_path, "write notes, wait")
    url = f"/actor/approve?stream={stream}"
    assert web.post(url, data={"request": request}).status_code == 403
    assert web.post(f"/actor/deny?stream={stream}", data={}).status_code == 403
    other = web.post(
        url,
        data={"csrf": csrf(page), "request": request},
        headers={"Origin": "http://evil.example"},
    )
    assert other.status_code == 403
    wrong = web.post(url, data={"csrf": csrf(page), "request": "r-nothing"})
    assert wrong.status_code == 400
    assert f"waits for no request &#39;r-nothing&#39;, only for &#39;{request}" in (
        wrong.text
    )
    assert _answers(tmp_path, stream) == []
    assert 'id="status">waiting<' in web.get("/actor", params={"stream": stream}).text


# -- the lists: batch cancel and the time filter (a console over a log no
# serve carries on, so queued runs stay pending) --------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Site]:
    tmp = tmp_path_factory.mktemp("console-lists")
    return tmp, make_log(tmp, queued=4)


@pytest.fixture(scope="module")
def listed(site: tuple[Path, Site]) -> Iterator[httpx.Client]:
    tmp, _ = site
    with (
        Served(tmp, "--db", str(tmp / "log.db")) as console,
        httpx.Client(base_url=console.url, timeout=20) as client,
    ):
        yield client


def _shown(page: str) -> list[str]:
    return re.findall(r'name="shown" value="([^"]+)"', page)


def _status(tmp: Path, run: str) -> str:
    return str(json.loads(steward(tmp, "replay", run, "-o", "json"))["state"]["status"])


def test_batch_cancel_all_shown_counts_the_cancelled_and_the_skipped(
    listed: httpx.Client, site: tuple[Path, Site]
) -> None:
    """ "Cancel all shown" on a list filtered to two queued runs and a
    completed one cancels the two, skips the one that had ended, and says
    so; the filters are kept."""
    tmp, runs = site
    page = listed.get("/", params={"q": "queued 0"}).text
    assert _shown(page) == [f"run.{runs.queued[0]}"]
    shown = [f"run.{runs.queued[0]}", f"run.{runs.queued[1]}", f"run.{runs.long}"]
    done = listed.post(
        "/actors/cancel",
        data={
            "csrf": csrf(page),
            "which": "shown",
            "reason": "a batch",
            "q": "queued",
            "shown": shown,
        },
    )
    assert done.status_code == 303
    assert done.headers["location"].startswith("/?q=queued&")
    landed = listed.get(done.headers["location"]).text
    assert "2 of 3 cancelled; skipped 1 that refused it (ended already)" in landed
    assert [_status(tmp, r) for r in runs.queued[:2]] == ["cancelled", "cancelled"]
    assert _status(tmp, runs.long) == "completed"
    reasons = json.loads(steward(tmp, "replay", runs.queued[0], "-o", "json"))
    assert reasons["state"]["reason"] == "a batch"


def test_batch_cancel_selected_only_and_refused_withoutcsrf(
    listed: httpx.Client, site: tuple[Path, Site]
) -> None:
    """ "Cancel selected" cancels the ticked runs only; without the page's
    CSRF value nothing is cancelled; naming none, or a stream of no kind,
    is a clear refusal."""
    tmp, runs = site
    page = listed.get("/").text
    ticked, left = f"run.{runs.queued[2]}", f"run.{runs.queued[3]}"
    assert {ticked, left} <= set(_shown(page))
    form = {"which": "selected", "selected": [ticked], "shown": [ticked, left]}
    refused = listed.post("/actors/cancel", data=form)
    assert refused.status_code == 403
    assert _status(tmp, runs.queued[2]) == "pending"
    done = listed.post("/actors/cancel", data={"csrf": csrf(page), **form})
    assert "1 of 1 cancelled" in listed.get(done.headers["location"]).text
    assert _status(tmp, runs.queued[2]) == "cancelled"
    assert _status(tmp, runs.queued[3]) == "pending"
    none = listed.post("/actors/cancel", data={"csrf": csrf(page), "which": "selected"})
    assert none.status_code == 400 and "tick the actors to cancel" in none.text
    mixed = listed.post(
        "/actors/cancel",
        data={
            "csrf": csrf(page),
            "which": "shown",
            "shown": ["session.s-any", f"run.{runs.root}", left],
        },
    )
    said = (
        "1 of 3 cancelled; skipped 1 of a kind that cannot be cancelled and 1 "
        "that refused it (ended already)"
    )
    assert said in listed.get(mixed.headers["location"]).text
    assert _status(tmp, runs.queued[3]) == "cancelled"
    robot = listed.post(
        "/actors/cancel",
        data={"csrf": csrf(page), "which": "shown", "shown": "robot.r1"},
    )
    assert robot.status_code == 404 and "of no actor kind" in robot.text


def test_the_time_filter_with_the_others_and_its_bad_input(
    listed: httpx.Client, site: tuple[Path, Site]
) -> None:
    """``since`` and ``until`` (a span before now or an ISO date or time)
    keep the runs created in that window, with the other filters, and the
    links keep them; a value that is no time is a 400 saying what would do."""
    _, runs = site
    every = 4 + 3
    recent = listed.get("/", params={"since": "1h"}).text
    assert len(re.findall(r'class="actor-link"', recent)) == every
    assert "completed <b>3</b>" in recent
    assert 'href="/?status=completed&amp;since=1h"' in recent
    both = listed.get("/", params={"since": "1d", "status": "completed"}).text
    assert len(re.findall(r'class="actor-link"', both)) == 3
    for window in ({"until": "1h"}, {"since": "2000-01-01", "until": "2000-01-02"}):
        none = listed.get("/", params=window).text
        assert "No actors pass these filters" in none
    created = [
        json.loads(line)["created_at"]
        for line in steward(site[0], "runs", "list", "-o", "json").splitlines()
    ]
    days = {"since": min(created)[:10], "until": max(created)[:10]}
    today = listed.get("/", params=days).text
    assert len(re.findall(r'class="actor-link"', today)) == every
    bad = listed.get("/", params={"since": "yesterday"})
    assert bad.status_code == 400
    assert "since: &#39;yesterday&#39; is not a time: give a span before now" in (
        bad.text
    )
    inverted = listed.get("/", params={"since": "1d", "until": "2d"})
    assert inverted.status_code == 400 and "is not before until" in inverted.text
    assert listed.get("/", params={"until": "2026-02-30"}).status_code == 400
    assert runs.root in listed.get("/", params={"since": "2w", "q": "show me"}).text
