"""A distributed store's single append as one call Citus delegates to a worker
(``backends/postgresql/delegation.py``): created with the store, run on the worker that holds
the session (its calls counted there by ``pg_stat_user_functions``), failing as the
statements fail (a lost race, a row past the head) without writing, and left aside for the
statements when the schema lacks this build's function (a store another build created) until
an open with ``create`` (``session-sql init``) adds it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from session_sql import ConcurrencyError, CorruptSessionError, open_async_store, open_store

from ..builders import say
from .cluster import CitusCluster

CALLS = text(
    "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
    "WHERE schemaname = :s AND funcname LIKE 'session_sql\\_append\\_%'"
)


def _calls(cluster: CitusCluster, schema: str, want: int | None = None) -> list[int]:
    """The calls of the schema's delegated function on each worker; waits (up to 10 s) for
    their sum to reach ``want`` (a backend reports its counts when it goes idle or ends)."""
    engines = [create_engine(w.url, poolclass=NullPool) for w in cluster.workers]
    try:
        deadline = time.monotonic() + 10
        while True:
            counts = []
            for engine in engines:
                with engine.connect() as conn:
                    counts.append(int(conn.execute(CALLS, {"s": schema}).scalar_one()))
            if want is None or sum(counts) >= want or time.monotonic() > deadline:
                return counts
            time.sleep(0.2)
    finally:
        for engine in engines:
            engine.dispose()


def _chunk(i: int) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": f"c{i}"}}


def _rows(admin: Engine, schema: str, session_id: str) -> tuple[Any, ...]:
    with admin.connect() as conn:
        key = conn.execute(
            text(f'SELECT session_key FROM "{schema}".session_ids WHERE id = :i'), {"i": session_id}
        ).scalar_one()
        head = conn.execute(
            text(
                f'SELECT head_seq, surface_next_pos, surface_digest FROM "{schema}".sessions '
                "WHERE session_key = :k"
            ),
            {"k": key},
        ).one()
        events = conn.execute(
            text(f'SELECT count(*) FROM "{schema}".events WHERE session_key = :k'), {"k": key}
        ).scalar_one()
        nodes = conn.execute(
            text(f'SELECT count(*) FROM "{schema}".surface WHERE session_key = :k'), {"k": key}
        ).scalar_one()
    return (*head, events, nodes)


def test_single_appends_are_one_call_on_the_worker_holding_the_session(
    citus_cluster: CitusCluster, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        handle = store.create_session("s")
        handle.append("turn/start", {"turn": 1})
        say(handle, "hello")  # a message: one event and its surface node
        for i in range(3):
            handle.append("assistant/chunk", _chunk(i))  # an event and no node
        singles = 5
        # Several events in one append, or a batch: the statements (or COPY).
        handle.append_many([{"type": "todo/write", "data": {"i": i}} for i in range(2)])
        handle.append_many([{"type": "todo/write", "data": {"i": i}} for i in range(40)])
        assert store.verify("s").ok
        messages = store.messages("s")
    counts = _calls(citus_cluster, citus_schema, want=singles)
    assert sum(counts) == singles
    assert sorted(counts) == [0, singles]  # all on the worker that holds the session
    with open_store(citus_cluster.url, schema=citus_schema) as store:
        assert store.messages("s") == messages
        assert [e.type for e in store.events("s")][:2] == ["turn/start", "user/message"]


def test_the_async_store_appends_through_the_call(
    citus_cluster: CitusCluster, citus_schema: str
) -> None:
    async def run() -> None:
        store = await open_async_store(citus_cluster.url, schema=citus_schema, distributed=True)
        async with store:
            handle = await store.create_session("a")
            await handle.append("turn/start", {"turn": 1})
            await handle.append("assistant/chunk", _chunk(0))
            assert (await store.verify("a")).ok

    asyncio.run(run())
    assert sum(_calls(citus_cluster, citus_schema, want=2)) == 2


def test_a_lost_race_and_a_row_past_the_head_write_nothing(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        handle = store.create_session("s")
        say(handle, "hello")
        other = store.open_session("s")
        say(other, "first")
        before = _rows(citus_admin, citus_schema, "s")
        with pytest.raises(ConcurrencyError):
            say(handle, "second")  # the handle is behind
        assert _rows(citus_admin, citus_schema, "s") == before
        handle.refresh()
        with citus_admin.begin() as conn:  # a row sitting past the head
            key = conn.execute(
                text(f'SELECT session_key FROM "{citus_schema}".session_ids WHERE id = :i'),
                {"i": "s"},
            ).scalar_one()
            conn.execute(
                text(
                    f'INSERT INTO "{citus_schema}".events (session_key, seq, time, tenant, type, '
                    "data) VALUES (:k, :seq, 0, '', 'todo/write', '{}')"
                ),
                {"k": key, "seq": handle.seq},  # the next seq
            )
        before = _rows(citus_admin, citus_schema, "s")
        with pytest.raises(CorruptSessionError):
            handle.append("assistant/chunk", _chunk(9))
        assert _rows(citus_admin, citus_schema, "s") == before


FUNCTIONS = text(
    "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n "
    "ON n.oid = p.pronamespace WHERE n.nspname = :s"
)


def _drop_functions(admin: Engine, schema: str) -> None:
    """Drop the schema's functions: as in a schema another build created."""
    with admin.begin() as conn:
        for (signature,) in conn.execute(FUNCTIONS, {"s": schema}).all():
            conn.execute(text(f"DROP FUNCTION {signature}"))


