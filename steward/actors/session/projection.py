"""The session kind's projection: the memory views, rebuilt from the log.

- ``sessions`` — one row per chat session: channel, chat, model, segment,
  counts, core memory (a JSON object) and the last summary.
- ``messages`` — every message of every session, in log order: what people
  sent (``kind`` ``message``), the turns' replies (``reply``), the answers
  to commands (``command``) and to messages not taken (``refused``), and
  subagents' answers (``subagent``, or ``silent`` when not sent), each
  with its segment. The log keeps every one; so does this table, whatever
  ``/new`` or compaction did to the window.
- ``memory_items`` — each session's memory items (archived ones too), as
  the memory writer last left them.
- ``schedules`` — each session's cron schedules and their next firing.
- ``messages_fts`` and ``memory_fts`` — SQLite FTS5 indexes of the
  messages' and items' text, whose rowids are those of ``messages`` and
  ``memory_items``: the archival memory ``memory.search`` reads
  (`search`).

`elsewhere` reads a sender's newest messages in their other chats, for the
process that takes a message (a turn's cross-channel blocks).
"""

from __future__ import annotations

import json
import re
import sqlite3

from steward.actors.session import events as session_events
from steward.events import Recorded
from steward.projections.projection import Projection

__all__ = ["SESSIONS", "elsewhere", "search"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY, channel TEXT NOT NULL, chat_id TEXT NOT NULL,
    model TEXT NOT NULL, segment INTEGER NOT NULL DEFAULT 0,
    messages INTEGER NOT NULL DEFAULT 0, turns INTEGER NOT NULL DEFAULT 0,
    compactions INTEGER NOT NULL DEFAULT 0, memory_items INTEGER NOT NULL DEFAULT 0,
    core_memory TEXT NOT NULL DEFAULT '{}', summary TEXT, forked_from TEXT,
    opened_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    rid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
    segment INTEGER NOT NULL, kind TEXT NOT NULL, role TEXT NOT NULL,
    message_id TEXT, run_id TEXT, sender TEXT, text TEXT NOT NULL, at REAL NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE TABLE IF NOT EXISTS memory_items (
    rid INTEGER PRIMARY KEY, session_id TEXT NOT NULL, id TEXT NOT NULL,
    module TEXT NOT NULL, key TEXT NOT NULL, level INTEGER NOT NULL,
    value TEXT NOT NULL, confidence REAL NOT NULL, seen_at REAL NOT NULL,
    archived INTEGER NOT NULL,
    UNIQUE (session_id, id)
);
CREATE TABLE IF NOT EXISTS schedules (
    session_id TEXT NOT NULL, name TEXT NOT NULL, cron TEXT NOT NULL,
    task TEXT NOT NULL, model TEXT, next_at REAL NOT NULL, fired INTEGER NOT NULL,
    PRIMARY KEY (session_id, name)
);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(text);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(text);
"""


def _apply(conn: sqlite3.Connection, rec: Recorded) -> None:
    session_id = rec.stream.partition(".")[2]
    event = rec.event
    match event:
        case session_events.SessionOpened():
            conn.execute(
                "INSERT OR REPLACE INTO sessions (session_id, channel, chat_id, "
                "model, forked_from, opened_at, updated_at) VALUES (?,?,?,?,?,?,?)",
                (
                    session_id,
                    event.channel,
                    event.chat_id,
                    event.settings.model,
                    event.forked_from,
                    rec.at,
                    rec.at,
                ),
            )
            return
        case session_events.MessageReceived():
            _message(conn, rec, "message", "user", event.text, event.message_id)
            _count(conn, session_id, "messages")
        case session_events.ReplySent():
            _message(conn, rec, "reply", "assistant", event.text, run_id=event.run_id)
            _count(conn, session_id, "turns")
        case session_events.SubagentAnswered(text=text, run_id=run_id, silent=silent):
            kind = "silent" if silent else "subagent"
            _message(conn, rec, kind, "assistant", text, run_id=run_id)
        case session_events.ScheduleCreated(schedule=sched):
            conn.execute(
                "INSERT OR REPLACE INTO schedules VALUES (?,?,?,?,?,?,0)",
                (
                    session_id,
                    sched.name,
                    sched.cron,
                    sched.task,
                    sched.model,
                    sched.due,
                ),
            )
        case session_events.ScheduleFired(name=name, due=due):
            conn.execute(
                "UPDATE schedules SET next_at=?, fired=fired+1 "
                "WHERE session_id=? AND name=?",
                (due, session_id, name),
            )
        case session_events.ScheduleDeleted(name=name):
            conn.execute(
                "DELETE FROM schedules WHERE session_id=? AND name=?",
                (session_id, name),
            )
        case session_events.CommandAnswered():
            _message(conn, rec, "command", "assistant", event.reply, event.message_id)
        case session_events.MessageRefused():
            _message(conn, rec, "refused", "assistant", event.reply, event.message_id)
        case session_events.SegmentStarted(segment=segment):
            conn.execute(
                "UPDATE sessions SET segment=?, summary=NULL WHERE session_id=?",
                (segment, session_id),
            )
        case session_events.ModelSwitched(model=model):
            conn.execute(
                "UPDATE sessions SET model=? WHERE session_id=?", (model, session_id)
            )
        case session_events.CoreMemoryChanged(key=key, value=value):
            _core_memory(conn, session_id, key, value)
        case session_events.ContextCompacted():
            _count(conn, session_id, "compactions")
        case session_events.MemoryWritten(items=items, summary=summary):
            _memory(conn, session_id, items)
            if summary:
                conn.execute(
                    "UPDATE sessions SET summary=? WHERE session_id=?",
                    (summary, session_id),
                )
        case _:
            pass
    conn.execute(
        "UPDATE sessions SET updated_at=? WHERE session_id=?", (rec.at, session_id)
    )


def _message(
    conn: sqlite3.Connection,
    rec: Recorded,
    kind: str,
    role: str,
    text: str,
    message_id: str | None = None,
    run_id: str | None = None,
) -> None:
    session_id = rec.stream.partition(".")[2]
    row = conn.execute(
        "SELECT segment FROM sessions WHERE session_id=?", (session_id,)
    ).fetchone()
    sender = getattr(rec.event, "sender", None)
    cursor = conn.execute(
        "INSERT OR REPLACE INTO messages (session_id, seq, segment, kind, role, "
        "message_id, run_id, sender, text, at) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            session_id,
            rec.version,
            row[0] if row else 0,
            kind,
            role,
            message_id,
            run_id,
            sender,
            text,
            rec.at,
        ),
    )
    conn.execute(
        "INSERT OR REPLACE INTO messages_fts (rowid, text) VALUES (?,?)",
        (cursor.lastrowid, text),
    )


def _count(conn: sqlite3.Connection, session_id: str, column: str) -> None:
    conn.execute(
        f"UPDATE sessions SET {column}={column}+1 WHERE session_id=?", (session_id,)
    )


def _core_memory(
    conn: sqlite3.Connection, session_id: str, key: str, value: str | None
) -> None:
    row = conn.execute(
        "SELECT core_memory FROM sessions WHERE session_id=?", (session_id,)
    ).fetchone()
    core: dict[str, str] = json.loads(row[0]) if row else {}
    if value is None:
        core.pop(key, None)
    else:
        core[key] = value
    conn.execute(
        "UPDATE sessions SET core_memory=? WHERE session_id=?",
        (json.dumps(core, ensure_ascii=False), session_id),
    )


def _memory(
    conn: sqlite3.Connection,
    session_id: str,
    items: tuple[session_events.MemoryItem, ...],
) -> None:
    """The session's memory items replaced by ``items``, and their index."""
    old = conn.execute(
        "SELECT rid FROM memory_items WHERE session_id=?", (session_id,)
    ).fetchall()
    conn.executemany("DELETE FROM memory_fts WHERE rowid=?", old)
    conn.execute("DELETE FROM memory_items WHERE session_id=?", (session_id,))
    for item in items:
        cursor = conn.execute(
            "INSERT INTO memory_items (session_id, id, module, key, level, value, "
            "confidence, seen_at, archived) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                session_id,
                item.id,
                item.module,
                item.key,
                item.level,
                item.value,
                item.confidence,
                item.seen_at,
                int(item.archived),
            ),
        )
        conn.execute(
            "INSERT INTO memory_fts (rowid, text) VALUES (?,?)",
            (cursor.lastrowid, f"{item.module} {item.key} {item.value}"),
        )
    conn.execute(
        "UPDATE sessions SET memory_items=? WHERE session_id=?",
        (len(items), session_id),
    )


