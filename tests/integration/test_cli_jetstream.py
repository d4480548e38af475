"""The operator commands against a JetStream log on a real nats-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats_server import NatsServer
from support import PLAN, act

from steward import cli
from steward.cli.env import DEFAULT_NATS_URL, env_of
from steward.config import load_settings
from steward.kinds import KINDS


def test_run_show_replay_export_and_rebuild_on_jetstream(
    tmp_path: Path,
    nats: NatsServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the workspace is the working directory
    script = tmp_path / "script.json"
    replies = [
        *PLAN,
        act(
            type="tool_call", name="files.write", args={"path": "a.txt", "content": "x"}
        ),
        act(type="finish", output="written"),
    ]
    script.write_text(json.dumps({"replies": [{"text": r} for r in replies]}))
    base = [
        "--log",
        f"{nats.url}?stream=CLI&prefix=cli.ev",
        "--db",
        str(tmp_path / "projections.db"),
    ]

    assert cli.main([*base, "--script", str(script), "run", "write a"]) == 0
    out = capsys.readouterr().out
    *_, status, output = out.strip().splitlines()
    run_id = status.split()[1]
    assert status == f"run {run_id} completed" and output == "written"

    assert cli.main([*base, "runs", "list"]) == 0
    assert run_id in capsys.readouterr().out
    assert cli.main([*base, "runs", "show", run_id]) == 0
    assert "ToolResulted" in capsys.readouterr().out
    assert cli.main([*base, "replay", run_id, "--verify"]) == 0
    assert "verify: ok" in capsys.readouterr().out
    assert cli.main([*base, "events", "export", run_id]) == 0
    exported = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [e["version"] for e in exported] == list(range(1, len(exported) + 1))
    assert cli.main([*base, "projections", "rebuild"]) == 0
    assert "projections rebuilt" in capsys.readouterr().out
    # the log lives on the server, not in a local file
    assert not (tmp_path / ".steward").exists()
    assert {p.name for p in tmp_path.glob("*.db")} == {"projections.db"}
    assert (tmp_path / "a.txt").read_text() == "x"


def test_an_unreachable_server_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nats_server import free_port

    url = f"nats://127.0.0.1:{free_port()}?stream=X"
    code = cli.main(["--log", url, "--db", str(tmp_path / "p.db"), "runs", "list"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("steward: ") and len(err.strip().splitlines()) == 1
    assert "127.0.0.1" in err


@pytest.mark.parametrize(
    ("configured", "argv", "expected"),
    [
        (None, ["--backend", "jetstream"], DEFAULT_NATS_URL),
        (
            "nats://n1:4222?stream=S",
            ["--backend", "jetstream"],
            "nats://n1:4222?stream=S",
        ),
        ("nats://n1:4222", ["--backend", "sqlite"], ".steward/steward.db"),
        ("nats://n1:4222", ["--backend", "sqlite", "--db", "x.db"], "x.db"),
        (None, ["--backend", "sqlite"], ".steward/steward.db"),
        (None, ["serve", "--backend", "jetstream"], DEFAULT_NATS_URL),
        (None, ["worker", "--backend", "jetstream"], DEFAULT_NATS_URL),
    ],
)
def test_backend_picks_the_log_when_no_url_says(
    configured: str | None, argv: list[str], expected: str
) -> None:
    settings = load_settings(
        None, env={"STEWARD_LOG_URL": configured} if configured else {}
    )
    if argv[0].startswith("--"):
        argv = [*argv, "runs", "list"]
    env = env_of(settings, cli.build_parser(KINDS).parse_args(argv), KINDS)
    assert env.log_url == expected
    assert env.distributed == ("jetstream" in argv)


def test_a_backend_that_contradicts_the_log_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "log.db")
    code = cli.main(["--backend", "jetstream", "--log", db, "runs", "list"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"steward: --backend jetstream does not fit --log {db}"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"STEWARD_LOG_CLAIM_SECONDS": "5"},
            "steward: settings: log.claim_seconds: 5 is below models.default.timeout"
            " × (max_retries + 1) = 60 × 3 = 180",
        ),
        (
            {
                "STEWARD_LOG_CLAIM_SECONDS": "20",
                "STEWARD_MODELS_DEFAULT_TIMEOUT": "5",
            },
            "steward: settings: log.claim_seconds: 20 is below tools.timeout = 30",
        ),
    ],
)
def test_a_worker_whose_claims_could_lapse_mid_call_is_refused(
    tmp_path: Path, nats_server: NatsServer, env: dict[str, str], expected: str
) -> None:
    """worker on a nats:// log refuses a claim_seconds below the longest call
    (a model's timeout × attempts, or the tools' timeout) in one line."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"replies": ["x"]}))
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "steward",
            "--log",
            f"{nats_server.url}?stream=CLAIMS&prefix=claims.ev",
            "--db",
            str(tmp_path / "projections.db"),
            "--script",
            str(script),
            "worker",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,  # a worker that starts would serve until stopped
        env={**os.environ, **env},
    )
    assert worker.returncode == 2
    assert worker.stderr.startswith(expected), worker.stderr
    assert len(worker.stderr.strip().splitlines()) == 1


def test_workers_lists_none_before_any_joined_and_refuses_an_embedded_log(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    """`steward workers` on a shared log nobody works yet says what to
    start; on an embedded log it is one line and exit 2."""

    def workers(*log: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steward", *log, "workers"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    url = f"{nats_server.url}?stream=NOBODY&prefix=nobody.ev"
    listed = workers("--log", url)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("no live workers on ")
    assert "start `steward worker`" in listed.stdout
    refused = workers("--log", str(tmp_path / "steward.db"))
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "workers share a nats:// log" in refused.stderr
