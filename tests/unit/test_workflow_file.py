"""A workflow file (TOML or YAML) loads into the definition it holds, or fails
with one line naming the file, the place (node, edge, field or line) and what
is wrong; the settings say which providers and profiles exist."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from workflow_files import EXAMPLE, HEAD, edge, node

from steward.actors.workflow.definition import created, load_definition
from steward.config import AgentProfile, ModelConfig, Settings
from steward.config.settings import WorkflowConfig
from steward.errors import WorkflowFileError


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Files are written and named relative to a fresh directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def problem(text: str, name: str = "wf.toml", settings: Settings | None = None) -> str:
    """The one-line message loading ``text`` as file ``name`` fails with."""
    Path(name).write_text(text, encoding="utf-8")
    with pytest.raises(WorkflowFileError) as caught:
        load_definition(name, settings or Settings())
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    assert caught.value.file == name
    return message


# --- files that load ----------------------------------------------------------


def test_the_example_loads_with_its_nodes_and_edges_in_file_order() -> None:
    """The example is design-implement-review v1: three nodes, four edges."""
    definition = load_definition(EXAMPLE, Settings())
    assert (definition.key, definition.version) == ("design-implement-review", 1)
    assert definition.name == "Design, implement, review"
    assert [n.key for n in definition.nodes] == ["design", "implement", "review"]
    assert [n.provider for n in definition.nodes] == ["default"] * 3
    assert [n.max_retries for n in definition.nodes] == [1, 1, 0]
    assert [(e.source, e.target, e.priority) for e in definition.edges] == [
        ("design", "implement", 1),
        ("implement", "design", 1),
        ("implement", "review", 2),
        ("review", "implement", 1),
    ]
    assert definition.edges[1].when == "report.needs_revision == true"
    assert definition.edges[0].auto and not definition.edges[1].auto


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_the_example_written_as_yaml_loads_the_same(suffix: str) -> None:
    """The same data as YAML (.yaml or .yml) is the same definition."""
    data = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    file = Path("example" + suffix)
    file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert load_definition(file, Settings()) == load_definition(EXAMPLE, Settings())


def test_one_priority_on_two_sources_is_no_clash() -> None:
    """Priorities must be distinct per source only: a -> b and b -> a both 1."""
    text = HEAD + node("a") + node("b") + edge("a", "b", 1) + edge("b", "a", 1)
    Path("wf.toml").write_text(text)
    assert len(load_definition("wf.toml", Settings()).edges) == 2


def test_without_settings_providers_and_profiles_are_not_looked_up() -> None:
    """Settings are optional: with none, an unconfigured provider loads."""
    Path("wf.toml").write_text(HEAD + node("a", provider="gpt", profile="x"))
    assert load_definition("wf.toml").nodes[0].provider == "gpt"


# --- the graph ----------------------------------------------------------------


def test_a_duplicate_node_key_names_the_second_node_and_the_first() -> None:
    """Two nodes keyed alike: the second is named, with the node that has it."""
    assert problem(HEAD + node("a") + node("b") + node("a")) == (
        'wf.toml: node 3 "a": duplicate key: node 1 has it'
    )


def test_a_duplicate_priority_on_one_source_names_both_edges() -> None:
    """Two edges of one source with one priority: the later edge is named."""
    text = HEAD + node("a") + node("b") + node("c")
    text += edge("a", "b", 2) + edge("a", "c", 2)
    assert problem(text) == (
        "wf.toml: edge 2 (a -> c): priority 2 is edge 1's too; the edges of one "
        "source need distinct priorities"
    )


@pytest.mark.parametrize(
    ("source", "target", "end"),
    [("a", "nowhere", "target"), ("nowhere", "a", "source")],
)
def test_an_edge_with_an_unknown_end_names_the_edge_and_the_end(
    source: str, target: str, end: str
) -> None:
    """An edge to or from no node names which end is unknown."""
    assert problem(HEAD + node("a") + edge(source, target)) == (
        f"wf.toml: edge 1 ({source} -> {target}): its {end} 'nowhere' is no node"
    )


@pytest.mark.parametrize("provider", [None, ""], ids=["missing", "empty"])
def test_an_agent_node_without_a_provider_is_refused(provider: str | None) -> None:
    """An agent node needs a provider; an empty one is reported once."""
    assert problem(HEAD + node("a", provider=provider)) == (
        'wf.toml: node 1 "a": an agent node needs a provider (a [models] name)'
    )


def test_a_guard_that_does_not_parse_names_the_edge_and_its_column() -> None:
    """A guard's syntax error gives its column."""
    text = HEAD + node("a") + node("b") + edge("a", "b", when="decision === 1")
    assert problem(text) == (
        "wf.toml: edge 1 (a -> b): its guard 'decision === 1' does not parse at "
        "column 12: unexpected '='"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"auto": True, "when": "attempt < 3"},
            "it is auto and has a guard; give it one of them",
        ),
        ({"auto": False}, "it needs auto = true or a when guard"),
    ],
    ids=["both", "neither"],
)
def test_an_edge_is_either_auto_or_guarded(
    fields: dict[str, Any], message: str
) -> None:
    """An edge both auto and guarded, or neither, is refused."""
    text = HEAD + node("a") + node("b") + edge("a", "b", **fields)
    assert problem(text) == f"wf.toml: edge 1 (a -> b): {message}"


