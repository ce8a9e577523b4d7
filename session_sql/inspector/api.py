"""What the inspector reads from the store, and its JSON shapes (docs/inspector.md, "API").

Plain functions over a ``SessionStore`` (the public API only), shared by the JSON routes, the
pages and ``session-sql view``. Query parameters are checked here: a bad one is an
``InvalidArgumentError`` naming it, which the routes answer with 400.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from session_sql import (
    InvalidArgumentError,
    SessionEvent,
    SessionInfo,
    SessionStore,
    SurfaceMessage,
)
from session_sql.inspector.outline import Outline, call_partners, outline, surface_page
from session_sql.jsoncodec import dumps_compact

__all__ = [
    "EVENT_PAGE",
    "LIST_PAGE",
    "MAX_SURFACE",
    "SURFACE_PAGE",
    "ListQuery",
    "SessionView",
    "event_json",
    "info_json",
    "int_param",
    "list_query",
    "list_sessions_page",
    "session_detail",
    "session_view",
]

LIST_PAGE = 50
"""Sessions per page of the list (``limit`` may ask for up to ``MAX_LIST``)."""
MAX_LIST = 1000
EVENT_PAGE = 200
"""Events per page of a session's log (``limit`` may ask for up to ``MAX_EVENTS``)."""
MAX_EVENTS = 5000
SURFACE_PAGE = 300
"""Surface nodes per page beside the log (the last ones by default; ``surface_limit`` may ask
for up to ``MAX_SURFACE``)."""
MAX_SURFACE = 5000
MAX_CHILDREN = 100
TURN_SPAN = 4000
"""The timeline and the token chart draw the turns that start in this many events before the
end of the page (and the whole log when it is no longer): what a page costs follows the page,
not the log. (About 800 turns of a plain chat, 300 of tool calls: more than the chart's 300
bars and the list's 200 rows show one by one; reading the turns is most of a page's cost.)"""


MAX_PARAM = 2**62
"""The largest value a numeric query parameter keeps: beyond every seq and count a store
holds (the store clamps its own bounds to the same), and far enough below the 64-bit limit
that a page's arithmetic (``from_seq`` + ``limit``) cannot pass it."""


def int_param(
    params: Mapping[str, str], name: str, default: int | None, low: int = 0
) -> int | None:
    """An integer query parameter (``default`` when absent); refused unless an int >= ``low``,
    clamped to ``MAX_PARAM`` (a seq or count beyond it reads as past the end: an empty page,
    never an overflow)."""
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(
            f"{name} must be an integer, got {raw!r}", argument=name
        ) from None
    if value < low:
        raise InvalidArgumentError(f"{name} must be >= {low}, got {value}", argument=name)
    return min(value, MAX_PARAM)


@dataclass(frozen=True)
class ListQuery:
    """The filters and paging of ``GET /api/sessions`` and the sessions page (as ``ls``)."""

    limit: int = LIST_PAGE
    after: str | None = None
    parent: str | None = None
    user: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    id_prefix: str | None = None
    order: str = "updated"
    hidden: bool = False  # also the sessions labelled session_sql.hidden=true (as ls --hidden)

    def params(self, **changes: Any) -> list[tuple[str, str]]:
        """This query as URL parameters (with ``changes``), defaults left out."""
        values = {**self.__dict__, **changes}
        pairs: list[tuple[str, str]] = []
        for name in ("user", "parent", "id_prefix", "after"):
            if values[name]:
                pairs.append((name, values[name]))
        pairs.extend(("label", f"{k}={v}") for k, v in values["labels"])
        if values["order"] != "updated":
            pairs.append(("order", values["order"]))
        if values["limit"] != LIST_PAGE:
            pairs.append(("limit", str(values["limit"])))
        if values["hidden"]:
            pairs.append(("hidden", "1"))
        return pairs


def list_query(params: Mapping[str, str], labels: Sequence[str]) -> ListQuery:
    """``ListQuery`` from query parameters (``label`` repeatable, each ``NAME=VALUE``)."""
    pairs: dict[str, str] = {}
    for pair in labels:
        if not pair:  # (the form's empty label input)
            continue
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidArgumentError(f"label {pair!r} is not NAME=VALUE", argument="label")
        pairs[name] = value
    order = params.get("order") or "updated"
    if order not in ("updated", "created"):
        raise InvalidArgumentError(
            f"order must be updated or created, got {order!r}", argument="order"
        )
    limit = int_param(params, "limit", LIST_PAGE, low=1)
    assert limit is not None
    return ListQuery(
        limit=min(limit, MAX_LIST),
        after=params.get("after") or None,
        parent=params.get("parent") or None,
        user=params.get("user") or None,
        labels=tuple(pairs.items()),
        id_prefix=params.get("id_prefix") or None,
        order=order,
        hidden=params.get("hidden") in ("1", "true", "on"),
    )


