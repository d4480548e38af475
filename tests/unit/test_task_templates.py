"""Atomic task templates (spec 002): a call fills only its declared
parameters; a template file loads into its template or names each problem
with its file, line and column; context settings follow the operator's
defaults and explicit overrides, never both fresh and inherited context; a
subtask request gets the highest-scoring template it can call."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from steward.actors.task.events import ContextManagement, SubtaskRequest, Template
from steward.actors.task.programs import (
    Problem,
    load_template,
    load_templates,
    template_dir_problems,
    template_file_problems,
)
from steward.actors.task.templates import (
    DEFAULTS,
    Resolved,
    TemplateError,
    context_problem,
    match,
    placeholders,
    render_value,
    resolve_context,
    score,
    substitute,
    template_problems,
)
from steward.errors import ConfigError


def template(name: str = "t", **fields: Any) -> Template:
    fields.setdefault("instructions", "do it")
    return Template(name=name, **fields)


def request(**fields: Any) -> SubtaskRequest:
    fields.setdefault("type", "atomic")
    fields.setdefault("description", "")
    return SubtaskRequest(**fields)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# --- placeholders and substitution ----------------------------------------------


def test_placeholders_are_found_with_their_offsets_in_order() -> None:
    """Each ``{{ name }}`` (spaces allowed) is listed with the offset of its
    ``{{``; names may hold letters, digits, _, - and ."""
    text = "a {{x}} b {{ y.z-1 }} {{x}} {{ not a name }}"
    assert placeholders(text) == [("x", 2), ("y.z-1", 10), ("x", 22)]


def test_substitute_fills_each_placeholder_from_the_params() -> None:
    """Every placeholder is replaced by its parameter's rendered value."""
    text = "Summarize {{ path }} in {{n}} lines; {{path}} again"
    assert substitute(text, {"path": "a.py", "n": 3}) == (
        "Summarize a.py in 3 lines; a.py again"
    )


def test_substitute_refuses_a_placeholder_that_is_not_a_param() -> None:
    """A placeholder naming no parameter raises, naming it and the params:
    the caller's other variables are never looked at."""
    with pytest.raises(TemplateError, match=r"\{\{topic\}\} is not a parameter") as e:
        substitute("Write about {{topic}} for {{who}}", {"who": "me", "x": 1})
    assert e.value.placeholder == "topic"
    assert "parameters: who, x" in str(e.value)


def test_substitute_does_not_fill_placeholders_inside_values() -> None:
    """A value holding ``{{...}}`` goes in as it is: only the template's own
    text is filled, so a value cannot reach other parameters."""
    filled = substitute("{{a}} / {{b}}", {"a": "{{b}}", "b": "secret"})
    assert filled == "{{b}} / secret"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("text {{x}}", "text {{x}}"),
        (None, ""),
        (True, "true"),
        (False, "false"),
        (42, "42"),
        (2.5, "2.5"),
        ([1, "a", None], '[1,"a",null]'),
        ((1, 2), "[1,2]"),
        ({"b": 1, "a": {"d": True, "c": [1]}}, '{"a":{"c":[1],"d":true},"b":1}'),
    ],
)
def test_render_value_writes_each_type_as_a_prompt_shows_it(
    value: Any, written: str
) -> None:
    """Text as is, None as nothing, bools and numbers as words, the rest as
    compact JSON with sorted keys."""
    assert render_value(value) == written


def test_render_value_refuses_what_has_no_json_form() -> None:
    """An object with no JSON form raises, naming its type."""
    with pytest.raises(TemplateError, match="a object cannot be written"):
        render_value(object())


# --- the checks of a template ---------------------------------------------------


def test_a_good_template_has_no_problems() -> None:
    """Declared params used as placeholders, limits of 1 or more: no problems."""
    good = template(
        "summarize:v1",
        params=("path", "focus"),
        instructions="Summarize {{path}} for {{ focus }}",
        system="You read {{path}}",
        max_turns=1,
        max_tokens=100,
    )
    assert template_problems(good) == []


