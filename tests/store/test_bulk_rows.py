"""The one row codec: what ``rows.event_values`` stores, and that every insert binds it in its
order (no database)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.dialects import postgresql, sqlite

from session_sql import InvalidEventError, Replace
from session_sql._store.backends.postgresql.backend import POSTGRESQL
from session_sql._store.backends.postgresql.statements import OwnStatements
from session_sql._store.backends.sqlite.backend import SQLITE
from session_sql._store.context import CompiledStatements, Statements, compiled_for, statements_for
from session_sql._store.rows import EVENT_VALUE_COLUMNS, event_values
from session_sql._store.schema import tables_for
from session_sql.events import SessionEvent
from session_sql.jsoncodec import dumps_frozen
from session_sql.jsonvalue import snapshot_json

KEY = 7
"""A session's ``session_key`` (events rows carry it, not the public id)."""

EVENTS = [
    SessionEvent("assistant/chunk", 0, 5, snapshot_json({"turn": 1, "t": "a\\b\n\u00e9"})),
    SessionEvent("user/message", 1, 6, snapshot_json({"content": [1, 2.5]}), "append"),
    SessionEvent("assistant/message", 12, 7, snapshot_json({"x": None}), Replace(0, 11), (1, 2, 3)),
    SessionEvent("ext/thing", 13, 8, snapshot_json([{"a": [True]}]), None, (), True),
]


@pytest.mark.parametrize("schema", [None, "session_sql"])
def test_the_tuple_order_is_the_tables_column_order(schema):
    events = tables_for(schema).events
    assert [c.name for c in events.c if c.computed is None] == list(EVENT_VALUE_COLUMNS)


@pytest.mark.parametrize("schema", [None, "session_sql"])
def test_every_compiled_insert_binds_the_tuple_order(schema):
    tables = tables_for(schema)
    values = event_values("acme", KEY, EVENTS[2], None)
    lite = CompiledStatements(
        Statements(tables, backend=SQLITE, tenant=""), tables, sqlite.dialect()
    )
    assert lite.insert_event.bind(dict(zip(EVENT_VALUE_COLUMNS, values, strict=True))) == values
    assert lite.insert_event_values == lite.insert_event.sql
    pg_statements = Statements(tables, backend=POSTGRESQL, tenant="")
    pg_dialect = postgresql.psycopg.dialect()
    pg = CompiledStatements(pg_statements, tables, pg_dialect)
    own = OwnStatements(pg_statements, tables, "", pg_dialect)
    for insert in (pg.insert_event, own.insert_event_strict):
        assert insert.positional[1] == EVENT_VALUE_COLUMNS
    assert pg.insert_event_values == pg.insert_event.positional[0]


def test_compiled_statements_are_shared_by_stores_of_one_dialect_configuration():
    """Compiled once per process for a schema, tenant and dialect configuration; a dialect
    whose settings differ (here the paramstyle) compiles its own."""
    tables = tables_for("session_sql")
    st = statements_for("session_sql", POSTGRESQL, "")
    first = compiled_for(st, tables, postgresql.psycopg.dialect())
    assert compiled_for(st, tables, postgresql.psycopg.dialect()) is first
    other = compiled_for(st, tables, postgresql.psycopg.dialect(paramstyle="format"))
    assert other is not first
    assert "%(b_key)s" in first.surface_tail.sql
    assert "%(b_key)s" not in other.surface_tail.sql
    tenant = compiled_for(
        statements_for("session_sql", POSTGRESQL, "acme"), tables, postgresql.psycopg.dialect()
    )
    assert tenant is not first


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_event_values_are_the_stored_texts(event):
    op = event.surface_op
    seqs = event.source_event_seqs
    assert event_values("acme", KEY, event, None) == (
        KEY,
        event.seq,
        event.time,
        True if event.ignorable else None,
        "acme",
        event.type,
        None if op is None else json.dumps(op.to_json() if isinstance(op, Replace) else op),
        None if seqs is None else json.dumps(list(seqs)),
        dumps_frozen(event.data),
    )


def test_event_values_apply_the_stores_limits():
    event = EVENTS[0]
    with pytest.raises(InvalidEventError, match="above the limit of 10 bytes"):
        event_values("", KEY, event, 10)
    deep: object = 1
    for _ in range(600):
        deep = [deep]
    nested = SessionEvent("ext/deep", 0, 0, snapshot_json(deep))
    with pytest.raises(InvalidEventError, match="nests 600 levels deep"):
        event_values("", KEY, nested, None)
