"""Settings: spec defaults, TOML and environment overrides, errors that name the fix."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from steward.actors.run.events import LATEST_REVISION, RunSettings, ToolSpec
from steward.config import (
    DEFAULT_SYSTEM_PROMPT,
    AgentProfile,
    LogConfig,
    ModelConfig,
    RunConfig,
    Settings,
    ToolsConfig,
    load_settings,
)
from steward.effects.tools.files import TOOLS
from steward.errors import ConfigError

APPROVABLE = tuple(t.name for t in TOOLS)
"""The tools ``[tools] require_approval`` may name (as the command line passes)."""


def write(tmp_path: Path, text: str, name: str = "steward.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- defaults -----------------------------------------------------------------


def test_run_defaults_are_the_spec_values() -> None:
    """[run] defaults equal Clifford's config table and Klaw's tool-round limit."""
    run = RunConfig()
    assert (
        run.max_iterations,
        run.transcript_limit,
        run.transcript_token_limit,
        run.max_json_retries,
        run.max_tool_retries,
        run.max_turns_per_context,
        run.memory_writer_max_messages,
        run.max_tool_call_rounds,
        run.planning_gate,
        run.subagent_conversation_limit,
    ) == (20, 50, 1200, 1, 1, 60, 40, 10, True, 40)


def test_default_system_prompt_is_cliffords_spelt_right() -> None:
    """The default system prompt is Clifford's DEFAULT_SYSTEM_PROMPT with its
    "AI-Assistent" spelt right; runs record it (tests/golden keep the old)."""
    expected = "You are Clifford, a very skilled and highly complex AI-Assistant!"
    assert DEFAULT_SYSTEM_PROMPT == expected
    assert RunConfig().system_prompt == expected
    assert Settings().run_settings().system_prompt == expected


def test_other_section_defaults() -> None:
    """[log], [tools], models, agents and concurrency have the documented defaults."""
    s = Settings()
    assert s.log == LogConfig(url=".steward/steward.db", synchronous="NORMAL")
    assert s.tools == ToolsConfig(workspace=".", output_limit=16384, timeout=30.0)
    assert s.models == {"default": ModelConfig()}
    assert s.models["default"].provider == "scripted"
    assert s.models["default"].timeout == 60.0
    assert s.models["default"].max_retries == 2
    assert s.agents == {"default": AgentProfile()}
    assert s.agents["default"].protocol == "json"
    assert s.llm_max_concurrency == 2


def test_defaults_match_recorded_run_settings_defaults() -> None:
    """Default settings give RunSettings' own defaults, but for the prompt,
    the profiles and the revision of a run created now."""
    built = Settings().run_settings()
    assert built == RunSettings(
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        profiles=("default",),
        revision=LATEST_REVISION,
    )


def test_settings_are_frozen_and_keyword_only() -> None:
    """Settings Structs cannot be changed after loading or built positionally."""
    with pytest.raises(AttributeError):
        RunConfig().max_iterations = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunConfig(3)  # type: ignore[call-arg]


def test_every_field_has_a_docstring() -> None:
    """Each settings field is documented by an attribute docstring in its class."""
    import ast
    import inspect

    from steward.config import settings as module

    tree = ast.parse(inspect.getsource(module))
    documented: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = documented.setdefault(node.name, set())
            body = node.body
            for field, doc in zip(body, body[1:], strict=False):
                is_doc = isinstance(doc, ast.Expr) and isinstance(
                    doc.value, ast.Constant
                )
                if isinstance(field, ast.AnnAssign) and is_doc:
                    assert isinstance(field.target, ast.Name)
                    names.add(field.target.id)
    for cls in (RunConfig, LogConfig, ToolsConfig, ModelConfig, AgentProfile, Settings):
        missing = set(cls.__struct_fields__) - documented[cls.__name__]
        assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


# -- loading ------------------------------------------------------------------


def test_no_file_and_no_env_gives_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ./steward.toml and variables, load_settings returns the defaults."""
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}) == Settings()


def test_reads_steward_toml_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no path, ./steward.toml is read when it exists."""
    write(tmp_path, "[run]\nmax_iterations = 7\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings(env={}).run.max_iterations == 7


def test_toml_file_overrides_defaults(tmp_path: Path) -> None:
    """Values from the TOML file replace defaults; untouched keys keep theirs."""
    path = write(
        tmp_path,
        """
llm_max_concurrency = 4