SESSIONS = Projection(
    tables=(
        "sessions",
        "messages",
        "memory_items",
        "schedules",
        "messages_fts",
        "memory_fts",
    ),
    schema=SCHEMA,
    apply=_apply,
)

_WORD = re.compile(r"\w+")


def search(
    conn: sqlite3.Connection, session_id: str, query: str, limit: int = 10
) -> list[tuple[str, str, float]]:
    """The archival memory of session ``session_id`` that best matches
    ``query``: (source, text, rank) for memory items (``memory m3
    identity.name``) and messages (``message 12 user``), best first. The
    query's words are matched each on its own (any of them), so no text a
    person or model writes is FTS syntax."""
    words = _WORD.findall(query)
    if not words:
        return []
    match = " OR ".join('"' + w.replace('"', "") + '"' for w in words[:32])
    hits = conn.execute(
        "SELECT 'memory ' || i.id || ' ' || i.module || '.' || i.key, i.value, "
        "f.rank FROM memory_fts f JOIN memory_items i ON i.rid = f.rowid "
        "WHERE memory_fts MATCH ? AND i.session_id = ? "
        "ORDER BY f.rank LIMIT ?",
        (match, session_id, limit),
    ).fetchall()
    hits += conn.execute(
        "SELECT 'message ' || m.seq || ' ' || m.role, m.text, f.rank "
        "FROM messages_fts f JOIN messages m ON m.rid = f.rowid "
        "WHERE messages_fts MATCH ? AND m.session_id = ? AND m.kind IN "
        "('message', 'reply', 'subagent', 'silent') ORDER BY f.rank LIMIT ?",
        (match, session_id, limit),
    ).fetchall()
    hits.sort(key=lambda hit: hit[2])
    return [(str(a), str(b), float(c)) for a, b, c in hits[:limit]]


def elsewhere(
    conn: sqlite3.Connection, sender: str, session_id: str, limit: int
) -> tuple[session_events.Elsewhere, ...]:
    """The newest ``limit`` messages and replies of the chats other than
    ``session_id`` that ``sender`` wrote in, oldest first, each cut to 2000
    characters. Forks (`SessionOpened.forked_from`) are not such chats, nor
    is the session ``session_id`` is a fork of: their messages are copies,
    or an operator's."""
    rows = conn.execute(
        "SELECT session_id, role, text FROM messages WHERE session_id IN "
        "(SELECT DISTINCT m.session_id FROM messages m JOIN sessions s "
        "USING (session_id) WHERE m.sender=? AND m.session_id != ? AND "
        "s.forked_from IS NULL AND m.session_id != coalesce((SELECT forked_from "
        "FROM sessions WHERE session_id=?), '')) AND kind IN ('message', 'reply') "
        "ORDER BY at DESC, rid DESC LIMIT ?",
        (sender, session_id, session_id, limit),
    ).fetchall()
    return tuple(
        session_events.Elsewhere(session_id=s, role=r, text=t[:2000])
        for s, r, t in reversed(rows)
    )
