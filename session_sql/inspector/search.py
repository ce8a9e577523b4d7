"""Text search over one session's messages, for ``GET /api/sessions/ID/search`` and the
session page's search box (docs/inspector.md, "Search").

The database narrows the rows: the session's message events (``user/message``,
``assistant/message``, ``tool/result``, shadowed ones included) whose stored JSON holds each
ASCII letter-and-digit run of the query, ignoring case (those characters are never escaped
in JSON, so no match is lost). Each candidate's readable text (what the page shows)
is then matched in Python, ignoring case, so a key name or a JSON escape never matches. One
request reads at most ``SCAN_ROWS`` candidates and returns at most ``MAX_SEARCH`` matches;
``next_after_seq`` continues after them. Scoped to the store's tenant like every read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session as OrmSession

from session_sql import InvalidArgumentError, SessionStore
from session_sql.inspector.api import int_param
from session_sql.inspector.outline import session_key
from session_sql.inspector.page import message_text
from session_sql.orm import orm_models

__all__ = [
    "MAX_QUERY",
    "MAX_SEARCH",
    "SEARCH_PAGE",
    "Match",
    "SearchPage",
    "search_messages",
    "search_query",
]

MESSAGE_TYPES = ("user/message", "assistant/message", "tool/result")
SEARCH_PAGE = 50
"""Matches per answer (``limit`` may ask for up to ``MAX_SEARCH``)."""
MAX_SEARCH = 200
MAX_QUERY = 200
"""The longest query, in characters."""
SCAN_ROWS = 5000
"""The most candidate rows one request reads; ``next_after_seq`` goes on from there."""
CONTEXT = 80
"""Characters of text kept before a match (and twice as many after it) in a snippet."""
MAX_SEQ = 2**62
MAX_WORDS = 8
"""The most words of a query the database narrows by (the rest are matched in Python)."""
_WORDS = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Match:
    """One message that holds the query: where it is, and the text around the match."""

    seq: int
    type: str
    time: int
    on_surface: bool
    before: str
    hit: str
    after: str

    def to_json(self) -> dict[str, Any]:
        start = len(self.before)
        return {
            "seq": self.seq,
            "type": self.type,
            "time": self.time,
            "on_surface": self.on_surface,
            "snippet": self.before + self.hit + self.after,
            "match": [start, start + len(self.hit)],
        }


@dataclass(frozen=True)
class SearchPage:
    """The matches of one request, in seq order, and where the next one starts."""

    query: str
    matches: list[Match]
    next_after_seq: int | None


def search_query(params: Mapping[str, str]) -> tuple[str, int, int]:
    """``(q, after_seq, limit)`` from query parameters; ``q`` is required."""
    query = (params.get("q") or "").strip()
    if not query:
        raise InvalidArgumentError("q must be some text to search for", argument="q")
    if len(query) > MAX_QUERY:
        raise InvalidArgumentError(
            f"q must be at most {MAX_QUERY} characters, got {len(query)}", argument="q"
        )
    after = int_param(params, "after_seq", -1, low=-1)
    limit = int_param(params, "limit", SEARCH_PAGE, low=1)
    assert after is not None and limit is not None
    return query, after, min(limit, MAX_SEARCH)


def _message(type_: str, data: Any) -> Any:
    return data if type_ == "user/message" else (data or {}).get("message")


def _split(text: str, needle: str) -> tuple[str, str, str] | None:
    """``text`` around the first case-blind occurrence of ``needle`` (lower case), or None."""
    lowered = text.lower()
    at = lowered.find(needle)
    if at < 0:
        return None
    if len(lowered) != len(text):  # (a letter whose lower case is longer: cut the lowered)
        text = lowered
    end = at + len(needle)
    before = text[max(0, at - CONTEXT) : at]
    after = text[end : end + 2 * CONTEXT]
    if at > CONTEXT:
        before = "…" + before
    if end + 2 * CONTEXT < len(text):
        after += "…"
    return before, text[at:end], after


def search_messages(
    store: SessionStore,
    session_id: str,
    query: str,
    *,
    after_seq: int = -1,
    limit: int = SEARCH_PAGE,
) -> SearchPage:
    """The messages of ``session_id`` after ``after_seq`` whose text holds ``query``
    (ignoring case), at most ``limit``; ``SessionNotFoundError`` outside the tenant."""
    needle = query.lower()
    words = _WORDS.findall(needle)
    models = orm_models(store.schema)
    ev: Any = models.Event
    node: Any = models.SurfaceNode
    with OrmSession(store.engine) as orm:
        key = session_key(orm, models, store, session_id)
        where = [
            ev.session_key == key,
            ev.type.in_(MESSAGE_TYPES),
            ev.seq > min(after_seq, MAX_SEQ),
        ]
        text = func.lower(cast(ev.data, Text))
        where += [text.contains(word, autoescape=True) for word in sorted(set(words))[:MAX_WORDS]]
        rows = orm.execute(
            select(ev.seq, ev.type, ev.time, ev.data)
            .where(*where)
            .order_by(ev.seq)
            .limit(SCAN_ROWS)
        ).all()
        found: list[tuple[int, str, int, tuple[str, str, str]]] = []
        last = None
        for seq, type_, time, data in rows:
            last = int(seq)
            message = _message(str(type_), data) if isinstance(data, Mapping) else None
            parts = _split(message_text(message), needle)
            if parts is not None:
                found.append((last, str(type_), int(time), parts))
                if len(found) == limit:
                    break
        seqs = [f[0] for f in found]
        on_surface = (
            set(
                orm.execute(
                    select(node.event_seq).where(node.session_key == key, node.event_seq.in_(seqs))
                ).scalars()
            )
            if seqs
            else set()
        )
    matches = [Match(s, t, tm, s in on_surface, *parts) for s, t, tm, parts in found]
    more = len(found) == limit or len(rows) == SCAN_ROWS
    return SearchPage(query, matches, last if more else None)
