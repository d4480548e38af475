"""Two workers forced onto the same run of one JetStream log.

Each worker has its own connection, as separate processes would. Exactly one
commit wins each version; the loser reloads the run, decides its input again
on the new state and either commits it at the next version or finds it
refused (a second claim on a claimed call).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nats_server import NatsServer
from support import act

from steward import events
from steward.actors.run import events as run_events
from steward.actors.run.reactor import run_stream
from steward.bus import JetStreamEventLog
from steward.effects.llm import ScriptedProvider
from steward.effects.llm.scripted import Reply
from steward.effects.tools import ToolRegistry
from steward.host import Host
from steward.kinds import KINDS
from steward.metrics import HOST as METRICS
from steward.projections.store import Projector

SETTINGS = run_events.RunSettings(tools=ToolRegistry.with_builtins().specs())


async def _open(server: NatsServer, name: str) -> JetStreamEventLog:
    return await JetStreamEventLog.open(
        server.url, stream=name, prefix=name.lower(), union=KINDS.union
    )


async def _pending_request(log: JetStreamEventLog, run_id: str) -> str:
    records = await log.read(run_stream(run_id))
    return next(
        r.event.request_id for r in records if isinstance(r.event, events.LlmRequested)
    )


@pytest.fixture
async def two_workers(
    nats_server: NatsServer, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Host, Host, JetStreamEventLog]]:
    """Workers ``a`` and ``b`` and a reader, each on its own connection."""
    name = "RACE_" + request.node.name.upper()[-12:]
    logs = [await _open(nats_server, name) for _ in range(3)]
    try:
        yield (
            Host(logs[0], worker_id="a", kinds=KINDS),
            Host(logs[1], worker_id="b", kinds=KINDS),
            logs[2],
        )
    finally:
        for log in logs:
            await log.close()


async def test_of_two_claims_on_one_call_exactly_one_is_recorded(
    two_workers: tuple[Host, Host, JetStreamEventLog],
) -> None:
    a, b, log = two_workers
    runs = [f"c{n}" for n in range(20)]
    for run_id in runs:
        await a.submit(
            run_stream(run_id),
            run_events.RunCreated(run_id=run_id, input_text="go", settings=SETTINGS),
        )
    for run_id in runs:  # both workers know the run before they race
        await b.state(run_stream(run_id))

    async def claim(host: Host, run_id: str, request_id: str) -> bool:
        claimed = events.EffectClaimed(
            request_id=request_id, worker=str(host.worker_id), until=1e12
        )
        return await host.submit(run_stream(run_id), claimed) is not None

    outcomes = []
    for run_id in runs:
        request_id = await _pending_request(log, run_id)
        won = await asyncio.gather(
            claim(a, run_id, request_id), claim(b, run_id, request_id)
        )
        outcomes.append(won)
        records = await log.read(run_stream(run_id))
        assert [r.version for r in records] == list(range(1, len(records) + 1))
        claims = [r.event for r in records if isinstance(r.event, events.EffectClaimed)]
        assert len(claims) == 1, claims
        assert won.count(True) == 1, won
        winner = "a" if won[0] else "b"
        assert claims[0].worker == winner


async def test_the_loser_of_a_version_retries_on_the_new_state(
    two_workers: tuple[Host, Host, JetStreamEventLog],
) -> None:
    a, b, log = two_workers
    stream = run_stream("r1")
    await a.submit(
        stream, run_events.RunCreated(run_id="r1", input_text="go", settings=SETTINGS)
    )
    _, seen_by_b = await b.state(stream)  # b caches the run at this version
    request_id = await _pending_request(log, "r1")
    reply = '{"type": "note", "category": "requirements", "content": "r"}'
    won = await a.submit(stream, events.LlmResponded(request_id=request_id, text=reply))
    assert won is not None and won.first_version == seen_by_b + 1

    conflicts = METRICS.conflicts
    # b still believes the run is at `seen_by_b`: its commit loses that
    # version, and it decides the cancel again on the state a recorded.
    cancelled = await b.submit(stream, events.CancelRequested(reason="stop"))
    assert METRICS.conflicts == conflicts + 1
    assert cancelled is not None
    assert cancelled.first_version == won.last_version + 1

    records = await log.read(stream)
    assert [r.version for r in records] == list(range(1, len(records) + 1))
    kinds = [type(r.event).__name__ for r in records]
    assert kinds.count("LlmResponded") == 1
    assert kinds.count("CancelRequested") == 1
    assert kinds[-1] == "RunCancelled"


async def test_a_claim_is_renewed_while_its_call_runs(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A model call longer than claim_seconds keeps its claim (its worker
    renews it): the other worker's sweeps never retake it, the model is
    called once, and the renewals stop when the call ends."""
    logs = [await _open(nats_server, "RENEW") for _ in range(2)]
    hosts: list[tuple[Host, Projector, ScriptedProvider]] = []
    try:
        for n, log in enumerate(logs):
            provider = ScriptedProvider(
                [Reply(text=act(type="finish", output="slow"), delay=2.0)]
            )
            projector = await Projector.open(
                tmp_path / f"projections-{n}.db", kinds=KINDS
            )
            host = Host(
                log,
                provider=provider,
                tools=ToolRegistry.with_builtins(),
                projector=projector,
                worker_id=f"w{n}",
                claim_seconds=0.6,
                kinds=KINDS,
            )
            await host.start()
            hosts.append((host, projector, provider))
        stream = run_stream("slow")
        settings = msgspec.structs.replace(SETTINGS, planning_gate=False)
        created = run_events.RunCreated(
            run_id="slow", input_text="go", settings=settings
        )
        await hosts[0][0].submit(stream, created)
        for _ in range(300):
            records = await logs[1].read(stream)
            if isinstance(records[-1].event, run_events.RunCompleted):
                break
            await asyncio.sleep(0.05)
        for host, _, _ in hosts:  # nothing in flight, and no claim renewed:
            assert await host.settle()  # no renewal can land after this read
            assert not host.claims.renewing
        records = await logs[1].read(stream)
    finally:
        for host, projector, _ in hosts:
            await host.stop()
            await projector.close()
        for log in logs:
            await log.close()
    assert isinstance(records[-1].event, run_events.RunCompleted)
    assert sum(provider.used for _, _, provider in hosts) == 1
    claims = [r.event for r in records if isinstance(r.event, events.EffectClaimed)]
    assert len({c.worker for c in claims}) == 1, claims
    assert len(claims) >= 3, claims  # the claim and its renewals
    answered = next(
        r.version for r in records if isinstance(r.event, events.LlmResponded)
    )
    assert all(r.version < answered for r in records if r.event in claims)