def test_template_problems_names_each_problem() -> None:
    """Every problem is one sentence led by its key: a bad name, a bad or
    repeated param, an undeclared placeholder (naming the params), a limit
    below 1, contradictory context settings."""
    bad = template(
        "1bad name",
        params=("a", "b", "a", "no good"),
        instructions="{{topic}} and {{a}} and {{topic}}",
        system="{{who}}",
        max_turns=0,
        max_tokens=-5,
        context=ContextManagement(inherit_context="subset", fresh_context="enabled"),
    )
    problems = template_problems(bad)
    assert problems[0].startswith("name: '1bad name' is not a valid template name")
    assert problems[1:] == [
        "params: 'a' is declared twice",
        problems[2],
        "instructions: {{topic}} is not a declared parameter "
        "(params: a, b, a, no good)",
        "system: {{who}} is not a declared parameter (params: a, b, a, no good)",
        "max_turns: is 0; it must be 1 or more",
        "max_tokens: is -5; it must be 1 or more",
        problems[7],
    ]
    assert problems[2].startswith("params: 'no good' is not a valid parameter name")
    assert "mutually exclusive" in problems[7]
    assert problems[7].startswith("context_management: ")
    assert template_problems(template("")) == ["name: is empty; name the template"]


# --- template files ---------------------------------------------------------------


def test_a_toml_file_loads_into_its_template(tmp_path: Path) -> None:
    """Every key is read; the name is the stem unless given; the context
    table maps to ``context``; ``source`` is the path as given."""
    path = write(
        tmp_path,
        "summarize.toml",
        'params = ["path"]\n'
        'instructions = "Summarize {{path}}"\n'
        'matches = ["summary"]\n'
        "max_turns = 3\n"
        "[context_management]\n"
        'fresh_context = "enabled"\n'
        'inherit_context = "none"\n',
    )
    loaded = load_template(path)
    assert loaded == Template(
        name="summarize",
        params=("path",),
        instructions="Summarize {{path}}",
        matches=("summary",),
        max_turns=3,
        context=ContextManagement(fresh_context="enabled", inherit_context="none"),
        source=str(path),
    )


def test_an_undeclared_placeholder_is_placed_in_a_toml_file(tmp_path: Path) -> None:
    """The problem names the file, and the line and column of the
    placeholder's ``{{`` (after its key), and the template is still built."""
    path = write(
        tmp_path,
        "t.toml",
        'name = "t"\n'
        'params = ["a"]\n'
        'instructions = """\n'
        "Use {{a}}\n"
        "and {{ topic }} here.\n"
        '"""\n',
    )
    built, problems = template_file_problems(path)
    assert built is not None and built.name == "t"
    assert problems == [
        Problem(
            file=str(path),
            line=5,
            column=5,
            message="instructions: {{topic}} is not a declared parameter (params: a)",
        )
    ]
    assert str(problems[0]) == (
        f"{path}:5:5: instructions: {{{{topic}}}} is not a declared parameter "
        "(params: a)"
    )
    with pytest.raises(ConfigError) as e:
        load_template(path)
    assert str(e.value) == str(problems[0])


def test_an_undeclared_placeholder_is_placed_in_a_yaml_file(tmp_path: Path) -> None:
    """In YAML too; a placeholder of ``system`` is placed in the system text
    even where ``instructions`` uses the same name first."""
    path = write(
        tmp_path,
        "t.yaml",
        "name: t\n"
        "params: [x]\n"
        "instructions: |\n"
        "  Do {{x}} for {{ who }}.\n"
        'system: "You serve {{who}}"\n',
    )
    _, problems = template_file_problems(path)
    assert [(p.line, p.column, p.message) for p in problems] == [
        (4, 16, "instructions: {{who}} is not a declared parameter (params: x)"),
        (5, 20, "system: {{who}} is not a declared parameter (params: x)"),
    ]


