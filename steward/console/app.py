"""The console's web application: Starlette routes over the log, the
projections and the kind table, rendered on the server (Jinja2, every value
escaped) with one small script for live updates.

Pages: ``/`` (the actors, filtered and paged, with counts by status),
``/actor?stream=KIND.ID`` (an actor's summary, what it waits on a person
for, history, pending work and actions), ``/actor/events.jsonl``,
``/actor/prompt``, ``/actor/verify``; the actions ``POST /actor/cancel``,
``POST /actor/approve``, ``POST /actor/deny``, ``POST /actor/fork`` and
``POST /actors/cancel`` (a batch from a list); ``/live`` (server-sent
events, one per committed record). Actions take the same paths as the
command line: a cancel or an answer is the kind's input decided by a host,
a fork and a verify are `steward.replay`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import jinja2
import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from steward import events, replay
from steward.actors.kind import Kind, Kinds
from steward.bus import EventLog
from steward.clock import Clock, SystemClock
from steward.console import drawing, reads
from steward.errors import NotFoundError, StewardError
from steward.host import Host
from steward.isotime import iso_time
from steward.projections.store import Projector

__all__ = ["Console", "create_app"]

HERE = Path(__file__).parent
COOKIE = "steward_console_token"
VIEWS = ("raw", "compact", "timeline")
FORM_LIMIT = 16_384
"""The bytes an action's form may hold (a reason, a version, the CSRF value)."""


@dataclass
class Console:
    """What the pages read and act on, for one process."""

    log: EventLog
    projector: Projector
    kinds: Kinds
    token: str | None = None
    """The secret every request must carry; ``None``: none asked."""
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    """The form value every action must carry (pages embed it)."""
    history: reads.History = field(init=False)
    listeners: set[asyncio.Queue[events.Recorded | None]] = field(default_factory=set)
    _caught_up: asyncio.Lock = field(default_factory=asyncio.Lock)
    _host: Host | None = None
    keeps_current: bool = True
    """Whether the console applies the log to the projections before it
    reads them; ``False`` in a `serve`, whose host keeps them current."""
    clock: Clock = field(default_factory=SystemClock)
    """Where the lists' time filters read now (``?since=1h``)."""

    def __post_init__(self) -> None:
        self.history = reads.History(self.log, self.kinds)

    async def current(self) -> None:
        """Bring the projections up to the log's head (unless the process's
        host keeps them so)."""
        if not self.keeps_current:
            return
        async with self._caught_up:
            await self.projector.catch_up(self.log)

    @property
    def host(self) -> Host:
        """The host this process decides operators' inputs with (it carries
        out nothing: a serve on the log does)."""
        if self._host is None:
            self._host = Host(self.log, projector=self.projector, kinds=self.kinds)
        return self._host

    async def follow(self) -> None:
        """Hand every record committed from now on to each listener."""
        async for rec in self.log.subscribe(await self.log.head()):
            for queue in list(self.listeners):
                if queue.full():  # a slow reader refreshes once, not per record
                    continue
                queue.put_nowait(rec)
        for queue in list(self.listeners):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(None)


_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _url(path: str, **query: Any) -> str:
    kept = {k: v for k, v in query.items() if v not in (None, "", False)}
    return f"{path}?{urlencode(kept)}" if kept else path


_templates.globals["url"] = _url
_templates.globals["VIEWS"] = VIEWS
_templates.globals["draw"] = drawing.draw


def _page(console: Console, name: str, code: int = 200, **values: Any) -> HTMLResponse:
    html = _templates.get_template(name).render(
        csrf=console.csrf, kinds_nav=console.kinds.names, **values
    )
    return HTMLResponse(html, status_code=code)


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _problem(request: Request, status: int, message: str) -> HTMLResponse:
    return _page(
        _console(request),
        "problem.html",
        status,
        title=f"{status}",
        message=message,
    )


Handler = Callable[[Request], Awaitable[Response]]