def list_sessions_page(
    store: SessionStore, query: ListQuery
) -> tuple[list[SessionInfo], str | None]:
    """One page of sessions, and the ``after`` of the next page (``None``: this is the last)."""
    found = store.list_sessions(
        limit=query.limit + 1,  # one more than shown, in the same query: is there a next page?
        after=query.after,
        parent=query.parent,
        user_id=query.user,
        labels=dict(query.labels) or None,
        id_prefix=query.id_prefix,
        order="created" if query.order == "created" else "updated",
        include_hidden=query.hidden,
    )
    infos = found[: query.limit]
    return infos, (infos[-1].id if len(found) > query.limit else None)


def info_json(info: SessionInfo) -> dict[str, Any]:
    """A session row as JSON: ``SessionInfo``'s fields and ``event_count``."""
    return {**info.model_dump(), "event_count": info.event_count}


def event_json(event: SessionEvent) -> str:
    """One event in wire format, as compact JSON text (key order and numbers as stored)."""
    return dumps_compact(event.to_wire())


def session_detail(store: SessionStore, session_id: str) -> dict[str, Any]:
    """``GET /api/sessions/{id}``: the row, the surface's length and the forks of it."""
    info = store.session_info(session_id)
    children = store.list_sessions(parent=session_id, limit=MAX_CHILDREN)
    return {
        **info_json(info),
        "surface_length": len(store.surface(session_id)),
        "children": [info_json(child) for child in children],
    }


@dataclass
class SessionView:
    """Everything one session page shows (served or written by ``view``)."""

    info: SessionInfo
    children: list[SessionInfo]
    surface: list[SurfaceMessage]
    surface_length: int
    on_surface: frozenset[int]
    events: list[SessionEvent]
    from_seq: int
    page_size: int
    outline: Outline
    shadowed_by: dict[int, list[int]]
    pairs: dict[str, dict[str, int]]
    surface_first: int = 1
    """The ordinal (1..``surface_length``) of the first node of ``surface``."""
    surface_page_size: int = SURFACE_PAGE

    @property
    def head_seq(self) -> int:
        return self.info.head_seq

    @property
    def surface_at_tail(self) -> bool:
        """Whether the surface page ends at the surface's last node."""
        return self.surface_first + len(self.surface) > self.surface_length

    @property
    def at_tail(self) -> bool:
        """Whether the page ends at the log's end (new events are then added live)."""
        return self.from_seq + len(self.events) > self.head_seq

    def in_page(self, seq: int) -> bool:
        return self.from_seq <= seq < self.from_seq + len(self.events)


def call_id(event: SessionEvent) -> str | None:
    """The tool call an event belongs to: a ``tool/call``'s ``callId``, a result's source's."""
    data = event.data
    if not isinstance(data, Mapping):
        return None
    if event.type == "tool/call":
        value = data.get("callId")
    elif event.type == "tool/result":
        message = data.get("message")
        source = message.get("source") if isinstance(message, Mapping) else None
        value = source.get("callId") if isinstance(source, Mapping) else None
    else:
        return None
    return value if isinstance(value, str) else None


def session_view(
    store: SessionStore,
    session_id: str,
    *,
    from_seq: int | None = None,
    limit: int | None = EVENT_PAGE,
    surface_from: int | None = None,
    surface_limit: int | None = SURFACE_PAGE,
) -> SessionView:
    """One session page: a page of its log (default: the last ``limit`` events; ``limit``
    None: all), a page of its surface (``surface_limit`` nodes from the ``surface_from``-th,
    1-based; default: the last ones; ``surface_limit`` None: all), and the outline around
    the log's page."""
    info = store.session_info(session_id)
    head = info.head_seq
    if from_seq is not None:
        from_seq = max(0, min(from_seq, MAX_PARAM))  # past the end: an empty page
    if limit is None:
        start, stop = (from_seq or 0), None
    else:
        limit = min(limit, MAX_EVENTS)
        start = max(0, head - limit + 1) if from_seq is None else from_seq
        stop = start + limit
    events = list(store.events(session_id, from_seq=start, to_seq=stop))
    surface = surface_page(
        store, session_id, first=surface_from, limit=surface_limit, seqs=(start, stop)
    )
    page_end = start + len(events)
    turns_from = max(0, page_end - TURN_SPAN)
    shape = outline(store, session_id, turns_from=turns_from, turns_to=page_end)
    page_seqs = [e.seq for e in events]
    ids = sorted({c for c in (call_id(e) for e in events) if c is not None})
    return SessionView(
        info=info,
        children=store.list_sessions(parent=session_id, limit=MAX_CHILDREN),
        surface=surface.nodes,
        surface_length=surface.length,
        on_surface=surface.on_surface,
        events=events,
        from_seq=start,
        page_size=limit if limit is not None else max(1, len(events)),
        outline=shape,
        shadowed_by=shape.shadowed_by(page_seqs),
        pairs=call_partners(store, session_id, ids),
        surface_first=surface.first,
        surface_page_size=surface_limit if surface_limit is not None else max(1, surface.length),
    )
