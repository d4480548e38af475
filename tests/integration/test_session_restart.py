"""A session's timers outlive its host: a cron schedule created under one
host fires under the next, at its cron time on the replaceable clock, and
its firing runs as a subagent whose answer reaches the chat; a debounce
armed before the restart starts its turn after it."""

from __future__ import annotations

import asyncio
from typing import Any

from support import act

from steward import events, replay
from steward.actors.run import events as run_events
from steward.actors.session import events as session_events
from steward.actors.session.state import session_stream
from steward.clock import FakeClock
from steward.effects.llm import ScriptedProvider
from steward.kinds import KINDS

SESSION = "cli:s"
STREAM = session_stream(SESSION)
HOUR = 3600.0


def opening(clock: FakeClock) -> session_events.SessionOpened:
    settings = session_events.SessionSettings(
        run=run_events.RunSettings(planning_gate=False, tools=())
    )
    return session_events.SessionOpened(
        session_id=SESSION,
        channel="cli",
        chat_id="s",
        settings=settings,
        at=clock.now(),
        revision=session_events.SESSION_REVISION,
    )


async def recorded(log: Any, kind: type[events.Event]) -> list[Any]:
    return [r.event for r in await log.read(STREAM) if isinstance(r.event, kind)]


async def until(log: Any, kind: type[events.Event]) -> list[Any]:
    """The session's events of type ``kind`` once there is one (5 s at most)."""
    for _ in range(500):
        if found := await recorded(log, kind):
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind.__name__} in {STREAM}")


async def test_a_schedule_fires_under_the_next_host_as_a_subagent(
    make_host: Any, log: Any, clock: FakeClock
) -> None:
    model = ScriptedProvider([act(type="finish", output="Nothing new.")], per_run=True)
    first = await make_host(model)
    await first.submit(STREAM, opening(clock))
    asked = session_events.ScheduleAsked(
        request_id="q1",
        name="hourly",
        cron="0 * * * *",
        task="Any news?",
        at=clock.now(),
    )
    assert await first.submit(STREAM, asked) is not None
    [created] = await recorded(log, session_events.ScheduleCreated)
    due = created.schedule.due
    assert 0 < due - clock.now() <= HOUR
    await first.stop()

    # The next host arms the schedule's timer from the pending projection.
    second = await make_host(model)
    clock.advance(due - clock.now() - 1)  # a second short of the hour: nothing
    assert await second.settle()  # a timer due would have fired and been recorded
    assert await recorded(log, session_events.ScheduleFired) == []
    clock.advance(1)
    [fired] = await until(log, session_events.ScheduleFired)
    assert fired.name == "hourly"
    [answered] = await until(log, session_events.SubagentAnswered)
    assert (answered.name, answered.text, answered.silent) == (
        "hourly",
        "Nothing new.",
        False,
    )
    assert replay.verify(await log.read(STREAM), kinds=KINDS) is None


async def test_a_debounce_armed_before_a_restart_starts_its_turn_after_it(
    make_host: Any, log: Any, clock: FakeClock
) -> None:
    model = ScriptedProvider([act(type="send_message", message="hi")], per_run=True)
    first = await make_host(model)
    await first.submit(STREAM, opening(clock))
    message = session_events.MessageReceived(
        message_id="m1", text="hello", at=clock.now()
    )
    assert await first.submit(STREAM, message) is not None
    await first.stop()  # inside the debounce window

    await make_host(model)
    assert await recorded(log, session_events.TurnStarted) == []
    clock.advance(session_events.SessionSettings().debounce_seconds)
    [turn] = await until(log, session_events.TurnStarted)
    assert turn.text == "hello"
    [sent] = await until(log, session_events.ReplySent)
    assert sent.text == "hi"
