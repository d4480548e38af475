"""How the workers of a shared log split its partitions (`assign`), and what a
worker keeps of what its streams wait for (`PendingIndex`)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from steward import events
from steward.actors.effects import spawn_key
from steward.actors.session import events as session_events
from steward.bus.jetstream.members import assign, worker_key
from steward.events import Event, Recorded
from steward.host.pending import PendingIndex
from steward.kinds import KINDS

workers = st.lists(
    st.text("abcdefgh0123456789-", min_size=1, max_size=12),
    min_size=1,
    max_size=20,
    unique=True,
)


@given(workers, st.integers(1, 64))
def test_every_partition_has_one_holder_and_each_worker_its_share(
    members: list[str], partitions: int
) -> None:
    held = assign(members, partitions)
    assert sorted(held) == list(range(partitions))
    load = Counter(held.values())
    share = partitions // len(members)
    assert all(share <= load[m] <= share + 1 for m in members), load
    assert assign(list(reversed(members)), partitions) == held  # order-free


@given(workers, st.text("xyz", min_size=1, max_size=5))
def test_a_worker_joining_moves_a_few_partitions(
    members: list[str], newcomer: str
) -> None:
    """Rendezvous hashing: what moves is mostly what the newcomer takes."""
    if newcomer in members:
        return
    before = assign(members, 64)
    after = assign([*members, newcomer], 64)
    moved = sum(before[p] != after[p] for p in range(64))
    taken = sum(m == newcomer for m in after.values())
    # the newcomer's share, and some evened out again (shares differ by
    # one at most: with many members the evening out can move several
    # times the newcomer's share), never a reshuffle of the whole
    assert taken >= 64 // (len(members) + 1)
    assert moved <= 64 // 2


def test_worker_ids_become_key_tokens() -> None:
    assert worker_key("host.example-12-ab/x") == "host_example-12-ab_x"


def _records(stream: str, batch: list[Event]) -> list[Recorded]:
    return [
        Recorded(
            stream=stream,
            version=n,
            position=n,
            at=0.0,
            correlation_id=None,
            causation_id=None,
            event=event,
        )
        for n, event in enumerate(batch, 1)
    ]


def test_the_index_keeps_what_is_asked_until_it_is_answered() -> None:
    index = PendingIndex(KINDS)
    usage = events.Usage()
    records = _records(
        "run.r1",
        [
            events.LlmRequested(request_id="q1", iteration=1, prompt_hash="h"),
            events.LlmResponded(request_id="q1", text="", usage=usage),
            events.ToolRequested(request_id="t1", name="files.read", args={}),
        ],
    )
    index.apply(records[0])
    assert index.sources(lambda s: True) == [("run.r1", 1)]
    index.apply(records[1])
    assert index.sources(lambda s: True) == []
    index.apply(records[2])
    assert index.sources(lambda s: True) == [("run.r1", 3)]
    assert index.sources(lambda s: s != "run.r1") == []
    index.forget(lambda s: s != "run.r1")
    assert len(index) == 0


def test_a_want_answered_elsewhere_goes_once_carried_out_or_void() -> None:
    """A child to create is answered in the child's stream, which the worker
    may not follow: carrying it out answers it; routed again and asked for
    by nobody, it is void."""
    index = PendingIndex(KINDS)
    started = session_events.SubagentStarted(
        run_id="s1-a1", name="a", task="t", model="m"
    )
    records = _records("session.s1", [started])
    for rec in records:
        index.apply(rec)
    (source,) = index.sources(lambda s: True)
    assert source == ("session.s1", 1)
    index.carried(spawn_key("s1-a1"))
    assert index.sources(lambda s: True) == []
    index.apply(records[0])
    assert len(index) == 1
    index.routed("session.s1", 1, started=[])
    assert index.sources(lambda s: True) == []
