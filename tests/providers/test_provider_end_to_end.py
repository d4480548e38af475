"""`steward run` against an OpenAI-compatible server, end to end.

The real `openai` SDK talks to a local server speaking the Chat Completions
wire format. The first call is rate limited, so the run records the failed
attempt and its retry; the second streams the answer. Replay verifies the run
without calling the model, and the API key is nowhere in the log, the
projections or the log lines.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from conftest import KEY
from fake_api import FakeAPI, json_reply, openai_error, openai_frames, sse_reply
from prometheus_client import REGISTRY

from steward import cli

FINISH = json.dumps({"type": "finish", "output": "hello from the fake model"})


@pytest.fixture
def api() -> FakeAPI:
    server = FakeAPI()
    try:
        yield server
    finally:
        server.close()


def test_a_run_through_the_openai_sdk_retries_streams_and_replays(
    tmp_path: Path,
    api: FakeAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "steward.toml"
    config.write_text(
        "[run]\nplanning_gate = false\n\n"
        "[models.default]\n"
        'provider = "openai"\n'
        'model = "gpt-test"\n'
        f'base_url = "{api.url}/v1"\n'
        "input_price_per_mtok = 2.0\n"
        "output_price_per_mtok = 8.0\n"
    )
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    db = str(tmp_path / "log.db")
    api.queue(
        json_reply(
            openai_error(429, "slow down"),
            status=429,
            headers={"retry-after-ms": "20"},
        ),
        sse_reply(
            openai_frames([FINISH[:20], FINISH[20:]], input_tokens=100, output_tokens=7)
        ),
    )
    caplog.set_level(logging.DEBUG)
    base = ["--config", str(config), "--db", db]

    before = _sampled()
    assert cli.main([*base, "-v", "run", "say hello", "--stream"]) == 0
    out, err = capsys.readouterr()
    # counted by the configured provider and model: a rate-limited attempt
    # (no first token), then a streamed answer (its first token timed)
    moved = {k: v - before[k] for k, v in _sampled().items()}
    assert moved == {
        "steward_model_calls_total ok": 1.0,
        "steward_model_calls_total rate_limit": 1.0,
        "steward_model_time_to_first_token_seconds_count": 1.0,
        "steward_model_tokens_total input": 100.0,
        "gen_ai_client_token_usage_count output": 1.0,
    }
    *_, status, output = out.strip().splitlines()
    run_id = status.split()[1]
    assert status == f"run {run_id} completed"
    assert output == "hello from the fake model"
    assert f"{run_id} model> {FINISH}" in err  # the streamed text, live
    assert len(api.requests) == 2
    assert api.requests[1].headers["authorization"] == f"Bearer {KEY}"

    assert cli.main([*base, "events", "export", run_id]) == 0
    exported = [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()]
    (attempt,) = [e for e in exported if e["type"] == "LlmAttemptFailed"]
    assert attempt["kind"] == "rate_limit" and attempt["status"] == 429
    assert attempt["retry_after"] == pytest.approx(0.02)
    assert attempt["delay"] >= 0.02
    (answer,) = [e for e in exported if e["type"] == "LlmResponded"]
    assert answer["attempts"] == 2
    assert answer["usage"] == {"input_tokens": 100, "output_tokens": 7}
    assert answer["cost_usd"] == pytest.approx((100 * 2.0 + 7 * 8.0) / 1e6)

    assert cli.main([*base, "runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    assert "attempt 1, retry in" in shown and "rate_limit (HTTP 429)" in shown
    assert f"cost ${(100 * 2.0 + 7 * 8.0) / 1e6:.6f}" in shown

    assert cli.main([*base, "replay", run_id, "--verify"]) == 0
    assert "verify: ok" in capsys.readouterr().out
    assert len(api.requests) == 2  # replay never calls the model

    assert cli.main([*base, "projections", "rebuild"]) == 0
    out, err = capsys.readouterr()
    secret = KEY.encode()
    for file in tmp_path.iterdir():  # the log, its WAL, the projections
        if file.is_file():
            assert secret not in file.read_bytes(), file.name
    assert KEY not in out + err
    assert KEY not in caplog.text


def _sampled() -> dict[str, float]:
    """The metrics of the test's model (openai's gpt-test) the run moves."""
    model = {"provider": "openai", "model": "gpt-test"}
    genai = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": "gpt-test",
        "gen_ai_token_type": "output",
    }
    samples = {
        "steward_model_calls_total ok": (
            "steward_model_calls_total",
            {**model, "outcome": "ok"},
        ),
        "steward_model_calls_total rate_limit": (
            "steward_model_calls_total",
            {**model, "outcome": "rate_limit"},
        ),
        "steward_model_time_to_first_token_seconds_count": (
            "steward_model_time_to_first_token_seconds_count",
            model,
        ),
        "steward_model_tokens_total input": (
            "steward_model_tokens_total",
            {**model, "type": "input"},
        ),
        "gen_ai_client_token_usage_count output": (
            "gen_ai_client_token_usage_count",
            genai,
        ),
    }
    return {
        key: REGISTRY.get_sample_value(name, labels) or 0.0
        for key, (name, labels) in samples.items()
    }


def test_recorded_streams_are_numbered_per_attempt_without_gaps(
    tmp_path: Path, api: FakeAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    """With record_stream, each attempt's stream events are kept, seq 1..n."""
    config = tmp_path / "steward.toml"
    config.write_text(
        "[run]\nplanning_gate = false\n\n"
        "[models.default]\n"
        'provider = "openai"\n'
        'model = "gpt-test"\n'
        f'base_url = "{api.url}/v1"\n'
        "record_stream = true\n"
    )
    frames = openai_frames([FINISH[:20], FINISH[20:]])
    api.queue(sse_reply(frames[:3], cut=True), sse_reply(frames))
    base = ["--config", str(config), "--db", str(tmp_path / "log.db")]
    assert cli.main([*base, "run", "say hello"]) == 0
    run_id = capsys.readouterr().out.strip().splitlines()[-2].split()[1]
    assert cli.main([*base, "events", "export", run_id]) == 0
    exported = [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()]
    streams = [e for e in exported if e["type"] == "LlmStreamRecorded"]
    assert [(s["attempt"], s["complete"]) for s in streams] == [(1, False), (2, True)]
    for stream in streams:
        assert [e["seq"] for e in stream["events"]] == list(
            range(1, len(stream["events"]) + 1)
        )
    assert streams[1]["events"][-1]["kind"] == "result"
    assert "result" not in [e["kind"] for e in streams[0]["events"]]
    deltas = [e["text"] for e in streams[1]["events"] if e["kind"] == "assistant"]
    assert "".join(deltas) == FINISH
    types = [e["type"] for e in exported]
    assert types.index("LlmStreamRecorded") < types.index("LlmAttemptFailed")
    assert cli.main([*base, "replay", run_id, "--verify"]) == 0


