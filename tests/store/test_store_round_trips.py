"""PostgreSQL: an append is one round trip that also commits (SPEC §8.3's one transaction,
sent as one message), on the sync and the async API, and a checkout of a live pooled
connection costs none. Counted from libpq's protocol trace of the connection."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.dialects.postgresql import psycopg as postgresql_psycopg

from session_sql import ConcurrencyError, SessionNotFoundError, open_async_store, open_store
from session_sql._store.backends.postgresql.one_query import prepared_form
from session_sql._store.context import Compiled

from ..builders import remove, summarize
from .store_builders import user_message

pytestmark = pytest.mark.postgresql


@pytest.fixture
def pg(postgres_admin: Engine) -> Iterator[tuple[str, str]]:
    schema = f"rt_{uuid.uuid4().hex}"
    yield postgres_admin.url.render_as_string(hide_password=False), schema
    with postgres_admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@contextmanager
def traced(conn: Any, path: Path) -> Iterator[list[str]]:
    """Trace ``conn`` inside the block; the list then holds the client's messages of each
    round trip (one per ReadyForQuery the server sent)."""
    trips: list[str] = []
    with path.open("w") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield trips
        finally:
            conn.pgconn.untrace()
    sent: list[str] = []
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0] not in ("F", "B"):
            continue  # the rest of a multi-line statement
        if fields[0] == "F":
            sent.append(fields[2].split(" ")[0])
        elif fields[2].startswith("ReadyForQuery"):
            trips.append(" ".join(sent))
            sent = []


def one_message(trip: str) -> bool:
    """One pipeline (one Sync) or one simple query: no ping, no BEGIN or COMMIT of its own."""
    return trip == "Query" or (trip.split().count("Sync") == 1 and "Query" not in trip)


def say(handle: Any, text_: str) -> Any:
    return handle.append("user/message", user_message(text_), surface_op="append")


BATCH = [{"type": "todo/write", "data": {"i": i}} for i in range(3)]


def session_and_connection(store: Any) -> tuple[Any, Any]:
    """A session "s" with one event, and the driver connection of the store's one-connection
    pool (which its appends use), checked back in. The store's idle connection (the reads of
    one statement: ``open_session`` by a kept key) is opened first, so that it is not the
    pool's connection it takes."""
    handle = store.create_session("s")
    say(handle, "a")
    store.open_session("s")
    raw = store.engine.raw_connection()
    conn = raw.driver_connection
    raw.close()
    return handle, conn


def test_a_sync_append_is_one_round_trip(pg, tmp_path: Path) -> None:
    url, schema = pg
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle, conn = session_and_connection(store)
        with traced(conn, tmp_path / "1") as one:
            say(handle, "b")
        with traced(conn, tmp_path / "2") as many:
            handle.append_many(BATCH)
        stale = store.open_session("s")
        say(handle, "c")
        with traced(conn, tmp_path / "3") as lost, pytest.raises(ConcurrencyError):
            say(stale, "d")
        assert len(one) == len(many) == 1 and one_message(one[0]) and one_message(many[0])
        assert one_message(lost[0]) and len(lost) > 1  # then the diagnosis reads the row
        assert [e.data.get("i") for e in store.events("s")][-4:] == [0, 1, 2, None]
        assert store.verify("s").ok


def test_an_async_append_is_one_round_trip(pg, tmp_path: Path) -> None:
    url, schema = pg

    async def main() -> None:
        async with open_async_store(url, schema=schema, pool_size=1) as store:
            handle = await store.create_session("s")
            await say(handle, "a")
            assert store._runner.writers is not None
            (kept,) = store._runner.writers._idle
            with traced(kept.driver_connection, tmp_path / "1") as one:
                await say(handle, "b")
            with traced(kept.driver_connection, tmp_path / "2") as many:
                await handle.append_many(BATCH)
            assert one == many == ["Query"]
            assert (await store.verify("s")).ok

    asyncio.run(main())


