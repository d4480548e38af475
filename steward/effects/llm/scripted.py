"""The scripted provider: a model that plays replies from a script.

It backs ``steward demo``, the tests and the benchmarks: runs are exact and
repeatable, and no key or network is needed. A script file is YAML
(``.yaml``/``.yml``) or JSON (``.json``)::

    replies:                      # consumed in order, by any run
      - "plain text"              # the model's text
      - json: {type: finish, output: done}   # encoded as the JSON text
      - text: ""
        tool_calls: [{id: c1, name: files.list, args: {}}]
        usage: {input_tokens: 120, output_tokens: 8}
        delay: 0.5                # seconds before the reply
      - error: {kind: rate_limit, message: slow down, retryable: true}
    subagent_replies:             # optional: for subagent requests
      - "a subagent's answer"

Requests with ``priority == "subagent"`` take from ``subagent_replies`` when the
script has that list, and from ``replies`` otherwise. An error reply is used
up like any other, so a retry gets the next one. With ``per_run: true`` every
run plays the lists from the start on its own (many runs, one script), and
a run's call never gets a reply before the one after its model calls so far
(`RequestInfo.iteration`, from the log): a run resumed by another process
(after Ctrl-C), a fork, or a run whose calls several workers make goes on
where it was instead of starting over (replies a retry used in another
process are not counted). Without it, all runs share one cursor, which a
process playing a script file moves past a run's calls so far when the run
first asks it: exact for one run, while the calls of runs sharing the list
(subagents) before the process started are not counted. (A list handed to
the provider in code is the replies from there on.)
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from steward.actors.prompt import Prompt
from steward.effects.llm.base import (
    AssistantDelta,
    RequestInfo,
    ResultEvent,
    StreamEvent,
    SystemEvent,
    ToolUseEvent,
    UsageEvent,
    collect,
)
from steward.errors import ProviderError, ScriptError
from steward.events.protocol import Reasoning, ToolCall, Usage

__all__ = [
    "Reply",
    "ReplyError",
    "ReplyFn",
    "Script",
    "ScriptedProvider",
    "estimate_usage",
    "load_script",
]

ErrorKind = Literal[
    "auth",
    "config",
    "timeout",
    "rate_limit",
    "transport",
    "invalid_response",
    "internal",
]


class ReplyError(msgspec.Struct, frozen=True, kw_only=True):
    """A failure a scripted reply raises instead of answering."""

    kind: ErrorKind
    message: str = "scripted failure"
    retryable: bool = False
    retry_after: float | None = None


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted model reply.

    ``usage`` ``None`` gives a deterministic estimate (``estimate_usage``);
    ``delay`` seconds pass before the reply (or its ``error``) is given.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    delay: float = 0.0
    error: ReplyError | None = None
    metadata: dict[str, Any] = {}
    reasoning: tuple[Reasoning, ...] = ()
    """Reasoning returned beside the text, as an API that wants it back
    gives it (a reply made in code; a script file gives none)."""


class Script(msgspec.Struct, frozen=True, kw_only=True):
    """A loaded script: the shared replies and, optionally, subagents' own."""

    replies: tuple[Reply, ...]
    subagent_replies: tuple[Reply, ...] | None = None
    per_run: bool = False


ReplyFn = Callable[[Prompt, RequestInfo], "Reply | str"]
"""An "instant" model for tests and benchmarks: a reply computed per request."""


# -- the file format ------------------------------------------------------------


class _Spec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class _ToolCallSpec(_Spec, frozen=True, kw_only=True):
    id: str
    name: str
    args: dict[str, Any] = {}


class _UsageSpec(_Spec, frozen=True, kw_only=True):
    input_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    output_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0


class _ErrorSpec(_Spec, frozen=True, kw_only=True):
    kind: ErrorKind
    message: str = "scripted failure"
    retryable: bool = False
    retry_after: Annotated[float, msgspec.Meta(ge=0)] | None = None


class _ReplySpec(_Spec, frozen=True, kw_only=True):
    text: str | None = None
    json: Any | msgspec.UnsetType = msgspec.UNSET
    tool_calls: list[_ToolCallSpec] = []
    usage: _UsageSpec | None = None
    delay: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    error: _ErrorSpec | None = None
    metadata: dict[str, Any] = {}


class _ScriptSpec(_Spec, frozen=True, kw_only=True):
    replies: list[str | _ReplySpec]
    subagent_replies: list[str | _ReplySpec] | None = None
    per_run: bool = False


