"""Actor kinds: each kind is a value, and a table of them (`Kinds`) maps
stream names to them.

An actor's stream is named ``<kind>.<id>`` (``run.r1``); its kind is the first
segment. A `Kind` bundles what everything outside the actor needs of it, in
three parts: its `Decider` (``initial``, ``evolve``, ``decide``, which of its
events are inputs, a step of its stream being an input and the decisions
after it, and every event type it records), its `Reactor` (what its
committed decisions ask of the host, and what it still waits for) and its
`Surface` (its read models, what it tells a channel, how it shows itself,
the ids a fork renames). A `Kinds` table is given to each part that serves actors (the
host, the projector, replay, the egress, and the log, which decodes into the
union of the table's events); steward's own is `steward.kinds.KINDS`, the
one place that names them. Nothing here is module state: a test runs a kind
of its own by building a table with it.

A kind's functions are pure (DESIGN §2): ``decide`` and ``evolve`` never
change the state they are given, and ``fold`` gives a new state. Its read
models alone touch the world (the projector's SQLite).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, Protocol, TypeVar

from steward.actors.effects import Effect, ModelCall, Pending, Told
from steward.actors.outstanding import Outstanding
from steward.actors.prompt import (
    Prompt,
    PromptCache,
)
from steward.actors.sections import Section
from steward.effects.tools.base import Tool
from steward.errors import NotFoundError
from steward.events import Event, EventUnion, Recorded
from steward.events.protocol import LlmRequested, ToolRequested

__all__ = [
    "Approval",
    "Column",
    "Decider",
    "Kind",
    "Kinds",
    "Listed",
    "Listing",
    "Views",
    "Reactor",
    "Step",
    "Surface",
]

S = TypeVar("S")


class Views(Protocol):
    """What the projector needs of a kind's read models
    (`steward.projections.projection.Projection` is one)."""

    @property
    def tables(self) -> tuple[str, ...]: ...
    @property
    def schema(self) -> str: ...
    @property
    def keeps_pending(self) -> bool: ...
    @property
    def watches(self) -> frozenset[type[Event]]: ...
    @property
    def apply(self) -> Callable[[Any, Recorded], None]: ...


Step = tuple[list[Event], S, Prompt | None]
"""What one accepted input does to an actor: its decisions, the state after
the input and them, and the prompt of the model call they request (``None``
when none, or when the kind leaves it to `Reactor.model_call`)."""


@dataclass(frozen=True)
class Decider(Generic[S]):
    """A kind's pure core (DESIGN §2): its state, how events fold into it,
    how it decides, and which of its events are inputs."""

    initial: S
    evolve: Callable[[S, Event], S]
    decide: Callable[[Event, S], list[Event] | None]
    inputs: tuple[type[Event], ...]
    """The event types that open a step (what arrived); all others are the
    decisions of the input before them."""
    events: tuple[type[Event], ...]
    """Every event type the kind records, inputs and decisions."""
    opens: tuple[type[Event], ...] = ()
    """The inputs that begin a stream (`RunCreated`): the host decides one
    on ``initial`` without reading a stream it knows nothing of. Appended at
    version 0, it fails if the stream has events, and is then decided again
    on them: the kind's decider must refuse an opening input on a stream
    that has begun."""
    fold_events: Callable[[Iterable[Event], S], S] | None = None
    """A fold giving what ``evolve`` event by event would, faster."""
    step: Callable[[Event, S, PromptCache | None], Step[S] | None] | None = None
    """``decide`` with the state after the step and its model call's prompt,
    where the kind builds them together; default: ``decide``, then ``fold``."""
    same_decisions: Callable[[tuple[Event, ...], tuple[Event, ...], S], bool] | None = (
        None
    )
    """Whether decisions re-decided now (second) are the recorded ones (first)
    in an older form, given the state after the step: for a kind whose old
    logs recorded a value in a form it no longer writes. ``None``: only
    equality counts."""


@dataclass(frozen=True)
class Reactor(Generic[S]):
    """What a kind's committed decisions ask of the host, and what it still
    waits for (all pure). The default asks for nothing."""

    routed: frozenset[type[Event]] = frozenset()
    """The event types `effects` may answer; the host skips the others (and
    makes the model and tool calls of `LlmRequested` and `ToolRequested`
    itself)."""
    effects: Callable[[Recorded, S, S], list[Effect]] | None = None
    """What committed event ``rec`` asks of the host, given the state at it
    and the newest state (`steward.actors.effects`)."""
    outstanding: Callable[[S], Outstanding] | None = None
    """The model and tool calls the actor asked for and awaits, with the
    claims on them (`steward.actors.outstanding`): the host skips a call
    whose answer is in already, and fences one a worker claimed. A kind
    whose events request calls must give it."""
    model_call: (
        Callable[[S, LlmRequested, PromptCache | None, Prompt | None], ModelCall] | None
    ) = None
    """What a model call the actor asked for sends: the prompt given (the one
    its decider hashed), or one built from the state at the request."""
    correlation: Callable[[S, Event], str | None] | None = None
    """The correlation id of a commit of ``input`` on ``state``."""
    workspace: Callable[[S], str | None] | None = None
    """The directory the actor's tool calls work in, if not the host's."""
    pending: Callable[[Recorded], Pending] | None = None
    """What a recorded event changes in the effects still to carry out
    (timers, deliveries, creations), for the pending projection a host
    resumes from after a crash; given the record, as the event of a kind
    may not name its actor (a run's end does not), its stream does. A kind
    with ``effects`` needs it, or those effects are lost when a host dies
    before carrying them out. The run kind's rows are kept by its own
    projection (`steward.actors.run.projection`), which its ``pending`` states
    again for the kind contract (`steward.actors.run.reactor.pending`)."""


@dataclass(frozen=True)
class Column:
    """A column of the text table a kind's ``list`` command prints."""

    title: str
    value: str | Callable[[dict[str, Any]], object]
    """The row's field it shows (the row as ``-o json`` prints it), or a
    function of the row."""
    width: int | None = None
    """The characters it shows, on one line (cut with a marker)."""
    right: bool = False
    """Aligned right (a number)."""


@dataclass(frozen=True)
class Listed:
    """What a kind's ``list`` command (``steward KIND list``, one command for
    every kind: `steward.cli.listing`) prints of each actor: the fields of
    its ``-o json`` line, each an SQL expression over a row of the listing's
    table, and the columns of its text table."""

    fields: tuple[tuple[str, str], ...]
    """(name, SQL expression), in the order a JSON line gives them."""
    columns: tuple[Column, ...]
    empty: str
    """What it says when there is no actor (``no runs yet``)."""
    order: str = "updated_at"
    """The SQL expression the list is ordered by, newest first."""
    none_in: str = "no {status} ones"
    """What it says when none is in the ``--status`` asked for."""
    times: frozenset[str] = frozenset({"updated_at"})
    """The fields that are times (seconds since the epoch), given in ISO 8601."""


@dataclass(frozen=True)
class Listing:
    """How a kind's actors are listed from its read models (the console's
    lists): the table with a row per actor, and an SQL expression over it
    for each column the lists show. An actor's stream is ``KIND.ID``."""

    table: str
    id: str
    """The actor's id (its stream is the kind's name, a dot and this)."""
    text: str
    """What the actor is about (a run's input, a workflow's name)."""
    status: str = "status"
    created: str = "created_at"
    """When the actor began (seconds since the epoch)."""
    updated: str = "updated_at"
    parent: str = "NULL"
    """The stream of the actor it answers, if any."""
    output: str = "NULL"
    """What it gave back, if anything yet."""
    tokens: str = "0"
    """The tokens its model calls took, in and out."""
    cost: str = "0"
    """What its model calls cost, in US dollars."""
    listed: Listed | None = None
    """What its ``list`` command prints; ``None``: it has none."""


@dataclass(frozen=True)
class Approval:
    """A call an actor waits on a person to approve or deny (the console
    shows it with its two buttons)."""

    request_id: str
    """What the answer names (`Surface.answer`)."""
    name: str
    """The tool it would call, or what else waits (``budget``)."""
    args: dict[str, Any]
    """The call's arguments, as the model gave them (untrusted text)."""


@dataclass(frozen=True)
class Surface(Generic[S]):
    """How a kind shows itself: its read models, what it tells a channel,
    how the command line shows it and its forks, and the ids a fork renames.
    The default: no read models, nothing told, a state shown field by
    field, the shared vocabulary's ids renamed."""

    projection: Views | None = None
    """The kind's read models (`steward.projections.projection.Projection`),
    which the projector keeps, if it has any."""
    tells: Callable[[Event, S], Told | None] | None = None
    """What a committed event tells a channel, given the actor's state (at
    or after the event: what it reads is fixed when the actor opens), or
    ``None``; the egress publishes it."""
    told: frozenset[type[Event]] = frozenset()
    """The event types `tells` may tell of; the egress reads the actor's
    state for those only."""
    updates: bool = False
    """Whether every event of the kind's streams is published as an update
    (``steward.<kind>s.<id>.updates``) by the egress."""
    show: Callable[[str, int, S], list[str]] | None = None
    """The lines `steward replay` prints of an actor's state, given its
    stream and how many events it has; ``None``: its kind and a line per
    field of the state."""
    forked: Callable[[str, str, int, S], list[str]] | None = None
    """The lines `steward fork` prints of a fork, given the stream forked,
    the fork's stream, the version forked at and the fork's state: the
    first says it was forked (then, unless `carried`, that a serve carries
    it out), the others what else to know; ``None``: the first only."""
    carried: bool = False
    """Whether `steward fork` carries a fork out itself until it ends, as
    `steward run` does a run, rather than leaving it to a serve: for the run
    kind only (the command follows a run's stream to its end)."""
    detach: Callable[[Event, str], Event] | None = None
    """A fork's inputs made an actor's of its own (one that answers no one),
    given each copied one and the id of the actor forked; ``None``: copied
    as they are."""
    derived: tuple[str, ...] = ("request_id", "timer_id")
    """The event fields that hold ids the kind derives from its actor's id
    (``<id>/llm/1``, ``<id>-t2``): a fork renames them for its own
    (`steward.replay.remap`). The shared vocabulary's request and timer ids
    by default; a kind adds its own (``run_id``, ``session_id``, ...)."""
    listing: Listing | None = None
    """How the console lists the kind's actors from its read models;
    ``None``: they are not listed (the console opens one by its stream)."""
    cancel: Callable[[str, float], Event] | None = None
    """The operator's input asking an actor to stop, given a reason and the
    time it is asked (the console's cancel); ``None``: it cannot be asked."""
    waiting: Callable[[S], list[Approval]] | None = None
    """What an actor waits on a person for, oldest first (the console's
    approve and deny); ``None``: its kind never asks."""
    answer: Callable[[str, bool, str, float], Event] | None = None
    """The operator's input answering `waiting`'s request (by id): approved
    or not, why, and when it is given; with `waiting`, or neither."""
    status: Callable[[S], str] | None = None
    """An actor's status: ``new`` or ``pending`` before it starts, then its
    own, ending in ``completed``, ``failed`` or ``cancelled``. The metrics
    count actors started and ended by kind from it; ``None``: its actors
    neither start nor end (a chat's session)."""
    sections: Callable[[S, Sequence[Recorded]], tuple[Section, ...]] | None = None
    """What the console's page of an actor shows of it beyond its summary
    and history, given its state and its stream's records (pure): tables,
    trees and graphs of plain text (`steward.actors.sections`), which the
    console renders the same for every kind; ``None``: nothing more."""
    tools: tuple[Tool[Any], ...] = ()
    """Tools the kind gives its actors, which a host's registry holds
    (`Kinds.tools`; a session's turns' memory, subagent and schedule
    tools): effects, carried out by the host like any tool."""
    commands: str | None = None
    """The module of the kind's command group on the command line (its
    package's ``grammar``), whose ``add_commands(sub)`` adds it to the
    ``steward`` command's; ``None``: none of its own (the core's replay,
    fork, export and the console serve every kind)."""


@dataclass(frozen=True)
class Kind(Generic[S]):
    """One actor kind: its name and its three parts, the decider, the
    reactor and the surface. A kind with only a decider records inputs and
    decisions and asks the host for nothing.

    Raises:
        ValueError: the reactor asks for effects but says nothing of what
            it waits for (no ``pending``, and no read models that keep its
            pending rows); the kind requests model or tool calls and its
            reactor says nothing of which it awaits (no ``outstanding``);
            or the surface says what it waits on a person for but not how
            to answer, or the other way round.
    """

    name: str
    decider: Decider[S]
    reactor: Reactor[S] = Reactor()
    surface: Surface[S] = Surface()

    def __post_init__(self) -> None:
        views = self.surface.projection
        kept = views is not None and views.keeps_pending
        if (
            self.reactor.effects is not None
            and self.reactor.pending is None
            and not kept
        ):
            raise ValueError(
                f"kind {self.name} asks the host for effects but says nothing of "
                "what it waits for: give it a pending function (or read models "
                "that keep its pending rows), or a host that dies loses them"
            )
        calls = {LlmRequested, ToolRequested} & set(self.decider.events)
        if calls and self.reactor.outstanding is None:
            raise ValueError(
                f"kind {self.name} records "
                f"{' and '.join(sorted(c.__name__ for c in calls))} but says "
                "nothing of which calls it awaits: embed a "
                "steward.actors.outstanding.Outstanding in its state, fold its "
                "events through it, and give its reactor outstanding=, or a "
                "worker's claim on a call is never fenced"
            )
        if (self.surface.waiting is None) != (self.surface.answer is None):
            raise ValueError(
                f"kind {self.name} gives one of Surface.waiting and "
                "Surface.answer without the other: an approval the console "
                "shows must be answerable, and an answer needs what it answers"
            )

    def __repr__(self) -> str:
        return f"Kind({self.name!r})"

    def replaced(self, **changes: Any) -> Kind[S]:
        """A copy with ``changes``: its ``name``, or fields of its parts.

        Raises:
            TypeError: no part has a field of that name.
        """
        name = changes.pop("name", self.name)
        parts: dict[str, Any] = {
            "decider": self.decider,
            "reactor": self.reactor,
            "surface": self.surface,
        }
        for field, value in changes.items():
            part = next(
                (p for p, v in parts.items() if field in _fields(type(v))), None
            )
            if part is None:
                raise TypeError(f"a kind has no field {field!r}")
            parts[part] = replace(parts[part], **{field: value})
        return Kind(name, **parts)

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        """The state after ``events``, from ``state`` (default: ``initial``)."""
        decider = self.decider
        start = decider.initial if state is None else state
        if decider.fold_events is not None:
            return decider.fold_events(events, start)
        for event in events:
            start = decider.evolve(start, event)
        return start

    def decide_and_fold(
        self, input: Event, state: S, cache: PromptCache | None = None
    ) -> Step[S] | None:
        """The step ``input`` makes on ``state``; ``None`` refuses it."""
        if self.decider.step is not None:
            return self.decider.step(input, state, cache)
        decisions = self.decider.decide(input, state)
        if decisions is None:
            return None
        return decisions, self.fold([input, *decisions], state), None

    def is_input(self, event: Event) -> bool:
        return isinstance(event, self.decider.inputs)

    def correlation_of(self, state: S, input: Event) -> str | None:
        """The correlation id of a commit of ``input`` on ``state`` (``None``
        for a kind that names none)."""
        correlation = self.reactor.correlation
        return None if correlation is None else correlation(state, input)


def _fields(part: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(part))


class Kinds:
    """The actor kinds a host, projector or replay serves, by name: a value
    built once and never changed (Temporal's ``Worker(workflows=[...])``).
    steward's own are `steward.kinds.KINDS`; a test or an extension builds
    a table of its own (``Kinds(*KINDS, mine)``) and hands it to the parts
    it runs, its log included (``union``)."""

    def __init__(self, *kinds: Kind[Any]) -> None:
        self._by_name: dict[str, Kind[Any]] = {}
        for kind in kinds:
            if kind.name in self._by_name:
                raise ValueError(f"there are two actor kinds named {kind.name!r}")
            self._by_name[kind.name] = kind
        self.union = EventUnion(tuple(t for kind in kinds for t in kind.decider.events))
        """The union the log decodes these kinds' events into (it raises
        for two event types of one name: the tag)."""
        self.routed: frozenset[type[Event]] = frozenset().union(
            *(kind.reactor.routed for kind in kinds)
        )
        """The event types some kind's ``effects`` may answer."""

    def __iter__(self) -> Iterator[Kind[Any]]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Kind[Any]:
        return self._by_name[name]

    def __repr__(self) -> str:
        return f"Kinds({', '.join(self._by_name)})"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    @property
    def tools(self) -> tuple[Tool[Any], ...]:
        """The tools the kinds give their actors (`Surface.tools`), which a
        host's registry is to hold (`ToolRegistry.with_builtins(extra=...)`)."""
        return tuple(t for kind in self for t in kind.surface.tools)

    def get(self, name: str) -> Kind[Any] | None:
        return self._by_name.get(name)

    def of(self, stream: str) -> Kind[Any]:
        """The kind of the actor whose stream is ``stream``."""
        kind = self._by_name.get(stream.partition(".")[0])
        if kind is None:
            raise NotFoundError(
                f"stream {stream!r} is of no actor kind steward has (its name "
                "starts with one of: "
                f"{', '.join(sorted(f'{k}.' for k in self._by_name))})"
            )
        return kind

    def replaced(self, *kinds: Kind[Any]) -> Kinds:
        """This table with ``kinds`` added, or in place of those of their
        names."""
        return Kinds(*{**self._by_name, **{k.name: k for k in kinds}}.values())
