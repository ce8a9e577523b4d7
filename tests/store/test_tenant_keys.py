"""A row's tenant is its session's: the foreign keys of ``events`` and ``surface`` name
(``session_key``, ``tenant``), so a row cannot sit in one tenant and belong to a session of
another (row-level security reads the row's own ``tenant``; a foreign key check ignores it)."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from session_sql import open_store

from .store_builders import dump_tables, execute, tables, user_message


@pytest.mark.parametrize("table", ["events", "surface"])
def test_a_row_of_another_tenant_cannot_join_a_session(backend, table: str) -> None:
    with open_store(backend.url, schema=backend.schema, tenant="b") as store:
        handle = store.create_session("s1")
        handle.append("user/message", user_message("hello"), surface_op="append")
        handle.append("session/title", {"title": "t"})  # seq 1: logged, not on the surface
    with open_store(backend.url, schema=backend.schema, tenant="a") as store:
        store.create_session("s1")
        t = tables(store)
        b_key = select(t.sessions.c.session_key).where(
            t.sessions.c.id == "s1", t.sessions.c.tenant == "b"
        )
        with store.engine.connect() as conn:
            key = conn.execute(b_key).scalar_one()
        row = (
            insert(t.events).values(
                session_key=key, seq=2, tenant="a", type="ext/x", time=0, data={}
            )
            if table == "events"
            else insert(t.surface).values(session_key=key, pos=9, event_seq=1, tenant="a")
        )
        before = dump_tables(store)
        with pytest.raises(IntegrityError) as raised:
            execute(store, row)
        if backend.has("named_constraints"):
            assert (
                raised.value.orig.diag.constraint_name == f"fk_{table}_session_key_tenant_sessions"
            )
        else:
            assert "FOREIGN KEY" in str(raised.value)
        assert dump_tables(store) == before
        # The same row in the session's own tenant is accepted: the tenant is what is refused.
        execute(store, row.values(tenant="b"))
