"""What the HTTP providers share: the provider itself (``HttpProvider``), keys,
tool names, failures as typed errors, calls and streams bounded by the call's
deadline, and replies as normalized events.

A provider module subclasses ``HttpProvider`` and holds only what is its API's
own: the SDK client, the request's shape, the reading of a reply, and its SDK's
exception classes.

Both SDKs sit on the same HTTP stack (``httpx2``), so a transport failure looks
the same under either; the status codes mean the same too. Every message built
here has the API key taken out, whatever the server echoed back.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import json
import os
import re
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, Self, TypeVar

import httpx2

from steward.actors.prompt import Prompt
from steward.config import ModelConfig
from steward.effects.llm.base import (
    AssistantDelta,
    RequestInfo,
    ResultEvent,
    StreamEvent,
    SystemEvent,
    ToolUseEvent,
    UsageEvent,
)
from steward.effects.llm.retry import retry_after_from_headers
from steward.errors import ProviderError
from steward.events.protocol import (
    ChatMessage,
    ReasonedMessage,
    Reasoning,
    ToolCall,
    Usage,
)

_DETAIL_LIMIT = 300  # characters of a server's error message kept in ours

T = TypeVar("T")
Translate = Callable[[Exception], ProviderError]
"""A provider's translation of an SDK's (or anything's) exception."""


# -- keys -------------------------------------------------------------------------


def resolve_api_key(
    config: ModelConfig, default_env: str, env: Mapping[str, str]
) -> tuple[str | None, str]:
    """The API key and where it comes from: ``api_key``, or a variable's name.

    ``config.api_key`` wins; otherwise the variable ``config.api_key_env`` (or
    ``default_env``) is read, and an empty value counts as unset.
    """
    if config.api_key:
        return config.api_key, "the api_key setting"
    var = config.api_key_env or default_env
    return env.get(var) or None, var


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***``."""
    return text.replace(secret, "***") if secret else text


# -- tool names -------------------------------------------------------------------

_VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")


class ToolNames:
    """Steward's tool names (``files.list``) as names an API accepts, and back.

    Both APIs accept only ``[A-Za-z0-9_-]{1,64}``; a name that is already valid
    is kept, any other has its invalid characters replaced (``files_list``) and
    a suffix when that would collide.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self._to_wire: dict[str, str] = {}
        self._from_wire: dict[str, str] = {}
        listed = list(dict.fromkeys(names))
        # Valid names first, so a name never loses its own spelling to another.
        for name in sorted(listed, key=lambda n: _VALID.match(n) is None):
            self.wire(name)

    def wire(self, name: str) -> str:
        """The API's name for tool ``name`` (registered on first use)."""
        known = self._to_wire.get(name)
        if known is not None:
            return known
        base = _INVALID_CHAR.sub("_", name)[:60] or "tool"
        candidate, n = base, 2
        while candidate in self._from_wire:
            candidate, n = f"{base}_{n}", n + 1
        self._to_wire[name] = candidate
        self._from_wire[candidate] = name
        return candidate

    def steward(self, wire: str) -> str:
        """Steward's name for the API's tool name ``wire`` (itself if unknown)."""
        return self._from_wire.get(wire, wire)


def parse_args(raw: str, *, label: str, tool: str) -> dict[str, Any]:
    """A tool call's JSON arguments as a dict; ``invalid_response`` otherwise."""
    if not raw.strip():
        return {}
    try:
        args = json.loads(raw)
    except ValueError:
        raise ProviderError(
            "invalid_response",
            f"{label} sent arguments for tool {tool!r} that are not JSON: "
            f"{raw[:_DETAIL_LIMIT]!r}",
        ) from None
    if not isinstance(args, dict):
        raise ProviderError(
            "invalid_response",
            f"{label} sent arguments for tool {tool!r} that are not a JSON object: "
            f"{raw[:_DETAIL_LIMIT]!r}",
        )
    return args


# -- failures ---------------------------------------------------------------------


def classify_status(status: int) -> tuple[str, bool]:
    """The error kind and retryability an HTTP error status means."""
    if status in (401, 402, 403):
        return "auth", False
    if status in (408, 504):
        return "timeout", True
    if status == 429:
        return "rate_limit", True
    if status == 409 or status >= 500:  # 409: a lock or conflict that clears
        return "internal", True
    return "config", False


_ERROR_TYPES: dict[str, tuple[str, bool]] = {
    "authentication_error": ("auth", False),
    "permission_error": ("auth", False),
    "billing_error": ("auth", False),
    "invalid_request_error": ("config", False),
    "not_found_error": ("config", False),
    "request_too_large": ("config", False),
    "rate_limit_error": ("rate_limit", True),
    "timeout_error": ("timeout", True),
    "api_error": ("internal", True),
    "overloaded_error": ("internal", True),
    "server_error": ("internal", True),
}
"""Error ``type``s an API sends inside a stream, where the status is already 200."""


def error_detail(body: object) -> str:
    """The human message in an error body (``{"error": {"message": ...}}``)."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            message = inner.get("message")
            if isinstance(message, str) and message.strip():
                return message.strip()
        elif isinstance(inner, str) and inner.strip():
            return inner.strip()
        return json.dumps(body, default=str)
    if isinstance(body, str) and body.strip():
        return body.strip()
    return "no error message"


def _error_type(body: object) -> str | None:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            kind = inner.get("type")
            return kind if isinstance(kind, str) else None
    return None


_HINTS = {
    "auth": "check the API key in {key_source}",
    "config": "check the model id and parameters in its [models.<name>] table",
    "rate_limit": "wait and retry, or lower the request rate",
    "timeout": "retry, or raise the model's timeout",
    "internal": "the server failed; retry later",
}


def status_error(
    label: str,
    status: int,
    body: object,
    headers: Mapping[str, str],
    *,
    key: str | None,
    key_source: str,
) -> ProviderError:
    """The typed error for an HTTP error answer (or an error event in a stream).

    A status of 200 means the error came inside a stream: its ``type`` decides.
    ``Retry-After`` (seconds or an HTTP date) and ``retry-after-ms`` are read
    into ``retry_after`` for every retryable kind.
    """
    kind, retryable = classify_status(status)
    if status < 400:
        kind, retryable = _ERROR_TYPES.get(_error_type(body) or "", ("internal", True))
    retry_after = (
        retry_after_from_headers(headers, now=time.time()) if retryable else None
    )
    detail = error_detail(body)[:_DETAIL_LIMIT]
    where = f"answered HTTP {status}" if status >= 400 else "sent an error event"
    hint = _HINTS[kind].format(key_source=key_source)
    if retry_after is not None:
        hint += f"; the server asked to wait {retry_after:g}s"
    return ProviderError(
        kind,
        redact(f"{label} {where}: {detail}; {hint}", key),
        retryable=retryable,
        retry_after=retry_after,
        status=status,
    )


def transport_error(
    label: str, error: BaseException, key: str | None, *, timeout: float
) -> ProviderError:
    """The typed error for a failure below HTTP: timeouts, resets, bad framing.

    ``timeout`` is the call's limit in seconds, named when it ran out.
    """
    text = redact(str(error) or type(error).__name__, key)
    if isinstance(error, TimeoutError | httpx2.TimeoutException):
        return ProviderError(
            "timeout",
            f"{label} sent no complete reply within {timeout:g}s; retry, or raise "
            "the model's timeout",
            retryable=True,
        )
    if isinstance(error, httpx2.DecodingError):
        return ProviderError(
            "invalid_response",
            f"{label} sent a body that cannot be decoded: {text}",
        )
    return ProviderError(
        "transport",
        f"{label} connection failed ({type(error).__name__}: {text}); check "
        "base_url and the network, then retry",
        retryable=True,
    )


def invalid_response(label: str, what: str, key: str | None) -> ProviderError:
    """The typed error for a reply that breaks the API's own format."""
    return ProviderError(
        "invalid_response", redact(f"{label} sent {what}", key)[: _DETAIL_LIMIT * 2]
    )


def cause(error: BaseException, key: str | None) -> BaseException | None:
    """What to chain a translated error to: the original, unless it holds the key.

    A server may echo the key back in an error body, and a chained exception is
    printed with every traceback, so such an exception is dropped.
    """
    if key and key in str(error):
        return None
    return error


def other_error(
    label: str, error: Exception, key: str | None, *, timeout: float
) -> ProviderError:
    """The typed error for what no SDK class caught: the deadline, the HTTP
    stack, a data line that is not JSON, or a bug (``internal``)."""
    match error:
        case ProviderError():
            return error
        case TimeoutError() | httpx2.TransportError() | httpx2.DecodingError():
            return transport_error(label, error, key, timeout=timeout)
        case ValueError():  # a data line that is not JSON
            return invalid_response(
                label, f"a reply that is not valid JSON ({error})", key
            )
        case _:
            return ProviderError(
                "internal",
                redact(f"{label} failed: {type(error).__name__}: {error}", key),
            )


class StatusError(Protocol):
    """What an SDK's error for an HTTP error answer carries."""

    @property
    def status_code(self) -> int: ...

    @property
    def body(self) -> object: ...

    @property
    def response(self) -> httpx2.Response: ...


class SdkErrors(NamedTuple):
    """An SDK's exception classes, by what they mean.

    Both SDKs are generated from one template, so their classes line up:
    ``APIStatusError``, ``APITimeoutError`` (a kind of ``APIConnectionError``)
    and ``APIResponseValidationError``.
    """

    status: type[StatusError]
    timeout: type[Exception]
    connection: type[Exception]
    validation: type[Exception]


# -- deadlines ----------------------------------------------------------------------


async def call(
    request: Callable[[], Awaitable[T]],
    deadline: float,
    translate: Translate,
    key: str | None,
) -> T:
    """``await request()`` before ``deadline`` (loop time); failures typed."""
    try:
        async with asyncio.timeout_at(deadline):
            return await request()
    except Exception as e:
        raise translate(e) from cause(e, key)


async def items(
    stream: AsyncIterable[T],
    deadline: float,
    translate: Translate,
    key: str | None,
) -> AsyncIterator[T]:
    """The items of ``stream``, each received before ``deadline``; failures typed."""
    pending = aiter(stream)
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                item = await anext(pending)
        except StopAsyncIteration:
            return
        except Exception as e:
            raise translate(e) from cause(e, key)
        yield item


# -- replies --------------------------------------------------------------------------


@contextlib.contextmanager
def reading(label: str, what: str, key: str | None) -> Iterator[None]:
    """Reads of an SDK's reply objects: a shape they lack is ``invalid_response``.

    ``what`` names the thing read, as in "sent a chunk it cannot read".
    """
    try:
        yield
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise invalid_response(label, f"{what} it cannot read ({e!r})", key) from None


def total(usage: Usage) -> UsageEvent:
    """``usage`` as a cumulative usage event (the total so far)."""
    return UsageEvent(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cumulative=True,
    )


def tool_uses(calls: Iterable[ToolCall]) -> list[StreamEvent]:
    """One ``ToolUseEvent`` per call, in order."""
    return [ToolUseEvent(id=c.id, name=c.name, args=c.args) for c in calls]


def whole_reply(
    started: str,
    text: str,
    calls: Sequence[ToolCall],
    usage: Usage,
    metadata: dict[str, Any],
    reasoning: tuple[Reasoning, ...] = (),
) -> list[StreamEvent]:
    """The events of a reply that came whole (not streamed): the system event
    (``started`` is its message), the text as one delta, the tool calls, the
    usage and the result (with the ``reasoning`` that came beside the text)."""
    events: list[StreamEvent] = [SystemEvent(message=started, metadata=metadata)]
    if text:
        events.append(AssistantDelta(text=text))
    events.extend(tool_uses(calls))
    events.append(total(usage))
    events.append(
        ResultEvent(
            text=text,
            tool_calls=tuple(calls),
            usage=usage,
            metadata=metadata,
            reasoning=reasoning,
        )
    )
    return events


def echoed(message: ChatMessage, echo: bool) -> tuple[Reasoning, ...]:
    """The reasoning to send back with assistant ``message``: what its
    provider returned with it, when the provider needs it back (``echo``).

    Only a run's own messages carry reasoning (`ReasonedMessage`): those of
    its tool loop, which answers one user message. The history of earlier
    user messages (a session's) keeps their answers and reasoning outcomes
    as text, so no reasoning is sent back across user messages."""
    if echo and isinstance(message, ReasonedMessage):
        return message.reasoning
    return ()


# -- the provider ---------------------------------------------------------------------


class Client(Protocol):
    """An SDK's async client, as far as the shared half uses it."""

    async def close(self) -> None: ...


C = TypeVar("C", bound=Client)


class ReplyStream(Protocol):
    """An SDK's streamed reply: its raw events, and its connection to let go of."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def close(self) -> None: ...


class Turn(Protocol):
    """Folds the raw events of one streamed reply into normalized events."""

    done: bool
    """The reply is complete: the rest of the stream is not read."""

    def feed(self, raw: object) -> list[StreamEvent]:
        """The normalized events ``raw`` gives; ``ProviderError`` if malformed."""
        ...

    def finish(self) -> list[StreamEvent]:
        """The events left once the stream has ended, the result last;
        ``invalid_response`` when the reply is incomplete."""
        ...


class HttpProvider(abc.ABC, Generic[C]):
    """A model provider over an HTTP API through its official SDK.

    A prompt becomes one call, streamed by default, that must be whole before
    ``timeout`` runs out. The SDK's own retries are off: steward retries, and
    records each attempt. Failures become typed ``ProviderError``s.

    Args:
        api_key: the key; never shown in an event, error or log line. Only a
            provider with a ``keyless`` key may go without, and only with a
            ``base_url``.
        model: the model id used when the prompt names none.
        base_url: the API's address; ``None`` uses the SDK's (or its
            ``*_BASE_URL`` variable).
        timeout: seconds one call may take, from request to last event.
        max_tokens: reply cap when the prompt sets none; ``None`` leaves it to
            the provider.
        temperature: sampling temperature when the prompt sets none.
        stream: stream the reply; ``False`` asks for one JSON reply.
        key_source: where the key came from, named in auth errors; ``None``
            names ``key_env``.
        echo_reasoning: send the reasoning a reply carried back with it
            within the tool loop; ``None``: ``echoes_reasoning``.
        http_client: an ``httpx2.AsyncClient`` for the SDK to use (tests).

    Raises:
        ProviderError: ``config`` when there is no key (and, for a ``keyless``
            provider, no ``base_url``).
    """

    name: str
    """The registry name, which also starts every label and message."""
    key_env: ClassVar[str]
    """The variable the key is read from unless ``api_key_env`` names another."""
    model_example: ClassVar[str]
    """What the error for a missing model id suggests, as written."""
    keyless: ClassVar[str | None] = None
    """The key sent to a ``base_url`` server when none is set; ``None`` when a
    key is always needed."""
    errors: ClassVar[SdkErrors]
    """The SDK's exception classes."""
    echoes_reasoning: ClassVar[bool] = False
    """Whether the reasoning a reply carried is sent back within the tool
    loop unless ``echo_reasoning`` says otherwise: the API refuses a tool
    loop's next turn without it."""

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str = "",
        base_url: str | None = None,
        timeout: float = 60.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stream: bool = True,
        key_source: str | None = None,
        echo_reasoning: bool | None = None,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        key_source = key_source or self.key_env
        if not api_key and (self.keyless is None or base_url is None):
            unless = (
                "" if self.keyless is None else " (a base_url server may go without)"
            )
            raise ProviderError(
                "config",
                f"{self.name} needs an API key: set {key_source}, or api_key_env or "
                f"api_key in the model's [models.<name>] table{unless}",
            )
        self.model = model
        self._key = api_key or None
        self._key_source = key_source
        self._base_url = base_url
        self._timeout = timeout
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._stream = stream
        self._echo = self.echoes_reasoning if echo_reasoning is None else echo_reasoning
        self._client = self._connect(
            api_key=api_key or self.keyless,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,  # steward retries, and records each attempt
            http_client=http_client,
        )

    @classmethod
    def from_config(
        cls, config: ModelConfig, env: Mapping[str, str] | None = None
    ) -> Self:
        """A provider for ``[models.<name>]`` settings; the key from ``env``.

        Raises:
            ProviderError: ``config`` when no model id or no key is set.
        """
        if not config.model:
            raise ProviderError(
                "config",
                f"{cls.name} needs a model id: set model (e.g. {cls.model_example}) "
                "in the [models.<name>] table",
            )
        key, source = resolve_api_key(
            config, cls.key_env, os.environ if env is None else env
        )
        return cls(
            api_key=key,
            model=config.model,
            base_url=config.base_url,
            timeout=config.timeout,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            stream=config.stream,
            key_source=source,
            echo_reasoning=config.echo_reasoning,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections."""
        await self._client.close()

    async def stream(
        self, prompt: Prompt, info: RequestInfo
    ) -> AsyncIterator[StreamEvent]:
        """Ask the model ``prompt``; stream its reply as normalized events."""
        names = ToolNames(t.name for t in prompt.tools)
        params = self._request(prompt, names)
        label = f"{self.name} model {params['model']!r}"
        deadline = asyncio.get_running_loop().time() + self._timeout
        translate = functools.partial(self._error, label)
        if not self._stream:
            reply = await call(
                lambda: self._create(params), deadline, translate, self._key
            )
            for event in self._whole(reply, names, label):
                yield event
            return
        response = await call(
            lambda: self._create_stream(params), deadline, translate, self._key
        )
        turn = self._turn(names, label)
        try:
            async for raw in items(response, deadline, translate, self._key):
                for event in turn.feed(raw):
                    yield event
                if turn.done:
                    break
        finally:
            await response.close()
        for event in turn.finish():
            yield event

    def _error(self, label: str, error: Exception) -> ProviderError:
        """``error`` (from the SDK, the HTTP stack or the deadline) as a typed one."""
        key, sdk = self._key, self.errors
        if isinstance(error, sdk.status):
            return status_error(
                label,
                error.status_code,
                error.body,
                error.response.headers,
                key=key,
                key_source=self._key_source,
            )
        if isinstance(error, sdk.timeout):
            return transport_error(label, TimeoutError(), key, timeout=self._timeout)
        if isinstance(error, sdk.connection):
            return transport_error(
                label, error.__cause__ or error, key, timeout=self._timeout
            )
        if isinstance(error, sdk.validation):
            return invalid_response(
                label, f"a reply that does not match the API: {error}", key
            )
        return other_error(label, error, key, timeout=self._timeout)

    # What each API does its own way:

    @abc.abstractmethod
    def _connect(self, **options: Any) -> C:
        """The SDK's client, built with ``options`` (its constructor's arguments)."""

    @abc.abstractmethod
    def _request(self, prompt: Prompt, names: ToolNames) -> dict[str, Any]:
        """The call's arguments for ``prompt``, without ``stream``."""

    @abc.abstractmethod
    async def _create(self, params: dict[str, Any]) -> object:
        """Make the call with ``params``; the whole reply."""

    @abc.abstractmethod
    async def _create_stream(self, params: dict[str, Any]) -> ReplyStream:
        """Make the call with ``params``, streamed; the stream of raw events."""

    @abc.abstractmethod
    def _whole(self, reply: object, names: ToolNames, label: str) -> list[StreamEvent]:
        """The normalized events of a whole reply."""

    @abc.abstractmethod
    def _turn(self, names: ToolNames, label: str) -> Turn:
        """A fresh fold for the raw events of one streamed reply."""
