"""Row-level security on PostgreSQL (SPEC §11.4), with real LOGIN roles that do not own the tables.

An owner role (not a superuser) owns the schema and initialises the store; two tenant roles
have the writer's row grants of docs/reliability.md. Through the store each tenant role works
as usual; through hand-written SQL it sees only the rows of the tenant its transaction names,
nothing without the setting, and cannot write a row of another tenant. The owner sees all.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from session_sql import open_async_store, open_store

from .reliability_builders import user_message
from .test_privileges import text_role, writer_grants

pytestmark = pytest.mark.postgresql


def _run(engine: Any, statements: list[str]) -> None:
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))


def _count(url: str, schema: str, table: str, tenant: str | None) -> dict[str, int]:
    """Rows of ``table`` per tenant, read with raw SQL as the role of ``url``."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if tenant is not None:
                conn.execute(
                    text("SELECT set_config('session_sql.tenant', :t, true)"), {"t": tenant}
                )
            rows = conn.execute(text(f'SELECT tenant FROM "{schema}".{table}')).scalars().all()
    finally:
        engine.dispose()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row] = counts.get(row, 0) + 1
    return counts


def _scalar(url: str, sql: str) -> Any:
    """One value, read with raw SQL as the role of ``url``."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql)).scalar_one()
    finally:
        engine.dispose()


async def _async_listing(url: str, schema: str, tenant: str) -> None:
    async with open_async_store(url, schema=schema, tenant=tenant) as store:
        assert [i.title for i in await store.list_sessions()] == [tenant]
        handle = await store.open_session("s1")
        await handle.append("user/message", user_message("async"), surface_op="append")
        assert len(await store.messages("s1")) == 2


def test_a_tenant_role_sees_and_writes_only_its_tenants_rows(
    pg_backend, postgres_admin, login_role
) -> None:
    schema = pg_backend.schema
    owner_url = login_role("owner")
    owner = text_role(owner_url)
    _run(postgres_admin, [f'CREATE SCHEMA "{schema}" AUTHORIZATION "{owner}"'])
    open_store(owner_url, schema=schema).close()  # the owner creates the tables
    roles = {}
    for tenant in ("a", "b"):
        url = login_role(f"tenant_{tenant}")
        _run(postgres_admin, writer_grants(schema, text_role(url)))
        roles[tenant] = url

    # Each tenant role writes through the store, the same ids in both tenants.
    for tenant, url in roles.items():
        with open_store(url, schema=schema, tenant=tenant) as store:
            handle = store.create_session("s1", user_id="u", title=tenant)
            handle.append("user/message", user_message(f"hi from {tenant}"), surface_op="append")
            assert [i.title for i in store.list_sessions()] == [tenant]
            assert store.verify("s1").ok
            assert store.messages("s1", last=1)[0]["content"][0]["text"] == f"hi from {tenant}"
            assert store.fork_session("s1", child_id="c").seq == 2
            assert [e.seq for e in store.follow("c", timeout=0)] == [0, 1]
            assert store.stats().sessions == 2
            store.delete_session("c")
        asyncio.run(_async_listing(url, schema, tenant))
    a_url, b_url = roles["a"], roles["b"]

    for table in ("sessions", "events", "surface", "surface_messages"):
        # Hand-written SQL: only the rows of the tenant the transaction names...
        assert set(_count(a_url, schema, table, "a")) == {"a"}, table
        # ... and none without the setting.
        assert _count(a_url, schema, table, None) == {}, table
    assert _count(a_url, schema, "events", "a") == {"a": 2}
    assert _count(b_url, schema, "events", "b") == {"b": 2}
    # The documented limit: a role that can set the setting can name another tenant.
    assert _count(a_url, schema, "events", "b") == {"b": 2}
    # The owner is not subject to the policies: it sees both tenants.
    for table in ("sessions", "events", "surface", "surface_messages"):
        assert set(_count(owner_url, schema, table, None)) == {"a", "b"}, table

    # A tenant role cannot write a row of another tenant, nor move a row to one.
    q = f'"{schema}"'
    b_key = _scalar(owner_url, f"SELECT session_key FROM {q}.sessions WHERE tenant = 'b'")
    engine = create_engine(a_url, poolclass=NullPool)
    try:
        for statement in (
            f"INSERT INTO {q}.sessions (tenant, id, format_version, created_at, "
            "inherited_event_count, header, head_seq, surface_next_pos, replace_generation, "
            "surface_digest, updated_at, incarnation) "
            "VALUES ('b', 'x', 0, 0, 0, '{}', -1, 0, 0, 0, 0, 'i')",
            f"INSERT INTO {q}.events (tenant, session_key, seq, type, time, data) "
            f"VALUES ('b', {b_key}, 99, 't', 0, '{{}}')",
            f"UPDATE {q}.sessions SET tenant = 'b' WHERE id = 's1'",
        ):
            with pytest.raises(DBAPIError) as raised, engine.begin() as conn:
                conn.execute(text("SELECT set_config('session_sql.tenant', 'a', true)"))
                conn.execute(text(statement))
            assert raised.value.orig.sqlstate == "42501", statement  # the policy refused it
        # Nor attach a row of its own tenant to another tenant's session: the foreign keys
        # name (session_key, tenant), and a foreign key check does not apply the policies.
        # (tests/store/test_tenant_keys.py covers surface rows too, on both backends.)
        with pytest.raises(DBAPIError) as raised, engine.begin() as conn:
            conn.execute(text("SELECT set_config('session_sql.tenant', 'a', true)"))
            conn.execute(
                text(
                    f"INSERT INTO {q}.events (tenant, session_key, seq, type, time, data) "
                    f"VALUES ('a', {b_key}, 99, 't', 0, '{{}}')"
                )
            )
        assert raised.value.orig.sqlstate == "23503"  # foreign key violation
        assert raised.value.orig.diag.constraint_name == "fk_events_session_key_tenant_sessions"
        # Updating or deleting another tenant's rows touches nothing.
        with engine.begin() as conn:
            conn.execute(text("SELECT set_config('session_sql.tenant', 'a', true)"))
            assert conn.execute(text(f"DELETE FROM {q}.events WHERE tenant = 'b'")).rowcount == 0
    finally:
        engine.dispose()
    assert _count(owner_url, schema, "events", None)["b"] == 2


async def _kept_writer_append(url: str, schema: str) -> tuple[list[str], Any]:
    """Append as tenant ``b`` on an async store's kept connection; the messages, and the
    tenant setting that connection has once the append committed."""
    async with open_async_store(url, schema=schema, tenant="b") as store:
        writers = store._runner.writers
        assert writers is not None  # appends run on the kept connections
        handle = await store.open_session("s1")
        await handle.append("user/message", user_message("async b"), surface_op="append")
        assert len(writers._idle) == 1  # the append's connection, kept
        raw = await writers.take()
        try:
            cur = await raw.driver_connection.execute(
                "SELECT current_setting('session_sql.tenant', true)"
            )
            row = await cur.fetchone()
        finally:
            await writers.give(raw)
        texts = [m["content"][0]["text"] for m in await store.messages("s1")]
    return texts, row[0] if row else None


def test_the_idle_tail_read_and_the_kept_async_writers_carry_the_stores_tenant(
    pg_backend, postgres_admin, login_role, monkeypatch
) -> None:
    """The connections kept outside the pool under row-level security: the idle connection
    of tail reads sees its store's tenant only (without the setting it would see nothing),
    and an append on a kept async connection lands in its store's tenant (without the
    setting the head update would match no row) and leaves no setting behind."""
    schema = pg_backend.schema
    owner_url = login_role("owner")
    _run(postgres_admin, [f'CREATE SCHEMA "{schema}" AUTHORIZATION "{text_role(owner_url)}"'])
    open_store(owner_url, schema=schema).close()
    url = login_role("tenant")
    _run(postgres_admin, writer_grants(schema, text_role(url)))
    for tenant in ("a", "b"):
        with open_store(url, schema=schema, tenant=tenant) as store:
            handle = store.create_session("s1", user_id="u")
            handle.append("user/message", user_message(f"from {tenant}"), surface_op="append")

    with open_store(url, schema=schema, tenant="b") as store:
        assert store.messages("s1", last=1)[0]["content"][0]["text"] == "from b"
        raw = store._ctx.idle._raw
        assert raw is not None  # that read opened the idle connection
        # From here on no connection can come from the pool: the idle one answers.
        monkeypatch.setattr(store._ctx.engine, "raw_connection", _no_checkout)
        assert [m["content"][0]["text"] for m in store.messages("s1", last=5)] == ["from b"]
        assert [m.message["content"][0]["text"] for m in store.surface_messages("s1", last=5)] == [
            "from b"
        ]
        cursor = raw.dbapi_connection.cursor()
        cursor.execute("SELECT current_setting('session_sql.tenant', true)")
        assert cursor.fetchone()[0] == "b"
        cursor.execute(f'SELECT DISTINCT tenant FROM "{schema}".events')
        assert cursor.fetchall() == [("b",)]  # a's rows exist, and stay out of sight
        cursor.close()
        monkeypatch.undo()

    texts, setting = asyncio.run(_kept_writer_append(url, schema))
    assert texts == ["from b", "async b"]
    assert not setting  # SET LOCAL: gone with the transaction
    assert _count(owner_url, schema, "events", None) == {"a": 1, "b": 2}


def _no_checkout() -> Any:
    raise AssertionError("a pooled connection was checked out")


def _tenants_seen(cursor: Any, schema: str) -> list[str]:
    """The tenants of the ``events`` rows ``cursor`` sees, read with no tenant set."""
    cursor.execute(f'SELECT DISTINCT tenant FROM "{schema}".events ORDER BY tenant')
    return [row[0] for row in cursor.fetchall()]


def test_a_connection_that_once_named_a_tenant_sees_nothing_without_one(
    pg_backend, postgres_admin, login_role
) -> None:
    """A custom setting set transaction-locally reads ``''`` (not NULL) for the rest of the
    server session, and ``''`` is the default tenant's name: such a connection must still
    see no row without a tenant, on a plain connection and on the store's own pool, while
    the default tenant keeps working through the store."""
    schema = pg_backend.schema
    owner_url = login_role("owner")
    _run(postgres_admin, [f'CREATE SCHEMA "{schema}" AUTHORIZATION "{text_role(owner_url)}"'])
    open_store(owner_url, schema=schema).close()
    url = login_role("writer")
    _run(postgres_admin, writer_grants(schema, text_role(url)))
    for tenant in ("", "a"):
        with open_store(url, schema=schema, tenant=tenant) as store:
            handle = store.create_session("s1", title=tenant or "default")
            handle.append("user/message", user_message(f"from {tenant!r}"), surface_op="append")
    with open_store(url, schema=schema) as store:  # the default tenant, through the store
        assert [i.title for i in store.list_sessions()] == ["default"]
        assert store.messages("s1", last=1)[0]["content"][0]["text"] == "from ''"
        assert store.verify("s1").ok
    asyncio.run(_async_listing_default(url, schema))

    # A plain connection: one scoped transaction, then SQL that names no tenant.
    plain = create_engine(url, poolclass=NullPool).raw_connection()
    try:
        cursor = plain.cursor()
        cursor.execute("SELECT set_config('session_sql.tenant', 'a', true)")
        assert _tenants_seen(cursor, schema) == ["a"]
        plain.commit()
        cursor.execute("SELECT current_setting('session_sql.tenant', true)")
        assert cursor.fetchone()[0] == ""  # the server's reset value: not NULL
        assert _tenants_seen(cursor, schema) == []
        plain.rollback()
    finally:
        plain.close()

    # The store's own pool, handed to SQL that names no tenant once the store has used it.
    for tenant in ("a", ""):
        with open_store(url, schema=schema, tenant=tenant, pool_size=1, max_overflow=0) as store:
            store.create_session("s2")
            raw = store.engine.raw_connection()
            try:
                cursor = raw.cursor()
                assert _tenants_seen(cursor, schema) == [], tenant
                raw.rollback()
            finally:
                raw.close()


async def _async_listing_default(url: str, schema: str) -> None:
    async with open_async_store(url, schema=schema) as store:
        assert [i.title for i in await store.list_sessions()] == ["default"]
        handle = await store.open_session("s1")
        await handle.append("user/message", user_message("async"), surface_op="append")
        assert len(await store.messages("s1")) == 2
