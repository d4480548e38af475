"""Actor stream names as NATS subjects, and back.

Every actor stream has its own subject, ``<prefix>.<stream name>``: the dots
of the name separate subject tokens, so ``run.r1`` is ``steward.ev.run.r1``.
A character a subject token cannot hold (or that would read as a wildcard) is
written ``%XX``, per UTF-8 byte, and an empty token as a lone ``%``; the
mapping is reversible, so the subject is the only place a stream's name is
stored.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["escape_token", "stream_of", "subject_of"]

_SAFE = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_/:@+=,~"
)
_PLAIN = re.compile(r"[A-Za-z0-9\-_/:@+=,~]+(?:\.[A-Za-z0-9\-_/:@+=,~]+)*\Z")


def escape_token(part: str) -> str:
    """``part`` of a stream name as one subject token (``%XX`` escapes)."""
    if not part:
        return "%"
    return "".join(
        c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in part
    )


def _unescape(token: str) -> str:
    if token == "%":
        return ""
    return urllib.parse.unquote(token, errors="strict")


def subject_of(stream: str) -> str:
    """The subject tokens (after the prefix) that hold ``stream``'s commits."""
    if _PLAIN.match(stream):
        return stream
    return ".".join(escape_token(part) for part in stream.split("."))


def stream_of(tail: str) -> str:
    """The stream name whose subject (after the prefix) is ``tail``."""
    if "%" not in tail:
        return tail
    return ".".join(_unescape(token) for token in tail.split("."))
