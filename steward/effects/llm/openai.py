"""The OpenAI provider: Chat Completions through the official ``openai`` SDK.

It also serves OpenAI-compatible servers (vLLM, Ollama, llama.cpp's server):
point ``base_url`` at one, and a key is optional. A prompt becomes one
``chat.completions.create`` call, streamed by default with
``stream_options.include_usage``. The chunks map to steward's normalized events:

- the first chunk → ``SystemEvent`` (completion id, model);
- ``delta.content`` → ``AssistantDelta``;
- ``delta.reasoning_content`` (DeepSeek's reasoning) → the result's
  ``reasoning``, which DeepSeek wants back on the assistant message it came
  with in the next requests of the tool loop (``echo_reasoning``);
- ``delta.tool_calls`` pieces, joined by their ``index`` → one ``ToolUseEvent``
  per call once the stream is done;
- the ``usage`` chunk → a cumulative ``UsageEvent``;
- the end of the stream (``data: [DONE]``) → the one ``ResultEvent``. A stream
  that ends before any choice sent a ``finish_reason`` fails as
  ``invalid_response``.

What is not Chat Completions' own (the key, the deadline, retries left to
steward, failures as typed ``ProviderError``s) is ``_wire.HttpProvider``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import openai
from openai.types import chat as wire

from steward.actors.prompt import Prompt
from steward.effects.llm import _wire
from steward.effects.llm.base import (
    AssistantDelta,
    ResultEvent,
    StreamEvent,
    SystemEvent,
)
from steward.errors import ProviderError
from steward.events.protocol import Reasoning, ToolCall, Usage

__all__ = ["API_KEY_ENV", "KEYLESS", "OpenAIProvider", "to_request"]

API_KEY_ENV = "OPENAI_API_KEY"
"""The variable the key is read from unless ``api_key_env`` names another."""

KEYLESS = "no-key"
"""The key sent to a ``base_url`` server when none is set (local servers ignore
it; the SDK refuses to send none)."""


class OpenAIProvider(_wire.HttpProvider[openai.AsyncOpenAI]):
    """GPT models, or any OpenAI-compatible server, through Chat Completions.

    Built as ``HttpProvider`` says. With a ``base_url`` (a compatible server,
    ``http://localhost:8000/v1``) the key may be ``None``: local servers need
    none, and are sent ``KEYLESS``. ``max_tokens`` left unset leaves the cap to
    the server; set, it is sent as ``max_completion_tokens`` to OpenAI and as
    ``max_tokens`` to a ``base_url`` server, which may not know the new name.
    """

    name = "openai"
    key_env = API_KEY_ENV
    model_example = '"gpt-4o-mini", or the name your server serves'
    keyless = KEYLESS
    errors = _wire.SdkErrors(
        status=openai.APIStatusError,
        timeout=openai.APITimeoutError,
        connection=openai.APIConnectionError,
        validation=openai.APIResponseValidationError,
    )

    def _connect(self, **options: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(**options)

    def _request(self, prompt: Prompt, names: _wire.ToolNames) -> dict[str, Any]:
        return to_request(
            prompt,
            names,
            model=self.model,
            max_tokens=self._max_tokens,
            temperature=self._temperature,
            compatible=self._base_url is not None,
            echo_reasoning=self._echo,
        )

    async def _create(self, params: dict[str, Any]) -> object:
        return await self._client.chat.completions.create(**params)

    async def _create_stream(self, params: dict[str, Any]) -> _wire.ReplyStream:
        chunks: openai.AsyncStream[wire.ChatCompletionChunk]
        chunks = await self._client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        return chunks

    def _whole(
        self, reply: object, names: _wire.ToolNames, label: str
    ) -> list[StreamEvent]:
        return _from_completion(reply, names, label, self._key)

    def _turn(self, names: _wire.ToolNames, label: str) -> _Turn:
        return _Turn(label, names, self._key)

    def _error(self, label: str, error: Exception) -> ProviderError:
        # An error object inside the stream: the SDK raises APIError itself.
        if type(error) is openai.APIError:
            body = error.body if isinstance(error.body, Mapping) else {}
            code = str(body.get("code"))
            status = int(code) if code.isdigit() else 200
            return _wire.status_error(
                label,
                status,
                {"error": error.body if body else error.message},
                {},
                key=self._key,
                key_source=self._key_source,
            )
        return super()._error(label, error)


# -- the request -----------------------------------------------------------------


def to_request(
    prompt: Prompt,
    names: _wire.ToolNames,
    *,
    model: str = "",
    max_tokens: int | None = None,
    temperature: float | None = None,
    compatible: bool = False,
    echo_reasoning: bool = False,
) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments for ``prompt`` (no ``stream``).

    The system prompt leads as a ``system`` message; an assistant's tool calls
    become ``tool_calls`` with JSON ``arguments``; ``tool`` messages answer them
    by ``tool_call_id``. Tool names are made valid for the API through
    ``names``. ``compatible`` sends ``max_tokens`` instead of OpenAI's newer
    ``max_completion_tokens``. ``echo_reasoning`` sends an assistant
    message's reasoning back as its ``reasoning_content`` (`_wire.echoed`).
    """
    messages: list[dict[str, Any]] = []
    if prompt.system:
        messages.append({"role": "system", "content": prompt.system})
    for message in prompt.messages:
        match message.role:
            case "assistant":
                out: dict[str, Any] = {"role": "assistant", "content": message.content}
                if message.tool_calls:
                    out["content"] = message.content or None
                    out["tool_calls"] = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": names.wire(call.name),
                                "arguments": json.dumps(call.args),
                            },
                        }
                        for call in message.tool_calls
                    ]
                if reasoning := _wire.echoed(message, echo_reasoning):
                    out["reasoning_content"] = "".join(r.text for r in reasoning)
                messages.append(out)
            case "tool" if message.tool_call_id is not None:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": message.tool_call_id,
                        "content": message.content,
                    }
                )
            case "system":
                messages.append({"role": "system", "content": message.content})
            case _:
                messages.append({"role": "user", "content": message.content})
    params: dict[str, Any] = {"model": prompt.model or model, "messages": messages}
    if prompt.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": names.wire(tool.name),
                    "description": tool.description,
                    "parameters": {"type": "object", **tool.parameters},
                },
            }
            for tool in prompt.tools
        ]
    cap = prompt.max_tokens or max_tokens
    if cap is not None:
        params["max_tokens" if compatible else "max_completion_tokens"] = cap
    temperature = prompt.temperature if prompt.temperature is not None else temperature
    if temperature is not None:
        params["temperature"] = temperature
    return params