def test_an_async_refresh_is_one_round_trip(pg, tmp_path: Path) -> None:
    """The async store's refresh reads the row and the new events in one query on a kept
    connection (one snapshot), with the sync refresh's checks: another writer's events
    come in, and a session deleted and recreated under the handle is refused."""
    url, schema = pg

    async def main() -> None:
        async with open_async_store(url, schema=schema, pool_size=1) as store:
            handle = await store.create_session("s")
            other = await store.open_session("s")
            await say(handle, "a")
            (kept,) = store._runner.writers._idle
            with traced(kept.driver_connection, tmp_path / "1") as none_new:
                assert await other.refresh() != []
                assert await other.refresh() == []
            await say(handle, "b")
            await handle.append_many(BATCH)
            with traced(kept.driver_connection, tmp_path / "2") as four_new:
                new = await other.refresh()
            assert [e.seq for e in new] == [1, 2, 3, 4]
            assert none_new == ["Query", "Query"] and four_new == ["Query"]
            assert other.events == handle.events and other.messages() == handle.messages()
            await store.delete_session("s")
            with pytest.raises(SessionNotFoundError):
                await other.refresh()
            await store.create_session("s")
            with pytest.raises(SessionNotFoundError, match="recreated"):
                await other.refresh()

    asyncio.run(main())


def test_a_batch_is_one_insert_per_table(pg, tmp_path: Path) -> None:
    """The one-query append writes a batch's events (and its new surface nodes) by one
    multi-row ``INSERT`` per table: one statement for the server to parse, whatever the
    batch's size below the ``COPY`` threshold."""
    url, schema = pg
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle, conn = session_and_connection(store)
        batch = [
            {"type": "user/message", "data": user_message(t), "surface_op": "append"}
            for t in [*HOSTILE, "plain"]
        ]
        with traced(conn, tmp_path / "trace"):
            handle.append_many(batch)
        sent = (tmp_path / "trace").read_text()
        assert sent.count(f"INSERT INTO {schema}.events ") == 1
        assert sent.count(f"INSERT INTO {schema}.surface ") == 1
        got = [e.data["content"][0]["text"] for e in store.events("s")]
        assert got == ["a", *HOSTILE, "plain"]
        assert store.verify("s").ok


def test_a_replace_drops_its_shadowed_rows_in_one_statement(pg, tmp_path: Path) -> None:
    """A summary over six nodes and a removal of five delete the shadowed surface rows by one
    ``DELETE … = ANY`` each, not a statement per row (through a Citus coordinator, each
    statement is a round trip to the worker); the surface is what a replay makes of it."""
    url, schema = pg
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle, conn = session_and_connection(store)
        handle.append_many(
            [
                {
                    "type": "user/message",
                    "data": user_message(f"m{i}", id=f"m{i}"),
                    "surface_op": "append",
                }
                for i in range(12)
            ]
        )
        own, compiled = store._ctx.writes.own, store._ctx.compiled
        one = "EXECUTE " + prepared_form(own.drop_nodes.positional[0]).name + "("
        per_row = "EXECUTE " + prepared_form(compiled.drop_node.positional[0]).name + "("
        nodes = handle.surface.nodes
        with traced(conn, tmp_path / "summary"):
            summarize(handle, nodes[1], nodes[6], sources=nodes[1:7])
        nodes = handle.surface.nodes
        with traced(conn, tmp_path / "removal"):
            remove(handle, nodes[3], nodes[7], sources=nodes[3:8])
        for trace in ("summary", "removal"):
            sent = (tmp_path / trace).read_text()
            assert sent.count(one) == 1 and per_row not in sent
        assert len(handle.surface.nodes) == 13 - 5 - 5
        assert store.surface("s") == handle.surface.nodes
        assert store.verify("s").ok


def test_a_pooled_connection_the_server_ended_is_replaced_at_checkout(
    pg, postgres_admin: Engine
) -> None:
    """The checkout's ping sends nothing while the connection is alive, and still finds one
    the server ended while it sat in the pool: the append runs on a new one, once."""
    url, schema = pg
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle, dead = session_and_connection(store)
        with postgres_admin.connect() as admin:  # waits until the backend is gone
            admin.execute(
                text("SELECT pg_terminate_backend(:p, 10000)"), {"p": dead.info.backend_pid}
            )
        say(handle, "b")
        assert dead.closed
        assert [e.data["content"][0]["text"] for e in store.events("s")] == ["a", "b"]
        assert store.verify("s").ok


