"""The analytics views (docs/sql.md): the questions analysts ask, answered over the tables.

Each view is plain SQL over ``events`` and ``sessions``, one text per dialect (they differ only
where a JSON list is expanded into rows), created with the tables and checked by the schema
gate like them. Every join a view makes is served by an index: calls meet their results through
the generated ``events.call_id`` column, a turn finds its end through the turn-boundary index
and counts its messages in its own range of the primary key, and a list of source seqs is
expanded in place. ``events`` holds the session's number (``session_key``); each view joins
``sessions`` and gives back its tenant and public id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import TableClause, column, table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import ExecutableDDLElement
from sqlalchemy.sql.compiler import DDLCompiler

__all__ = ["VIEW_NAMES", "CreateAnalyticsView", "AnalyticsView", "view_select", "views_for"]

DialectName = Literal["sqlite", "postgresql"]

# Shared fragments. `{p}` is the schema prefix ("" on SQLite, '"schema".' on PostgreSQL).
_OWN = "{alias}.seq < s.inherited_event_count AS inherited"
_APPENDED = "'\"append\"'"
# The types that are surface nodes: what a replacement can shadow (a type filter in the join
# itself would keep SQLite from the primary key).
_NODES = "('user/message', 'assistant/message', 'tool/result')"

# The result block's isError. SQLite's ->> gives a JSON true as 1; comparing `-> ... = 'true'`
# as on PostgreSQL fails in SQLite builds before 3.40 (DuckDB's sqlite extension ships one).
_IS_ERROR = {
    "sqlite": "r.data -> 'message' -> 'content' -> 0 ->> 'isError' = 1",
    "postgresql": "r.data -> 'message' -> 'content' -> 0 ->> 'isError' = 'true'",
}

_TOOL_CALLS = f"""
SELECT s.tenant AS tenant,
       s.id AS session_id,
       c.seq AS call_seq,
       c.call_id AS call_id,
       c.data ->> 'name' AS tool,
       c.data ->> 'arguments' AS arguments,
       CAST(c.data ->> 'turn' AS BIGINT) AS turn,
       c.time AS call_time,
       r.seq AS result_seq,
       COALESCE({{is_error}}, FALSE) AS is_error,
       r.time - c.time AS latency_ms,
       {_OWN.format(alias="c")}
FROM {{p}}events AS c
JOIN {{p}}sessions AS s ON s.session_key = c.session_key
LEFT JOIN {{p}}events AS r
  ON r.session_key = c.session_key AND r.call_id = c.call_id
 AND r.type = 'tool/result' AND r.surface_op = {_APPENDED}
WHERE c.type = 'tool/call' AND c.call_id IS NOT NULL
"""


def _count_in_turn(
    event_type: str, label: str, end: str = "COALESCE(t.next_seq, s.head_seq + 1)"
) -> str:
    """Events of ``event_type`` after the turn/start ``t`` and before the seq ``end``."""
    return (
        f"(SELECT COUNT(m.seq) FROM {{p}}events AS m WHERE m.type = '{event_type}'"
        " AND m.session_key = t.session_key AND m.seq > t.seq"
        f" AND m.seq < {end}) AS {label}"
    )


# Starts and ends in log order, each start next to the event that follows it among them (one
# range scan of the turn-boundary index, no lookup per turn); that event is the turn's end when
# it is the turn/end of the same turn number. The counts are range scans of the primary key.
# The window is partitioned by the session's key and its public (tenant, id), which name the
# same rows: by the key so that Citus runs it on each shard (a window must be partitioned by
# the distribution column), by the id so that a filter on `session_id` or `tenant` is pushed
# into the window's subquery.
_TURNS = f"""
SELECT t.tenant AS tenant,
       t.session_id AS session_id,
       CAST(t.data ->> 'turn' AS BIGINT) AS turn,
       t.seq AS start_seq,
       CASE WHEN t.ended THEN t.next_seq END AS end_seq,
       t.time AS start_time,
       CASE WHEN t.ended THEN t.next_time END AS end_time,
       CASE WHEN t.ended THEN t.next_time - t.time END AS duration_ms,
       CASE WHEN t.ended THEN t.next_data -> 'reason' ->> 'kind' END AS reason,
       {_count_in_turn("user/message", "user_messages")},
       {_count_in_turn("assistant/message", "assistant_messages")},
       {_count_in_turn("tool/call", "tool_calls")},
       {_count_in_turn("tool/result", "tool_results")},
       {_OWN.format(alias="t")}
FROM (SELECT o.tenant AS tenant, o.id AS session_id, b.session_key AS session_key,
             b.seq AS seq, b.type AS type,
             b.time AS time, b.data AS data,
             LEAD(b.seq) OVER w AS next_seq,
             LEAD(b.time) OVER w AS next_time,
             LEAD(b.data) OVER w AS next_data,
             COALESCE(LEAD(b.type) OVER w = 'turn/end'
                      AND LEAD(b.data ->> 'turn') OVER w = (b.data ->> 'turn'), FALSE) AS ended
      FROM {{p}}events AS b
      JOIN {{p}}sessions AS o ON o.session_key = b.session_key
      WHERE b.type IN ('turn/start', 'turn/end')
      WINDOW w AS (PARTITION BY b.session_key, o.tenant, o.id ORDER BY b.seq)) AS t
