"""The session kind's commands on the command line (chat and sessions): their grammar,
each command's function imported from its module when it runs."""

from __future__ import annotations

import argparse

from steward.cli.grammar import (
    an_id,
    command,
    list_command,
    output_option,
    positive,
)

cmd_chat = command("steward.actors.session.chat", "cmd_chat")
cmd_sessions_send = command("steward.actors.session.cli", "cmd_sessions_send")
cmd_sessions_show = command("steward.actors.session.cli", "cmd_sessions_show")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the kind's commands to ``sub``, the ``steward`` command's."""
    s = sub.add_parser(
        "chat",
        help="chat with a session: each line a message, each answer printed",
        description="Chat with session cli:ID. Each line is a message; "
        "commands (/new /model /models /memory /status /help) are answered at "
        "once, other messages after the debounce quiet time ([session] "
        "debounce_ms) by a turn (a run, or one model call in a chat of "
        "[session] direct_chats); in a terminal the reply is printed as the "
        "model writes it. What subagents and schedules send the chat is "
        "printed as [NAME] text. When standard input is not a terminal, "
        "one message per line, each answer printed, exit 0 at the end of input: "
        "`printf 'hello\\n/status\\n' | steward --script s.yaml chat`. On an "
        "embedded log no `serve` holds, this process hosts it while the chat "
        "lasts (a model must be configured); beside a `serve` it records the "
        "messages and reads the answers from the log (no model of its own "
        "needed). An empty line is answered with why. Ctrl-D ends once what "
        "runs is recorded (up to 60 s); Ctrl-C or SIGTERM stops once the model "
        "calls in flight are recorded and their reply printed (a second Ctrl-C "
        "at once; exit 130). On a log nothing hosts (a nats:// log with no "
        "serve or worker) it says so at once and exits 5.",
    )
    s.add_argument(
        "--chat",
        default="local",
        type=an_id,
        metavar="ID",
        help="the chat id: the session is cli:ID (default: local)",
    )
    s.set_defaults(fn=cmd_chat)

    sessions = sub.add_parser(
        "sessions", help="list or inspect chat sessions, or send one a message"
    )
    ssub = sessions.add_subparsers(
        dest="sessions_command", required=True, metavar="ACTION"
    )
    list_command(ssub, "session", "the sessions, the last active first")
    s = ssub.add_parser(
        "show",
        help="a session's segments, memory, schedules and messages",
        description="A session from the read models: its model, its segments "
        "(each with when it began and the messages it took), "
        "core memory, the memory writer's summary and items (archived ones "
        "marked), its cron schedules with their next firing, and its newest "
        "messages (subagents' answers too) with their segment and run.",
    )
    s.add_argument("id", type=an_id, help="the session id, CHANNEL:CHAT (as cli:local)")
    s.add_argument(
        "--messages",
        type=positive,
        default=40,
        metavar="N",
        help="show the newest N messages (default: 40)",
    )
    output_option(s, listing=False)
    s.set_defaults(fn=cmd_sessions_show)
    s = ssub.add_parser(
        "send",
        help="send a session a message and print its answer (a serve answers)",
        description="Record a message to session ID (opened with the [session] "
        "settings if new) and wait for its answer, which a running `steward "
        "serve` (or `steward chat`) on the log gives: a command's at once, a "
        "turn's after the debounce. Exit 5 when none can come (nothing hosts "
        "the log: said at once) or none came in time; the message stays "
        "recorded.",
    )
    s.add_argument(
        "id", type=an_id, help="the session id, CHANNEL:CHAT (as telegram:42)"
    )
    s.add_argument("text", help="the message")
    s.add_argument("--sender", help="who sends it (for cross-channel context)")
    s.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the answer (default: 120)",
    )
    s.add_argument(
        "--no-wait",
        action="store_true",
        help="print the message id once recorded; do not wait for the answer",
    )
    s.set_defaults(fn=cmd_sessions_send)