def _handled(handler: Handler) -> Handler:
    """``handler`` with steward's errors as pages: a thing not found 404,
    any other refusal of the input 400."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except NotFoundError as e:
            return _problem(request, 404, str(e))
        except StewardError as e:
            return _problem(request, 400, str(e))

    return handle


def _one(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value.strip() if value is not None else None


async def _actor(request: Request) -> tuple[str, reads.Held]:
    """The stream the request names (``?stream=KIND.ID``), which must be of a
    kind of the table and in the log, and what the log holds of it."""
    stream = _one(request, "stream") or ""
    if not stream:
        raise reads.BadRequest("name an actor: ?stream=KIND.ID")
    return stream, await _console(request).history.held(stream)


def _filters(request: Request, console: Console) -> reads.Filters:
    """The list filters the query gives (``status``, ``q``, ``since``,
    ``until``)."""
    since, until = reads.window(
        _one(request, "since"), _one(request, "until"), console.clock.now()
    )
    return reads.Filters(
        status=_one(request, "status") or None,
        text=_one(request, "q") or None,
        since=since,
        until=until,
    )


SPANS = (("1h", "the last hour"), ("1d", "the last day"), ("7d", "the last week"))
"""The created-time choices the list's filter offers (``?since=``)."""


@_handled
async def actors_page(request: Request) -> Response:
    console = _console(request)
    kind = _one(request, "kind") or None
    filters = _filters(request, console)
    await console.current()
    counts = await reads.counts(
        console.projector, console.kinds, kind=kind, filters=filters
    )
    rows, page = await reads.actor_rows(
        console.projector,
        console.kinds,
        kind=kind,
        filters=filters,
        page=_one(request, "page"),
    )
    fragment = _one(request, "fragment") == "rows"
    return _page(
        console,
        "actors_rows.html" if fragment else "actors.html",
        title="actors",
        kinds=console.kinds.names,
        unlisted=[k.name for k in console.kinds if k.surface.listing is None],
        cancellable={k.name for k in console.kinds if k.surface.cancel is not None},
        spans=SPANS,
        kind=kind,
        status=filters.status,
        q=filters.text,
        since=_one(request, "since") or None,
        until=_one(request, "until") or None,
        said=_one(request, "said"),
        counts=counts,
        rows=rows,
        page=page,
    )


async def _history(
    console: Console, records: list[events.Recorded], request: Request
) -> dict[str, Any]:
    """What the history section shows: the view asked for, filtered and paged."""
    kind = console.kinds.of(records[0].stream)
    view = _one(request, "view") or "raw"
    if view not in VIEWS:
        raise reads.BadRequest(f"no view {view!r}; the views are {', '.join(VIEWS)}")
    types = sorted({events.type_name(r.event) for r in records})
    only = _one(request, "type") or None
    if only is not None and only not in types:
        raise reads.BadRequest(
            f"no event of type {only!r} in this history; it has {', '.join(types)}"
        )
    failures = (_one(request, "failures") or "").lower() in ("1", "on", "true")
    kept = [
        r
        for r in records
        if (only is None or events.type_name(r.event) == only)
        and (not failures or reads.failed(r.event))
    ]
    values: dict[str, Any] = {
        "view": view,
        "types": types,
        "type": only,
        "failures": failures,
        "matched": len(kept),
    }
    if view == "timeline":
        stream = records[0].stream
        rows = await reads.children(console.projector, console.kinds, stream)
        lives = await reads.lives(console.log, rows)
        steps = reads.timeline(records, console.kinds, lives)
        page = reads.page_of(len(steps), _one(request, "page"), last=False)
        values["steps"] = steps[page.start : page.start + reads.PAGE]
        values["span"] = reads.span(values["steps"])
    elif view == "compact":
        groups = reads.grouped(kept, kind)
        page = reads.page_of(len(groups), _one(request, "page"), last=True)
        values["groups"] = groups[page.start : page.start + reads.PAGE]
    else:
        page = reads.page_of(len(kept), _one(request, "page"), last=True)
        values["shown"] = [
            reads.shown(r, kind) for r in kept[page.start : page.start + reads.PAGE]
        ]
    values["page"] = page
    return values


