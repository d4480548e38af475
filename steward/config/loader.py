"""Read ``Settings`` from a TOML file and ``STEWARD_*`` environment variables.

Precedence, lowest first: the defaults in ``steward.config.settings``, the TOML
file, the environment. Every bad value raises ``ConfigError`` naming where it
came from (the file, or the variable), the dotted key and what was expected.

Environment variables (every ``STEWARD_*`` variable is read as a setting, so a
misspelt one is never silently ignored: one that names no setting is an error,
or, given ``unknown``, is left out and reported to it, as the command line
does with a warning):

- ``STEWARD_<SECTION>_<KEY>`` for the tables of fixed keys (``[run]``,
  ``[log]``, ``[tools]``, ``[session]``, ...), e.g.
  ``STEWARD_RUN_MAX_ITERATIONS=5``, ``STEWARD_LOG_SYNCHRONOUS=FULL``;
- ``STEWARD_MODELS_<NAME>_<KEY>``, ``STEWARD_AGENTS_<NAME>_<KEY>`` and
  ``STEWARD_MCP_<NAME>_<KEY>`` for the named tables, e.g.
  ``STEWARD_MODELS_DEFAULT_SCRIPT=demo.yaml``; ``<NAME>`` matches a table of
  the file case-insensitively, or creates a lower-case one (a key whose value
  is a table, and ``[channels]``, are set in the file only);
- ``STEWARD_LLM_MAX_CONCURRENCY`` for the top-level key.

``[tools] require_approval`` may only name the tools ``load_settings`` is
told of (the command line: the built-in ``files.read``, ``files.list``,
``files.write``); another name is an error listing them.

Values are converted to the field's type: integers and floats as written,
booleans from ``true``/``false``/``1``/``0``, lists as comma-separated names,
and an empty value, ``none`` or ``null`` gives ``None`` where a field allows it.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
import types
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec

from steward.config.settings import AgentProfile, ModelConfig, Settings
from steward.errors import ConfigError

__all__ = ["DEFAULT_MODELS", "DEFAULT_PATH", "ENV_PREFIX", "load_settings"]

DEFAULT_PATH = Path("steward.toml")
"""The file read when no path is given, if it exists."""

ENV_PREFIX = "STEWARD_"
"""Prefix of the environment variables that override settings."""

_DEFAULTS: dict[str, Any] = {
    "models": {"default": ModelConfig()},
    "agents": {"default": AgentProfile()},
}


def load_settings(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    *,
    unknown: Callable[[str], None] | None = None,
    tools: Collection[str] | None = None,
) -> Settings:
    """Settings from ``path`` (default: ``./steward.toml`` if present) and ``env``.

    Args:
        path: a TOML file; ``None`` reads ``./steward.toml`` when it exists and
            uses the defaults otherwise. A path that is given must exist.
        env: the environment to read ``STEWARD_*`` overrides from; ``None``
            reads ``os.environ``, ``{}`` reads none.
        unknown: called once, with one line naming each ``STEWARD_*``
            variable that names no setting and what it should be, when there
            are any; they are left out. ``None``: the first is an error.
        tools: the tools ``[tools] require_approval`` may name (the command
            line gives the built-in ones); ``None`` checks no name.

    Raises:
        ConfigError: the file is unreadable or not TOML, a value is invalid,
            or (without ``unknown``) a variable names no setting.
    """
    if path is None:
        file = DEFAULT_PATH if DEFAULT_PATH.is_file() else None
    else:
        file = Path(path)
    data = _read_toml(file) if file is not None else {}
    source = str(file) if file is not None else "defaults"
    environ = os.environ if env is None else env
    ignored = _apply_env(data, environ, strict=unknown is None)
    if ignored and unknown is not None:
        unknown(_ignoring(ignored))
    settings = _build(data, source)
    _check_servers(settings, source)
    if tools is not None:
        _check_approval(settings, source, environ, tools)
    models = data.get("models")
    if not (isinstance(models, dict) and "default" in models):
        keyed = _keyed_default(environ)
        if keyed is not None:
            models = {**settings.models, "default": keyed}
            settings = msgspec.structs.replace(settings, models=models)
    return settings


DEFAULT_MODELS = {
    "ANTHROPIC_API_KEY": ModelConfig(provider="anthropic", model="claude-sonnet-4-5"),
    "OPENAI_API_KEY": ModelConfig(provider="openai", model="gpt-4.1-mini"),
}
"""The default model when no ``[models.default]`` is configured and one of
these keys is set (checked in this order); otherwise the default is the
scripted model."""


def _keyed_default(environ: Mapping[str, str]) -> ModelConfig | None:
    for variable, model in DEFAULT_MODELS.items():
        if environ.get(variable):
            return model
    return None


_APPROVAL_VARIABLE = f"{ENV_PREFIX}TOOLS_REQUIRE_APPROVAL"


def _check_servers(settings: Settings, source: str) -> None:
    """Refuse an ``[mcp.<name>]`` name that cannot name tools (``NAME.tool``)
    or a log file, and an ``mcp`` list (of a profile, of ``[task]``) naming a
    server with no table."""
    for name in settings.mcp:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name):
            raise ConfigError(
                source,
                f"mcp.{name}",
                "a server's name is 1-40 letters, digits, _ or - (its tools are "
                "NAME.tool)",
            )
    lists = [(f"agents.{n}.mcp", a.mcp) for n, a in sorted(settings.agents.items())]
    for key, names in [*lists, ("task.mcp", settings.task.mcp)]:
        try:
            settings.servers(names, key)
        except ConfigError as e:
            raise ConfigError(source, e.key, e.problem) from None


def _check_approval(
    settings: Settings, source: str, environ: Mapping[str, str], tools: Collection[str]
) -> None:
    """Refuse a ``[tools] require_approval`` name that is not in ``tools``."""
    known = sorted(tools)
    for var in environ:  # the part after the prefix in any case, as _resolve reads it
        if var.startswith(ENV_PREFIX) and var.upper() == _APPROVAL_VARIABLE:
            source = f"environment variable {var}"
    for n, name in enumerate(settings.tools.require_approval):
        if name not in known:
            raise ConfigError(
                source,
                f"tools.require_approval[{n}]",
                f"no tool {name!r}; known tools: {', '.join(known)}",
            )


# -- the file -------------------------------------------------------------------

_TOML_LOCATION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        with file.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            str(file), "(file)", "no such file; create it or leave --config out"
        ) from None
    except OSError as e:
        raise ConfigError(str(file), "(file)", f"cannot be read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(str(file), "(file)", f"is not UTF-8 text: {e}") from e
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        found = _TOML_LOCATION.search(message)
        if found is None:
            raise ConfigError(str(file), "(file)", f"invalid TOML: {message}") from e
        problem = f"invalid TOML: {message[: found.start()]} (column {found[2]})"
        raise ConfigError(str(file), f"line {found[1]}", problem) from e


# -- validation -----------------------------------------------------------------


def _build(data: dict[str, Any], source: str) -> Settings:
    fields = {f.name: f for f in msgspec.structs.fields(Settings)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(source, unknown[0], _unknown_key(sorted(fields)))
    values: dict[str, Any] = {}
    for name, value in data.items():
        ftype = fields[name].type
        if get_origin(ftype) is dict:
            if not isinstance(value, dict):
                raise ConfigError(source, name, f"expected table, got {_show(value)}")
            entry_type = get_args(ftype)[1]
            entries = dict(_DEFAULTS.get(name, {}))
            for entry, table in value.items():
                entries[entry] = _convert(table, entry_type, source, (name, entry))
            values[name] = entries
        else:
            values[name] = _convert(value, ftype, source, (name,))
    return Settings(**values)


def _convert(value: Any, typ: Any, source: str, at: tuple[str, ...]) -> Any:
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as e:
        key, problem = _explain(e, value, typ, at)
        raise ConfigError(source, key, problem) from None


_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `([^`]*)`$")


def _explain(
    error: msgspec.ValidationError, value: Any, typ: Any, at: tuple[str, ...]
) -> tuple[str, str]:
    """The dotted key and a readable problem for a msgspec validation error."""
    match = _AT.match(str(error))
    assert match is not None  # the pattern matches every string
    message = match["message"]
    steps: list[str | int] = [
        name if name else int(index)
        for name, index in _STEP.findall(match["path"] or "")
    ]
    unknown = _UNKNOWN.match(message)
    if unknown is not None:
        owner = _type_at(typ, steps)
        known = []
        if isinstance(owner, type) and issubclass(owner, msgspec.Struct):
            known = sorted(f.name for f in msgspec.structs.fields(owner))
        return _key(at, [*steps, unknown[1]]), _unknown_key(known)
    found, bad = _value_at(value, steps)
    target = _type_at(typ, steps)
    if message.startswith("Invalid enum value") and get_origin(target) is Literal:
        choices = ", ".join(json.dumps(c) for c in get_args(target))
        problem = f"expected one of {choices}"
    else:
        problem = message.replace("`", "").replace("object", "table")
        problem = problem.replace("null", "none")
        problem = problem[:1].lower() + problem[1:]
    if found:
        if ", got " in problem and isinstance(bad, str | int | float | bool):
            problem = f"{problem} {json.dumps(bad)}"
        elif ", got " not in problem:
            problem = f"{problem}, got {_show(bad)}"
    return _key(at, steps), problem


def _key(at: tuple[str, ...], steps: list[str | int]) -> str:
    key = ".".join(at)
    for step in steps:
        key += f"[{step}]" if isinstance(step, int) else f".{step}"
    return key.lstrip(".")


def _unknown_key(known: list[str]) -> str:
    return "unknown key; expected one of: " + ", ".join(known)


def _show(value: Any) -> str:
    """A value as TOML would write it, with its type for the scalar kinds."""
    if isinstance(value, bool):
        return f"bool {json.dumps(value)}"
    if isinstance(value, str | int | float):
        return f"{type(value).__name__} {json.dumps(value)}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _value_at(value: Any, steps: list[str | int]) -> tuple[bool, Any]:
    for step in steps:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, value


def _bare(typ: Any) -> Any:
    """``typ`` without ``Annotated`` and without ``None`` in a union."""
    while get_origin(typ) is Annotated:
        typ = get_args(typ)[0]
    if get_origin(typ) in (Union, types.UnionType):
        rest = [t for t in get_args(typ) if t is not type(None)]
        if len(rest) == 1:
            return _bare(rest[0])
    return typ


def _type_at(typ: Any, steps: list[str | int]) -> Any:
    typ = _bare(typ)
    for step in steps:
        if isinstance(step, int):
            args = get_args(typ)
            if not args:
                return None
            typ = _bare(args[0])
        elif isinstance(typ, type) and issubclass(typ, msgspec.Struct):
            fields = {f.name: f.type for f in msgspec.structs.fields(typ)}
            if step not in fields:
                return None
            typ = _bare(fields[step])
        else:
            return None
    return typ


# -- the environment ------------------------------------------------------------


def _apply_env(
    data: dict[str, Any], env: Mapping[str, str], *, strict: bool
) -> list[ConfigError]:
    """Write every ``STEWARD_*`` override into ``data``, converted to its type;
    the variables that name no setting, left out (``strict``: the first is
    raised)."""
    ignored: list[ConfigError] = []
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX):
            continue
        source = f"environment variable {var}"
        try:
            path, ftype = _resolve(var, source, data)
        except ConfigError as e:
            if strict:
                raise
            ignored.append(e)
            continue
        value = _env_value(env[var], ftype, source, ".".join(path))
        target = data
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                break  # the file's non-table value is reported by validation
        else:
            target[path[-1]] = value
    return ignored


def _ignoring(ignored: list[ConfigError]) -> str:
    """One line saying which variables are left out, and what each should be."""
    if len(ignored) == 1:
        return f"ignoring {ignored[0]}"
    each = ", ".join(
        f"{e.source.removeprefix('environment variable ')} ({e.key}: {e.problem})"
        for e in ignored
    )
    return f"ignoring environment variables that name no setting: {each}"


def _resolve(var: str, source: str, data: dict[str, Any]) -> tuple[list[str], Any]:
    """The key path and field type a ``STEWARD_*`` variable names."""
    name = var[len(ENV_PREFIX) :].lower()
    fields = {f.name: f.type for f in msgspec.structs.fields(Settings)}
    if name in fields and not _is_table(fields[name]):
        return [name], fields[name]
    for section, ftype in fields.items():
        if not _is_table(ftype) or not name.startswith(section + "_"):
            continue
        rest = name[len(section) + 1 :]
        if get_origin(ftype) is dict:
            return _resolve_entry(section, rest, get_args(ftype)[1], source, data)
        keys = {f.name: f.type for f in msgspec.structs.fields(ftype)}
        if rest not in keys:
            raise ConfigError(source, f"{section}.{rest}", _unknown_key(sorted(keys)))
        return [section, rest], keys[rest]
    sections = sorted(s.upper() for s, t in fields.items() if _is_table(t))
    scalars = sorted(s.upper() for s, t in fields.items() if not _is_table(t))
    raise ConfigError(
        source,
        name,
        "not a setting; use STEWARD_<SECTION>_<KEY> with SECTION one of "
        f"{', '.join(sections)}, or {', '.join(ENV_PREFIX + s for s in scalars)}",
    )


def _resolve_entry(
    section: str, rest: str, entry_type: Any, source: str, data: dict[str, Any]
) -> tuple[list[str], Any]:
    keys = {f.name: f.type for f in msgspec.structs.fields(entry_type)}
    # NAME may hold underscores, so the longest known KEY that ends it wins.
    matches = [k for k in keys if rest.endswith("_" + k) and len(rest) > len(k) + 1]
    if not matches:
        raise ConfigError(
            source,
            f"{section}.{rest}",
            f"expected STEWARD_{section.upper()}_<NAME>_<KEY> with KEY one of: "
            + ", ".join(sorted(k.upper() for k in keys)),
        )
    key = max(matches, key=len)
    entry = rest[: -len(key) - 1]
    existing = data.get(section)
    if isinstance(existing, dict):
        entry = next((e for e in existing if e.lower() == entry), entry)
    return [section, entry, key], keys[key]


def _is_table(ftype: Any) -> bool:
    bare = _bare(ftype)
    return get_origin(bare) is dict or (
        isinstance(bare, type) and issubclass(bare, msgspec.Struct)
    )


def _env_value(raw: str, ftype: Any, source: str, key: str) -> Any:
    """An environment string converted to the field type ``ftype``."""
    if _allows_none(ftype) and raw.strip().lower() in ("", "none", "null"):
        return None
    bare = _bare(ftype)
    value: Any = raw
    if get_origin(bare) is list:
        value = [part.strip() for part in raw.split(",") if part.strip()]
    elif bare is bool:
        value = raw.strip().lower()
    try:
        return msgspec.convert(value, ftype, strict=False)
    except msgspec.ValidationError as e:
        _, problem = _explain(e, value, ftype, ())
        raise ConfigError(source, key, problem) from None


def _allows_none(ftype: Any) -> bool:
    while get_origin(ftype) is Annotated:
        ftype = get_args(ftype)[0]
    return get_origin(ftype) in (Union, types.UnionType) and type(None) in get_args(
        ftype
    )
