"""The aggregates behind ``SessionStore.stats``: SQL over the tables, bound values only.

Events a fork inherited from its parent (``seq < sessions.inherited_event_count``) are copies;
every query here skips them, so each event a process really wrote is counted once, in the
session that wrote it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    case,
    false,
    func,
    select,
)

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


def _own_events(t: SchemaTables, tenant: str, session_id: str | None) -> Any:
    """A tenant's events joined to their session row, skipping inherited copies; optionally
    one session.

    The session is chosen on the session row (by its public id), and its events through their
    ``session_key``.
    """
    e, s = t.events, t.sessions
    condition = and_(
        s.c.tenant == tenant,
        e.c.session_key == s.c.session_key,
        e.c.seq >= s.c.inherited_event_count,
    )
    if session_id is not None:
        condition = and_(condition, s.c.id == session_id)
    return e.join(s, condition)


def _where_session(query: Select[Any], column: Any, session_id: str | None) -> Select[Any]:
    return query if session_id is None else query.where(column == session_id)


# A subquery with a LIMIT is computed row by row and never merged into the query around it, so
# the GROUP BY around it sorts the few values it yields; merged, SQLite's sorter would carry
# each row's whole JSON ``data`` (the column the aggregates read) and spill it to disk.
_UNMERGED = 2**62


def _replacing_rows(conn: Connection, t: SchemaTables, tenant: str, session_id: str | None) -> Any:
    """``(type, source_event_seqs)`` of each replacing event: one pass over the events (no
    index holds ``surface_op``)."""
    e = t.events
    query = (
        select(e.c.type, e.c.source_event_seqs)
        .select_from(_own_events(t, tenant, session_id))
        .where(e.c.surface_op.is_not(None), e.c.surface_op != APPEND_OP)
    )
    return conn.execute(query)


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
    own = _own_events(t, tenant, session_id)

    # Tool calls, left-joined to the result appended for them (a pruning replacement is a
    # second tool/result for the same call, so only appended results count).
    # They meet through the generated, indexed ``call_id`` column (the same join as the
    # ``tool_calls`` view), not by comparing JSON paths, which no index serves.
    call, result = e.alias("c"), e.alias("r")
    is_error: ColumnElement[Any] = func.coalesce(
        result.c.data[("message", "content", 0, "isError")].as_boolean(), false()
    )
    calls_joined = call.join(
        s,
        and_(
            s.c.tenant == tenant,
            call.c.session_key == s.c.session_key,
            call.c.seq >= s.c.inherited_event_count,
        ),
    ).outerjoin(
        result,
        and_(
            result.c.session_key == call.c.session_key,
            result.c.type == "tool/result",
            result.c.surface_op == APPEND_OP,
            result.c.call_id == call.c.call_id,
        ),
    )
    per_call = (
        _where_session(
            select(
                call.c.data["name"].as_string().label("tool"),
                case((is_error, 1), else_=0).label("error"),
            )
            .select_from(calls_joined)
            .where(call.c.type == "tool/call"),
            s.c.id,
            session_id,
        )
        .limit(_UNMERGED)
        .subquery("calls")
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

    replies = (
        select(
            e.c.data[("message", "source", "model")].as_string().label("model"),
            e.c.data[("usage", "inputTokens")].as_integer().label("input_tokens"),
            e.c.data[("usage", "outputTokens")].as_integer().label("output_tokens"),
        )
        .select_from(own)
        .where(e.c.type == "assistant/message")
        .limit(_UNMERGED)
        .subquery("replies")
    )
    tokens_query = (
        select(
            replies.c.model,
            func.count().label("messages"),
            func.sum(replies.c.input_tokens).label("input_tokens"),
            func.sum(replies.c.output_tokens).label("output_tokens"),
        )
        .group_by(replies.c.model)
        .order_by(replies.c.model)
    )
    # ``(type, n)`` for each event type, most frequent first (some may count 0).
    # One pass over the events (a session's: a range of its primary key), grouped.
    by_type_query = (
        select(e.c.type, func.count().label("n"))
        .select_from(_own_events(t, tenant, session_id))
        .group_by(e.c.type)
        .order_by(func.count().desc(), e.c.type)
    )
    sessions_query = _where_session(
        select(
            func.count().label("sessions"),
            func.count(s.c.parent_session).label("forks"),
            func.coalesce(func.sum(s.c.head_seq + 1 - s.c.inherited_event_count), 0).label(
                "events"
            ),
        ).where(s.c.tenant == tenant),
        s.c.id,
        session_id,
    )

    totals = conn.execute(sessions_query).one()
    if session_id is not None and totals.sessions == 0:
        raise SessionNotFoundError.for_session(session_id)
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
        )
        for row in conn.execute(tokens_query)
    ]
    replacements: Counter[str] = Counter()
    shadowed = 0
    for row in _replacing_rows(conn, t, tenant, session_id):
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
        notes=["events a fork inherited are counted once, in the session that wrote them"],
    )
