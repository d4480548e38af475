"""The prompt a model call sends, and the hash a run records in its place.

Pure: `prompt_hash` is a function of the prompt alone. The work one hash can
lend the next (digests of messages and settings, the prompt a run's next one
grows from) is kept in a `PromptCache` that the caller owns and passes in; a
module keeps no state. With a fresh cache, or none, the hash is the same.
"""

from __future__ import annotations

import hashlib
from typing import Literal, cast

import msgspec

from steward.events.protocol import ChatMessage, ToolSpec
from steward.events.run import RunSettings


class Prompt(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a provider sends to the model, in a provider-neutral shape."""

    model: str
    system: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    protocol: Literal["json", "native"] = "json"
    temperature: float | None = None
    max_tokens: int | None = None


_encoder = msgspec.msgpack.Encoder(order="deterministic")

HASH_PREFIX = "m1:"
"""Marks a hash of the current kind (a hash of part hashes); a recorded hash
without it is of the first kind, a hash of the whole encoded prompt."""


class PromptCache:
    """Work that building and hashing prompts reuse from one call to the next.

    The host owns one for its life and passes it to `run.decide_and_fold`,
    `run.build_prompt` and `prompt_matches`; anything else may pass none.
    It only saves work: every function that takes one returns the same with
    a fresh one. Not safe to share between threads (a host is one loop).

    What it holds: digests of messages, by message (equal messages have
    equal digests, so a message folded again from the log, an equal object,
    finds its digest too); digests of messages with tool call arguments
    (dicts, which cannot be hashed) by identity, since a run's transcript
    holds the same objects from call to call; head hashers (a BLAKE2b fed
    the digest of a prompt's settings, copied by each call) by the identity
    of their system prompt and tools; and the system prompt rendered
    for a run's settings, by the text and protocol it is made of and the
    identity of its tools (shared by the runs one session or profile
    starts). Identity memos hold their objects, so an id is never reused
    while in them. Each is emptied when what it holds grows past its bound.
    """

    def __init__(self, *, memo_bytes: int = 32 * 1024 * 1024) -> None:
        self.memo_bytes = memo_bytes
        """Bytes of encoded messages digested before the memos are emptied."""
        self._messages: dict[ChatMessage, bytes] = {}
        self._unhashable: dict[int, tuple[ChatMessage, bytes]] = {}
        self._heads: dict[
            tuple[object, ...], tuple[str, tuple[ToolSpec, ...], hashlib.blake2b]
        ] = {}
        self._held = 0
        self._systems: dict[tuple[str, str, int], tuple[tuple[ToolSpec, ...], str]]
        self._systems = {}

    def system(self, settings: RunSettings) -> str | None:
        """The system prompt rendered for settings like ``settings`` before,
        if it was."""
        kept = self._systems.get(_system_key(settings))
        return kept[1] if kept is not None and kept[0] is settings.tools else None

    def keep_system(self, settings: RunSettings, system: str) -> None:
        """Remember ``system`` as the system prompt rendered for ``settings``."""
        if len(self._systems) >= _KEPT_SYSTEMS:
            self._systems.clear()
        self._systems[_system_key(settings)] = (settings.tools, system)

    def message_digest(self, message: ChatMessage) -> bytes:
        """The digest of ``message``, from the memo or computed into it."""
        hashable = not message.tool_calls  # whose arguments are dicts
        if hashable:
            digest = self._messages.get(message)
            if digest is not None:
                return digest
        else:
            kept = self._unhashable.get(id(message))
            if kept is not None and kept[0] is message:
                return kept[1]
        encoded = _encoder.encode(message)
        digest = hashlib.blake2b(encoded, digest_size=16).digest()
        self._held += len(encoded)
        if (
            self._held > self.memo_bytes
            or len(self._messages) + len(self._unhashable) > _KEPT_MESSAGES
        ):
            self._messages.clear()
            self._unhashable.clear()
            self._held = len(encoded)
        if hashable:
            self._messages[message] = digest
        else:
            self._unhashable[id(message)] = (message, digest)
        return digest

    def joined(self, messages: tuple[ChatMessage, ...]) -> bytes:
        """The digests of ``messages``, joined, from the memo where it has them."""
        # Looked up in C (map over the memo): a Python loop over the messages
        # would cost about what the hashing it saves costs. Usually only the
        # newest messages are missing: only those are digested.
        try:
            digests = list(map(self._messages.get, messages))
        except TypeError:  # tool call arguments (dicts) cannot be hashed
            digests = [self.message_digest(m) for m in messages]
        new = digests.count(None)
        i = len(digests)
        while new:
            i -= 1
            if digests[i] is None:
                digests[i] = self.message_digest(messages[i])
                new -= 1
        return b"".join(cast("list[bytes]", digests))  # no None is left

    def head_hasher(self, prompt: Prompt) -> hashlib.blake2b:
        """A BLAKE2b that has hashed the digest of the prompt's settings
        (copied by each call, which then adds its messages' digests)."""
        system, tools = prompt.system, prompt.tools
        key = (
            id(system),
            id(tools),
            prompt.model,
            prompt.protocol,
            prompt.temperature,
            prompt.max_tokens,
        )
        memo = self._heads.get(key)
        if memo is not None and memo[0] is system and memo[1] is tools:
            return memo[2]
        head = msgspec.structs.replace(prompt, messages=())
        digest = hashlib.blake2b(_encoder.encode(head), digest_size=16).digest()
        hasher = hashlib.blake2b(digest, digest_size=16)
        if len(self._heads) > _KEPT_HEADS:
            self._heads.clear()
        self._heads[key] = (system, tools, hasher)
        return hasher


def _system_key(settings: RunSettings) -> tuple[str, str, int]:
    """What a rendered system prompt is kept by: the settings it is made of,
    the tools (whose parameters, dicts, cannot be hashed) by identity. Runs
    made from one session's or profile's settings share their text and
    tools, so each run's first prompt finds the text, and with it the head
    hasher, that the run before it rendered."""
    return (settings.system_prompt, settings.protocol, id(settings.tools))


_KEPT_MESSAGES = 100_000
_KEPT_HEADS = 1024
_KEPT_SYSTEMS = 1024


def prompt_hash(prompt: Prompt, cache: PromptCache | None = None) -> str:
    """A stable hash of a prompt, recorded in place of the prompt itself.

    The hash of the hashes of its parts: the settings (model, system prompt,
    tools, protocol, sampling) and each message. With a ``cache`` kept from
    call to call, a call encodes and hashes only its new messages, then
    hashes 16 bytes per message: the cost of the window's text is paid once,
    not every call. BLAKE2b: as strong as SHA-256 here and twice as fast
    without SHA instructions; 16 bytes make collisions out of reach.
    """
    if cache is None:
        cache = PromptCache()
    whole = cache.head_hasher(prompt).copy()
    whole.update(cache.joined(prompt.messages))
    return HASH_PREFIX + whole.hexdigest()


def prompt_matches(
    prompt: Prompt, recorded: str, cache: PromptCache | None = None
) -> bool:
    """Whether ``recorded`` (of either kind) is the hash of ``prompt``."""
    if recorded.startswith(HASH_PREFIX):
        return prompt_hash(prompt, cache) == recorded
    return first_kind_hash(prompt) == recorded


def first_kind_hash(prompt: Prompt) -> str:
    """The hash logs written before part hashes recorded: of the whole prompt."""
    return hashlib.blake2b(_encoder.encode(prompt), digest_size=16).hexdigest()
