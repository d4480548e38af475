"""`steward task` on the command line: validate (each problem at its file,
line and column, exit 2), run the example (its lines, its id last), show
(the evaluation's tree), list, cancel; and the generic commands (replay
--verify, events export, projections rebuild) on a task."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from steward import cli

EXAMPLES = Path(__file__).parents[2] / "examples" / "tasks"


def steward(*argv: str) -> int:
    return cli.main(list(argv))


def test_the_examples_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert steward("task", "validate", str(EXAMPLES)) == 0
    assert capsys.readouterr().out.strip() == f"{EXAMPLES}: ok"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "p.sexp",
            '(bind x (draft "a")\n  (judge "q" x',
            "p.sexp:2:3: this ( is never closed",
        ),
        ("p.sexp", '(draft "a\\q")', "p.sexp:1:10: unknown escape \\q"),
        (
            "p.sexp",
            '(defatom a (params x) (instructions "{{y}}"))',
            "p.sexp:1:2: defatom a: instructions: {{y}} is not a declared parameter",
        ),
        (
            "p.sexp",
            '(defatom a (instructions "go")\n'
            '  (context_management (inherit_context "full")\n'
            '    (fresh_context "enabled")))',
            "p.sexp:1:2: defatom a: context_management: fresh_context",
        ),
        (
            "t.toml",
            'params = ["x"]\ninstructions = """\nabout {{x}} and {{y}}"""\n',
            "t.toml:3:17: instructions: {{y}} is not a declared parameter",
        ),
        (
            "t.yaml",
            "instructions: go\ncolour: red\n",
            "t.yaml:2:1: colour: unknown key",
        ),
    ],
)
def test_a_problem_is_one_line_at_its_place_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    expected: str,
) -> None:
    (tmp_path / name).write_text(text)
    assert steward("task", "validate", str(tmp_path / name)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"{tmp_path}/{expected}"), err


def _run_example(
    capsys: pytest.CaptureFixture[str],
    *options: str,
    program: Path = EXAMPLES / "director-evaluator.sexp",
    task: str = "owls",
) -> list[str]:
    """``steward OPTIONS task run PROGRAM`` over the example's templates
    with topic owls, as task ``task``: the lines it printed (exit 0)."""
    code = steward(
        *options,
        "task",
        "run",
        str(program),
        "--templates",
        str(EXAMPLES / "templates"),
        "--arg",
        "topic=owls",
        "--id",
        task,
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    return out


def test_the_example_runs_shows_lists_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "log.db")
    script = str(EXAMPLES / "director-evaluator.script.yaml")
    out = _run_example(capsys, "--db", db, "--script", script)
    assert out[0].startswith("task owls: ")
    assert (
        out[1] == '  call 1: draft {"brief": "Write it for a child.", "topic": "owls"}'
    )
    assert [line.split(":")[0] for line in out if line.startswith("  call")] == [
        "  call 1",
        "  call 1 COMPLETE (1 turns, 105 tokens)",
        "  call 2",
        "  call 2 COMPLETE (1 turns, 91 tokens)",
        "  call 3",
        "  call 3 COMPLETE (1 turns, 154 tokens)",
        "  call 4",
        "  call 4 COMPLETE (1 turns, 115 tokens)",
    ]
    assert out[-2].startswith("task owls completed: Owls are birds that hunt at night.")
    assert out[-1] == "owls"

    assert steward("--db", db, "task", "show", "owls") == 0
    tree = capsys.readouterr().out.splitlines()
    assert tree[0].startswith("task owls  completed")
    assert "  director-evaluator iteration 1 of 3" in tree
    assert "  director-evaluator iteration 2 of 3" in tree
    assert any(line.strip().startswith("call 4: judge") for line in tree)
    assert "  controller: stop" in tree

    assert steward("--db", db, "task", "show", "owls", "-o", "json") == 0
    shown = json.loads(capsys.readouterr().out)
    calls = [row for row in shown["tree"] if row["what"] == "call"]
    assert [c["call"] for c in calls] == [1, 2, 3, 4]
    assert calls[1]["content"].startswith("Add what owls eat")

    assert steward("--db", db, "task", "list", "-o", "json") == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["id"], row["status"], row["calls"]) == ("owls", "completed", 4)

    assert steward("--db", db, "replay", "task.owls", "--verify") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"

    assert steward("--db", db, "events", "export", "task.owls") == 0
    exported = capsys.readouterr().out.splitlines()
    assert json.loads(exported[0])["event"]["type"] == "TaskCreated"

    before = _rows(tmp_path / "log.db")
    assert steward("--db", db, "projections", "rebuild") == 0
    capsys.readouterr()
    assert _rows(tmp_path / "log.db") == before

    assert steward("--db", db, "task", "cancel", "owls") == 1
    assert "task owls is completed: it cannot be cancelled" in capsys.readouterr().err


def _rows(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with sqlite3.connect(db) as conn:
        tasks = conn.execute("SELECT * FROM tasks ORDER BY task_id").fetchall()
        steps = conn.execute("SELECT * FROM task_steps ORDER BY call").fetchall()
    return tasks, steps


def test_a_failed_task_prints_its_error_and_partial_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.sexp").write_text(
        '(defatom ask (params q) (instructions "{{q}}") (subtasks false))\n'
        '(bind first (ask "one"))\n'
        '(loop 2 (bind last (ask "again")) (continue last))'
    )
    (tmp_path / "s.yaml").write_text('replies: ["1", "2", "3"]\n')
    options = ["--db", str(tmp_path / "log.db"), "--script", str(tmp_path / "s.yaml")]
    code = steward(*options, "task", "run", str(tmp_path / "p.sexp"), "--id", "t")
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[-5:] == [
        "task t failed: limit iterations: the loop reached its 2 iterations",
        '  last iteration: {"status": "COMPLETE", "content": "3", "notes": {}}',
        '  first = {"status": "COMPLETE", "content": "1", "notes": {}}',
        '  last = {"status": "COMPLETE", "content": "3", "notes": {}}',
        "t",
    ]


@pytest.mark.parametrize(
    ("tools", "why"),
    [
        ('["script.run"]', "script.run is offered to no model"),
        ('["files.write"]', "files.write needs a person's approval"),
    ],
)
def test_a_template_tool_a_task_cannot_give_its_model_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tools: str, why: str
) -> None:
    """A tool offered to no model, or one that needs approval (which a
    task's calls do not wait for), is refused before anything is recorded."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "w.toml").write_text(
        f'instructions = "write"\ntools = {tools}\n'
    )
    (tmp_path / "p.sexp").write_text("(w)")
    (tmp_path / "steward.toml").write_text(
        '[tools]\nrequire_approval = ["files.write"]\n'
    )
    code = steward(
        "--config",
        str(tmp_path / "steward.toml"),
        "--db",
        str(tmp_path / "log.db"),
        "task",
        "run",
        str(tmp_path / "p.sexp"),
        "--templates",
        str(tmp_path / "templates"),
    )
    assert code == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "log.db").exists()


