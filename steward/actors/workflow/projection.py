"""The workflow kind's projection: Alphred's execution tables, rebuilt from
the log.

- ``workflow_runs`` — one row per workflow run: its definition's key,
  version and name, status (checked; a terminal one has ``completed_at``),
  inputs, the node in flight and the reason it ended.
- ``run_nodes`` — one row per node attempt, materialized as the run goes:
  every node pending at attempt 1 when the run is created, a new row when a
  loop backtrack requeues a node (its next attempt). ``sequence_index``
  orders the rows; ``(workflow_id, node_key, attempt)`` is unique; the
  status is one of the phase states, or ``cancelled`` for the attempt in
  flight when the run was cancelled (checked; it stays so when its run
  answers failed, as a cancelled run does), with its tries, their runs, the
  context manifest of the last (what it was handed) and its times.
- ``routing_decisions`` — the typed routing outcome of each completed phase
  that routing read one from (Alphred's): its decision (``approved``,
  ``changes_requested``, ``blocked`` or ``retry``) and the metadata key it
  came from; or ``no_route`` (no key) for a phase that gave no decision and
  whose edges none matched, so the run completed without a route. A phase
  with no decision that an edge routed (an ``auto`` one, or a guard on its
  report), or that has no edges, has no row.
- ``phase_artifacts`` — each completed phase's report (``text``, or ``json``
  when it is a JSON object) with its structured metadata.
- ``run_node_diagnostics`` — one immutable row per node attempt once it
  ends for good (completed; failed past its retries or in a cancelled run):
  its outcome, tries, what it was handed (the context manifest: reports,
  characters, truncations, dropped predecessors) and its times.
- ``run_node_stream_events`` — the provider stream events of each node
  attempt's model calls, when the model records them (``[models.<name>]
  record_stream``): ``sequence`` counts 1, 2, ... without gaps per node
  attempt across its calls and their attempts; the type is one of the
  normalized ones (checked); the payload is cut to `STREAM_PAYLOAD_CHARS`.
"""

from __future__ import annotations

import json
import sqlite3

import msgspec

from steward import events
from steward.actors.workflow import events as workflow_events
from steward.events import Recorded
from steward.projections.projection import Projection

_CREATED = msgspec.json.Decoder(workflow_events.WorkflowCreated)
"""The workflow's opening event, as ``workflow_runs.definition`` holds it."""

