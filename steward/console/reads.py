"""What the console reads: actors listed through their kinds' `Listing`,
an actor's history from the log (cached, paged, filtered, grouped), what
it still waits for, and the prompt of a model call.

Nothing here names a kind: each kind says how its actors are listed
(`steward.actors.kind.Surface.listing`) and how it folds; the log and the
projector's ``pending`` rows are the same for every kind.
"""

from __future__ import annotations

import asyncio
import bisect
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from steward import events, replay
from steward.actors.kind import Kind, Kinds, Listing
from steward.bus import EventLog
from steward.errors import NotFoundError, StewardError
from steward.isotime import iso_time, moment
from steward.projections.store import Projector
from steward.projections.summary import summary

__all__ = [
    "ActorRow",
    "Filters",
    "Group",
    "Held",
    "History",
    "Life",
    "Page",
    "actor_rows",
    "children",
    "counts",
    "failed",
    "grouped",
    "lives",
    "pending",
    "prompt_of",
    "row_of",
    "span",
    "timeline",
    "window",
]

PAGE = 100
"""Events (or actors) a page shows."""


class BadRequest(StewardError):
    """A page, filter or action the console cannot give: a 400."""


@dataclass(frozen=True)
class ActorRow:
    """One actor as the lists show it."""

    stream: str
    kind: str
    id: str
    status: str
    created: float
    updated: float
    text: str
    parent: str | None
    output: str | None
    tokens: int
    cost: float

    @property
    def created_at(self) -> str:
        return iso_time(self.created)

    @property
    def updated_at(self) -> str:
        return iso_time(self.updated)


def _select(kind: Kind[Any], listing: Listing) -> str:
    return (
        f"SELECT ? AS kind, {listing.id} AS id, {listing.status} AS status, "
        f"{listing.created} AS created, {listing.updated} AS updated, "
        f"COALESCE({listing.text}, '') AS text, {listing.parent} AS parent, "
        f"{listing.output} AS output, COALESCE({listing.tokens}, 0) AS tokens, "
        f"COALESCE({listing.cost}, 0) AS cost FROM {listing.table}"
    )


def _listed(kinds: Kinds, kind: str | None) -> list[Kind[Any]]:
    if kind is not None and kind not in kinds:
        raise BadRequest(
            f"no actor kind {kind!r}; the kinds are {', '.join(kinds.names)}"
        )
    return [
        k
        for k in kinds
        if k.surface.listing is not None and (kind is None or k.name == kind)
    ]


def _union(listed: list[Kind[Any]]) -> tuple[str, list[Any]]:
    """Every listed kind's actors as one SQL table (``kind``, ``id``,
    ``status``, ``created``, ``updated``, ``text``, ``parent``, ``output``,
    ``tokens``, ``cost``)."""
    parts, params = [], []
    for kind in listed:
        assert kind.surface.listing is not None
        parts.append(_select(kind, kind.surface.listing))
        params.append(kind.name)
    return " UNION ALL ".join(parts), params


def _row(row: Sequence[Any]) -> ActorRow:
    kind, actor_id, status, created, updated, text, parent, output, tokens, cost = row
    return ActorRow(
        stream=f"{kind}.{actor_id}",
        kind=kind,
        id=actor_id,
        status=str(status),
        created=float(created or 0),
        updated=float(updated or 0),
        text=str(text),
        parent=parent,
        output=None if output is None else str(output),
        tokens=int(tokens or 0),
        cost=float(cost or 0),
    )


@dataclass(frozen=True)
class Filters:
    """What the lists keep: actors in a status, about a text, created in a
    window (epoch seconds, ``since`` included, ``until`` not)."""

    status: str | None = None
    text: str | None = None
    since: float | None = None
    until: float | None = None


