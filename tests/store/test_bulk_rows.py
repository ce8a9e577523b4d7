"""The bulk writers' row tuples hold exactly what the per-event rows hold (no database)."""

from __future__ import annotations

import pytest

from session_sql import InvalidEventError, Replace
from session_sql._store.fastpath import EVENT_VALUE_COLUMNS, event_values
from session_sql._store.rows import event_row_json
from session_sql._store.schema import tables_for
from session_sql.events import SessionEvent
from session_sql.jsonvalue import snapshot_json

EVENTS = [
    SessionEvent("assistant/chunk", 0, 5, snapshot_json({"turn": 1, "t": "a\\b\n\u00e9"})),
    SessionEvent("user/message", 1, 6, snapshot_json({"content": [1, 2.5]}), "append"),
    SessionEvent("assistant/message", 12, 7, snapshot_json({"x": None}), Replace(0, 11), (1, 2, 3)),
    SessionEvent("ext/thing", 13, 8, snapshot_json([{"a": [True]}]), None, (), True),
]


@pytest.mark.parametrize("schema", [None, "session_sql"])
def test_the_tuple_order_is_the_insert_statements_column_order(schema):
    events = tables_for(schema).events
    assert [c.name for c in events.c if c.computed is None] == list(EVENT_VALUE_COLUMNS)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_event_values_are_the_event_rows_values(event):
    row = event_row_json("acme", "s1", event, None)
    assert event_values("acme", "s1", event, None) == tuple(row[c] for c in EVENT_VALUE_COLUMNS)


def test_event_values_apply_the_stores_limits():
    event = EVENTS[0]
    with pytest.raises(InvalidEventError, match="above the limit of 10 bytes") as a:
        event_values("", "s1", event, 10)
    with pytest.raises(InvalidEventError) as b:
        event_row_json("", "s1", event, 10)
    assert str(a.value) == str(b.value)
    deep: object = 1
    for _ in range(600):
        deep = [deep]
    nested = SessionEvent("ext/deep", 0, 0, snapshot_json(deep))
    with pytest.raises(InvalidEventError, match="nests 600 levels deep"):
        event_values("", "s1", nested, None)