@_handled
async def actor_page(request: Request) -> Response:
    console = _console(request)
    await console.current()
    stream, held = await _actor(request)
    kind = console.kinds.of(stream)
    waiting = _waiting(kind, held.state)
    fragment = _one(request, "fragment")
    if fragment == "approvals":  # read on every record of a live page: kept small
        return _page(console, "approvals.html", stream=stream, waiting=waiting)
    records = held.records
    row, whole = await reads.row_of(console.projector, console.kinds, stream)
    values: dict[str, Any] = {
        "title": stream,
        "stream": stream,
        "kind": kind.name,
        "row": row,
        "whole": whole,
        "count": len(records),
        "first_at": iso_time(records[0].at),
        "last_at": iso_time(records[-1].at),
        "seconds": round(records[-1].at - records[0].at, 3),
        "cancellable": kind.surface.cancel is not None,
        "waiting": waiting,
        "prompts": kind.reactor.model_call is not None,
        "said": _one(request, "said"),
        "ends_step": lambda version: held.ends_step(version, kind),
        **await _history(console, records, request),
    }
    if fragment == "history":
        return _page(console, "history.html", **values)
    shows = kind.surface.sections
    values["sections"] = () if shows is None else shows(held.state, records)
    if fragment == "sections":
        return _page(console, "sections.html", **values)
    values["shown_state"] = (
        kind.surface.show(stream, len(records), held.state)
        if kind.surface.show is not None
        else []
    )
    values["children"] = await reads.children(console.projector, console.kinds, stream)
    values["pending"] = await reads.pending(console.projector, stream, records)
    if fragment == "summary":
        return _page(console, "summary.html", **values)
    if fragment is not None:
        raise reads.BadRequest(f"no fragment {fragment!r}")
    return _page(console, "actor.html", **values)


def _waiting(kind: Kind[Any], state: Any) -> list[dict[str, str]]:
    """What the actor waits on a person for, its arguments as JSON text."""
    if kind.surface.waiting is None:
        return []
    return [
        {
            "request_id": a.request_id,
            "name": a.name,
            "args": msgspec.json.format(_json.encode(a.args), indent=2).decode(),
        }
        for a in kind.surface.waiting(state)
    ]


_json = msgspec.json.Encoder()


@_handled
async def download(request: Request) -> Response:
    stream, held = await _actor(request)
    body = b"".join(events.recorded_to_json(r) + b"\n" for r in held.records)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in stream)
    return Response(
        body,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'},
    )


@_handled
async def prompt(request: Request) -> Response:
    console = _console(request)
    stream, held = await _actor(request)
    try:
        version = int(_one(request, "version") or "")
    except ValueError:
        raise reads.BadRequest("give the version of a model call: ?version=N") from None
    found = reads.prompt_of(held.records, console.kinds.of(stream), version)
    return _page(console, "prompt.html", prompt=found)


@_handled
async def verify(request: Request) -> Response:
    console = _console(request)
    stream, held = await _actor(request)
    mismatch = replay.verify(held.records, kinds=console.kinds)
    sides: dict[str, str] = {}
    if mismatch is not None:
        pretty = msgspec.json.Encoder()

        def side(value: object) -> str:
            return msgspec.json.format(pretty.encode(value), indent=2).decode()

        sides = {
            "input": side(mismatch.input),
            "recorded": side(list(mismatch.recorded)),
            "decided": side(
                None if mismatch.decided is None else list(mismatch.decided)
            ),
        }
    return _page(
        console,
        "verify.html",
        title=f"verify {stream}",
        stream=stream,
        count=len(held.records),
        mismatch=mismatch,
        sides=sides,
    )


async def _form(request: Request) -> dict[str, str]:
    """The form of an action (`_fields`), a value per name (the last)."""
    return dict(await _fields(request))


async def _fields(request: Request) -> list[tuple[str, str]]:
    """The fields of an action's form, in order, refused unless it carries
    this page's CSRF value and comes from this origin (when the browser
    says)."""
    body = await request.body()
    if len(body) > FORM_LIMIT:
        raise reads.BadRequest(f"a form of more than {FORM_LIMIT} bytes is refused")
    fields = parse_qsl(body.decode("utf-8", "replace"))
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if origin is not None and origin.split("://", 1)[-1] != host:
        raise _Forbidden(f"an action from another origin ({origin}) is refused")
    given = dict(fields).get("csrf", "")
    if not hmac.compare_digest(given.encode(), _console(request).csrf.encode()):
        raise _Forbidden(
            "the form carries no valid CSRF value; reload the page and try again"
        )
    return fields