def window(
    since: str | None, until: str | None, now: float
) -> tuple[float | None, float | None]:
    """The created-time window ``?since=`` and ``?until=`` name (each a span
    before ``now``, ``1h``, ``7d``, or an ISO date or time; ``until`` a date
    alone: to the end of that day).

    Raises:
        BadRequest: one is not a time, or ``since`` is not before ``until``.
    """
    bounds: list[float | None] = []
    for name, given in (("since", since), ("until", until)):
        if not given:
            bounds.append(None)
            continue
        try:
            bounds.append(moment(given, now, day_end=name == "until"))
        except ValueError as e:
            raise BadRequest(f"{name}: {e}") from None
    start, end = bounds
    if start is not None and end is not None and start >= end:
        raise BadRequest(
            f"since {since!r} is not before until {until!r}: no actor was "
            "created in between"
        )
    return start, end


def _where(filters: Filters, *, status: bool = True) -> tuple[str, list[Any]]:
    conditions: list[str] = []
    params: list[Any] = []
    if status and filters.status:
        conditions.append("status = ?")
        params.append(filters.status)
    if filters.text:
        conditions.append(
            "(instr(lower(text), lower(?)) OR instr(lower(id), lower(?)))"
        )
        params += [filters.text, filters.text]
    if filters.since is not None:
        conditions.append("created >= ?")
        params.append(filters.since)
    if filters.until is not None:
        conditions.append("created < ?")
        params.append(filters.until)
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), params


async def actor_rows(
    projector: Projector,
    kinds: Kinds,
    *,
    kind: str | None = None,
    filters: Filters = Filters(),
    page: str | None = None,
) -> tuple[list[ActorRow], Page]:
    """The actors that pass the filters, newest first, on ``page`` (from 1;
    `page_of` says which it may be), and that page."""
    listed = _listed(kinds, kind)
    if not listed:
        return [], page_of(0, page, last=False)
    union, params = _union(listed)
    where, more = _where(filters)
    total = await projector.query(
        f"SELECT COUNT(*) FROM ({union}){where}", [*params, *more]
    )
    shown = page_of(int(total[0][0]), page, last=False)
    found = await projector.query(
        f"SELECT * FROM ({union}){where} ORDER BY created DESC, id LIMIT ? OFFSET ?",
        [*params, *more, PAGE, shown.start],
    )
    return [_row(r) for r in found], shown


async def counts(
    projector: Projector,
    kinds: Kinds,
    *,
    kind: str | None = None,
    filters: Filters = Filters(),
) -> dict[str, int]:
    """How many actors (of ``kind``, or all) that pass the filters but the
    status there are in each status."""
    listed = _listed(kinds, kind)
    if not listed:
        return {}
    union, params = _union(listed)
    where, more = _where(filters, status=False)
    found = await projector.query(
        f"SELECT status, COUNT(*) FROM ({union}){where} GROUP BY status "
        "ORDER BY status",
        [*params, *more],
    )
    return {str(status): int(n) for status, n in found}


async def row_of(
    projector: Projector, kinds: Kinds, stream: str
) -> tuple[ActorRow | None, dict[str, Any]]:
    """The actor of ``stream`` as the lists show it, and the whole row of its
    kind's listing table (``None`` and ``{}`` for a kind without one, or
    before its read models have it)."""
    kind = kinds.of(stream)
    listing = kind.surface.listing
    if listing is None:
        return None, {}
    actor_id = stream.partition(".")[2]
    found = await projector.query(
        f"SELECT * FROM ({_select(kind, listing)}) WHERE id = ?", [kind.name, actor_id]
    )
    if not found:
        return None, {}
    names = await projector.query(
        f"SELECT name FROM pragma_table_info('{listing.table}')"
    )
    whole = await projector.query(
        f"SELECT * FROM {listing.table} WHERE {listing.id} = ?", [actor_id]
    )
    return _row(found[0]), dict(zip((n for (n,) in names), whole[0], strict=True))


