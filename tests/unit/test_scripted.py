"""The scripted provider: script files, reply forms, queues, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steward.actors.prompt import Prompt
from steward.actors.run.events import ChatMessage, ToolCall, Usage
from steward.config import ModelConfig
from steward.effects.llm import (
    AssistantDelta,
    Reply,
    ReplyError,
    RequestInfo,
    ResultEvent,
    ScriptedProvider,
    StreamEvent,
    SystemEvent,
    ToolUseEvent,
    UsageEvent,
    collect,
    estimate_usage,
    load_script,
    make_provider,
)
from steward.errors import ProviderError, ScriptError

PROMPT = Prompt(
    model="scripted",
    system="You are a test." * 4,
    messages=(ChatMessage(role="user", content="hello there, model"),),
)


def info(n: int = 1, run: str = "r1", priority: str = "interactive") -> RequestInfo:
    return RequestInfo(
        stream=f"run.{run}",
        request_id=f"{run}/llm/{n}",
        priority=priority,  # type: ignore[arg-type]
        iteration=n,
    )


async def ask(
    provider: ScriptedProvider, request: RequestInfo | None = None
) -> ResultEvent:
    return await collect(provider.stream(PROMPT, request or info()))


async def events_of(provider: ScriptedProvider) -> list[StreamEvent]:
    return [event async for event in provider.stream(PROMPT, info())]


SCRIPT_YAML = """
replies:
  - "plain text"
  - text: with tools
    tool_calls:
      - {id: c1, name: files.write, args: {path: a.txt, content: hi}}
      - {id: c2, name: files.list}
    usage: {input_tokens: 100, output_tokens: 7}
  - json: {type: finish, output: done}
  - error: {kind: rate_limit, message: slow down, retryable: true, retry_after: 1.5}
subagent_replies:
  - from a subagent
"""


# -- files --------------------------------------------------------------------


async def test_yaml_script_plays_in_order(tmp_path: Path) -> None:
    """A YAML script's replies are played in order, in each of their forms."""
    path = tmp_path / "demo.yaml"
    path.write_text(SCRIPT_YAML)
    provider = ScriptedProvider.from_file(path)

    first = await ask(provider, info(1))
    assert first.text == "plain text" and first.tool_calls == ()

    second = await ask(provider, info(2))
    assert second.text == "with tools"
    assert second.tool_calls == (
        ToolCall(id="c1", name="files.write", args={"path": "a.txt", "content": "hi"}),
        ToolCall(id="c2", name="files.list", args={}),
    )
    assert second.usage == Usage(input_tokens=100, output_tokens=7)

    third = await ask(provider, info(3))
    assert json.loads(third.text) == {"type": "finish", "output": "done"}

    with pytest.raises(ProviderError) as error:
        await ask(provider, info(4))
    e = error.value
    assert (e.kind, e.retryable, e.retry_after) == ("rate_limit", True, 1.5)
    assert str(e) == "rate_limit: slow down"
    assert provider.used == 4


async def test_json_script_file(tmp_path: Path) -> None:
    """A .json script works like a YAML one."""
    path = tmp_path / "s.json"
    script = {"replies": ["one", {"json": {"type": "note"}}, {"text": "three"}]}
    path.write_text(json.dumps(script))
    provider = ScriptedProvider.from_file(path)
    texts = [(await ask(provider, info(n))).text for n in (1, 2, 3)]
    assert texts == ["one", '{"type": "note"}', "three"]


async def test_make_provider_reads_the_models_script(tmp_path: Path) -> None:
    """`[models.x] script = ...` builds a provider that plays that file."""
    path = tmp_path / "m.yml"
    path.write_text("replies: [hello]\n")
    provider = make_provider("scripted", ModelConfig(script=str(path)))
    assert isinstance(provider, ScriptedProvider)
    assert (await ask(provider)).text == "hello"


async def test_model_without_script_fails_on_first_request() -> None:
    """A scripted model with no script builds, and its first call says what to set."""
    provider = make_provider("scripted", ModelConfig())
    assert isinstance(provider, ScriptedProvider)
    with pytest.raises(ProviderError, match=r"^config: .*no reply left.*set `script`"):
        await ask(provider)


