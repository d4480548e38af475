"""What `steward chat` prints of a reply while the model writes it."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from steward.actors.session.chat import _printable, _Streamed, finishing
from steward.actors.session.events import ReplySent, TurnStarted
from steward.cli.env import shown as escaped
from steward.effects.llm.base import RequestInfo
from steward.events import Event, LlmAttemptFailed, Recorded


def _pieces(text: str, cuts: list[int]) -> list[str]:
    at = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(at, at[1:], strict=False)]


@given(
    st.text(),
    st.booleans(),
    st.booleans(),
    st.lists(st.integers(min_value=0), max_size=12),
)
@example("a\r\nb\r", False, False, [3, 40])  # a CR waits for what follows it
def test_a_finish_output_is_written_out_in_growing_prefixes(
    output: str, ascii_only: bool, output_first: bool, cuts: list[int]
) -> None:
    action = (
        {"output": output, "type": "finish"}
        if output_first
        else {
            "type": "finish",
            "output": output,
        }
    )
    text = json.dumps(action, ensure_ascii=ascii_only)
    shown = ""
    written = ""
    for piece in _pieces(text, cuts):
        written += piece
        now = _printable(finishing(written))
        assert now.startswith(shown), (written, shown, now)
        shown = now
    # control characters written as escapes; a last CR is never shown
    assert shown == escaped(output.removesuffix("\r"))


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "tool", "name": "files.list", "args": {"output": "x"}}',
        '{"type": "finish", "output": {"nested": "object"}}',
        '{"type": "fini',
        '{"thought": "\\"output\\": \\"no\\"", "type": "finish"',
        "plain text, not an action",
        '{"type": "finish", "output": "bad \\x escape"}',
    ],
)
def test_nothing_is_written_of_an_action_that_is_no_finish_with_text(
    text: str,
) -> None:
    assert finishing(text) == ""


def test_a_lone_surrogate_is_printable_and_half_a_pair_waits() -> None:
    assert _printable("a\ud800b") == "a\ufffdb"
    assert _printable("a\x1b[31mb\x00\nc") == "a\\u001b[31mb\\u0000\nc"
    assert _printable("smile \ud83d") == "smile "
    assert _printable("smile \ud83d\ude00") == "smile \U0001f600"


def _rec(stream: str, event: Event) -> Recorded:
    return Recorded(stream=stream, version=1, position=1, at=0.0, event=event)


def _info(run_id: str, request_id: str) -> RequestInfo:
    return RequestInfo(stream=f"run.{run_id}", request_id=request_id)


def test_only_this_chats_turns_stream_each_call_on_a_line_of_its_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    streamed = _Streamed("session.cli:a", json_actions=False)
    streamed.on_delta(_info("t1", "t1/llm/1"), "not yet a turn")
    streamed.on_record(
        _rec("session.cli:b", TurnStarted(run_id="t9", message_ids=(), text=""))
    )
    streamed.on_record(
        _rec("session.cli:a", TurnStarted(run_id="t1", message_ids=(), text=""))
    )
    streamed.on_delta(_info("t9", "t9/llm/1"), "another chat's")
    streamed.on_delta(_info("t1", "t1/llm/1"), "Let me look. ")
    streamed.on_delta(_info("t1", "t1/llm/2"), "It is ")
    streamed.on_delta(_info("t1", "t1/llm/2"), "there.")
    assert streamed.finish("It is there.") is None  # streamed whole
    assert capsys.readouterr().out == "Let me look. \nIt is there.\n"
    streamed.on_record(_rec("session.cli:a", ReplySent(run_id="t1", text="x")))
    streamed.on_delta(_info("t1", "t1/llm/3"), "after the reply")
    assert capsys.readouterr().out == ""


def test_a_reply_that_differs_from_its_stream_is_printed_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    streamed = _Streamed("session.cli:a", json_actions=False)
    streamed.on_record(
        _rec("session.cli:a", TurnStarted(run_id="t1", message_ids=(), text=""))
    )
    streamed.on_delta(_info("t1", "t1/llm/1"), "half an ans")
    streamed.on_record(
        _rec(
            "run.t1",
            LlmAttemptFailed(
                request_id="t1/llm/1", attempt=1, kind="server", message="x"
            ),
        )
    )
    streamed.on_delta(_info("t1", "t1/llm/1"), "A whole answer.")
    assert streamed.finish("A whole answer.") is None
    assert streamed.finish("Never streamed.") == "Never streamed."
    assert capsys.readouterr().out == "half an ans\nA whole answer.\n"


def test_a_direct_chats_call_streams_its_text_and_a_turns_json_its_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    streamed = _Streamed("session.cli:a", json_actions=True)
    streamed.on_record(
        _rec("session.cli:a", TurnStarted(run_id="t1", message_ids=(), text=""))
    )
    streamed.on_delta(_info("cli:a", "t1/llm"), '{"plain": "text"}')
    assert streamed.finish('{"plain": "text"}') is None
    streamed.on_record(
        _rec("session.cli:a", TurnStarted(run_id="t2", message_ids=(), text=""))
    )
    streamed.on_delta(_info("t2", "t2/llm/1"), '{"type": "finish", "output": "Do')
    streamed.on_delta(_info("t2", "t2/llm/1"), 'ne."}')
    assert streamed.finish("Done.") is None
    assert capsys.readouterr().out == '{"plain": "text"}\nDone.\n'


def test_a_streamed_reply_with_control_characters_is_printed_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    streamed = _Streamed("session.cli:a", json_actions=False)
    streamed.on_record(
        _rec("session.cli:a", TurnStarted(run_id="t1", message_ids=(), text=""))
    )
    streamed.on_delta(_info("t1", "t1/llm/1"), "a \x1b[2J b")
    assert streamed.finish("a \x1b[2J b") is None
    assert capsys.readouterr().out == "a \\u001b[2J b\n"
