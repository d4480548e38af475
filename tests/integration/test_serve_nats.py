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


@pytest.mark.parametrize("direct", [False, True])
async def test_a_message_on_a_channel_runs_and_the_answer_goes_out(
    tmp_path: Path, direct: bool
) -> None:
    """A turn's model text streams on its run's deltas subject; a direct
    chat's, which the session asks itself, on the session's."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    log_url = f"{server.url}?stream=SERVE&prefix=serve.ev"
    (tmp_path / "steward.toml").write_text(
        f'[log]\nurl = "{log_url}"\n\n[channels]\nweb = "default"\n\n'
        "[session]\ndebounce_ms = 10\n"
        + ('direct_chats = ["web:*"]\n' if direct else "")
    )
    text = "hi!" if direct else act(type="send_message", message="hi!")
    (tmp_path / "script.json").write_text(json.dumps({"replies": [{"text": text}]}))
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
        streams = "steward.sessions.web:u1" if direct else f"steward.runs.{run_id}"
        deltas = await nc.subscribe(f"{streams}.deltas")
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
        asked = f"{run_id}/llm" if direct else f"{run_id}/llm/1"
        assert delta == {"request_id": asked, "text": text}

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