__all__ = ["STREAM_PAYLOAD_CHARS", "WORKFLOWS"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS workflow_runs (
    workflow_id TEXT PRIMARY KEY, tree_key TEXT NOT NULL, version INTEGER NOT NULL,
    name TEXT NOT NULL, file TEXT, inputs TEXT NOT NULL, definition TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled')),
    current_node TEXT, phases INTEGER NOT NULL DEFAULT 0, reason TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, completed_at REAL,
    CHECK (status NOT IN ('completed', 'failed', 'cancelled')
        OR completed_at IS NOT NULL)
);
CREATE TABLE IF NOT EXISTS run_nodes (
    workflow_id TEXT NOT NULL, sequence_index INTEGER NOT NULL,
    node_key TEXT NOT NULL, attempt INTEGER NOT NULL CHECK (attempt >= 1),
    status TEXT NOT NULL CHECK (status IN
        ('pending', 'running', 'completed', 'failed', 'skipped', 'cancelled')),
    tries INTEGER NOT NULL DEFAULT 0 CHECK (tries >= 0), run_id TEXT,
    run_ids TEXT NOT NULL DEFAULT '[]', manifest TEXT NOT NULL DEFAULT '{}',
    started_at REAL, completed_at REAL, created_at REAL NOT NULL,
    PRIMARY KEY (workflow_id, sequence_index),
    UNIQUE (workflow_id, node_key, attempt)
);
CREATE INDEX IF NOT EXISTS run_nodes_status ON run_nodes (workflow_id, status);
CREATE TABLE IF NOT EXISTS routing_decisions (
    workflow_id TEXT NOT NULL, node_key TEXT NOT NULL, attempt INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    decision_type TEXT NOT NULL CHECK (decision_type IN
        ('approved', 'changes_requested', 'blocked', 'retry', 'no_route')),
    source TEXT, created_at REAL NOT NULL,
    PRIMARY KEY (workflow_id, node_key, attempt)
);
CREATE INDEX IF NOT EXISTS routing_decisions_time
    ON routing_decisions (workflow_id, created_at);
CREATE TABLE IF NOT EXISTS phase_artifacts (
    workflow_id TEXT NOT NULL, node_key TEXT NOT NULL, attempt INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    artifact_type TEXT NOT NULL CHECK (artifact_type IN ('report')),
    content_type TEXT NOT NULL CHECK (content_type IN ('text', 'json')),
    content TEXT NOT NULL, metadata TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (workflow_id, node_key, attempt)
);
CREATE INDEX IF NOT EXISTS phase_artifacts_time
    ON phase_artifacts (workflow_id, created_at);
CREATE TABLE IF NOT EXISTS run_node_diagnostics (
    workflow_id TEXT NOT NULL, node_key TEXT NOT NULL, attempt INTEGER NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('completed', 'failed')),
    tries INTEGER NOT NULL CHECK (tries >= 1), run_ids TEXT NOT NULL,
    decision TEXT, report_chars INTEGER NOT NULL CHECK (report_chars >= 0),
    upstream TEXT NOT NULL, upstream_chars INTEGER NOT NULL
        CHECK (upstream_chars >= 0),
    truncated INTEGER NOT NULL CHECK (truncated >= 0),
    dropped TEXT NOT NULL, started_at REAL, completed_at REAL NOT NULL,
    PRIMARY KEY (workflow_id, node_key, attempt)
);
CREATE INDEX IF NOT EXISTS run_node_diagnostics_time
    ON run_node_diagnostics (workflow_id, completed_at);