def load_script(path: str | Path) -> Script:
    """Read and check a script file (YAML or JSON).

    Raises:
        ScriptError: the file is missing, unreadable, not YAML/JSON, or a field
            is invalid; the message names the file and the field path, e.g.
            ``demo.yaml: replies[3].usage.input_tokens: expected int, got str``.
    """
    file = Path(path)
    data = _parse(file)
    try:
        spec = msgspec.convert(data, _ScriptSpec)
    except msgspec.ValidationError as e:
        raise ScriptError(f"{file}: {_explain(e)}") from None
    replies = tuple(_reply(file, "replies", i, r) for i, r in enumerate(spec.replies))
    subagent = None
    if spec.subagent_replies is not None:
        subagent = tuple(
            _reply(file, "subagent_replies", i, r)
            for i, r in enumerate(spec.subagent_replies)
        )
    return Script(replies=replies, subagent_replies=subagent, per_run=spec.per_run)


def _parse(file: Path) -> Any:
    suffix = file.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise ScriptError(
            f"{file}: unsupported script format {suffix or '(none)'!r}; "
            "use a .yaml, .yml or .json file"
        )
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScriptError(f"{file}: no such script file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScriptError(f"{file}: cannot be read: {e}") from e
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ScriptError(f"{file}: line {e.lineno}: invalid JSON: {e.msg}") from e
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        line = f"line {e.problem_mark.line + 1}: " if e.problem_mark else ""
        raise ScriptError(f"{file}: {line}invalid YAML: {e.problem}") from e
    except yaml.YAMLError as e:
        raise ScriptError(f"{file}: invalid YAML: {e}") from e


def _reply(file: Path, queue: str, index: int, spec: str | _ReplySpec) -> Reply:
    if isinstance(spec, str):
        return Reply(text=spec)
    text = spec.text or ""
    if spec.json is not msgspec.UNSET:
        if spec.text is not None:
            raise ScriptError(
                f"{file}: {queue}[{index}]: give either text or json, not both"
            )
        text = json.dumps(spec.json)
    usage = None
    if spec.usage is not None:
        usage = Usage(
            input_tokens=spec.usage.input_tokens,
            output_tokens=spec.usage.output_tokens,
        )
    error = None
    if spec.error is not None:
        e = spec.error
        error = ReplyError(
            kind=e.kind,
            message=e.message,
            retryable=e.retryable,
            retry_after=e.retry_after,
        )
    return Reply(
        text=text,
        tool_calls=tuple(
            ToolCall(id=c.id, name=c.name, args=c.args) for c in spec.tool_calls
        ),
        usage=usage,
        delay=spec.delay,
        error=error,
        metadata=spec.metadata,
    )


_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `([^`]*)`$")


def _explain(error: msgspec.ValidationError) -> str:
    """A msgspec error as ``replies[3].usage.input_tokens: expected int, got str``."""
    match = _AT.match(str(error))
    assert match is not None  # the pattern matches every string
    path = (match["path"] or "").lstrip(".")
    message = match["message"]
    unknown = _UNKNOWN.match(message)
    if unknown is not None:
        path = f"{path}.{unknown[1]}".lstrip(".")
        message = "unknown field"
    else:
        message = message.replace("`", "").replace("Object missing", "missing")
        message = message.replace("object", "mapping")
        message = message.replace("array", "list")
        message = message.strip()
        message = message[:1].lower() + message[1:]
    if not path:
        return f"{message} (a script is a mapping with a `replies:` list)"
    return f"{path}: {message}"


# -- the provider ---------------------------------------------------------------


_content = operator.attrgetter("content")