def test_demo_script_loads() -> None:
    """The packaged demo script is valid and uses both queues."""
    script = load_script(Path(__file__).parents[2] / "steward" / "demo.yaml")
    assert len(script.replies) == 6
    assert script.subagent_replies is not None and len(script.subagent_replies) == 4
    assert json.loads(script.replies[0].text)["type"] == "note"


# -- streaming ----------------------------------------------------------------


async def test_stream_shape() -> None:
    """The stream is system, assistant, tool_use..., usage, then one result."""
    calls = (ToolCall(id="c1", name="a"), ToolCall(id="c2", name="b", args={"x": 1}))
    reply = Reply(
        text="hi", tool_calls=calls, usage=Usage(input_tokens=5, output_tokens=2)
    )
    events = await events_of(ScriptedProvider([reply]))
    assert [type(e) for e in events] == [
        SystemEvent,
        AssistantDelta,
        ToolUseEvent,
        ToolUseEvent,
        UsageEvent,
        ResultEvent,
    ]
    assert events[1] == AssistantDelta(text="hi")
    assert events[3] == ToolUseEvent(id="c2", name="b", args={"x": 1})
    assert events[4] == UsageEvent(input_tokens=5, output_tokens=2, cumulative=True)
    assert events[-1] == ResultEvent(
        text="hi", tool_calls=calls, usage=Usage(input_tokens=5, output_tokens=2)
    )


