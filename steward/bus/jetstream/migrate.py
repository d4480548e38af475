"""Copy a JetStream log made before partitions into a partitioned one.

A log of an earlier steward (its stream has no ``steward_partitions`` in its
metadata) keeps every commit under ``<prefix>.<stream>``: one unsplit
partition, which one worker holds. JetStream cannot move a stream's
messages to other subjects in place, so the log is copied: each commit of
the old log, in the log's order, is appended to the new one through the
log's own API (`JetStreamEventLog.read_all`, `JetStreamEventLog.append`),
with the same events, first version, time, correlation and causation ids.
An event's id is its stream and version, so ids are kept too; positions
are kept as well when the old stream's sequences have no gaps (a steward
log never deletes a message), since one commit is one message in both.

The copy is made one commit at a time, each confirmed before the next is
sent, so the new log always holds a prefix of the old one, in order. A
copy that stopped part-way (a crash, a lost connection) is continued by
running again with ``resume``: each stream's commits the new log holds
already are skipped (its version says which), and nothing is copied twice
(the append names the version it follows). At the end both logs are read
through side by side and every event compared.

Events are decoded and encoded again on the way, so an event of a retired
shape is stored in its current one (its upcaster applied once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from steward.bus.jetstream.log import POSITIONS_PER_COMMIT, JetStreamEventLog
from steward.errors import ConcurrencyError, StewardError
from steward.events import Recorded

__all__ = [
    "Copied",
    "Verified",
    "check_source",
    "check_target",
    "check_target_url",
    "copy",
    "verify",
]

_PAGE = 5_000  # events read from the old log at a time


@dataclass
class Copied:
    """What a migration copied."""

    streams: int = 0
    """Streams the old log holds."""
    commits: int = 0
    """Commits appended to the new log by this migration."""
    events: int = 0
    """Events in the commits appended."""
    skipped: int = 0
    """Commits the new log held already (a migration resumed)."""


@dataclass
class Verified:
    """The two logs read side by side."""

    events: int
    """Events compared."""
    positions_kept: bool
    """Whether every event kept its position too."""
    mismatch: str | None
    """The first difference, in words; ``None`` when the logs match."""


def _overlaps(a: str, b: str) -> bool:
    """Whether subject prefixes ``a`` and ``b`` capture subjects in common
    (one is the other or begins it, token by token)."""
    x, y = a.split("."), b.split(".")
    n = min(len(x), len(y))
    return x[:n] == y[:n]


async def check_source(source: JetStreamEventLog, how: str) -> None:
    """Refuse a source that is partitioned already, or that a process hosts
    (it must not change while it is copied). ``how`` is the command to name.

    Raises:
        StewardError: the source cannot be migrated now; the message says why.
    """
    if source.partitions:
        raise StewardError(
            f"the log {source} is partitioned already ({source.partitions} "
            "partitions): there is nothing to migrate"
        )
    host = await source.host(timeout=1.0)
    if host is not None:
        raise StewardError(
            f"the log {source} is hosted ({host} answers on it); stop every "
            f"`steward serve` and `steward worker` on it first, so that it does "
            f"not change while it is copied, then run `{how}` again"
        )


def check_target_url(
    source: JetStreamEventLog, servers: list[str], stream: str, prefix: str
) -> None:
    """Refuse a target that is the source itself, or whose subjects would
    overlap the source's on the same servers (JetStream refuses two streams
    capturing one subject).

    Raises:
        StewardError: the message says what to give instead.
    """
    shared = bool(set(servers) & set(source.servers))
    if not shared:
        return
    example = f"stream={source.stream}_P&prefix={source.prefix}_p"
    if stream == source.stream:
        raise StewardError(
            f"the target names the log's own stream {stream}; a migration "
            f"copies it into a new one: give the target another stream and "
            f"prefix in its URL (?{example})"
        )
    if _overlaps(prefix, source.prefix):
        raise StewardError(
            f"the target's subject prefix {prefix} overlaps the log's "
            f"({source.prefix}) on the same servers, where JetStream lets no "
            f"two streams share a subject: give the target another prefix in "
            f"its URL (?{example})"
        )


async def check_target(target: JetStreamEventLog, resume: bool, how: str) -> None:
    """Refuse a target that is unpartitioned, or that holds commits already
    unless ``resume``.

    Raises:
        StewardError: the message says why, and what to do.
    """
    if not target.partitions:
        raise StewardError(
            f"the target {target} is itself a log made before partitions; name "
            "a new stream (and prefix) in its URL"
        )
    head = await target.head()
    if head and not resume:
        commits = head // POSITIONS_PER_COMMIT
        raise StewardError(
            f"the target {target} is not empty (it holds {commits:,} commits); "
            f"if an earlier `{how}` stopped part-way, add --resume to go on "
            "from where it stopped; otherwise name a new stream"
        )


async def copy(
    source: JetStreamEventLog,
    target: JetStreamEventLog,
    *,
    resume: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Copied:
    """Append each commit of ``source`` to ``target``, in the log's order.

    With ``resume``, a commit whose stream the target holds up to its last
    version already is skipped; without it, the target must be empty.
    ``progress`` is called with the source position reached, after each page.

    Raises:
        StewardError: the target holds a stream the source's commits do not
            continue (it is not a copy of this log's beginning), or another
            process wrote to it meanwhile.
    """
    copied = Copied()
    versions: dict[str, int] = {}  # stream -> the target's version, once known
    commit: list[Recorded] = []  # the events of the commit being gathered

    async def flush() -> None:
        if not commit:
            return
        first, last = commit[0], commit[-1]
        stream = first.stream
        at = versions.get(stream)
        if at is None:
            at = await target.version(stream) if resume else 0
            copied.streams += 1
        if at >= last.version:
            copied.skipped += 1
            versions[stream] = at
            commit.clear()
            return
        if at != first.version - 1:
            raise StewardError(
                f"the target's stream {stream} is at version {at}, but the "
                f"log's next commit to it begins at {first.version}: the target "
                "is not a copy of this log's beginning; name a new stream"
            )
        try:
            await target.append(
                stream,
                [r.event for r in commit],
                at,
                correlation_id=first.correlation_id,
                causation_id=first.causation_id,
                at=first.at,
            )
        except ConcurrencyError as e:
            raise StewardError(
                f"another process wrote to {stream} in the target while it was "
                f"copied ({e}); nothing may use the target before the migration "
                "ends: stop it and run again with --resume"
            ) from e
        versions[stream] = last.version
        copied.commits += 1
        copied.events += len(commit)
        commit.clear()

    after = 0
    while True:
        page = await source.read_all(after, _PAGE)
        if not page:
            break
        for rec in page:
            if commit and (
                rec.position // POSITIONS_PER_COMMIT
                != commit[0].position // POSITIONS_PER_COMMIT
            ):
                await flush()
            commit.append(rec)
        # the last commit of a page may go on in the next one
        after = page[-1].position
        if progress is not None:
            progress(after)
    await flush()
    return copied


async def verify(source: JetStreamEventLog, target: JetStreamEventLog) -> Verified:
    """Read both logs side by side: the same streams, versions, events,
    times, correlation and causation ids, in the same order."""
    checked = 0
    kept = True
    old_after = new_after = 0
    while True:
        old = await source.read_all(old_after, _PAGE)
        new = await target.read_all(new_after, len(old) or 1)
        for a, b in zip(old, new, strict=False):
            checked += 1
            kept = kept and a.position == b.position
            if (a.stream, a.version, a.at, a.correlation_id, a.causation_id) != (
                b.stream,
                b.version,
                b.at,
                b.correlation_id,
                b.causation_id,
            ) or a.event != b.event:
                return Verified(
                    checked,
                    kept,
                    f"event {checked:,} of the log is {a.id} at {a.at} but the "
                    f"target's is {b.id} at {b.at}"
                    if a.id != b.id or a.at != b.at
                    else f"{a.id} differs in the target (its event, correlation "
                    "or causation id)",
                )
        if len(old) != len(new):
            shorter = min(len(old), len(new))
            if len(old) > len(new):
                problem = (
                    f"the log holds more events, from {old[shorter].id} on: it "
                    "changed while it was copied (stop every serve and worker "
                    "on it, then run again with --resume)"
                )
            else:
                problem = (
                    f"the target holds more events, from {new[shorter].id} on: "
                    "it was written to meanwhile"
                )
            return Verified(checked, kept, problem)
        if not old:
            return Verified(checked, kept, None)
        old_after, new_after = old[-1].position, new[-1].position
