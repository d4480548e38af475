"""The run kind's projection: the ``runs`` and ``run_steps`` tables, and the
run's rows in ``pending``.

- ``runs`` — one row per run, with the fields Clifford's API reads
  (``id, agent_id, channel_id, user_id, context_id, parent_run_id,
  root_run_id, kind, profile, input_text, input_json, output_text,
  allowed_tools, wake_at, wake_reason, status, created_at, updated_at``) plus
  ``reply_to``, ``reason``, ``iterations`` and token totals.
- ``run_steps`` — one row per recorded event of a run, ordered by ``seq`` (the
  stream version): kind, a one-line summary, tokens, and for answers the
  seconds since their request.
- ``pending`` — a queued run no host has taken yet, its requested but
  unanswered model and tool calls and approvals, its armed timers, and its
  deliveries to other streams (children to create, the result to the stream
  that asked for it, children to cancel). The run kind's pure ``pending``
  (`steward.actors.run.reactor.pending`) says the same of each record,
  but where these rows read the ``runs`` table; a unit test holds the two
  equal on the golden logs.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from steward import events
from steward.actors.effects import WantKind, cancel_key, notify_key, spawn_key, take_key
from steward.actors.run import events as run_events
from steward.actors.run.state import run_id_of
from steward.events import Recorded
from steward.projections.projection import Projection, done, want
from steward.projections.summary import summary

__all__ = ["RUNS", "spent"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    agent_id TEXT, channel_id TEXT, user_id TEXT, context_id TEXT,
    parent_run_id TEXT, root_run_id TEXT, reply_to TEXT, kind TEXT, profile TEXT,
    input_text TEXT, input_json TEXT, output_text TEXT, allowed_tools TEXT,
    wake_at REAL, wake_reason TEXT, status TEXT NOT NULL, reason TEXT,
    iterations INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    cost_usd REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_parent ON runs(parent_run_id);
CREATE INDEX IF NOT EXISTS runs_reply_to ON runs(reply_to);
CREATE INDEX IF NOT EXISTS runs_root ON runs(root_run_id);
CREATE TABLE IF NOT EXISTS run_steps (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    summary TEXT NOT NULL, tokens INTEGER, duration REAL, created_at REAL NOT NULL,
    cost_usd REAL,
    PRIMARY KEY (run_id, seq)
);
"""
_json = msgspec.json.Encoder()


TOKENS = "input_tokens + output_tokens"
"""A run's tokens, in and out, as its row in ``runs`` holds them."""


def spent(stream: str, column: str) -> str:
    """An SQL expression: the sum of ``column`` (an expression over a row of
    ``runs``) over the runs that answer the actor whose stream is
    ``stream`` (an SQL expression: a session's turns and subagents, a
    workflow's phases), their own subagents included."""
    return (
        f"(SELECT COALESCE(SUM({column}), 0) FROM runs WHERE root_run_id IN "
        f"(SELECT id FROM runs WHERE reply_to = {stream}))"
    )


