"""What a partition's streams wait for, saved by its holder for the next.

A worker keeps in memory what the streams of the partitions it holds still
wait for (`steward.host.pending`). Without more, the next holder of a
partition rebuilds that from the partition's first record. Instead each
holder saves, per partition, its wants with the position of the last of
the partition's records they include, in the key-value bucket
``<stream>_PENDING`` (no TTL; one value per key): ``partition.<n>`` holds
msgpack ``[created, position, [[stream, key, version, kind], ...]]``,
``created`` the stream's creation time (a stream deleted and made again
under its name is another log: what was saved for the old one is
ignored). The next holder loads it and reads only the records after that
position.

Any saved checkpoint is a valid starting point, however old, as the wants
are those of every record up to its position: a save that loses a race to
another holder's newer one costs a longer read, never a want. A checkpoint
that cannot be read or loaded is ignored, and the partition read whole.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import nats.errors
import nats.js.errors

from steward.bus.jetstream.kept import kept_bucket

logger = logging.getLogger(__name__)

Want = tuple[str, str, int, str]
"""(stream, key, version of the record that asked, kind of want)."""

_decoder = msgspec.msgpack.Decoder(tuple[str, int, list[Want]])
_encoder = msgspec.msgpack.Encoder()


class Checkpoints:
    """The saved wants of a JetStream log's partitions."""

    def __init__(self, log: Any, timeout: float = 2.0) -> None:
        self.log = log
        self._timeout = timeout
        self._kv: Any = None

    @property
    def bucket(self) -> str:
        return f"{self.log.stream}_PENDING"

    async def _bucket(self) -> Any:
        if self._kv is None:
            self._kv = await kept_bucket(self.log, self.bucket, self._timeout)
        return self._kv

    async def load(self, partition: int) -> tuple[int, list[Want]] | None:
        """The position and wants saved for ``partition``; ``None`` when
        none is, or it cannot be read (then the partition is read whole)."""
        try:
            entry = await (await self._bucket()).get(f"partition.{partition}")
            created, position, wants = _decoder.decode(entry.value or b"")
            if created != self.log.created:
                return None  # saved for a stream of this name deleted since
            return position, wants
        except nats.js.errors.KeyNotFoundError:
            return None
        except (nats.errors.Error, msgspec.DecodeError, OSError) as e:
            self._kv = None
            logger.warning(
                "the saved wants of partition %d of %s cannot be read (%s): "
                "it is read from its first record",
                partition,
                self.log.stream,
                e or type(e).__name__,
            )
            return None

    async def save(self, partition: int, position: int, wants: list[Want]) -> bool:
        """Save ``partition``'s wants, those of its records up to
        ``position``; whether it was saved (a later save tries again)."""
        try:
            value = _encoder.encode((self.log.created, position, wants))
            await (await self._bucket()).put(f"partition.{partition}", value)
        except (nats.errors.Error, OSError) as e:
            self._kv = None
            logger.debug("saving partition %d's wants failed: %s", partition, e)
            return False
        return True