def test_an_unknown_key_is_named_at_its_line(tmp_path: Path) -> None:
    """A key that is no template field, at the top or in the context table,
    is a problem naming it, at its line."""
    path = write(
        tmp_path,
        "t.toml",
        'instructions = "x"\ncolour = "red"\n[context_management]\nbogus = 1\n',
    )
    built, problems = template_file_problems(path)
    assert [(p.line, p.column) for p in problems] == [(2, 1), (4, 1)]
    assert problems[0].message.startswith("colour: unknown key; the keys are name,")
    assert problems[1].message.startswith("context_management.bogus: unknown key")
    assert built is not None  # the rest is checked as well
    with pytest.raises(ConfigError, match=r"t\.toml:2:1: colour: unknown key"):
        load_template(path)


def test_a_wrong_type_is_named_at_its_key(tmp_path: Path) -> None:
    """A value of the wrong type names its key (the context's as the file
    writes it) and its line; no template is built."""
    path = write(tmp_path, "t.toml", 'instructions = "x"\nmax_turns = "3"\n')
    built, problems = template_file_problems(path)
    assert built is None
    assert [str(p) for p in problems] == [
        f"{path}:2:1: max_turns: expected `int | null`, got `str`"
    ]
    path = write(
        tmp_path,
        "u.yaml",
        "instructions: x\ncontext_management:\n  fresh_context: yes please\n",
    )
    _, problems = template_file_problems(path)
    assert [(p.line, p.column) for p in problems] == [(3, 3)]
    assert problems[0].message.startswith("context_management.fresh_context: ")


def test_a_missing_instructions_is_a_problem(tmp_path: Path) -> None:
    """A file without ``instructions`` names the key it lacks."""
    path = write(tmp_path, "t.toml", 'name = "t"\n')
    built, problems = template_file_problems(path)
    assert built is None
    assert [str(p) for p in problems] == [
        f"{path}:1:1: instructions: is missing; every template has it"
    ]


def test_bad_toml_syntax_is_placed(tmp_path: Path) -> None:
    """A TOML syntax error gives the parser's line and column."""
    path = write(tmp_path, "t.toml", 'instructions = "x"\nname "t"\n')
    built, problems = template_file_problems(path)
    assert built is None
    assert len(problems) == 1
    assert (problems[0].line, problems[0].column) == (2, 6)
    assert problems[0].message.startswith("invalid TOML: Expected '='")


def test_bad_yaml_syntax_is_placed(tmp_path: Path) -> None:
    """A YAML syntax error gives the parser's line and column, 1-based."""
    path = write(tmp_path, "t.yaml", "name: t\nparams: [x\ninstructions: y\n")
    built, problems = template_file_problems(path)
    assert built is None
    assert [(p.line, p.column) for p in problems] == [(3, 13)]
    assert problems[0].message.startswith("invalid YAML: ")


def test_a_yaml_file_that_is_no_mapping_is_a_problem(tmp_path: Path) -> None:
    """An empty YAML file, or one holding a list, says so."""
    empty = write(tmp_path, "e.yaml", "")
    listed = write(tmp_path, "l.yml", "- a\n- b\n")
    assert [p.message for p in template_file_problems(empty)[1]] == [
        "file: is empty; a template needs at least its instructions"
    ]
    assert [p.message for p in template_file_problems(listed)[1]] == [
        "file: holds a list, not a mapping of a template's keys"
    ]


def test_a_directory_loads_its_templates_sorted_by_name(tmp_path: Path) -> None:
    """Every .toml, .yaml and .yml file directly in the directory is read;
    other files and subdirectories are not; the templates come by name."""
    write(tmp_path, "z.toml", 'name = "alpha"\ninstructions = "a"\n')
    write(tmp_path, "b.yaml", "instructions: b\n")
    write(tmp_path, "c.yml", "name: c\ninstructions: c\n")
    write(tmp_path, "notes.txt", "not a template")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "d.toml", 'instructions = "d"\n')
    loaded = load_templates(tmp_path)
    assert [t.name for t in loaded] == ["alpha", "b", "c"]
    assert template_dir_problems(tmp_path) == []