[run]
max_iterations = 5
planning_gate = false
system_prompt = "Be brief."

[log]
url = "sqlite:///var/steward.db"
synchronous = "FULL"

[tools]
timeout = 2.5

[models.default]
script = "demo.yaml"

[models.claude]
provider = "anthropic"
model = "claude-sonnet"
temperature = 0.2
max_tokens = 1024

[agents.reviewer]
model = "claude"
protocol = "native"
tools = ["files.read"]
max_tool_call_rounds = 3
""",
    )
    s = load_settings(path, env={})
    assert s.run.max_iterations == 5
    assert s.run.planning_gate is False
    assert s.run.transcript_limit == 50
    assert s.log == LogConfig(url="sqlite:///var/steward.db", synchronous="FULL")
    assert s.tools.timeout == 2.5 and s.tools.output_limit == 16384
    assert s.models["default"].script == "demo.yaml"
    assert s.models["claude"].provider == "anthropic"
    assert s.agents["reviewer"].tools == ["files.read"]
    assert "default" in s.agents  # the default profile stays available
    assert s.llm_max_concurrency == 4


def test_int_in_toml_is_accepted_for_a_float(tmp_path: Path) -> None:
    """`timeout = 5` (an integer) is a valid float setting."""
    path = write(tmp_path, "[tools]\ntimeout = 5\n")
    assert load_settings(path, env={}).tools.timeout == 5.0


def test_env_overrides_with_type_conversion(tmp_path: Path) -> None:
    """STEWARD_<SECTION>_<KEY> overrides the file and converts to the field type."""
    path = write(tmp_path, "[run]\nmax_iterations = 7\n")
    env = {
        "STEWARD_RUN_MAX_ITERATIONS": "5",
        "STEWARD_RUN_PLANNING_GATE": "false",
        "STEWARD_LOG_SYNCHRONOUS": "FULL",
        "STEWARD_LOG_URL": "sqlite:///x.db",
        "STEWARD_TOOLS_TIMEOUT": "1.5",
        "STEWARD_LLM_MAX_CONCURRENCY": "8",
        "PATH": "/usr/bin",
    }
    s = load_settings(path, env=env)
    assert s.run.max_iterations == 5
    assert s.run.planning_gate is False
    assert s.log.synchronous == "FULL"
    assert s.log.url == "sqlite:///x.db"
    assert s.tools.timeout == 1.5
    assert s.llm_max_concurrency == 8


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("false", False), ("0", False)],
)
def test_env_booleans(raw: str, expected: bool) -> None:
    """Booleans come from true/false/1/0, in any case."""
    env = {"STEWARD_RUN_PLANNING_GATE": raw}
    assert load_settings(None, env=env).run.planning_gate is expected


def test_env_overrides_named_tables(tmp_path: Path) -> None:
    """STEWARD_MODELS_<NAME>_<KEY> and STEWARD_AGENTS_<NAME>_<KEY> set table keys."""
    path = write(tmp_path, '[models.Fast_One]\nprovider = "scripted"\n')
    env = {
        "STEWARD_MODELS_DEFAULT_SCRIPT": "demo.yaml",
        "STEWARD_MODELS_FAST_ONE_MAX_RETRIES": "5",
        "STEWARD_MODELS_DEFAULT_TEMPERATURE": "",
        "STEWARD_AGENTS_HELPER_TOOLS": "files.read, files.list",
        "STEWARD_AGENTS_HELPER_MODEL": "Fast_One",
    }
    s = load_settings(path, env=env)
    assert s.models["default"].script == "demo.yaml"
    assert s.models["default"].temperature is None
    assert s.models["Fast_One"].max_retries == 5
    assert s.agents["helper"].tools == ["files.read", "files.list"]
    assert s.agents["helper"].model == "Fast_One"


def test_bad_toml_value_names_file_key_and_type(tmp_path: Path) -> None:
    """A wrongly typed value names the file, the dotted key and the expected type."""
    path = write(tmp_path, '[run]\nmax_iterations = "abc"\n')
    with pytest.raises(
        ConfigError, match=r'run\.max_iterations: expected int, got str "abc"'
    ):
        load_settings(path, env={})
    try:
        load_settings(path, env={})
    except ConfigError as e:
        assert e.source == str(path)
        assert e.key == "run.max_iterations"
        assert str(e).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("toml", "pattern"),
    [
        (
            "[run]\nmax_iterations = 0\n",
            r"run\.max_iterations: expected int >= 1, got int 0",
        ),
        (
            '[log]\nsynchronous = "SOMETIMES"\n',
            r'log\.synchronous: expected one of "NORMAL"',
        ),
        (
            '[models.fast]\ntimeout = "x"\n',
            r'models\.fast\.timeout: expected float, got str "x"',
        ),
        (
            "[agents.a]\ntools = [1]\n",
            r"agents\.a\.tools\[0\]: expected str, got int 1",
        ),
        ("run = 3\n", r"run: expected table, got int 3"),
        ("[models]\nfast = 3\n", r"models\.fast: expected table, got int 3"),
    ],
)
def test_bad_toml_values_are_explained(tmp_path: Path, toml: str, pattern: str) -> None:
    """Constraint, choice, nested-table and list errors name the exact key."""
    path = write(tmp_path, toml)
    with pytest.raises(ConfigError, match=pattern):
        load_settings(path, env={})


def test_unknown_toml_keys_are_rejected(tmp_path: Path) -> None:
    """A misspelt key is an error listing the keys that exist there."""
    path = write(tmp_path, "[run]\nmax_iteration = 3\n")
    with pytest.raises(
        ConfigError, match=r"run\.max_iteration: unknown key; .*max_iterations"
    ):
        load_settings(path, env={})
    path = write(tmp_path, "[runn]\n")
    with pytest.raises(
        ConfigError, match=r"runn: unknown key; expected one of: agents"
    ):
        load_settings(path, env={})
    path = write(tmp_path, "[models.x]\nscrpt = 'a.yaml'\n")
    with pytest.raises(ConfigError, match=r"models\.x\.scrpt: unknown key; .*script"):
        load_settings(path, env={})


def test_bad_env_value_names_the_variable() -> None:
    """A bad environment value names the variable, the key and the expected type."""
    env = {"STEWARD_RUN_MAX_ITERATIONS": "abc"}
    with pytest.raises(
        ConfigError,
        match=r"^environment variable STEWARD_RUN_MAX_ITERATIONS: run\.max_iterations: "
        r'expected int, got str "abc"$',
    ):
        load_settings(None, env=env)
    with pytest.raises(
        ConfigError, match=r"STEWARD_RUN_PLANNING_GATE: .*expected bool"
    ):
        load_settings(None, env={"STEWARD_RUN_PLANNING_GATE": "maybe"})
    with pytest.raises(ConfigError, match=r"STEWARD_LOG_SYNCHRONOUS: .*one of"):
        load_settings(None, env={"STEWARD_LOG_SYNCHRONOUS": "SOMETIMES"})


def test_unknown_env_variables_are_rejected() -> None:
    """A STEWARD_* variable that names no setting is an error, not silently ignored."""
    with pytest.raises(
        ConfigError, match=r"STEWARD_RUN_MAX_ITERATION: run\.max_iteration: unknown"
    ):
        load_settings(None, env={"STEWARD_RUN_MAX_ITERATION": "3"})
    with pytest.raises(ConfigError, match=r"STEWARD_RUNS_X: .*not a setting"):
        load_settings(None, env={"STEWARD_RUNS_X": "3"})
    with pytest.raises(ConfigError, match=r"STEWARD_MODELS_DEFAULT: .*<NAME>_<KEY>"):
        load_settings(None, env={"STEWARD_MODELS_DEFAULT": "x"})


def test_unknown_env_variables_are_left_out_and_reported_once_when_asked() -> None:
    """Given ``unknown``, the variables that name no setting are reported in
    one line, each with what it should be, and left out; the others apply."""
    said: list[str] = []
    settings = load_settings(
        None,
        env={"STEWARD_RUNS_X": "3", "STEWARD_RUN_MAX_ITERATIONS": "5"},
        unknown=said.append,
    )
    assert settings.run.max_iterations == 5
    assert said == [
        "ignoring environment variable STEWARD_RUNS_X: runs_x: not a setting; use "
        "STEWARD_<SECTION>_<KEY> with SECTION one of AGENTS, CHANNELS, CONSOLE, "
        "LOG, MCP, METRICS, MODELS, OTEL, OUTBOUND, RUN, SESSION, TASK, TOOLS, "
        "WORKFLOW, or STEWARD_LLM_MAX_CONCURRENCY"
    ]
    said.clear()
    env = {"STEWARD_RUNS_X": "3", "STEWARD_RUN_MAX_ITERATION": "3"}
    assert load_settings(None, env=env, unknown=said.append) == Settings()
    (line,) = said
    assert line.startswith("ignoring environment variables that name no setting: ")
    assert "STEWARD_RUNS_X (runs_x: not a setting; " in line
    assert (
        "STEWARD_RUN_MAX_ITERATION (run.max_iteration: unknown key; expected one "
        "of: " in line
    )
    assert "\n" not in line
    assert load_settings(None, env={}, unknown=said.append) == Settings()
    assert len(said) == 1  # nothing to report: not called


def test_invalid_toml_syntax_names_file_and_line(tmp_path: Path) -> None:
    """Broken TOML is reported with the file and the line of the problem."""
    path = write(tmp_path, "[run]\nmax_iterations = \n")
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(path))}: line 2: invalid TOML: "
    ):
        load_settings(path, env={})


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    """A settings path that was given but does not exist is named in the error."""
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: .*no such file"):
        load_settings(path, env={})


# -- run settings -------------------------------------------------------------


def test_run_settings_for_a_profile(tmp_path: Path) -> None:
    """A profile's RunSettings combine its model, its overrides and [run]."""
    path = write(
        tmp_path,
        """
[run]
max_iterations = 9
max_tool_call_rounds = 4

[models.big]
provider = "scripted"
model = "big-1"
temperature = 0.3
max_tokens = 500

[agents.reviewer]
model = "big"
protocol = "native"
system_prompt = "Review."
tools = ["files.read"]
max_tool_call_rounds = 2
""",
    )
    s = load_settings(path, env={})
    specs = (ToolSpec(name="files.read"), ToolSpec(name="files.write"))
    rs = s.run_settings("reviewer", specs)
    assert rs == RunSettings(
        model="big-1",
        system_prompt="Review.",
        protocol="native",
        tools=(ToolSpec(name="files.read"),),
        temperature=0.3,
        max_tokens=500,
        max_iterations=9,
        max_tool_call_rounds=2,
        profiles=("default", "reviewer"),
        revision=LATEST_REVISION,
    )
    default = s.run_settings("default", specs)
    assert default.tools == specs
    assert default.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert default.max_tool_call_rounds == 4
    assert default.model == "scripted"
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(rs), type=RunSettings) == rs