async def children(projector: Projector, kinds: Kinds, stream: str) -> list[ActorRow]:
    """The actors that answer ``stream``, oldest first."""
    listed = _listed(kinds, None)
    if not listed:
        return []
    union, params = _union(listed)
    found = await projector.query(
        f"SELECT * FROM ({union}) WHERE parent = ? ORDER BY created, id",
        [*params, stream],
    )
    return [_row(r) for r in found]


@dataclass(frozen=True)
class Held:
    """A stream's records, and its actor's state after them."""

    records: list[events.Recorded]
    state: Any

    def ends_step(self, version: int, kind: Kind[Any]) -> bool:
        """Whether a step ends at ``version`` (the next record is an input,
        or there is none): where a fork may be made."""
        return version == len(self.records) or kind.is_input(
            self.records[version].event  # the record of version + 1
        )


class History:
    """The records of the streams the console shows, and each one's state,
    read from the log and folded once, then only what was appended since
    (a few streams at a time)."""

    def __init__(self, log: EventLog, kinds: Kinds, keep: int = 8) -> None:
        self._log = log
        self._kinds = kinds
        self._keep = keep
        self._streams: OrderedDict[str, Held] = OrderedDict()
        self._lock = asyncio.Lock()

    async def held(self, stream: str) -> Held:
        """Every record of ``stream``, and the state after them.

        Raises:
            NotFoundError: the log holds no such stream (or its name is of
                no kind).
        """
        kind = self._kinds.of(stream)
        async with self._lock:
            held = self._streams.pop(stream, None) or Held([], kind.decider.initial)
            new = await self._log.read(stream, len(held.records) + 1)
            if new:
                state = kind.fold((r.event for r in new), held.state)
                held = Held(held.records + new, state)
            self._streams[stream] = held
            while len(self._streams) > self._keep:
                self._streams.popitem(last=False)
        if not held.records:
            raise NotFoundError(f"no stream {stream!r} in the log")
        return held


def failed(event: events.Event) -> bool:
    """Whether an event tells of a failure: its type says so (``…Failed``),
    or it answers a call that did not succeed (``ok`` false, an ``error``)."""
    return (
        "Failed" in events.type_name(event)
        or getattr(event, "ok", True) is False
        or bool(getattr(event, "error", None))
    )


_json = msgspec.json.Encoder()


@dataclass(frozen=True)
class Shown:
    """One event as the history shows it."""

    version: int
    position: int
    at: str
    type: str
    summary: str
    json: str
    failed: bool
    request_id: str | None
    is_input: bool


def shown(rec: events.Recorded, kind: Kind[Any]) -> Shown:
    event = rec.event
    request_id = getattr(event, "request_id", None)
    return Shown(
        version=rec.version,
        position=rec.position,
        at=iso_time(rec.at),
        type=events.type_name(event),
        summary=summary(event, 240),
        json=msgspec.json.format(_json.encode(event), indent=2).decode(),
        failed=failed(event),
        request_id=request_id if isinstance(request_id, str) else None,
        is_input=kind.is_input(event),
    )


@dataclass(frozen=True)
class Group:
    """A request with what answered it (the compact view), or a lone event."""

    first: Shown
    answers: tuple[Shown, ...]


def grouped(records: Sequence[events.Recorded], kind: Kind[Any]) -> list[Group]:
    """``records`` with each event that names a request already seen put
    under the first event that named it."""
    groups: list[tuple[Shown, list[Shown]]] = []
    by_request: dict[str, list[Shown]] = {}
    for rec in records:
        one = shown(rec, kind)
        if one.request_id is not None and one.request_id in by_request:
            by_request[one.request_id].append(one)
            continue
        answers: list[Shown] = []
        groups.append((one, answers))
        if one.request_id is not None:
            by_request[one.request_id] = answers
    return [Group(first, tuple(answers)) for first, answers in groups]


