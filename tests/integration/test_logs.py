"""The log lines of `steward serve`: JSON lines when standard error is not
a terminal, each saying the actor it is about, and no secret of the
environment; lines for a person otherwise."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import act, start_run

from steward import logs

REPLIES = [{"text": act(type="finish", output="done")}]


@pytest.mark.parametrize("verbose", [False, True])
def test_serve_writes_json_lines_about_each_actor(
    tmp_path: Path, verbose: bool
) -> None:
    """At info by default: that it started, each actor's end; ``-v`` adds
    steward's debug lines, and no other library's."""
    (tmp_path / "s.json").write_text(json.dumps({"per_run": True, "replies": REPLIES}))
    (tmp_path / "steward.toml").write_text("[run]\nplanning_gate = false\n")
    serve = subprocess.Popen(
        [sys.executable, "-m", "steward", "--script", "s.json"]
        + ["-v"] * verbose
        + ["serve"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert serve.stdout is not None
        serve.stdout.readline()  # "steward serving ...": it hosts the log
        run_id = start_run(tmp_path, "hi", "--script", "s.json")
        for _ in range(200):
            done = subprocess.run(
                [sys.executable, "-m", "steward", "runs", "show", run_id, "-o", "json"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
            )
            if '"completed"' in done.stdout:
                break
            time.sleep(0.1)
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=60)
    lines = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
    assert all({"at", "level", "logger", "message"} <= set(line) for line in lines)
    about = [line for line in lines if line.get("stream") == f"run.{run_id}"]
    assert {"kind": "run", "actor_id": run_id}.items() <= about[-1].items()
    assert about[-1]["message"] == "run completed: LlmResponded"
    assert lines[0]["message"].startswith("serve started on .steward/steward.db")
    assert lines[0]["message"].endswith(f", pid {serve.pid}")
    debug = [line for line in lines if line["level"] == "debug"]
    assert bool(debug) is verbose
    assert all(line["logger"].startswith("steward") for line in debug), debug
    others = [line for line in lines if not line["logger"].startswith("steward")]
    assert all(line["level"] in ("warning", "error") for line in others), others


def test_a_line_names_its_actor_and_no_secret() -> None:
    record = logging.LogRecord("steward.host", logging.INFO, "", 0, "%s", ("x",), None)
    with logs.about("run.r1", request_id="r1/llm/1"):
        logs.Context().filter(record)
    record.msg = "asked with sk-live-abcdef and sk-live-abcdef-2"
    record.args = ()
    secrets = logs.secrets_of(
        {
            "MODEL_API_KEY": "sk-live-abcdef",
            "OTHER_TOKEN": "sk-live-abcdef-2",
            "PATH": "/bin",
        }
    )
    line = json.loads(logs.JsonLines(secrets).format(record))
    assert line["message"] == "asked with [redacted] and [redacted]"
    assert (line["stream"], line["kind"], line["actor_id"], line["request_id"]) == (
        "run.r1",
        "run",
        "r1",
        "r1/llm/1",
    )
    outside = logging.LogRecord("steward.host", logging.INFO, "", 0, "m", (), None)
    logs.Context().filter(outside)
    assert "stream" not in json.loads(logs.JsonLines().format(outside))


def test_a_secret_is_redacted_in_either_form_traceback_and_all() -> None:
    secret = 'p"a\\ss-word1'
    secrets = logs.secrets_of({"DB_PASSWORD": secret})
    try:
        raise RuntimeError(f"refused {secret}")
    except RuntimeError:
        record = logging.LogRecord(
            "steward", logging.ERROR, "", 0, "with %s", (secret,), sys.exc_info()
        )
    line = logs.JsonLines(secrets).format(record)
    assert secret not in json.dumps(json.loads(line)) and secret not in line
    assert json.loads(line)["message"] == "with [redacted]"
    human = logs._Human(secrets).format(record)
    assert secret not in human and "RuntimeError: refused [redacted]" in human
    # a ${VAR} of an [mcp] table is a secret whatever its name
    named = logs.secrets_of({"AUTH": "opensesame"}, any_name=True)
    assert named == ("opensesame",)
