"""The Anthropic provider: the Messages API through the official ``anthropic`` SDK.

A prompt becomes one ``messages.create`` call, streamed (server-sent events) by
default. The raw stream events map to steward's normalized ones:

- ``message_start`` → ``SystemEvent`` (message id, model) and a cumulative
  ``UsageEvent`` (input tokens, cache reads and writes included);
- ``text_delta`` → ``AssistantDelta``;
- ``thinking`` and ``redacted_thinking`` blocks (with their ``signature``)
  → the result's ``reasoning``, sent back unchanged at the start of the
  assistant turn they came with in the tool loop's next requests, as the API
  requires (``echo_reasoning``, on by default);
- a ``tool_use`` block, once its ``input_json_delta`` pieces are complete →
  ``ToolUseEvent``;
- ``message_delta`` → a cumulative ``UsageEvent`` (output tokens so far);
- ``message_stop`` → the one ``ResultEvent``; the stream is not read further.
  A stream that ends without it fails as ``invalid_response``.

What is not the Messages API's own (the key, the deadline, retries left to
steward, failures as typed ``ProviderError``s) is ``_wire.HttpProvider``'s.
"""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic import types as wire

from steward.actors.prompt import Prompt
from steward.effects.llm import _wire
from steward.effects.llm.base import (
    AssistantDelta,
    ResultEvent,
    StreamEvent,
    SystemEvent,
    UsageEvent,
)
from steward.events.protocol import Reasoning, ToolCall, Usage

__all__ = ["API_KEY_ENV", "DEFAULT_MAX_TOKENS", "AnthropicProvider", "to_request"]

API_KEY_ENV = "ANTHROPIC_API_KEY"
"""The variable the key is read from unless ``api_key_env`` names another."""

DEFAULT_MAX_TOKENS = 4096
"""Reply cap when neither the prompt nor the model sets one (the API needs one)."""


class AnthropicProvider(_wire.HttpProvider[anthropic.AsyncAnthropic]):
    """Claude models through the Messages API.

    Built as ``HttpProvider`` says; a key is always needed, and ``max_tokens``
    left unset sends ``DEFAULT_MAX_TOKENS`` (the API needs a cap).
    """

    name = "anthropic"
    key_env = API_KEY_ENV
    model_example = '"claude-sonnet-4-5"'
    echoes_reasoning = True
    errors = _wire.SdkErrors(
        status=anthropic.APIStatusError,
        timeout=anthropic.APITimeoutError,
        connection=anthropic.APIConnectionError,
        validation=anthropic.APIResponseValidationError,
    )

    def _connect(self, **options: Any) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(**options)

    def _request(self, prompt: Prompt, names: _wire.ToolNames) -> dict[str, Any]:
        return to_request(
            prompt,
            names,
            model=self.model,
            max_tokens=self._max_tokens or DEFAULT_MAX_TOKENS,
            temperature=self._temperature,
            echo_reasoning=self._echo,
        )

    async def _create(self, params: dict[str, Any]) -> object:
        return await self._client.messages.create(**params)

    async def _create_stream(self, params: dict[str, Any]) -> _wire.ReplyStream:
        events: anthropic.AsyncStream[wire.RawMessageStreamEvent]
        events = await self._client.messages.create(**params, stream=True)
        return events

    def _whole(
        self, reply: object, names: _wire.ToolNames, label: str
    ) -> list[StreamEvent]:
        return _from_message(reply, names, label, self._key)

    def _turn(self, names: _wire.ToolNames, label: str) -> _Turn:
        return _Turn(label, names, self._key)


# -- the request -----------------------------------------------------------------