@dataclass(frozen=True)
class Page:
    """One page of a list of ``total`` things."""

    number: int
    count: int
    total: int

    @property
    def start(self) -> int:
        return (self.number - 1) * PAGE


def page_of(total: int, asked: str | None, *, last: bool) -> Page:
    """The page ``asked`` (a number from 1; none: the first, or the last
    when ``last``) of ``total`` things.

    Raises:
        BadRequest: ``asked`` is not a number.
        NotFoundError: there is no such page.
    """
    count = max(1, math.ceil(total / PAGE))
    if asked is None or asked == "":
        return Page(count if last else 1, count, total)
    try:
        number = int(asked)
    except ValueError:
        raise BadRequest(f"page {asked!r} is not a number") from None
    if not 1 <= number <= count:
        raise NotFoundError(f"no page {number}: there are {count}")
    return Page(number, count, total)


async def pending(
    projector: Projector, stream: str, records: Sequence[events.Recorded]
) -> list[dict[str, Any]]:
    """What the actor still waits for (the projector's pending rows), each
    with the attempts made and the last error recorded for it."""
    rows = await projector.query(
        "SELECT key, kind, version, due_at, requested_at FROM pending "
        "WHERE stream = ? ORDER BY version, key",
        [stream],
    )
    found = []
    for key, what, version, due_at, requested_at in rows:
        tries = [
            r.event
            for r in records
            if getattr(r.event, "request_id", None) == key and failed(r.event)
        ]
        last = tries[-1] if tries else None
        found.append(
            {
                "key": key,
                "kind": what,
                "version": version,
                "due": None if due_at is None else iso_time(due_at),
                "since": iso_time(requested_at),
                "attempts": len(tries),
                "error": None if last is None else summary(last, 400),
            }
        )
    return found


def prompt_of(
    records: Sequence[events.Recorded], kind: Kind[Any], version: int
) -> dict[str, Any]:
    """The prompt of the model call recorded at ``version``, as it was sent.

    Raises:
        NotFoundError: no model call is recorded there, or the kind builds
            no prompts.
    """
    at = next((r for r in records if r.version == version), None)
    if at is None or not isinstance(at.event, events.LlmRequested):
        raise NotFoundError(f"no model call is recorded at version {version}")
    if kind.reactor.model_call is None:
        raise NotFoundError(f"a {kind.name} does not say what its model calls send")
    state = replay.rebuild(records, version, kind)
    prompt = kind.reactor.model_call(state, at.event, None, None).prompt
    return {
        "request_id": at.event.request_id,
        "version": version,
        "system": prompt.system,
        "messages": [{"role": m.role, "content": m.content} for m in prompt.messages],
    }


@dataclass(frozen=True)
class Bar:
    """One bar of the timeline: a step (an input and its decisions), or a
    call one made (a model or tool call, a timer) until its answer."""

    label: str
    step: bool
    start: float
    """Seconds from the actor's first record."""
    end: float
    first: int
    last: int
    """The version the step ends at (a fork may be made there), or the
    answer's."""
    detail: str
    failed: bool
    child: str | None = None
    """The stream of the child actor the bar is the life of (started by the
    step above it), if it is one."""

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Life:
    """A child actor's life as its parent's timeline draws it: its row, the
    times of its first and last records, how many it has, and the id of the
    parent's record that started it (its first record's causation)."""

    row: ActorRow
    start: float
    end: float
    events: int
    cause: str | None


async def lives(log: EventLog, rows: Sequence[ActorRow]) -> list[Life]:
    """The lives of the actors ``rows`` (an actor's children) from the log
    (each child's stream read once; one not in the log yet is left out)."""
    found = []
    for row in rows:
        records = await log.read(row.stream)
        if records:
            first, last = records[0], records[-1]
            found.append(Life(row, first.at, last.at, len(records), first.causation_id))
    return found


