"""Operator commands from other processes reach a running `steward serve`."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from nats_server import free_port
from prometheus_client.parser import text_string_to_metric_families
from support import steward_process

pytestmark = pytest.mark.slow


def _steward(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", "--db", str(tmp / "log.db"), *argv],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _wait_for(tmp: Path, run_id: str, status: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = _steward(tmp, "runs", "show", run_id).stdout
        if shown.split("\n", 1)[0].split()[2:3] == [status]:
            return shown
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never became {status}:\n{shown}")


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples a Prometheus scrape of ``serve`` gets, by name and labels."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_start_and_cancel_reach_a_running_serve(tmp_path: Path) -> None:
    """`runs start` and `runs cancel` from other processes take effect; the
    metrics endpoint counts what serve did."""
    plan = [
        {"json": {"type": "note", "category": "requirements", "content": "r"}},
        {"json": {"type": "note", "category": "plan", "content": "p"}},
    ]
    script = {
        "per_run": True,
        "replies": [
            *plan,
            {"json": {"type": "sleep", "delaySeconds": 3600}},
        ],
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    port = free_port()
    server = steward_process(
        tmp_path,
        "--db",
        str(tmp_path / "log.db"),
        "--script",
        str(tmp_path / "script.json"),
        "serve",
        "--metrics-port",
        str(port),
    )
    try:
        started = _steward(tmp_path, "runs", "start", "nap for an hour")
        assert started.returncode == 0, started.stderr
        run_id = started.stdout.split()[-1]
        _wait_for(tmp_path, run_id, "waiting")
        scraped = _scrape(port)
        assert scraped["steward_runs", (("status", "waiting"),)] == 1
        assert scraped["steward_effects_total", (("kind", "llm"),)] == 3
        assert scraped["steward_effects_total", (("kind", "timer"),)] == 0
        assert scraped["steward_llm_tokens_total", (("kind", "output"),)] > 0

        cancelled = _steward(tmp_path, "runs", "cancel", run_id, "--reason", "enough")
        assert cancelled.returncode == 0, cancelled.stderr
        shown = _wait_for(tmp_path, run_id, "cancelled")
        assert "CancelRequested" in shown and "RunCancelled" in shown
    except AssertionError as e:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=10)
        raise AssertionError(f"{e}\nserve said:\n{err.decode()[-3000:]}") from None
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, err = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    assert server.returncode == 0, err.decode()[-2000:]
    verified = _steward(tmp_path, "replay", run_id, "--verify")
    assert verified.returncode == 0 and "verify: ok" in verified.stdout


def test_a_metrics_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "script.json").write_text('{"replies": []}')
        served = _steward(
            tmp_path,
            "--script",
            str(tmp_path / "script.json"),
            "serve",
            "--metrics-port",
            str(port),
        )
    assert served.returncode != 0
    assert "Traceback" not in served.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in served.stderr


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_metrics_port_that_is_no_port_is_refused(tmp_path: Path, port: str) -> None:
    served = _steward(tmp_path, "serve", f"--metrics-port={port}")
    assert served.returncode == 2
    assert "Traceback" not in served.stderr
    assert "is not a TCP port (0-65535)" in served.stderr
