"""Talking to a chat's session: opening it, a message to it, its answer.

What `steward chat`, `steward sessions send` and the NATS ingress share. A
session is opened (`SessionOpened`, with today's ``[session]`` settings and
the channel's agent profile) the first time a message comes for it; a
message carries its sender's newest messages in other chats, looked up in
the memory views (the decider cannot read other streams); `answer` reads
the session's stream until the message is answered.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Protocol

import msgspec

from steward.actors.run.stage_prompts import with_prompts
from steward.actors.session.events import (
    SESSION_REVISION,
    CommandAnswered,
    Elsewhere,
    MessageReceived,
    MessageRefused,
    ReplySent,
    SessionOpened,
    TurnStarted,
)
from steward.actors.session.state import is_command, session_stream
from steward.bus import EventLog
from steward.config import Settings
from steward.effects.tools import ToolRegistry
from steward.errors import NotFoundError
from steward.host import Host

__all__ = ["ChatReads", "answer", "message", "open_session"]


class ChatReads(Protocol):
    """Where a message's sender's other chats are looked up: the memory
    views (`Projector`), or a worker's `RemoteReads` of them."""

    async def elsewhere(
        self, sender: str, session_id: str, limit: int
    ) -> tuple[Elsewhere, ...]: ...


async def open_session(
    settings: Settings, host: Host, session_id: str, profile: str | None = None
) -> str:
    """The stream of session ``session_id`` (``<channel>:<chat>``), opened
    with today's ``[session]`` settings (and agent ``profile``, default
    ``[session] profile``) if it has no events yet."""
    channel, _, chat_id = session_id.partition(":")
    if not channel or not chat_id:
        raise NotFoundError(
            f"session id {session_id!r} is not CHANNEL:CHAT (as cli:local)"
        )
    stream = session_stream(session_id)
    if (await host.state(stream))[1] == 0:
        registry = host.tools or ToolRegistry.with_builtins(extra=host.kinds.tools)
        agent = settings.profile(profile or settings.session.profile)
        await registry.load(settings.servers(agent.mcp, "agents.mcp"))
        opened = settings.session_settings(registry.specs(), profile, session_id)
        run = with_prompts(opened.run, settings, opened.profile)
        opening = SessionOpened(
            session_id=session_id,
            channel=channel,
            chat_id=chat_id,
            settings=msgspec.structs.replace(opened, run=run),
            at=host.clock.now(),
            revision=SESSION_REVISION,
        )
        await host.submit(stream, opening)
    return stream


async def message(
    settings: Settings,
    host: Host,
    reads: ChatReads | None,
    session_id: str,
    text: str,
    sender: str | None,
    *,
    message_id: str | None = None,
) -> MessageReceived:
    """A message to session ``session_id`` (its id ``message_id``, or a new
    one), with the sender's newest messages in other chats (``[session]
    cross_channel_limit``) when there are memory views to look in, and,
    when ``host`` carries out the model calls, when it started and how many
    calls wait for a slot (for ``/status``)."""
    limit = settings.session.cross_channel_limit
    found: tuple[Elsewhere, ...] = ()
    # by the rule of sessions opened now (of an older session's commands,
    # the blocks are recorded and go unread)
    command = is_command(text, SESSION_REVISION)
    if reads is not None and sender and limit and not command:
        found = await reads.elsewhere(sender, session_id, limit)
    hosting = host.started_at
    return MessageReceived(
        message_id=message_id or f"{session_id}-{secrets.token_hex(6)}",
        text=text,
        sender=sender,
        llm_waiting=None if hosting is None else host.models.slots.depth_total(),
        host_since=hosting,
        elsewhere=found,
        at=host.clock.now(),
    )


async def answer(
    log: EventLog, stream: str, message_id: str, stop: asyncio.Event, since: int = 0
) -> str | None:
    """The answer to message ``message_id`` once the session records it: a
    command's, a refusal's, or the reply of the turn that took the message;
    ``None`` on ``stop`` (once what is recorded is read: so, with ``stop``
    set, whether it is recorded already). The stream is read after version
    ``since`` (before the message's commit: a long chat is not read again
    for each message)."""
    turn: str | None = None
    seen = since
    while True:
        for rec in await log.read(stream, seen + 1):
            seen = rec.version
            match rec.event:
                case (
                    CommandAnswered(message_id=mid, reply=reply)
                    | MessageRefused(message_id=mid, reply=reply)
                ) if mid == message_id:
                    return reply
                case TurnStarted(run_id=run_id, message_ids=ids) if message_id in ids:
                    turn = run_id
                case ReplySent(run_id=run_id, text=text) if run_id == turn:
                    return text
                case _:
                    pass
        if stop.is_set():
            return None
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
        except TimeoutError:
            pass
