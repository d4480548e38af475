"""The prompt a model call sends: a pure function of a run's state."""

from __future__ import annotations

import hashlib
from typing import Literal, cast

import msgspec

from steward.events.run import ChatMessage, ToolSpec


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


def prompt_hash(prompt: Prompt) -> str:
    """A stable hash of a prompt, recorded in place of the prompt itself.

    The hash of the hashes of its parts: the settings (model, system prompt,
    tools, protocol, sampling) and each message. Parts are memoized, so a
    call encodes and hashes only its new messages, then hashes 16 bytes per
    message: the cost of the window's text is paid once, not every call.
    BLAKE2b: as strong as SHA-256 here and twice as fast without SHA
    instructions; 16 bytes make collisions out of reach.
    """
    messages = prompt.messages
    joined = _follow_on(messages)
    if joined is None:
        joined = _joined(messages)
    if messages:
        if len(_follows) >= _FOLLOWS:
            _follows.clear()
        _follows[id(messages[-1])] = (messages, joined)
    whole = _head_hasher(prompt).copy()
    whole.update(joined)
    return HASH_PREFIX + whole.hexdigest()


def _joined(messages: tuple[ChatMessage, ...]) -> bytes:
    """The digests of ``messages``, joined, from the memo where it has them."""
    # Looked up in C (map over the memo): a Python loop over the messages
    # would cost about what the hashing it saves costs. Usually only the
    # newest messages are missing: only those are digested.
    try:
        digests = list(map(_messages.get, messages))
    except TypeError:  # tool call arguments (dicts) cannot be hashed
        digests = [_message_digest(m) for m in messages]
    new = digests.count(None)
    i = len(digests)
    while new:
        i -= 1
        if digests[i] is None:
            digests[i] = _message_digest(messages[i])
            new -= 1
    return b"".join(cast("list[bytes]", digests))  # no None is left


def _follow_on(messages: tuple[ChatMessage, ...]) -> bytes | None:
    """The joined digests of ``messages`` cut from those of the prompt hashed
    before it in the same run, or None when no such prompt is remembered.

    A run's next prompt is usually its last one with one to three messages
    added at the end (a reply, a tool result) and, once the window is full,
    its oldest transcript messages dropped from after the first few (the
    conversation stays). Found by the identity of the message before the
    new ones; the messages kept are checked against that prompt's by
    comparing pointers in C, so no message's digest is looked up again (a
    lookup per window message, with the messages out of the CPU's caches by
    the next step, was most of what a lone step's hash cost).
    """
    n = len(messages)
    for new in range(1, min(n, 4)):
        old = n - new  # messages the earlier prompt must hold
        kept = _follows.get(id(messages[old - 1]))
        if kept is None:
            continue
        before, joined = kept
        if before[-1] is not messages[old - 1] or len(before) < old:
            continue
        drop = len(before) - old
        if drop == 0:
            if messages[:old] != before:
                continue
            cut = joined
        else:
            # the messages both begin with (the conversation), then the rest
            # of the earlier prompt's after the dropped ones
            same, limit = 0, min(old, 8)
            while same < limit and messages[same] is before[same]:
                same += 1
            if messages[same:old] != before[same + drop :]:
                continue
            cut = joined[: 16 * same] + joined[16 * (same + drop) :]
        return cut + b"".join([_message_digest(m) for m in messages[old:]])
    return None


def prompt_matches(prompt: Prompt, recorded: str) -> bool:
    """Whether ``recorded`` (of either kind) is the hash of ``prompt``."""
    if recorded.startswith(HASH_PREFIX):
        return prompt_hash(prompt) == recorded
    return first_kind_hash(prompt) == recorded


def first_kind_hash(prompt: Prompt) -> str:
    """The hash logs written before part hashes recorded: of the whole prompt."""
    return hashlib.blake2b(_encoder.encode(prompt), digest_size=16).hexdigest()


# Digests of messages, by message: equal messages have equal digests, so a
# message folded again from the log (an equal object) finds its digest too.
# Messages with tool call arguments (dicts) cannot be hashed: they are kept by
# identity (a run's transcript holds the same objects from call to call, so a
# native tool loop digests each once). Head hashers (a BLAKE2b fed the digest
# of the settings, copied by each call) by the identity of their system prompt
# and tools. Identity memos hold their objects, so an id is never reused while
# in them. Only work is saved: a miss computes the same digest. Emptied when
# what they hold grows too big.
_MEMO_BYTES = 32 * 1024 * 1024
_messages: dict[ChatMessage, bytes] = {}
_unhashable: dict[int, tuple[ChatMessage, bytes]] = {}
_heads: dict[tuple[object, ...], tuple[str, tuple[ToolSpec, ...], hashlib.blake2b]] = {}
# Each hashed prompt's messages and their joined digests, by the identity of
# its last message (which the entry holds, so the id is not reused): where
# `_follow_on` finds the prompt a run's next prompt grew from. Emptied with
# the message memos too, so what it keeps alive stays within their budget.
_FOLLOWS = 4096
_follows: dict[int, tuple[tuple[ChatMessage, ...], bytes]] = {}
_held = 0


def _message_digest(message: ChatMessage) -> bytes:
    """The digest of ``message``, from the memo or computed into it."""
    global _held
    hashable = not message.tool_calls  # whose arguments are dicts
    if hashable:
        digest = _messages.get(message)
        if digest is not None:
            return digest
    else:
        kept = _unhashable.get(id(message))
        if kept is not None and kept[0] is message:
            return kept[1]
    encoded = _encoder.encode(message)
    digest = hashlib.blake2b(encoded, digest_size=16).digest()
    _held += len(encoded)
    if _held > _MEMO_BYTES or len(_messages) + len(_unhashable) > 100_000:
        _messages.clear()
        _unhashable.clear()
        _follows.clear()  # holds messages too: forgotten with them
        _held = len(encoded)
    if hashable:
        _messages[message] = digest
    else:
        _unhashable[id(message)] = (message, digest)
    return digest


def _head_hasher(prompt: Prompt) -> hashlib.blake2b:
    """A BLAKE2b that has hashed the digest of the prompt's settings (copied by
    each call, which then adds its messages' digests)."""
    system, tools = prompt.system, prompt.tools
    key = (
        id(system),
        id(tools),
        prompt.model,
        prompt.protocol,
        prompt.temperature,
        prompt.max_tokens,
    )
    memo = _heads.get(key)
    if memo is not None and memo[0] is system and memo[1] is tools:
        return memo[2]
    head = msgspec.structs.replace(prompt, messages=())
    digest = hashlib.blake2b(_encoder.encode(head), digest_size=16).digest()
    hasher = hashlib.blake2b(digest, digest_size=16)
    if len(_heads) > 1024:
        _heads.clear()
    _heads[key] = (system, tools, hasher)
    return hasher