CREATE INDEX IF NOT EXISTS run_nodes_run ON run_nodes (run_id);
CREATE TABLE IF NOT EXISTS run_node_stream_events (
    workflow_id TEXT NOT NULL, node_key TEXT NOT NULL, attempt INTEGER NOT NULL,
    sequence INTEGER NOT NULL CHECK (sequence >= 1), run_id TEXT NOT NULL,
    request_id TEXT NOT NULL, call_attempt INTEGER NOT NULL,
    event_type TEXT NOT NULL CHECK (event_type IN
        ('system', 'assistant', 'tool_use', 'tool_result', 'usage', 'result')),
    payload TEXT NOT NULL, size INTEGER NOT NULL CHECK (size >= 0),
    tokens INTEGER NOT NULL CHECK (tokens >= 0), created_at REAL NOT NULL,
    PRIMARY KEY (workflow_id, node_key, attempt, sequence)
);
"""

STREAM_PAYLOAD_CHARS = 4_000
"""Characters of a stream event kept in ``run_node_stream_events``."""

_NODE = "workflow_id=? AND node_key=? AND attempt=?"


def _apply(conn: sqlite3.Connection, rec: Recorded) -> None:
    if isinstance(rec.event, events.LlmStreamRecorded):
        _stream_events(conn, rec, rec.event)  # a phase's run's, or nobody's
        return
    workflow_id = rec.stream.partition(".")[2]
    event = rec.event
    match event:
        case workflow_events.WorkflowCreated(definition=defn):
            conn.execute(
                "INSERT OR REPLACE INTO workflow_runs (workflow_id, tree_key, "
                "version, name, file, inputs, definition, status, created_at, "
                "updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    workflow_id,
                    defn.key,
                    defn.version,
                    defn.name,
                    event.file,
                    json.dumps(event.inputs, sort_keys=True),
                    events.to_json(event).decode(),
                    "pending",
                    rec.at,
                    rec.at,
                ),
            )
            for n, node in enumerate(defn.nodes):
                _node_row(conn, workflow_id, n, node.key, 1, rec.at)
        case workflow_events.WorkflowStarted() | workflow_events.WorkflowResumed():
            _status(conn, workflow_id, "running")
        case workflow_events.WorkflowPaused():
            _status(conn, workflow_id, "paused")
        case workflow_events.WorkflowCompleted(last=last):
            _end(conn, workflow_id, "completed", None, rec.at)
            _no_route(conn, workflow_id, last)
        case workflow_events.WorkflowFailed(reason=reason):
            _end(conn, workflow_id, "failed", reason, rec.at)
        case workflow_events.WorkflowCancelled(reason=reason):
            _end(conn, workflow_id, "cancelled", reason, rec.at)
            # the attempt in flight is cancelled (its run answers later, if a
            # host delivers the cancel)
            conn.execute(
                "UPDATE run_nodes SET status='cancelled', completed_at=? "
                "WHERE workflow_id=? AND status='running'",
                (rec.at, workflow_id),
            )
            conn.execute(
                "UPDATE workflow_runs SET current_node=NULL WHERE workflow_id=?",
                (workflow_id,),
            )
            # an attempt that failed while paused, its retry never taken
            failed = conn.execute(
                "SELECT node_key, attempt FROM run_nodes WHERE workflow_id=? AND "
                "status='failed'",
                (workflow_id,),
            ).fetchall()
            for node, attempt in failed:
                _diagnostics(conn, rec, node, attempt, "failed")
        case workflow_events.PhaseStarted(node=node, attempt=attempt, run_id=run_id):
            where = (workflow_id, node, attempt)
            (run_ids,) = conn.execute(
                f"SELECT run_ids FROM run_nodes WHERE {_NODE}", where
            ).fetchone()
            manifest = {
                "upstream": msgspec.to_builtins(event.upstream),
                "dropped": list(event.dropped),
            }
            conn.execute(
                "UPDATE run_nodes SET status='running', tries=tries+1, run_id=?, "
                "run_ids=?, manifest=?, started_at=COALESCE(started_at, ?) "
                f"WHERE {_NODE}",
                (
                    run_id,
                    json.dumps([*json.loads(run_ids), run_id]),
                    json.dumps(manifest, sort_keys=True),
                    rec.at,
                    *where,
                ),
            )
            conn.execute(
                "UPDATE workflow_runs SET current_node=?, phases=phases+1 "
                "WHERE workflow_id=?",
                (node, workflow_id),
            )
        case workflow_events.PhaseCompleted() as done:
            _node_status(
                conn, workflow_id, done.node, done.attempt, "completed", rec.at
            )
            if done.decision != "no_route":  # none: a row only if no edge matches
                conn.execute(
                    "INSERT OR REPLACE INTO routing_decisions VALUES (?,?,?,?,?,?,?)",
                    (
                        workflow_id,
                        done.node,
                        done.attempt,
                        done.run_id,
                        done.decision,
                        done.decision_source,
                        rec.at,
                    ),
                )
            conn.execute(
                "INSERT OR REPLACE INTO phase_artifacts VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    workflow_id,
                    done.node,
                    done.attempt,
                    done.run_id,
                    "report",
                    _content_type(done.report),
                    done.report,
                    json.dumps(done.metadata, sort_keys=True),
                    rec.at,
                ),
            )
            _diagnostics(conn, rec, done.node, done.attempt, "completed")
        case workflow_events.PhaseFailed(node=node, attempt=attempt, retry=retry):
            # a cancelled attempt's run answers failed: it stays cancelled
            _node_status(
                conn, workflow_id, node, attempt, "failed", rec.at, keep="cancelled"
            )
            if _failed_for_good(conn, workflow_id, node, retry):
                _diagnostics(conn, rec, node, attempt, "failed")
        case workflow_events.PhaseRequeued(node=node, attempt=attempt):
            row = conn.execute(
                "SELECT status FROM run_nodes WHERE workflow_id=? AND node_key=? "
                "AND attempt=?",
                (workflow_id, node, attempt),
            ).fetchone()
            if row is not None:  # a skipped node reactivated: the same attempt
                _node_status(conn, workflow_id, node, attempt, "pending", None)
            else:  # a loop backtrack: the node's next attempt
                (last,) = conn.execute(
                    "SELECT MAX(sequence_index) FROM run_nodes WHERE workflow_id=?",
                    (workflow_id,),
                ).fetchone()
                _node_row(conn, workflow_id, last + 1, node, attempt, rec.at)
        case workflow_events.PhaseSkipped(node=node):
            conn.execute(
                "UPDATE run_nodes SET status='skipped' WHERE workflow_id=? AND "
                "node_key=? AND status='pending'",
                (workflow_id, node),
            )
        case _:
            pass
    conn.execute(
        "UPDATE workflow_runs SET updated_at=? WHERE workflow_id=?",
        (rec.at, workflow_id),
    )


def _node_row(
    conn: sqlite3.Connection,
    workflow_id: str,
    seq: int,
    node: str,
    attempt: int,
    at: float,
) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO run_nodes (workflow_id, sequence_index, node_key, "
        "attempt, status, created_at) VALUES (?,?,?,?,'pending',?)",
        (workflow_id, seq, node, attempt, at),
    )


def _node_status(
    conn: sqlite3.Connection,
    workflow_id: str,
    node: str,
    attempt: int,
    status: str,
    at: float | None,
    keep: str | None = None,
) -> None:
    """Node ``node``'s ``attempt`` is ``status`` since ``at``, unless it is
    ``keep`` (then it stays as it is)."""
    conn.execute(
        "UPDATE run_nodes SET status=?, completed_at=? "
        "WHERE workflow_id=? AND node_key=? AND attempt=? AND status IS NOT ?",
        (status, at, workflow_id, node, attempt, keep),
    )
    if status in ("completed", "failed"):
        conn.execute(
            "UPDATE workflow_runs SET current_node=NULL WHERE workflow_id=?",
            (workflow_id,),
        )


def _status(conn: sqlite3.Connection, workflow_id: str, status: str) -> None:
    conn.execute(
        "UPDATE workflow_runs SET status=? WHERE workflow_id=?", (status, workflow_id)
    )


def _end(
    conn: sqlite3.Connection,
    workflow_id: str,
    status: str,
    reason: str | None,
    at: float,
) -> None:
    conn.execute(
        "UPDATE workflow_runs SET status=?, reason=?, completed_at=? "
        "WHERE workflow_id=?",
        (status, reason, at, workflow_id),
    )


def _no_route(conn: sqlite3.Connection, workflow_id: str, node: str) -> None:
    """The ``no_route`` row of ``node``, whose completion ended the run,
    when it gave no routing decision and has edges (none of which matched);
    a node with none ends a run by design."""
    row = conn.execute(
        "SELECT n.attempt, n.run_id, n.completed_at, d.decision FROM run_nodes n "
        "JOIN run_node_diagnostics d USING (workflow_id, node_key, attempt) "
        "WHERE n.workflow_id=? AND n.node_key=? AND n.status='completed' "
        "ORDER BY n.attempt DESC LIMIT 1",
        (workflow_id, node),
    ).fetchone()
    if row is None or row[3] != "no_route":
        return
    (definition,) = conn.execute(
        "SELECT definition FROM workflow_runs WHERE workflow_id=?", (workflow_id,)
    ).fetchone()
    created = _CREATED.decode(definition)
    if not any(e.source == node for e in created.definition.edges):
        return
    attempt, run_id, completed_at, _ = row
    conn.execute(
        "INSERT OR REPLACE INTO routing_decisions VALUES (?,?,?,?,?,?,?)",
        (workflow_id, node, attempt, run_id, "no_route", None, completed_at),
    )


def _content_type(report: str) -> str:
    if not report.lstrip().startswith("{"):
        return "text"
    try:
        return "json" if isinstance(json.loads(report), dict) else "text"
    except (ValueError, RecursionError):  # any text a model wrote
        return "text"


def _failed_for_good(
    conn: sqlite3.Connection, workflow_id: str, node: str, retry: int
) -> bool:
    """Whether a phase's failed try ``retry`` ends its attempt: no retries
    are left for it, or its run was cancelled."""
    status, definition = conn.execute(
        "SELECT status, definition FROM workflow_runs WHERE workflow_id=?",
        (workflow_id,),
    ).fetchone()
    if status == "cancelled":
        return True
    created = _CREATED.decode(definition)
    limit = next(n.max_retries for n in created.definition.nodes if n.key == node)
    return retry >= limit


def _diagnostics(
    conn: sqlite3.Connection, rec: Recorded, node: str, attempt: int, outcome: str
) -> None:
    """The diagnostics of ``node``'s ``attempt``, which ``rec`` ended."""
    workflow_id = rec.stream.partition(".")[2]
    tries, run_ids, manifest, started_at = conn.execute(
        f"SELECT tries, run_ids, manifest, started_at FROM run_nodes WHERE {_NODE}",
        (workflow_id, node, attempt),
    ).fetchone()
    handed = json.loads(manifest)
    upstream = handed.get("upstream", [])
    event = rec.event
    report = event.report if isinstance(event, workflow_events.PhaseCompleted) else ""
    decision = (
        event.decision if isinstance(event, workflow_events.PhaseCompleted) else None
    )
    conn.execute(
        "INSERT OR IGNORE INTO run_node_diagnostics VALUES "
        "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            workflow_id,
            node,
            attempt,
            outcome,
            max(tries, 1),
            run_ids,
            decision,
            len(report),
            json.dumps([a["node"] for a in upstream]),
            sum(a["included"] for a in upstream),
            sum(1 for a in upstream if a.get("truncated")),
            json.dumps(handed.get("dropped", [])),
            started_at,
            rec.at,
        ),
    )


