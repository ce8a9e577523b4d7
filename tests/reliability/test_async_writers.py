"""The async store's appends on PostgreSQL: kept psycopg ``AsyncConnection``s, natively
awaited (``appending.append_parts_async``). What the pool's pre-ping and checkin did for the sync
store must still hold: a connection the server dropped is replaced, nothing is left behind at
close, and every outcome is the sync store's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import Engine, text

from session_sql import AsyncSessionStore, ConcurrencyError, StoreError, open_async_store
from session_sql._store.backends.postgresql import appending

from ..store.store_builders import user_message

pytestmark = pytest.mark.postgresql


async def say(handle: Any, text_: str) -> int:
    event = await handle.append("user/message", user_message(text_), surface_op="append")
    return int(event.seq)


def run(pg_backend: Any, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with open_async_store(pg_backend.url, schema=pg_backend.schema, **options) as s:
            return await body(s)

    return asyncio.run(main())


def kept(store: AsyncSessionStore) -> list[Any]:
    writers = store._runner.writers
    assert writers is not None
    return [raw.driver_connection for raw in writers._idle]


def test_appends_reuse_kept_connections_without_a_pool_checkout(pg_backend, monkeypatch) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s")
        await say(handle, "first")
        held = kept(store)
        assert len(held) == 1
        checkouts: list[int] = []
        pool = store._store.engine.pool
        connect = pool.connect
        monkeypatch.setattr(pool, "connect", lambda: checkouts.append(1) or connect())
        for i in range(5):
            await say(handle, str(i))
        assert checkouts == []
        assert kept(store) == held
        assert all(conn.info.transaction_status == 0 for conn in held)  # idle between appends
        assert (await store.verify("s")).ok

    run(pg_backend, body)


def test_concurrent_appends_hold_at_most_pool_size_connections(pg_backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handles = [await store.create_session(f"s{i}") for i in range(6)]
        await asyncio.gather(*(say(h, "x") for h in handles for _ in range(1)))
        await asyncio.gather(*(say(h, "y") for h in handles))
        assert 1 <= len(kept(store)) <= 2
        for h in handles:
            assert h.seq == 2 and (await store.verify(h.id)).ok

    run(pg_backend, body, pool_size=2)


def test_a_dropped_connection_is_replaced_and_the_append_lands_once(
    pg_backend, postgres_admin: Engine
) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s")
        await say(handle, "before")
        (dead,) = kept(store)
        with postgres_admin.connect() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(:p, 10000)"), {"p": dead.info.backend_pid}
            )
            conn.commit()
        assert await say(handle, "after") == 1  # dropped while idle: replaced before sending
        assert dead.closed and dead not in kept(store)
        events = [e async for e in await store.events("s")]
        assert [e.data["content"][0]["text"] for e in events] == ["before", "after"]
        assert (await store.verify("s")).ok

    run(pg_backend, body)


def test_a_lost_race_is_classified_as_on_the_sync_store(pg_backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        first = await store.create_session("s")
        second = await store.open_session("s")
        await say(first, "a")
        with pytest.raises(ConcurrencyError):
            await say(second, "b")
        assert second.seq == 0
        await second.refresh()
        assert await say(second, "b") == 1
        assert kept(store)[0].info.transaction_status == 0  # rolled back, kept

    run(pg_backend, body)


def test_closing_gives_every_kept_connection_back(pg_backend) -> None:
    async def body(store: AsyncSessionStore) -> Any:
        handles = [await store.create_session(f"s{i}") for i in range(3)]
        await asyncio.gather(*(say(h, "x") for h in handles))
        held = kept(store)
        assert held
        await store.close()
        assert all(conn.closed for conn in held)  # given back to the pool, which closed them
        with pytest.raises(StoreError):
            await say(handles[0], "late")
        assert handles[0].seq == 1

    async def main() -> Any:
        store = await open_async_store(pg_backend.url, schema=pg_backend.schema, pool_size=3)
        try:
            return await body(store)
        finally:
            await store.close()

    asyncio.run(main())


def test_an_append_runs_in_its_callers_task_on_a_kept_cursor(pg_backend, monkeypatch) -> None:
    """No task of its own per append (its start and end cost loop iterations), and one
    client-binding cursor per kept connection, made once."""
    seen: list[tuple[Any, Any]] = []
    real = appending.append_parts_async

    async def watched(writes: Any, cur: Any, parts: Any) -> int | None:
        seen.append((asyncio.current_task(), cur))
        return await real(writes, cur, parts)

    monkeypatch.setattr(appending, "append_parts_async", watched)

    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s")
        for i in range(3):
            await say(handle, str(i))
        assert {task for task, _ in seen} == {asyncio.current_task()}
        assert len({id(cur) for _, cur in seen}) == 1
        assert seen[0][1].connection is kept(store)[0]
        assert (await store.verify("s")).ok

    run(pg_backend, body)
