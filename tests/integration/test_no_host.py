"""A command that waits for an answer says at once when nothing hosts the
log, and what to start, with its own exit status (5); beside a host it is
answered."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import pytest
from nats_server import NatsServer
from support import act, steward_process, stop_all
from workflow_files import EXAMPLE, SCRIPT

from steward import cli
from steward.bus import JetStreamEventLog, open_log
from steward.cli.env import EXIT_NO_ANSWER
from steward.hostlock import HostLock
from steward.kinds import KINDS


def _refused(capsys: pytest.CaptureFixture[str], code: int, start: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_NO_ANSWER, err
    assert len(err) == 1, err
    assert "nothing" in err[0] and start in err[0], err


def test_sessions_send_with_no_serve_says_so_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ["--db", str(tmp_path / "log.db")]
    began = time.monotonic()
    code = cli.main([*db, "sessions", "send", "cli:x", "hello", "--timeout", "60"])
    _refused(capsys, code, "`steward serve`")
    assert time.monotonic() - began < 10  # not the 60 s timeout
    # a command is answered without a host
    assert cli.main([*db, "sessions", "send", "cli:x", "/model"]) == 0
    assert capsys.readouterr().out.startswith("model: ")


def test_beside_a_run_that_hosts_only_itself_sessions_send_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "log.db"
    assert cli.main(["--db", str(db), "runs", "start", "x", "--wait", "0"]) == 0
    lock = HostLock(db)
    assert lock.acquire(scope="r1")  # as `steward run` does
    try:
        code = cli.main(["--db", str(db), "sessions", "send", "cli:x", "hello"])
    finally:
        lock.release()
    _refused(capsys, code, "which hosts only its run r1")


def test_on_nats_with_no_host_chat_sessions_and_workflows_say_so(
    tmp_path: Path,
    nats: NatsServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["--log", nats.url, "--db", str(tmp_path / "projections.db")]
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    _refused(capsys, cli.main([*base, "--script", str(SCRIPT), "chat"]), "worker")
    send = [*base, "sessions", "send", "cli:x", "hello", "--timeout", "60"]
    _refused(capsys, cli.main(send), "`steward worker`")
    run = [*base, "--script", str(SCRIPT), "workflow", "run", str(EXAMPLE)]
    run += ["--input", "feature=x", "--quiet"]
    _refused(capsys, cli.main(run), "`steward serve`")


def test_on_nats_a_serve_answers_what_is_sent(
    tmp_path: Path, nats: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "s.json"
    reply = act(type="send_message", message="Hello from the serve.")
    script.write_text(json.dumps({"per_run": True, "replies": [{"text": reply}]}))
    base = ["--log", nats.url, "--db", str(tmp_path / "projections.db")]
    serve = steward_process(
        tmp_path,
        *base,
        "--script",
        str(script),
        "serve",
        STEWARD_SESSION_DEBOUNCE_MS="10",
    )
    try:
        _until_hosted(base)
        code = cli.main([*base, "sessions", "send", "cli:y", "hi", "--timeout", "30"])
        assert code == 0, capsys.readouterr().err
        assert capsys.readouterr().out.strip() == "Hello from the serve."
    finally:
        errors = stop_all([serve])
    assert "Traceback" not in errors[0], errors[0]


def _until_hosted(base: list[str]) -> None:
    """Wait until the serve answers on NATS that it hosts the log."""

    async def hosted() -> bool:
        log = await open_log(base[1], union=KINDS.union)
        try:
            assert isinstance(log, JetStreamEventLog)
            return await log.host(timeout=0.5) is not None
        finally:
            await log.close()

    deadline = time.monotonic() + 20
    while not asyncio.run(hosted()):
        assert time.monotonic() < deadline, "the serve never answered on NATS"
        time.sleep(0.1)