def test_a_session_switched_with_model_calls_that_models_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`/model fast` in a chat: the next turn asks the [models.fast] table's
    server for its model id, and is priced at that table's prices."""
    default, fast = FakeAPI(), FakeAPI()
    try:
        finish = json.dumps({"type": "finish", "output": "from the fast model"})
        fast.queue(sse_reply(openai_frames([finish], input_tokens=1000)))
        config = tmp_path / "steward.toml"
        config.write_text(
            "[run]\nplanning_gate = false\n\n"
            "[session]\ndebounce_ms = 10\n\n"
            "[models.default]\n"
            'provider = "openai"\nmodel = "gpt-big"\n'
            f'base_url = "{default.url}/v1"\n\n'
            "[models.fast]\n"
            'provider = "openai"\nmodel = "gpt-fast"\n'
            f'base_url = "{fast.url}/v1"\n'
            "input_price_per_mtok = 1.0\n"
        )
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setattr("sys.stdin", io.StringIO("/model fast\nhello\n"))
        base = ["--config", str(config), "--db", str(tmp_path / "log.db")]
        assert cli.main([*base, "chat"]) == 0
    finally:
        default.close()
        fast.close()
    assert capsys.readouterr().out.splitlines() == [
        "model switched to fast",
        "from the fast model",
    ]
    assert default.requests == []
    [request] = fast.requests
    assert request.body["model"] == "gpt-fast"
    assert cli.main([*base, "events", "export", "session.cli:local"]) == 0
    exported = [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()]
    [turn] = [e["run_id"] for e in exported if e["type"] == "TurnStarted"]
    assert cli.main([*base, "events", "export", turn]) == 0
    exported = [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()]
    [answer] = [e for e in exported if e["type"] == "LlmResponded"]
    assert answer["cost_usd"] == pytest.approx(1000 * 1.0 / 1e6)


def test_a_delivery_check_that_answers_only_its_verdict_delivers_the_answer(
    tmp_path: Path,
    api: FakeAPI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A terse model: its act answer, then ``Delivery: DONE`` alone. The run
    delivers the act answer after two requests; nothing tells the model its
    reply was empty."""
    config = tmp_path / "steward.toml"
    config.write_text(
        "[agents.default]\n"
        'protocol = "native"\npolicy = "staged"\nqa = false\n\n'
        "[models.default]\n"
        f'provider = "openai"\nmodel = "gpt-test"\nbase_url = "{api.url}/v1"\n'
    )
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    api.queue(
        sse_reply(openai_frames(["The notes say hi."])),
        sse_reply(openai_frames(["Delivery: DONE"])),
        sse_reply(openai_frames(["Delivery: DONE"])),  # not asked for
    )
    base = ["--config", str(config), "--db", str(tmp_path / "log.db")]
    assert cli.main([*base, "run", "Summarize notes.txt"]) == 0
    *_, status, output = capsys.readouterr().out.strip().splitlines()
    assert status.endswith(" completed") and output == "The notes say hi."
    assert len(api.requests) == 2
    asked = json.dumps([r.body for r in api.requests])
    assert "empty" not in asked.lower()
