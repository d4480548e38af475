"""`steward console` over HTTP: a real server on a free loopback port, read
with httpx as a browser would, on both logs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from console_site import XSS, Served, Site, csrf, make_log, steward
from nats_server import NatsServer
from support import PLAN, act

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Site]:
    tmp = tmp_path_factory.mktemp("console")
    return tmp, make_log(tmp, queued=3)


@pytest.fixture(scope="module")
def served(site: tuple[Path, Site]) -> Iterator[Served]:
    tmp, _ = site
    with Served(tmp, "--db", str(tmp / "log.db")) as console:
        yield console


@pytest.fixture
def web(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=20) as client:
        yield client


def test_the_list_shows_every_run_newest_first_with_counts(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """The list holds every run, newest first, linked to its page, with the
    count of each status."""
    _, runs = site
    page = web.get("/")
    assert page.status_code == 200
    linked = re.findall(
        r'class="actor-link" href="/actor\?stream=run.([^"]+)"', page.text
    )
    assert linked == [*reversed(runs.queued), runs.long, runs.child, runs.root]
    assert re.search(r"completed <b>3</b>", page.text)


def test_the_list_filters_by_status_kind_and_text(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """Each filter keeps only what passes it; a kind with no actors shows none."""
    _, runs = site
    completed = web.get("/", params={"status": "completed"}).text
    assert runs.long in completed and runs.queued[0] not in completed
    found = web.get("/", params={"q": "long"}).text
    assert runs.long in found and runs.root not in found
    sessions = web.get("/", params={"kind": "session"})
    assert sessions.status_code == 200 and "No actors" in sessions.text


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/?kind=robot", 400, "no actor kind &#39;robot&#39;"),
        ("/?page=two", 400, "page &#39;two&#39; is not a number"),
        ("/?page=9", 404, "no page 9: there are 1"),
        ("/actor?stream=run.nobody", 404, "no stream &#39;run.nobody&#39;"),
        ("/actor?stream=robot.r1", 404, "of no actor kind"),
        ("/actor", 400, "name an actor"),
        ("/nowhere", 404, "no page /nowhere"),
    ],
)
def test_bad_input_is_a_clear_refusal(
    web: httpx.Client, path: str, status: int, says: str
) -> None:
    """A bad filter, page or actor is a 400 or 404 page that says why."""
    answer = web.get(path)
    assert answer.status_code == status
    assert says in answer.text


def test_a_page_of_history_and_its_bad_pages(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """A history of more than a page opens on its last page, pages back to
    the first, and refuses a page it does not have, a view or an event type
    it does not know."""
    _, runs = site
    stream = f"run.{runs.long}"
    records = steward(site[0], "events", "export", runs.long).splitlines()
    assert len(records) > 100
    last = web.get("/actor", params={"stream": stream})
    versions = [int(v) for v in re.findall(r'data-version="(\d+)"', last.text)]
    assert versions == list(range(101, len(records) + 1))
    first = web.get("/actor", params={"stream": stream, "page": 1})
    versions = [int(v) for v in re.findall(r'data-version="(\d+)"', first.text)]
    assert versions == list(range(1, 101))
    assert web.get("/actor", params={"stream": stream, "page": 3}).status_code == 404
    assert web.get("/actor", params={"stream": stream, "view": "x"}).status_code == 400
    assert web.get("/actor", params={"stream": stream, "type": "No"}).status_code == 400


def test_a_run_page_shows_its_summary_children_and_escapes_the_log(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """The summary says the status and links the subagent; the model's reply
    is text in the page (escaped), never markup."""
    _, runs = site
    page = web.get("/actor", params={"stream": f"run.{runs.root}"}).text
    assert 'id="status">completed<' in page
    assert f'class="child" href="/actor?stream=run.{runs.child}"' in page
    assert 'id="output">&lt;script&gt;alert(1)&lt;/script&gt;' in page
    assert XSS not in page and "<img src=x" not in page
    assert "show me &lt;b&gt;it&lt;/b&gt;" in page
    child = web.get("/actor", params={"stream": f"run.{runs.child}"}).text
    assert f'class="parent" href="/actor?stream=run.{runs.root}"' in child


def test_the_filters_and_the_compact_view(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """Failures only keeps the failed tool call; one type keeps that type; the
    compact view puts each answer under its request."""
    _, runs = site
    stream = f"run.{runs.root}"
    failures = web.get("/actor", params={"stream": stream, "failures": "1"}).text
    assert re.findall(r'class="type">(\w+)<', failures) == ["ToolResulted"]
    typed = web.get("/actor", params={"stream": stream, "type": "LlmResponded"}).text
    assert set(re.findall(r'class="type">(\w+)<', typed)) == {"LlmResponded"}
    compact = web.get("/actor", params={"stream": stream, "view": "compact"}).text
    rows = re.findall(r'class="type">(↳ )?(\w+)<', compact)
    first = rows.index(("", "LlmRequested"))
    assert rows[first + 1] == ("↳ ", "LlmResponded")
    timeline = web.get("/actor", params={"stream": stream, "view": "timeline"})
    assert timeline.status_code == 200 and "<rect" in timeline.text


def test_the_prompt_of_a_model_call_is_shown_as_sent(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """The prompt of a recorded model call holds the run's input."""
    _, runs = site
    page = web.get("/actor", params={"stream": f"run.{runs.root}", "page": 1}).text
    version = re.search(r"/actor/prompt\?stream=[^&]+&amp;version=(\d+)", page)
    assert version is not None
    shown = web.get(
        "/actor/prompt", params={"stream": f"run.{runs.root}", "version": version[1]}
    )
    assert shown.status_code == 200
    assert "[system]" in shown.text and "show me &lt;b&gt;it&lt;/b&gt;" in shown.text
    none = web.get("/actor/prompt", params={"stream": f"run.{runs.root}", "version": 1})
    assert none.status_code == 404