def to_request(
    prompt: Prompt,
    names: _wire.ToolNames,
    *,
    model: str = "",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    temperature: float | None = None,
    echo_reasoning: bool = True,
) -> dict[str, Any]:
    """The ``messages.create`` arguments for ``prompt`` (without ``stream``).

    System messages join the system prompt; ``tool`` messages become
    ``tool_result`` blocks of a user message; an assistant's tool calls become
    ``tool_use`` blocks, after its thinking blocks when ``echo_reasoning``
    sends them back (`_wire.echoed`); consecutive messages of one role merge,
    since the API wants user and assistant turns to alternate. Tool names are
    made valid for the API through ``names``.
    """
    system = [prompt.system] if prompt.system else []
    turns: list[dict[str, Any]] = []
    for message in prompt.messages:
        role = "user"
        blocks: list[dict[str, Any]] = []
        match message.role:
            case "system":
                if message.content:
                    system.append(message.content)
                continue
            case "assistant":
                role = "assistant"
                blocks.extend(
                    _thinking_block(r) for r in _wire.echoed(message, echo_reasoning)
                )
                if message.content:
                    blocks.append({"type": "text", "text": message.content})
                blocks.extend(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": names.wire(call.name),
                        "input": call.args,
                    }
                    for call in message.tool_calls
                )
            case "tool" if message.tool_call_id is not None:
                result: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                }
                if message.content:
                    result["content"] = message.content
                blocks.append(result)
            case _:
                if message.content:
                    blocks.append({"type": "text", "text": message.content})
        if not blocks:
            continue  # the API refuses empty messages and empty text blocks
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        # The API wants a user turn's tool results before anything else in it.
        turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    params: dict[str, Any] = {
        "model": prompt.model or model,
        "max_tokens": prompt.max_tokens or max_tokens,
        "messages": turns,
    }
    if system:
        params["system"] = "\n\n".join(system)
    if prompt.tools:
        params["tools"] = [
            {
                "name": names.wire(tool.name),
                "description": tool.description,
                "input_schema": {"type": "object", **tool.parameters},
            }
            for tool in prompt.tools
        ]
    temperature = prompt.temperature if prompt.temperature is not None else temperature
    if temperature is not None:
        # Sent as a raw field: recent SDKs no longer list it as an argument.
        params["extra_body"] = {"temperature": temperature}
    return params


def _thinking_block(reasoning: Reasoning) -> dict[str, Any]:
    """A thinking block as the API returned it (its signature unchanged)."""
    if reasoning.redacted is not None:
        return {"type": "redacted_thinking", "data": reasoning.redacted}
    return {
        "type": "thinking",
        "thinking": reasoning.text,
        "signature": reasoning.signature or "",
    }


# -- the reply -------------------------------------------------------------------


class _Turn:
    """Folds the raw stream events of one reply into normalized events."""

    def __init__(self, label: str, names: _wire.ToolNames, key: str | None) -> None:
        self.label = label
        self.names = names
        self.key = key
        self.done = False
        self.text: list[str] = []
        self.tools: dict[int, _ToolBlock] = {}
        self.calls: list[ToolCall] = []
        self.thinking: dict[int, list[str]] = {}  # block: [thinking, signature]
        self.reasoning: list[Reasoning] = []
        self.usage = Usage()
        self.metadata: dict[str, Any] = {"provider": "anthropic"}
        self.started = False

    def feed(self, event: object) -> list[StreamEvent]:
        """The normalized events ``event`` gives; ``ProviderError`` if malformed."""
        with _wire.reading(self.label, "a stream event", self.key):
            return self._feed(event)

    def _feed(self, event: object) -> list[StreamEvent]:
        if not self.started and not isinstance(event, wire.RawMessageStartEvent):
            raise _wire.invalid_response(
                self.label,
                f"a {getattr(event, 'type', '?')} event before message_start",
                self.key,
            )
        match event:
            case wire.RawMessageStartEvent(message=message):
                self.started = True
                self.metadata.update(message_id=message.id, model=message.model)
                return [
                    SystemEvent(
                        message=f"{self.label} started message {message.id}",
                        metadata=dict(self.metadata),
                    ),
                    self._usage(message.usage),
                ]
            case wire.RawContentBlockStartEvent(index=index, content_block=block):
                if isinstance(block, wire.ToolUseBlock):
                    self.tools[index] = _ToolBlock(block.id, block.name, block.input)
                elif isinstance(block, wire.ThinkingBlock):
                    self.thinking[index] = [block.thinking, block.signature]
                elif isinstance(block, wire.RedactedThinkingBlock):
                    self.reasoning.append(Reasoning(redacted=block.data))
                elif isinstance(block, wire.TextBlock) and block.text:
                    self.text.append(block.text)
                    return [AssistantDelta(text=block.text)]
                return []
            case wire.RawContentBlockDeltaEvent(index=index, delta=delta):
                if isinstance(delta, wire.TextDelta):
                    self.text.append(delta.text)
                    return [AssistantDelta(text=delta.text)]
                if isinstance(delta, wire.InputJSONDelta):
                    if index not in self.tools:
                        raise _wire.invalid_response(
                            self.label,
                            f"tool input for block {index}, which is not a tool_use",
                            self.key,
                        )
                    self.tools[index].parts.append(delta.partial_json)
                elif index in self.thinking:
                    if isinstance(delta, wire.ThinkingDelta):
                        self.thinking[index][0] += delta.thinking
                    elif isinstance(delta, wire.SignatureDelta):
                        self.thinking[index][1] += delta.signature
                return []  # citations: not steward's
            case wire.RawContentBlockStopEvent(index=index):
                if index in self.thinking:
                    text, signature = self.thinking.pop(index)
                    self.reasoning.append(Reasoning(text=text, signature=signature))
                if index not in self.tools:
                    return []
                tool = self.tools.pop(index)
                name = self.names.steward(tool.name)
                args = tool.start
                if tool.parts:  # streamed input replaces the (empty) start input
                    args = _wire.parse_args(
                        "".join(tool.parts), label=self.label, tool=name
                    )
                if not isinstance(args, dict):
                    raise TypeError(f"tool input {args!r} is not an object")
                call = ToolCall(id=tool.id, name=name, args=args)
                self.calls.append(call)
                return _wire.tool_uses([call])
            case wire.RawMessageDeltaEvent(delta=delta, usage=usage):
                if delta.stop_reason is not None:
                    self.metadata["stop_reason"] = delta.stop_reason
                return [self._usage(usage)]
            case wire.RawMessageStopEvent():
                if self.tools:
                    raise _wire.invalid_response(
                        self.label,
                        "message_stop inside an open tool_use block",
                        self.key,
                    )
                self.done = True
                return []
            case _:
                return []  # an event type newer than this adapter

    def finish(self) -> list[StreamEvent]:
        """The result, once message_stop came; ``invalid_response`` before."""
        if not self.done:
            raise _wire.invalid_response(
                self.label,
                "a stream that ended without message_stop; the reply is incomplete",
                self.key,
            )
        return [
            ResultEvent(
                text="".join(self.text),
                tool_calls=tuple(self.calls),
                usage=self.usage,
                metadata=dict(self.metadata),
                reasoning=tuple(self.reasoning),
            )
        ]

    def _usage(self, usage: Any) -> UsageEvent:
        """A cumulative usage event; both payloads carry totals so far."""
        if usage is not None:
            self.usage = Usage(
                input_tokens=max(self.usage.input_tokens, _input_tokens(usage)),
                output_tokens=max(self.usage.output_tokens, usage.output_tokens or 0),
            )
        return _wire.total(self.usage)


