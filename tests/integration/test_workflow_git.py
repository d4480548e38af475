"""`steward workflow run --repo`: the phases work in a git worktree of a real
repository, on a branch named by a template; when the run ends a pull request
is asked for (``gh``) and the worktree is removed, what it holds committed to
the branch. Bad input is one line and exit 2, with nothing recorded.

Each test has a repository of its own, made with the real ``git``; ``PATH``
holds only ``git`` (and, where a test puts one there, a stand-in ``gh``), so
``gh`` and ``az`` are reliably absent, and git's global and system settings
are out of reach.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from steward import cli
from steward.actors.run.events import RunCreated
from steward.actors.workflow.definition import load_definition, worktree
from steward.bus import SqliteEventLog
from steward.config import load_settings
from steward.kinds import KINDS

GIT = shutil.which("git") or ""  # found before the tests narrow PATH
if not GIT:
    pytest.skip("the git command is not installed", allow_module_level=True)

SCRIPT = """\
replies:
  - json:
      type: tool_call
      name: files.write
      args: {path: hello.txt, content: "hello\\n"}
  - json: {type: finish, output: "Wrote hello.txt."}
  - json: {type: tool_call, name: files.list, args: {path: "."}}
  - json: {type: finish, output: "Approved.", metadata: {routingDecision: approved}}
"""
"""The model of both phases: implement writes hello.txt, review approves."""

TEMPLATE = "feature/{issue-id}-{tree-key}/{run-id}"
BRANCH = "feature/JIRA-12-build/wf-1"
NOW = datetime(2024, 3, 5, 14, 7, 9, tzinfo=UTC)


def workflow_file(**git: Any) -> str:
    """A two-phase workflow ``build`` (implement, then review) whose ``[git]``
    table holds ``git``."""
    table = "".join(f"{key} = {json.dumps(value)}\n" for key, value in git.items())
    return f"""\
[workflow]
key = "build"
version = 1

[git]
{table}
[[nodes]]
key = "implement"
provider = "default"

[[nodes]]
key = "review"
provider = "default"

[[edges]]
source = "implement"
target = "review"
priority = 1
auto = true
"""


def git(*argv: str, cwd: Path) -> str:
    """``git ARGV`` in ``cwd``: its output, stripped (a failure fails the test)."""
    done = subprocess.run(
        [GIT, *argv], cwd=cwd, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> None:
    who = ("-c", "user.name=t", "-c", "user.email=t@t")
    git("add", ".", cwd=repo)
    git(*who, "commit", "-qm", message, cwd=repo)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh directory to run in, with ``repo`` (one commit on ``main``), a
    steward.toml without the planning gate, the script ``s.yaml``, and a
    ``bin`` directory that is all of ``PATH`` (holding only ``git``)."""
    path = tmp_path / "bin"
    path.mkdir()
    (path / "git").symlink_to(GIT)
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in ("STEWARD_WORKFLOW_BRANCH_TEMPLATE", "STEWARD_WORKFLOW_WORKTREES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README").write_text("hi\n")
    commit_all(repo, "init")
    (tmp_path / "steward.toml").write_text("[run]\nplanning_gate = false\n")
    (tmp_path / "s.yaml").write_text(SCRIPT)
    return tmp_path


