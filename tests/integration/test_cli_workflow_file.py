"""`steward workflow validate` and `run` on a workflow file: a valid one is
summed up in one line; an invalid one, or a run missing an input, is one
line on stderr naming the file and the place, exit status 2, and no workflow
run recorded (no log created at all)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tomllib
from pathlib import Path

import pytest
import yaml
from workflow_files import EXAMPLE, HEAD, SCRIPT, edge, node

from steward import cli
from steward.bus import SqliteEventLog
from steward.kinds import KINDS

OK = "ok: workflow design-implement-review v1, 3 nodes, 4 edges"


AB = HEAD + node("a") + node("b")

INVALID = {
    "duplicate-node": (
        "wf.toml",
        AB + node("a"),
        'node 3 "a": duplicate key: node 1 has it',
    ),
    "duplicate-priority": (
        "wf.toml",
        AB + node("c") + edge("a", "b", 1) + edge("a", "c", 1),
        "edge 2 (a -> c): priority 1 is edge 1's too; the edges of one source "
        "need distinct priorities",
    ),
    "unknown-target": (
        "wf.toml",
        AB + edge("a", "zz"),
        "edge 1 (a -> zz): its target 'zz' is no node",
    ),
    "unknown-source": (
        "wf.toml",
        AB + edge("zz", "b"),
        "edge 1 (zz -> b): its source 'zz' is no node",
    ),
    "no-provider": (
        "wf.toml",
        HEAD + node("a", provider=None),
        'node 1 "a": an agent node needs a provider (a [models] name)',
    ),
    "bad-guard": (
        "wf.toml",
        AB + edge("a", "b", when='decision == "approved'),
        "edge 1 (a -> b): its guard 'decision == \"approved' does not parse at "
        "column 13: a string with no closing quote",
    ),
    "auto-and-guarded": (
        "wf.toml",
        AB + edge("a", "b", auto=True, when="attempt < 2"),
        "edge 1 (a -> b): it is auto and has a guard; give it one of them",
    ),
    "neither-auto-nor-guarded": (
        "wf.toml",
        AB + edge("a", "b", auto=False),
        "edge 1 (a -> b): it needs auto = true or a when guard",
    ),
    "bad-node-key": (
        "wf.toml",
        HEAD + node("Design Phase"),
        "node 1 \"Design Phase\": key 'Design Phase' must be lower-case letters, "
        "digits, _ and -, starting with a letter or digit",
    ),
    "version-0": (
        "wf.toml",
        HEAD.replace("version = 1", "version = 0") + node("a"),
        "workflow: version is 0; it starts at 1",
    ),
    "no-nodes": (
        "wf.toml",
        HEAD,
        "workflow: it has no nodes; a run starts at the first",
    ),
    "unknown-field": (
        "wf.toml",
        HEAD + node("a") + node("b", retries=2),
        'node 2 "b": unknown field `retries`; the fields are key, type, provider, '
        "profile, prompt, max_retries",
    ),
    "wrong-type": (
        "wf.toml",
        HEAD + node("a", max_retries="two"),
        'node 1 "a", field max_retries: Expected `int`, got `str`',
    ),
    "invalid-toml": (
        "wf.toml",
        HEAD + 'key = "again"\n',
        "line 4, column 14: invalid TOML: Cannot overwrite a value",
    ),
    "invalid-yaml": (
        "wf.yaml",
        "workflow:\n  key: w\n  version: 1\nnodes:\n  - key: a\n   provider: x\n",
        "line 6, column 4: invalid YAML: expected <block end>, but found "
        "'<block mapping start>'",
    ),
    "other-extension": (
        "wf.json",
        '{"workflow": {"key": "w", "version": 1}}',
        "(file): is neither TOML (.toml) nor YAML (.yaml, .yml)",
    ),
    "unconfigured-provider": (
        "wf.toml",
        HEAD + node("a", provider="gpt"),
        "node 1 \"a\": provider 'gpt' is no [models] table (default)",
    ),
    "unknown-profile": (
        "wf.toml",
        HEAD + node("a", profile="reviewer"),
        "node 1 \"a\": profile 'reviewer' is no [agents] profile (default)",
    ),
    "several-problems": (
        "wf.toml",
        HEAD + node("a") + node("a", provider=None) + edge("a", "zz"),
        'node 2 "a": duplicate key: node 1 has it (and 2 more)',
    ),
}


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test works in a fresh directory with no steward.toml."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def steward(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``steward --db log.db ARGV`` in-process: exit status, stdout, stderr."""
    code = cli.main(["--db", "log.db", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def workflow_runs(db: Path) -> list[str]:
    """The ``workflow.`` streams of the embedded log ``db`` (none if absent)."""
    if not db.exists():
        return []

    async def streams() -> list[str]:
        async with await SqliteEventLog.open(db, union=KINDS.union) as log:
            return await log.streams("workflow.")

    return asyncio.run(streams())


def assert_refused(done: tuple[int, str, str], here: Path, message: str) -> None:
    """Exit 2, ``message`` as the one line on stderr, and no log made."""
    code, out, err = done
    assert (code, out, err) == (2, "", f"steward: {message}\n")
    assert workflow_runs(here / "log.db") == []
    assert not (here / "log.db").exists()


# --- valid files --------------------------------------------------------------


def test_validate_sums_up_the_example_in_one_line(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """The example validates: one line, ending in its key, version and counts."""
    assert steward(capsys, "workflow", "validate", str(EXAMPLE)) == (
        0,
        f"{EXAMPLE}: {OK}\n",
        "",
    )
    assert not (here / "log.db").exists()


@pytest.mark.parametrize("name", ["example.yaml", "example.yml"])
def test_the_example_written_as_yaml_validates_the_same(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The example's data written as YAML is the same workflow."""
    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    Path(name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert steward(capsys, "workflow", "validate", name) == (0, f"{name}: {OK}\n", "")


def test_validate_warns_of_a_loop_only_max_steps_ends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cycle closed by auto edges alone (each node's first edge by
    priority) can end only when max_steps fails the run: the file is valid
    (exit 0), and a warning on stderr names the cycle and the bound; one
    that a guard before the auto edge can leave is no such loop."""
    spin = AB + node("c") + edge("a", "b") + edge("b", "c") + edge("c", "b")
    Path("spin.toml").write_text(spin, encoding="utf-8")
    assert steward(capsys, "workflow", "validate", "spin.toml") == (
        0,
        "spin.toml: ok: workflow w v1, 3 nodes, 3 edges\n",
        "spin.toml: warning: b -> c -> b loops by auto edges alone: a run that "
        "gets there goes round until it fails at max_steps (1000)\n",
    )
    leave = AB + edge("a", "b", 1, when='decision == "approved"')
    leave += edge("a", "b", 2) + edge("b", "a")
    Path("leave.toml").write_text(leave, encoding="utf-8")
    code, _, err = steward(capsys, "workflow", "validate", "leave.toml")
    assert (code, err) == (0, "")


def test_a_run_of_the_example_is_recorded(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """With its input the example completes and leaves the stream refusals must not."""
    code, out, err = steward(
        capsys,
        "--script",
        str(SCRIPT),
        "workflow",
        "run",
        str(EXAMPLE),
        "--input",
        "feature=a /health endpoint",
        "--id",
        "wf-1",
        "--quiet",
    )
    assert (code, err) == (0, "")
    assert out.splitlines()[-2:] == ["workflow wf-1 completed", "wf-1"]
    assert workflow_runs(here / "log.db") == ["workflow.wf-1"]
    # what it spent is its phases' sum, as the runs table holds each
    with sqlite3.connect(here / "log.db") as db:
        tokens, cost = db.execute(
            "SELECT SUM(input_tokens + output_tokens), SUM(cost_usd) FROM runs "
            "WHERE reply_to = 'workflow.wf-1'"
        ).fetchone()
    assert tokens > 0
    code, out, err = steward(capsys, "workflow", "list", "-o", "json")
    [listed] = [json.loads(line) for line in out.splitlines()]
    assert (listed["id"], listed["tokens"], listed["cost_usd"]) == (
        "wf-1",
        tokens,
        cost,
    )


# --- invalid files ------------------------------------------------------------


@pytest.mark.parametrize("action", ["validate", "run"])
@pytest.mark.parametrize("case", list(INVALID))
def test_an_invalid_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], here: Path, case: str, action: str
) -> None:
    """Each problem is one line naming the file and place; nothing is run."""
    name, text, message = INVALID[case]
    Path(name).write_text(text, encoding="utf-8")
    done = steward(capsys, "workflow", action, name)
    assert_refused(done, here, f"{name}: {message}")


@pytest.mark.parametrize("action", ["validate", "run"])
def test_a_file_that_does_not_exist_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], here: Path, action: str
) -> None:
    """A missing workflow file is named; no log is created for it."""
    done = steward(capsys, "workflow", action, "absent.toml")
    assert_refused(done, here, "absent.toml: (file): no such file")


@pytest.mark.parametrize("action", ["validate", "run"])
def test_a_provider_missing_from_the_config_lists_its_models(
    capsys: pytest.CaptureFixture[str], here: Path, action: str
) -> None:
    """With ``--config``, the providers are that file's ``[models]`` tables."""
    Path("steward.toml").write_text('[models.fast]\nprovider = "scripted"\n')
    Path("wf.toml").write_text(HEAD + node("a", provider="slow"))
    done = steward(capsys, "--config", "steward.toml", "workflow", action, "wf.toml")
    message = "wf.toml: node 1 \"a\": provider 'slow' is no [models] table"
    assert_refused(done, here, f"{message} (default, fast)")


# --- inputs -------------------------------------------------------------------


def test_a_run_missing_an_input_names_it_and_the_option(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``{input.feature}`` with no ``--input feature=...`` records nothing."""
    done = steward(capsys, "--script", str(SCRIPT), "workflow", "run", str(EXAMPLE))
    message = "inputs: no value for feature: pass --input feature=VALUE"
    assert_refused(done, here, f"{EXAMPLE}: {message}")


def test_an_input_without_a_value_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``--input feature`` (no ``=``) is not NAME=VALUE; nothing is recorded."""
    done = steward(
        capsys,
        "--script",
        str(SCRIPT),
        "workflow",
        "run",
        str(EXAMPLE),
        "--input",
        "feature",
    )
    assert_refused(done, here, "--input 'feature' is not NAME=VALUE")
