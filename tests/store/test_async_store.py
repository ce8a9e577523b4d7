"""The async API on its own terms (SPEC §11.3): the loop never waits on I/O, concurrency,
cancellation, lazy streams. The store contract itself runs on the async API through
``async_facade`` (every contract module, unless it says why not)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from sqlalchemy import event
from sqlalchemy.util import await_

from session_sql import (
    AsyncSessionStore,
    AsyncStoredSession,
    ConcurrencyError,
    InvalidArgumentError,
    PermanentStoreError,
    ReentrantAppendError,
    SessionNotFoundError,
    SessionStore,
    StoredSession,
    loopsafe,
    open_async_store,
)
from session_sql._store import reader
from session_sql._store.running import (
    _copy_outcome,
    _outcome_of,
    _Pinned,
    _Runner,
    _Uninterrupted,
)

from ..loops import in_loops
from .store_builders import user_message

T = TypeVar("T")


def run(backend: Any, body: Callable[[AsyncSessionStore], Awaitable[T]], **options: Any) -> T:
    """Run ``body(store)`` on a fresh event loop with an async store on ``backend``."""

    async def main() -> T:
        async with open_async_store(backend.url, schema=backend.schema, **options) as store:
            return await body(store)

    return asyncio.run(main())


async def say(handle: AsyncStoredSession, text: str = "hi") -> int:
    event = await handle.append("user/message", user_message(text), surface_op="append")
    return event.seq


async def stored_seqs(store: AsyncSessionStore, session_id: str) -> list[int]:
    return [e.seq async for e in await store.events(session_id)]


# -- the API ----------------------------------------------------------------------------------


# Keywords only the async store has: its handle's synchronous readers cannot read lazily on
# the loop, so open_session reads the log unless told not to (SPEC §11.3).
ASYNC_ONLY = {"open_session": ["read_log"]}


def _async_twin(param: inspect.Parameter) -> inspect.Parameter:
    """A sync store method's parameter as the async store has it: its handles (in
    ``append_together``'s pairs) are the async store's."""
    if isinstance(param.annotation, str):
        return param.replace(
            annotation=param.annotation.replace("StoredSession", "AsyncStoredSession")
        )
    return param


def test_every_store_method_is_there_with_the_same_parameters() -> None:
    public = {
        name: fn
        for name, fn in inspect.getmembers(SessionStore, inspect.isfunction)
        if not name.startswith("_")
    }
    for name, fn in public.items():
        twin = getattr(AsyncSessionStore, name)
        params = list(inspect.signature(twin).parameters.values())
        extra = ASYNC_ONLY.get(name, [])
        assert [p.name for p in params[len(params) - len(extra) :]] == extra, name
        assert all(
            p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[len(params) - len(extra) :]
        )
        assert params[: len(params) - len(extra)] == [
            _async_twin(p) for p in inspect.signature(fn).parameters.values()
        ], name
        if name == "follow":
            assert inspect.isasyncgenfunction(twin)
        else:
            assert inspect.iscoroutinefunction(twin), name
    for name in ("append", "append_many", "refresh"):
        assert inspect.iscoroutinefunction(getattr(AsyncStoredSession, name))
        assert list(inspect.signature(getattr(AsyncStoredSession, name)).parameters) == list(
            inspect.signature(getattr(StoredSession, name)).parameters
        )


def test_opening_refuses_what_open_store_refuses(tmp_path) -> None:
    async def bad_schema() -> None:
        async with open_async_store(f"sqlite:///{tmp_path / 'a.db'}", schema="no-dash"):
            pass

    with pytest.raises(ValueError, match="schema"):
        asyncio.run(bad_schema())

    async def bad_option() -> None:
        await open_async_store(f"sqlite:///{tmp_path / 'a.db'}", synchronous="SOMETIMES")

    with pytest.raises(ValueError, match="synchronous"):
        asyncio.run(bad_option())


def test_tasks_opening_a_store_at_once_open_it_once(backend, monkeypatch) -> None:
    """A framework session's first calls may run concurrently, each opening the store on
    first use: one store is opened, and every caller gets it (none is leaked unclosed)."""
    opened: list[SessionStore] = []

    async def main() -> None:
        store = open_async_store(backend.url, schema=backend.schema)
        opening = store._opening

        def counted() -> SessionStore:
            time.sleep(0.05)  # a slow open: the other tasks arrive while it runs
            opened.append(opening())
            return opened[-1]

        monkeypatch.setattr(store, "_opening", counted)
        try:
            got = await asyncio.gather(*(store._open() for _ in range(4)), store)
            assert all(s is store for s in got)
            handle = await store.create_session("s1")
            assert await say(handle) == 0
        finally:
            await store.close()

    asyncio.run(main())
    assert len(opened) == 1


def test_a_cancelled_opening_keeps_the_store_for_the_next_caller(backend, monkeypatch) -> None:
    opened: list[SessionStore] = []

    async def main() -> None:
        store = open_async_store(backend.url, schema=backend.schema)
        opening = store._opening
        started = threading.Event()

        def slow() -> SessionStore:
            started.set()
            time.sleep(0.05)
            opened.append(opening())
            return opened[-1]

        monkeypatch.setattr(store, "_opening", slow)
        first = asyncio.ensure_future(store._open())
        while not started.is_set():
            await asyncio.sleep(0.001)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        try:
            await store  # finds the store the cancelled task opened
            handle = await store.create_session("s1")
            assert await say(handle) == 0
        finally:
            await store.close()
        assert opened[0].engine.pool.checkedout() == 0  # close() closed that one

    asyncio.run(main())
    assert len(opened) == 1


def test_a_closed_async_store_refuses_calls(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s1")
        await store.close()
        with pytest.raises(PermanentStoreError, match="closed"):
            await store.messages("s1")
        with pytest.raises(PermanentStoreError, match="closed"):
            await say(handle)
        assert handle.seq == 0

    run(backend, body)


def test_scans_and_row_reads(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        for i in range(5):
            await say(await store.create_session(f"s{i}"))
        infos = [i.id async for i in await store.iter_sessions(page_size=2)]
        assert infos == [f"s{i}" for i in range(5)]
        assert await store.head_seq("s3") == 0
        assert (await store.stats()).sessions == 5
        with pytest.raises(InvalidArgumentError):
            await store.iter_sessions(page_size=0)
        with pytest.raises(InvalidArgumentError):
            async for _ in store.follow("s1", after_seq=None):  # type: ignore[arg-type]
                pass

    run(backend, body, clock=iter(range(1, 10**6)).__next__)


def test_tail_reads_match_the_sync_store(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("t")
        for i in range(6):
            await say(handle, f"m{i}")
        every = await store.surface_messages("t")
        assert await store.surface_messages("t", last=2) == every[-2:]
        assert await store.surface("t", last=3) == (await store.surface("t"))[-3:]
        assert await store.messages("t", last=2) == (await store.messages("t"))[-2:]
        assert await store.messages("t", last=0) == []
        with pytest.raises(InvalidArgumentError):
            await store.messages("t", last=-1)

    run(backend, body)


def test_handles_read_synchronously_and_append_as_coroutines(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s1", seed=[])
        assert isinstance(handle, AsyncStoredSession)
        assert handle.first_live_seq == 0
        assert await say(handle) == 1
        assert len(handle.messages()) == 1
        assert handle.surface.nodes == (1,) == tuple(await store.surface("s1"))
        other = await store.open_session("s1")
        await other.append_many([{"type": "todo/write", "data": {}}] * 2)
        with pytest.raises(ConcurrencyError):
            await say(handle)
        assert [e.seq for e in await handle.refresh()] == [2, 3]
        assert await say(handle) == 4
        assert (await store.verify("s1")).ok

    run(backend, body)


def test_appends_on_one_handle_run_one_at_a_time(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s1")
        seqs = await asyncio.gather(*(say(handle, str(i)) for i in range(10)))
        assert sorted(seqs) == list(range(10))
        assert await stored_seqs(store, "s1") == list(range(10))

    run(backend, body)


def test_an_observer_cannot_append_to_the_session_it_observes(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s1")
        errors: list[BaseException] = []

        def observer(session: Any, event: Any) -> None:
            try:
                # The async handle's append is a coroutine: begin one on the handle it wraps.
                session._sync._begin_append([("todo/write", {}, None, None, False, None)])
            except ReentrantAppendError as exc:
                errors.append(exc)

        handle.subscribe(observer)
        await say(handle)
        assert len(errors) == 1
        assert await say(handle) == 1  # the flag was released

    run(backend, body)


def test_events_is_a_lazy_paged_stream(backend, monkeypatch) -> None:
    monkeypatch.setattr(reader, "STREAM_BATCH", 10)

    async def body(store: AsyncSessionStore) -> None:
        seed = [{"type": "todo/write", "seq": i, "time": i, "data": {"i": i}} for i in range(34)]
        await store.create_session("big", seed=seed)
        fetched: list[int] = []
        engine = store._store.engine

        def on_execute(*args: Any) -> None:
            fetched.append(1)

        event.listen(engine, "before_cursor_execute", on_execute)
        try:
            stream = await store.events("big")
            assert isinstance(stream, AsyncIterator)
            first = await anext(stream)
            after_first = len(fetched)
            rest = [e.seq async for e in stream]
        finally:
            event.remove(engine, "before_cursor_execute", on_execute)
        assert first.seq == 0 and rest == list(range(1, 35))
        assert len(fetched) > after_first  # later pages were fetched as the stream advanced
        with pytest.raises(SessionNotFoundError):
            await store.events("nope")  # refused when awaited, not at the first step

    run(backend, body)


def test_follow_yields_what_other_tasks_commit_in_order(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        writer = await store.create_session("s1")
        await say(writer, "before")

        async def write() -> None:
            for i in range(5):
                await say(writer, str(i))
                await asyncio.sleep(0.01)

        task = asyncio.create_task(write())
        seen = []
        async for e in store.follow("s1", timeout=2.0):
            seen.append(e.seq)
            if e.seq == 5:
                break
        await task
        assert seen == [0, 1, 2, 3, 4, 5]
        assert [e.seq async for e in store.follow("s1", after_seq=3, timeout=0)] == [4, 5]
        with pytest.raises(SessionNotFoundError):
            async for _ in store.follow("nope", timeout=0):
                pass

    run(backend, body)


# -- the loop never waits on I/O --------------------------------------------------------------

_LATENCY = 0.25  # seconds of simulated I/O at each pool checkout
_SLOW = 0.1  # asyncio's slow-callback threshold for the test


def _slow_io(store: AsyncSessionStore, backend: Any) -> None:
    """Make every connection checkout take ``_LATENCY`` of I/O, where the store does its I/O:
    a sleep in the worker thread (SQLite), a ``pg_sleep`` awaited through the async driver
    (PostgreSQL). Were any of it run on the loop, a callback would take that long."""
    in_worker = backend.has("async_in_worker")

    def on_checkout(dbapi_connection: Any, *args: Any) -> None:
        if in_worker:
            time.sleep(_LATENCY)
        else:
            cursor = dbapi_connection.cursor()
            cursor.execute(f"SELECT pg_sleep({_LATENCY})")
            cursor.close()
            dbapi_connection.rollback()  # leave it idle, as the pool handed it over

    event.listen(store._store.engine, "checkout", on_checkout)


def test_no_step_blocks_the_loop_on_io(backend, caplog) -> None:
    async def body(store: AsyncSessionStore) -> int:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = _SLOW
        _slow_io(store, backend)
        writer = await store.create_session("s1")
        ticks = 0

        async def ticker() -> None:  # proves the loop kept running during the I/O
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick = asyncio.create_task(ticker())
        await say(writer)
        await writer.append_many([{"type": "todo/write", "data": {}}] * 3)
        reader_handle = await store.open_session("s1")
        await say(writer)
        await reader_handle.refresh()
        await store.messages("s1")
        await store.surface("s1")
        await store.load_session("s1")
        assert (await store.verify("s1")).ok
        assert [e.seq async for e in store.follow("s1", after_seq=3, timeout=0.05)] == [4]
        tick.cancel()
        return ticks

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        ticks = run(backend, body)
    slow = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert slow == []
    assert ticks >= 20  # at least 10 x 0.25 s of I/O went by with the loop free


async def _slow_inserts(store: AsyncSessionStore, backend: Any) -> None:
    """Make every events insert take ``_LATENCY`` inside the database (a trigger that sleeps),
    so that an append waits on its own statements, wherever it runs them."""
    engine = store._store.engine
    if backend.has("async_in_worker"):  # a function of the worker's sqlite3 connection

        def on_checkout(dbapi_connection: Any, *args: Any) -> None:
            dbapi_connection.create_function("nap", 0, lambda: time.sleep(_LATENCY))

        event.listen(engine, "checkout", on_checkout)
        statements = [
            "CREATE TRIGGER nap_events BEFORE INSERT ON events BEGIN SELECT nap(); END",
        ]
    else:
        schema = f'"{store.schema}"'
        statements = [
            f"CREATE FUNCTION {schema}.nap() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_sleep({_LATENCY}); RETURN NEW; END $$",
            f"CREATE TRIGGER nap_events BEFORE INSERT ON {schema}.events FOR EACH ROW "
            f"EXECUTE FUNCTION {schema}.nap()",
        ]

    def create() -> None:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)

    await store._runner.call(create)  # the store's own way to its database


def test_an_append_waiting_on_the_database_never_blocks_the_loop(backend, caplog) -> None:
    """The appends' own statements (on PostgreSQL, the kept async connections) are awaited."""

    async def body(store: AsyncSessionStore) -> int:
        writer = await store.create_session("s1")
        await say(writer, "warm")  # the connection an append uses is open before timing
        await _slow_inserts(store, backend)
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = _SLOW
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick = asyncio.create_task(ticker())
        for i in range(4):
            await say(writer, str(i))
        await writer.append_many([{"type": "todo/write", "data": {}}] * 2)
        tick.cancel()
        assert writer.seq == 7 and (await store.verify("s1")).ok
        return ticks

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        ticks = run(backend, body)
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    assert ticks >= 40  # 6 x 0.25 s of database time went by with the loop free


