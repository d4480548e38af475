"""The metrics as an operator's Prometheus sees them: a real Prometheus
(Debian's package) with the shipped scrape configuration and rules scrapes
a running `steward serve` while scripted runs go through it; its query API
says the counters and histograms moved by what the runs did, an alert fires
when its condition is made true, and every query of the shipped Grafana
dashboard runs. `promtool` checks the shipped files."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import nats as nats_py
import pytest
import yaml
from mcp_support import free_port
from support import act, steward_process, stop_all

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("prometheus") is None or shutil.which("promtool") is None,
        reason="Debian's prometheus package is not installed "
        "(apt-get install prometheus; .ci/run installs it)",
    ),
]

DEPLOY = Path(__file__).parents[2] / "deploy"
OK_RUNS = 4
FAILED_RUNS = 2
"""Runs that answer (two model calls and a tool call each), and runs whose
one model call fails."""


def test_promtool_passes_the_shipped_files() -> None:
    for check, file in (
        ("rules", DEPLOY / "prometheus/rules.yml"),
        ("config", DEPLOY / "prometheus/prometheus.yml"),
    ):
        done = subprocess.run(
            ["promtool", "check", check, str(file)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def _settings(tmp: Path, log: str) -> None:
    """Two model tables: one that answers (a tool call, then the answer),
    one whose every call fails."""
    answers = [
        {"text": act(type="tool_call", name="files.list", args={"path": "."})},
        {"text": act(type="finish", output="listed")},
    ]
    (tmp / "ok.json").write_text(json.dumps({"per_run": True, "replies": answers}))
    failure = {"kind": "transport", "message": "connection reset", "retryable": False}
    (tmp / "flaky.json").write_text(
        json.dumps({"per_run": True, "replies": [{"error": failure}]})
    )
    (tmp / "steward.toml").write_text(
        f"""
