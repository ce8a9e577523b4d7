"""The aggregates behind ``SessionStore.stats``: SQL over the tables, bound values only.

Events a fork inherited from its parent (``seq < sessions.inherited_event_count``) are copies;
every query here skips them, so each event a process really wrote is counted once, in the
session that wrote it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Connection,
    Subquery,
    and_,
    case,
    false,
    func,
    select,
    true,
)

from session_sql._store.backends.base import COUNT_DIGITS
from session_sql._store.database import backend_for
from session_sql._store.schema import SchemaTables
from session_sql.errors import CorruptSessionError, SessionNotFoundError

__all__ = ["ModelTokens", "StoreStats", "ToolStats", "collect_stats"]

APPEND_OP = json.dumps("append")  # how ``events.surface_op`` stores "append"


class ToolStats(BaseModel):
    """Calls of one tool (``tool/call`` events) and how many of their results were errors."""

    model_config = ConfigDict(frozen=True)

    tool: str
    calls: int
    errors: int


class ModelTokens(BaseModel):
    """Token usage of one model's ``assistant/message`` events."""

    model_config = ConfigDict(frozen=True)

    model: str
    messages: int
    input_tokens: int
    output_tokens: int
    skipped_token_counts: int = 0
    """``usage.inputTokens`` / ``outputTokens`` values that are not an integer from 0 to
    9,999,999,999 (``1.5``, ``"abc"``, ``-5``, ``true``): not summed, counted here."""


class StoreStats(BaseModel):
    """What ``SessionStore.stats`` found (``model_dump()`` gives plain JSON data)."""

    model_config = ConfigDict(frozen=True)

    sessions: int
    forks: int
    events: int
    events_by_type: dict[str, int]
    tools: list[ToolStats]
    tokens: list[ModelTokens]
    replacements: dict[str, int]
    """Replacing events by type: ``tool/result`` are prunings, the others summaries."""
    shadowed_events: int
    """How many events the replacements cite (``sourceEventSeqs``) in all."""
    session_id: str | None = None
    notes: list[str] = []


def _cited(session_id: str | None, raw: str | None) -> int:
    try:
        seqs = json.loads(raw or "[]")
    except ValueError as exc:
        raise CorruptSessionError(
            f"stored sourceEventSeqs is not JSON: {raw!r}", session_id=session_id
        ) from exc
    return len(seqs) if isinstance(seqs, list) else 0


PIN_BELOW = 50_000
"""A session of fewer own events than this is read by its key as a bound value, not through a
join to its session row. Joined, PostgreSQL estimates a session's events as the average
session's, so beside one huge session a small one is read by a scan (0.24 s for 512 events
beside 1M, measured); bound, the estimate is the key's own. A large session keeps the join,
whose plan measured faster at 1M events than the bound key's."""


@dataclass(frozen=True)
class _Scope:
    """Which events a statement reads: a tenant's, one session's through its row, or one
    small session's by its key (``pinned``: ``(session_key, inherited_event_count)``)."""

    tables: SchemaTables
    tenant: str
    key: int | None
    """The one session's ``session_key`` (``None``: the tenant's sessions)."""
    pinned: tuple[int, int] | None

    def events(self, e: Any) -> tuple[Any, ColumnElement[bool]]:
        """``(from clause, condition)`` of the scope's own events (``e``, an alias of
        ``events``), skipping what a fork inherited."""
        if self.pinned is not None:
            key, inherited = self.pinned
            return e, and_(e.c.session_key == key, e.c.seq >= inherited)
        s = self.tables.sessions
        joined = e.join(
            s,
            and_(
                s.c.tenant == self.tenant,
                e.c.session_key == s.c.session_key,
                e.c.seq >= s.c.inherited_event_count,
            ),
        )
        if self.key is None:
            return joined, true()
        return joined, s.c.session_key == self.key