def test_a_loop_out_of_iterations_gives_its_last_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example with a judge that never accepts: after max-iterations 3
    the task completes with the third draft (hoidn/llm's loop), and `task
    show` says the limit was reached."""
    replies = []
    for n in (1, 2, 3):
        replies.append(f"Draft {n} about owls.")
        replies.append(
            {
                "json": {
                    "status": "COMPLETE",
                    "content": f"Not yet ({n}).",
                    "notes": {"verdict": "revise"},
                }
            }
        )
    (tmp_path / "s.json").write_text(json.dumps({"replies": replies}))
    db = str(tmp_path / "log.db")
    out = _run_example(capsys, "--db", db, "--script", str(tmp_path / "s.json"))
    assert out[-2].startswith("task owls completed: Draft 3 about owls.")
    assert steward("--db", db, "task", "show", "owls") == 0
    tree = capsys.readouterr().out.splitlines()
    assert tree[0].startswith("task owls  completed")
    assert (
        "  max-iterations 3 reached without a stop: the last executor result" in tree
    ), tree
    assert steward("--db", db, "replay", "task.owls", "--verify") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verify: ok"


def test_a_loop_of_max_iterations_0_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = (EXAMPLES / "director-evaluator.sexp").read_text()
    (tmp_path / "p.sexp").write_text(
        program.replace("(max-iterations 3)", "(max-iterations 0)")
    )
    (tmp_path / "s.json").write_text(json.dumps({"replies": []}))
    options = ["--db", str(tmp_path / "log.db"), "--script", str(tmp_path / "s.json")]
    out = _run_example(capsys, *options, program=tmp_path / "p.sexp", task="none")
    assert not [line for line in out if line.startswith("  call")]
    assert out[-2].startswith("task none completed:")
    assert steward(*options, "events", "export", "task.none") == 0
    exported = [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()]
    assert [e["type"] for e in exported] == ["TaskCreated", "TaskCompleted"]
    assert exported[-1].get("value") is None  # nil (a default: left out)
    assert exported[-1]["output"] == ""
