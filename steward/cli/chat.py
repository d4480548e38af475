"""`steward chat`: a chat with a session, from the terminal or a pipe.

Each line read is a message to session ``cli:<chat id>``; the command waits
for its answer (a command's, or the reply of the turn that took the message)
and prints it. On an embedded log nobody hosts, this process hosts it for as
long as the chat lasts; beside a `serve` (or on JetStream, with workers), it
records the messages and reads the answers from the log.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import secrets
import signal
import sys

from steward.actors.session import session_stream
from steward.actors.tools import ToolRegistry
from steward.bus import EventLog
from steward.cli.env import EXIT_INTERRUPTED, Env, opened
from steward.cli.hosting import checked_provider, new_host
from steward.events import (
    CommandAnswered,
    MessageReceived,
    ReplySent,
    SessionOpened,
    TurnStarted,
)
from steward.host import Host
from steward.hostlock import HostLock


async def cmd_chat(env: Env, args: argparse.Namespace) -> int:
    provider = checked_provider(env)  # bad settings fail before a log is made
    session_id = f"cli:{args.chat}"
    stream = session_stream(session_id)
    interactive = sys.stdin.isatty()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with opened(env) as (log, projector):
        lock = None if env.distributed else HostLock(env.db)
        host: Host | None = None
        try:
            if lock is not None and lock.acquire():
                host = new_host(env, log, projector, provider=provider)
                await host.start()
            submitter = host or Host(log)
            if (await submitter.state(stream))[1] == 0:
                tools = ToolRegistry.with_builtins().specs()
                settings = env.settings.session_settings(tools)
                opening = SessionOpened(
                    session_id=session_id,
                    channel="cli",
                    chat_id=args.chat,
                    settings=settings,
                    at=submitter.clock.now(),
                )
                await submitter.submit(stream, opening)
            if interactive:
                env.out(f"chat {session_id}: /help lists the commands; Ctrl-D ends")
            sender = _user()
            while True:
                line = await _next_line(interactive, stop)
                if line is None:
                    break
                text = line.strip()
                if not text:
                    continue
                waiting = None if host is None else host.models.slots.depth_total()
                message = MessageReceived(
                    message_id=f"{args.chat}-{secrets.token_hex(6)}",
                    text=text,
                    sender=sender,
                    llm_waiting=waiting,
                    at=submitter.clock.now(),
                )
                await submitter.submit(stream, message)
                reply = await _answer(log, stream, message.message_id, stop)
                if reply is None:
                    break
                env.out(reply)
        finally:
            if host is not None:
                await host.stop()
            if lock is not None:
                lock.release()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    return EXIT_INTERRUPTED if stop.is_set() else 0


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


async def _next_line(interactive: bool, stop: asyncio.Event) -> str | None:
    """The next line of standard input; ``None`` at its end or on a signal."""
    if interactive:
        print("> ", end="", flush=True)
    read = asyncio.ensure_future(asyncio.to_thread(sys.stdin.readline))
    stopped = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if read not in done:
        return None  # the reading thread ends with the process
    line = read.result()
    return line if line else None


async def _answer(
    log: EventLog, stream: str, message_id: str, stop: asyncio.Event
) -> str | None:
    """The answer to message ``message_id`` once the session records it: a
    command's, or the reply of the turn that took the message; ``None`` on a
    signal."""
    turn: str | None = None
    seen = 0
    while not stop.is_set():
        for rec in await log.read(stream, seen + 1):
            seen = rec.version
            match rec.event:
                case CommandAnswered(message_id=mid, reply=reply) if mid == message_id:
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
