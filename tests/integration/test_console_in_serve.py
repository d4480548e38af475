"""`steward serve` with ``[console] serve = true`` serves the operator
console too, over its own log and projections: a run the serve carried out
is on the list page, completed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support import act, start_run

REPLIES = [{"text": act(type="finish", output="done")}]


def test_serve_serves_the_console(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"per_run": True, "replies": REPLIES}))
    (tmp_path / "steward.toml").write_text(
        "[run]\nplanning_gate = false\n[console]\nserve = true\nport = 0\n"
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "steward", "--script", "s.json", "serve"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        url = ""
        for _ in range(5):
            line = serve.stdout.readline()
            if line.startswith("console: "):
                url = line.split()[1]
                break
        assert url.startswith("http://127.0.0.1:"), line
        run_id = start_run(tmp_path, "hi", "--script", "s.json")
        page = ""
        for _ in range(100):
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.status == 200
                page = response.read().decode()
            if run_id in page and "completed" in page:
                break
            time.sleep(0.1)
        assert run_id in page and "completed" in page
    finally:
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, err