# A subquery with a LIMIT is computed row by row and never merged into the query around it, so
# the GROUP BY around it sorts the few values it yields; merged, SQLite's sorter would carry
# each row's whole JSON ``data`` (the column the aggregates read) and spill it to disk.
_UNMERGED = 2**62


def _unmerged(name: str, columns: Sequence[Any], source: Any, *conditions: Any) -> Subquery:
    """``columns`` of ``source``'s rows meeting ``conditions``, as a subquery named ``name``
    that is never merged into the aggregate around it (``_UNMERGED``)."""
    return select(*columns).select_from(source).where(*conditions).limit(_UNMERGED).subquery(name)


def _replacing_rows(conn: Connection, scope: _Scope) -> Any:
    """``(type, source_event_seqs)`` of each replacing event: one pass over the events (no
    index holds ``surface_op``)."""
    e = scope.tables.events
    source, condition = scope.events(e)
    query = (
        select(e.c.type, e.c.source_event_seqs)
        .select_from(source)
        .where(condition, e.c.surface_op.is_not(None), e.c.surface_op != APPEND_OP)
    )
    return conn.execute(query)


def _scope(conn: Connection, t: SchemaTables, tenant: str, session_id: str | None) -> _Scope:
    """The scope of a ``stats`` call (``SessionNotFoundError`` for a missing session)."""
    if session_id is None:
        return _Scope(t, tenant, None, None)
    s, ids = t.sessions, t.session_ids
    # By its key, found through session_ids: on Citus each statement then reads one shard.
    key = conn.execute(
        select(ids.c.session_key).where(ids.c.tenant == tenant, ids.c.id == session_id)
    ).scalar_one_or_none()
    row = None
    if key is not None:
        row = conn.execute(
            select(s.c.session_key, s.c.inherited_event_count, s.c.head_seq).where(
                s.c.tenant == tenant, s.c.session_key == key
            )
        ).one_or_none()
    if row is None:
        raise SessionNotFoundError.for_session(session_id)
    small = row.head_seq + 1 - row.inherited_event_count < PIN_BELOW
    pinned = (int(row.session_key), int(row.inherited_event_count)) if small else None
    return _Scope(t, tenant, int(row.session_key), pinned)


