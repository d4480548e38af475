"""A run's JSON commands: a model's reply parsed and its fields checked.

In the ``json`` protocol each reply of the model is one command, a JSON object
whose ``type`` says what to do (`KNOWN_COMMANDS`). `parse_command` turns a
reply into that object, normalized; the field readers below check one field
each and raise `InvalidCommand`, whose message the run sends back to the model.
What a command then does to the run is the decider's (`steward.actors.run.decider`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import msgspec

from steward.actors.run.events import LATEST_REVISION
from steward.events.codec import encodable_value

KNOWN_COMMANDS = (
    "tool_call",
    "send_message",
    "set_output",
    "finish",
    "decision",
    "note",
    "spawn_subagent",
    "spawn_subagents",
    "sleep",
)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


class InvalidCommand(Exception):
    """A reply's command is malformed; the model is told and may try again."""


def parse_command(
    text: str, *, revision: int = LATEST_REVISION
) -> dict[str, Any] | str:
    """A reply's JSON command, normalized; or a sentence saying what is wrong.

    A reply whose ``type`` is a tool name such as ``files.read`` (or, without
    ``type``, one with a ``name``) is the tool-call shortcut: the keys beside
    that one are the call's arguments, ``{"type": "files.list", "path": "."}``
    is ``files.list`` with ``{"path": "."}``. An ``args`` key, if given, is the
    arguments instead, and every other key beside it is ignored.

    ``revision`` is the run's (`RunSettings.revision`): from 1 on, the keys
    beside a shortcut's name are its arguments (before, only ``args``), and
    JSON that msgspec refuses for a lone surrogate alone is read all the same.
    """
    body = text.strip()
    if fenced := _FENCE.match(body):
        body = fenced.group(1).strip()
    try:
        value = msgspec.json.decode(body)
    except RecursionError:
        return "invalid JSON (nested too deep)"
    except (msgspec.DecodeError, UnicodeEncodeError) as e:
        if revision < 1:
            return f"invalid JSON ({e})"
        # msgspec refuses lone surrogates, raw or escaped (valid JSON all the
        # same): the standard parser takes them, and they become U+FFFD
        try:
            value = encodable_value(json.loads(body))
        except (ValueError, RecursionError):
            return f"invalid JSON ({e})"
    if not isinstance(value, dict):
        return "the reply must be one JSON object"
    kind = value.get("type")
    if kind is None and isinstance(value.get("name"), str):
        return _shortcut(value, "name", revision >= 1)
    if not isinstance(kind, str):
        return "the object needs a string `type`"
    if kind not in KNOWN_COMMANDS and "." in kind:
        return _shortcut(value, "type", revision >= 1)
    return value


def _shortcut(value: dict[str, Any], key: str, beside: bool) -> dict[str, Any]:
    """The ``tool_call`` a shortcut naming its tool in ``key`` stands for."""
    if "args" in value:
        args = value["args"]  # `args_field` corrects it if it is not an object
    elif beside:
        args = {k: v for k, v in value.items() if k not in (key, "type")}
    else:
        args = {}
    return {"type": "tool_call", "name": value[key], "args": args}


def text_field(command: dict[str, Any], key: str) -> str:
    """The string ``command[key]``."""
    value = command.get(key)
    if not isinstance(value, str):
        raise InvalidCommand(f"`{command['type']}` needs a string `{key}`")
    return value


def args_field(command: dict[str, Any]) -> dict[str, Any]:
    """A tool call's arguments, ``{}`` when absent or null."""
    args = command.get("args", {})
    if args is None:
        return {}
    if not isinstance(args, dict):
        raise InvalidCommand("`args` must be an object")
    return args


def mode_field(command: dict[str, Any]) -> Any:
    """An output update's ``mode``: ``replace`` (the default) or ``append``."""
    mode = command.get("mode", "replace")
    if mode not in ("replace", "append"):
        raise InvalidCommand(f"`mode` must be 'replace' or 'append', not {mode!r}")
    return mode


def timestamp(value: Any) -> float:
    """A ``wakeAt``, ISO 8601 (UTC unless it says) or epoch seconds, as epoch
    seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.timestamp()
    raise InvalidCommand(f"`wakeAt` {value!r} is not an ISO 8601 time or epoch seconds")
