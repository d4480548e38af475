"""`steward chat`: a chat with a session, from the terminal or a pipe.

Each line read is a message to session ``cli:<chat id>``; the command waits
for its answer (a command's, or the reply of the turn that took the message)
and prints it. In a terminal, when this process hosts the session, a turn's
reply is printed as the model writes it (of a JSON action, its finish's
output). What the session's subagents and schedules send the chat is printed
as it comes, as ``[NAME] text``. At the end of input it waits (up to 60 s)
for what still runs; on SIGINT or SIGTERM only for the model and
tool calls in flight, as `serve` does, and prints the reply they bring. On
an embedded log nobody hosts, this process hosts it for as long as the chat
lasts; beside a `serve` (or on JetStream, with workers), it records the
messages and reads the answers from the log.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import re
import signal
import sys

from steward.actors.session.chats import answer, message, open_session
from steward.actors.session.events import ReplySent, SubagentAnswered, TurnStarted
from steward.bus import EventLog
from steward.cli.env import EXIT_INTERRUPTED, Env, opened, shown
from steward.cli.hosting import checked_provider, new_host, why_unhosted
from steward.cli.serve import drain
from steward.effects.llm import Provider
from steward.effects.llm.base import RequestInfo
from steward.errors import ConfigError
from steward.events import LlmAttemptFailed, Recorded
from steward.events.codec import encodable_value
from steward.host import Host
from steward.hostlock import HostLock


async def cmd_chat(env: Env, args: argparse.Namespace) -> int:
    provider: Provider | None = None
    unhosted: ConfigError | None = None  # why this process cannot host the log
    try:
        provider = checked_provider(env)  # bad settings fail before a log is made
    except ConfigError as e:
        if not env.distributed and not env.db.exists():
            raise  # no serve can hold a log that is not there: this one would
        unhosted = e  # beside a serve (or workers) no model call is made here
    env.settings.session_settings()
    session_id = f"cli:{args.chat}"
    interactive = sys.stdin.isatty()
    stop, again = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(
            sig, lambda: again.set() if stop.is_set() else stop.set()
        )
    async with opened(env) as (log, projector):
        lock = None if env.distributed else HostLock(env.db)
        host: Host | None = None
        follower: asyncio.Task[None] | None = None
        try:
            if lock is not None and lock.acquire():
                if unhosted is not None:
                    raise unhosted
                host = new_host(env, log, projector, provider=provider)
                await host.start()
            elif (no_host := await why_unhosted(env, log, "this chat")) is not None:
                raise no_host
            submitter = host or Host(log, kinds=env.kinds)
            stream = await open_session(env.settings, submitter, session_id)
            state = (await submitter.state(stream))[0]
            streamed = _Streamed(stream, state.settings.run.protocol == "json")
            if interactive and host is not None:
                host.listen(streamed.on_record)
                host.listen_deltas(streamed.on_delta)
            told = _Told(env, log, stream, (await submitter.state(stream))[1])
            follower = asyncio.create_task(told.follow())
            if interactive:
                env.out(f"chat {session_id}: /help lists the commands; Ctrl-D ends")
            sender = _user()
            unanswered: str | None = None  # the message a signal left waiting
            while True:
                line = await _next_line(interactive, stop)
                if line is None:
                    break
                text = line.strip()  # an empty one is answered with why
                sent = await message(
                    env.settings,
                    submitter,
                    projector,
                    session_id,
                    text,
                    sender,
                )
                since = (await submitter.state(stream))[1]
                await submitter.submit(stream, sent)
                reply = await answer(log, stream, sent.message_id, stop, since)
                if reply is None:
                    unanswered = sent.message_id
                    break
                if (rest := streamed.finish(reply)) is not None:
                    env.out(rest)
            if host is not None and stop.is_set():
                await drain(env, host, again)  # a signal: let the calls finish
                if unanswered is not None:  # its reply, if the calls brought it
                    reply = await answer(log, stream, unanswered, stop, since)
                    if reply is not None and (rest := streamed.finish(reply)):
                        env.out(rest)
            elif host is not None:
                await host.settle(60.0)  # the end of input: let what runs finish
            await _cancelled(follower)
            await told.tell()  # what the last of it sent
        finally:
            await _cancelled(follower)
            if host is not None:
                await host.stop()
            if lock is not None:
                lock.release()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    return EXIT_INTERRUPTED if stop.is_set() else 0


async def _cancelled(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _Told:
    """What the session's subagents send the chat, printed as it comes."""

    def __init__(self, env: Env, log: EventLog, stream: str, seen: int) -> None:
        self.env, self.log, self.stream, self.seen = env, log, stream, seen

    async def tell(self) -> None:
        for rec in await self.log.read(self.stream, self.seen + 1):
            self.seen = rec.version
            if isinstance(rec.event, SubagentAnswered) and not rec.event.silent:
                self.env.out(f"[{rec.event.name}] {rec.event.text}")

    async def follow(self) -> None:
        while True:
            await self.tell()
            await asyncio.sleep(0.1)


