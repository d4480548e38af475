"""Model call limits: priority order under the concurrency cap, and rate limits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from steward import events
from steward.actors.prompt import Prompt
from steward.clock import FakeClock
from steward.effects.llm import RequestInfo, ScriptedProvider
from steward.effects.llm.limits import PriorityLimiter, RateLimiter
from steward.host import Host
from steward.kinds import KINDS


async def test_interactive_requests_get_priority_over_subagents() -> None:
    """With the slot taken, a later interactive call is served before subagents."""
    limiter = PriorityLimiter(1)
    order: list[str] = []
    release = asyncio.Event()

    async def call(name: str, priority: str) -> None:
        async with limiter.slot(priority):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(call("first", "subagent"))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(call(f"sub{i}", "subagent")) for i in range(3)]
    await asyncio.sleep(0)
    queued.append(asyncio.create_task(call("user", "interactive")))
    await asyncio.sleep(0)
    assert limiter.depth() == {"interactive": 1, "subagent": 3}
    assert limiter.active == 1 and order == ["first"]  # in flight, not interrupted
    release.set()
    await asyncio.gather(first, *queued)
    assert order == ["first", "user", "sub0", "sub1", "sub2"]
    assert limiter.active == 0 and limiter.depth() == {"interactive": 0, "subagent": 0}


async def test_max_concurrent_llm_limit_respected() -> None:
    """Never more than the limit in flight; a waiter cancelled in the queue
    gives no slot away."""
    limiter = PriorityLimiter(2)
    inside = 0
    most = 0
    gate = asyncio.Event()

    async def call(priority: str) -> None:
        nonlocal inside, most
        async with limiter.slot(priority):
            inside += 1
            most = max(most, inside)
            await gate.wait()
            inside -= 1

    tasks = [asyncio.create_task(call("subagent")) for _ in range(6)]
    await asyncio.sleep(0)
    tasks[4].cancel()
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert most == 2
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 1
    assert limiter.active == 0


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    limiter = PriorityLimiter(1)
    await limiter.acquire("interactive")
    waiter = asyncio.create_task(limiter.acquire("subagent"))
    await asyncio.sleep(0)
    assert limiter.depth_total() == 1 and limiter.depth()["subagent"] == 1
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert limiter.depth_total() == 0 and limiter.depth()["subagent"] == 0
    limiter.release()
    # nobody waits now: the next call takes the free slot at once
    await asyncio.wait_for(limiter.acquire("interactive"), timeout=1)
    assert limiter.active == 1


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="1 or more"):
        PriorityLimiter(0)


async def test_requests_per_minute_queue_instead_of_failing() -> None:
    clock = FakeClock()
    limiter = RateLimiter(2, None, clock.now, clock.sleep)
    assert await limiter.acquire(1) == 0 and await limiter.acquire(1) == 0
    third = asyncio.create_task(limiter.acquire(1))
    await asyncio.sleep(0)
    assert not third.done()
    clock.advance(59)
    await asyncio.sleep(0)
    assert not third.done()
    clock.advance(1)
    assert await third == 60


async def test_tokens_per_minute_wait_for_the_oldest_calls_to_leave() -> None:
    clock = FakeClock()
    limiter = RateLimiter(None, 1000, clock.now, clock.sleep)
    await limiter.acquire(600)
    clock.advance(10)
    await limiter.acquire(300)
    waiting = asyncio.create_task(limiter.acquire(500))  # 1400 > 1000
    await asyncio.sleep(0)
    clock.advance(50)  # the 600 leaves the window at t=60
    assert await waiting == 50
    big = asyncio.create_task(limiter.acquire(5000))  # too big for a busy window
    await asyncio.sleep(0)
    clock.advance(10)  # the 300 (t=10) leaves; the 500 (t=60) is still in
    await asyncio.sleep(0)
    assert not big.done()
    clock.advance(50)  # the window is empty now
    assert await big == 60
    # an empty window admits a call larger than the limit rather than hang
    fresh = RateLimiter(None, 10, clock.now, clock.sleep)
    assert await fresh.acquire(5000) == 0


async def test_host_serves_interactive_model_calls_before_queued_subagent_calls(
    log: Any, tmp_path: Any
) -> None:
    """In the host, with limit 1: an interactive call jumps queued subagent calls."""
    started: list[str] = []
    gate = asyncio.Event()

    class Gated(ScriptedProvider):
        async def stream(self, prompt: Prompt, info: RequestInfo):  # type: ignore[override]
            started.append(info.priority)
            await gate.wait()
            async for event in super().stream(prompt, info):
                yield event

    host = Host(
        log,
        provider=Gated(lambda p, i: '{"type": "finish"}'),
        workspace=tmp_path,
        llm_concurrency=1,
        kinds=KINDS,
    )
    prompt = Prompt(model="m", system="", messages=())

    def ask(n: int, priority: Any) -> Any:
        rid = f"r{n}/llm/1"
        info = RequestInfo(stream=f"run.r{n}", request_id=rid, priority=priority)
        request = events.LlmRequested(request_id=rid, iteration=1, prompt_hash="")
        rec = events.Recorded(
            stream=f"run.r{n}", version=1, position=n + 1, at=0.0, event=request
        )
        return asyncio.create_task(host.models.answer(host, rec, prompt, info))

    busy = ask(0, "subagent")
    await asyncio.sleep(0.01)
    queued = [ask(n, "subagent") for n in (1, 2)]
    await asyncio.sleep(0.01)
    user = ask(3, "interactive")
    await asyncio.sleep(0.01)
    assert started == ["subagent"]
    assert host.models.slots.depth() == {"interactive": 1, "subagent": 2}
    for priority, waiting in (("interactive", 1), ("subagent", 2)):
        labels = {"priority": priority}  # what a dashboard scrapes
        assert REGISTRY.get_sample_value("steward_llm_waiting", labels) == waiting
    gate.set()
    await asyncio.gather(busy, *queued, user)
    assert started == ["subagent", "interactive", "subagent", "subagent"]
