"""One id everywhere: every id a list command prints (`runs list`,
`sessions list`, `workflow list`) works as printed in `replay`, `runs show`,
`events export` and `fork`; an id that names actors of several kinds is
refused, naming their streams; and the list and show commands print
columns that fit, say when a list is cut, cut long values with a marker
and give all of it as JSON lines with ``-o json``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest
from support import act

from steward import cli, replay
from steward.actors.session.events import SessionOpened
from steward.bus import SqliteEventLog
from steward.cli.history import STATE_WIDTH
from steward.kinds import KINDS

LOG = Path(".steward/steward.db")
WORKFLOW = "wf-a-rather-long-workflow-id"
"""Its phase's run id, ``WORKFLOW:only:1``, is longer than any column
`runs list` had for ids."""
LONG = "the provider answered with an error that goes on and on " * 4
"""Why the workflow's only phase fails: longer than its column."""
SESSION = "cli:s1"


def steward(*argv: str) -> int:
    return cli.main(list(argv))


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The lines a command that must succeed prints."""
    code = steward(*argv)
    out, err = capsys.readouterr()
    assert code == 0, (argv, err)
    return out.splitlines()


def _workflow(wid: str) -> int:
    """Run ``wf.toml`` as workflow run ``wid``: its one phase fails."""
    return steward(
        "--script", "failing.json", "workflow", "run", "wf.toml", "--id", wid, "--quiet"
    )


@pytest.fixture
def ids(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> dict[str, str]:
    """A log in the working directory holding a run, a chat session and a
    workflow run whose phase failed with a long reason; their ids by kind."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "steward.toml").write_text("[run]\nplanning_gate = false\n")
    (tmp_path / "done.json").write_text(
        json.dumps({"replies": [act(type="finish", output="done")]})
    )
    failing = {"error": {"kind": "internal", "message": LONG}}
    (tmp_path / "failing.json").write_text(json.dumps({"replies": [failing]}))
    (tmp_path / "wf.toml").write_text(
        '[workflow]\nkey = "w"\nversion = 1\n\n'
        '[[nodes]]\nkey = "only"\nprovider = "default"\nmax_retries = 0\n'
    )
    assert steward("--script", "done.json", "run", "-q", "x") == 0
    run_id = capsys.readouterr().out.split()[1]  # "run ID completed"
    assert steward("sessions", "send", SESSION, "/model") == 0
    assert _workflow(WORKFLOW) == 1
    capsys.readouterr()
    return {"run": run_id, "session": SESSION, "workflow": WORKFLOW}


def _listed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The first column of a list command's rows, as printed."""
    return [line.split()[0] for line in _out(capsys, *argv)[1:]]


def _first_step_end(stream: str) -> int:
    async def read() -> int:
        async with await SqliteEventLog.open(LOG, union=KINDS.union) as log:
            return replay.commits(await log.read(stream), kinds=KINDS)[0][-1].version

    return asyncio.run(read())


# -- one id everywhere -------------------------------------------------------------


