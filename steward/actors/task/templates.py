"""Atomic task templates: their placeholders, checks, context and matching.

A template (`steward.actors.task.events.Template`) is a function of its declared
parameters: its ``instructions`` and ``system`` text hold ``{{name}}``
placeholders, and a call fills each one from the call's parameters and from
nothing else (spec 002, "Function-Based Template Pattern"). This module says

- where the placeholders of a text are and how a value is written into a
  prompt (`placeholders`, `render_value`, `substitute`);
- what is wrong with a template (`check`, `template_problems`), which the
  file loader (`steward.actors.task.programs`) positions in the file;
- which context settings a call runs with (`resolve_context`): the defaults
  of its operator and subtype, overridden by an explicit
  ``context_management`` block (spec 002, "Context Management");
- which template a subtask request is given (`match`, with `score` as the
  default scorer; spec 002, "Atomic Task Matching").

It is pure: the task decider imports it, so it does no I/O, reads no clock
and keeps no state between calls.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

import msgspec

from steward.actors.task.events import (
    AccumulationFormat,
    ContextManagement,
    FreshContext,
    InheritContext,
    SubtaskRequest,
    Template,
)
from steward.errors import StewardError

__all__ = [
    "DEFAULTS",
    "NAME",
    "PARAM",
    "PLACEHOLDER",
    "Resolved",
    "Scorer",
    "TemplateError",
    "TemplateProblem",
    "check",
    "context_problem",
    "match",
    "placeholders",
    "render_value",
    "resolve_context",
    "score",
    "substitute",
    "template_problems",
]

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")
"""A ``{{ name }}`` placeholder; group 1 is the name. Spaces inside the
braces are allowed; anything else between them is left as text."""

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_:.\-]*")
"""What a template's name must look like (the whole name)."""

PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
"""What a parameter's name must look like (the whole name): every such name
can be written as a placeholder."""

_WORD_SEPARATOR = re.compile(r"[\W_]+")

_T = TypeVar("_T")


class TemplateError(StewardError):
    """A template cannot be filled or its context settings contradict each
    other; ``placeholder`` names the placeholder at fault, if one is."""

    def __init__(self, problem: str, placeholder: str | None = None) -> None:
        self.problem = problem
        self.placeholder = placeholder
        super().__init__(problem)


# -- placeholders and values ----------------------------------------------------


def placeholders(text: str) -> list[tuple[str, int]]:
    """Each placeholder of ``text``: its name and the offset of its ``{{``,
    in the order they appear (a name used twice is listed twice)."""
    return [(found[1], found.start()) for found in PLACEHOLDER.finditer(text)]


def render_value(value: Any) -> str:
    """``value`` as it is written into a prompt.

    A string goes in as it is, ``None`` as nothing, a bool as ``true`` or
    ``false``, a number as Python writes it; anything else (a list, a tuple,
    a dict) as compact JSON, with the keys of its dicts sorted when they are
    all strings.

    Raises:
        TemplateError: the value has no JSON form.
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    try:
        return msgspec.json.encode(value, order="sorted").decode()
    except TypeError:
        pass  # a dict with keys that are not all strings cannot be sorted
    try:
        return msgspec.json.encode(value).decode()
    except TypeError as e:
        raise TemplateError(
            f"a {type(value).__name__} cannot be written into a prompt ({e}); "
            "pass text, a number, a bool, a list or a dict"
        ) from None


def substitute(text: str, params: Mapping[str, Any]) -> str:
    """``text`` with each placeholder replaced by its parameter's value
    (`render_value`). Only ``params`` are looked at: a template sees its
    declared parameters and nothing of its caller. A value is put in as it
    is; placeholders inside a value are not filled.

    Raises:
        TemplateError: a placeholder names no parameter of ``params``.
    """

    def fill(found: re.Match[str]) -> str:
        name = found[1]
        if name not in params:
            known = ", ".join(sorted(params)) or "none"
            raise TemplateError(
                f"{{{{{name}}}}} is not a parameter of this call (parameters: "
                f"{known}); a template sees only its declared parameters",
                placeholder=name,
            )
        return render_value(params[name])

    return PLACEHOLDER.sub(fill, text)


# -- checks ---------------------------------------------------------------------


class TemplateProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One problem of a template: ``key`` is the file key it is about
    (``name``, ``params``, ``instructions``, ``system``, ``max_turns``,
    ``max_tokens``, ``context_management``), ``message`` says what is wrong,
    and ``placeholder`` names the undeclared placeholder it is about, if one
    is (so a loader can point at it in the file)."""

    key: str
    message: str
    placeholder: str | None = None

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