def collect_stats(
    conn: Connection, t: SchemaTables, tenant: str, session_id: str | None
) -> StoreStats:
    """Aggregate a tenant's sessions, or one session (``SessionNotFoundError`` when missing).

    Each statement reads the sessions asked about through ``sessions`` and their events by
    ranges of the events primary key (``session_key``, ``seq``): the session rows; the events
    by type and the replacing rows, counted in one pass; the tool calls (each meeting its
    result by one search of the ``call_id`` index) and the replies.
    """
    e, s = t.events, t.sessions
    scope = _scope(conn, t, tenant, session_id)

    # Tool calls, left-joined to the result appended for them (a pruning replacement is a
    # second tool/result for the same call, so only appended results count).
    # They meet through the generated, indexed ``call_id`` column (the same join as the
    # ``tool_calls`` view), not by comparing JSON paths, which no index serves.
    call, result = e.alias("c"), e.alias("r")
    is_error: ColumnElement[Any] = func.coalesce(
        result.c.data[("message", "content", 0, "isError")].as_boolean(), false()
    )
    calls_source, calls_condition = scope.events(call)
    calls_joined = calls_source.outerjoin(
        result,
        and_(
            result.c.session_key == call.c.session_key,
            result.c.type == "tool/result",
            result.c.surface_op == APPEND_OP,
            result.c.call_id == call.c.call_id,
        ),
    )
    per_call = _unmerged(
        "calls",
        (
            call.c.data["name"].as_string().label("tool"),
            case((is_error, 1), else_=0).label("error"),
        ),
        calls_joined,
        calls_condition,
        call.c.type == "tool/call",
    )
    tools_query = (
        select(
            per_call.c.tool,
            func.count().label("calls"),
            func.sum(per_call.c.error).label("errors"),
        )
        .group_by(per_call.c.tool)
        .order_by(func.count().desc(), per_call.c.tool)
    )

    own, own_condition = scope.events(e)
    # ``usage`` is free-form JSON: only a sane integer count is summed (in 64 bits); any
    # other value there (1.5, "abc", -5, a float) is skipped and counted as skipped.
    backend = backend_for(conn)
    input_count, input_present = backend.json_count(e.c.data, ("usage", "inputTokens"))
    output_count, output_present = backend.json_count(e.c.data, ("usage", "outputTokens"))
    replies = _unmerged(
        "replies",
        (
            e.c.data[("message", "source", "model")].as_string().label("model"),
            input_count.label("input_tokens"),
            output_count.label("output_tokens"),
            _skipped((input_count, input_present), (output_count, output_present)).label("skipped"),
        ),
        own,
        own_condition,
        e.c.type == "assistant/message",
    )
    tokens_query = (
        select(
            replies.c.model,
            func.count().label("messages"),
            func.sum(replies.c.input_tokens).label("input_tokens"),
            func.sum(replies.c.output_tokens).label("output_tokens"),
            func.sum(replies.c.skipped).label("skipped"),
        )
        .group_by(replies.c.model)
        .order_by(replies.c.model)
    )
    # ``(type, n)`` for each event type, most frequent first (some may count 0).
    # One pass over the events (a session's: a range of its primary key), grouped.
    by_type_query = (
        select(e.c.type, func.count().label("n"))
        .select_from(own)
        .where(own_condition)
        .group_by(e.c.type)
        .order_by(func.count().desc(), e.c.type)
    )
    sessions_query = select(
        func.count().label("sessions"),
        func.count(s.c.parent_session).label("forks"),
        func.coalesce(func.sum(s.c.head_seq + 1 - s.c.inherited_event_count), 0).label("events"),
    ).where(s.c.tenant == tenant)
    if scope.key is not None:
        sessions_query = sessions_query.where(s.c.session_key == scope.key)

    totals = conn.execute(sessions_query).one()
    by_type = {row.type: int(row.n) for row in conn.execute(by_type_query) if row.n}
    tools = [
        ToolStats(tool=str(row.tool), calls=int(row.calls), errors=int(row.errors or 0))
        for row in conn.execute(tools_query)
    ]
    tokens = [
        ModelTokens(
            model=str(row.model),
            messages=int(row.messages),
            input_tokens=int(row.input_tokens or 0),
            output_tokens=int(row.output_tokens or 0),
            skipped_token_counts=int(row.skipped or 0),
        )
        for row in conn.execute(tokens_query)
    ]
    notes = ["events a fork inherited are counted once, in the session that wrote them"]
    skipped = sum(m.skipped_token_counts for m in tokens)
    if skipped:
        notes.append(
            f"{skipped} token counts in usage are not integers from 0 to "
            f"{10**COUNT_DIGITS - 1:,} and were skipped (skipped_token_counts)"
        )
    replacements: Counter[str] = Counter()
    shadowed = 0
    for row in _replacing_rows(conn, scope):
        replacements[row.type] += 1
        shadowed += _cited(session_id, row.source_event_seqs)
    return StoreStats(
        sessions=int(totals.sessions),
        forks=int(totals.forks),
        events=int(totals.events),
        events_by_type=by_type,
        tools=tools,
        tokens=tokens,
        replacements=dict(sorted(replacements.items())),
        shadowed_events=shadowed,
        session_id=session_id,
        notes=notes,
    )


def _skipped(*pairs: tuple[ColumnElement[Any], ColumnElement[Any]]) -> ColumnElement[Any]:
    """How many of a reply's token counts are there but not sane: ``(count, present)``
    pairs from ``Backend.json_count``."""
    count, present = pairs[0]
    total: ColumnElement[Any] = case((and_(present, count.is_(None)), 1), else_=0)
    for count, present in pairs[1:]:
        total = total + case((and_(present, count.is_(None)), 1), else_=0)
    return total
