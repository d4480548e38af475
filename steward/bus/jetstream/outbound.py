"""What steward tells services, kept by JetStream, and how far each
partition's egress has told it.

The stream ``STEWARD_OUTBOUND`` (`keep_outbound`, ``[outbound]``) captures
``steward.outbound.>``: every outbound message is stored there, with its
event's id as ``Nats-Msg-Id``, so that a message published again within the
duplicate window (after a crash, or by a partition's next holder) is stored
once, and a service's durable consumer reads each once, including what was
told while the service was away. Core subscribers of the subjects hear each
publish live, as before.

The egress of the host holding a partition publishes what that partition's
streams tell (`steward.egress`); how far it got is kept per partition in the
key-value bucket ``<stream>_EGRESS`` (`Told`), so the partition's next holder
(or this one, restarted) publishes what was told after it, and nothing is
lost whatever process dies. ``partition.<n>`` holds msgpack ``[created,
position]``; ``origin`` the log's head when the bucket was made: a
partition never told of starts there (what a log recorded before steward
kept outbound messages is not published again).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import nats.errors
import nats.js.api
import nats.js.errors

from steward.bus.jetstream.kept import kept_bucket, kept_stream
from steward.config.settings import OutboundConfig

logger = logging.getLogger(__name__)

OUTBOUND_SUBJECTS = "steward.outbound.>"

_decoder = msgspec.msgpack.Decoder(tuple[str, int])
_encoder = msgspec.msgpack.Encoder()


async def keep_outbound(js: Any, config: OutboundConfig, *, replicas: int = 1) -> None:
    """Make sure stream ``config.stream`` keeps ``steward.outbound.>``.

    An existing stream of that name is used as it is, so an operator may
    change its limits.
    """
    await kept_stream(
        js,
        nats.js.api.StreamConfig(
            name=config.stream,
            subjects=[OUTBOUND_SUBJECTS],
            storage=nats.js.api.StorageType.FILE,
            max_age=config.max_age_seconds,
            duplicate_window=config.duplicate_window_seconds,
            num_replicas=replicas,
        ),
    )


class Told:
    """How far the egress of each partition of a JetStream log has told:
    the position of the last record whose outbound message is stored."""

    def __init__(self, log: Any, timeout: float = 2.0) -> None:
        self.log = log
        self._timeout = timeout
        self._kv: Any = None
        self._origin: int | None = None

    @property
    def bucket(self) -> str:
        return f"{self.log.stream}_EGRESS"

    async def _bucket(self) -> Any:
        if self._kv is None:
            self._kv = await kept_bucket(self.log, self.bucket, self._timeout)
        return self._kv

    async def origin(self) -> int:
        """Where a partition never told of starts: the log's head when the
        bucket was first used (0 for a log new with it)."""
        if self._origin is None:
            kv = await self._bucket()
            value = _encoder.encode((self.log.created, await self.log.head()))
            try:
                await kv.create("origin", value)
            except nats.js.errors.KeyWrongLastSequenceError:
                pass  # another host made it first: theirs holds
            created, position = _decoder.decode((await kv.get("origin")).value)
            self._origin = position if created == self.log.created else 0
        return self._origin

    async def load(self, partition: int) -> int:
        """The position ``partition``'s egress reached (`origin` when none
        is saved).

        Raises:
            nats.errors.Error: the bucket cannot be read (the caller tries
                again: a partition's messages are not skipped).
        """
        try:
            entry = await (await self._bucket()).get(f"partition.{partition}")
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return await self.origin()
        except nats.errors.Error:
            self._kv = None  # asked for again next time
            raise
        try:
            created, position = _decoder.decode(entry.value or b"")
        except msgspec.DecodeError:
            logger.warning(
                "the egress position of partition %d of %s cannot be read: "
                "its messages are published again from the log's first",
                partition,
                self.log.stream,
            )
            return 0
        return position if created == self.log.created else 0

    async def save(self, partition: int, position: int) -> bool:
        """Save that ``partition``'s records up to ``position`` are told;
        whether it was saved (a later save tries again)."""
        try:
            value = _encoder.encode((self.log.created, position))
            await (await self._bucket()).put(f"partition.{partition}", value)
        except (nats.errors.Error, OSError) as e:
            self._kv = None
            logger.debug("saving partition %d's egress failed: %s", partition, e)
            return False
        return True