class _Forbidden(StewardError):
    pass


def _action(handler: Handler) -> Handler:
    async def act(request: Request) -> Response:
        try:
            return await handler(request)
        except _Forbidden as e:
            return _problem(request, 403, str(e))

    return _handled(act)


def _back(stream: str, said: str) -> RedirectResponse:
    return RedirectResponse(_url("/actor", stream=stream, said=said), status_code=303)


@_action
async def cancel(request: Request) -> Response:
    console = _console(request)
    form = await _form(request)
    stream, _ = await _actor(request)
    kind = console.kinds.of(stream)
    if kind.surface.cancel is None:
        raise reads.BadRequest(f"a {kind.name} cannot be cancelled")
    reason = form.get("reason", "").strip() or "cancelled from the console"
    host = console.host
    commit = await host.submit(stream, kind.surface.cancel(reason, host.clock.now()))
    await console.current()
    row, _ = await reads.row_of(console.projector, console.kinds, stream)
    status = row.status if row is not None else "?"
    if commit is None:
        return _back(
            stream, f"refused: a {kind.name} that is {status} cannot be cancelled"
        )
    return _back(stream, f"cancel recorded; it is now {status}")


async def _answer(request: Request, approved: bool) -> Response:
    """Record the operator's answer to what the actor waits on a person for
    (the form's ``request``), as `steward runs approve|deny` does."""
    console = _console(request)
    form = await _form(request)
    stream, held = await _actor(request)
    kind = console.kinds.of(stream)
    if kind.surface.waiting is None or kind.surface.answer is None:
        raise reads.BadRequest(f"a {kind.name} never waits on a person")
    waiting = [a.request_id for a in kind.surface.waiting(held.state)]
    request_id = form.get("request", "").strip()
    if request_id not in waiting:
        raise reads.BadRequest(
            f"{stream} waits for no request {request_id!r}"
            + (f", only for {', '.join(map(repr, waiting))}" if waiting else "")
            + "; reload the page"
        )
    verb = "approved" if approved else "denied"
    reason = form.get("reason", "").strip() or f"{verb} from the console"
    host = console.host
    answer = kind.surface.answer(request_id, approved, reason, host.clock.now())
    commit = await host.submit(stream, answer)
    await console.current()
    row, _ = await reads.row_of(console.projector, console.kinds, stream)
    status = row.status if row is not None else "?"
    if commit is None:
        return _back(stream, f"refused: a {kind.name} that is {status} takes no answer")
    return _back(stream, f"{request_id} {verb}; it is now {status}")


@_action
async def approve(request: Request) -> Response:
    return await _answer(request, True)


@_action
async def deny(request: Request) -> Response:
    return await _answer(request, False)


@_action
async def cancel_many(request: Request) -> Response:
    """Cancel the actors a list shows (``which=shown``: every ``shown``
    stream) or those ticked there (``which=selected``), each by its kind's
    cancel input; back to the list, saying how many were cancelled and why
    the others were skipped."""
    console = _console(request)
    fields = await _fields(request)
    form = dict(fields)
    which = form.get("which", "")
    if which not in ("shown", "selected"):
        raise reads.BadRequest("say which to cancel: which=shown or which=selected")
    streams = list(dict.fromkeys(v.strip() for k, v in fields if k == which))
    if not streams:
        raise reads.BadRequest(
            "no actor is shown" if which == "shown" else "tick the actors to cancel"
        )
    reason = form.get("reason", "").strip() or "cancelled from the console"
    host = console.host
    of = [(stream, console.kinds.of(stream)) for stream in streams]  # all or none
    cancelled = uncancellable = refused = 0
    for stream, kind in of:
        if kind.surface.cancel is None:
            uncancellable += 1
            continue
        commit = await host.submit(
            stream, kind.surface.cancel(reason, host.clock.now())
        )
        if commit is None:
            refused += 1
        else:
            cancelled += 1
    await console.current()
    said = f"{cancelled} of {len(streams)} cancelled"
    skipped = [
        f"{n} {why}"
        for n, why in (
            (uncancellable, "of a kind that cannot be cancelled"),
            (refused, "that refused it (ended already)"),
        )
        if n
    ]
    if skipped:
        said += "; skipped " + " and ".join(skipped)
    back = {k: form.get(k) for k in ("kind", "status", "q", "since", "until")}
    return RedirectResponse(_url("/", **back, said=said), status_code=303)


