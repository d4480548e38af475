"""Run budgets: tokens and cost, checked before each model call."""

from __future__ import annotations

import pytest
from helpers_run import RUN, asks, kinds, started
from support import act

from steward import replay
from steward.actors.run.events import ApprovalDecided, BudgetExceeded, RunFailed
from steward.events import LlmResponded, Usage
from steward.kinds import KINDS


def reply(story, tokens: int = 0, cost: float = 0.0) -> list:
    """The model answers with a progress command that used ``tokens``/``cost``."""
    return story.when(
        LlmResponded(
            request_id=story.llm,
            text=act(type="decision", content="step"),
            usage=Usage(input_tokens=tokens, output_tokens=0),
            cost_usd=cost,
        )
    )


def test_a_spent_token_budget_fails_the_run_before_the_next_call() -> None:
    story = started(token_budget=1000, planning_gate=False)
    assert kinds(reply(story, tokens=600)) == ["DecisionRecorded", "LlmRequested"]
    decisions = reply(story, tokens=400)
    assert decisions[1:] == [
        BudgetExceeded(
            request_id=f"{RUN}/budget/3",
            kind="tokens",
            used=1000,
            limit=1000,
            policy="fail",
        ),
        RunFailed(reason="tokens budget spent: 1000 of 1000"),
    ]
    assert story.state.status == "failed"
    assert replay.verify(story.records(), kinds=KINDS) is None


def test_a_spent_cost_budget_fails_the_run() -> None:
    story = started(cost_budget_usd=0.01, planning_gate=False)
    reply(story, cost=0.004)
    decisions = reply(story, cost=0.007)
    assert kinds(decisions) == ["DecisionRecorded", "BudgetExceeded", "RunFailed"]
    assert decisions[1].kind == "cost"
    assert decisions[1].used == pytest.approx(0.011)


@pytest.mark.parametrize("approved", [True, False])
def test_pause_waits_for_a_person_then_goes_on_or_fails(approved: bool) -> None:
    story = started(token_budget=100, budget_policy="pause", planning_gate=False)
    decisions = reply(story, tokens=150)
    assert kinds(decisions) == ["DecisionRecorded", "BudgetExceeded"]
    assert story.state.status == "waiting"
    hold = story.state.budget_hold
    assert hold == f"{RUN}/budget/2"
    assert story.refuses(ApprovalDecided(request_id=f"{RUN}/budget/9", approved=True))
    decisions = story.when(
        ApprovalDecided(request_id=hold, approved=approved, reason="too dear")
    )
    if approved:
        assert kinds(decisions) == ["RunResumed", "LlmRequested"]
        assert decisions[1] == asks(story, 2)
        assert story.state.status == "running"
        # the budget stays lifted: more spending asks no more
        assert kinds(reply(story, tokens=500)) == ["DecisionRecorded", "LlmRequested"]
    else:
        assert decisions == [RunFailed(reason="budget spent; denied: too dear")]
        assert story.state.status == "failed"
    assert replay.verify(story.records(), kinds=KINDS) is None


def test_no_budget_means_no_limit() -> None:
    story = started(planning_gate=False, max_iterations=50)
    for _ in range(3):
        assert kinds(reply(story, tokens=10**9, cost=10.0))[-1] == "LlmRequested"