class _Streamed:
    """The replies of this chat's turns, written as the model writes them:
    a turn's run's calls, or the session's own call in a direct chat. Each
    call's text is a line of its own (a tool round's text, then the reply's).
    """

    def __init__(self, stream: str, json_actions: bool) -> None:
        self.stream = stream
        self.json_actions = json_actions  # a turn's model answers in JSON actions
        self.turns: set[str] = set()
        self.request: str | None = None  # the call whose text the line holds
        self.raw = ""  # ... what the model wrote of it so far
        self.text = ""  # ... and what of that is printed

    def on_record(self, rec: Recorded) -> None:
        match rec.event:
            case TurnStarted(run_id=turn) if rec.stream == self.stream:
                self.turns.add(turn)
            case ReplySent(run_id=turn) if rec.stream == self.stream:
                self.turns.discard(turn)
            case LlmAttemptFailed(request_id=rid) if rid == self.request:
                self._end_line()  # its retry starts a line of its own
            case _:
                pass

    def on_delta(self, info: RequestInfo, text: str) -> None:
        direct = info.request_id.removesuffix("/llm") in self.turns
        if info.actor_id not in self.turns and not direct:
            return
        if info.request_id != self.request:
            self._end_line()
            self.request = info.request_id
        self.raw += text
        shown = _printable(
            finishing(self.raw) if self.json_actions and not direct else self.raw
        )
        if len(shown) > len(self.text) and shown.startswith(self.text):
            sys.stdout.write(shown[len(self.text) :])
            sys.stdout.flush()
            self.text = shown

    def finish(self, reply: str) -> str | None:
        """What is still to print of ``reply`` once the session records it:
        ``None`` when its text was streamed whole."""
        streamed = self.text
        self._end_line()
        whole = streamed and streamed.strip() == _printable(reply).strip()
        return None if whole else reply

    def _end_line(self) -> None:
        if self.text:
            sys.stdout.write("\n")
            sys.stdout.flush()
        self.request, self.raw, self.text = None, "", ""


_FINISH = re.compile(r'"type"\s*:\s*"finish"')
_OUTPUT = re.compile(r'"output"\s*:\s*"')


def finishing(text: str) -> str:
    """What is written so far of the ``output`` string of JSON action
    ``text``, itself still being written; "" until it shows to be a finish.

    Only whole escapes are decoded, so each result begins with the one
    before it.
    """
    output = _OUTPUT.search(text)
    if output is None or _FINISH.search(text) is None:
        return ""
    start = end = output.end()
    while end < len(text) and text[end] != '"':
        if text[end] != "\\":
            end += 1
        elif end + 1 < len(text) and text[end + 1] != "u":
            end += 2
        elif end + 5 < len(text):
            end += 6
        else:
            break  # an escape not yet whole
    try:
        value = json.loads(f'"{text[start:end]}"')
    except json.JSONDecodeError:  # a control character, a bad escape
        return ""
    return value if isinstance(value, str) else ""


def _printable(text: str) -> str:
    """``text`` less a last half of a surrogate pair, or a carriage return,
    whose rest is still to come, with any other lone surrogate made U+FFFD
    (a terminal takes UTF-8 only) and what else a terminal must not be
    given raw escaped (`shown`)."""
    if text and ("\ud800" <= text[-1] <= "\udbff" or text[-1] == "\r"):
        text = text[:-1]
    return shown(str(encodable_value(text)))


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
