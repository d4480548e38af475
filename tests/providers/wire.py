"""What a request the fake API received says, in either dialect's form:
the wire tests read the system prompt and messages from these."""

from __future__ import annotations

from typing import Any

from fake_api import Request


def text_of(content: Any) -> str:
    """A message's text, of either dialect's content forms."""
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content or ""


def system_of(request: Request) -> str:
    """The request's system prompt (Anthropic's ``system``, or OpenAI's
    system messages)."""
    body = request.body
    system = text_of(body.get("system"))
    return system + "".join(
        text_of(m["content"]) for m in body["messages"] if m["role"] == "system"
    )