def _stream_events(
    conn: sqlite3.Connection, rec: Recorded, event: events.LlmStreamRecorded
) -> None:
    """A phase's run's recorded model stream, numbered on from its node
    attempt's last event; a run that is no phase's is passed by."""
    run_id = rec.stream.partition(".")[2]
    node = conn.execute(
        "SELECT workflow_id, node_key, attempt FROM run_nodes WHERE run_id=?",
        (run_id,),
    ).fetchone()
    if node is None:
        return
    (last,) = conn.execute(
        f"SELECT COALESCE(MAX(sequence), 0) FROM run_node_stream_events WHERE {_NODE}",
        node,
    ).fetchone()
    rows = []
    for n, item in enumerate(event.events, start=last + 1):
        payload = json.dumps(item, sort_keys=True, ensure_ascii=False)
        tokens = 0
        if item.get("kind") == "usage":
            tokens = int(item.get("input_tokens", 0)) + int(
                item.get("output_tokens", 0)
            )
        rows.append(
            (
                *node,
                n,
                run_id,
                event.request_id,
                event.attempt,
                item.get("kind"),
                payload[:STREAM_PAYLOAD_CHARS],
                len(payload),
                max(tokens, 0),
                rec.at,
            )
        )
    conn.executemany(
        "INSERT INTO run_node_stream_events VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows
    )


WORKFLOWS = Projection(
    tables=(
        "workflow_runs",
        "run_nodes",
        "routing_decisions",
        "phase_artifacts",
        "run_node_diagnostics",
        "run_node_stream_events",
    ),
    schema=SCHEMA,
    apply=_apply,
    watches=frozenset({events.LlmStreamRecorded}),
)