@_action
async def fork(request: Request) -> Response:
    console = _console(request)
    form = await _form(request)
    stream, held = await _actor(request)
    try:
        at = int(form.get("at", ""))
    except ValueError:
        raise reads.BadRequest(
            "give the version to fork at (where a step ends)"
        ) from None
    forked, copy, correlation = replay.fork(held.records, at, console.kinds)
    await console.log.append(forked, copy, 0, correlation_id=correlation)
    return _back(
        forked,
        f"forked {stream} at version {at} as {forked}; a `steward serve` on this "
        "log carries out what it asks for",
    )


async def live(request: Request) -> Response:
    """Server-sent events: a ``record`` event for each record committed from
    now on (of ``?stream=`` only, when given), its data the record's stream
    and version."""
    console = _console(request)
    only = _one(request, "stream") or None
    queue: asyncio.Queue[events.Recorded | None] = asyncio.Queue(maxsize=64)

    async def sent() -> AsyncIterator[str]:
        console.listeners.add(queue)
        try:
            yield "retry: 2000\n\n"
            while (rec := await queue.get()) is not None:
                if only is None or rec.stream == only:
                    data = msgspec.json.encode(
                        {"stream": rec.stream, "version": rec.version}
                    ).decode()
                    yield f"event: record\ndata: {data}\n\n"
        finally:
            console.listeners.discard(queue)

    return StreamingResponse(
        sent(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store"},
    )


class _Guard(BaseHTTPMiddleware):
    """The token (when one is set) on every request, and headers that keep
    the pages to themselves: no script but the console's own, no framing."""

    async def dispatch(
        self, request: Request, call_next: RequestResponseEndpoint
    ) -> Response:
        console = _console(request)
        if console.token is not None:
            given = request.query_params.get("token")
            if given is not None and _same(given, console.token):
                query = {k: v for k, v in request.query_params.items() if k != "token"}
                back = RedirectResponse(
                    _url(request.url.path, **query), status_code=303
                )
                back.set_cookie(COOKIE, given, httponly=True, samesite="strict")
                return back
            header = request.headers.get("authorization", "")
            carried = request.cookies.get(COOKIE) or header.removeprefix("Bearer ")
            if not _same(carried, console.token):
                return _problem(
                    request,
                    401,
                    "this console asks for its token: open it once with "
                    "?token=… (the [console] token setting)",
                )
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self'; style-src 'self'; "
            "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        return response


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def create_app(console: Console) -> Starlette:
    """The console's application over ``console`` (its log and projections
    open for as long as the application runs)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        following = asyncio.create_task(console.follow())
        try:
            yield
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
            for queue in list(console.listeners):
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _problem(request, 404, f"no page {request.url.path}")

    app = Starlette(
        routes=[
            Route("/", actors_page),
            Route("/actor", actor_page),
            Route("/actor/events.jsonl", download),
            Route("/actor/prompt", prompt),
            Route("/actor/verify", verify),
            Route("/actor/cancel", cancel, methods=["POST"]),
            Route("/actor/approve", approve, methods=["POST"]),
            Route("/actor/deny", deny, methods=["POST"]),
            Route("/actors/cancel", cancel_many, methods=["POST"]),
            Route("/actor/fork", fork, methods=["POST"]),
            Route("/live", live),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=[Middleware(_Guard)],
        exception_handlers={404: not_found},
        lifespan=lifespan,
    )
    app.state.console = console
    return app
