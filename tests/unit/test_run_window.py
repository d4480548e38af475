"""The prompt's transcript window, by binary search, equals the plain definition."""

from __future__ import annotations

import hypothesis
import msgspec
from hypothesis import strategies as st

from steward.actors.run import prompt as run_prompt
from steward.actors.run import state as run_state
from steward.actors.run.events import RunSettings
from steward.events import ChatMessage


def reference(transcript: tuple[ChatMessage, ...], limit: int, budget: int) -> list:
    """The newest entries (at most ``limit``) whose estimated tokens fit ``budget``,
    at least one; no leading tool message unless it is the only one."""
    kept: list[ChatMessage] = []
    spent = 0
    for entry in reversed(transcript[-max(limit, 1) :]):
        cost = len(entry.content) // 4 + 1
        if kept and spent + cost > budget:
            break
        spent += cost
        kept.append(entry)
    kept.reverse()
    while len(kept) > 1 and kept[0].role == "tool":
        kept.pop(0)
    return kept


messages = st.builds(
    ChatMessage,
    role=st.sampled_from(["user", "assistant"]),
    content=st.text(max_size=400),
)


@hypothesis.settings(max_examples=300, database=None)
@hypothesis.given(
    transcript=st.lists(messages, max_size=60),
    limit=st.integers(0, 70),
    budget=st.integers(1, 3000),
)
def test_window_matches_the_definition(
    transcript: list[ChatMessage], limit: int, budget: int
) -> None:
    state = run_state.Run(
        settings=RunSettings(transcript_limit=limit, transcript_token_limit=budget)
    )
    for message in transcript:
        transcript, totals = run_state._said(state, message)
        state = msgspec.structs.replace(
            state, transcript=transcript, transcript_totals=totals
        )
    assert list(run_prompt._window(state)) == reference(
        tuple(transcript), limit, budget
    )
