"""`steward sessions list|show|send`: chat sessions from the read models, and
a message to one (`steward.chats` opens the session and waits for the
answer)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from steward.chats import answer, message, open_session
from steward.cli.env import EXIT_MISMATCH, Env, opened
from steward.errors import NotFoundError
from steward.host import Host
from steward.isotime import iso_time

SEGMENTS_SHOWN = 10
"""The newest segments `sessions show` lists (their messages are listed
with their segment)."""


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
        segments = await projector.query(
            "SELECT segment, min(at), sum(kind = 'message') FROM messages "
            "WHERE session_id=? GROUP BY segment ORDER BY segment",
            [args.id],
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
    env.out(f"  {n} messages received, {turns} turns, {compactions} compactions")
    env.out(f"segments ({segment + 1}; /new starts one, the log keeps them all):")
    began = {seg: (first, received) for seg, first, received in segments}
    shown = range(max(0, segment + 1 - SEGMENTS_SHOWN), segment + 1)
    if shown.start:
        env.out(f"  ({shown.start} earlier)")
    for seg in shown:
        first, received = began.get(seg, (None, 0))
        since = "" if first is None else f" from {iso_time(first)}"
        env.out(f"  s{seg}{since}: {received} messages")
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
        stream = await open_session(env.settings, submitter, args.id)
        sent = await message(
            env.settings, submitter, projector, args.id, args.text, args.sender
        )
        since = (await submitter.state(stream))[1]
        await submitter.submit(stream, sent)
        if args.no_wait:
            env.out(sent.message_id)
            return 0
        try:
            waited = answer(log, stream, sent.message_id, stop, since)
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
