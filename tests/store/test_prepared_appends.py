"""PostgreSQL's one-query append runs its statements prepared on the connection.

The server parses and plans the append's statements once per connection instead of on every
append (docs/performance.md, "Prepared appends"). What is prepared on a connection is known
from the queries the store ran on it; these tests check that the appends use prepared
statements, that the outcome rules hold on that path (a lost race, a row past the head),
that statements dropped under the store (``DEALLOCATE ALL``, which psycopg's own rollback
may send) cost a retry and never an event, and that nothing is prepared when psycopg's
prepared statements are off (as behind a transaction-pooling proxy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from session_sql import ConcurrencyError, CorruptSessionError, open_async_store, open_store
from session_sql._store.backends.postgresql import one_query as pg_appends
from session_sql._store.backends.postgresql.prepared import prepared_on
from tests.builders import user_message

pytestmark = pytest.mark.requires("prepared_statements")

PREPARED = text(
    "SELECT name FROM pg_prepared_statements WHERE from_sql AND name LIKE 'session\\_sql\\_%'"
)


@pytest.fixture
def pg_url(backend: Any) -> tuple[str, str]:
    return str(backend.url), str(backend.schema)


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The one queries the appends send, in order."""
    sent: list[str] = []
    real = pg_appends.trip_query

    def spy(*args: Any, **kw: Any) -> pg_appends.TripQuery:
        trip = real(*args, **kw)
        sent.append(trip.query)
        return trip

    monkeypatch.setattr(pg_appends, "trip_query", spy)
    yield sent


def _on_server(store: Any) -> list[str]:
    """The store's statements prepared on its one pooled connection (pool_size=1)."""
    with store.engine.connect() as conn:
        return sorted(conn.execute(PREPARED).scalars())


def test_appends_execute_prepared_statements(pg_url: tuple[str, str], queries: list[str]) -> None:
    url, schema = pg_url
    with open_store(url, schema=schema, pool_size=1, max_overflow=0, tenant="acme") as store:
        handle = store.create_session("s")
        handle.append("turn/start", {"turn": 1})  # reads what the connection has prepared
        handle.append("user/message", user_message("a"), surface_op="append")
        handle.append_many(
            [
                {"type": "step/start", "data": {"turn": 1, "step": 1}},
                {"type": "step/end", "data": {"turn": 1, "step": 1}},
            ]
        )
        assert [e.seq for e in store.events("s")] == [0, 1, 2, 3]
        assert [m["id"] for m in store.messages("s")] == ["u1"]
        assert store.verify("s").ok
        names = _on_server(store)
    first, second, third = queries
    assert "PREPARE" not in first and "EXECUTE" not in first
    assert first.endswith(pg_appends.PREPARED_NAMES)
    # The second prepares what it runs, then executes it; the third executes only.
    assert second.count("PREPARE ") == 4  # tenant, head update, event, surface row
    assert "PREPARE " not in third
    assert third.startswith("BEGIN;EXECUTE session_sql_")
    assert third.count("EXECUTE ") == 4  # tenant, head update, one per event row
    head, commit, wake = third.rsplit(";", 2)
    assert commit == "COMMIT" and wake.startswith("SELECT pg_notify(")
    assert "pg_notify" not in head
    assert len(names) == 4


def test_the_outcome_rules_hold_on_the_prepared_path(pg_url: tuple[str, str]) -> None:
    """A lost race is a ``ConcurrencyError``, a row past the head a ``CorruptSessionError``;
    nothing is written either way, and the connection serves the next append."""
    url, schema = pg_url
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle = store.create_session("s")
        stale = store.open_session("s")
        for turn in range(3):
            handle.append("turn/start", {"turn": turn})
        assert len(_on_server(store)) >= 3
        with pytest.raises(ConcurrencyError):
            stale.append("turn/start", {"turn": 9})
        handle.append("turn/start", {"turn": 3})  # prepared again (or still)
        with store.engine.begin() as conn:  # a row past the head, written behind the store
            conn.exec_driver_sql(
                "INSERT INTO " + schema + ".events (session_key, seq, time, tenant, type, data) "
                "SELECT session_key, 4, 0, '', 'turn/start', '{\"turn\":4}' "
                "FROM " + schema + ".sessions WHERE id = 's'"
            )
        with pytest.raises(CorruptSessionError):
            handle.append("turn/start", {"turn": 5})
        assert store.head_seq("s") == 3
        raw = store.engine.raw_connection()
        try:
            status = raw.driver_connection.info.transaction_status
        finally:
            raw.close()
        assert status == psycopg.pq.TransactionStatus.IDLE


