"""The prompt a model call sends, and the hash a run records in its place.

Pure: `prompt_hash` is a function of the prompt alone. The work one hash can
lend the next (digests of messages and of settings) is kept in a
`PromptCache` that the caller owns and passes in, found by value; a module
keeps no state. With a fresh cache, or none, the hash is the same.
"""

from __future__ import annotations

import hashlib
from typing import Literal, cast

import msgspec

from steward.events.protocol import ChatMessage, ToolSpec


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
    """Work that hashing prompts reuses from one call to the next.

    The host owns one for its life and passes it to `run.decide_and_fold`
    and `prompt_matches`; anything else may pass none. It only saves work:
    every function that takes one returns the same with a fresh one. Not
    safe to share between threads (a host is one loop).

    It holds digests of messages, and head hashers (a BLAKE2b fed the
    digest of a prompt's settings, copied by each call), found by value,
    never by identity: an equal object (a state folded again from the log)
    finds what the first found. Where equality will not do they are found
    by their encoding, which is what a digest is of: a message with tool
    calls (whose arguments, dicts, cannot be hashed), and a prompt's
    settings but its system prompt (tool parameters are dicts too, and
    ``1 == 1.0`` and ``0.0 == -0.0`` though each pair encodes apart). Each
    memo is emptied when what it holds grows past its bound.
    """

    def __init__(self, *, memo_bytes: int = 32 * 1024 * 1024) -> None:
        self.memo_bytes = memo_bytes
        """Bytes of encoded messages digested before the memos are emptied."""
        self._messages: dict[ChatMessage | bytes, bytes] = {}
        self._held = 0
        self._heads: dict[tuple[str, bytes], hashlib.blake2b] = {}

    def message_digest(self, message: ChatMessage) -> bytes:
        """The digest of ``message``, from the memo or computed into it."""
        encoded = _encoder.encode(message) if message.tool_calls else None
        key: ChatMessage | bytes = message if encoded is None else encoded
        digest = self._messages.get(key)
        if digest is not None:
            return digest
        if encoded is None:
            encoded = _encoder.encode(message)
        digest = hashlib.blake2b(encoded, digest_size=16).digest()
        self._held += len(encoded)
        if self._held > self.memo_bytes or len(self._messages) > _KEPT_MESSAGES:
            self._messages.clear()
            self._held = len(encoded)
        self._messages[key] = digest
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
        # Found by the system prompt (a string, often most of the head) and
        # the encoding of the rest: less work than digesting the head, which
        # encodes the system prompt too and runs BLAKE2b over it all.
        rest = msgspec.structs.replace(prompt, system="", messages=())
        key = (prompt.system, _encoder.encode(rest))
        hasher = self._heads.get(key)
        if hasher is None:
            head = msgspec.structs.replace(prompt, messages=())
            digest = hashlib.blake2b(_encoder.encode(head), digest_size=16).digest()
            hasher = hashlib.blake2b(digest, digest_size=16)
            if len(self._heads) > _KEPT_HEADS:
                self._heads.clear()
            self._heads[key] = hasher
        return hasher


_KEPT_MESSAGES = 100_000
_KEPT_HEADS = 1024


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