# -- the reply -------------------------------------------------------------------


class _Call:
    """A tool call being streamed: its pieces arrive under one ``index``."""

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class _Turn:
    """Folds the chunks of one streamed completion into normalized events."""

    def __init__(self, label: str, names: _wire.ToolNames, key: str | None) -> None:
        self.label = label
        self.names = names
        self.key = key
        self.text: list[str] = []
        self.reasoning: list[str] | None = None  # reasoning_content, if sent
        self.calls: dict[int, _Call] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.metadata: dict[str, Any] = {"provider": "openai"}
        self.done = False  # the reply ends with the stream (``data: [DONE]``)

    def feed(self, chunk: object) -> list[StreamEvent]:
        """The normalized events ``chunk`` gives; ``ProviderError`` if malformed."""
        with _wire.reading(self.label, "a chunk", self.key):
            return self._feed(chunk)

    def _feed(self, chunk: object) -> list[StreamEvent]:
        if not isinstance(chunk, wire.ChatCompletionChunk):
            raise TypeError(f"{type(chunk).__name__} is not a chat.completion.chunk")
        events: list[StreamEvent] = []
        if "completion_id" not in self.metadata:
            self.metadata.update(completion_id=chunk.id, model=chunk.model)
            events.append(
                SystemEvent(
                    message=f"{self.label} started completion {chunk.id}",
                    metadata=dict(self.metadata),
                )
            )
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue  # steward asks for one choice (n = 1)
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                events.append(AssistantDelta(text=delta.content))
            thought = getattr(delta, "reasoning_content", None)
            if isinstance(thought, str):
                if self.reasoning is None:
                    self.reasoning = []
                self.reasoning.append(thought)
            for position, piece in enumerate(delta.tool_calls or ()):
                index = getattr(piece, "index", None)
                if not isinstance(index, int):
                    index = position  # some compatible servers leave it out
                call = self.calls.setdefault(index, _Call())
                if piece.id:
                    call.id = piece.id
                if piece.function is not None:
                    call.name += piece.function.name or ""
                    call.arguments.append(piece.function.arguments or "")
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
        if chunk.usage is not None:
            # Every usage payload is the total so far (some servers send one per
            # chunk), so it is cumulative.
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
            )
            events.append(_wire.total(self.usage))
        return events

    def finish(self) -> list[StreamEvent]:
        """The tool calls and the result, once the stream has ended."""
        if self.finish_reason is None:
            raise _wire.invalid_response(
                self.label,
                "a stream that ended before a finish_reason; the reply is incomplete",
                self.key,
            )
        self.metadata["finish_reason"] = self.finish_reason
        if self.usage is None:
            self.metadata["usage_reported"] = False
        calls: list[ToolCall] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            if not call.name:
                raise _wire.invalid_response(
                    self.label, f"tool call {index} without a name", self.key
                )
            name = self.names.steward(call.name)
            args = _wire.parse_args(
                "".join(call.arguments), label=self.label, tool=name
            )
            calls.append(ToolCall(id=call.id or f"call_{index}", name=name, args=args))
        events = _wire.tool_uses(calls)
        events.append(
            ResultEvent(
                text="".join(self.text),
                tool_calls=tuple(calls),
                usage=self.usage or Usage(),
                metadata=dict(self.metadata),
                reasoning=_reasoning(self.reasoning),
            )
        )
        return events