async def test_default_usage_is_a_deterministic_estimate() -> None:
    """Without scripted usage, tokens are estimated as a quarter of the characters."""
    provider = ScriptedProvider(["x" * 40, "x" * 40])
    first, second = await ask(provider, info(1)), await ask(provider, info(2))
    sent = len(PROMPT.system) + len(PROMPT.messages[0].content)
    assert first.usage == Usage(input_tokens=sent // 4, output_tokens=10)
    assert first.usage == second.usage == estimate_usage(PROMPT, Reply(text="x" * 40))


async def test_programmatic_replies_and_reply_objects() -> None:
    """ScriptedProvider takes strings and Reply objects, including error replies."""
    provider = ScriptedProvider(
        ["a", Reply(text="b"), Reply(error=ReplyError(kind="timeout", message="slow"))]
    )
    assert (await ask(provider, info(1))).text == "a"
    assert (await ask(provider, info(2))).text == "b"
    with pytest.raises(ProviderError, match="^timeout: slow$") as error:
        await ask(provider, info(3))
    assert error.value.retryable is False


async def test_callable_replies_are_an_instant_model() -> None:
    """A function of (prompt, request) answers every request, never running out."""
    seen: list[RequestInfo] = []

    def model(prompt: Prompt, request: RequestInfo) -> str:
        seen.append(request)
        return f"{prompt.model}:{request.request_id}"

    provider = ScriptedProvider(model)
    for n in range(1, 4):
        assert (await ask(provider, info(n))).text == f"scripted:r1/llm/{n}"
    assert [r.request_id for r in seen] == ["r1/llm/1", "r1/llm/2", "r1/llm/3"]
    assert provider.used == 3


async def test_delay_is_awaited_with_the_given_sleep() -> None:
    """A reply's delay is awaited (through the injected sleep) before it answers."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    provider = ScriptedProvider([Reply(text="late", delay=2.5), "now"], sleep=sleep)
    assert (await ask(provider, info(1))).text == "late"
    assert (await ask(provider, info(2))).text == "now"
    assert slept == [2.5]


async def test_delay_from_a_file_is_real_time(tmp_path: Path) -> None:
    """Without an injected sleep a file's delay uses asyncio.sleep."""
    path = tmp_path / "d.yaml"
    path.write_text("replies:\n  - {text: ok, delay: 0.001}\n")
    assert (await ask(ScriptedProvider.from_file(path))).text == "ok"


# -- queues -------------------------------------------------------------------


async def test_exhausted_script_is_a_config_error(tmp_path: Path) -> None:
    """Asking past the last reply names the script, the request and the count."""
    path = tmp_path / "demo.yaml"
    path.write_text("replies: [only]\n")
    provider = ScriptedProvider.from_file(path)
    await ask(provider, info(1))
    message = (
        f"^config: script {re.escape(str(path))} has no reply left for request "
        r"r1/llm/2 of run.r1 \(1 used\)$"
    )
    with pytest.raises(ProviderError, match=message) as error:
        await ask(provider, info(2))
    assert error.value.kind == "config" and not error.value.retryable


async def test_subagent_requests_use_their_own_queue() -> None:
    """Subagent requests take subagent_replies; interactive ones take replies."""
    provider = ScriptedProvider(["main 1", "main 2"], subagent_replies=["sub 1"])
    assert (await ask(provider, info(1, "r1-1", "subagent"))).text == "sub 1"
    assert (await ask(provider, info(1))).text == "main 1"
    with pytest.raises(ProviderError, match="no subagent reply left"):
        await ask(provider, info(2, "r1-2", "subagent"))
    assert (await ask(provider, info(2))).text == "main 2"


async def test_subagents_fall_back_to_replies() -> None:
    """Without subagent_replies, subagent requests take from the shared replies."""
    provider = ScriptedProvider(["one", "two"])
    assert (await ask(provider, info(1, "r1-1", "subagent"))).text == "one"
    assert (await ask(provider, info(1))).text == "two"


async def test_per_run_scripts_restart_for_each_run(tmp_path: Path) -> None:
    """With per_run: true every run plays the replies from the start."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"per_run": True, "replies": ["a", "b"]}))
    provider = ScriptedProvider.from_file(path)
    assert (await ask(provider, info(1, "r1"))).text == "a"
    assert (await ask(provider, info(1, "r2"))).text == "a"
    assert (await ask(provider, info(2, "r1"))).text == "b"
    with pytest.raises(ProviderError, match=r"run.r1 \(2 used\)"):
        await ask(provider, info(3, "r1"))
    assert (await ask(provider, info(2, "r2"))).text == "b"


async def test_a_per_run_script_resumes_a_run_where_it_was(tmp_path: Path) -> None:
    """A process that has not played a run yet (it resumes one after Ctrl-C,
    or a fork) starts it after the run's model calls so far, per run or, in
    a script file, on the shared cursor; one that played the run's earlier
    calls keeps its own count (a retry took a reply of its own)."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"per_run": True, "replies": ["a", "b", "c"]}))
    resumed = ScriptedProvider.from_file(path)
    assert (await ask(resumed, info(3, "r1"))).text == "c"
    assert (await ask(resumed, info(1, "r2"))).text == "a"
    path.write_text(json.dumps({"replies": ["a", "b", "c", "d"]}))
    shared = ScriptedProvider.from_file(path)
    assert (await ask(shared, info(2, "r1"))).text == "b"
    assert (await ask(shared, info(2, "r1"))).text == "c"  # a retry
    assert (await ask(shared, info(3, "r1"))).text == "d"
    given = ScriptedProvider(["a", "b"])  # in code: the replies from here on
    assert (await ask(given, info(3, "r1"))).text == "a"


# -- invalid scripts ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "replies: [a, b, c, {text: x, usage: {input_tokens: lots}}]\n",
            r"replies\[3\]\.usage\.input_tokens: expected int, got str$",
        ),
        ("replies:\n  - {txt: hi}\n", r"replies\[0\]\.txt: unknown field$"),
        ("replies:\n  - 5\n", r"replies\[0\]: expected str \| mapping, got int$"),
        (
            "replies:\n  - {error: {kind: oops}}\n",
            r"replies\[0\]\.error\.kind: invalid",
        ),
        ("replies:\n  - {delay: -1}\n", r"replies\[0\]\.delay: expected float >= 0"),
        (
            "replies:\n  - {tool_calls: [{name: x}]}\n",
            r"replies\[0\]\.tool_calls\[0\]: missing required field id$",
        ),
        ("replies:\n  - {text: a, json: {b: 1}}\n", r"replies\[0\]: give either text"),
        (
            "subagent_replies: []\n",
            r"missing required field replies \(a script is a mapping",
        ),
        ("- a\n- b\n", r"expected mapping, got list"),
        (
            "replies: [a]\nsubagent_replies:\n  - [x]\n",
            r"subagent_replies\[0\]: expected",
        ),
    ],
)
def test_invalid_scripts_name_file_and_field(
    tmp_path: Path, body: str, problem: str
) -> None:
    """An invalid script names the file and the path of the bad field."""
    path = tmp_path / "demo.yaml"
    path.write_text(body)
    with pytest.raises(ScriptError, match=rf"^{re.escape(str(path))}: {problem}"):
        ScriptedProvider.from_file(path)


