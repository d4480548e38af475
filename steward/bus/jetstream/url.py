"""NATS event-log URLs: ``nats://host:4222[,host2:4222]?stream=S&prefix=P``."""

from __future__ import annotations

import urllib.parse
from typing import Any

from steward.errors import ConfigError

__all__ = ["parse_url"]


def _url_options(query: str, url: str) -> dict[str, Any]:
    """Keyword arguments for `JetStreamEventLog.open` from a URL's query string."""
    options: dict[str, Any] = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key in ("stream", "prefix", "creds", "nkeys_seed", "name", "tls_hostname"):
            options[key] = value
        elif key in ("replicas", "partitions"):
            try:
                options[key] = int(value)
            except ValueError:
                raise ConfigError(
                    "event log url", url, f"{key} must be a number, not {value!r}"
                ) from None
        else:
            raise ConfigError(
                "event log url",
                url,
                f"unknown option {key!r}; use stream, prefix, replicas, partitions, "
                "creds, nkeys_seed, name or tls_hostname",
            )
    return options


def parse_url(url: str) -> tuple[list[str], dict[str, Any]]:
    """Servers and options from ``nats://host:4222[,host2:4222]?stream=S&prefix=P``."""
    scheme, _, rest = url.partition("://")
    where, _, query = rest.partition("?")
    if not where:
        raise ConfigError(
            "event log url", url, "it names no server; use nats://host:4222"
        )
    servers = [f"{scheme}://{part}" for part in where.split(",") if part]
    return servers, _url_options(query, url)
