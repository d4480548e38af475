"""The deployment files are what the tests run: every steward command in
the compose file, the Kubernetes manifests and the systemd unit parses as
the command line takes it and is the `serve` or `worker` the Prometheus
test scrapes; the compose file's mounts exist and Prometheus scrapes its
services; the image installs steward."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from steward.cli.parser import build_parser
from steward.kinds import KINDS

DEPLOY = Path(__file__).parents[2] / "deploy"
METRICS = ["--metrics-port", "9464"]


def _command(argv: list[str]) -> str:
    """The function a command line runs (`cmd_serve`, ...)."""
    return str(build_parser(KINDS).parse_args(argv).fn.__name__)


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose/compose.yaml").read_text()))


def test_the_compose_file_runs_serve_and_two_workers_scraped_by_prometheus() -> None:
    services = _compose()["services"]
    stewards = {
        name: s["command"]
        for name, s in services.items()
        if s.get("image") == "steward:latest"
    }
    assert {n: _command(c) for n, c in stewards.items()} == {
        "serve": "cmd_serve",
        "worker-1": "cmd_worker",
        "worker-2": "cmd_worker",
    }
    assert all(c[1:] == METRICS for c in stewards.values())  # as the test runs them
    scraped = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    targets = {
        t for c in scraped["scrape_configs"][0]["static_configs"] for t in c["targets"]
    }
    assert targets == {f"{name}:9464" for name in stewards}
    for name, service in services.items():
        for depends in service.get("depends_on", []):
            assert depends in services, (name, depends)
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / "compose" / source).exists(), (name, source)


def test_the_kubernetes_manifests_run_serve_and_workers_with_metrics() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes/steward.yaml").read_text()))
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    commands = {}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        commands[name] = _command(container["args"])
        assert container["args"][1:] == METRICS
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9464"
        assert container["ports"] == [{"name": "metrics", "containerPort": 9464}]
    assert commands == {"steward-serve": "cmd_serve", "steward-worker": "cmd_worker"}
    assert deployments["steward-serve"]["spec"]["replicas"] == 1
    # (Debian's promtool is built without Kubernetes discovery: it cannot
    # check this job; its labels are read here)
    (scrape,) = yaml.safe_load(
        (DEPLOY / "kubernetes/prometheus-scrape.yaml").read_text()
    )
    assert scrape["job_name"] == "steward"
    relabeled = {r.get("target_label") for r in scrape["relabel_configs"]}
    assert {"process", "__address__"} <= relabeled


def test_the_systemd_unit_runs_serve() -> None:
    unit = (DEPLOY / "systemd/steward.service").read_text()
    (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(start.removeprefix("ExecStart="))
    assert argv[0].endswith("/steward") and argv[2:] == METRICS
    assert _command(argv[1:]) == "cmd_serve"


def test_the_image_installs_steward_and_runs_it() -> None:
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    assert any(
        line.startswith("RUN pip install") and "'.[otel]'" in line for line in lines
    )
    assert 'ENTRYPOINT ["steward"]' in lines
