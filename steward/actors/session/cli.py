"""`steward sessions list|show|send`: chat sessions from the read models, and
a message to one (`steward.actors.session.chats` opens the session and waits for the
answer)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from steward.actors.session.chats import answer, message, open_session
from steward.actors.session.state import session_stream
from steward.cli.env import EXIT_NO_ANSWER, Env, opened
from steward.cli.hosting import why_unhosted
from steward.cli.output import (
    cut,
    json_line,
)
from steward.errors import NotFoundError
from steward.host import Host
from steward.isotime import iso_time

SEGMENTS_SHOWN = 10
"""The newest segments `sessions show` lists (their messages are listed
with their segment)."""


TEXT_WIDTH = 100
"""The characters of a message `sessions show` shows (``-o json``: all)."""
TASK_WIDTH = 60
"""The characters of a schedule's task `sessions show` shows."""


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
    if args.output == "json":
        began = {seg: (first, received) for seg, first, received in segments}
        view = {
            "id": args.id,
            "stream": session_stream(args.id),
            "channel": channel,
            "chat": chat,
            "opened_at": iso_time(at),
            "model": model,
            "segment": segment,
            "messages_received": n,
            "turns": turns,
            "compactions": compactions,
            "segments": [
                {
                    "segment": seg,
                    "from": None if seg not in began else iso_time(began[seg][0]),
                    "messages": began.get(seg, (None, 0))[1],
                }
                for seg in range(segment + 1)
            ],
            "core_memory": json.loads(core),
            "summary": summary,
            "memory_items": [
                {
                    "id": item_id,
                    "level": level,
                    "module": module,
                    "key": key,
                    "value": value,
                    "archived": bool(archived),
                }
                for item_id, level, module, key, value, archived in items
            ],
            "schedules": [
                {
                    "name": name,
                    "cron": cron,
                    "next_at": iso_time(next_at),
                    "fired": fired,
                    "task": task,
                }
                for name, cron, next_at, fired, task in schedules
            ],
            "messages": [
                {
                    "seq": seq,
                    "segment": seg,
                    "kind": kind,
                    "role": role,
                    "run_id": run_id,
                    "text": text,
                }
                for seq, seg, kind, role, run_id, text in reversed(talk)
            ],
        }
        env.out(json_line(view))
        return 0
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
        task = cut(task, TASK_WIDTH)
        env.out(f"  {name} ({cron}) next {iso_time(next_at)}, fired {fired}: {task}")
    env.out(f"messages (the newest {len(talk)}; seq, segment, kind, run):")
    for seq, seg, kind, role, run_id, text in reversed(talk):
        text = cut(text, TEXT_WIDTH)
        run = f" {run_id}" if run_id else ""
        env.out(f"  {seq:>5} s{seg} {kind:<8}{run} {role}: {text}")
    return 0


async def cmd_sessions_send(env: Env, args: argparse.Namespace) -> int:
    env.settings.session_settings()  # bad settings fail before a log is made
    stop = asyncio.Event()
    async with opened(env) as (log, projector):
        await projector.catch_up(log)
        # records only: a serve (or chat) answers
        submitter = Host(log, kinds=env.kinds)
        stream = await open_session(env.settings, submitter, args.id)
        sent = await message(
            env.settings, submitter, projector, args.id, args.text, args.sender
        )
        since = (await submitter.state(stream))[1]
        await submitter.submit(stream, sent)
        if args.no_wait:
            env.out(sent.message_id)
            return 0
        what = f"message {sent.message_id} (recorded: answered once one runs)"
        no_host = await why_unhosted(env, log, what)
        if no_host is not None:  # a command is answered already
            stop.set()
        try:
            waited = answer(log, stream, sent.message_id, stop, since)
            reply = await asyncio.wait_for(waited, args.timeout)
        except TimeoutError:
            stop.set()
            print(
                f"steward: no answer within {args.timeout:g}s; the message is "
                f"recorded ({sent.message_id}) and its answer will be in the "
                f"session (`steward sessions show {args.id}`)",
                file=sys.stderr,
            )
            return EXIT_NO_ANSWER
        if reply is None and no_host is not None:
            raise no_host
    env.out(reply or "")
    return 0
