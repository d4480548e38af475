"""A local HTTP server that speaks the Anthropic and OpenAI wire formats.

``FakeAPI`` listens on 127.0.0.1 (a free port) and answers each request with
the next queued reply: plain JSON, a server-sent-event stream (HTTP/1.1
chunked, as the real APIs send it), a stream cut off mid-body, or no answer at
all. It records every request, so tests can check what the SDK sent.

The builders below write each API's real frames: Anthropic's ``event:`` /
``data:`` pairs (``message_start`` ... ``message_stop``) and OpenAI's
``data: {chat.completion.chunk}`` lines ending in ``data: [DONE]``.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[["_Handler"], None]
"""Writes one answer to a request."""


@dataclass
class Request:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeAPI:
    """Answers requests with queued replies; when none is queued, with what
    ``respond`` makes of the request, else a 599."""

    replies: deque[Reply] = field(default_factory=deque)
    respond: Callable[[Request], Reply] | None = None
    requests: list[Request] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.api = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        self.replies.extend(replies)

    def close(self) -> None:
        """Release stalled replies, stop serving and join every thread."""
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-reply (a closed stream, a timeout) is part
        # of what these tests do; anything else is still reported.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked streams, so a cut is detectable
    timeout = 5  # a forgotten keep-alive connection cannot hang the teardown

    def do_POST(self) -> None:
        api: FakeAPI = self.server.api  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = Request(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw) if raw else None,
        )
        api.requests.append(request)
        if api.replies:
            reply = api.replies.popleft()
        elif api.respond is not None:
            reply = api.respond(request)
        else:
            reply = json_reply({}, status=599)
        reply(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


# -- replies ----------------------------------------------------------------------


def raw_reply(
    data: bytes,
    *,
    status: int = 200,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Reply:
    """A complete body of ``data`` with a Content-Length."""

    def reply(h: _Handler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)

    return reply


def json_reply(
    body: object, *, status: int = 200, headers: dict[str, str] | None = None
) -> Reply:
    """A JSON body."""
    return raw_reply(json.dumps(body).encode(), status=status, headers=headers)


def sse_reply(
    frames: Iterable[bytes], *, cut: bool = False, hold: int | None = None
) -> Reply:
    """An event stream, one chunk per frame; ``cut`` drops the connection
    before the end of the body (no terminating chunk); ``hold`` sends that
    many frames, then waits for the API's ``release`` before the rest."""
    frames = list(frames)

    def reply(h: _Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for n, frame in enumerate(frames):
            if n == hold:
                api: FakeAPI = h.server.api  # type: ignore[attr-defined]
                api.release.wait(10)
            h.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            h.wfile.flush()
        if cut:
            h.close_connection = True  # closes the socket mid-body
            return
        h.wfile.write(b"0\r\n\r\n")

    return reply


def stall_reply(h: _Handler) -> None:
    """No answer until the server closes (the client must time out)."""
    api: FakeAPI = h.server.api  # type: ignore[attr-defined]
    api.release.wait(10)
    h.close_connection = True


def echo_key_reply(status: int = 401) -> Reply:
    """An auth error whose message repeats the key headers the client sent."""

    def reply(h: _Handler) -> None:
        sent = f"{h.headers.get('x-api-key')} {h.headers.get('authorization')}"
        body = {
            "type": "error",
            "error": {
                "type": "authentication_error",
                "message": f"invalid key: {sent}",
            },
        }
        json_reply(body, status=status)(h)

    return reply


# -- Anthropic frames -------------------------------------------------------------


def a_event(name: str, data: dict[str, Any]) -> bytes:
    """One Anthropic server-sent event."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


ToolSpec = tuple[str, str, Sequence[str]]
"""A tool call to stream: id, name as the API spells it, argument JSON pieces."""


def anthropic_frames(
    text: Sequence[str] = (),
    tools: Sequence[ToolSpec] = (),
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_write: int = 0,
    stop: bool = True,
    model: str = "claude-test",
    thinking: Sequence[tuple[str, str]] = (),
    redacted: Sequence[str] = (),
) -> list[bytes]:
    """A Messages API stream: thinking blocks (``(thinking, signature)``,
    each streamed as a thinking and a signature delta) and redacted ones
    (their data), a text block, tool_use blocks, usage, stop."""
    frames = [
        a_event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": model,
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": input_tokens,
                        "cache_creation_input_tokens": cache_write,
                        "cache_read_input_tokens": cache_read,
                        "output_tokens": 1,
                    },
                },
            },
        ),
        a_event("ping", {"type": "ping"}),
    ]
    index = 0
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
        (
            {"type": "thinking", "thinking": "", "signature": ""},
            [
                {"type": "thinking_delta", "thinking": thought},
                {"type": "signature_delta", "signature": signature},
            ],
        )
        for thought, signature in thinking
    ]
    blocks += [({"type": "redacted_thinking", "data": data}, []) for data in redacted]
    for block, deltas in blocks:
        frames.append(
            a_event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        frames.extend(
            a_event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            for delta in deltas
        )
        frames.append(
            a_event(
                "content_block_stop", {"type": "content_block_stop", "index": index}
            )
        )
        index += 1
    if text:
        frames.append(
            a_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
        )
        for piece in text:
            frames.append(
                a_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": piece},
                    },
                )
            )
        frames.append(
            a_event(
                "content_block_stop", {"type": "content_block_stop", "index": index}
            )
        )
        index += 1
    for call_id, name, pieces in tools:
        frames.append(
            a_event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": call_id,
                        "name": name,
                        "input": {},
                    },
                },
            )
        )
        for piece in pieces:
            frames.append(
                a_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
        frames.append(
            a_event(
                "content_block_stop", {"type": "content_block_stop", "index": index}
            )
        )
        index += 1
    frames.append(
        a_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if tools else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    if stop:
        frames.append(a_event("message_stop", {"type": "message_stop"}))
    return frames


def anthropic_message(
    text: str = "", tools: Sequence[tuple[str, str, dict[str, Any]]] = ()
) -> dict[str, Any]:
    """A whole (non-streamed) Messages API reply."""
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    content.extend(
        {"type": "tool_use", "id": i, "name": n, "input": args} for i, n, args in tools
    )
    return {
        "id": "msg_02",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if tools else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 8},
    }


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    """An Anthropic error body."""
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        429: "rate_limit_error",
        500: "api_error",
        503: "overloaded_error",
        529: "overloaded_error",
    }
    return {
        "type": "error",
        "error": {"type": kinds.get(status, "api_error"), "message": message},
    }


# -- OpenAI frames ----------------------------------------------------------------


def o_chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; no ``delta`` gives the usage-only chunk."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-01",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "system_fingerprint": "fp_test",
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }
    return chunk


def o_data(payload: dict[str, Any] | str) -> bytes:
    """One OpenAI ``data:`` line."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


def openai_frames(
    text: Sequence[str] = (),
    tools: Sequence[ToolSpec] = (),
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    finish: bool = True,
    usage: bool = True,
    interleave: bool = False,
    reasoning: Sequence[str] = (),
) -> list[bytes]:
    """A Chat Completions stream: ``reasoning_content`` deltas (DeepSeek's
    reasoning), text deltas, tool-call deltas by index, the finish chunk,
    the usage chunk and ``[DONE]``.

    ``interleave`` sends the argument pieces of all tool calls round-robin, as
    parallel tool calls may arrive.
    """
    chunks = [o_chunk({"role": "assistant", "content": ""})]
    chunks.extend(o_chunk({"reasoning_content": piece}) for piece in reasoning)
    chunks.extend(o_chunk({"content": piece}) for piece in text)
    starts = [
        o_chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        for i, (call_id, name, _) in enumerate(tools)
    ]
    pieces = [
        [
            o_chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in call[2]
        ]
        for i, call in enumerate(tools)
    ]
    if interleave:
        chunks.extend(starts)
        longest = max((len(p) for p in pieces), default=0)
        for n in range(longest):
            chunks.extend(p[n] for p in pieces if n < len(p))
    else:
        for start, rest in zip(starts, pieces, strict=True):
            chunks.append(start)
            chunks.extend(rest)
    if finish:
        chunks.append(o_chunk({}, finish="tool_calls" if tools else "stop"))
        if usage:
            chunks.append(
                o_chunk(
                    usage={
                        "prompt_tokens": input_tokens,
                        "completion_tokens": output_tokens,
                        "total_tokens": input_tokens + output_tokens,
                    }
                )
            )
    frames = [o_data(c) for c in chunks]
    if finish:
        frames.append(o_data("[DONE]"))
    return frames


def openai_completion(
    text: str | None = "", tools: Sequence[tuple[str, str, dict[str, Any]]] = ()
) -> dict[str, Any]:
    """A whole (non-streamed) ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tools:
        message["tool_calls"] = [
            {
                "id": i,
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(args)},
            }
            for i, n, args in tools
        ]
    return {
        "id": "chatcmpl-02",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tools else "stop",
            }
        ],
        "usage": {"prompt_tokens": 21, "completion_tokens": 8, "total_tokens": 29},
    }


def openai_error(status: int, message: str) -> dict[str, Any]:
    """An OpenAI error body."""
    kinds = {401: "invalid_request_error", 429: "requests", 500: "server_error"}
    return {
        "error": {
            "message": message,
            "type": kinds.get(status, "server_error"),
            "param": None,
            "code": None,
        }
    }