def estimate_usage(prompt: Prompt, reply: Reply) -> Usage:
    """A deterministic token estimate: a quarter of the characters each way."""
    sent = len(prompt.system) + sum(map(len, map(_content, prompt.messages)))
    said = len(reply.text)
    if reply.tool_calls:
        said += sum(len(c.name) + len(json.dumps(c.args)) for c in reply.tool_calls)
    return Usage(input_tokens=sent // 4, output_tokens=said // 4)


def _result(prompt: Prompt, reply: Reply) -> ResultEvent:
    usage = reply.usage if reply.usage is not None else estimate_usage(prompt, reply)
    return ResultEvent(
        text=reply.text,
        tool_calls=reply.tool_calls,
        usage=usage,
        metadata=reply.metadata,
        reasoning=reply.reasoning,
    )


class ScriptedProvider:
    """A provider that plays scripted replies (see the module docstring).

    Args:
        replies: the replies, consumed in order by any request, or a function
            computing each reply from the prompt and request (an "instant"
            model for tests and benchmarks).
        subagent_replies: replies for requests with ``priority ==
            "subagent"``; ``None`` sends those to ``replies`` too.
        per_run: give every run its own cursor, so each plays the lists from
            the start (a resumed run from its model calls so far);
            otherwise all runs share one cursor per list.
        label: names the script in errors (the file path for a file).
        hint: added to the "no reply left" error, to say how to fix it.
        sleep: awaited with a reply's ``delay`` (a fake clock's in tests).
        whole: the replies are a whole script (a file) that every process
            plays from its top, so the shared cursor moves past a run's
            model calls so far when the run first asks; without it they are
            the replies from here on.
    """

    name = "scripted"

    def __init__(
        self,
        replies: Sequence[Reply | str] | ReplyFn = (),
        *,
        subagent_replies: Sequence[Reply | str] | None = None,
        per_run: bool = False,
        label: str = "<in-memory>",
        hint: str = "",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        whole: bool = False,
    ) -> None:
        self._fn: ReplyFn | None = None
        self._replies: tuple[Reply, ...] = ()
        if callable(replies):
            self._fn = replies
        else:
            self._replies = tuple(_as_reply(r) for r in replies)
        self._subagent: tuple[Reply, ...] | None = None
        if subagent_replies is not None:
            self._subagent = tuple(_as_reply(r) for r in subagent_replies)
        self._per_run = per_run
        self._cursors: dict[tuple[str, str], int] = {}
        self._asked: set[str] = set()  # the actors (streams) asked a reply so far
        self._whole = whole
        self._calls = 0
        self.label = label
        self._hint = hint
        self._sleep = sleep

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> ScriptedProvider:
        """A provider playing the script at ``path``; ``ScriptError`` if invalid."""
        script = load_script(path)
        return cls(
            script.replies,
            subagent_replies=script.subagent_replies,
            per_run=script.per_run,
            label=str(path),
            sleep=sleep,
            whole=True,
        )

    @property
    def used(self) -> int:
        """Replies given so far, from every queue."""
        return self._calls + sum(self._cursors.values())

    async def stream(
        self, prompt: Prompt, info: RequestInfo
    ) -> AsyncIterator[StreamEvent]:
        """Play the next reply as system, assistant, tool_use, usage and result."""
        reply = await self._wait_or_fail(self._next(prompt, info))
        yield SystemEvent(
            message=f"scripted reply from {self.label}",
            metadata={"provider": self.name, "model": prompt.model},
        )
        if reply.text:
            yield AssistantDelta(text=reply.text)
        for call in reply.tool_calls:
            yield ToolUseEvent(id=call.id, name=call.name, args=call.args)
        result = _result(prompt, reply)
        yield UsageEvent(
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cumulative=True,
        )
        yield result

    async def result(self, prompt: Prompt, info: RequestInfo) -> ResultEvent:
        """The next reply's result alone: what ``collect(stream(...))`` returns,
        for a caller that watches none of the stream's events.

        The reply is whole before it is given, so nothing is lost by not
        streaming it; the host asks for this when it records no stream and
        has no delta listener (a run step skips the generator and four events).
        """
        if type(self).stream is not ScriptedProvider.stream:
            # a subclass that streams its own way is collected, so this stays
            # what collecting its stream gives
            return await collect(self.stream(prompt, info))
        reply = self._next(prompt, info)
        if reply.delay > 0 or reply.error is not None:
            reply = await self._wait_or_fail(reply)
        return _result(prompt, reply)

    async def _wait_or_fail(self, reply: Reply) -> Reply:
        """``reply`` after its delay; its error raised."""
        if reply.delay > 0:
            await self._sleep(reply.delay)
        if reply.error is not None:
            e = reply.error
            raise ProviderError(
                e.kind, e.message, retryable=e.retryable, retry_after=e.retry_after
            )
        return reply

    def _next(self, prompt: Prompt, info: RequestInfo) -> Reply:
        # Taken before any await, so concurrent requests never share a reply.
        if self._fn is not None:
            self._calls += 1
            return _as_reply(self._fn(prompt, info))
        queue, replies, what = "replies", self._replies, "reply"
        if info.priority == "subagent" and self._subagent is not None:
            queue, replies, what = "subagent_replies", self._subagent, "subagent reply"
        cursor = (queue, info.stream if self._per_run else "")
        used = self._cursors.get(cursor, 0)
        if self._per_run or (self._whole and info.stream not in self._asked):
            # the run's calls before this one had their replies, here or in
            # another process (a resumed run, a fork, another worker)
            used = max(used, info.iteration - 1)
        self._asked.add(info.stream)
        if used >= len(replies):
            raise self._exhausted(what, used, info)
        self._cursors[cursor] = used + 1
        return replies[used]

    def _exhausted(self, what: str, used: int, info: RequestInfo) -> ProviderError:
        hint = f"; {self._hint}" if self._hint else ""
        return ProviderError(
            "config",
            f"script {self.label} has no {what} left for request {info.request_id} "
            f"of {info.stream} ({used} used){hint}",
        )


def _as_reply(reply: Reply | str) -> Reply:
    return Reply(text=reply) if isinstance(reply, str) else reply
