"""Given/when/then helpers for the run decider's tests.

A `Story` is a run driven through the real decider: every input goes through
`decide_and_fold` with a prompt cache kept for the story, as the host's is
(checked against `decide`, which uses none), and an accepted input is folded
together with its decisions, exactly as the host commits them. So "given"
events are the ones the decider itself produced, and each `when` returns the
decisions to assert on ("then").

Every accepted commit is also checked for the one invariant all scenarios share:
an `LlmRequested` carries the hash of the prompt built from the state after
folding the input and all of its decisions.
"""

from __future__ import annotations

from typing import Any

import msgspec
from support import act

from steward.actors.prompt import Prompt, PromptCache, prompt_hash
from steward.actors.run import decider as run_actor
from steward.actors.run import state as run_state
from steward.actors.run.events import LATEST_REVISION, RunCreated, RunSettings
from steward.events import (
    ChatMessage,
    Event,
    LlmRequested,
    LlmResponded,
    Recorded,
    ToolCall,
    ToolResulted,
    ToolSpec,
)

RUN = "run-1"
STREAM = f"run.{RUN}"

READ = ToolSpec(
    name="files.read",
    description="Read a file",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
WRITE = ToolSpec(name="files.write", description="Write a file")
DELETE = ToolSpec(name="files.delete", requires_approval=True)


REQUIREMENTS = act(type="note", category="requirements", content="what is asked")
PLAN = act(type="note", category="plan", content="how to do it")


def settings(**overrides: Any) -> RunSettings:
    """Run settings with the three test tools, of a run created now (the
    latest revision); ``overrides`` win."""
    fields = {"tools": (READ, WRITE, DELETE), "revision": LATEST_REVISION}
    return RunSettings(**{**fields, **overrides})


def created(**overrides: Any) -> RunCreated:
    """The `RunCreated` of run ``RUN`` asking to summarize a file."""
    fields: dict[str, Any] = {
        "run_id": RUN,
        "input_text": "Summarize notes.txt",
        "settings": settings(),
        "at": 1_700_000_000.0,
    }
    return RunCreated(**{**fields, **overrides})


class Story:
    """A run driven through ``decide``; the log grows with each accepted input."""

    def __init__(self) -> None:
        self.state: run_state.Run = run_state.initial
        self.log: list[Event] = []
        self.cache = PromptCache()

    # -- when -----------------------------------------------------------------

    def when(self, input: Event) -> list[Any]:
        """Decide ``input`` and commit it with its decisions; it must be accepted."""
        before = msgspec.msgpack.encode(self.state)
        decided = run_actor.decide_and_fold(input, self.state, self.cache)
        assert decided is not None, f"refused: {input!r}"
        decisions, after, prompt = decided
        assert decisions == run_actor.decide(input, self.state)
        state = self.state
        for event in (input, *decisions):
            state = run_state.evolve(state, event)
        assert after == state, "decide_and_fold's state is not the folded one"
        # states are values: deciding and evolving copy, never change, theirs
        assert msgspec.msgpack.encode(self.state) == before, "the state was changed"
        assert run_state.initial == run_state.Run(), "the initial state was changed"
        requested = [d for d in decisions if isinstance(d, LlmRequested)]
        assert prompt is None or prompt == run_actor.build_prompt(state)
        assert prompt is None or requested[-1] is decisions[-1]
        for decision in requested:
            expected = prompt_hash(run_actor.build_prompt(state))
            assert decision.prompt_hash == expected, (
                f"{decision.request_id}: prompt_hash is not the hash of the "
                "prompt built from the state after this commit"
            )
        self.state = state
        self.log += [input, *decisions]
        return list(decisions)

    def refuses(self, input: Event) -> bool:
        """Whether ``decide`` refuses ``input`` (nothing is committed either way)."""
        return run_actor.decide(input, self.state) is None

    def say(self, text: str, *, at: float = 1_700_000_100.0) -> list[Any]:
        """The model answers the pending request with ``text``."""
        return self.when(LlmResponded(request_id=self.llm, text=text, at=at))

    def call(self, *calls: ToolCall, text: str = "") -> list[Any]:
        """The model answers the pending request with native tool calls."""
        return self.when(LlmResponded(request_id=self.llm, text=text, tool_calls=calls))

    def tool_result(
        self,
        output: str = "ok",
        *,
        ok: bool = True,
        error: str | None = None,
        retryable: bool = True,
        request_id: str | None = None,
    ) -> ToolResulted:
        """The result of the (only, or given) pending tool call."""
        if request_id is None:
            (pending,) = self.state.calls
            request_id = pending.request_id
        return ToolResulted(
            request_id=request_id,
            ok=ok,
            output=output,
            error=error,
            retryable=retryable,
        )

    def result(self, output: str = "ok", **kw: Any) -> list[Any]:
        """The (only, or given) pending tool call finishes."""
        return self.when(self.tool_result(output, **kw))

    def fail(self, error: str = "boom", *, retryable: bool = True) -> list[Any]:
        """The only pending tool call fails."""
        return self.result("", ok=False, error=error, retryable=retryable)

    # -- what the run is waiting for ----------------------------------------------

    @property
    def llm(self) -> str:
        """The request id of the model call the run waits for."""
        assert self.state.llm_pending is not None, "no model call is pending"
        return self.state.llm_pending

    def prompt(self) -> Prompt:
        """The prompt the run's next model call sends."""
        return run_actor.build_prompt(self.state)

    def records(self) -> list[Recorded]:
        """The log as the event store holds it (positions are made up)."""
        return [
            Recorded(
                stream=STREAM,
                version=n,
                position=1_000 + 7 * n,
                at=float(n),
                event=event,
            )
            for n, event in enumerate(self.log, start=1)
        ]


def started(**overrides: Any) -> Story:
    """Given a run created (with ``settings(**overrides)``) and its first request."""
    story = Story()
    story.when(created(settings=settings(**overrides)))
    return story


def planned(**overrides: Any) -> Story:
    """Given a started run whose model recorded its requirements and its plan."""
    story = started(**overrides)
    story.say(REQUIREMENTS)
    story.say(PLAN)
    return story


def asks(story: Story, iteration: int, priority: str = "interactive") -> LlmRequested:
    """The `LlmRequested` for ``iteration``, hashed over the story's current prompt."""
    return LlmRequested(
        request_id=f"{RUN}/llm/{iteration}",
        iteration=iteration,
        prompt_hash=prompt_hash(story.prompt()),
        priority=priority,  # type: ignore[arg-type]
    )


def kinds(decisions: list[Any]) -> list[str]:
    """The decisions' type names, for asserting the shape of a commit."""
    return [type(d).__name__ for d in decisions]


def texts(messages: tuple[ChatMessage, ...]) -> str:
    """All message contents joined, for asserting what a prompt shows."""
    return "\n".join(m.content for m in messages)


__all__ = [
    "DELETE",
    "PLAN",
    "READ",
    "REQUIREMENTS",
    "RUN",
    "STREAM",
    "WRITE",
    "Story",
    "act",
    "asks",
    "created",
    "kinds",
    "planned",
    "settings",
    "started",
    "texts",
]