def test_a_node_key_with_bad_characters_says_which_are_allowed() -> None:
    """Node keys are lower-case letters, digits, _ and -."""
    assert problem(HEAD + node("Review!")) == (
        "wf.toml: node 1 \"Review!\": key 'Review!' must be lower-case letters, "
        "digits, _ and -, starting with a letter or digit"
    )


def test_version_0_is_refused() -> None:
    """Versions start at 1."""
    text = '[workflow]\nkey = "w"\nversion = 0\n' + node("a")
    assert problem(text) == "wf.toml: workflow: version is 0; it starts at 1"


def test_a_workflow_without_nodes_is_refused() -> None:
    """A run starts at the first node, so there must be one."""
    assert problem(HEAD) == (
        "wf.toml: workflow: it has no nodes; a run starts at the first"
    )


def test_several_problems_report_the_first_and_count_the_rest() -> None:
    """The first problem in file order, then ``(and N more)``."""
    text = HEAD + node("a") + node("a") + node("B") + edge("a", "zz", when="(")
    assert problem(text) == (
        'wf.toml: node 2 "a": duplicate key: node 1 has it (and 3 more)'
    )


# --- fields -------------------------------------------------------------------


def test_an_unknown_node_field_names_the_node_and_the_fields_it_has() -> None:
    """``retries`` is no field of a node: the node is named by number and key."""
    assert problem(HEAD + node("a") + node("b", retries=2)) == (
        'wf.toml: node 2 "b": unknown field `retries`; the fields are key, type, '
        "provider, profile, prompt, max_retries"
    )


def test_an_unknown_workflow_field_names_the_workflow_table() -> None:
    """A misspelt ``[workflow]`` field is named with the table's fields."""
    text = '[workflow]\nkey = "w"\nversoin = 1\n' + node("a")
    assert problem(text) == (
        "wf.toml: workflow: unknown field `versoin`; the fields are key, version, "
        "name, max_steps"
    )


def test_an_unknown_table_at_the_top_names_the_files_tables() -> None:
    """A top-level key other than workflow, nodes, edges and git is refused."""
    assert problem("steps = 1\n" + HEAD + node("a")) == (
        "wf.toml: (file): unknown field `steps`; the fields are workflow, nodes, "
        "edges, git"
    )


def test_a_wrong_type_names_the_node_and_the_field() -> None:
    """``max_retries = "two"`` is no integer: node and field are named."""
    assert problem(HEAD + node("a", max_retries="two")) == (
        'wf.toml: node 1 "a", field max_retries: Expected `int`, got `str`'
    )


def test_a_wrong_type_in_an_edge_names_the_edge_and_the_field() -> None:
    """A priority that is a string names the edge by its ends."""
    text = HEAD + node("a") + node("b")
    text += '[[edges]]\nsource = "a"\ntarget = "b"\npriority = "1"\nauto = true\n'
    assert problem(text) == (
        "wf.toml: edge 1 (a -> b), field priority: Expected `int`, got `str`"
    )


def test_a_missing_required_field_is_named() -> None:
    """A node with no key is named by its number."""
    assert problem(HEAD + '[[nodes]]\nprovider = "default"\n') == (
        "wf.toml: node 1: missing required field `key`"
    )


def test_a_key_holding_a_newline_still_makes_one_line() -> None:
    """A newline in a node's key is shown escaped, not broken across lines."""
    text = 'workflow: {key: w, version: 1}\nnodes:\n  - {key: "a\\nb"}\n'
    assert problem(text, "wf.yaml") == (
        "wf.yaml: node 1 \"a\\nb\": key 'a\\nb' must be lower-case letters, "
        "digits, _ and -, starting with a letter or digit (and 1 more)"
    )