def test_two_files_defining_one_name_is_an_error(tmp_path: Path) -> None:
    """A name defined twice names both files, at the second file's name key."""
    first = write(tmp_path, "a.toml", 'instructions = "x"\n')
    second = write(tmp_path, "b.yaml", "instructions: y\nname: a\n")
    problems = template_dir_problems(tmp_path)
    assert [str(p) for p in problems] == [
        f"{second}:2:1: name: template 'a' is also defined in {first}; "
        "give each template its own name"
    ]
    with pytest.raises(ConfigError, match="1 problem:\n") as e:
        load_templates(tmp_path)
    assert str(first) in str(e.value) and str(second) in str(e.value)


def test_a_directory_lists_every_problem_one_a_line(tmp_path: Path) -> None:
    """Each file's problems are listed, one a line, in file order."""
    write(tmp_path, "a.toml", 'instructions = "{{x}}"\n')
    write(tmp_path, "b.toml", "instructions = \n")
    problems = template_dir_problems(tmp_path)
    assert [(Path(p.file).name, p.line) for p in problems] == [
        ("a.toml", 1),
        ("b.toml", 1),
    ]
    with pytest.raises(ConfigError) as e:
        load_templates(tmp_path)
    assert str(e.value).splitlines()[1:] == [str(p) for p in problems]


def test_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    """A directory that does not exist is named in the error."""
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=r"nope: \(directory\): no such directory"):
        load_templates(missing)
    with pytest.raises(ConfigError, match="no such directory"):
        template_dir_problems(missing)


# --- context management -------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "subtype", "expected"),
    [
        ("atomic", "standard", ("full", False, "notes_only", "disabled")),
        ("atomic", None, ("full", False, "notes_only", "disabled")),
        ("atomic", "subtask", ("none", False, "notes_only", "enabled")),
        ("subtask", None, ("none", False, "notes_only", "enabled")),
        ("sequential", None, ("full", True, "notes_only", "disabled")),
    ],
)
def test_context_defaults_follow_operator_and_subtype(
    operator: str, subtype: str | None, expected: tuple[Any, ...]
) -> None:
    """With nothing explicit, a call takes its operator's (and, for an atomic
    call, its subtype's) defaults, which never contradict themselves."""
    resolved = resolve_context(operator, subtype, None)
    assert msgspec.structs.astuple(resolved) == expected
    assert all(context_problem(d) is None for d in DEFAULTS.values())


def test_an_unknown_operator_has_no_defaults() -> None:
    """An operator or subtype without defaults raises, naming it."""
    with pytest.raises(TemplateError, match="no context defaults for atomic:weird"):
        resolve_context("atomic", "weird", None)
    with pytest.raises(TemplateError, match="no context defaults for loop"):
        resolve_context("loop", None, None)


def test_explicit_fields_override_the_defaults() -> None:
    """Each field set explicitly takes the default's place; the rest stay."""
    explicit = ContextManagement(
        accumulate_data=True, accumulation_format="full_output"
    )
    assert resolve_context("atomic", "standard", explicit) == Resolved(
        inherit_context="full",
        accumulate_data=True,
        accumulation_format="full_output",
        fresh_context="disabled",
    )
    explicit = ContextManagement(inherit_context="subset")
    assert resolve_context("atomic", "standard", explicit).inherit_context == "subset"


def test_an_explicit_fresh_context_makes_the_default_inheritance_yield() -> None:
    """Explicit fresh context over inheriting defaults: inherit nothing."""
    explicit = ContextManagement(fresh_context="enabled")
    resolved = resolve_context("sequential", None, explicit)
    assert (resolved.fresh_context, resolved.inherit_context) == ("enabled", "none")
    assert resolved.accumulate_data is True  # the other defaults stay


def test_an_explicit_inheritance_makes_the_default_fresh_context_yield() -> None:
    """Explicit inheritance over fresh-context defaults: no fresh context."""
    for inherit in ("full", "subset"):
        explicit = ContextManagement(inherit_context=inherit)
        resolved = resolve_context("subtask", None, explicit)
        assert (resolved.inherit_context, resolved.fresh_context) == (
            inherit,
            "disabled",
        )


