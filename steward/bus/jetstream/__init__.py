"""The distributed event log on NATS JetStream, one module per job.

- `log`: `JetStreamEventLog`, the `EventLog` itself (how commits, positions
  and reads map onto one JetStream stream: see its docstring);
- `commits`: a commit's layout as one message;
- `subjects`: actor stream names as subjects, and back;
- `inbox`: what arrives on a handle's inbox, and the JetStream API's answers;
- `client`: the nats-py client that hands the inbox's messages over as they
  are parsed (the one use of nats-py's private API, and why);
- `follower`: the ordered pull consumer behind ``subscribe``;
- `url`: ``nats://`` event-log URLs;
- `members`, `inputs`, `reads`, `checkpoints`: the workers sharing a log;
- `kept`: the streams and buckets kept beside a log, made when missing;
- `migrate`: copying a log made before partitions into a partitioned one;
- `outbound`: the stream that keeps what steward tells services, and how
  far each partition's egress has told.

`log` (and nats-py with it) is imported when first used: a command on an
embedded log, which reads ``nats://`` URLs only to tell them apart, never
loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from steward.bus.jetstream.subjects import stream_of, subject_of
from steward.bus.jetstream.url import parse_url

if TYPE_CHECKING:
    from steward.bus.jetstream.log import POSITIONS_PER_COMMIT, JetStreamEventLog

__all__ = [
    "POSITIONS_PER_COMMIT",
    "JetStreamEventLog",
    "parse_url",
    "stream_of",
    "subject_of",
]


def __getattr__(name: str) -> Any:
    if name in ("POSITIONS_PER_COMMIT", "JetStreamEventLog"):
        from steward.bus.jetstream import log

        return getattr(log, name)
    raise AttributeError(f"module 'steward.bus.jetstream' has no attribute {name!r}")
