"""`steward sessions list|show|send`: chat sessions from the read models, and
a message to one; what `steward chat` shares with them (opening a session,
a message with what its sender said elsewhere, waiting for its answer)."""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys

from steward.actors.session import is_command, session_stream
from steward.actors.tools import ToolRegistry
from steward.bus import EventLog
from steward.cli.env import EXIT_MISMATCH, Env, opened
from steward.errors import NotFoundError
from steward.events import (
    CommandAnswered,
    Elsewhere,
    MessageReceived,
    MessageRefused,
    ReplySent,
    SessionOpened,
    TurnStarted,
)
from steward.host import Host
from steward.isotime import iso_time
from steward.projections.sessions import elsewhere
from steward.projections.store import Projector


async def open_session(env: Env, host: Host, session_id: str) -> str:
    """The stream of session ``session_id`` (``<channel>:<chat>``), opened
    with today's ``[session]`` settings if it has no events yet."""
    channel, _, chat_id = session_id.partition(":")
    if not channel or not chat_id:
        raise NotFoundError(
            f"session id {session_id!r} is not CHANNEL:CHAT (as cli:local)"
        )
    stream = session_stream(session_id)
    if (await host.state(stream))[1] == 0:
        tools = ToolRegistry.with_builtins(session=True).specs()
        opening = SessionOpened(
            session_id=session_id,
            channel=channel,
            chat_id=chat_id,
            settings=env.settings.session_settings(tools),
            at=host.clock.now(),
        )
        await host.submit(stream, opening)
    return stream


async def message(
    env: Env,
    host: Host,
    projector: Projector,
    session_id: str,
    text: str,
    sender: str | None,
    waiting: int | None = None,
) -> MessageReceived:
    """A message to session ``session_id``, with the sender's newest
    messages in other chats (``[session] cross_channel_limit``)."""
    limit = env.settings.session.cross_channel_limit
    found: tuple[Elsewhere, ...] = ()
    if sender and limit and not is_command(text):
        found = await projector.read(
            lambda conn: elsewhere(conn, sender, session_id, limit)
        )
    return MessageReceived(
        message_id=f"{session_id}-{secrets.token_hex(6)}",
        text=text,
        sender=sender,
        llm_waiting=waiting,
        elsewhere=found,
        at=host.clock.now(),
    )


async def answer(
    log: EventLog, stream: str, message_id: str, stop: asyncio.Event
) -> str | None:
    """The answer to message ``message_id`` once the session records it: a
    command's, a refusal's, or the reply of the turn that took the message;
    ``None`` on ``stop``."""
    turn: str | None = None
    seen = 0
    while not stop.is_set():
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
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
        except TimeoutError:
            pass
    return None


async def cmd_sessions_list(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):
        await projector.catch_up(log)
        rows = await projector.query(
            "SELECT session_id, model, segment, messages, turns, memory_items, "
            "updated_at FROM sessions ORDER BY updated_at DESC, session_id LIMIT ?",
            [args.limit],
        )
    if not rows:
        env.out("no sessions yet")
        return 0
    env.out(
        f"{'id':<24} {'model':<12} {'segment':>7} {'messages':>8} {'turns':>5} "
        f"{'memory':>6}  last"
    )
    for sid, model, segment, messages, turns, items, updated in rows:
        env.out(
            f"{sid:<24} {model:<12} {segment:>7} {messages:>8} {turns:>5} "
            f"{items:>6}  {iso_time(updated)}"
        )
    return 0


async def cmd_sessions_show(env: Env, args: argparse.Namespace) -> int:
    async with opened(env, create=False) as (log, projector):
        await projector.catch_up(log)
        found = await projector.query(
            "SELECT channel, chat_id, model, segment, messages, turns, compactions, "
            "core_memory, summary, opened_at FROM sessions WHERE session_id=?",
            [args.id],
        )
        if not found:
            raise NotFoundError(
                f"no session {args.id!r}; `steward sessions list` shows them"
            )
        talk = await projector.query(
            "SELECT seq, segment, kind, role, run_id, text FROM messages "
            "WHERE session_id=? ORDER BY seq DESC LIMIT ?",
            [args.id, args.messages],
        )
        items = await projector.query(
            "SELECT id, level, module, key, value, archived FROM memory_items "
            "WHERE session_id=? ORDER BY archived, level, id",
            [args.id],
        )
        schedules = await projector.query(
            "SELECT name, cron, next_at, fired, task FROM schedules "
            "WHERE session_id=? ORDER BY name",
            [args.id],
        )
    channel, chat, model, segment, n, turns, compactions, core, summary, at = found[0]
    env.out(f"session {args.id} (channel {channel}, chat {chat})")
    env.out(f"  opened {iso_time(at)}, model {model}, segment {segment}")
    env.out(f"  {n} messages, {turns} turns, {compactions} compactions")
    env.out("core memory:")
    for key, value in json.loads(core).items():
        env.out(f"  {key}: {value}")
    env.out(f"summary: {summary or '(none)'}")
    env.out(f"memory items ({len(items)}):")
    for item_id, level, module, key, value, archived in items:
        mark = " (archived)" if archived else ""
        env.out(f"  [{item_id}] L{level} {module}.{key}: {value}{mark}")
    env.out(f"schedules ({len(schedules)}):")
    for name, cron, next_at, fired, task in schedules:
        task = " ".join(str(task).split())[:60]
        env.out(f"  {name} ({cron}) next {iso_time(next_at)}, fired {fired}: {task}")
    env.out(f"messages (the newest {len(talk)}; seq, segment, kind, run):")
    for seq, seg, kind, role, run_id, text in reversed(talk):
        text = " ".join(str(text).split())[:100]
        run = f" {run_id}" if run_id else ""
        env.out(f"  {seq:>5} s{seg} {kind:<8}{run} {role}: {text}")
    return 0


async def cmd_sessions_send(env: Env, args: argparse.Namespace) -> int:
    env.settings.session_settings()  # bad settings fail before a log is made
    stop = asyncio.Event()
    async with opened(env) as (log, projector):
        await projector.catch_up(log)
        submitter = Host(log)  # records only: a serve (or chat) answers
        stream = await open_session(env, submitter, args.id)
        sent = await message(env, submitter, projector, args.id, args.text, args.sender)
        await submitter.submit(stream, sent)
        if args.no_wait:
            env.out(sent.message_id)
            return 0
        try:
            waited = answer(log, stream, sent.message_id, stop)
            reply = await asyncio.wait_for(waited, args.timeout)
        except TimeoutError:
            stop.set()
            print(
                f"steward: no answer within {args.timeout:g}s: is a `steward serve` "
                f"running on this log? The message is recorded ({sent.message_id})",
                file=sys.stderr,
            )
            return EXIT_MISMATCH
    env.out(reply or "")
    return 0
