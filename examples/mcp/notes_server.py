"""A small MCP server: notes kept in a file, three tools (``add``,
``search``, ``count``). Built with the official ``mcp`` SDK, it speaks over
stdio by default (steward starts it: see ``steward.toml`` here), or serves
streamable HTTP with ``--http PORT``.

    .venv/bin/steward --config examples/mcp/steward.toml mcp list
    .venv/bin/steward --config examples/mcp/steward.toml mcp call notes.add --args '{"text": "buy milk"}'
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

NOTES = Path(os.environ.get("NOTES_FILE", "notes.txt"))

app = MCPServer("notes")


def _notes() -> list[str]:
    return NOTES.read_text().splitlines() if NOTES.exists() else []


@app.tool()
def add(text: str) -> str:
    """Add a note (one line)."""
    notes = _notes()
    NOTES.parent.mkdir(parents=True, exist_ok=True)
    # a file written by hand may lack its last line's end: the note is a line
    NOTES.write_text("".join(f"{n}\n" for n in [*notes, " ".join(text.split())]))
    return f"note {len(_notes())} added"


@app.tool()
def search(query: str) -> list[str]:
    """The notes that contain query, case ignored."""
    return [n for n in _notes() if query.lower() in n.lower()]


@app.tool()
def count() -> int:
    """How many notes there are."""
    return len(_notes())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve HTTP")
    args = parser.parse_args()
    if args.http is None:
        app.run()
    else:
        app.run("streamable-http", port=args.http)