# -- concurrency ------------------------------------------------------------------------------


def test_fifty_tasks_append_to_fifty_sessions(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handles = [await store.create_session(f"s{i}") for i in range(50)]

        async def work(handle: AsyncStoredSession) -> None:
            for j in range(4):
                await say(handle, str(j))

        await asyncio.gather(*(work(h) for h in handles))
        for h in handles:
            assert await stored_seqs(store, h.id) == [0, 1, 2, 3] == [e.seq for e in h.events]
            assert (await store.verify(h.id)).ok

    run(backend, body)


def test_eight_tasks_on_one_session_refresh_and_retry(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        await store.create_session("s1")
        handles = [await store.open_session("s1") for _ in range(8)]
        conflicts = 0

        async def work(handle: AsyncStoredSession, k: int) -> list[int]:
            nonlocal conflicts
            mine = []
            for j in range(5):
                while True:
                    try:
                        mine.append(await say(handle, f"{k}.{j}"))
                        break
                    except ConcurrencyError:
                        conflicts += 1
                        await handle.refresh()
            return mine

        results = await asyncio.gather(*(work(h, k) for k, h in enumerate(handles)))
        committed = sorted(s for r in results for s in r)
        assert committed == list(range(40))  # no gaps, no duplicates
        assert await stored_seqs(store, "s1") == list(range(40))
        texts = [m["content"][0]["text"] for m in await store.messages("s1")]
        assert sorted(texts) == sorted(f"{k}.{j}" for k in range(8) for j in range(5))
        assert conflicts > 0
        assert (await store.verify("s1")).ok

    run(backend, body)


# -- cancellation -----------------------------------------------------------------------------


def test_a_cancelled_append_committed_or_not_never_half(backend) -> None:
    """Cancel an append after k loop iterations, for every k until it finishes on its own;
    each time the handle must equal a fresh load and keep appending."""

    async def body(store: AsyncSessionStore) -> set[tuple[bool, bool]]:
        handle = await store.create_session("s1")
        outcomes: set[tuple[bool, bool]] = set()
        for k in range(400):
            before = handle.seq
            task = asyncio.create_task(
                handle.append_many(
                    [
                        {
                            "type": "user/message",
                            "data": user_message(str(k)),
                            "surface_op": "append",
                        },
                        {"type": "todo/write", "data": {"k": k}},
                    ]
                )
            )
            for _ in range(k):
                await asyncio.sleep(0)
            if k == 399:  # however slow the machine, one append finishes before its cancel
                await asyncio.wait([task])
            finished = task.done()
            task.cancel()
            try:
                await task
                cancelled = False
            except asyncio.CancelledError:
                cancelled = True
            committed = handle.seq == before + 2
            assert committed or handle.seq == before
            outcomes.add((cancelled, committed))
            fresh = await store.load_session("s1")
            assert list(handle.events) == list(fresh.events)[: handle.seq]
            assert handle.surface.nodes == tuple(await store.surface("s1"))
            assert handle.messages() == await store.messages("s1")
            if finished:
                break
        await say(handle, "after")
        assert (await store.verify("s1")).ok
        return outcomes

    outcomes = run(backend, body)
    # Cancelled before it started, cancelled while its transaction ran (and it committed),
    # and finished before the cancel: every case was exercised.
    assert {(True, False), (True, True), (False, True)} <= outcomes


def test_a_held_cancellation_never_reaches_the_awaited_coroutine() -> None:
    """``_Uninterrupted`` (the async append's persist step on PostgreSQL): cancelling the
    task at a bare yield, at a future and at a lock leaves each wait alone; the coroutine
    runs to its end (or its error) and the cancellation is only noted."""

    async def main() -> tuple[list[str], bool, bool]:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        lock = asyncio.Lock()
        await lock.acquire()
        steps: list[str] = []

        async def inner() -> None:
            await asyncio.sleep(0)
            steps.append("yielded")
            await gate
            steps.append("future")
            async with lock:
                steps.append("lock")
            raise KeyError("its own error")

        held = _Uninterrupted(inner())

        async def outer() -> None:
            await held

        task = asyncio.create_task(outer())
        await asyncio.sleep(0)  # inner at its bare yield
        task.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        assert steps == ["yielded"]  # now waiting on the gate
        task.cancel()
        task.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        gate.set_result(None)
        for _ in range(3):
            await asyncio.sleep(0)
        assert steps == ["yielded", "future"]  # now waiting on the lock
        task.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        lock.release()
        with pytest.raises(KeyError):
            await task
        return steps, held.cancelled, gate.cancelled()

    steps, cancelled, gate_cancelled = asyncio.run(main())
    assert steps == ["yielded", "future", "lock"]
    assert cancelled and not gate_cancelled


def test_a_greenlet_call_runs_in_the_callers_task_and_outlives_its_cancellation() -> None:
    """PostgreSQL's runner calls the sync store in a greenlet on the loop, in the caller's own
    task (no task of its own): cancelled while it waits, the call runs to its end and the
    caller sees the cancellation after; results and errors come back as they are."""

    async def main() -> None:
        runner = _Runner(threads=None)
        ran_in: list[Any] = []
        done: list[str] = []

        def slow() -> int:
            ran_in.append(asyncio.current_task())
            await_(asyncio.sleep(0.05))
            done.append("slow")
            return 7

        caller = asyncio.ensure_future(runner.call(slow))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert done == ["slow"]  # it ran to its end before the caller saw the cancellation
        assert ran_in == [caller]

        def fails() -> None:
            raise KeyError("its own error")

        assert await runner.call(lambda: 3) == 3
        with pytest.raises(KeyError, match="its own error"):
            await runner.call(fails)
        runner.shutdown()
        with pytest.raises(PermanentStoreError, match="closed"):
            await runner.call(lambda: 3)

    asyncio.run(main())


def test_a_greenlet_call_closed_before_it_finished_ends_quietly() -> None:
    """A call whose coroutine is closed while it waits (its loop went away) keeps no
    outcome and lets the close through (no "coroutine ignored GeneratorExit")."""

    class Pending:
        def __await__(self) -> Any:
            yield self

    async def waits() -> None:
        await Pending()

    outcome: list[Any] = []
    coro = _outcome_of(waits(), outcome)
    assert isinstance(coro.send(None), Pending)
    coro.close()
    assert outcome == []


def test_a_pinned_future_lets_its_waiter_see_the_outcome_before_the_cancellation() -> None:
    """The runner's futures refuse cancel(): a cancelled waiter wakes only once the call is
    done, and its outcome is there; a call whose task the loop cancelled reports that."""

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        seen: list[Any] = []
        future: _Pinned[int] = _Pinned(loop=loop)

        async def waiter() -> None:
            try:
                await future
            except asyncio.CancelledError:
                seen.append(("cancelled after", future.result()))
                raise

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        assert task.cancel()  # noted; the future itself refuses
        assert not future.cancel() and not future.done()
        for _ in range(3):
            await asyncio.sleep(0)
        assert not task.done()  # still waiting for the call
        future.set_result(7)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()

        gone = asyncio.ensure_future(asyncio.sleep(10))
        copied: _Pinned[None] = _Pinned(loop=loop)
        gone.add_done_callback(functools.partial(_copy_outcome, copied))
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
        await asyncio.sleep(0)
        seen.append(type(copied.exception()).__name__)
        return seen

    assert asyncio.run(main()) == [("cancelled after", 7), "CancelledError"]


def test_a_cancelled_refresh_leaves_the_handle_usable(backend) -> None:
    async def body(store: AsyncSessionStore) -> None:
        handle = await store.create_session("s1")
        other = await store.open_session("s1")
        await say(other)
        for k in range(50):
            task = asyncio.create_task(handle.refresh())
            for _ in range(k):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert handle.seq in (0, 1)
            if handle.seq == 1:
                break
        await handle.refresh()
        assert handle.seq == 1
        assert await say(handle) == 1
        assert (await store.verify("s1")).ok

    run(backend, body)


def test_worker_threads_and_greenlets_do_the_io(backend) -> None:
    """SQLite statements run off the loop's thread; PostgreSQL's connections are async."""

    async def body(store: AsyncSessionStore) -> set[str]:
        loop_thread = threading.current_thread()
        kinds: set[str] = set()

        def on_execute(conn: Any, *args: Any) -> None:
            if backend.has("async_in_worker"):
                kinds.add("loop" if threading.current_thread() is loop_thread else "worker")
            else:
                kinds.add(type(conn.connection.driver_connection).__name__)

        event.listen(store._store.engine, "before_cursor_execute", on_execute)
        handle = await store.create_session("s1")
        await say(handle)
        await store.messages("s1")
        return kinds

    kinds = run(backend, body)
    assert kinds == {backend.expect.async_statement_thread}


def test_sqlite_calls_share_a_few_worker_threads(tmp_path) -> None:
    """As many worker threads as the pool has connections, reused call after call."""

    async def main() -> set[str]:
        names: set[str] = set()
        async with open_async_store(f"sqlite:///{tmp_path / 's.db'}", pool_size=3) as store:
            handle = await store.create_session("s1")

            def on_execute(*args: Any) -> None:
                names.add(threading.current_thread().name)

            event.listen(store._store.engine, "before_cursor_execute", on_execute)
            await asyncio.gather(*(store.messages("s1") for _ in range(40)))
            for _ in range(20):
                await say(handle)
                await store.surface("s1")
        return names

    names = asyncio.run(main())
    assert 1 <= len(names) <= 3
    assert all(name.startswith("session_sql") for name in names)


def test_sqlite_worker_threads_start_as_calls_need_them(tmp_path) -> None:
    """One call at a time needs one thread (a store opened for a request and its read start
    no more); calls at once start more, up to the pool's size."""

    def workers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("session_sql_")}

    async def main() -> tuple[set[threading.Thread], set[threading.Thread]]:
        before = workers()
        async with open_async_store(f"sqlite:///{tmp_path / 's.db'}", pool_size=3) as store:
            await store.create_session("s1")
            for _ in range(5):
                await store.messages("s1")
            one_at_a_time = workers() - before
            started = threading.Event()

            def blocking() -> None:
                started.set()
                time.sleep(0.2)

            slow = asyncio.ensure_future(store._runner.call(blocking))
            await asyncio.to_thread(started.wait)
            await asyncio.gather(*(store.messages("s1") for _ in range(10)))
            await slow
            at_once = workers() - before
        return one_at_a_time, at_once

    one_at_a_time, at_once = asyncio.run(main())
    assert len(one_at_a_time) == 1
    assert 2 <= len(at_once) <= 3


def test_a_store_left_open_does_not_hold_up_the_exit(backend, tmp_path) -> None:
    """Its worker threads (SQLite) never keep the interpreter from exiting."""
    script = tmp_path / "left_open.py"
    script.write_text(
        "import asyncio, sys\n"
        "from session_sql import open_async_store\n"
        "async def main():\n"
        "    store = await open_async_store(sys.argv[1], schema=sys.argv[2])\n"
        "    handle = await store.create_session('left-open')\n"
        "    await handle.append('todo/write', {'k': 1})\n"
        "    print(handle.seq)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), backend.url, backend.schema],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_import_and_export_files_are_read_and_written_off_the_loop(
    backend, tmp_path, caplog, monkeypatch
):
    """A slow disk (each fsync takes ``_LATENCY``) never stalls the loop."""
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        time.sleep(_LATENCY)
        real_fsync(fd)

    async def body(store: AsyncSessionStore) -> None:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.slow_callback_duration = _SLOW
        handle = await store.create_session("s1")
        await say(handle)
        path = tmp_path / "s1.jsonl"
        assert await store.export_jsonl("s1", path) == 1
        await store.delete_session("s1")
        assert await store.import_jsonl(path) == "s1"
        assert await stored_seqs(store, "s1") == [0]
        assert (await store.verify("s1")).ok

    monkeypatch.setattr(os, "fsync", slow_fsync)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        run(backend, body)
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


# -- several event loops ----------------------------------------------------------------------


def test_a_store_and_a_handle_serve_every_event_loop(backend) -> None:
    """Opened under one ``asyncio.run``, used by five threads' loops at once on one handle
    (and on the store), then under another ``asyncio.run``: every append lands once."""
    store = open_async_store(backend.url, schema=backend.schema, pool_size=2)

    async def opening() -> AsyncStoredSession:
        await store
        return await store.create_session("s1")

    handle = asyncio.run(opening())

    async def appends(i: int) -> None:
        for j in range(4):
            await say(handle, f"{i}.{j}")
            other = await store.create_session() if j == 0 else None
            if other is not None:
                await say(other)
            assert len(await store.messages("s1")) >= j + 1

    in_loops(5, appends)

    async def after() -> None:
        try:
            texts = [m["content"][0]["text"] for m in await store.messages("s1")]
            assert sorted(texts) == sorted(f"{i}.{j}" for i in range(5) for j in range(4))
            assert await stored_seqs(store, "s1") == list(range(20))
            assert handle.seq == 20
            assert (await store.verify("s1")).ok
            assert await say(handle) == 20
        finally:
            await store.close()

    asyncio.run(after())


def test_loops_waiting_for_a_connection_or_a_handle_each_get_their_turn(backend) -> None:
    """One connection for appends and one for reads (SQLite: one worker thread): the calls of
    five loops wait for them, and for one handle, in turn; none waits forever."""
    options: dict[str, Any] = {"pool_size": 1}
    if not backend.has("async_in_worker"):
        options["max_overflow"] = 1  # the appends keep one; the reads share the other
    store = open_async_store(backend.url, schema=backend.schema, **options)
    handle = asyncio.run(_created(store, "s1"))

    async def busy(i: int) -> None:
        for _ in range(5):
            await asyncio.gather(say(handle, str(i)), store.surface("s1"), store.head_seq("s1"))

    in_loops(5, busy)

    async def after() -> None:
        try:
            assert await stored_seqs(store, "s1") == list(range(25))
            assert (await store.verify("s1")).ok
        finally:
            await store.close()

    asyncio.run(after())


async def _created(store: AsyncSessionStore, session_id: str) -> AsyncStoredSession:
    await store
    return await store.create_session(session_id)


def test_a_waiter_of_another_loop_cancelled_after_its_turn_came_passes_it_on() -> None:
    """The store's locks are shared by loops: a release wakes the waiter on its own loop, and
    a waiter cancelled once its turn was handed to it hands the turn on."""
    lock = loopsafe.Semaphore()
    held = threading.Event()
    let_go = threading.Event()
    released = threading.Event()

    async def holder() -> None:
        await lock.acquire()
        held.set()
        await asyncio.get_running_loop().run_in_executor(None, let_go.wait)
        lock.release()
        released.set()

    async def cancelled_waiter() -> None:
        task = asyncio.ensure_future(lock.acquire())
        await asyncio.sleep(0.01)
        let_go.set()
        assert released.wait(10)  # the turn is ``task``'s, its wake-up not yet run here
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def later() -> None:
        await asyncio.wait_for(lock.acquire(), 10)
        lock.release()

    thread = threading.Thread(target=asyncio.run, args=(holder(),), daemon=True)
    thread.start()
    assert held.wait(10)
    asyncio.run(cancelled_waiter())
    thread.join(10)
    assert not thread.is_alive()
    asyncio.run(later())
    assert not lock.locked()
