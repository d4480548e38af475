"""`steward serve` on a JetStream log answers services on NATS."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from nats_server import NatsServer
from support import act

pytestmark = pytest.mark.slow


async def test_a_message_on_a_channel_runs_and_the_answer_goes_out(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "nats")
    server.start()
    log_url = f"{server.url}?stream=SERVE&prefix=serve.ev"
    (tmp_path / "steward.toml").write_text(
        f'[log]\nurl = "{log_url}"\n\n[channels]\nweb = "default"\n\n'
        "[session]\ndebounce_ms = 10\n"
    )
    (tmp_path / "script.json").write_text(
        json.dumps({"replies": [{"text": act(type="send_message", message="hi!")}]})
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "steward", "--script", "script.json", "serve"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    nc = await nats.connect(server.url)
    try:
        assert serve.stdout is not None
        banner = await asyncio.wait_for(
            asyncio.to_thread(serve.stdout.readline), timeout=30
        )
        assert b"inbound channels: web" in banner
        run_id = "web:u1-t1"  # the first turn of the session web:u1
        outbound = await nc.subscribe("steward.outbound.web")
        deltas = await nc.subscribe(f"steward.runs.{run_id}.deltas")
        body = {"version": 1, "text": "say hi", "message_id": "m-1", "user_id": "u1"}
        reply = await nc.request(
            "steward.inbound.web", json.dumps(body).encode(), timeout=10
        )
        assert json.loads(reply.data) == {
            "ok": True,
            "session_id": "web:u1",
            "message_id": "m-1",
            "duplicate": False,
        }
        said = json.loads((await outbound.next_msg(timeout=10)).data)
        assert said == {
            "session_id": "web:u1",
            "channel": "web",
            "chat_id": "u1",
            "type": "reply",
            "text": "hi!",
            "run_id": run_id,
            "status": "completed",
        }
        delta = json.loads((await deltas.next_msg(timeout=10)).data)
        assert delta == {
            "request_id": f"{run_id}/llm/1",
            "text": act(type="send_message", message="hi!"),
        }

        bad = await nc.request("steward.inbound.nowhere", b'{"text": "x"}', timeout=10)
        assert json.loads(bad.data)["error"]["code"] == "unknown_channel"
    finally:
        await nc.close()
        serve.send_signal(signal.SIGTERM)
        try:
            _, err = serve.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            serve.kill()
            _, err = serve.communicate()
        server.stop()
    assert serve.returncode == 0, err.decode()[-2000:]
