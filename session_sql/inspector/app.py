"""The inspector's web app (SPEC §12.5): pages, the JSON API and Server-Sent Events, read-only.

Built on Starlette over one sync ``SessionStore``. Each store call (and each page render) runs
in Starlette's thread pool: the whole-log outline is a query through the ORM read models on the
store's sync engine, which the async store does not expose, and the sync store's ``follow``
already waits on one shared ``LISTEN`` connection on PostgreSQL (a short poll on SQLite). A
follower waits in a thread of its own pool (``max_followers`` of them, counted from their
admission; one more is a 503 with a message), so followers never starve the pages; it waits at
most ``follow_wait`` seconds at a time, between which the stream sends a keep-alive, notices
a client that went away, and ends when the server is stopping (``Guard.stopping``).

``Guard`` wraps every request: only ``GET`` and ``HEAD`` pass (405 otherwise), the ``Host``
must be a loopback name when the app serves loopback only (no DNS rebinding), the token when
one is set (``Authorization: Bearer``, or the HttpOnly cookie a ``?token=`` sets once), and
every response carries a strict Content-Security-Policy and ``nosniff``.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from session_sql import InvalidArgumentError, SessionInfo, SessionNotFoundError, StoreError
from session_sql.inspector import api
from session_sql.inspector.assets import CSS, JS
from session_sql.inspector.outline import surface_page
from session_sql.inspector.page import esc, session_page, sessions_page
from session_sql.inspector.search import search_messages, search_query
from session_sql.jsoncodec import dumps_compact

if TYPE_CHECKING:
    from session_sql import SessionEvent, SessionStore

__all__ = ["COOKIE", "CSP", "LOOPBACK_HOSTS", "Guard", "create_app"]

COOKIE = "session_sql_token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
READ_METHODS = frozenset({"GET", "HEAD"})


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8765`` -> ``::1``)."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class Guard:
    """The ASGI middleware that makes the app read-only, loopback-bound and token-checked."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        allowed_hosts: frozenset[str] | None,
        stopping: threading.Event,
    ) -> None:
        self.app, self.token, self.allowed_hosts = app, token, allowed_hosts
        self.stopping = stopping
        """Set when the server stops: the follow streams end at their next keep-alive."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, secured)
            return
        await self.app(scope, receive, secured)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        if scope["method"] not in READ_METHODS:
            return PlainTextResponse(
                "the inspector is read-only", status_code=405, headers={"Allow": "GET, HEAD"}
            )
        host = _host_name(headers.get("host", ""))
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            return PlainTextResponse("unexpected Host header", status_code=400)
        if self.token is None:
            return None
        given = self._given_token(scope, headers)
        if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        from_query = [v for k, v in query if k == "token"]
        if from_query and hmac.compare_digest(from_query[-1].encode(), self.token.encode()):
            # Once: the token becomes an HttpOnly cookie, and leaves the address bar.
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            target = scope["path"] + (f"?{rest}" if rest else "")
            moved = RedirectResponse(target, status_code=303)
            moved.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
            return moved
        return PlainTextResponse(
            "a token is required: open the address session-sql serve printed "
            "(?token=...), or send 'Authorization: Bearer <token>'",
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @staticmethod
    def _given_token(scope: Scope, headers: Headers) -> str | None:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value:
            return value.strip()
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
        return None


# --------------------------------------------------------------------------------------------
# Routes


def _query(request: Request) -> dict[str, str]:
    return dict(request.query_params)


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _error(request, 400, str(exc))


async def _unavailable(request: Request, exc: Exception) -> Response:
    return _error(request, 503, str(exc))


def _error(request: Request, status: int, message: str) -> Response:
    if _is_api(request):
        return JSONResponse({"error": message}, status_code=status)
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<link rel="stylesheet" href="/static/inspector.css"><title>error</title></head>'
        f'<body><header><p class="crumbs"><a href="/">sessions</a></p>'
        f"<h1>{status}</h1><p>{esc(message)}</p></header></body></html>"
    )
    return HTMLResponse(body, status_code=status)


def _json(value: Any) -> Response:
    return JSONResponse(value)


def create_app(
    store: SessionStore,
    *,
    token: str | None = None,
    allowed_hosts: frozenset[str] | None = LOOPBACK_HOSTS,
    follow_wait: float = 2.0,
    max_followers: int = 16,
) -> Guard:
    """The inspector over ``store`` (its tenant's sessions only).

    ``token``: required on every request. ``allowed_hosts``: the ``Host`` names accepted
    (None: any; the loopback names by default). ``max_followers``: how many follow streams
    may be open at once (one more is a 503 with a message; ``store`` must let as many follow:
    its own ``max_followers``, 10,000 by default). ``follow_wait``: the longest a follow stream
    waits for an event before a keep-alive.
    """

    stopping = threading.Event()
    followers = Followers(max_followers)

    async def sessions_html(request: Request) -> Response:
        query = api.list_query(_query(request), request.query_params.getlist("label"))

        def render() -> str:
            infos, next_after = api.list_sessions_page(store, query)
            return sessions_page(infos, query, next_after)

        return HTMLResponse(await run_in_threadpool(render))

    async def session_html(request: Request) -> Response:
        params = _query(request)
        from_seq = api.int_param(params, "from_seq", None)
        limit = api.int_param(params, "limit", api.EVENT_PAGE, low=1)
        surface_from = api.int_param(params, "surface_from", None, low=1)
        surface_limit = api.int_param(params, "surface_limit", api.SURFACE_PAGE, low=1)
        assert surface_limit is not None
        surface_limit = min(surface_limit, api.MAX_SURFACE)
        searching = search_query(params) if params.get("q", "").strip() else None
        sid = request.path_params["session_id"]

        def render() -> str:
            view = api.session_view(
                store,
                sid,
                from_seq=from_seq,
                limit=limit,
                surface_from=surface_from,
                surface_limit=surface_limit,
            )
            found = None
            if searching is not None:
                query, after, most = searching
                found = search_messages(store, sid, query, after_seq=after, limit=most)
            return session_page(view, search=found)

        return HTMLResponse(await run_in_threadpool(render))

    async def css(request: Request) -> Response:
        return Response(CSS, media_type="text/css; charset=utf-8")

    async def js(request: Request) -> Response:
        return Response(JS, media_type="text/javascript; charset=utf-8")

    async def sessions_json(request: Request) -> Response:
        query = api.list_query(_query(request), request.query_params.getlist("label"))
        infos, next_after = await run_in_threadpool(api.list_sessions_page, store, query)
        return _json({"sessions": [api.info_json(i) for i in infos], "next_after": next_after})

    async def session_json(request: Request) -> Response:
        sid = request.path_params["session_id"]
        return _json(await run_in_threadpool(api.session_detail, store, sid))

    async def events_json(request: Request) -> Response:
        params = _query(request)
        sid = request.path_params["session_id"]
        from_seq = api.int_param(params, "from_seq", 0)
        limit = api.int_param(params, "limit", api.EVENT_PAGE, low=1)
        assert from_seq is not None and limit is not None
        limit = min(limit, api.MAX_EVENTS)

        def read() -> tuple[list[str], int]:
            head = store.head_seq(sid)
            stream = store.events(sid, from_seq=from_seq, to_seq=from_seq + limit)
            return [api.event_json(e) for e in stream], head

        texts, head = await run_in_threadpool(read)
        following = from_seq + len(texts)
        # The events as stored, byte for byte: the JSON texts are joined, not re-encoded.
        body = (
            f'{{"session_id":{json.dumps(sid)},"head_seq":{head},"events":[{",".join(texts)}],'
            f'"next_from_seq":{following if following <= head else "null"}}}'
        )
        return Response(body, media_type="application/json")

    async def messages_json(request: Request) -> Response:
        sid = request.path_params["session_id"]
        last = api.int_param(_query(request), "last", None)
        messages = await run_in_threadpool(lambda: store.messages(sid, last=last))
        return Response(f'{{"messages":{dumps_compact(messages)}}}', media_type="application/json")

    async def surface_json(request: Request) -> Response:
        sid = request.path_params["session_id"]
        params = _query(request)
        last = api.int_param(params, "last", None)
        first = api.int_param(params, "from", None, low=1)
        if first is not None:  # a page by place on the surface, as the session page's
            limit = api.int_param(params, "limit", api.SURFACE_PAGE, low=1)
            assert limit is not None
            page = await run_in_threadpool(
                lambda: surface_page(store, sid, first=first, limit=min(limit, api.MAX_SURFACE))
            )
            shaped = [{"ordinal": page.first + i, **n._asdict()} for i, n in enumerate(page.nodes)]
            following = page.first + len(page.nodes)
            body = {
                "nodes": shaped,
                "length": page.length,
                "next_from": following if following <= page.length else None,
            }
            return Response(dumps_compact(body), media_type="application/json")
        nodes = await run_in_threadpool(lambda: store.surface_messages(sid, last=last))
        shaped = [n._asdict() for n in nodes]
        return Response(f'{{"nodes":{dumps_compact(shaped)}}}', media_type="application/json")

    async def search_json(request: Request) -> Response:
        sid = request.path_params["session_id"]
        query, after, most = search_query(_query(request))
        found = await run_in_threadpool(
            lambda: search_messages(store, sid, query, after_seq=after, limit=most)
        )
        return _json(
            {
                "session_id": sid,
                "q": query,
                "matches": [m.to_json() for m in found.matches],
                "next_after_seq": found.next_after_seq,
            }
        )

    async def follow(request: Request) -> Response:
        sid = request.path_params["session_id"]
        params = _query(request)
        # A reconnecting EventSource names the last event it got; that wins over the URL's.
        resumed = request.headers.get("last-event-id")
        if resumed:
            params = {"Last-Event-ID": resumed}
        name = "Last-Event-ID" if resumed else "after_seq"
        after = api.int_param(params, name, None, low=-1)
        head = await run_in_threadpool(store.head_seq, sid)  # 404 before the stream starts
        start = head if after is None else after
        if not followers.admit():
            return _error(request, 503, f"{max_followers} follow streams are open already")
        return _FollowStream(
            _sse(request, store, sid, start, follow_wait, followers, stopping), followers
        )

    def get(path: str, endpoint: Any) -> Route:
        return Route(path, endpoint, methods=["GET"])

    # Ids are any printable text, "/" included (``{id:path}``); a route with a suffix comes
    # before the bare id, which would match it too.
    routes = [
        get("/", sessions_html),
        get("/static/inspector.css", css),
        get("/static/inspector.js", js),
        get("/sessions/{session_id:path}", session_html),
        get("/api/sessions", sessions_json),
        get("/api/sessions/{session_id:path}/events", events_json),
        get("/api/sessions/{session_id:path}/messages", messages_json),
        get("/api/sessions/{session_id:path}/surface", surface_json),
        get("/api/sessions/{session_id:path}/search", search_json),
        get("/api/sessions/{session_id:path}/follow", follow),
        get("/api/sessions/{session_id:path}", session_json),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            SessionNotFoundError: _not_found,
            InvalidArgumentError: _bad_request,
            StoreError: _unavailable,
        },
    )
    return Guard(app, token=token, allowed_hosts=allowed_hosts, stopping=stopping)


class Followers:
    """The open follow streams, and the threads they wait in (one each at most, so a stream
    never waits for a thread). A stream is counted from its admission (``admit``, on the
    event loop: no lock needed) until its response ends, so requests that arrive together
    are never admitted past ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.open = 0
        self.threads = anyio.CapacityLimiter(size)

    def admit(self) -> bool:
        """Count one more stream, unless ``size`` are open (then the request is a 503)."""
        if self.open >= self.size:
            return False
        self.open += 1
        return True


class _FollowStream(StreamingResponse):
    """A follow stream's response: gives its admission back however it ends (finished, the
    client gone, never started)."""

    def __init__(self, content: AsyncIterator[str], followers: Followers) -> None:
        super().__init__(
            content, media_type="text/event-stream", headers={"X-Accel-Buffering": "no"}
        )
        self._followers = followers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._followers.open -= 1


def _next_event(events: Iterator[SessionEvent]) -> SessionEvent | None:
    return next(events, None)


async def _sse(
    request: Request,
    store: SessionStore,
    sid: str,
    after: int,
    wait: float,
    followers: Followers,
    stopping: threading.Event,
) -> AsyncIterator[str]:
    """The follow stream: ``ready``, then one ``event`` per committed event (its ``id`` the
    seq, so a reconnecting ``EventSource`` resumes with ``Last-Event-ID``), keep-alives
    between."""

    def follow_from(seq: int) -> Iterator[SessionEvent]:
        return store.follow(sid, after_seq=seq, timeout=wait)

    async def in_thread(fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=followers.threads)

    def same_session(started: SessionInfo, sent: int) -> bool:
        """Whether ``sid`` still names the session the stream started on: each ``follow``
        stays on the session it starts on, and the next one starts anew, so between two a
        session deleted and created again under its id must be told apart (its creation
        time, or a head behind what was sent)."""
        try:
            now = store.session_info(sid)
        except SessionNotFoundError:
            return False
        return now.created_at == started.created_at and now.head_seq >= sent

    started = await in_thread(store.session_info, sid)
    yield f"event: ready\ndata: {json.dumps({'session_id': sid, 'after_seq': after})}\n\n"
    last = after
    while not stopping.is_set() and not await request.is_disconnected():
        try:
            if not await in_thread(same_session, started, last):
                raise SessionNotFoundError.for_session(sid)
            events = await in_thread(follow_from, last)
            try:
                while (event := await in_thread(_next_event, events)) is not None:
                    last = event.seq
                    yield f"id: {event.seq}\nevent: event\ndata: {api.event_json(event)}\n\n"
            finally:
                # Shielded: a stream cancelled at shutdown still closes its follow, which
                # gives back the connection a paused page read holds.
                with anyio.CancelScope(shield=True):
                    await in_thread(getattr(events, "close", lambda: None))
        except SessionNotFoundError:
            # The session was deleted (perhaps created again under its id: another session,
            # which this stream must not run on into): say so and end.
            yield f"event: deleted\ndata: {json.dumps({'session_id': sid})}\n\n"
            return
        yield ": keep-alive\n\n"
