"""Random chats through the real host and log: every turn asks the model
about its own messages.

Hypothesis draws a chat: messages (some sent inside one debounce window, so
they merge), commands (``/new`` among them), pauses of random length,
windows small enough to compact, and messages that make the turn spawn a
subagent. A scripted model records what each run asks. For every turn the
first request's last user message is the turn's merged messages, for every
subagent its task; no window starts with an answer; and the session and
every run replay and verify.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import hypothesis
from hypothesis import strategies as st

from steward import replay
from steward.actors.prompt import Prompt
from steward.actors.run import events as run_events
from steward.actors.session import events as session_events
from steward.actors.session.state import session_stream
from steward.bus import SqliteEventLog
from steward.clock import FakeClock
from steward.effects.llm import RequestInfo, ScriptedProvider
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS

SESSION = "cli:prop"
STREAM = session_stream(SESSION)
DEBOUNCE = session_events.SessionSettings().debounce_seconds


def last_user(prompt: Prompt) -> str:
    return next(m.content for m in reversed(prompt.messages) if m.role == "user")


class Model:
    """Each run's requests, by run id; a reply from the request: the memory
    writer a summary, ``spawn: TASK`` a `subagent_spawn` call, its result a
    finish, anything else ``re: <last user message>``."""

    def __init__(self) -> None:
        self.asked: dict[str, list[Prompt]] = {}

    def __call__(self, prompt: Prompt, info: RequestInfo) -> str:
        if info.actor_id == SESSION:  # the memory writer
            return json.dumps({"operations": [], "summary": "They talked."})
        self.asked.setdefault(info.actor_id, []).append(prompt)
        last = last_user(prompt)
        if last.startswith("spawn: "):
            args = {"name": "scout", "task": last.removeprefix("spawn: ")}
            call = {"type": "tool_call", "name": "subagent_spawn", "args": args}
            return json.dumps(call)
        if "subagent_spawn" in last:
            return json.dumps({"type": "finish", "output": "spawned"})
        return json.dumps({"type": "finish", "output": f"re: {last}"})


words = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
    min_size=1,
    max_size=12,
).filter(lambda t: t.strip() and not t.startswith("/"))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("say"), words),
        st.tuples(st.just("say"), words.map(lambda t: f"spawn: {t.strip()}")),
        st.tuples(st.just("say"), st.sampled_from(["/new", "/help", "/model"])),
        st.tuples(st.just("wait"), st.sampled_from([0.5, DEBOUNCE, 3 * DEBOUNCE])),
    ),
    min_size=1,
    max_size=14,
)


async def _chat(
    db: Path, script: list[tuple[str, object]], max_turns: int, window: int
) -> None:
    clock = FakeClock()
    model = Model()
    log = await SqliteEventLog.open(db, union=KINDS.union)
    tools = ToolRegistry.with_builtins(extra=KINDS.tools)
    host = Host(
        log,
        provider=ScriptedProvider(model),
        tools=tools,
        workspace=db.parent,
        clock=clock,
        kinds=KINDS,
    )
    await host.start()
    try:
        run = run_events.RunSettings(planning_gate=False, tools=tools.specs())
        settings = session_events.SessionSettings(
            run=run, max_turns_per_context=max_turns, sliding_window=window
        )
        opened = session_events.SessionOpened(
            session_id=SESSION,
            channel="cli",
            chat_id="prop",
            settings=settings,
            at=clock.now(),
            revision=session_events.SESSION_REVISION,
        )
        await host.submit(STREAM, opened)
        for n, (step, value) in enumerate(script, start=1):
            if step == "say":
                received = session_events.MessageReceived(
                    message_id=f"m{n}", text=str(value), at=clock.now()
                )
                await host.submit(STREAM, received)
            else:
                assert isinstance(value, float)
                clock.advance(value)
                assert await host.settle(20)
        for _ in range(50):  # until no turn, subagent or writer is left
            state = (await host.state(STREAM))[0]
            if not (state.turn or state.buffer or state.subagents or state.writer):
                break
            clock.advance(DEBOUNCE)
            assert await host.settle(20)
        else:
            raise AssertionError(f"the chat did not come to rest: {state}")
        await _check(log, model)
    finally:
        await host.stop()
        await log.close()


async def _check(log: SqliteEventLog, model: Model) -> None:
    records = await log.read(STREAM)
    assert replay.verify(records, kinds=KINDS) is None
    asked: dict[str, str] = {}
    for r in records:
        match r.event:
            case session_events.TurnStarted(run_id=run_id, text=text):
                asked[run_id] = text
            case session_events.SubagentStarted(run_id=run_id, task=task):
                asked[run_id] = task
    assert sorted(asked) == sorted(model.asked)
    for run_id, text in asked.items():
        first = model.asked[run_id][0]
        assert last_user(first) == text, run_id
        talk = [m for m in first.messages if m.role != "system"]
        assert talk[0].role == "user", (run_id, talk)
        run = await log.read(f"run.{run_id}")
        assert replay.verify(run, kinds=KINDS) is None, run_id


@hypothesis.settings(max_examples=60, deadline=None, database=None)
@hypothesis.given(
    script=steps,
    max_turns=st.integers(min_value=1, max_value=4),
    window=st.integers(min_value=1, max_value=8),
)
def test_every_turn_asks_about_its_own_messages(
    script: list[tuple[str, object]], max_turns: int, window: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_chat(Path(tmp) / "log.db", script, max_turns, window))