def test_unknown_profile_lists_known_profiles(tmp_path: Path) -> None:
    """Asking for a profile that does not exist lists the ones that do."""
    path = write(tmp_path, "[agents.reviewer]\n[agents.coder]\n")
    s = load_settings(path, env={})
    with pytest.raises(
        ConfigError,
        match=r"agents\.writer: no such agent profile; known profiles: "
        r"coder, default, reviewer$",
    ):
        s.run_settings("writer")


def test_profile_naming_a_missing_model_is_an_error(tmp_path: Path) -> None:
    """A profile whose model has no [models.<name>] table says which models exist."""
    path = write(tmp_path, '[agents.x]\nmodel = "ghost"\n')
    s = load_settings(path, env={})
    with pytest.raises(
        ConfigError, match=r"agents\.x\.model: names model 'ghost'.*default"
    ):
        s.run_settings("x")


@pytest.mark.parametrize(
    ("env", "provider"),
    [
        ({}, "scripted"),
        ({"ANTHROPIC_API_KEY": "k"}, "anthropic"),
        ({"OPENAI_API_KEY": "k"}, "openai"),
        ({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, "anthropic"),
        ({"ANTHROPIC_API_KEY": ""}, "scripted"),
    ],
)
def test_a_key_in_the_environment_picks_the_default_model(
    env: dict[str, str], provider: str
) -> None:
    """With no [models.default], ANTHROPIC_API_KEY or OPENAI_API_KEY picks it."""
    model = load_settings(None, env=env).models["default"]
    assert model.provider == provider
    assert (model.model != "") == (provider != "scripted")


def test_a_configured_default_model_wins_over_keys(tmp_path: Path) -> None:
    config = tmp_path / "steward.toml"
    config.write_text('[models.default]\nprovider = "openai"\nmodel = "local"\n')
    env = {"ANTHROPIC_API_KEY": "k"}
    assert load_settings(config, env=env).models["default"].model == "local"
    env = {"ANTHROPIC_API_KEY": "k", "STEWARD_MODELS_DEFAULT_SCRIPT": "s.yaml"}
    assert load_settings(None, env=env).models["default"].provider == "scripted"


# -- tool approval --------------------------------------------------------------


def test_require_approval_marks_those_tools_in_run_settings(tmp_path: Path) -> None:
    """`[tools] require_approval` makes the named tools ask for approval."""
    path = write(tmp_path, '[tools]\nrequire_approval = ["files.write"]\n')
    s = load_settings(path, env={})
    specs = (ToolSpec(name="files.read"), ToolSpec(name="files.write"))
    assert s.run_settings("default", specs).tools == (
        ToolSpec(name="files.read"),
        ToolSpec(name="files.write", requires_approval=True),
    )


def test_require_approval_from_the_environment_overrides_the_file(
    tmp_path: Path,
) -> None:
    """STEWARD_TOOLS_REQUIRE_APPROVAL is a comma-separated list replacing the file's."""
    path = write(tmp_path, '[tools]\nrequire_approval = ["files.write"]\n')
    env = {"STEWARD_TOOLS_REQUIRE_APPROVAL": "files.read, files.list"}
    assert load_settings(path, env=env).tools.require_approval == [
        "files.read",
        "files.list",
    ]
    env = {"STEWARD_TOOLS_REQUIRE_APPROVAL": ""}
    assert load_settings(path, env=env).tools.require_approval == []


def test_require_approval_of_an_unknown_tool_names_file_key_and_tools(
    tmp_path: Path,
) -> None:
    """An unknown tool in require_approval is one error naming the file, the key
    and the known tools."""
    path = write(tmp_path, '[tools]\nrequire_approval = ["files.write", "shell"]\n')
    with pytest.raises(
        ConfigError,
        match=rf"^{re.escape(str(path))}: tools\.require_approval\[1\]: no tool "
        r"'shell'; known tools: files\.list, files\.read, files\.write$",
    ):
        load_settings(path, env={}, tools=APPROVABLE)


def test_require_approval_of_an_unknown_tool_names_the_variable() -> None:
    """An unknown tool given in the environment names the variable, not a file."""
    env = {"STEWARD_TOOLS_REQUIRE_APPROVAL": "files.remove"}
    with pytest.raises(
        ConfigError,
        match=r"^environment variable STEWARD_TOOLS_REQUIRE_APPROVAL: "
        r"tools\.require_approval\[0\]: no tool 'files\.remove'; known tools: ",
    ):
        load_settings(None, env=env, tools=APPROVABLE)


def test_run_settings_record_the_configured_profiles(tmp_path: Path) -> None:
    """RunSettings carry the names of every [agents] profile, for spawn checks."""
    path = write(tmp_path, "[agents.writer]\n[agents.coder]\n")
    s = load_settings(path, env={})
    assert s.run_settings("writer").profiles == ("coder", "default", "writer")


def test_a_claim_must_outlive_the_longest_call() -> None:
    """check_claims refuses a claim_seconds below a model's timeout × attempts
    or the tools' timeout, naming both settings and their values."""
    ok = load_settings(None, env={"STEWARD_LOG_CLAIM_SECONDS": "180"})
    ok.check_claims()  # 60 s × 3 attempts, and tools 30 s: just long enough
    short = load_settings(
        None,
        env={
            "STEWARD_LOG_CLAIM_SECONDS": "8",
            "STEWARD_MODELS_DEFAULT_TIMEOUT": "4",
            "STEWARD_MODELS_DEFAULT_MAX_RETRIES": "1",
        },
    )
    with pytest.raises(
        ConfigError,
        match=r"log.claim_seconds: 8 is below tools.timeout = 30: ",
    ):
        short.check_claims()
    with pytest.raises(
        ConfigError,
        match=r"log.claim_seconds: 7 is below models.default.timeout × "
        r"\(max_retries \+ 1\) = 4 × 2 = 8: ",
    ):
        msgspec.structs.replace(
            short, log=msgspec.structs.replace(short.log, claim_seconds=7.0)
        ).check_claims()


def test_a_subagent_model_must_be_a_configured_model(tmp_path: Path) -> None:
    """``[session] subagent_model`` names a ``[models]`` table, or the
    session settings are refused naming the known ones."""
    settings = load_settings(
        write(tmp_path, '[models.small]\n[session]\nsubagent_model = "small"\n'), {}
    )
    assert settings.session_settings().subagent_model == "small"
    bad = load_settings(write(tmp_path, '[session]\nsubagent_model = "huge"\n'), {})
    with pytest.raises(ConfigError, match=r"session\.subagent_model: .*known models"):
        bad.session_settings()