def check(template: Template) -> list[TemplateProblem]:
    """Every problem of ``template``, in the order of its keys (see
    `template_problems` for what is checked)."""
    found: list[TemplateProblem] = []
    if not template.name:
        found.append(TemplateProblem(key="name", message="is empty; name the template"))
    elif NAME.fullmatch(template.name) is None:
        found.append(
            TemplateProblem(
                key="name",
                message=f"{template.name!r} is not a valid template name: it must "
                "start with a letter or _, then letters, digits, _, :, . or -",
            )
        )
    seen: set[str] = set()
    for param in template.params:
        if PARAM.fullmatch(param) is None:
            found.append(
                TemplateProblem(
                    key="params",
                    message=f"{param!r} is not a valid parameter name: it must "
                    "start with a letter or _, then letters, digits, _, . or -",
                )
            )
        elif param in seen:
            found.append(
                TemplateProblem(key="params", message=f"{param!r} is declared twice")
            )
        seen.add(param)
    declared = ", ".join(template.params) or "none"
    for key, text in (
        ("instructions", template.instructions),
        ("system", template.system),
    ):
        reported: set[str] = set()
        for name, _ in placeholders(text):
            if name in template.params or name in reported:
                continue
            reported.add(name)
            found.append(
                TemplateProblem(
                    key=key,
                    message=f"{{{{{name}}}}} is not a declared parameter "
                    f"(params: {declared})",
                    placeholder=name,
                )
            )
    for key, limit in (
        ("max_turns", template.max_turns),
        ("max_tokens", template.max_tokens),
    ):
        if limit is not None and limit < 1:
            found.append(
                TemplateProblem(key=key, message=f"is {limit}; it must be 1 or more")
            )
    if (problem := context_problem(template.context)) is not None:
        found.append(TemplateProblem(key="context_management", message=problem))
    return found


def template_problems(template: Template) -> list[str]:
    """Every problem of ``template``, one sentence each, led by the key it is
    about: a name that is empty or not valid (`NAME`); a parameter name that
    is not valid (`PARAM`) or declared twice; a placeholder of
    ``instructions`` or ``system`` that is no declared parameter (once per
    name and key: ``instructions: {{topic}} is not a declared parameter
    (params: a, b)``); ``max_turns`` or ``max_tokens`` below 1; context
    settings that contradict each other (`context_problem`). No problems: an
    empty list."""
    return [str(problem) for problem in check(template)]


# -- context management ---------------------------------------------------------


class Resolved(msgspec.Struct, frozen=True, kw_only=True):
    """The context settings a call runs with, every one decided."""

    inherit_context: InheritContext
    """The parent's context it is given: ``full``, ``none`` or a ``subset``
    chosen by relevance."""
    accumulate_data: bool
    """Whether the outputs of earlier steps are passed on."""
    accumulation_format: AccumulationFormat
    """What of them is passed on: ``notes_only`` or ``full_output``."""
    fresh_context: FreshContext
    """Whether new context is found for it by associative matching."""


DEFAULTS: Mapping[str | tuple[str, str], Resolved] = MappingProxyType(
    {
        # Spec 002, "Subtype-Based Defaults".
        ("atomic", "standard"): Resolved(
            inherit_context="full",
            accumulate_data=False,
            accumulation_format="notes_only",
            fresh_context="disabled",
        ),
        ("atomic", "subtask"): Resolved(
            inherit_context="none",
            accumulate_data=False,
            accumulation_format="notes_only",
            fresh_context="enabled",
        ),
        # A subtask spawned by CONTINUATION. The spec's table for subtasks
        # says inherit_context "subset" with fresh_context "enabled", which
        # its own rule forbids (fresh context excludes inheriting any); we
        # follow the subtype rule, which gives "none" with "enabled".
        "subtask": Resolved(
            inherit_context="none",
            accumulate_data=False,
            accumulation_format="notes_only",
            fresh_context="enabled",
        ),
        # The steps of a program (spec 002, "Default settings for
        # sequential tasks").
        "sequential": Resolved(
            inherit_context="full",
            accumulate_data=True,
            accumulation_format="notes_only",
            fresh_context="disabled",
        ),
    }
)
"""The context settings of each operator when nothing overrides them: an
atomic call by its template's subtype (``("atomic", "standard")``,
``("atomic", "subtask")``), a subtask (``"subtask"``), a program's steps
(``"sequential"``)."""


def context_problem(settings: ContextManagement | Resolved) -> str | None:
    """Why ``settings`` contradict themselves, or ``None`` if they do not.

    Fresh context (``fresh_context = "enabled"``) and inherited context
    (``inherit_context`` ``full`` or ``subset``) are mutually exclusive: a
    task that inherits its parent's context must not generate more, and one
    that generates fresh context must not inherit (spec 002)."""
    inherit = settings.inherit_context
    if settings.fresh_context == "enabled" and inherit in ("full", "subset"):
        return (
            f'fresh_context "enabled" cannot go with inherit_context "{inherit}": '
            "fresh context and inherited context are mutually exclusive; set "
            'fresh_context "disabled" or inherit_context "none"'
        )
    return None


