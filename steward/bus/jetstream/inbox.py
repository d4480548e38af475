"""The JetStream API as one handle sees it: what arrives on its inbox.

A handle subscribes once, to ``<inbox>.*``; acknowledgements, direct gets,
API answers and consumer deliveries all arrive there. This module holds the
message as the log reads it (`Msg`, its headers read only when asked for), a
batch direct get's answer (`Batch`), and the API's answers and errors.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import nats.aio.msg

API = "$JS.API"
WRONG_LAST_SEQUENCE = 10071  # JetStream's err_code for a failed expected-sequence
STREAM_NOT_FOUND = 10059


class ApiError(msgspec.Struct, frozen=True):
    code: int = 0
    err_code: int = 0
    description: str = ""


class PubAck(msgspec.Struct, frozen=True):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: ApiError | None = None


encode_json = msgspec.json.Encoder().encode
decode_pub_ack = msgspec.json.Decoder(PubAck).decode
decode_json_object = msgspec.json.Decoder(dict[str, Any]).decode


def nanos(seconds: float) -> int:
    """``seconds`` as the JetStream API's durations count them."""
    return int(seconds * 1e9)


def ack_meta(reply: str) -> tuple[str, int, int]:
    """Consumer name, stream sequence and consumer sequence from a delivery's reply.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>``, or
    the newer form with a domain and an account hash after ``ACK``.
    """
    tokens = reply.split(".")
    if len(tokens) == 9:
        return tokens[3], int(tokens[5]), int(tokens[6])
    if len(tokens) >= 11:
        return tokens[5], int(tokens[7]), int(tokens[8])
    raise ValueError(f"not a JetStream delivery reply subject: {reply!r}")


class Batch:
    """The messages answering one batch direct get, until its end-of-batch status."""

    __slots__ = ("messages", "end")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.messages: list[Msg] = []
        self.end: asyncio.Future[Msg] = loop.create_future()

    def deliver(self, msg: Msg) -> None:
        if msg.status is None:
            self.messages.append(msg)
        elif not self.end.done():
            self.end.set_result(msg)


class Msg:
    """A message of the handle's inbox, its headers read only when asked for.

    ``status`` is the server's status code (``"404"``) for a control message
    and None for a message of the stream.
    """

    __slots__ = ("subject", "reply", "data", "raw", "status")

    def __init__(self, subject: str, reply: str, data: bytes, raw: bytes) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data
        self.raw = raw  # b"NATS/1.0[ status[ description]]\r\nName: value\r\n..."
        self.status = (
            raw[9:12].decode("ascii", "replace")
            if raw[8:9] == b" " and not data
            else None
        )

    def header(self, name: bytes) -> str | None:
        """The value of header ``name`` (case matters), None when absent."""
        raw = self.raw
        key = b"\r\n" + name + b":"
        start = raw.find(key)
        if start < 0:
            return None
        start += len(key)
        return raw[start : raw.find(b"\r\n", start)].strip().decode()

    def number(self, name: bytes) -> int:
        """Header ``name`` as a number, 0 when absent."""
        return int(self.header(name) or 0)

    @classmethod
    def of(cls, msg: nats.aio.msg.Msg) -> Msg:
        """A message nats-py delivered, its headers parsed, as the log reads it.

        Its header block is written back (status line, then the headers), so
        that the log reads one kind of message however it arrived.
        """
        headers = dict(msg.headers or {})
        status = headers.pop("Status", None)
        description = headers.pop("Description", "")
        lines = [f"NATS/1.0 {status} {description}".rstrip() if status else "NATS/1.0"]
        lines += (f"{name}: {value}" for name, value in headers.items())
        lines += ("", "")
        return cls(msg.subject, msg.reply, msg.data, "\r\n".join(lines).encode())

    def describe(self) -> str:
        """The status line: ``404 Message Not Found``."""
        first = self.raw[: self.raw.find(b"\r\n")]
        return first[9:].decode("utf-8", "replace").strip() or "no status"


class Unavailable(Exception):
    """No answer in time, or no responder: worth retrying once connected."""


class ApiFailure(Exception):
    """The JetStream API answered with an error."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(f"{error.description} (error {error.err_code})")
        self.error = error


class Closed(Exception):
    """The NATS connection is closed."""
