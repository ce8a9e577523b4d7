"""The LangGraph savers beside other processes: deleting wins against a move, a thread deleted
under a read is a missing thread, and every thread id is listed and erased.

The races are made deterministic by running the other side's whole call at the exact point
of this side's where it used to go wrong (a wrapped store method); one test runs the real
two-process race for a bounded number of rounds.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from session_sql import (
    AsyncSessionStore,
    InvalidArgumentError,
    SessionStore,
    open_async_store,
    open_store,
)
from session_sql.integrations.langgraph import AsyncSessionSQLSaver, SessionSQLSaver

from ..conftest import Backend
from . import lg_workers

SPAWN = multiprocessing.get_context("spawn")
MOVES = ["keep_latest", "delete_for_runs"]


def _cfg(thread: str, **more: Any) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **more}}


def _fill(saver: SessionSQLSaver, thread: str) -> None:
    lg_workers.fill(saver, thread)


def _ids(store: SessionStore) -> list[str]:
    return [info.id for info in store.list_sessions(id_prefix="langgraph:")]


def _move(saver: SessionSQLSaver, thread: str, how: str) -> None:
    if how == "keep_latest":
        saver.prune([thread])
    else:
        saver.delete_for_runs(["r0"])


async def _amove(saver: AsyncSessionSQLSaver, thread: str, how: str) -> None:
    if how == "keep_latest":
        await saver.aprune([thread])
    else:
        await saver.adelete_for_runs(["r0"])


def _once_before(store: Any, name: str, first: Callable[..., Any]) -> None:
    """Make ``store.<name>`` run ``first(*args)`` before its first call (on this object)."""
    original = getattr(store, name)
    done: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            first(*args)
        return original(*args, **kwargs)

    setattr(store, name, wrapped)


def _once_before_async(
    store: Any, name: str, first: Callable[..., Coroutine[Any, Any, None]]
) -> None:
    original = getattr(store, name)
    done: list[bool] = []

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            await first(*args)
        return await original(*args, **kwargs)

    setattr(store, name, wrapped)


def _stores(backend: Backend) -> tuple[SessionStore, SessionStore]:
    return (
        open_store(backend.url, schema=backend.schema),
        open_store(backend.url, schema=backend.schema),
    )


# -- delete_thread against a move (prune keep_latest, delete_for_runs) -----------------------


@pytest.mark.parametrize("how", MOVES)
def test_delete_thread_wins_over_a_move_that_finishes_under_it(backend: Backend, how: str) -> None:
    """The move seals, creates the next generation and drops the old one between the
    deletion's look and its delete: the deletion still removes the thread."""
    one, two = _stores(backend)
    with one, two:
        _fill(SessionSQLSaver(one), "t")
        mover = SessionSQLSaver(two)
        _once_before(one, "delete_session", lambda _id: _move(mover, "t", how))
        SessionSQLSaver(one).delete_thread("t")
        assert _ids(one) == []
        assert SessionSQLSaver(one).get_tuple(_cfg("t")) is None


@pytest.mark.parametrize("how", MOVES)
def test_a_move_whose_thread_is_deleted_under_it_leaves_nothing(backend: Backend, how: str) -> None:
    """The deletion runs whole after the move sealed the thread, before it creates the next
    generation: what the move creates does not stay."""
    one, two = _stores(backend)
    with one, two:
        _fill(SessionSQLSaver(one), "t")
        deleter = SessionSQLSaver(two)
        _once_before(one, "create_session", lambda _id: deleter.delete_thread("t"))
        _move(SessionSQLSaver(one), "t", how)
        assert _ids(one) == []
        assert SessionSQLSaver(two).get_tuple(_cfg("t")) is None
        assert list(SessionSQLSaver(two).list(None)) == []


@pytest.mark.parametrize("how", MOVES)
def test_async_delete_thread_wins_over_a_move(backend: Backend, how: str) -> None:
    async def main() -> None:
        async with (
            open_async_store(backend.url, schema=backend.schema) as one,
            open_async_store(backend.url, schema=backend.schema) as two,
        ):
            await asyncio.to_thread(_fill_async_thread, backend)
            mover, deleter = AsyncSessionSQLSaver(two), AsyncSessionSQLSaver(one)

            async def move(_id: str) -> None:
                await _amove(mover, "t", how)

            _once_before_async(one, "delete_session", move)
            await deleter.adelete_thread("t")
            assert await _aids(one) == []

            await asyncio.to_thread(_fill_async_thread, backend)
            other = AsyncSessionSQLSaver(two)

            async def delete(_id: str) -> None:
                await other.adelete_thread("t")

            _once_before_async(one, "create_session", delete)
            await _amove(AsyncSessionSQLSaver(one), "t", how)
            assert await _aids(one) == []
            assert await AsyncSessionSQLSaver(two).aget_tuple(_cfg("t")) is None

    asyncio.run(main())


def _fill_async_thread(backend: Backend) -> None:
    with open_store(backend.url, schema=backend.schema) as store:
        _fill(SessionSQLSaver(store), "t")


async def _aids(store: AsyncSessionStore) -> list[str]:
    return [info.id for info in await store.list_sessions(id_prefix="langgraph:")]