[log]
url = "{log}"
[run]
planning_gate = false
[models.default]
provider = "scripted"
script = "ok.json"
[models.flaky]
provider = "scripted"
script = "flaky.json"
[agents.flaky]
model = "flaky"
[channels]
web = "default"
"""
    )


def _prometheus_config(tmp: Path, ports: dict[str, list[int]]) -> Path:
    """The shipped configuration and rules, its targets of each process
    (serve, worker) those on ``ports``, scraped every second; the rules'
    ``for`` durations made 0s, so an alert fires as soon as its expression
    holds (what the test checks is the expression)."""
    config = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (job,) = config["scrape_configs"]
    for static in job["static_configs"]:  # the shipped labels, our ports
        static["targets"] = [
            f"127.0.0.1:{p}" for p in ports[static["labels"]["process"]]
        ]
    rules = yaml.safe_load((DEPLOY / "prometheus/rules.yml").read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    (tmp / "rules.yml").write_text(yaml.safe_dump(rules))
    config["rule_files"] = [str(tmp / "rules.yml")]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class Prometheus:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
            said = json.loads(r.read())
        assert said["status"] == "success", said
        return said["data"]

    def value(self, expr: str) -> float:
        """The query's one value (0 when it selects nothing)."""
        found = self.get("/api/v1/query", query=expr)["result"]
        assert len(found) <= 1, found
        return float(found[0]["value"][1]) if found else 0.0

    def until(self, expr: str, expected: float, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        seen = None
        while time.monotonic() < deadline:
            try:
                seen = self.value(expr)
            except OSError:  # not listening yet
                seen = None
            if seen == expected:
                return
            time.sleep(0.25)
        raise AssertionError(f"{expr} is {seen}, not {expected}")


@pytest.fixture
def scraped(tmp_path: Path, nats: Any) -> Any:
    """`steward serve` and two `steward worker`s sharing a JetStream log,
    each with its metrics endpoint, and a Prometheus scraping them with the
    shipped configuration; the workers' processes, to stop."""
    _settings(tmp_path, nats.url)
    ports = {"serve": [free_port()], "worker": [free_port(), free_port()]}
    hosts = [
        steward_process(tmp_path, "serve", "--metrics-port", str(ports["serve"][0]))
    ]
    hosts += [
        steward_process(
            tmp_path,
            "--db",
            str(tmp_path / f"projections-{n}.db"),
            "worker",
            "--metrics-port",
            str(port),
        )
        for n, port in enumerate(ports["worker"])
    ]
    web = free_port()
    config = _prometheus_config(tmp_path, ports)
    prometheus = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield tmp_path, Prometheus(web), nats.url, hosts[1:]
    finally:
        errors = stop_all([*hosts, prometheus])
        print("\n".join(e for e in errors if e))


def _start(tmp: Path, *argv: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steward", "runs", "start", *argv, "--wait", "30"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


async def _inbound(url: str, subject: str) -> Any:
    client = await nats_py.connect(url)
    try:
        said = await client.request(subject, b'{"version": 1, "text": "hi"}', 10)
        return json.loads(said.data)
    finally:
        await client.close()


def test_prometheus_sees_what_the_runs_did(scraped: Any) -> None:
    tmp, prometheus, nats_url, workers = scraped
    prometheus.until('count(up{job="steward"} == 1)', 3)
    # the dashboard's members panel: one serve, two workers
    dashboard = json.loads((DEPLOY / "grafana/steward.json").read_text())
    [panel] = [p for p in dashboard["panels"] if p["title"] == "Live members by role"]
    [members] = [t["expr"] for t in panel["targets"]]
    _by_role(prometheus, members, {"serve": 1.0, "worker": 2.0})
    for n in range(OK_RUNS):
        _start(tmp, f"list the files, {n}")
    for n in range(FAILED_RUNS):
        _start(tmp, f"fail, {n}", "--profile", "flaky")

    # each counted once in the cluster, by the host that carried it out
    prometheus.until(
        'sum(steward_actors_started_total{kind="run"})', OK_RUNS + FAILED_RUNS
    )
    ended = "steward_actors_ended_total"
    prometheus.until(f'sum({ended}{{kind="run",outcome="completed"}})', OK_RUNS)
    prometheus.until(f'sum({ended}{{kind="run",outcome="failed"}})', FAILED_RUNS)
    calls = "steward_model_calls_total"
    prometheus.until(
        f'sum({calls}{{provider="scripted",model="scripted",outcome="ok"}})',
        2 * OK_RUNS,
    )
    prometheus.until(f'sum({calls}{{outcome="transport"}})', FAILED_RUNS)
    tools = 'steward_tool_calls_by_tool_total{tool="files.list",outcome="ok"}'
    prometheus.until(f"sum({tools})", OK_RUNS)
    # the GenAI conventions' histograms, with their attributes
    usage = (
        'gen_ai_client_token_usage_count{gen_ai_operation_name="chat",'
        'gen_ai_provider_name="scripted",gen_ai_request_model="scripted",'
        'gen_ai_token_type="input"}'
    )
    prometheus.until(f"sum({usage})", 2 * OK_RUNS)
    duration = "sum(gen_ai_client_operation_duration_seconds_count)"
    prometheus.until(duration, 2 * OK_RUNS + FAILED_RUNS)
    failed = 'gen_ai_client_operation_duration_seconds_count{error_type="transport"}'
    prometheus.until(f"sum({failed})", FAILED_RUNS)
    waited = 'sum(steward_model_call_wait_seconds_count{priority="interactive"})'
    prometheus.until(waited, 2 * OK_RUNS + FAILED_RUNS)
    prometheus.until('max(steward_projection_lag_events{process="serve"})', 0)
    prometheus.until("count(steward_timers_armed)", 3)  # each host says its own
    # the partitions shared: 16 in all, each held by one member
    prometheus.until("sum(steward_partitions_held)", 16)
    # a message for a channel no profile serves: refused, dead-lettered
    refused = asyncio.run(_inbound(nats_url, "steward.inbound.nowhere"))
    assert refused["error"]["code"] == "unknown_channel", refused
    dead = 'steward_inbound_dead_letters_total{reason="unknown_channel"}'
    prometheus.until(f"sum({dead})", 1)

    # more calls fail, over the rule's 10%: the alert fires. (A counter's
    # first sample is no increase to `rate`, so the failures go on until
    # Prometheus has seen the failure counters grow.)
    firing: list[str] = []
    for n in range(20):
        _start(tmp, f"fail again, {n}", "--profile", "flaky")
        alerts = prometheus.get("/api/v1/alerts")["alerts"]
        firing = [a["labels"]["alertname"] for a in alerts if a["state"] == "firing"]
        if "StewardModelCallErrors" in firing:
            break
    assert "StewardModelCallErrors" in firing
    assert "StewardModelCallsWaiting" not in firing  # nothing waited 30 s

    # every query of the dashboard runs, and names only what steward exports
    names = set(prometheus.get("/api/v1/label/__name__/values"))
    recorded = {
        rule["record"]
        for group in yaml.safe_load((DEPLOY / "prometheus/rules.yml").read_text())[
            "groups"
        ]
        for rule in group["rules"]
        if "record" in rule
    }
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            prometheus.get("/api/v1/query", query=expr)  # no error
            for name in re.findall(r"\b((?:steward|gen_ai)[a-z0-9_:]*)", expr):
                assert name in names or name in recorded, (panel["title"], name)

    # the workers stop: the member count says none is alive, and the alert
    # fires from it (serve still exports the count: not absent())
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(30)
    _by_role(prometheus, members, {"serve": 1.0, "worker": 0.0})
    deadline = time.monotonic() + 60
    while "StewardNoLiveWorkers" not in firing:
        assert time.monotonic() < deadline, firing
        alerts = prometheus.get("/api/v1/alerts")["alerts"]
        firing = [a["labels"]["alertname"] for a in alerts if a["state"] == "firing"]
        time.sleep(0.25)


def _by_role(prometheus: Prometheus, expr: str, expected: dict[str, float]) -> None:
    """Wait until ``expr`` gives ``expected``, a value by ``role``."""
    deadline = time.monotonic() + 60
    seen: dict[str, float] = {}
    while time.monotonic() < deadline:
        try:
            found = prometheus.get("/api/v1/query", query=expr)["result"]
        except OSError:  # not listening yet
            found = []
        seen = {r["metric"].get("role", "?"): float(r["value"][1]) for r in found}
        if seen == expected:
            return
        time.sleep(0.25)
    raise AssertionError(f"{expr} gives {seen}, not {expected}")