# --- the file -----------------------------------------------------------------


def test_invalid_toml_names_its_line_and_column() -> None:
    """TOML that does not parse gives the line and column tomllib found."""
    assert problem(HEAD + "[[nodes]\n") == (
        "wf.toml: line 4, column 8: invalid TOML: Expected ']]' at the end of an "
        "array declaration"
    )


def test_invalid_yaml_names_its_line_and_column() -> None:
    """YAML that does not parse gives the line and column PyYAML found."""
    text = "workflow:\n  key: w\n  version: 1\nnodes: [\n"
    assert problem(text, "wf.yaml") == (
        "wf.yaml: line 5, column 1: invalid YAML: expected the node content, but "
        "found '<stream end>'"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "is empty; it needs a workflow table"), ("- a\n", "is no mapping of tables")],
    ids=["empty", "list"],
)
def test_a_yaml_file_must_be_a_mapping(text: str, message: str) -> None:
    """An empty YAML file, or one holding a list, is refused as a whole."""
    assert problem(text, "wf.yaml") == f"wf.yaml: (file): {message}"


def test_a_file_that_does_not_exist_is_named() -> None:
    """A missing file fails as the file's problem, not a traceback."""
    with pytest.raises(WorkflowFileError) as caught:
        load_definition("absent.toml", Settings())
    assert str(caught.value) == "absent.toml: (file): no such file"


def test_a_file_of_another_extension_says_which_are_read() -> None:
    """Only .toml, .yaml and .yml are read, whatever the content."""
    assert problem(json.dumps({"workflow": {}}), "wf.json") == (
        "wf.json: (file): is neither TOML (.toml) nor YAML (.yaml, .yml)"
    )


# --- settings -----------------------------------------------------------------


def test_a_provider_no_models_table_names_lists_the_configured_ones() -> None:
    """A provider must be a ``[models.<name>]`` table; the known ones are listed."""
    settings = Settings(models={"default": ModelConfig(), "fast": ModelConfig()})
    assert problem(HEAD + node("a", provider="gpt"), settings=settings) == (
        "wf.toml: node 1 \"a\": provider 'gpt' is no [models] table (default, fast)"
    )


def test_an_unknown_profile_lists_the_configured_ones() -> None:
    """A node's profile must be an ``[agents.<name>]`` profile."""
    settings = Settings(agents={"default": AgentProfile(), "coder": AgentProfile()})
    assert problem(HEAD + node("a", profile="reviewer"), settings=settings) == (
        "wf.toml: node 1 \"a\": profile 'reviewer' is no [agents] profile "
        "(coder, default)"
    )


def test_a_run_needs_a_value_for_each_input_the_prompts_name() -> None:
    """``{input.feature}`` with no value names the input and ``--input``."""
    definition = load_definition(EXAMPLE, Settings())
    with pytest.raises(WorkflowFileError) as caught:
        created(definition, Settings(), "wf-1", {}, file="x.toml")
    assert str(caught.value) == (
        "x.toml: inputs: no value for feature: pass --input feature=VALUE"
    )
    first = created(definition, Settings(), "wf-1", {"feature": "a /health"})
    assert first.inputs == {"feature": "a /health"}


# --- the bound on phase executions ----------------------------------------------


def test_max_steps_is_the_files_else_the_settings() -> None:
    """``[workflow] max_steps`` of the file bounds a run created of it;
    without one, the settings' ``[workflow] max_steps`` is recorded (1000
    unless set), so the run keeps the bound it was created with."""
    Path("bounded.toml").write_text(
        '[workflow]\nkey = "w"\nversion = 1\nmax_steps = 7\n' + node("a")
    )
    bounded = load_definition("bounded.toml", Settings())
    assert bounded.max_steps == 7
    assert created(bounded, Settings(), "wf-1", {}).definition.max_steps == 7
    Path("open.toml").write_text(HEAD + node("a"))
    unbounded = load_definition("open.toml", Settings())
    assert unbounded.max_steps is None
    assert created(unbounded, Settings(), "wf-1", {}).definition.max_steps == 1000
    settings = Settings(workflow=WorkflowConfig(max_steps=50))
    assert created(unbounded, settings, "wf-1", {}).definition.max_steps == 50


def test_a_max_steps_below_1_is_refused() -> None:
    """A bound of 0 phase executions would start nothing: refused."""
    text = '[workflow]\nkey = "w"\nversion = 1\nmax_steps = 0\n' + node("a")
    assert problem(text) == "wf.toml: workflow: max_steps is 0; at least 1"