def _input_tokens(usage: Any) -> int:
    """Every prompt token: uncached, written to and read from the cache."""
    return sum(
        getattr(usage, field, None) or 0
        for field in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        )
    )


def _from_message(
    message: object, names: _wire.ToolNames, label: str, key: str | None
) -> list[StreamEvent]:
    """The normalized events of a whole (non-streamed) reply."""
    if not isinstance(message, wire.Message):
        raise _wire.invalid_response(
            label, f"a {type(message).__name__} where a message was due", key
        )
    with _wire.reading(label, "a message", key):
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[Reasoning] = []
        for block in message.content:
            if isinstance(block, wire.TextBlock):
                text.append(block.text)
            elif isinstance(block, wire.ThinkingBlock):
                reasoning.append(
                    Reasoning(text=block.thinking, signature=block.signature)
                )
            elif isinstance(block, wire.RedactedThinkingBlock):
                reasoning.append(Reasoning(redacted=block.data))
            elif isinstance(block, wire.ToolUseBlock):
                if not isinstance(block.input, dict):
                    raise TypeError(f"tool input {block.input!r} is not an object")
                name = names.steward(block.name)
                calls.append(ToolCall(id=block.id, name=name, args=block.input))
        usage = Usage(
            input_tokens=_input_tokens(message.usage),
            output_tokens=message.usage.output_tokens or 0,
        )
        metadata: dict[str, Any] = {
            "provider": "anthropic",
            "message_id": message.id,
            "model": message.model,
        }
        if message.stop_reason is not None:
            metadata["stop_reason"] = message.stop_reason
    return _wire.whole_reply(
        f"{label} sent message {message.id}",
        "".join(text),
        calls,
        usage,
        metadata,
        tuple(reasoning),
    )


class _ToolBlock:
    """A ``tool_use`` block being streamed: its input arrives as JSON pieces."""

    def __init__(self, id: str, name: str, start: object) -> None:
        self.id = id
        self.name = name
        self.start = start
        self.parts: list[str] = []