def test_missing_script_file_is_named(tmp_path: Path) -> None:
    """A script path that does not exist is a ScriptError naming it."""
    path = tmp_path / "nope.yaml"
    with pytest.raises(ScriptError, match=rf"^{re.escape(str(path))}: no such script"):
        make_provider("scripted", ModelConfig(script=str(path)))


def test_bad_syntax_names_file_and_line(tmp_path: Path) -> None:
    """Broken YAML or JSON is reported with the file and the line."""
    yml = tmp_path / "bad.yaml"
    yml.write_text("replies:\n  - a\n  - [b\n")
    with pytest.raises(
        ScriptError, match=rf"^{re.escape(str(yml))}: line \d+: invalid YAML"
    ):
        load_script(yml)
    js = tmp_path / "bad.json"
    js.write_text('{"replies":\n  ["a",]\n}')
    with pytest.raises(
        ScriptError, match=rf"^{re.escape(str(js))}: line 2: invalid JSON"
    ):
        load_script(js)


def test_unsupported_extension_is_refused(tmp_path: Path) -> None:
    """Only .yaml, .yml and .json scripts are read."""
    path = tmp_path / "script.txt"
    path.write_text("replies: [a]\n")
    with pytest.raises(ScriptError, match=r"unsupported script format '\.txt'"):
        load_script(path)


_replies = st.builds(
    Reply,
    text=st.text(max_size=20),
    tool_calls=st.lists(
        st.builds(
            ToolCall,
            id=st.text(min_size=1, max_size=4),
            name=st.sampled_from(["files.read", "files.list"]),
            args=st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
        ),
        max_size=2,
    ).map(tuple),
    usage=st.none()
    | st.builds(
        Usage, input_tokens=st.integers(0, 99), output_tokens=st.integers(0, 99)
    ),
    error=st.none()
    | st.builds(
        ReplyError,
        kind=st.sampled_from(["rate_limit", "internal"]),
        retryable=st.booleans(),
    ),
    metadata=st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(script=st.lists(_replies, min_size=1, max_size=5))
async def test_result_alone_is_what_collecting_the_stream_gives(
    script: list[Reply],
) -> None:
    """`result` (taken by the host when no one watches the stream) answers
    each request exactly as `collect(stream(...))` does, errors included,
    and uses the script up the same way."""
    streamed, whole = ScriptedProvider(script), ScriptedProvider(script)
    for n in range(len(script) + 1):  # one past the end: the exhausted error
        try:
            expected: ResultEvent | str = await collect(
                streamed.stream(PROMPT, info(n))
            )
        except ProviderError as e:
            expected = f"{e.kind}: {e}"
        try:
            got: ResultEvent | str = await whole.result(PROMPT, info(n))
        except ProviderError as e:
            got = f"{e.kind}: {e}"
        assert got == expected
    assert whole.used == streamed.used


async def test_result_of_a_subclass_that_streams_its_own_way_is_its_stream() -> None:
    """A subclass overriding `stream` is collected by `result` too, so the
    host (which asks `result` when no one watches) gets what it streams."""

    class Louder(ScriptedProvider):
        async def stream(self, prompt: Prompt, info: RequestInfo):  # type: ignore[override]
            async for event in super().stream(prompt, info):
                if isinstance(event, ResultEvent):
                    event = ResultEvent(text=event.text.upper(), usage=event.usage)
                yield event

    assert (await Louder(["quiet"]).result(PROMPT, info())).text == "QUIET"