JOIN {{p}}sessions AS s ON s.session_key = t.session_key
WHERE t.type = 'turn/start'
"""

# SQLite does not narrow the window above to a session: it moves a filter on `session_id` into the
# window's subquery, but not through the join to `sessions` that gives the id, so a question about
# one session read every session's turn boundaries. This form has no window: each turn/start
# (found through `sessions`, so a filter on a session or a tenant reaches the index) finds the
# next turn/start and the next turn/end by one index search each (MIN over an index range), and
# the turn/end is its end when it comes first and has the same turn number (parenthesised: DuckDB,
# which runs this text when it attaches the file, binds `->>` more loosely than `=`). The four
# counts then stop at the first of the two, as the window's next boundary did.
# Turn boundaries: the predicate of the partial index ``ix_events_turn_bounds``, written out
# beside each equality so that SQLite (which proves no implication) uses that index too.
_BOUNDS = "('turn/start', 'turn/end')"
_NEXT = (
    "(SELECT MIN(x.seq) FROM {{p}}events AS x WHERE x.type IN {bounds} AND x.type = '{event_type}'"
    " AND x.session_key = t.session_key AND x.seq > t.seq)"
)
_BOUNDARY = "COALESCE(ne.seq, ns.seq, s.head_seq + 1)"  # the first of the two, or past the head
_TURNS_SQLITE = f"""
SELECT s.tenant AS tenant,
       s.id AS session_id,
       CAST(t.data ->> 'turn' AS BIGINT) AS turn,
       t.seq AS start_seq,
       e.seq AS end_seq,
       t.time AS start_time,
       e.time AS end_time,
       e.time - t.time AS duration_ms,
       e.data -> 'reason' ->> 'kind' AS reason,
       {_count_in_turn("user/message", "user_messages", _BOUNDARY)},
       {_count_in_turn("assistant/message", "assistant_messages", _BOUNDARY)},
       {_count_in_turn("tool/call", "tool_calls", _BOUNDARY)},
       {_count_in_turn("tool/result", "tool_results", _BOUNDARY)},
       {_OWN.format(alias="t")}
FROM {{p}}events AS t
JOIN {{p}}sessions AS s ON s.session_key = t.session_key
LEFT JOIN {{p}}events AS ns
  ON ns.type = 'turn/start' AND ns.session_key = t.session_key
 AND ns.seq = {_NEXT.format(event_type="turn/start", bounds=_BOUNDS)}
LEFT JOIN {{p}}events AS ne
  ON ne.type = 'turn/end' AND ne.session_key = t.session_key
 AND ne.seq = {_NEXT.format(event_type="turn/end", bounds=_BOUNDS)}
 AND ne.seq < COALESCE(ns.seq, s.head_seq + 1)
LEFT JOIN {{p}}events AS e
  ON e.session_key = ne.session_key AND e.seq = ne.seq
 AND (e.data ->> 'turn') = (t.data ->> 'turn')
WHERE t.type IN {_BOUNDS} AND t.type = 'turn/start'
"""

# How each dialect expands the JSON list in `source_event_seqs` into rows:
# (the FROM item, joined with ON TRUE; the seq as BIGINT; its 0-based ordinal).
_EXPLODE: dict[str, tuple[str, str, str]] = {
    "sqlite": (
        "json_each({alias}.source_event_seqs) AS src",
        "CAST(src.value AS BIGINT)",
        "CAST(src.key AS BIGINT)",
    ),
    "postgresql": (
        "LATERAL jsonb_array_elements_text(CAST({alias}.source_event_seqs AS JSONB))"
        " WITH ORDINALITY AS src(value, n)",
        "CAST(src.value AS BIGINT)",
        "src.n - 1",
    ),
}


def _source_event_seqs(dialect: str) -> str:
    # The join with sessions adds no row and drops none (every event has its session row); it
    # hands the session's tenant to the events' primary key, so a filter on `session_id`
    # alone still reads that session's events only.
    item, seq, ordinal = _EXPLODE[dialect]
    return f"""
SELECT s.tenant AS tenant,
       s.id AS session_id,
       e.seq AS seq,
       e.type AS type,
       {ordinal} AS ordinal,
       {seq} AS source_seq
