"""Traces of what the host does, as OpenTelemetry spans, when the SDK is
installed and asked for (``[otel]`` or ``OTEL_TRACES_EXPORTER``); without it
nothing here is imported and the host pays one ``None`` check a step.

The spans of one actor tree (a run and its subagents, a session and its
turns) share a trace: its id is derived from the tree's correlation id, so
every worker that carries out a part of the tree puts its spans in the same
trace without telling the others anything. Likewise an actor's span id is
derived from its stream:

- ``invoke_agent {kind}`` (``invoke_workflow`` for a workflow) for each
  actor, from its first record to the commit that ends it, emitted by the
  host that ends it; a child actor's is a child of the tree's root's;
- ``step {kind}`` for each decision committed, a child of its actor's;
- ``chat {model}`` for each model call, with the GenAI conventions'
  ``gen_ai.*`` attributes (operation, provider, request model, usage,
  finish reasons, conversation id), a child of its actor's;
- ``execute_tool {name}`` for each tool call, a child of its actor's.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import os
from typing import TYPE_CHECKING, Any

from steward.bus import EventLog
from steward.events import Event, type_name
from steward.events.protocol import LlmFailed, LlmResponded

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["Traces", "from_settings"]

log = logging.getLogger("steward.traces")

_CHOSEN: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "steward_span_ids", default=None
)
"""The (trace id, span id) the next span takes, where the host chose them."""


def from_settings(exporter: str | None, endpoint: str | None = None) -> Traces | None:
    """The traces ``exporter`` asks for (``console``, ``otlp``; ``None`` reads
    ``OTEL_TRACES_EXPORTER``), or ``None`` for none (``none``, unset).

    Raises:
        ImportError: the OpenTelemetry SDK (or the OTLP exporter) is not
            installed; the message says what to install.
    """
    chosen = exporter or os.environ.get("OTEL_TRACES_EXPORTER", "none")
    if chosen == "none":
        return None
    try:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError:
        raise ImportError(
            "traces need the OpenTelemetry SDK: pip install 'steward[otel]'"
        ) from None
    if chosen == "console":
        return Traces(ConsoleSpanExporter(), batch=True)
    if chosen == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            raise ImportError(
                "OTLP traces need pip install opentelemetry-exporter-otlp-proto-http"
            ) from None
        endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        made = OTLPSpanExporter() if endpoint is None else OTLPSpanExporter(endpoint)
        return Traces(made, batch=True)
    raise ImportError(f"no traces exporter {chosen!r}: none, console or otlp")


def _id(text: str, bits: int) -> int:
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


class Traces:
    """The spans of one host, sent to ``exporter``."""

    def __init__(self, exporter: SpanExporter, *, batch: bool = False) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SimpleSpanProcessor,
        )
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        class Chosen(RandomIdGenerator):
            """The ids the host chose for a span, else random ones."""

            def generate_trace_id(self) -> int:
                chosen = _CHOSEN.get()
                return chosen[0] if chosen else super().generate_trace_id()

            def generate_span_id(self) -> int:
                chosen = _CHOSEN.get()
                return chosen[1] if chosen else super().generate_span_id()

        resource = Resource.create({"service.name": "steward"})
        self.provider = TracerProvider(resource=resource, id_generator=Chosen())
        processor = BatchSpanProcessor if batch else SimpleSpanProcessor
        self.provider.add_span_processor(processor(exporter))
        self.tracer = self.provider.get_tracer("steward")
        self._ending: set[asyncio.Task[None]] = set()

    def shutdown(self) -> None:
        """Send what is buffered and stop."""
        self.provider.shutdown()

    # -- the ids ---------------------------------------------------------------

    @staticmethod
    def _tree(stream: str, correlation: str | None) -> str:
        return correlation or stream.partition(".")[2]

    def _actor_ids(self, stream: str, correlation: str | None) -> tuple[int, int]:
        """(trace id, span id) of ``stream``'s actor span: the tree's root
        (the actor whose id is the correlation id) has the tree's own."""
        tree = self._tree(stream, correlation)
        trace_id = _id(f"trace:{tree}", 128)
        if stream.partition(".")[2] == tree:
            return trace_id, _id(f"root:{tree}", 64)
        return trace_id, _id(f"actor:{stream}", 64)

    def _under(self, trace_id: int, span_id: int) -> Any:
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        parent = SpanContext(
            trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1)
        )
        return trace.set_span_in_context(NonRecordingSpan(parent))

    def _span(
        self,
        name: str,
        stream: str,
        correlation: str | None,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any],
        error: str | None = None,
    ) -> None:
        """A span of ``stream``'s actor, ended now."""
        from opentelemetry.trace import SpanKind, Status, StatusCode

        parent = self._under(*self._actor_ids(stream, correlation))
        kind = SpanKind.CLIENT if name.startswith("chat") else SpanKind.INTERNAL
        span = self.tracer.start_span(
            name,
            context=parent,
            kind=kind,
            start_time=start_ns,
            attributes={"steward.stream": stream, **attributes},
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
            span.set_attribute("error.type", error)
        span.end(end_time=end_ns)

    # -- what the host tells ---------------------------------------------------

    def step(
        self,
        kind: str,
        stream: str,
        correlation: str | None,
        input: Event,
        version: int,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """A decision of ``stream`` on ``input``, committed up to ``version``."""
        attributes: dict[str, Any] = {
            "steward.kind": kind,
            "steward.input": type_name(input),
            "steward.version": version,
        }
        self._span(f"step {kind}", stream, correlation, start_ns, end_ns, attributes)

    def chat(
        self,
        stream: str,
        correlation: str | None,
        request_id: str,
        provider: str,
        model: str,
        start_ns: int,
        end_ns: int,
        answer: Event | None,
    ) -> None:
        """A model call of ``stream``'s and its ``answer``."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": self._tree(stream, correlation),
            "steward.request_id": request_id,
        }
        error = None
        usage = getattr(answer, "usage", None)
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if isinstance(answer, LlmResponded):
            stopped = "tool_calls" if answer.tool_calls else "stop"
            attributes["gen_ai.response.finish_reasons"] = [stopped]
        elif isinstance(answer, LlmFailed):
            error = answer.kind
        name = f"chat {model}" if model else "chat"
        self._span(name, stream, correlation, start_ns, end_ns, attributes, error)

    def tool(
        self,
        stream: str,
        correlation: str | None,
        request_id: str,
        name: str,
        start_ns: int,
        end_ns: int,
        ok: bool,
    ) -> None:
        """A tool call of ``stream``'s."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": request_id,
        }
        error = None if ok else "tool_error"
        span = f"execute_tool {name}"
        self._span(span, stream, correlation, start_ns, end_ns, attributes, error)

    def ended(
        self,
        kind: str,
        stream: str,
        correlation: str | None,
        outcome: str,
        end_ns: int,
        log_: EventLog,
    ) -> None:
        """``stream``'s actor ended with ``outcome``: its span, from its
        first record (read from ``log_``, in a task of its own)."""
        task = asyncio.create_task(
            self._ended(kind, stream, correlation, outcome, end_ns, log_)
        )
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def settle(self) -> None:
        """Wait for the actor spans being emitted."""
        while self._ending:
            await asyncio.gather(*self._ending, return_exceptions=True)

    async def _ended(
        self,
        kind: str,
        stream: str,
        correlation: str | None,
        outcome: str,
        end_ns: int,
        log_: EventLog,
    ) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        try:
            records = await log_.read(stream)
        except Exception as e:  # a lost connection: the span goes without
            log.debug("no span for %s: %s", stream, e)
            return
        start_ns = int(records[0].at * 1e9) if records else end_ns
        trace_id, span_id = self._actor_ids(stream, correlation)
        tree = self._tree(stream, correlation)
        root_id = _id(f"root:{tree}", 64)
        parent = None if span_id == root_id else self._under(trace_id, root_id)
        operation = "invoke_workflow" if kind == "workflow" else "invoke_agent"
        token = _CHOSEN.set((trace_id, span_id))
        try:
            span = self.tracer.start_span(
                f"{operation} {kind}",
                context=parent,
                kind=SpanKind.INTERNAL,
                start_time=start_ns,
                attributes={
                    "gen_ai.operation.name": operation,
                    "gen_ai.agent.name": kind,
                    "gen_ai.agent.id": stream.partition(".")[2],
                    "gen_ai.conversation.id": tree,
                    "steward.stream": stream,
                    "steward.outcome": outcome,
                },
            )
        finally:
            _CHOSEN.reset(token)
        if outcome != "completed":
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(end_time=end_ns)
