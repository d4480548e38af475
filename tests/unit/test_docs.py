"""The documentation: generated pages current, every link and anchor
leading somewhere, every page on the site, every documented command line
one the parser takes."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from doc_pages import (
    DOCS,
    PUT_IN,
    ROOT,
    block_commands,
    broken_links,
    expansions,
    inline_commands,
    names_command,
    pages,
    written_pages,
)

from steward.cli import build_parser
from steward.kinds import KINDS


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "scripts" / "gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def test_generated_pages_are_what_the_code_writes() -> None:
    """docs/index.md (README) and docs/reference/ are what
    scripts/gen_reference.py writes from the code now."""
    stale = GEN.stale()
    assert not stale, (
        f"stale: {', '.join(f'docs/{p}' for p in stale)}; regenerate them: "
        f"{GEN.REGENERATE}"
    )


def test_a_page_that_differs_is_stale(tmp_path: Path) -> None:
    """A setting's default changed by hand, a page missing: both named."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    settings = docs / "reference" / "settings.md"
    text = settings.read_text()
    settings.write_text(
        text.replace(
            "| `max_iterations` | integer (≥ 1) | `20`",
            "| `max_iterations` | integer (≥ 1) | `21`",
        )
    )
    assert settings.read_text() != text
    (docs / "reference" / "events.md").unlink()
    assert GEN.stale(docs) == ["reference/settings.md", "reference/events.md"]


def test_references_cover_every_command_setting_and_event() -> None:
    """Each command of the parser, setting of the settings and event type
    of the kinds has its heading or row in the references."""
    from steward.config.settings import Settings
    from steward.kinds import KINDS

    cli = (DOCS / "reference" / "cli.md").read_text()
    for words, _, _ in GEN._commands(build_parser(KINDS)):
        assert f"\n## steward {' '.join(words)}\n" in cli, words
    settings = (DOCS / "reference" / "settings.md").read_text()
    assert "`STEWARD_RUN_MAX_ITERATIONS`" in settings
    assert "`STEWARD_MODELS_<NAME>_BASE_URL`" in settings
    assert "`STEWARD_LLM_MAX_CONCURRENCY`" in settings
    for name in Settings.__struct_fields__:
        assert f"[{name}" in settings or f"`{name}`" in settings, name
    events = (DOCS / "reference" / "events.md").read_text()
    for kind in KINDS:
        for t in kind.decider.events:
            assert f"\n### {t.__name__}\n" in events, t


def test_every_link_and_anchor_leads_somewhere() -> None:
    """Every relative link of README.md and docs/ names a file that exists,
    and its #anchor a heading there (as mkdocs makes anchors)."""
    assert broken_links(pages()) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Exit statuses\n")
    page.write_text(
        "# Page\n\n[fine](other.md#exit-statuses) [here](#page)\n"
        "[gone](missing.md) [no anchor](other.md#exit-status) `[code](x.md)`\n"
        "```\n[in a block](y.md)\n```\n"
    )
    found = broken_links([page])
    assert [f.split(": ", 1)[1] for f in found] == [
        "missing.md (no such file)",
        "other.md#exit-status (no heading #exit-status there)",
    ]


def test_every_page_is_on_the_site() -> None:
    """mkdocs.yml's nav lists every page of docs/, and only pages that exist."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def listed(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [p for item in nav for p in listed(item)]
        if isinstance(nav, dict):
            return [p for value in nav.values() for p in listed(value)]
        return []

    nav = listed(config["nav"])
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == on_disk


def _documented(find: Callable[[str], list[str]]) -> list[tuple[str, str]]:
    return [
        (str(page.relative_to(ROOT)), line)
        for page in written_pages()
        for line in find(page.read_text())
    ]


BLOCKS = _documented(block_commands)
SPANS = _documented(inline_commands)


def test_documented_lines_are_found() -> None:
    """The pages show commands: README's tour, the guides' blocks and spans."""
    where = {page for page, _ in BLOCKS}
    assert {
        "README.md",
        "docs/cli.md",
        "docs/workflows.md",
        "docs/operations.md",
    } <= where
    assert len(BLOCKS) > 50 and len(SPANS) > 40


@pytest.mark.parametrize(("page", "line"), BLOCKS)
def test_every_command_line_in_a_code_block_parses(page: str, line: str) -> None:
    """Each `steward ...` line of a page's code blocks (each [option] with
    and without, each a|b choice) is one the command line's parser takes,
    its placeholders (ID, VERSION, ...) put in."""
    parser = build_parser(KINDS)
    for words in expansions(line):
        args = [PUT_IN.get(w, w) for w in words[1:]]
        if "--help" in args or "-h" in args:
            continue
        try:
            parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{page} shows `{shlex.join(words)}`, which does not parse")


@pytest.mark.parametrize(("page", "line"), SPANS)
def test_every_command_in_prose_names_a_command_and_its_options(
    page: str, line: str
) -> None:
    """A `steward ...` in a page's prose names a command the parser has and
    only options it takes (its arguments may be left out: `steward run
    --stream`)."""
    parser = build_parser(KINDS)
    for words in expansions(line):
        why = names_command(parser, words)
        assert why is None, f"{page} shows `{line}`: {why}"


def test_a_command_that_is_not_there_is_found() -> None:
    parser = build_parser(KINDS)
    assert names_command(parser, ["steward", "runs", "show", "--prompts"]) is None
    assert names_command(parser, ["steward", "--log", "x", "runs", "list"]) is None
    assert "no command rerun" in str(names_command(parser, ["steward", "rerun"]))
    assert "no option --fast" in str(
        names_command(parser, ["steward", "run", "--fast", "x"])
    )
