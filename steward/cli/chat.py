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
import signal
import sys

from steward.cli.env import EXIT_INTERRUPTED, Env, opened
from steward.cli.hosting import checked_provider, new_host
from steward.cli.sessions import answer, message, open_session
from steward.host import Host
from steward.hostlock import HostLock


async def cmd_chat(env: Env, args: argparse.Namespace) -> int:
    provider = checked_provider(env)  # bad settings fail before a log is made
    session_id = f"cli:{args.chat}"
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
            stream = await open_session(env, submitter, session_id)
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
                sent = await message(
                    env, submitter, projector, session_id, text, sender, waiting
                )
                await submitter.submit(stream, sent)
                reply = await answer(log, stream, sent.message_id, stop)
                if reply is None:
                    break
                env.out(reply)
        finally:
            if host is not None:
                if not stop.is_set():  # the end of input: let what runs finish
                    await host.settle(60.0)
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