def steward(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``steward --db log.db ARGV`` in-process: exit status, stdout, stderr."""
    code = cli.main(["--db", "log.db", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``steward workflow run wf.toml --repo repo --id wf-1 ARGV``, scripted."""
    base = ("--script", "s.yaml", "workflow", "run", "wf.toml", "--repo", "repo")
    return steward(capsys, *base, "--id", "wf-1", *argv)


def streams(db: Path, prefix: str) -> list[str]:
    """The streams named ``prefix...`` in the embedded log ``db`` (none if absent)."""
    if not db.exists():
        return []

    async def read() -> list[str]:
        async with await SqliteEventLog.open(db, union=KINDS.union) as log:
            return await log.streams(prefix)

    return asyncio.run(read())


def run_created(db: Path, run_id: str) -> RunCreated:
    async def read() -> RunCreated:
        async with await SqliteEventLog.open(db, union=KINDS.union) as log:
            first = (await log.read(f"run.{run_id}"))[0].event
        assert isinstance(first, RunCreated)
        return first

    return asyncio.run(read())


def branches(repo: Path) -> list[str]:
    return git("branch", "--format=%(refname:short)", cwd=repo).splitlines()


def worktrees(repo: Path) -> list[str]:
    """The paths of ``repo``'s worktrees, the main one first."""
    listed = git("worktree", "list", "--porcelain", cwd=repo).splitlines()
    return [
        line.removeprefix("worktree ")
        for line in listed
        if line.startswith("worktree ")
    ]


def tree_of(here: Path, workflow_id: str = "wf-1") -> Path:
    """Where the default ``[workflow] worktrees`` puts a run's worktree."""
    return (here / ".steward" / "worktrees" / workflow_id).resolve()


# --- a run in a worktree ------------------------------------------------------


def test_a_run_works_in_its_worktree_and_leaves_the_work_on_its_branch(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """The phases write in the worktree (not the cwd), on the file's template's
    branch; with gh missing the run completes and says so, and the worktree is
    removed with the phase's file committed to the branch."""
    (here / "wf.toml").write_text(
        workflow_file(branch_template=TEMPLATE, pull_request="gh")
    )
    code, out, err = run(capsys, "--issue", "JIRA 12")
    tree, repo = tree_of(here), here / "repo"
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert f"  worktree {tree} on branch {BRANCH} (main)" in lines
    assert (
        f"  git: gh is not installed: no pull request was opened; branch {BRANCH} "
        "holds the work (open one by hand)"
    ) in lines
    head = git("rev-parse", "--short", BRANCH, cwd=repo)
    removed = f"  git: removed {tree}; branch {BRANCH} at {head}, 1 change"
    assert f"{removed} committed" in lines
    assert lines[-2:] == ["workflow wf-1 completed", "wf-1"]

    assert run_created(here / "log.db", "wf-1:implement:1").workspace == str(tree)
    assert not (here / "hello.txt").exists()
    assert not (repo / "hello.txt").exists()
    assert git("show", f"{BRANCH}:hello.txt", cwd=repo) == "hello"
    added = git("diff", "--name-status", f"main...{BRANCH}", cwd=repo)
    assert added == "A\thello.txt"
    assert branches(repo) == [BRANCH, "main"]
    assert not tree.exists()
    assert worktrees(repo) == [str(repo.resolve())]

    code, out, _ = steward(capsys, "replay", "workflow.wf-1", "--verify")
    assert (code, out.splitlines()[-1]) == (0, "verify: ok")
    code, out, _ = steward(capsys, "runs", "show", "wf-1")
    assert code == 0
    assert out.splitlines()[:2] == [
        "workflow wf-1  completed  build v1",
        "path: implement > review",
    ]


def test_a_kept_worktree_stays_on_its_branch(
    capsys: pytest.CaptureFixture[str], here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``keep = true`` the worktree outlives the run, checked out on its
    branch, the phase's file in it; ``--branch`` (a template) names the branch
    over the file's and the environment's templates."""
    monkeypatch.setenv("STEWARD_WORKFLOW_BRANCH_TEMPLATE", "env/{run-id}")
    (here / "wf.toml").write_text(
        workflow_file(branch_template="file/{run-id}", keep=True)
    )
    code, out, err = run(capsys, "--branch", "cli/{node-key}-{short-hash}")
    tree, repo = tree_of(here), here / "repo"
    branch = f"cli/implement-{git('rev-parse', '--short', 'main', cwd=repo)}"
    assert (code, err) == (0, "")
    assert f"  worktree {tree} on branch {branch} (main)" in out.splitlines()
    assert not any(line.startswith("  git: removed") for line in out.splitlines())
    assert out.splitlines()[-2:] == ["workflow wf-1 completed", "wf-1"]
    assert worktrees(repo) == [str(repo.resolve()), str(tree)]
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=tree) == branch
    assert (tree / "hello.txt").read_text() == "hello\n"
    assert branches(repo) == [branch, "main"]


# --- the branch's name --------------------------------------------------------


@pytest.mark.parametrize(
    ("branch", "file_template", "env_template", "issue", "expected"),
    [
        pytest.param(
            "cli/{node-key}-{short-hash}",
            "file/{run-id}",
            "env/{run-id}",
            None,
            "cli/implement-{short}",
            id="--branch-first",
        ),
        pytest.param(
            None,
            TEMPLATE,
            "env/{run-id}",
            "JIRA 12",
            "feature/JIRA-12-build/wf-7",
            id="file-template-next",
        ),
        pytest.param(
            None,
            None,
            "env/{date}/{timestamp}",
            None,
            "env/2024-03-05/20240305140709",
            id="environment-next",
        ),
        pytest.param(None, None, None, None, "steward/build/wf-7", id="default"),
        pytest.param(None, TEMPLATE, None, None, "feature/build/wf-7", id="no-issue"),
        pytest.param(
            "{tree-key}/{issue-id}",
            None,
            None,
            "JIRA 12: fix ~it.lock",
            "build/JIRA-12-fix-it",
            id="sanitized",
        ),
    ],
)
async def test_the_branch_is_named_by_the_first_template_given(
    here: Path,
    branch: str | None,
    file_template: str | None,
    env_template: str | None,
    issue: str | None,
    expected: str,
) -> None:
    """``--branch`` over the file's ``branch_template`` over
    ``STEWARD_WORKFLOW_BRANCH_TEMPLATE`` over ``steward/{tree-key}/{run-id}``;
    the tokens filled and the name made one git accepts."""
    git_table = {} if file_template is None else {"branch_template": file_template}
    (here / "wf.toml").write_text(workflow_file(**git_table))
    env = (
        {}
        if env_template is None
        else {"STEWARD_WORKFLOW_BRANCH_TEMPLATE": env_template}
    )
    settings = load_settings(env=env)
    repo = here / "repo"
    tree = await worktree(
        load_definition("wf.toml", settings),
        settings,
        "wf-7",
        repository="repo",
        branch=branch,
        issue=issue,
        now=NOW,
    )
    assert tree is not None
    name = expected.format(short=git("rev-parse", "--short", "main", cwd=repo))
    assert (tree.branch, tree.base) == (name, "main")
    where = (str(repo.resolve()), str(tree_of(here, "wf-7")))
    assert (tree.repository, tree.path) == where
    assert git("check-ref-format", "--branch", tree.branch, cwd=repo) == name
    assert branches(repo) == ["main"]  # made when the run asks for it, not here


async def test_the_short_hash_is_the_base_branchs(here: Path) -> None:
    """``{short-hash}`` is the commit ``--base`` names, not the current one."""
    repo = here / "repo"
    git("switch", "-q", "-c", "dev", cwd=repo)
    (repo / "dev.txt").write_text("dev\n")
    commit_all(repo, "dev")
    git("switch", "-q", "main", cwd=repo)
    (here / "wf.toml").write_text(workflow_file())
    settings = load_settings(env={})
    tree = await worktree(
        load_definition("wf.toml"),
        settings,
        "wf-7",
        repository="repo",
        base="dev",
        branch="{short-hash}",
    )
    assert tree is not None
    dev = git("rev-parse", "--short", "dev", cwd=repo)
    assert dev != git("rev-parse", "--short", "main", cwd=repo)
    assert (tree.branch, tree.base) == (dev, "dev")


# --- a pull request -----------------------------------------------------------

GH = """\
#!{python}
# A stand-in for GitHub's `gh pr create`: like the real one it refuses a head
# branch the remote does not have, prints the new pull request's URL on
# stdout and exits 0. It records its arguments and directory.
import json, os, subprocess, sys

argv = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(json.dumps({{"argv": argv, "cwd": os.getcwd()}}) + "\\n")
if argv[:2] != ["pr", "create"]:
    sys.exit(f"unknown command {{argv[:2]}}")
head, base = argv[argv.index("--head") + 1], argv[argv.index("--base") + 1]
for ref in (head, base):
    known = ["git", "ls-remote", "--exit-code", "--heads", "origin", ref]
    if subprocess.run(known, capture_output=True).returncode != 0:
        sys.exit(f"pull request create failed: {{ref}} is not on origin")
creating = f"Creating pull request for {{head}} into {{base}} in owner/repo"
print(creating, file=sys.stderr)
print("https://github.com/owner/repo/pull/7")
"""


def test_a_pull_request_is_opened_with_gh_after_a_push_to_origin(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """With ``pull_request = "gh"`` and an origin, the branch (the phase's
    commit on it) is pushed, ``gh pr create`` is called with the base, head,
    title and body, its URL printed, and the worktree removed."""
    repo, origin, calls = here / "repo", here / "origin.git", here / "gh-calls.jsonl"
    git("init", "-q", "--bare", "-b", "main", str(origin), cwd=here)
    git("remote", "add", "origin", str(origin), cwd=repo)
    git("push", "-q", "origin", "main", cwd=repo)
    gh = here / "bin" / "gh"
    gh.write_text(GH.format(python=sys.executable, calls=str(calls)))
    gh.chmod(0o755)
    (here / "wf.toml").write_text(
        workflow_file(branch_template=TEMPLATE, pull_request="gh")
    )
    code, out, err = run(capsys, "--issue", "JIRA 12")
    tree = tree_of(here)
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert "  git: https://github.com/owner/repo/pull/7" in lines
    assert lines[-2:] == ["workflow wf-1 completed", "wf-1"]

    pushed = git("--git-dir", str(origin), "rev-parse", BRANCH, cwd=here)
    assert pushed == git("rev-parse", BRANCH, cwd=repo)
    assert git("--git-dir", str(origin), "show", f"{BRANCH}:hello.txt", cwd=here) == (
        "hello"
    )
    [call] = [json.loads(line) for line in calls.read_text().splitlines()]
    argv = call["argv"]
    assert argv[:8] == [
        "pr",
        "create",
        "--base",
        "main",
        "--head",
        BRANCH,
        "--title",
        "build: workflow run wf-1",
    ]
    assert argv[8] == "--body"
    assert argv[9].startswith("Phases of this workflow run:\n")
    assert "- review: attempt 1, completed, approved" in argv[9].splitlines()
    assert call["cwd"] == str(tree)
    removal = [line for line in lines if line.startswith("  git: removed")]
    short = git("rev-parse", "--short", BRANCH, cwd=repo)
    assert removal == [f"  git: removed {tree}; branch {BRANCH} at {short}"]
    assert not tree.exists()
    assert worktrees(repo) == [str(repo.resolve())]


# --- bad input ----------------------------------------------------------------


def assert_refused(
    done: tuple[int, str, str], here: Path, message: str, starts: bool = False
) -> None:
    """Exit 2, ``message`` as the one line on stderr (or its start), and
    nothing made: no workflow run, no worktree, no branch."""
    code, out, err = done
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.endswith("\n")
    if starts:
        assert err.startswith(f"steward: {message}")
    else:
        assert err == f"steward: {message}\n"
    assert streams(here / "log.db", "workflow.") == []
    assert not (here / ".steward" / "worktrees").exists()
    assert branches(here / "repo") == ["main"]


TOKENS = "the tokens are {tree-key}, {run-id}, {node-key}, {issue-id}, {timestamp}, "
TOKENS += "{short-hash}, {date}"


def test_a_repo_that_is_no_git_repository_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``--repo`` a plain directory: git's own words, one line, exit 2."""
    (here / "plain").mkdir()
    (here / "wf.toml").write_text(workflow_file())
    done = steward(
        capsys, "--script", "s.yaml", "workflow", "run", "wf.toml", "--repo", "plain"
    )
    problem = "plain: repository: `git rev-parse --show-toplevel` failed in plain: "
    assert_refused(done, here, problem + "fatal: not a git repository", starts=True)


def test_a_repo_that_does_not_exist_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``--repo`` a directory there is not is said so, not blamed on git."""
    (here / "wf.toml").write_text(workflow_file())
    done = steward(
        capsys, "--script", "s.yaml", "workflow", "run", "wf.toml", "--repo", "absent"
    )
    assert_refused(done, here, "absent: repository: absent does not exist")


def test_a_base_branch_that_does_not_exist_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``--base nope`` names the base that is not there."""
    (here / "wf.toml").write_text(workflow_file())
    done = run(capsys, "--base", "nope")
    message = (
        "repo: base: no branch or commit 'nope' to start the worktree's branch from"
    )
    assert_refused(done, here, message)


@pytest.mark.parametrize("action", ["validate", "run"])
def test_a_file_branch_template_with_an_unknown_token_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path, action: str
) -> None:
    """``[git] branch_template`` naming ``{nope}`` is the file's problem."""
    (here / "wf.toml").write_text(workflow_file(branch_template="x/{nope}"))
    argv = ["--script", "s.yaml", "workflow", action, "wf.toml"]
    done = steward(capsys, *argv, *(["--repo", "repo"] if action == "run" else []))
    problem = f"unknown token {{nope}} in 'x/{{nope}}'; {TOKENS}"
    assert_refused(done, here, f"wf.toml: git branch_template: {problem}")


def test_a_branch_option_with_an_unknown_token_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``--branch`` naming ``{nope}`` is said to be the option's."""
    (here / "wf.toml").write_text(workflow_file())
    done = run(capsys, "--branch", "x/{nope}")
    assert_refused(
        done, here, f"--branch: unknown token {{nope}} in 'x/{{nope}}'; {TOKENS}"
    )


def test_a_settings_branch_template_with_an_unknown_token_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``STEWARD_WORKFLOW_BRANCH_TEMPLATE`` naming ``{nope}`` is said to be the
    ``[workflow] branch_template`` setting's."""
    monkeypatch.setenv("STEWARD_WORKFLOW_BRANCH_TEMPLATE", "x/{nope}")
    (here / "wf.toml").write_text(workflow_file())
    done = run(capsys)
    problem = f"unknown token {{nope}} in 'x/{{nope}}'; {TOKENS}"
    assert_refused(done, here, f"settings: workflow.branch_template: {problem}")


# --- a worktree that cannot be made -------------------------------------------


def test_a_worktree_that_cannot_be_made_fails_the_run_before_any_phase(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """``[workflow] worktrees`` under a regular file: the run fails saying its
    worktree could not be made and why, exit 1; no phase run, no branch."""
    (here / "afile").write_text("not a directory\n")
    (here / "steward.toml").write_text(
        '[run]\nplanning_gate = false\n[workflow]\nworktrees = "afile/trees"\n'
    )
    (here / "wf.toml").write_text(workflow_file())
    code, out, err = run(capsys)
    trees = (here / "afile" / "trees").resolve()
    reason = (
        f"its worktree could not be made: the directory {trees} could not be "
        "made: Not a directory"
    )
    assert (code, err) == (1, "")
    assert out.splitlines()[-2:] == [f"workflow wf-1 failed: {reason}", "wf-1"]
    assert not any(line.startswith("  phase") for line in out.splitlines())
    assert streams(here / "log.db", "run.") == []
    assert branches(here / "repo") == ["main"]
    code, out, _ = steward(capsys, "runs", "show", "wf-1")
    assert code == 0
    assert out.splitlines()[:2] == [
        f"workflow wf-1  failed  build v1  ({reason})",
        "path: (no phase started)",
    ]


def test_a_branch_that_exists_already_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """A run's branch must be new: one there is already (another run's, or
    main) is refused before anything is recorded, naming it."""
    (here / "wf.toml").write_text(workflow_file())
    git("branch", "taken", cwd=here / "repo")
    code, out, err = run(capsys, "--branch", "taken")
    assert (code, out) == (2, "")
    assert err.startswith("steward: repo: branch: branch taken exists already")
    assert err.count("\n") == 1
    assert streams(here / "log.db", "workflow.") == []


def test_a_detached_head_needs_a_base(
    capsys: pytest.CaptureFixture[str], here: Path
) -> None:
    """On a detached HEAD there is no branch to start from: --base is asked for."""
    (here / "wf.toml").write_text(workflow_file())
    git("checkout", "-q", "--detach", cwd=here / "repo")
    code, out, err = run(capsys)
    assert (code, out) == (2, "")
    assert err.startswith("steward: repo: base: the repository is on a detached HEAD")
    assert streams(here / "log.db", "workflow.") == []
    assert run(capsys, "--base", "main")[0] == 0


@pytest.mark.parametrize("bad", ["../x", "a b", "-x", "a.b"])
def test_an_id_that_is_no_plain_name_is_refused(
    capsys: pytest.CaptureFixture[str], here: Path, bad: str
) -> None:
    """--id names a stream, runs and a directory: a path or a space is refused."""
    (here / "wf.toml").write_text(workflow_file())
    base = ("--script", "s.yaml", "workflow", "run", "wf.toml", "--repo", "repo")
    done = steward(capsys, *base, f"--id={bad}")
    assert_refused(
        done, here, f"--id {bad!r}: letters, digits, _ and - only", starts=True
    )
