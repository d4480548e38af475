"""The task kind's projection: task programs and their calls.

- ``tasks`` — one row per task (a program, or a subtask): its status
  (``running``, ``completed``, ``failed``), its parent (the stream it
  answers), depth, program file, calls made, tokens used, output, and for a
  failed one the error's kind, limit and message.
- ``task_steps`` — one row per call a task made, in evaluation order: the
  template (or tool) called, its status (``running``, ``COMPLETE``,
  ``FAILED``), its content, turns and tokens, the subtask it spawned last,
  and its times.
"""

from __future__ import annotations

import json
import sqlite3

from steward.actors.task.events import (
    CallFinished,
    CallStarted,
    SubtaskSpawned,
    TaskCompleted,
    TaskCreated,
    TaskFailed,
)
from steward.events import Recorded
from steward.events.protocol import LlmResponded
from steward.projections.projection import Projection

__all__ = ["TASKS"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY, parent TEXT, depth INTEGER NOT NULL,
    source TEXT, program TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    calls INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    output TEXT, error_kind TEXT, error_limit TEXT, error TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_status ON tasks (status, updated_at);
CREATE TABLE IF NOT EXISTS task_steps (
    task_id TEXT NOT NULL, call INTEGER NOT NULL, template TEXT, tool TEXT,
    args TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'COMPLETE', 'FAILED')),
    content TEXT, turns INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    subtask TEXT, limit_reached TEXT,
    started_at REAL NOT NULL, finished_at REAL,
    PRIMARY KEY (task_id, call)
);
"""


def apply(conn: sqlite3.Connection, rec: Recorded) -> None:
    task_id = rec.stream.removeprefix("task.")
    match rec.event:
        case TaskCreated() as e:
            conn.execute(
                "INSERT OR REPLACE INTO tasks (task_id, parent, depth, source, "
                "program, status, created_at, updated_at) "
                "VALUES (?,?,?,?,?, 'running', ?, ?)",
                (
                    task_id,
                    e.reply_to,
                    e.depth,
                    e.source or None,
                    e.program,
                    rec.at,
                    rec.at,
                ),
            )
        case CallStarted() as e:
            conn.execute(
                "INSERT OR REPLACE INTO task_steps (task_id, call, template, tool, "
                "args, status, started_at) VALUES (?,?,?,?,?, 'running', ?)",
                (
                    task_id,
                    e.call,
                    e.template or None,
                    e.tool,
                    json.dumps(e.args, ensure_ascii=False, sort_keys=True),
                    rec.at,
                ),
            )
            conn.execute(
                "UPDATE tasks SET calls=?, updated_at=? WHERE task_id=?",
                (e.call, rec.at, task_id),
            )
        case SubtaskSpawned(call=call, task_id=child):
            conn.execute(
                "UPDATE task_steps SET subtask=? WHERE task_id=? AND call=?",
                (child, task_id, call),
            )
        case LlmResponded(usage=usage):
            conn.execute(
                "UPDATE tasks SET input_tokens=input_tokens+?, "
                "output_tokens=output_tokens+? WHERE task_id=?",
                (usage.input_tokens, usage.output_tokens, task_id),
            )
        case CallFinished() as e:
            conn.execute(
                "UPDATE task_steps SET status=?, content=?, turns=?, input_tokens=?, "
                "output_tokens=?, limit_reached=?, finished_at=? "
                "WHERE task_id=? AND call=?",
                (
                    e.status,
                    e.content,
                    e.turns,
                    e.usage.input_tokens,
                    e.usage.output_tokens,
                    e.limit,
                    rec.at,
                    task_id,
                    e.call,
                ),
            )
        case TaskCompleted(output=output):
            conn.execute(
                "UPDATE tasks SET status='completed', output=?, updated_at=? "
                "WHERE task_id=?",
                (output, rec.at, task_id),
            )
        case TaskFailed(error=error):
            conn.execute(
                "UPDATE tasks SET status='failed', error_kind=?, error_limit=?, "
                "error=?, updated_at=? WHERE task_id=?",
                (error.kind, error.limit, error.message, rec.at, task_id),
            )
            # a call the task's end cut short (a cancel, a subtask refused
            # for depth or a cycle) has no CallFinished: it ended with it
            conn.execute(
                "UPDATE task_steps SET status='FAILED', finished_at=? "
                "WHERE task_id=? AND status='running'",
                (rec.at, task_id),
            )
        case _:
            pass


TASKS = Projection(
    tables=("tasks", "task_steps"),
    schema=SCHEMA,
    apply=apply,
)
"""The task kind's read models."""