def test_download_is_the_export_and_verify_says_ok(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """The JSONL download is what `steward events export` writes; verify
    re-decides every input."""
    tmp, runs = site
    download = web.get("/actor/events.jsonl", params={"stream": f"run.{runs.root}"})
    assert download.status_code == 200
    assert "attachment" in download.headers["content-disposition"]
    assert download.text == steward(tmp, "events", "export", runs.root)
    verified = web.get("/actor/verify", params={"stream": f"run.{runs.root}"})
    assert "verify: ok" in verified.text


def test_an_action_needs_the_page_csrf_value_and_this_origin(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """A cancel without the page's CSRF value, or from another origin, is
    refused and records nothing."""
    tmp, runs = site
    run = runs.queued[0]
    page = web.get("/actor", params={"stream": f"run.{run}"}).text
    url = f"/actor/cancel?stream=run.{run}"
    assert web.post(url, data={"reason": "x"}).status_code == 403
    refused = web.post(
        url,
        data={"csrf": csrf(page)},
        headers={"Origin": "http://evil.example"},
    )
    assert refused.status_code == 403
    assert "CancelRequested" not in steward(tmp, "runs", "show", run)


def test_cancel_from_the_page_is_recorded(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """A cancel with the page's CSRF value records the run's cancel input
    with its reason; the run is cancelled; a second is refused, saying why."""
    tmp, runs = site
    run = runs.queued[1]
    page = web.get("/actor", params={"stream": f"run.{run}"}).text
    done = web.post(
        f"/actor/cancel?stream=run.{run}",
        data={"csrf": csrf(page), "reason": "seen enough"},
        headers={"Origin": str(web.base_url).rstrip("/")},
    )
    assert done.status_code == 303
    landed = web.get(done.headers["location"]).text
    assert "cancel recorded; it is now cancelled" in landed
    shown = json.loads(steward(tmp, "replay", run, "-o", "json"))
    assert shown["state"]["status"] == "cancelled"
    assert shown["state"]["reason"] == "seen enough"
    again = web.post(f"/actor/cancel?stream=run.{run}", data={"csrf": csrf(page)})
    assert "refused" in web.get(again.headers["location"]).text


def test_fork_at_a_step_makes_a_new_run(
    web: httpx.Client, site: tuple[Path, Site]
) -> None:
    """A fork at a version where a step ends is a new run holding the steps
    up to there; any other version is refused naming those that work."""
    tmp, runs = site
    stream = f"run.{runs.root}"
    page = web.get("/actor", params={"stream": stream, "page": 1}).text
    ends = re.findall(r'name="at" value="(\d+)"', page)
    assert ends[:2] == ["3", "6"]
    forked = web.post(
        f"/actor/fork?stream={stream}", data={"csrf": csrf(page), "at": "6"}
    )
    assert forked.status_code == 303
    fork = re.search(r"stream=(run\.[^&]+)", forked.headers["location"])
    assert fork is not None and fork[1].startswith(f"{stream}-fork")
    exported = steward(tmp, "events", "export", fork[1]).splitlines()
    assert len(exported) == 6
    assert "verify: ok" in steward(tmp, "replay", fork[1], "--verify")
    inside = web.post(
        f"/actor/fork?stream={stream}", data={"csrf": csrf(page), "at": "5"}
    )
    assert inside.status_code == 400 and "inside a step" in inside.text


def test_live_events_arrive_as_they_are_committed(
    served: Served, site: tuple[Path, Site]
) -> None:
    """A client of /live hears of a record another process commits to the
    stream it follows."""
    tmp, runs = site
    run = runs.queued[2]
    with (
        httpx.Client(base_url=served.url, timeout=20) as client,
        client.stream("GET", "/live", params={"stream": f"run.{run}"}) as events,
    ):
        lines = events.iter_lines()
        assert next(lines) == "retry: 2000"
        steward(tmp, "runs", "cancel", run, "--reason", "from afar")
        heard = []
        for line in lines:
            if line.startswith("data: "):
                heard.append(json.loads(line.removeprefix("data: ")))
            if len(heard) == 2:
                break
    assert heard == [
        {"stream": f"run.{run}", "version": 2},
        {"stream": f"run.{run}", "version": 3},
    ]


def test_a_token_guards_every_page(site: tuple[Path, Site]) -> None:
    """With a token set, a request without it is refused; given once, it is
    kept in a cookie."""
    tmp, _ = site
    with (
        Served(
            tmp, "--db", str(tmp / "log.db"), STEWARD_CONSOLE_TOKEN="s3cret"
        ) as console,
        httpx.Client(base_url=console.url, timeout=20) as client,
    ):
        refused = client.get("/")
        assert refused.status_code == 401 and "token" in refused.text
        assert client.get("/", params={"token": "wrong"}).status_code == 401
        given = client.get("/", params={"token": "s3cret"})
        assert given.status_code == 303 and given.headers["location"] == "/"
        assert client.get("/").status_code == 200
        bearer = httpx.get(
            f"{console.url}/", headers={"Authorization": "Bearer s3cret"}
        )
        assert bearer.status_code == 200


def test_an_exposed_console_without_a_token_is_refused(tmp_path: Path) -> None:
    """Listening beyond loopback without a token is one clear line, exit 2."""
    ran = subprocess.run(
        [sys.executable, "-m", "steward", "console", "--address", "0.0.0.0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert "needs a token" in ran.stderr and len(ran.stderr.splitlines()) == 1


def test_the_console_reads_a_jetstream_log(tmp_path: Path, nats: NatsServer) -> None:
    """On a nats:// log the list and a run's page come from the server's log."""
    log = ["--log", f"{nats.url}?stream=CONSOLE", "--db", str(tmp_path / "p.db")]
    replies = [*PLAN, act(type="finish", output="on nats")]
    (tmp_path / "s.json").write_text(json.dumps({"replies": replies}))
    steward(tmp_path, *log, "--script", "s.json", "run", "hello nats", "-q")
    run = json.loads(steward(tmp_path, *log, "runs", "list", "-o", "json"))["id"]
    with (
        Served(tmp_path, *log) as console,
        httpx.Client(base_url=console.url, timeout=20) as client,
    ):
        assert run in client.get("/").text
        page = client.get("/actor", params={"stream": f"run.{run}"}).text
        assert "RunCompleted" in page and "on nats" in page
