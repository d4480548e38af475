"""The JetStream streams and key-value buckets steward keeps beside a log
(dead letters, outbound messages, saved wants, egress positions): each
made when missing, and one that exists used as it is, so an operator may
change its limits."""

from __future__ import annotations

from typing import Any

import nats.js.api
import nats.js.errors

__all__ = ["kept_bucket", "kept_stream"]

_STREAM_IN_USE = 10058  # JetStream's code for a stream name taken


async def kept_stream(js: Any, config: nats.js.api.StreamConfig) -> None:
    """Make sure stream ``config.name`` exists: made with ``config`` when
    missing (by this process or, meanwhile, another), else left as it is."""
    try:
        await js.stream_info(config.name)
        return
    except nats.js.errors.NotFoundError:
        pass
    try:
        await js.add_stream(config)
    except nats.js.errors.BadRequestError as e:
        if e.err_code != _STREAM_IN_USE:  # else made by another meanwhile
            raise


async def kept_bucket(log: Any, bucket: str, timeout: float) -> Any:
    """Key-value bucket ``bucket`` beside ``log``: one value a key, in files,
    with the log's replicas; made if missing."""
    js = log.connection.jetstream(timeout=timeout)
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        config = nats.js.api.KeyValueConfig(
            bucket=bucket,
            history=1,
            replicas=log.replicas,
            storage=nats.js.api.StorageType.FILE,
        )
        return await js.create_key_value(config)