def test_statements_dropped_under_the_store_cost_a_retry_never_an_event(
    pg_url: tuple[str, str], queries: list[str]
) -> None:
    url, schema = pg_url
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle = store.create_session("s")
        handle.append("turn/start", {"turn": 0})
        handle.append("turn/start", {"turn": 1})
        raw = store.engine.raw_connection()
        try:
            driver = raw.driver_connection
            assert prepared_on(driver)  # known: the store thinks they are there
            driver.execute("DEALLOCATE ALL")  # and they are not
            driver.commit()
        finally:
            raw.close()
        del queries[:]
        handle.append("turn/start", {"turn": 2})
        assert [e.seq for e in store.events("s")] == [0, 1, 2]
        failed, retried = queries
        assert "EXECUTE " in failed
        assert retried.endswith(pg_appends.PREPARED_NAMES)  # unprepared, reading the truth
        handle.append("turn/start", {"turn": 3})
        assert "PREPARE " in queries[-1]
        assert [e.seq for e in store.events("s")] == [0, 1, 2, 3]


def test_a_rollback_forgets_what_psycopg_may_have_deallocated(pg_url: tuple[str, str]) -> None:
    """psycopg's ``rollback`` of an open transaction sends ``DEALLOCATE ALL`` once it has
    prepared statements of its own; the next append then reads the server's list instead of
    failing on a name that is gone."""
    url, schema = pg_url
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle = store.create_session("s")
        handle.append("turn/start", {"turn": 0})
        handle.append("turn/start", {"turn": 1})
        for _ in range(7):  # psycopg prepares a statement run five times on a connection
            with store.engine.connect() as conn:
                conn.execute(text("SELECT 1 WHERE 1 = :x"), {"x": 1})
        raw = store.engine.raw_connection()
        try:
            assert prepared_on(raw.driver_connection) is None
        finally:
            raw.close()
        handle.append("turn/start", {"turn": 2})
        assert [e.seq for e in store.events("s")] == [0, 1, 2]


def test_nothing_is_prepared_with_psycopgs_prepared_statements_off(
    pg_url: tuple[str, str], queries: list[str]
) -> None:
    url, schema = pg_url
    off = {"connect_args": {"prepare_threshold": None}}
    with open_store(url, schema=schema, pool_size=1, max_overflow=0, **off) as store:
        handle = store.create_session("s")
        for turn in range(4):
            handle.append("turn/start", {"turn": turn})
        assert _on_server(store) == []
    assert all("PREPARE" not in q and "EXECUTE" not in q for q in queries)
    assert not any(q.endswith(pg_appends.PREPARED_NAMES) for q in queries)


def test_the_async_store_appends_prepared(pg_url: tuple[str, str], queries: list[str]) -> None:
    url, schema = pg_url

    async def run() -> None:
        async with open_async_store(url, schema=schema, tenant="acme") as store:
            handle = await store.create_session("s")
            for turn in range(4):
                await handle.append("turn/start", {"turn": turn})
            stale = await store.open_session("s")
            await handle.append("turn/start", {"turn": 4})
            with pytest.raises(ConcurrencyError):
                await stale.append("turn/start", {"turn": 9})
            await handle.append("turn/start", {"turn": 5})
            assert [e.seq async for e in await store.events("s")] == list(range(6))
            assert (await store.verify("s")).ok

    asyncio.run(run())
    assert any(q.startswith("BEGIN;EXECUTE session_sql_") for q in queries)


def test_hostile_values_reach_the_prepared_statements_verbatim(pg_url: tuple[str, str]) -> None:
    """Quotes, percent signs, ``$1`` and backslashes in an id, a title and event data are
    bound by the driver into the ``EXECUTE`` as into the unprepared query: stored as given."""
    url, schema = pg_url
    hostile = "x'); DROP TABLE events; -- 100% $1 %s \\ ' \" é 😀"
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle = store.create_session(hostile)
        for turn in range(4):  # the first unprepared, then prepared
            handle.append("session/title", {"title": hostile + str(turn)})
            handle.append("user/message", user_message(hostile, id=f"u{turn}"), surface_op="append")
        assert len(_on_server(store)) >= 4
        events = list(store.events(hostile))
        assert [e.data["title"] for e in events if e.type == "session/title"] == [
            hostile + str(t) for t in range(4)
        ]
        assert [m["content"][0]["text"] for m in store.messages(hostile)] == [hostile] * 4
        assert store.verify(hostile).ok


class _Everything(set[str]):
    """A set that holds every name: what is prepared as a stale record would have it."""

    def __contains__(self, item: object) -> bool:
        return True


def test_the_async_store_retries_unprepared_when_a_statement_is_missing(
    pg_url: tuple[str, str], queries: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, schema = pg_url

    async def run() -> None:
        async with open_async_store(url, schema=schema) as store:
            handle = await store.create_session("s")
            await handle.append("turn/start", {"turn": 0})
            del queries[:]
            with monkeypatch.context() as patch:
                patch.setattr(pg_appends, "prepared_on", lambda driver: _Everything())
                await handle.append("turn/start", {"turn": 1})  # EXECUTEs a name never prepared
            failed, retried = queries
            assert "EXECUTE " in failed and "PREPARE " not in failed
            assert retried.endswith(pg_appends.PREPARED_NAMES)
            await handle.append("turn/start", {"turn": 2})
            assert [e.seq async for e in await store.events("s")] == [0, 1, 2]
            assert (await store.verify("s")).ok

    asyncio.run(run())
