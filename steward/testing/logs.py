"""The EventLog contract: what every backend guarantees, as a pytest suite.

Only what `steward.bus.base.EventLog` promises is pinned: positions are
global and strictly increasing, but not assumed to start at 1 or to be
contiguous (a JetStream backend numbers them its own way).

A backend runs it by subclassing `LogContract` in a test module, which
provides two fixtures (pytest-asyncio runs the async tests)::

    class TestMyLog(LogContract):
        @pytest.fixture
        async def log(self, make_log):  # a fresh, open log
            return await make_log()

        @pytest.fixture
        async def make_log(self, tmp_path):  # more handles on that same log
            opened = []

            async def open_one():
                opened.append(await MyLog.open(tmp_path / "log", union=KINDS.union))
                return opened[-1]

            yield open_one
            for handle in opened:
                await handle.close()

``log`` is a fresh, empty log of the backend, open, closed after the test
(it may close it itself); ``make_log`` opens further handles on that same
log, as separate processes would. The events appended are steward's run
kind's, so the log is opened with ``union=steward.kinds.KINDS.union``.
steward's two logs are run in ``tests/contract/test_log_contract.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from steward import events
from steward.actors.run import events as run_kind
from steward.bus import EventLog
from steward.errors import ConcurrencyError, LogWriteError
from steward.events import Recorded

TIMEOUT = 5.0

LogFactory = Callable[[], Awaitable[EventLog]]

# -- helpers -------------------------------------------------------------------


def run_events(run_id: str = "r1") -> list[events.Event]:
    """A short run, with nested structs, tuples, dicts and optional fields."""
    settings = run_kind.RunSettings(
        model="scripted",
        tools=(
            events.ToolSpec(
                name="files.read",
                description="Read a file",
                parameters={"type": "object", "properties": {"path": {}}},
            ),
        ),
        temperature=0.2,
    )
    return [
        run_kind.RunCreated(
            run_id=run_id,
            input_text="summarise the report",
            settings=settings,
            conversation=(events.ChatMessage(role="user", content="hi"),),
            input_json={"pages": [1, 2], "lang": "en"},
            at=12.5,
        ),
        run_kind.RunStarted(),
        events.LlmRequested(
            request_id=f"{run_id}/llm/1", iteration=1, prompt_hash="ab"
        ),
        events.LlmResponded(
            request_id=f"{run_id}/llm/1",
            text='{"type": "tool_call"}',
            tool_calls=(
                events.ToolCall(id="c1", name="files.read", args={"path": "a.md"}),
            ),
            usage=events.Usage(input_tokens=120, output_tokens=30),
        ),
        events.ToolRequested(
            request_id=f"{run_id}/tool/1", name="files.read", args={"path": "a.md"}
        ),
        events.ToolResulted(request_id=f"{run_id}/tool/1", ok=True, output="# A"),
        run_kind.SubagentsSpawned(
            children=(
                run_kind.SubagentSpec(
                    run_id=f"{run_id}/sub/1",
                    input_text="check",
                    allowed_tools=("files.read",),
                ),
            )
        ),
        run_kind.OutputUpdated(text="done", mode="append"),
        run_kind.RunCompleted(output="done"),
    ]


def note(n: int) -> events.Event:
    """A small event told apart by ``n``."""
    return run_kind.NoteRecorded(category="test", content=str(n))


@contextlib.asynccontextmanager
async def subscription(
    log: EventLog, from_position: int = 0
) -> AsyncIterator[AsyncIterator[Recorded]]:
    """A subscription that is closed when the block ends."""
    iterator = log.subscribe(from_position)
    try:
        yield iterator
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


async def take(iterator: AsyncIterator[Recorded], n: int) -> list[Recorded]:
    """The next ``n`` records, failing after TIMEOUT seconds."""
    got: list[Recorded] = []
    async with asyncio.timeout(TIMEOUT):
        while len(got) < n:
            got.append(await anext(iterator))
    return got


async def read_everything(log: EventLog, page: int = 100) -> list[Recorded]:
    """The whole log through read_all, page by page."""
    out: list[Recorded] = []
    while batch := await log.read_all(out[-1].position if out else 0, page):
        out.extend(batch)
    return out


class LogContract:
    """The EventLog contract's tests, for a subclass that provides the
    fixtures ``log`` and ``make_log`` (see the module)."""

    # -- append and read -----------------------------------------------------------

    async def test_append_then_read_round_trips_every_event(
        self, log: EventLog
    ) -> None:
        """Events come back from read equal to what was appended, nested fields too."""
        sent = run_events()
        commit = await log.append("run.r1", sent, 0, at=100.0)
        got = await log.read("run.r1")
        assert [r.event for r in got] == sent
        assert [type(r.event) for r in got] == [type(e) for e in sent]
        assert list(commit.records) == got
        assert all(r.stream == "run.r1" and r.at == 100.0 for r in got)

    async def test_commit_says_where_the_append_landed(self, log: EventLog) -> None:
        """Commit carries the stream, the version range, the position range and at."""
        other = await log.append("run.other", [note(0)], 0)
        commit = await log.append("run.r1", [note(1), note(2), note(3)], 0, at=7.0)
        assert (commit.stream, commit.first_version, commit.last_version) == (
            "run.r1",
            1,
            3,
        )
        assert [r.version for r in commit.records] == [1, 2, 3]
        positions = [r.position for r in commit.records]
        assert positions == sorted(set(positions))
        assert (commit.first_position, commit.last_position) == (
            positions[0],
            positions[-1],
        )
        assert commit.first_position > other.last_position
        assert commit.at == 7.0

    async def test_versions_are_one_based_and_contiguous(self, log: EventLog) -> None:
        """Versions start at 1 and go up by one per event, across appends."""
        version = 0
        for size in (1, 3, 2, 1):
            commit = await log.append("run.r1", [note(i) for i in range(size)], version)
            assert commit.first_version == version + 1
            version = commit.last_version
        got = await log.read("run.r1")
        assert [r.version for r in got] == list(range(1, 8))
        assert await log.version("run.r1") == 7

    async def test_expected_version_zero_means_a_new_stream(
        self, log: EventLog
    ) -> None:
        """Expected version 0 creates a stream, and fails once the stream exists."""
        await log.append("run.new", [note(1)], 0)
        with pytest.raises(ConcurrencyError):
            await log.append("run.new", [note(2)], 0)

    async def test_stale_expected_version_raises_concurrency_error(
        self, log: EventLog
    ) -> None:
        """A stale expected version raises ConcurrencyError carrying its data."""
        await log.append("run.r1", [note(1), note(2)], 0)
        with pytest.raises(
            ConcurrencyError,
            match=(
                r"^stream run\.r1 is at version 2, not 1: another writer got there "
                r"first; reload and retry$"
            ),
        ) as caught:
            await log.append("run.r1", [note(3)], 1)
        assert (caught.value.stream, caught.value.expected, caught.value.actual) == (
            "run.r1",
            1,
            2,
        )

    async def test_expected_version_ahead_of_the_stream_is_refused(
        self, log: EventLog
    ) -> None:
        """An expected version past the stream's end is refused, leaving no gap."""
        await log.append("run.r1", [note(1)], 0)
        with pytest.raises(ConcurrencyError, match="is at version 1, not 5") as caught:
            await log.append("run.r1", [note(2)], 5)
        assert caught.value.actual == 1
        with pytest.raises(ConcurrencyError, match="is at version 0, not 3"):
            await log.append("run.missing", [note(1)], 3)

    async def test_failed_append_stores_nothing(self, log: EventLog) -> None:
        """A refused append of several events stores none of them."""
        await log.append("run.r1", [note(1)], 0)
        head = await log.head()
        with pytest.raises(ConcurrencyError):
            await log.append("run.r1", [note(2), note(3), note(4)], 0)
        assert [r.event for r in await log.read("run.r1")] == [note(1)]
        assert await log.version("run.r1") == 1
        assert await log.head() == head
        assert await log.read_all(head) == []

    async def test_one_refused_append_does_not_fail_concurrent_ones(
        self, log: EventLog
    ) -> None:
        """Appends made together succeed or fail each on its own."""
        await log.append("run.busy", [note(0)], 0)
        results = await asyncio.gather(
            log.append("run.a", [note(1)], 0),
            log.append("run.busy", [note(2)], 0),  # stale
            log.append("run.b", [note(3), note(4)], 0),
            log.append("run.busy", [note(5)], 1),
            log.append("run.busy", [note(6)], 2),  # builds on the one before
            return_exceptions=True,
        )
        assert isinstance(results[1], ConcurrencyError)
        assert [type(r).__name__ for r in results] == [
            "Commit",
            "ConcurrencyError",
            "Commit",
            "Commit",
            "Commit",
        ]
        assert [r.event for r in await log.read("run.busy")] == [
            note(0),
            note(5),
            note(6),
        ]
        assert await log.version("run.b") == 2

    async def test_append_of_no_events_is_refused(self, log: EventLog) -> None:
        """An empty append raises ValueError and stores nothing."""
        with pytest.raises(ValueError, match="at least one event"):
            await log.append("run.r1", [], 0)
        assert await log.head() == 0

    async def test_correlation_and_causation_ids_round_trip(
        self, log: EventLog
    ) -> None:
        """correlation_id and causation_id come back from every way of reading."""
        commit = await log.append(
            "run.r1", [note(1), note(2)], 0, correlation_id="corr-1", causation_id="x/3"
        )
        await log.append("run.r2", [note(3)], 0)
        ids = {("corr-1", "x/3")}
        assert {(r.correlation_id, r.causation_id) for r in commit.records} == ids
        assert {
            (r.correlation_id, r.causation_id) for r in await log.read("run.r1")
        } == ids
        everything = await log.read_all()
        assert [(r.correlation_id, r.causation_id) for r in everything] == [
            ("corr-1", "x/3"),
            ("corr-1", "x/3"),
            (None, None),
        ]
        async with subscription(log) as live:
            assert [r.causation_id for r in await take(live, 3)] == ["x/3", "x/3", None]

    async def test_at_is_given_or_taken_from_the_clock(self, log: EventLog) -> None:
        """``at`` is stored as given, and defaults to the current time."""
        given = await log.append("run.r1", [note(1)], 0, at=1234.5)
        before = time.time()
        default = await log.append("run.r1", [note(2)], 1)
        after = time.time()
        got = await log.read("run.r1")
        assert given.at == got[0].at == 1234.5
        assert before - 1 <= default.at == got[1].at <= after + 1

    async def test_event_id_is_stream_slash_version(self, log: EventLog) -> None:
        """A recorded event's id is derived from its stream and version."""
        await log.append("run.r1", [note(1), note(2)], 0)
        assert [r.id for r in await log.read("run.r1")] == ["run.r1/1", "run.r1/2"]

    # -- positions and reading -----------------------------------------------------

    async def test_positions_strictly_increase_across_streams(
        self, log: EventLog
    ) -> None:
        """Positions are global: strictly increasing across all streams, in
        commit order."""
        versions: Counter[str] = Counter()
        commits = []
        for i in range(12):
            stream = f"run.{i % 3}"
            size = 1 + i % 2
            commits.append(
                await log.append(
                    stream, [note(i)] * size, versions[stream], at=float(i)
                )
            )
            versions[stream] += size
        everything = await log.read_all()
        positions = [r.position for r in everything]
        assert positions == sorted(set(positions))
        assert [r.position for c in commits for r in c.records] == positions
        assert commits[0].first_position >= 1

    async def test_read_from_version(self, log: EventLog) -> None:
        """read starts at from_version, inclusive; past the end it is empty."""
        await log.append("run.r1", [note(i) for i in range(1, 6)], 0)
        assert [r.version for r in await log.read("run.r1", 3)] == [3, 4, 5]
        assert [r.version for r in await log.read("run.r1", 1)] == [1, 2, 3, 4, 5]
        assert await log.read("run.r1", 6) == []
        assert await log.read("run.unknown") == []

    async def test_read_returns_only_the_stream_asked_for(self, log: EventLog) -> None:
        """read never mixes in events of other streams, even with a shared prefix."""
        await log.append("run.r1", [note(1)], 0)
        await log.append("run.r10", [note(2)], 0)
        await log.append("run.r", [note(3)], 0)
        assert [r.event for r in await log.read("run.r1")] == [note(1)]

    async def test_read_all_from_position_and_limit(self, log: EventLog) -> None:
        """read_all returns events after from_position, in order, at most limit."""
        for i in range(10):
            await log.append(f"run.{i % 4}", [note(i)], i // 4)
        everything = await log.read_all()
        assert [r.event for r in everything] == [note(i) for i in range(10)]
        p = [r.position for r in everything]
        assert [r.position for r in await log.read_all(p[3])] == p[4:]
        assert [r.position for r in await log.read_all(p[3], limit=2)] == p[4:6]
        assert await log.read_all(p[-1]) == []
        assert [r.event for r in await read_everything(log, page=3)] == [
            note(i) for i in range(10)
        ]

    async def test_head_version_and_streams_of_an_empty_log(
        self, log: EventLog
    ) -> None:
        """An empty log has head 0, every stream at version 0, and no streams."""
        assert await log.head() == 0
        assert await log.version("run.anything") == 0
        assert await log.streams() == []
        assert await log.read_all() == []

    async def test_head_version_and_streams(self, log: EventLog) -> None:
        """head is the last position, version a stream's last version,
        streams sorted."""
        await log.append("session.s1", [note(1)], 0)
        await log.append("run.b", [note(2), note(3)], 0)
        last = await log.append("run.a", [note(4)], 0)
        assert await log.head() == last.last_position
        assert await log.version("run.b") == 2
        assert await log.streams() == ["run.a", "run.b", "session.s1"]
        assert await log.streams("run.") == ["run.a", "run.b"]
        assert await log.streams("session.s1") == ["session.s1"]
        assert await log.streams("workflow.") == []

    async def test_streams_prefix_is_literal(self, log: EventLog) -> None:
        """A prefix is matched literally: % and _ are not wildcards, case matters."""
        for name in ("run_1", "runX1", "run%a", "runs", "RUN_2", "run_1/sub/é"):
            await log.append(name, [note(1)], 0)
        assert await log.streams("run_") == ["run_1", "run_1/sub/é"]
        assert await log.streams("run%") == ["run%a"]
        assert await log.streams("RUN") == ["RUN_2"]
        assert await log.streams("run_1/sub/") == ["run_1/sub/é"]

    # -- subscribe -----------------------------------------------------------------

    async def test_subscribe_catches_up_then_follows_live(self, log: EventLog) -> None:
        """subscribe yields stored events, then events committed while it waits."""
        for i in range(3):
            await log.append("run.r1", [note(i)], i)
        async with subscription(log) as live:
            assert [r.event for r in await take(live, 3)] == [note(0), note(1), note(2)]
            waiting = asyncio.create_task(take(live, 3))
            await log.append("run.r2", [note(3), note(4)], 0)
            await log.append("run.r1", [note(5)], 3)
            got = await waiting
        assert [r.event for r in got] == [note(3), note(4), note(5)]
        assert [r.position for r in got] == [r.position for r in await log.read_all()][
            3:
        ]

    async def test_subscribe_from_a_mid_position(self, log: EventLog) -> None:
        """subscribe(p) starts strictly after position p."""
        for i in range(6):
            await log.append("run.r1", [note(i)], i)
        fourth = (await log.read_all())[3]
        async with subscription(log, fourth.position) as live:
            got = await take(live, 2)
            await log.append("run.r1", [note(6)], 6)
            got += await take(live, 1)
        assert [r.event for r in got] == [note(4), note(5), note(6)]
        assert [r.version for r in got] == [5, 6, 7]

    async def test_subscribe_past_the_head_waits_for_new_events(
        self, log: EventLog
    ) -> None:
        """subscribe from the head yields nothing old, only what comes next."""
        await log.append("run.r1", [note(0), note(1)], 0)
        async with subscription(log, await log.head()) as live:
            waiting = asyncio.create_task(take(live, 1))
            await log.append("run.r1", [note(2)], 2)
            assert [r.event for r in await waiting] == [note(2)]

    async def test_subscribers_each_see_every_event_in_order(
        self, log: EventLog
    ) -> None:
        """Several subscribers, started at different times, each see the same order."""
        async with subscription(log) as early:
            first = asyncio.create_task(take(early, 40))
            for i in range(20):
                await log.append(
                    f"run.{i % 5}", [note(2 * i), note(2 * i + 1)], 2 * (i // 5)
                )
            async with subscription(log) as late:
                second = await take(late, 40)
            got = await first
        assert [r.event for r in got] == [note(i) for i in range(40)]
        assert second == got

    async def test_ending_a_subscription_leaves_no_tasks(self, log: EventLog) -> None:
        """Closing a subscription, waiting or not, leaves no task behind."""
        await log.append("run.r1", [note(0)], 0)
        before = asyncio.all_tasks()
        async with subscription(log) as live:
            await take(live, 1)
            waiting = asyncio.create_task(take(live, 1))
            await asyncio.sleep(0)  # let it start waiting
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert asyncio.all_tasks() == before

    async def test_another_handle_sees_commits_through_subscribe(
        self,
        make_log: LogFactory,
    ) -> None:
        """Commits made through one handle reach a subscriber on another handle."""
        writer = await make_log()
        reader = await make_log()
        await writer.append("run.r1", [note(0)], 0)
        async with subscription(reader) as live:
            assert [r.event for r in await take(live, 1)] == [note(0)]
            waiting = asyncio.create_task(take(live, 2))
            await writer.append("run.r1", [note(1), note(2)], 1)
            assert [r.event for r in await waiting] == [note(1), note(2)]
        assert await reader.version("run.r1") == 3

    async def test_expected_versions_hold_across_handles(
        self, make_log: LogFactory
    ) -> None:
        """A handle's append is checked against commits made through another handle."""
        first = await make_log()
        second = await make_log()
        await first.append("run.r1", [note(1)], 0)
        theirs = await second.append("run.r1", [note(2)], 1)
        with pytest.raises(ConcurrencyError, match="is at version 2, not 1"):
            await first.append("run.r1", [note(3)], 1)
        commit = await first.append("run.r1", [note(3)], 2)
        assert commit.last_version == 3
        assert commit.first_position > theirs.last_position
        assert [r.event for r in await second.read("run.r1")] == [
            note(1),
            note(2),
            note(3),
        ]

    # -- concurrency ---------------------------------------------------------------

    async def test_many_concurrent_appends_keep_every_stream_contiguous(
        self,
        log: EventLog,
    ) -> None:
        """200 racing writers over 50 streams: contiguous streams, each append once."""
        tasks, rounds, streams = 200, 20, 50
        won: dict[str, tuple[str, int, int]] = {}  # event content -> where it landed
        lost = 0

        async def writer(w: int) -> None:
            nonlocal lost
            rng = random.Random(w)
            for i in range(rounds):
                stream = f"load.{rng.randrange(streams)}"
                expected = await log.version(stream)
                size = 1 + (w + i) % 3
                sent = [
                    run_kind.NoteRecorded(category=stream, content=f"{w}.{i}.{k}")
                    for k in range(size)
                ]
                try:
                    commit = await log.append(stream, sent, expected)
                except ConcurrencyError as e:
                    assert e.expected == expected and e.actual > expected
                    lost += 1
                    continue
                for r in commit.records:
                    assert isinstance(r.event, run_kind.NoteRecorded)
                    won[r.event.content] = (r.stream, r.version, r.position)

        await asyncio.gather(*(writer(w) for w in range(tasks)))

        assert lost > 0, "the writers never raced; the test proves nothing"
        everything = await read_everything(log, page=1_000)
        positions = [r.position for r in everything]
        assert positions == sorted(set(positions))
        seen = {
            r.event.content: (r.stream, r.version, r.position)
            for r in everything
            if isinstance(r.event, run_kind.NoteRecorded)
        }
        assert len(everything) == len(seen) == len(won)
        assert seen == won
        for stream in await log.streams("load."):
            got = await log.read(stream)
            assert [r.version for r in got] == list(range(1, len(got) + 1))
            assert await log.version(stream) == len(got)

    # -- closing -------------------------------------------------------------------

    async def test_close_is_idempotent_and_refuses_later_appends(
        self, log: EventLog
    ) -> None:
        """close can be called twice; an append after it raises LogWriteError."""
        await log.append("run.r1", [note(0)], 0)
        await log.close()
        await log.close()
        with pytest.raises(LogWriteError, match="closed"):
            await log.append("run.r1", [note(1)], 1)