@pytest.mark.parametrize("how", MOVES)
def test_delete_thread_beside_a_move_in_two_processes(backend: Backend, how: str) -> None:
    """The race as two processes run it, a bounded number of rounds: never a thread left."""
    rounds = 12
    with (
        open_store(backend.url, schema=backend.schema) as store,
        tempfile.TemporaryDirectory() as sync_dir,
        SPAWN.Pool(2) as pool,
    ):
        for i in range(rounds):
            thread = f"t{i}"
            _fill(SessionSQLSaver(store), thread)
            args = (backend.url, backend.schema, thread, sync_dir, i)
            moving = pool.apply_async(lg_workers.move, (*args, how))
            deleting = pool.apply_async(lg_workers.delete, args)
            moving.get(timeout=120)
            deleting.get(timeout=120)
            assert _ids(store) == [], f"round {i}"


# -- a thread deleted between the open and the read of its log -------------------------------


def _delete_after_open(store: SessionStore) -> None:
    """Make the store's next ``open_session`` delete the session once it is open (the row and
    the surface read, the rest of the log not yet)."""
    original = store.open_session
    done: list[bool] = []

    def wrapped(session_id: str, **kwargs: Any) -> Any:
        handle = original(session_id, **kwargs)
        if not done:
            done.append(True)
            store.delete_session(session_id)
        return handle

    store.open_session = wrapped  # type: ignore[method-assign]


def test_get_tuple_put_prune_on_a_thread_deleted_under_the_read(backend: Backend) -> None:
    with open_store(backend.url, schema=backend.schema) as store:
        _fill(SessionSQLSaver(store), "t")
        _delete_after_open(store)
        assert SessionSQLSaver(store).get_tuple(_cfg("t")) is None

        _fill(SessionSQLSaver(store), "t")
        _delete_after_open(store)
        stored = SessionSQLSaver(store).put(_cfg("t"), lg_workers.checkpoint("new"), {}, {})
        [found] = SessionSQLSaver(store).list(_cfg("t"))  # a new thread, with that checkpoint
        assert found.checkpoint["id"] == "new" == stored["configurable"]["checkpoint_id"]

        _delete_after_open(store)
        SessionSQLSaver(store).prune(["t"])
        assert _ids(store) == []


def test_async_get_tuple_put_prune_on_a_thread_deleted_under_the_read(backend: Backend) -> None:
    async def main() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:

            def delete_after_open() -> None:
                original = store.open_session
                done: list[bool] = []

                async def wrapped(session_id: str, **kwargs: Any) -> Any:
                    handle = await original(session_id, **{**kwargs, "read_log": False})
                    if not done:
                        done.append(True)
                        await store.delete_session(session_id)
                    await handle.read_log()
                    return handle

                store.open_session = wrapped  # type: ignore[method-assign]

            await asyncio.to_thread(_fill_async_thread, backend)
            delete_after_open()
            assert await AsyncSessionSQLSaver(store).aget_tuple(_cfg("t")) is None

            await asyncio.to_thread(_fill_async_thread, backend)
            delete_after_open()
            saver = AsyncSessionSQLSaver(store)
            await saver.aput(_cfg("t"), lg_workers.checkpoint("new"), {}, {})
            found = [t async for t in AsyncSessionSQLSaver(store).alist(_cfg("t"))]
            assert [t.checkpoint["id"] for t in found] == ["new"]

            delete_after_open()
            await AsyncSessionSQLSaver(store).aprune(["t"])
            assert await _aids(store) == []

    asyncio.run(main())


# -- thread ids no label value can hold -------------------------------------------------------

ODD = ["tab\there", "nul\x00", "x" * 1500, "é\u2028" * 700, "\ud800lone"]


def test_every_thread_is_listed_and_erased(backend: Backend) -> None:
    with open_store(backend.url, schema=backend.schema) as store:
        saver = SessionSQLSaver(store)
        for thread in [*ODD, "plain"]:
            _fill(saver, thread)
        fresh = SessionSQLSaver(store)
        listed = {t.config["configurable"]["thread_id"] for t in fresh.list(None)}
        assert listed == {*ODD, "plain"}
        fresh.delete_for_runs(["r0", "r1"])
        left = {t.metadata.get("run_id") for t in SessionSQLSaver(store).list(None)}
        assert left == {"r2"}
        for thread in ODD:  # each moved into its next generation, still named by its labels
            [kept] = SessionSQLSaver(store).list(_cfg(thread))
            assert kept.config["configurable"]["thread_id"] == thread
        fresh.delete_for_runs(["r2"])
        assert list(SessionSQLSaver(store).list(None)) == []


def test_async_savers_list_and_erase_every_thread(backend: Backend) -> None:
    async def main() -> None:
        async with AsyncSessionSQLSaver.from_url(backend.url, schema=backend.schema) as saver:
            for thread in ODD:
                await saver.aput(_cfg(thread), lg_workers.checkpoint("1"), {"run_id": "r"}, {})  # type: ignore[typeddict-unknown-key]
            listed = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
            assert listed == set(ODD)
            await saver.adelete_for_runs(["r"])
            assert [t async for t in saver.alist(None)] == []

    asyncio.run(main())


def test_a_thread_id_too_long_to_keep_is_refused(backend: Backend) -> None:
    with open_store(backend.url, schema=backend.schema) as store:
        saver = SessionSQLSaver(store)
        with pytest.raises(InvalidArgumentError, match="thread id must be at most 48000 bytes"):
            saver.put(_cfg("x" * 48_001), lg_workers.checkpoint("1"), {}, {})
        assert _ids(store) == []
        saver.put(_cfg("x" * 48_000), lg_workers.checkpoint("1"), {}, {})
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["x" * 48_000]
