"""What the documentation shows: its pages, their links and headings, and the
`steward` command lines in them (tests/unit/test_docs.py,
tests/integration/test_readme.py)."""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

GUIDES = tuple(
    DOCS / f"{name}.md"
    for name in (
        "cli",
        "configuration",
        "runs",
        "sessions",
        "workflows",
        "tasks",
        "staged",
        "mcp",
    )
)
"""The guides made of what README held: their commands are held to
README's rules (tests/integration/test_readme.py)."""

GENERATED = ("index.md", "reference/")
"""Pages under docs/ that scripts/gen_reference.py writes."""


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def written_pages() -> list[Path]:
    """README.md and the pages of docs/ a person writes (not generated)."""
    return [
        p
        for p in pages()
        if not str(p.relative_to(DOCS) if p != README else "").startswith(GENERATED)
    ]


_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def prose(text: str) -> str:
    """``text`` without its code blocks and code spans (links there are text)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor of a heading, as Python-Markdown's ``toc`` (mkdocs) makes it."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (a repeated one numbered ``_1``, ...)."""
    found: set[str] = set()
    for line in _FENCE.sub("", text).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        base = anchor = slug(heading[1])
        n = 0
        while anchor in found:
            n += 1
            anchor = f"{base}_{n}"
        found.add(anchor)
    return found


_LINK = re.compile(
    r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)


def broken_links(files: list[Path]) -> list[str]:
    """Each relative link or anchor of ``files`` that leads nowhere, as
    ``FILE: target (why)``; links to other sites are not followed."""
    broken = []
    for page in files:
        text = page.read_text()
        for target in _LINK.findall(prose(text)):
            if re.match(r"[a-z][a-z+.-]*:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            where = f"{shown}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif (
                anchor
                and dest.suffix == ".md"
                and anchor not in anchors(dest.read_text())
            ):
                broken.append(f"{where} (no heading #{anchor} there)")
    return broken


PLACEHOLDER = re.compile(r"\b[A-Z]{2,}\b|\.\.\.|\|")
"""What marks an inline `steward ...` as a template rather than a command."""

_SPAN = re.compile(r"`+ ?(steward [^`]*?) ?`+")


def inline_commands(text: str) -> list[str]:
    """Every ``steward ...`` written as a code span in ``text``'s prose (what
    a pipe or a redirection puts after it left out)."""
    spans = _SPAN.findall(_FENCE.sub("", text))
    return [re.split(r" \| | \d?>>? ", " ".join(s.split()))[0] for s in spans]


def block_commands(text: str) -> list[str]:
    """Every command line of ``text``'s code blocks that runs ``steward``
    (``$ `` and ``.venv/bin/`` taken off, continued lines joined, what a
    pipe or variables put before it left out)."""
    found = []
    for block in _FENCE.finditer(text):
        body = block.group(0).split("\n", 1)[1].rsplit("\n", 1)[0]
        if block.group(0).startswith(("```toml", "```json", "```yaml")):
            continue
        if "+---" in body:
            continue  # a drawing, not commands
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            line = line.rsplit("| ", 1)[-1].strip()
            line = re.split(r" \d?>>? ", line)[0]
            while re.match(r"[A-Z_]+=\S+ ", line):
                line = line.split(" ", 1)[1]
            line = line.removeprefix(".venv/bin/")
            if line.startswith("steward "):
                found.append(line)
    return found


def expansions(line: str) -> list[list[str]]:
    """``line``'s words, with each ``[...]`` part both left out and put in,
    and each ``a|b`` word each of its choices; none for a template (a
    COMMAND or ACTION of its own choosing)."""
    optional = re.findall(r"\[([^]]*)\]", line)
    parts = re.split(r"\[[^]]*\]", line)
    lines = []
    for chosen in itertools.product(*[("", o) for o in optional]):
        text = "".join(p + c for p, c in zip(parts, [*chosen, ""], strict=True))
        words = shlex.split(text, comments=True)
        if any(re.fullmatch(r"[A-Z]{2,}\W*", w) and w not in PUT_IN for w in words):
            return []  # a template: steward COMMAND --help
        choices = [w.split("|") if re.fullmatch(r"[a-z|]+", w) else [w] for w in words]
        lines.extend(list(ws) for ws in itertools.product(*choices))
    return lines


PUT_IN = {"ID": "r1", "VERSION": "1", "TEXT": "hi", "PORT": "8080", "N": "1"}
"""What a placeholder word stands for when a documented line is parsed."""


def names_command(parser: argparse.ArgumentParser, words: list[str]) -> str | None:
    """Why ``words`` (``steward`` and what follows) name no command of
    ``parser`` with options it has; ``None`` when they do. Arguments a
    command needs may be left out (a span names `steward run --stream`)."""
    rest = words[1:]
    named = False
    while rest:
        word, rest = rest[0], rest[1:]
        if word.startswith("-"):
            action = parser._option_string_actions.get(word.split("=", 1)[0])
            if action is None:
                return f"{parser.prog} has no option {word}"
            if action.nargs != 0 and "=" not in word:
                rest = rest[1:]
            continue
        commands = [
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        ]
        if commands:
            if word not in commands[0].choices:
                return f"{parser.prog} has no command {word}"
            parser, named = commands[0].choices[word], True
    return None if named or "--help" in words else "no command named"