def _reasoning(pieces: list[str] | None) -> tuple[Reasoning, ...]:
    """A reply's ``reasoning_content`` (``None``: it sent none), kept even
    when empty: DeepSeek wants the field back on a tool call's message."""
    return () if pieces is None else (Reasoning(text="".join(pieces)),)


def _from_completion(
    completion: object, names: _wire.ToolNames, label: str, key: str | None
) -> list[StreamEvent]:
    """The normalized events of a whole (non-streamed) completion."""
    if not isinstance(completion, wire.ChatCompletion):
        raise _wire.invalid_response(
            label, f"a {type(completion).__name__} where a completion was due", key
        )
    with _wire.reading(label, "a completion", key):
        if not completion.choices:
            raise ValueError("the completion has no choices")
        choice = completion.choices[0]
        text = choice.message.content or ""
        calls: list[ToolCall] = []
        for index, call in enumerate(choice.message.tool_calls or ()):
            function = getattr(call, "function", None)
            if function is None:
                continue  # a custom (non-function) tool call steward never offers
            name = names.steward(function.name)
            args = _wire.parse_args(function.arguments or "", label=label, tool=name)
            calls.append(ToolCall(id=call.id or f"call_{index}", name=name, args=args))
        usage = Usage()
        if completion.usage is not None:
            usage = Usage(
                input_tokens=completion.usage.prompt_tokens or 0,
                output_tokens=completion.usage.completion_tokens or 0,
            )
        metadata: dict[str, Any] = {
            "provider": "openai",
            "completion_id": completion.id,
            "model": completion.model,
            "finish_reason": choice.finish_reason,
        }
        if completion.usage is None:
            metadata["usage_reported"] = False
        thought = getattr(choice.message, "reasoning_content", None)
    return _wire.whole_reply(
        f"{label} sent completion {completion.id}",
        text,
        calls,
        usage,
        metadata,
        _reasoning([thought] if isinstance(thought, str) else None),
    )