FROM {{p}}events AS e
JOIN {{p}}sessions AS s ON s.session_key = e.session_key
JOIN {item.format(alias="e")} ON TRUE
WHERE e.source_event_seqs IS NOT NULL
"""


# A replacement's cited events, as the FROM of a correlated subquery (no LEFT JOIN of a
# table-valued function: SQLite builds before 3.40 return nothing from one).
_CITED = {
    "sqlite": "json_each(r.source_event_seqs) AS src",
    "postgresql": "jsonb_array_elements_text(CAST(r.source_event_seqs AS JSONB)) AS src(value)",
}


# The cited events themselves, one primary-key search each. PostgreSQL estimates 100 rows for
# any set-returning function, so a join of the cited seqs with `events` became a hash join over
# the whole session per replacement (replacements x session length); as an array searched with
# `= ANY` it is an index scan of the cited keys only.
_SHADOWED = {
    "sqlite": (
        f"FROM {_CITED['sqlite']} JOIN {{p}}events AS x ON x.session_key = r.session_key"
        f" AND x.seq = {_EXPLODE['sqlite'][1]} AND x.type IN {_NODES}"
    ),
    "postgresql": (
        "FROM {p}events AS x WHERE x.session_key = r.session_key"
        f" AND x.seq = ANY(ARRAY(SELECT CAST(src.value AS BIGINT) FROM {_CITED['postgresql']}))"
        f" AND x.type IN {_NODES}"
    ),
}


def _replacements(dialect: str) -> str:
    shadowed = _SHADOWED[dialect]
    return f"""
SELECT s.tenant AS tenant,
       s.id AS session_id,
       r.seq AS seq,
       r.type AS type,
       CASE WHEN r.type = 'surface/removed' THEN 'remove' ELSE 'replace' END AS op,
       r.data ->> 'reason' AS reason,
       r.time AS time,
       (SELECT COUNT(src.value) FROM {_CITED[dialect]}) AS source_events,
       (SELECT COUNT(x.seq) {shadowed}) AS shadowed_events,
       (SELECT COALESCE(SUM(length(CAST(x.data AS TEXT))), 0) {shadowed}) AS bytes_before,
       CASE WHEN r.type = 'surface/removed' THEN 0
            ELSE length(CAST(r.data AS TEXT)) END AS bytes_after,
       {_OWN.format(alias="r")}
FROM {{p}}events AS r
JOIN {{p}}sessions AS s ON s.session_key = r.session_key
WHERE r.surface_op IS NOT NULL AND r.surface_op <> {_APPENDED}
"""


@dataclass(frozen=True)
class AnalyticsView:
    """One view: its name, its columns in order, and its SELECT per dialect."""

    name: str
    columns: tuple[str, ...]
    selects: dict[str, str]


_VIEWS = (
    AnalyticsView(
        "tool_calls",
        (
            "tenant",
            "session_id",
            "call_seq",
            "call_id",
            "tool",
            "arguments",
            "turn",
            "call_time",
            "result_seq",
            "is_error",
            "latency_ms",
            "inherited",
        ),
        {d: _TOOL_CALLS.replace("{is_error}", e) for d, e in _IS_ERROR.items()},
    ),
    AnalyticsView(
        "turns",
        (
            "tenant",
            "session_id",
            "turn",
            "start_seq",
            "end_seq",
            "start_time",
            "end_time",
            "duration_ms",
            "reason",
            "user_messages",
            "assistant_messages",
            "tool_calls",
            "tool_results",
            "inherited",
        ),
        {"sqlite": _TURNS_SQLITE, "postgresql": _TURNS},
    ),
    AnalyticsView(
        "replacements",
        (
            "tenant",
            "session_id",
            "seq",
            "type",
            "op",
            "reason",
            "time",
            "source_events",
            "shadowed_events",
            "bytes_before",
            "bytes_after",
            "inherited",
        ),
        {d: _replacements(d) for d in ("sqlite", "postgresql")},
    ),
    AnalyticsView(
        "source_event_seqs",
        ("tenant", "session_id", "seq", "type", "ordinal", "source_seq"),
        {d: _source_event_seqs(d) for d in ("sqlite", "postgresql")},
    ),
)

VIEW_NAMES = tuple(v.name for v in _VIEWS)


def views_for() -> Sequence[AnalyticsView]:
    """The analytics views, in creation order."""
    return _VIEWS


def _prefix(schema: str | None, dialect: Dialect) -> str:
    return "" if schema is None else dialect.identifier_preparer.quote_schema(schema) + "."


def view_select(view: AnalyticsView, schema: str | None, dialect: Dialect) -> str:
    """The view's SELECT as ``dialect`` runs it, tables qualified with ``schema``."""
    body = view.selects[dialect.name].replace("{p}", _prefix(schema, dialect))
    return body.strip()


def view_table(view: AnalyticsView, schema: str | None) -> TableClause:
    """A selectable naming the view, for queries built with SQLAlchemy."""
    return table(view.name, *(column(c) for c in view.columns), schema=schema)


class CreateAnalyticsView(ExecutableDDLElement):
    """``CREATE VIEW`` of one analytics view, rendered for the dialect it runs on."""

    def __init__(self, view: AnalyticsView, schema: str | None) -> None:
        self.view = view
        self.schema = schema


@compiles(CreateAnalyticsView)
def _compile_create_view(element: CreateAnalyticsView, compiler: DDLCompiler, **kw: Any) -> str:
    dialect = compiler.dialect
    name = dialect.identifier_preparer.quote(element.view.name)
    return (
        f"CREATE VIEW {_prefix(element.schema, dialect)}{name} AS\n"
        f"{view_select(element.view, element.schema, dialect)}"
    )