def resolve_context(
    operator: str, subtype: str | None, explicit: ContextManagement | None
) -> Resolved:
    """The context settings of a call: the defaults of ``operator``
    (``atomic``, ``subtask``, ``sequential``) and, for ``atomic``, its
    ``subtype`` (``standard`` when ``None``; ignored otherwise), with each
    field ``explicit`` sets taking its place.

    Where an explicit field contradicts a default one (`context_problem`),
    the explicit one wins and the default yields: an explicit
    ``fresh_context = "enabled"`` over an inherited default makes
    ``inherit_context`` ``none``; an explicit ``inherit_context`` ``full``
    or ``subset`` over a fresh default makes ``fresh_context`` ``disabled``.

    Raises:
        TemplateError: the operator or subtype is unknown, or the explicit
            fields themselves contradict each other.
    """
    key: str | tuple[str, str] = operator
    if operator == "atomic":
        key = (operator, subtype or "standard")
    defaults = DEFAULTS.get(key)
    if defaults is None:
        known = ", ".join(k if isinstance(k, str) else ":".join(k) for k in DEFAULTS)
        shown = key if isinstance(key, str) else ":".join(key)
        raise TemplateError(
            f"no context defaults for {shown}; the known operators are {known}"
        )
    if explicit is None:
        return defaults
    if (problem := context_problem(explicit)) is not None:
        raise TemplateError(problem)
    resolved = Resolved(
        inherit_context=_given(explicit.inherit_context, defaults.inherit_context),
        accumulate_data=_given(explicit.accumulate_data, defaults.accumulate_data),
        accumulation_format=_given(
            explicit.accumulation_format, defaults.accumulation_format
        ),
        fresh_context=_given(explicit.fresh_context, defaults.fresh_context),
    )
    if context_problem(resolved) is None:
        return resolved
    # One side of the conflict is explicit (both explicit was refused above;
    # no defaults conflict): the default side yields.
    if explicit.fresh_context is not None:
        return msgspec.structs.replace(resolved, inherit_context="none")
    return msgspec.structs.replace(resolved, fresh_context="disabled")


def _given(explicit: _T | None, default: _T) -> _T:
    """``explicit``, unless it was left out (``None``)."""
    return default if explicit is None else explicit


# -- matching -------------------------------------------------------------------

Scorer = Callable[[Template, SubtaskRequest], float]
"""How well a template fits a subtask request: higher is better; not finite
or not above 0, the template is not chosen."""


def _words(text: str) -> set[str]:
    """The lowercased words of ``text``, split at anything but letters and
    digits (``_`` and ``-`` too, so ``summarize_file`` is two words)."""
    return {word for word in _WORD_SEPARATOR.split(text.lower()) if word}


def score(template: Template, request: SubtaskRequest) -> float:
    """How well ``template`` fits ``request`` (the default `Scorer`).

    ``-inf`` if the request's ``inputs`` lack one of the template's
    parameters (it could not be called). Otherwise the sum of: 10 if the
    template's name is one of the request's ``template_hints``; 3 for each
    distinct word of the hints that is a word of the template's ``matches``
    or name; 1 for each distinct word of three letters or more of the
    request's ``description`` and ``type`` that is a word of the template's
    ``description``, ``matches`` or name; 1 if their subtypes are the same.
    """
    if any(param not in request.inputs for param in template.params):
        return -math.inf
    named = _words(template.name) | _words(" ".join(template.matches))
    described = named | _words(template.description)
    hinted = _words(" ".join(request.template_hints))
    asked = {
        word
        for word in _words(f"{request.description} {request.type}")
        if len(word) >= 3
    }
    total = 10.0 if template.name in request.template_hints else 0.0
    total += 3 * len(hinted & named)
    total += len(asked & described)
    if template.subtype == request.subtype:
        total += 1
    return total


def match(
    templates: Sequence[Template], request: SubtaskRequest, scorer: Scorer = score
) -> Template | None:
    """The template of ``templates`` that ``scorer`` scores highest for
    ``request``, of those the request's inputs can call (each parameter
    given) and scored finite and above 0; of equal scores, the one whose
    name sorts first (then the first given). ``None`` if none. A scorer that
    fails, or answers no number, scores the template out: a scorer may be
    the user's (`[task] scorer`)."""
    best: Template | None = None
    best_score = 0.0
    for template in templates:
        if any(p not in request.inputs for p in template.params):
            continue
        try:
            value = float(scorer(template, request))
        except Exception:  # noqa: BLE001 (the user's function; refused below)
            continue
        if not math.isfinite(value) or value <= 0:
            continue
        if (
            best is None
            or value > best_score
            or (value == best_score and template.name < best.name)
        ):
            best, best_score = template, value
    return best