def _functions(admin: Engine, schema: str) -> list[str]:
    with admin.connect() as conn:
        return [s for (s,) in conn.execute(FUNCTIONS, {"s": schema}).all()]


def test_without_this_builds_function_the_statements_append(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        say(store.create_session("s"), "hello")
    calls = sum(_calls(citus_cluster, citus_schema, want=1))
    _drop_functions(citus_admin, citus_schema)
    # create=False: the store is opened as it is (create=True would add the function).
    with open_store(citus_cluster.url, schema=citus_schema, create=False) as store:
        handle = store.open_session("s")
        say(handle, "again")
        handle.append("assistant/chunk", _chunk(1))
        assert store.verify("s").ok
        assert len(store.messages("s")) == 2
    assert _functions(citus_admin, citus_schema) == []
    assert calls == 1  # the first append's, counted before the function went


def test_init_gives_an_existing_store_this_builds_function(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    """``session-sql init`` (an open with ``create``) on a distributed store that lacks this
    build's function creates it, distributed as a new store's is; appends then call it."""
    from typer.testing import CliRunner

    from session_sql.cli import app

    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        say(store.create_session("s"), "hello")
    made = _functions(citus_admin, citus_schema)
    _drop_functions(citus_admin, citus_schema)
    result = CliRunner().invoke(app, ["init", "--url", citus_cluster.url, "--schema", citus_schema])
    assert result.exit_code == 0, result.output
    assert _functions(citus_admin, citus_schema) == made
    with citus_admin.connect() as conn:  # distributed by the key, beside the sessions
        assert conn.execute(
            text(
                "SELECT d.distribution_argument_index, d.colocationid = t.colocationid "
                "FROM pg_dist_object d, pg_dist_partition t WHERE d.objid = "
                "to_regprocedure(:f) AND t.logicalrelid = CAST(:t AS regclass)"
            ),
            {"f": made[0], "t": f'"{citus_schema}".sessions'},
        ).one() == (0, True)
    with open_store(citus_cluster.url, schema=citus_schema, create=False) as store:
        handle = store.open_session("s")
        for i in range(3):
            handle.append("assistant/chunk", _chunk(i))
        assert store.verify("s").ok
    assert sum(_calls(citus_cluster, citus_schema, want=3)) == 3


@contextmanager
def _writer_role(cluster: CitusCluster, admin: Engine, schema: str, prefix: str) -> Iterator[str]:
    """A login role that bypasses row security, may read and write the schema's tables and
    may not create in it; yields its URL, and drops it after."""
    role = f"{prefix}_{schema[2:14]}"
    with admin.begin() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN BYPASSRLS"))
        conn.execute(text(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}'))
        conn.execute(
            text(f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{schema}" TO {role}')
        )
    try:
        yield cluster.url.replace("postgres@", f"{role}@")
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM {role}'))
            conn.execute(text(f'REVOKE ALL ON SCHEMA "{schema}" FROM {role}'))
        with admin.begin() as conn:  # alone: Citus drops a role over one connection
            conn.execute(text(f"DROP ROLE {role}"))


def test_a_role_that_may_not_create_in_the_schema_opens_without_the_function(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        say(store.create_session("s"), "hello")
    _drop_functions(citus_admin, citus_schema)
    with _writer_role(citus_cluster, citus_admin, citus_schema, "c") as url:
        with open_store(url, schema=citus_schema) as store:  # create=True, the default
            handle = store.open_session("s")
            say(handle, "again")
            assert store.verify("s").ok
        assert _functions(citus_admin, citus_schema) == []


def test_a_role_that_may_not_call_the_function_appends_with_the_statements(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        say(store.create_session("s"), "hello")
    with _writer_role(citus_cluster, citus_admin, citus_schema, "w") as url:
        with citus_admin.begin() as conn:
            (signature,) = conn.execute(FUNCTIONS, {"s": citus_schema}).one()
            conn.execute(text(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC"))
        before = sum(_calls(citus_cluster, citus_schema, want=1))  # the owner's append
        with open_store(url, schema=citus_schema, distributed=True) as store:
            handle = store.open_session("s")
            say(handle, "again")
            handle.append("assistant/chunk", _chunk(1))
            assert store.verify("s").ok
        time.sleep(1)  # the workers' backends have ended and reported their counts
        assert sum(_calls(citus_cluster, citus_schema)) == before == 1