def test_explicit_fresh_and_inherited_context_are_refused() -> None:
    """Both set explicitly, fresh and inherited context contradict each
    other: refused with a sentence saying why."""
    explicit = ContextManagement(inherit_context="full", fresh_context="enabled")
    problem = context_problem(explicit)
    assert problem is not None and "mutually exclusive" in problem
    with pytest.raises(TemplateError, match="mutually exclusive"):
        resolve_context("atomic", "standard", explicit)
    assert context_problem(ContextManagement(fresh_context="enabled")) is None
    fine = ContextManagement(inherit_context="none", fresh_context="enabled")
    assert resolve_context("atomic", "standard", fine).inherit_context == "none"


# --- matching ----------------------------------------------------------------------


def test_score_adds_up_name_hints_words_and_subtype() -> None:
    """Name hint 10, each hint word among matches or name words 3, each
    description or type word of three letters or more 1, same subtype 1."""
    summarize = template(
        "summarize_file",
        params=("path",),
        description="Summarize one source file",
        matches=("digest", "summary"),
        subtype="subtask",
    )
    asked = request(
        type="summary",
        description="a digest of the source",
        inputs={"path": "a.py"},
        template_hints=("summarize_file", "Digest-file"),
        subtype="subtask",
    )
    # 10 (name) + 3 * {summarize, file, digest} + 1 * {summary, digest,
    # source} + 1 (subtype); "a", "of", "the" are too short or absent.
    assert score(summarize, asked) == 10 + 9 + 3 + 1
    assert score(summarize, request(inputs={"path": 1})) == 0


def test_a_template_whose_params_the_inputs_lack_scores_minus_infinity() -> None:
    """A template needing an input the request lacks cannot be called."""
    needs = template("summarize", params=("path", "focus"), matches=("summary",))
    asked = request(
        description="summary", inputs={"path": "a"}, template_hints=("summarize",)
    )
    assert score(needs, asked) == -math.inf
    assert match([needs], asked) is None


def test_match_chooses_the_highest_score() -> None:
    """Of several templates, the one scoring highest is chosen."""
    review = template("review", matches=("review", "critique"))
    summarize = template("summarize", matches=("summary",))
    asked = request(description="write a summary", template_hints=("critique",))
    assert score(review, asked) == 3 and score(summarize, asked) == 1
    assert match([summarize, review], asked) == review


def test_match_breaks_ties_by_name() -> None:
    """Of equal scores, the name that sorts first wins, whatever the order."""
    b = template("beta", matches=("summary",))
    a = template("alpha", matches=("summary",))
    asked = request(description="summary")
    assert match([b, a], asked) == a
    assert match([a, b], asked) == a


def test_match_never_chooses_a_template_the_inputs_cannot_call() -> None:
    """A template named by the hints is passed over when the inputs lack
    one of its params; a callable one is chosen instead."""
    named = template("deep", params=("repo",), matches=("analysis",))
    plain = template("shallow", matches=("analysis",))
    asked = request(description="analysis", template_hints=("deep",), inputs={})
    assert match([named, plain], asked) == plain


def test_a_custom_scorer_changes_the_choice() -> None:
    """A scorer passed in replaces the default one."""
    short = template("ab", matches=("summary",), description="summary")
    long = template("abcdef")
    asked = request(description="summary")
    assert match([short, long], asked) == short

    def by_length(t: Template, _: SubtaskRequest) -> float:
        return float(len(t.name))

    assert match([short, long], asked, scorer=by_length) == long


def test_match_is_none_when_nothing_scores() -> None:
    """No template scoring above 0 (or finite): no template, not a guess."""
    unrelated = template("translate", matches=("french",))
    asked = request(description="summary of it")
    assert score(unrelated, asked) == 0
    assert match([unrelated], asked) is None
    assert match([], asked) is None
    assert match([unrelated], asked, scorer=lambda t, r: math.nan) is None