def _child_bar(life: Life, origin: float) -> Bar:
    row = life.row
    return Bar(
        label=row.stream,
        step=False,
        start=life.start - origin,
        end=life.end - origin,
        first=1,
        last=life.events,
        detail=(
            f"{row.status}, {life.events} events, {life.end - life.start:.3f}s: "
            f"{row.text if row.output is None else row.output}"
        ),
        failed=row.status == "failed",
        child=row.stream,
    )


def _call_id(event: events.Event) -> str | None:
    for name in ("request_id", "timer_id"):
        value = getattr(event, name, None)
        if isinstance(value, str):
            return value
    return None


def timeline(
    records: Sequence[events.Recorded], kinds: Kinds, children: Sequence[Life] = ()
) -> list[Bar]:
    """The actor's steps, each followed by the calls it asked for, as bars
    from when each began to when the next step began (or the call was
    answered; one never answered runs to the last record), then by the
    lives of the ``children`` it started (the step whose record a child's
    first record names as its cause; failing that, the last step begun
    before the child)."""
    if not records:
        return []
    kind = kinds.of(records[0].stream)
    origin, last_at = records[0].at, records[-1].at
    steps = replay.commits(records, kinds)
    started = _started_by(steps, children)
    bars: list[Bar] = []
    asked: dict[str, tuple[int, events.Recorded]] = {}
    answered: dict[str, events.Recorded] = {}
    for rec in records:
        key = _call_id(rec.event)
        if key is None:
            continue
        if key not in asked:
            asked[key] = (len(asked), rec)
        elif kind.is_input(rec.event):
            answered[key] = rec
    starts = [step[0].at for step in steps] + [last_at]
    by_step: dict[int, list[str]] = {}
    for key, (_, rec) in asked.items():
        by_step.setdefault(rec.version, []).append(key)
    for n, step in enumerate(steps):
        head = step[0]
        bars.append(
            Bar(
                label=events.type_name(head.event),
                step=True,
                start=head.at - origin,
                end=starts[n + 1] - origin,
                first=head.version,
                last=step[-1].version,
                detail=summary(head.event, 160),
                failed=any(failed(r.event) for r in step),
            )
        )
        for rec in step[1:]:
            for key in by_step.get(rec.version, ()):
                answer = answered.get(key)
                end = answer.at if answer is not None else last_at
                usage = getattr(answer.event, "usage", None) if answer else None
                tokens = (
                    f", {usage.input_tokens}+{usage.output_tokens} tokens"
                    if usage is not None
                    else ""
                )
                bars.append(
                    Bar(
                        label=events.type_name(rec.event),
                        step=False,
                        start=rec.at - origin,
                        end=end - origin,
                        first=rec.version,
                        last=answer.version if answer is not None else rec.version,
                        detail=(
                            f"{key}: {end - rec.at:.3f}s{tokens}"
                            if answer is not None
                            else f"{key}: no answer yet"
                        ),
                        failed=answer is not None and failed(answer.event),
                    )
                )
        bars += (_child_bar(life, origin) for life in started.get(n, ()))
    return bars


def _started_by(
    steps: Sequence[Sequence[events.Recorded]], children: Sequence[Life]
) -> dict[int, list[Life]]:
    """The children each step started (by the step's index), oldest first."""
    step_of = {rec.id: n for n, step in enumerate(steps) for rec in step}
    starts = [step[0].at for step in steps]
    found: dict[int, list[Life]] = {}
    for life in sorted(children, key=lambda c: c.start):
        n = step_of.get(life.cause or "")
        if n is None:
            n = max(0, bisect.bisect_right(starts, life.start) - 1)
        found.setdefault(n, []).append(life)
    return found


def span(bars: Sequence[Bar]) -> tuple[float, float]:
    """The seconds ``bars`` cover: from the first start to the last end."""
    if not bars:
        return 0.0, 1.0
    start = min(b.start for b in bars)
    return start, max(max(b.end for b in bars), start + 1e-3)
