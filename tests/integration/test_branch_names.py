"""Worktree branch names: whatever a template and its tokens make, git
takes the name (`git check-ref-format --branch`, the real git)."""

from __future__ import annotations

import subprocess

import hypothesis
import pytest
from hypothesis import strategies as st

from steward.actors.workflow.definition import BRANCH_TOKENS, branch_name, sanitize_ref
from steward.errors import WorkflowFileError


def _git_takes(name: str) -> bool:
    done = subprocess.run(
        ["git", "check-ref-format", "--branch", name], capture_output=True
    )
    return done.returncode == 0


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(name=st.text(max_size=40))
def test_any_text_is_made_a_branch_name_git_takes(name: str) -> None:
    """Spaces, control characters, ~^:?*[\\, "..", "@{", leading dots and
    dashes, ".lock", empty parts: whatever comes, git takes the result."""
    branch = sanitize_ref(name)
    assert _git_takes(branch), (name, branch)
    assert sanitize_ref(branch) == branch  # a good name is left as it is


@pytest.mark.parametrize(
    ("template", "branch"),
    [
        ("steward/{tree-key}/{run-id}", "steward/design-review/wf-1"),
        ("feature/{issue-id}-{node-key}", "feature/JIRA-12-design"),
        ("{date}/{timestamp}-{short-hash}", "2026-11-25/20261125083000-abc1234"),
        ("x/{issue-id}/y", "x/JIRA-12/y"),
        ("../{tree-key}..lock", "design-review"),
        ("HEAD", "steward-branch"),
    ],
)
def test_a_template_fills_its_tokens(template: str, branch: str) -> None:
    """Each token is filled; the name is then made one git takes."""
    tokens = {
        "tree-key": "design-review",
        "run-id": "wf-1",
        "node-key": "design",
        "issue-id": "JIRA 12",
        "date": "2026-11-25",
        "timestamp": "20261125083000",
        "short-hash": "abc1234",
    }
    assert set(tokens) == set(BRANCH_TOKENS)
    assert branch_name(template, tokens) == branch
    assert _git_takes(branch)


def test_an_unknown_token_is_named() -> None:
    """A token that is none of Alphred's is an error naming it and the known."""
    with pytest.raises(WorkflowFileError, match=r"unknown token \{nope\}.*\{run-id\}"):
        branch_name("steward/{nope}", {})