def _apply(conn: sqlite3.Connection, rec: Recorded) -> None:
    run_id = rec.stream[4:]
    event = rec.event
    tokens: int | None = None
    duration: float | None = None
    cost: float | None = None
    match event:
        case run_events.RunCreated():
            conn.execute(
                "INSERT OR REPLACE INTO runs (id, agent_id, channel_id, user_id, "
                "context_id, parent_run_id, root_run_id, reply_to, kind, profile, "
                "input_text, input_json, output_text, allowed_tools, status, "
                "created_at, updated_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'',?,'pending',?,?)",
                (
                    run_id,
                    event.agent_id,
                    event.channel_id,
                    event.user_id,
                    event.context_id,
                    event.parent_run_id,
                    event.root_run_id or run_id,
                    event.reply_to,
                    event.kind,
                    event.profile,
                    event.input_text,
                    None
                    if event.input_json is None
                    else _json.encode(event.input_json).decode(),
                    None
                    if event.allowed_tools is None
                    else _json.encode(event.allowed_tools).decode(),
                    rec.at,
                    rec.at,
                ),
            )
            done(conn, spawn_key(run_id))  # the parent's (or creator's) ask
            if event.queued:
                want(conn, take_key(run_id), rec, WantKind.TAKE)
        case run_events.RunTaken():
            done(conn, take_key(run_id))
        case run_events.RunStarted() | run_events.RunResumed():
            _status(conn, run_id, rec, "running", wake_at=None, wake_reason=None)
            if isinstance(event, run_events.RunResumed):
                conn.execute(
                    "DELETE FROM pending WHERE stream=? AND kind='timer'", (rec.stream,)
                )
        case events.LlmRequested(request_id=rid):
            conn.execute(
                "UPDATE runs SET iterations=? WHERE id=?", (event.iteration, run_id)
            )
            want(conn, rid, rec, WantKind.LLM)
        case events.LlmResponded(request_id=rid) | events.LlmFailed(request_id=rid):
            duration = done(conn, rid, rec.at)
            usage = event.usage
            if (
                isinstance(event, events.LlmResponded)
                or event.cost_usd
                or usage.input_tokens
                or usage.output_tokens
            ):
                tokens = usage.input_tokens + usage.output_tokens
                cost = event.cost_usd
                conn.execute(
                    "UPDATE runs SET input_tokens=input_tokens+?, "
                    "output_tokens=output_tokens+?, cost_usd=cost_usd+? WHERE id=?",
                    (usage.input_tokens, usage.output_tokens, cost, run_id),
                )
        case events.ToolRequested(request_id=rid):
            done(conn, rid)  # an approved call: its approval row is answered
            want(conn, rid, rec, WantKind.TOOL)
        case (
            run_events.ApprovalRequested(request_id=rid)
            | run_events.BudgetExceeded(request_id=rid, policy="pause")
        ):
            want(conn, rid, rec, WantKind.APPROVAL)
            _status(conn, run_id, rec, "waiting")
        case (
            run_events.ApprovalDecided(request_id=rid)
            | events.ToolResulted(request_id=rid)
        ):
            if isinstance(event, events.ToolResulted):
                duration = done(conn, rid, rec.at)
            else:
                done(conn, rid)
        case run_events.OutputUpdated():
            conn.execute(
                "UPDATE runs SET output_text = CASE WHEN ?='append' "
                "THEN output_text || ? ELSE ? END, updated_at=? WHERE id=?",
                (event.mode, event.text, event.text, rec.at, run_id),
            )
        case run_events.SubagentsSpawned(children=children):
            for child in children:
                want(conn, spawn_key(child.run_id), rec, WantKind.SPAWN)
            _status(conn, run_id, rec, "waiting")
        case events.ChildFinished(stream=child):
            done(conn, notify_key(run_id_of(child)))
            # a finished child needs no creating (a fork copies its result)
            done(conn, spawn_key(run_id_of(child)))
        case run_events.RunSlept():
            want(conn, event.timer_id, rec, WantKind.TIMER, due_at=event.wake_at)
            _status(
                conn,
                run_id,
                rec,
                "waiting",
                wake_at=event.wake_at,
                wake_reason=event.reason or (event.cron and f"cron {event.cron}"),
            )
        case events.WakeDue(timer_id=tid):
            done(conn, tid)
        case (
            run_events.RunCompleted()
            | run_events.RunFailed()
            | run_events.RunCancelled()
        ):
            status = {
                run_events.RunCompleted: "completed",
                run_events.RunFailed: "failed",
                run_events.RunCancelled: "cancelled",
            }[type(event)]
            conn.execute(
                "DELETE FROM pending WHERE stream=? AND kind IN "
                "('take','llm','tool','approval','timer','spawn')",
                (rec.stream,),
            )
            done(conn, cancel_key(run_id))
            if isinstance(event, run_events.RunCompleted):
                reason = None if event.reason == "finish" else event.reason
                conn.execute(
                    "UPDATE runs SET output_text=?, reason=? WHERE id=?",
                    (event.output, reason, run_id),
                )
            else:
                conn.execute(
                    "UPDATE runs SET reason=? WHERE id=?", (event.reason, run_id)
                )
            _status(conn, run_id, rec, status, wake_at=None, wake_reason=None)
            row = conn.execute(
                "SELECT parent_run_id, reply_to FROM runs WHERE id=?", (run_id,)
            ).fetchone()
            if row and (row[0] or row[1]):
                want(conn, notify_key(run_id), rec, WantKind.DELIVER)
            if isinstance(event, run_events.RunCancelled):
                for child_id in event.children:
                    want(conn, cancel_key(child_id), rec, WantKind.DELIVER)
        case _:
            pass
    conn.execute(
        "INSERT OR REPLACE INTO run_steps VALUES (?,?,?,?,?,?,?,?)",
        (
            run_id,
            rec.version,
            events.type_name(event),
            summary(event),
            tokens,
            duration,
            rec.at,
            cost,
        ),
    )


def _status(
    conn: sqlite3.Connection, run_id: str, rec: Recorded, status: str, **extra: Any
) -> None:
    sets = ", ".join(f"{k}=?" for k in extra)
    conn.execute(
        f"UPDATE runs SET status=?, updated_at=?{', ' + sets if sets else ''} "
        "WHERE id=?",
        (status, rec.at, *extra.values(), run_id),
    )


RUNS = Projection(
    tables=("runs", "run_steps"),
    schema=SCHEMA,
    apply=_apply,
    keeps_pending=True,
)