def test_every_id_a_list_prints_works_as_printed(
    ids: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each id `runs list`, `sessions list` and `workflow list` print is
    taken, as printed, by `replay --verify`, `runs show`, `events export`
    and `fork`, each finding the one stream of that id."""
    listed = {
        "run": _listed(capsys, "runs", "list"),
        "session": _listed(capsys, "sessions", "list"),
        "workflow": _listed(capsys, "workflow", "list"),
    }
    assert listed == {
        "run": [f"{WORKFLOW}:only:1", ids["run"]],
        "session": [SESSION],
        "workflow": [WORKFLOW],
    }
    for kind, names in listed.items():
        for name in names:
            stream = f"{kind}.{name}"
            assert _out(capsys, "replay", name, "--verify")[-1] == "verify: ok"
            assert _out(capsys, "runs", "show", name) == _out(
                capsys, "runs", "show", stream
            )
            exported = [json.loads(x) for x in _out(capsys, "events", "export", name)]
            assert {e["stream"] for e in exported} == {stream}
            at = str(_first_step_end(stream))
            forked = _out(capsys, "fork", name, "--at", at, "--no-run")
            assert f" at version {at} as " in forked[0], forked


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "ID"],
        ["runs", "show", "ID"],
        ["events", "export", "ID"],
        ["fork", "ID", "--at", "AT", "--no-run"],
    ],
)
def test_an_id_of_two_kinds_is_refused_naming_both_streams(
    ids: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A workflow run given a run's id as its own: the bare id is refused in
    one line naming both streams (exit 2); each stream's full name works."""
    run_id = ids["run"]
    assert _workflow(run_id) == 1
    capsys.readouterr()
    code = steward(*[{"ID": run_id, "AT": "1"}.get(a, a) for a in argv])
    out, err = capsys.readouterr()
    assert (code, out, err) == (
        2,
        "",
        f"steward: {run_id!r} names 2 streams, run.{run_id} and "
        f"workflow.{run_id}; give the one you mean in full\n",
    )
    for stream in (f"run.{run_id}", f"workflow.{run_id}"):
        at = str(_first_step_end(stream))
        named = [{"ID": stream, "AT": at}.get(a, a) for a in argv]
        assert steward(*named) == 0, capsys.readouterr().err


# -- reading output ----------------------------------------------------------------


def test_runs_list_columns_fit_the_longest_id(
    ids: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A phase run's long id widens the id column: every row's status starts
    where the header's does, two blanks after the widest id."""
    header, *rows = _out(capsys, "runs", "list")
    at = header.index("status")
    assert at == len(f"{WORKFLOW}:only:1") + 2
    assert [row[at:].split()[0] for row in rows] == ["failed", "completed"]
    assert all(row[at - 2 : at] == "  " for row in rows), rows


@pytest.mark.parametrize(
    ("argv", "more"),
    [
        (["runs", "list", "--limit", "2"], "1 more; use --limit 3 to list them all"),
        (["runs", "list", "--limit", "3"], None),
        (
            ["workflow", "list", "--limit", "1"],
            "1 more; use --limit 2 to list them all",
        ),
        (
            ["sessions", "list", "--limit", "1"],
            "1 more; use --limit 2 to list them all",
        ),
    ],
)
def test_a_list_cut_short_says_how_many_more(
    ids: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    more: str | None,
) -> None:
    """A list with more rows than --limit ends with a line saying how many
    more and how to list them; in JSON that line goes to standard error and
    standard output holds only the rows."""
    assert _workflow("wf-2") == 1
    assert steward("sessions", "send", "cli:s2", "/model") == 0
    capsys.readouterr()
    lines = _out(capsys, *argv)
    limit = int(argv[-1])
    assert len(lines) == 1 + limit + (more is not None)
    if more is not None:
        assert lines[-1] == more
    assert steward(*argv, "-o", "json") == 0
    out, err = capsys.readouterr()
    assert len([json.loads(line) for line in out.splitlines()]) == limit
    assert err == ("" if more is None else more + "\n")


def test_runs_show_cuts_a_long_failure_reason_within_its_column(
    ids: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A phase's failure reason is cut with … in the decision column, so the
    run column stays aligned; `-o json` gives the reason whole."""
    lines = _out(capsys, "runs", "show", WORKFLOW)
    header = next(line for line in lines if line.split()[:1] == ["phase"])
    (row,) = [line for line in lines if line.split()[:2] == ["only", "#1"]]
    at = header.index("run")
    assert row[at:] == f"{WORKFLOW}:only:1"
    decision = row[header.index("decision") : at].rstrip()
    assert decision.startswith("model call failed: internal: the provider")
    assert decision.endswith("…") and len(decision) <= 60
    (shown,) = _out(capsys, "runs", "show", WORKFLOW, "-o", "json")
    (phase,) = json.loads(shown)["phases"]
    assert phase["status"] == "failed" and LONG.strip() in phase["reason"]


def test_replay_cuts_a_long_value_and_json_gives_it_whole(
    ids: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay SESSION` cuts the kilobytes of its settings with … and says
    so in its last line; `-o json` prints the state whole, as recorded."""
    lines = _out(capsys, "replay", SESSION)
    assert lines[0] == f"session.{SESSION}: kind session, 3 events"
    (settings,) = [line for line in lines if line.startswith("settings: ")]
    assert len(settings) == len("settings: ") + STATE_WIDTH
    assert settings.endswith("…")
    assert max(len(line) for line in lines) <= len(settings)
    assert "--output json" in lines[-1]
    (whole,) = _out(capsys, "replay", SESSION, "-o", "json")
    state = json.loads(whole)

    async def opened() -> SessionOpened:
        async with await SqliteEventLog.open(LOG, union=KINDS.union) as log:
            first = (await log.read(f"session.{SESSION}"))[0].event
            assert isinstance(first, SessionOpened)
            return first

    assert (state["stream"], state["kind"], state["events"]) == (
        f"session.{SESSION}",
        "session",
        3,
    )
    settings = state["state"]["settings"]
    assert len(json.dumps(settings)) > 1000
    recorded = msgspec.json.encode(asyncio.run(opened()).settings)
    assert settings == json.loads(recorded)


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (["runs", "list"], "id", f"{WORKFLOW}:only:1"),
        (["runs", "show", "RUN"], "stream", "run.RUN"),
        (["runs", "show", WORKFLOW], "stream", f"workflow.{WORKFLOW}"),
        (["runs", "show", SESSION], "stream", f"session.{SESSION}"),
        (["runs", "show", "RUN", "--prompts"], "stream", "run.RUN"),
        (["sessions", "list"], "id", SESSION),
        (["sessions", "show", SESSION], "stream", f"session.{SESSION}"),
        (["workflow", "list"], "id", WORKFLOW),
        (["replay", "RUN", "--verify"], "stream", "run.RUN"),
    ],
)
def test_every_list_and_show_command_prints_json_lines(
    ids: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    key: str,
    value: str,
) -> None:
    """``-o json`` (``--output json``) prints one JSON object per line: a
    list a row per line, a show the whole of it on one line."""
    argv = [a.replace("RUN", ids["run"]) for a in argv]
    for option in ("-o", "--output"):
        lines = _out(capsys, *argv, option, "json")
        objects = [json.loads(line) for line in lines]
        assert all(isinstance(o, dict) for o in objects)
        assert objects[0][key] == value.replace("RUN", ids["run"])
        if argv[0] != "runs" or argv[1] != "list":
            assert len(objects) == 1


def test_json_output_of_a_run_holds_its_steps_and_prompts(
    ids: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs show ID -o json --prompts`: the run, its steps in order and the
    prompt of each model call; `replay -o json --verify` says it verified."""
    (shown,) = _out(capsys, "runs", "show", ids["run"], "-o", "json", "--prompts")
    run = json.loads(shown)
    assert (run["id"], run["status"], run["output"]) == (
        ids["run"],
        "completed",
        "done",
    )
    assert [s["step"] for s in run["steps"]] == list(range(1, len(run["steps"]) + 1))
    assert run["steps"][0] == {
        "step": 1,
        "kind": "RunCreated",
        "duration": None,
        "tokens": None,
        "cost_usd": None,
        "detail": "x",
    }
    (prompt,) = run["prompts"]
    assert prompt["system"] and prompt["messages"][-1]["role"] == "user"
    (replayed,) = _out(capsys, "replay", ids["run"], "-o", "json", "--verify")
    assert json.loads(replayed)["verify"] == {"ok": True}


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "list"],
        ["runs", "show"],
        ["sessions", "list"],
        ["sessions", "show"],
        ["workflow", "list"],
        ["replay"],
    ],
)
def test_help_explains_the_output_option_and_a_bad_format_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """`--help` of each list and show command explains ``-o/--output``; a
    format it does not have is one line naming the choices, exit 2."""
    with pytest.raises(SystemExit) as helped:
        steward(*command, "--help")
    shown = " ".join(capsys.readouterr().out.split())
    assert helped.value.code == 0
    assert "-o {text,json}, --output {text,json}" in shown
    assert "json: JSON lines for a program" in shown
    an_id = ["x"] if command[-1] in ("show", "replay") else []
    with pytest.raises(SystemExit) as refused:
        steward("--db", str(tmp_path / "l.db"), *command, *an_id, "-o", "yaml")
    err = capsys.readouterr().err
    assert refused.value.code == 2
    assert len(err.splitlines()) == 1
    assert "argument -o/--output: invalid choice: 'yaml'" in err