HOSTILE = [
    "it's",
    "''",
    "back\\slash \\' \\\\",
    'quote " and ; -- comment',
    "x'); DROP TABLE events; --",
    "$$ dollar $tag$ E'\\x41' U&'\\0041'",
    "line\nbreak\ttab\r",
    "ünïcødé ✓ 𝄞 \u2028",
    '{"a": "it\'s", "b": "\\u0041"}',
    "100% %s %(x)s %% %",
]


def test_the_positional_form_of_a_statement_keeps_literal_percent_signs() -> None:
    """The one query is bound by one call in positional form: each ``%(name)s`` becomes
    ``%s`` with its name in order (repeats too), and an escaped ``%%`` stays one."""
    stmt = text("SELECT '100%' AS p, :x AS a, :y AS b, :x AS c")
    compiled = Compiled(stmt, postgresql_psycopg.dialect())
    assert compiled.sql == "SELECT '100%%' AS p, %(x)s AS a, %(y)s AS b, %(x)s AS c"
    assert compiled.positional == (
        "SELECT '100%%' AS p, %s AS a, %s AS b, %s AS c",
        ("x", "y", "x"),
    )


@pytest.mark.parametrize("api", ["sync", "async"])
def test_hostile_text_survives_the_one_query_append(pg, api: str) -> None:
    """An append's statements are bound on the client (the driver's ``mogrify``) and sent as
    one query: text that would end a literal or a statement comes back exactly, and the
    session id and tenant, bound the same way, too."""
    url, schema = pg
    texts = [*HOSTILE, "plain"]

    async def run_async() -> None:
        async with open_async_store(url, schema=schema, tenant="t'; --") as store:
            handle = await store.create_session("s'; --")
            for t in texts:
                await handle.append("user/message", user_message(t), surface_op="append")

    if api == "async":
        asyncio.run(run_async())
    else:
        with open_store(url, schema=schema, tenant="t'; --") as store:
            handle = store.create_session("s'; --")
            for t in texts:
                say(handle, t)
    with open_store(url, schema=schema, tenant="t'; --") as store:
        got = [e.data["content"][0]["text"] for e in store.events("s'; --")]
        assert got == texts
        assert store.verify("s'; --").ok


def _interrupted_inside_a_query(conn: Any) -> None:
    """What Ctrl-C does to a statement under way: the query is on the server (the connection
    is ACTIVE) when ``KeyboardInterrupt`` reaches the code that sent it."""
    conn.pgconn.send_query(b"SELECT pg_sleep(0.05)")
    raise KeyboardInterrupt


def test_an_interrupt_while_connecting_is_not_hidden(pg, monkeypatch) -> None:
    """Ctrl-C while the store sets up a new connection stays a KeyboardInterrupt (``tail -f``
    exits quietly on it), not an error about changing autocommit on a busy connection."""
    url, schema = pg
    with open_store(url, schema=schema) as store:
        store.create_session("s")
        execute = psycopg.Connection.execute

        def interrupted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if "lock_timeout" in str(query):
                _interrupted_inside_a_query(self)
            return execute(self, query, *args, **kwargs)

        store._ctx.engine.pool.dispose()  # the next checkout connects
        monkeypatch.setattr(psycopg.Connection, "execute", interrupted)
        with pytest.raises(KeyboardInterrupt):
            store.session_info("s")
        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        assert store.session_info("s").event_count == 0


def test_an_interrupted_append_leaves_the_store_usable(pg, monkeypatch) -> None:
    """Ctrl-C inside the one-query append: the KeyboardInterrupt comes through, the busy
    connection is dropped (never pooled), and the next append works (after a refresh, since
    the interrupted one may have committed)."""
    url, schema = pg
    with open_store(url, schema=schema) as store:
        handle = store.create_session("s")
        say(handle, "before")
        execute = psycopg.ClientCursor.execute
        monkeypatch.setattr(
            psycopg.ClientCursor,
            "execute",
            lambda self, *a, **k: _interrupted_inside_a_query(self.connection),
        )
        with pytest.raises(KeyboardInterrupt):
            say(handle, "interrupted")
        monkeypatch.setattr(psycopg.ClientCursor, "execute", execute)
        handle.refresh()
        say(handle, "after")
        texts = [e.data["content"][0]["text"] for e in store.events("s")]
        assert texts == ["before", "after"]
        assert store.verify("s").ok
