"""The async API (SPEC §11.3): ``open_async_store``, ``AsyncSessionStore``, ``AsyncStoredSession``.

There is no second store here. An ``AsyncSessionStore`` drives an ordinary ``SessionStore``,
and each call runs the sync store's very code off the event loop's I/O:

* SQLite: in a worker thread of a pool sized like the connection pool.
* PostgreSQL: on the event loop, inside ``sqlalchemy.util.greenlet_spawn``, on an engine built
  on psycopg's async connections (``make_engine(..., async_driver=True)``): every statement,
  commit and pipeline sync is awaited, while the SQL and the logic are the sync store's own.
  This is ``AsyncConnection.run_sync`` at the grain of a whole public method, so each method
  keeps its one transaction, and no method had to be split for the async API.

The append pipeline is ``Session``'s: ``_begin_append`` (reentrancy flag, snapshot, rules,
plan, validators) on the loop, the persist step awaited, then ``_commit`` and ``_notify``.
Every call runs to completion even when its task is cancelled: the cancellation is raised
after the call has finished, so a cancelled append either committed (and the handle shows
it) or wrote nothing, never half, and the handle stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import queue
import threading
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import IO, Any, Literal, TypeVar, cast

from sqlalchemy.util import await_, greenlet_spawn

from session_sql import loopsafe
from session_sql._store import fastpath, reader
from session_sql._store.backends import backend_for
from session_sql._store.engine import AsyncWriteConnections, read_tx, translate_errors
from session_sql._store.following import Follower, Read, Sleep, Wait
from session_sql._store.metadata import UNSET, _Unset
from session_sql._store.opening import StoredLog
from session_sql._store.schema import DEFAULT_SCHEMA
from session_sql._store.stats import StoreStats
from session_sql._store.store import (
    SessionInfo,
    SessionStore,
    VerifyReport,
    open_store,
)
from session_sql._store.writer import (
    Prepared,
    StoredSession,
    begin_together,
    check_together,
    committed_lists,
    persist_together,
)
from session_sql.arguments import seq_bound, timeout_arg
from session_sql.catalog import Catalog
from session_sql.errors import (
    ConcurrencyError,
    InvalidArgumentError,
    PermanentStoreError,
    StoreError,
)
from session_sql.events import SessionEvent, SurfaceOp
from session_sql.jsonl import JsonlReader, published_file
from session_sql.messages import SurfaceMessage
from session_sql.session import Session

T = TypeVar("T")


class _Pinned(asyncio.Future[T]):
    """A future that refuses ``cancel()``: the calls of ``_Runner`` run to their end.

    A task cancelled while it awaits one is not woken: asyncio notes the cancellation and
    raises it in the task once the future is done, so the caller sees the outcome first
    (``future.done()`` holds wherever that ``CancelledError`` is caught).
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


async def _settle(future: _Pinned[Any]) -> bool:
    """Wait until ``future`` is done, whatever happens to the waiting task.

    Returns whether the waiting task was cancelled meanwhile; the caller re-raises the
    cancellation once it has applied the outcome (``future.result()``).
    """
    try:
        await future
    except asyncio.CancelledError:
        if not future.done():  # pragma: no cover - a pinned future is never cancelled
            raise
        return True
    except BaseException:
        pass  # the call's own error: the caller reads it from the future
    return False


class _Uninterrupted:
    """Awaiting it runs ``coro`` to its end in the awaiting task; a cancellation of that task
    meanwhile is held back and noted in ``cancelled`` (the caller raises it afterwards).

    What ``_settle`` gives a call run as a future of its own, without the task: a task, and
    the loop iterations that start it and report its end, cost an async append more client
    CPU than its whole wait for the server. The task waits on a future of this object's
    instead of the one ``coro`` waits on, so the cancellation, which cancels the future its
    task waits on, never reaches ``coro``: its future (a socket wait, a lock) is left alone
    and the wait goes on with a new future of ours.
    """

    __slots__ = ("_coro", "cancelled")

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self._coro = coro
        self.cancelled = False

    def __await__(self) -> Generator[Any, None, None]:
        coro = self._coro
        try:
            while True:
                try:
                    awaited = coro.send(None)
                except StopIteration:
                    return
                if awaited is None:  # a bare yield (asyncio.sleep(0)): the loop's next turn
                    try:
                        yield None
                    except asyncio.CancelledError:
                        self.cancelled = True
                    continue
                awaited._asyncio_future_blocking = False  # taken, as a task takes it
                while not awaited.done():
                    ours = awaited.get_loop().create_future()
                    awaited.add_done_callback(functools.partial(_resolve, ours))
                    ours._asyncio_future_blocking = True
                    try:
                        yield ours
                    except asyncio.CancelledError:  # ours was cancelled, awaited is not
                        self.cancelled = True
        finally:
            coro.close()  # nothing to do once it returned; closed if we are closed early


def _resolve(ours: asyncio.Future[Any], _: object) -> None:
    if not ours.done():
        ours.set_result(None)


def _copy_outcome(pinned: _Pinned[Any], task: asyncio.Future[Any]) -> None:
    if task.cancelled():  # only by the loop's own shutdown: nobody is left to see it
        pinned.set_exception(asyncio.CancelledError())
    elif (exc := task.exception()) is not None:
        pinned.set_exception(exc)
    else:
        pinned.set_result(task.result())


def _deliver(future: _Pinned[Any], result: Any, exc: BaseException | None) -> None:
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


class _Threads:
    """SQLite's worker threads: one queue of calls, each outcome handed to its loop.

    What ``loop.run_in_executor`` does with a ``ThreadPoolExecutor``, for less: that pair
    costs a call about 50 µs more CPU (its Python-level locks, semaphore and future chain),
    a sixth of a small append's. Daemon threads, so a store left open never holds up the
    interpreter's exit.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> _Pinned[T]:
        loop = asyncio.get_running_loop()
        future: _Pinned[T] = _Pinned(loop=loop)
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._work, name=f"session_sql_{i}", daemon=True)
                for i in range(self._size)
            ]
            for thread in self._threads:
                thread.start()
        self._calls.put((fn, args, future, loop))
        return future

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, args, future, loop = call
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = (fn(*args), None)
            except BaseException as exc:
                outcome = (None, exc)
            del fn, args, call
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
                loop.call_soon_threadsafe(_deliver, future, *outcome)
            del future, outcome

    def shutdown(self) -> None:
        for _ in self._threads:
            self._calls.put(None)
        self._threads = []


class _Runner:
    """Where the sync store's code runs: worker threads (SQLite) or a greenlet (PostgreSQL)."""

    def __init__(self, *, threads: int | None) -> None:
        self.threaded = threads is not None
        self.closed = False
        self.writers: AsyncWriteConnections | None = None
        """PostgreSQL: the connections appends run on, natively awaited (set once open)."""
        self._threads = None if threads is None else _Threads(threads)

    def submit(self, fn: Callable[..., T], *args: Any) -> _Pinned[T]:
        """Start ``fn(*args)``; its future runs on even if the caller is cancelled."""
        if self.closed:
            raise PermanentStoreError.closed("open_async_store")
        if self._threads is not None:
            return self._threads.submit(fn, args)
        task = asyncio.ensure_future(greenlet_spawn(fn, *args))
        pinned: _Pinned[T] = _Pinned(loop=task.get_loop())
        task.add_done_callback(functools.partial(_copy_outcome, pinned))
        return pinned

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` run to completion; a cancellation is raised after it has finished."""
        return await self.submit(fn, *args)

    def shutdown(self) -> None:
        """Stop the worker threads (idle by now: every call ran to completion)."""
        self.closed = True
        if self._threads is not None:
            self._threads.shutdown()


class _OffloadedFile:
    """A file used from a greenlet on the loop (PostgreSQL's import and export) whose reads and
    writes run in a worker thread, a chunk at a time: the loop never waits on the disk."""

    CHUNK = 1 << 18

    def __init__(self, fh: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._fh = fh
        self._loop = loop
        self._pending: list[str] = []
        self._size = 0

    def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await_(self._loop.run_in_executor(None, fn, *args))

    def write(self, text: str) -> int:
        self._pending.append(text)
        self._size += len(text)
        if self._size >= self.CHUNK:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            data = "".join(self._pending)
            self._pending, self._size = [], 0
            self._in_thread(self._fh.write, data)

    def __iter__(self) -> Iterator[Any]:
        while lines := self._in_thread(self._fh.readlines, self.CHUNK):
            yield from lines

    def close(self) -> None:
        self._in_thread(self._fh.close)


class AsyncStoredSession(StoredSession):
    """A write handle whose ``append``, ``append_many`` and ``refresh`` are coroutines.

    The readers (``seq``, ``surface``, ``messages()``, ``events``, ``first_live_seq``, ...)
    and ``add_validator``/``subscribe`` are ``StoredSession``'s, synchronous (no I/O).
    Appends and refreshes on one handle run one at a time, in call order.

    A handle from ``open_session(..., read_log=False)`` holds the surface's events and the
    last event; the rest of its log is read by ``await read_log()``. ``events``,
    ``request_header()`` and ``fork()`` need it: on the event loop they raise ``StoreError``
    until it is read (they cannot wait for I/O there); from another thread they read it
    through the loop. ``open_session`` reads it by default.
    """

    _runner: _Runner
    _lock: loopsafe.Semaphore
    _loop: asyncio.AbstractEventLoop
    _read_stored: Callable[[int], list[SessionEvent]]

    @classmethod
    def _adopt_handle(cls, handle: StoredSession, runner: _Runner) -> AsyncStoredSession:
        """The async face of a handle the sync store just built (which is then discarded)."""
        session = cls.__new__(cls)
        session.__dict__.update(handle.__dict__)
        session._runner = runner
        session._lock = loopsafe.Semaphore()
        session._loop = asyncio.get_running_loop()
        log = session._log
        if isinstance(log, StoredLog) and not log.is_read:
            session._read_stored = log.fetch  # the sync read, run by the runner from now on
            log.fetch = session._fetch_through_loop
        return session

    async def read_log(self) -> None:
        """Read the stored events that ``open_session`` left in the store (checked as a load
        checks them), so that ``events``, ``request_header()`` and ``fork()`` need no I/O;
        nothing to do when they are in memory already."""
        log = self._log
        if isinstance(log, StoredLog) and not log.is_read:
            events = await self._runner.call(self._read_stored, log.stored)
            if not log.is_read:
                log.adopt(events)

    def _fetch_through_loop(self, count: int) -> list[SessionEvent]:
        """The stored events read by the handle's loop, for a reader called outside it."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise StoreError(
                f"session {self.id!r}: this handle has not read its whole log "
                "(open_session(..., read_log=False) reads the surface and the last event); "
                "await handle.read_log() before using events, request_header() or fork() "
                "on the event loop"
            )
        if self._loop.is_closed() or not self._loop.is_running():
            raise StoreError(f"session {self.id!r}: the handle's event loop is not running")
        future = asyncio.run_coroutine_threadsafe(
            self._runner.call(self._read_stored, count), self._loop
        )
        return future.result()

    async def append(  # type: ignore[override]
        self,
        type: str,
        data: Any = None,
        *,
        surface_op: SurfaceOp | Mapping[str, Any] | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """Validate, commit and publish one event (SPEC §7.2)."""
        item = (type, data, surface_op, source_event_seqs, ignorable, None)
        return (await self._append_async([item]))[0]

    async def append_many(  # type: ignore[override]
        self, items: Iterable[Mapping[str, Any]]
    ) -> list[SessionEvent]:
        """Append several events atomically: all commit or none does."""
        return await self._append_async(Session._batch_items(items))

    async def refresh(self) -> list[SessionEvent]:  # type: ignore[override]
        """Load (and fully validate) what other writers appended; returns the new events."""
        async with self._lock:
            writers = self._runner.writers
            if writers is None:
                row, rows = await self._runner.call(self._read_new)
            else:
                row, rows = await self._read_new_async(writers)
            return self._fold_new(row, rows)

    async def _read_new_async(self, writers: AsyncWriteConnections) -> tuple[Any, list[Any]]:
        """``_read_new`` on PostgreSQL: one query on a kept connection
        (``fastpath.read_new_async``), with the same checks of the row."""
        raw = await writers.take()
        try:
            with translate_errors(self.id):
                found = await fastpath.read_new_async(
                    self._ctx, writers.cursor(raw), self.id, self.seq
                )
        finally:
            await writers.give(raw)
        row, rows = found if found is not None else (None, [])
        return self._this_session(row), rows

    async def _append_async(self, batch: list[Any]) -> list[SessionEvent]:
        if not batch:
            return []
        async with self._lock:
            events, transitions = self._begin_append(batch)
            try:
                if self._runner.writers is None:
                    persisted = self._runner.submit(self._persist, events, transitions)
                    cancelled = await _settle(persisted)
                    persisted.result()  # the persist step's error, with nothing changed
                else:
                    persist = _Uninterrupted(self._persist_async(events, transitions))
                    try:
                        await persist  # its error, with nothing changed
                    finally:
                        cancelled = persist.cancelled
                self._commit(events, transitions)
            finally:
                self._busy = False
            self._notify(events)
        if cancelled:
            raise asyncio.CancelledError
        return events

    async def _persist_async(self, events: list[SessionEvent], transitions: list[Any]) -> None:
        """``_persist`` on PostgreSQL: the same transaction, on a natively awaited connection
        (``fastpath.append_async``); the lost-race diagnosis is the sync store's own."""
        writers = self._runner.writers
        assert writers is not None
        part = self._append_part(events, transitions)
        with translate_errors(self.id):
            raw = await writers.take()
            try:
                moved = await fastpath.append_async(self._ctx, writers.cursor(raw), part)
            finally:
                await writers.give(raw)
        if not moved:
            await greenlet_spawn(self._diagnose_lost_race)

    def _diagnose_lost_race(self) -> None:
        with translate_errors(self.id), read_tx(self._ctx.engine) as conn:
            self._raise_lost_race(conn)


class AsyncSessionStore:
    """``SessionStore`` for asyncio: the same methods, as coroutines; see ``open_async_store``.

    Awaiting it, or entering it with ``async with``, opens it (once).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        catalog: Catalog | None,
        tenant: str | None = None,
        options: dict[str, Any],
    ) -> None:
        self.url = url
        backend = backend_for(url)
        self._opening = functools.partial(
            open_store,
            url,
            schema=schema,
            catalog=catalog,
            tenant=tenant,
            async_driver=not backend.async_threads,
            **options,
        )
        threads = max(1, int(options.get("pool_size", 5)))
        self._size = threads
        self._runner = _Runner(threads=threads if backend.async_threads else None)
        self._opened: SessionStore | None = None
        # Tasks that open the store at once (a framework session's first calls, run
        # concurrently, on one loop or several) wait for one opening instead of each opening,
        # and leaking, a store.
        self._open_lock = loopsafe.Semaphore()

    async def _open(self) -> AsyncSessionStore:
        if self._opened is not None:
            return self
        cancelled = False
        async with self._open_lock:
            if self._opened is None:
                # Kept even when the opening task is cancelled meanwhile, so that the next
                # caller finds it (and close() closes it) rather than opening another.
                opening = self._runner.submit(self._opening)
                cancelled = await _settle(opening)
                try:
                    opened = opening.result()
                except BaseException:
                    self._runner.shutdown()
                    raise
                if not self._runner.threaded:
                    self._runner.writers = AsyncWriteConnections(opened.engine, self._size)
                self._opened = opened
        if cancelled:
            raise asyncio.CancelledError
        return self

    def __await__(self) -> Generator[Any, None, AsyncSessionStore]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSessionStore:
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _store(self) -> SessionStore:
        if self._opened is None:
            raise RuntimeError("the async store is not open: await it or use 'async with'")
        return self._opened

    @property
    def backend(self) -> str:
        return self._store.backend

    @property
    def schema(self) -> str | None:
        return self._store.schema

    @property
    def catalog(self) -> Catalog:
        return self._store.catalog

    @property
    def tenant(self) -> str:
        return self._store.tenant

    async def close(self) -> None:
        """Release every pooled connection (and the worker threads); again: nothing."""
        if self._opened is not None and not self._runner.closed:
            if self._runner.writers is not None:
                await self._runner.writers.close()
            await self._runner.call(self._opened.close)
        self._runner.shutdown()

    def __repr__(self) -> str:
        return f"AsyncSessionStore({self.url!r})"

    async def _handle(self, fn: Callable[..., StoredSession], *args: Any) -> AsyncStoredSession:
        handle = await self._runner.call(fn, *args)
        return AsyncStoredSession._adopt_handle(handle, self._runner)

    # -- writing --------------------------------------------------------------------------

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        header: Mapping[str, Any] | None = None,
        seed: Sequence[SessionEvent | Mapping[str, Any]] | None = None,
        user_id: str | None = None,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> AsyncStoredSession:
        """Create a session (with its seed and end-of-seed marker) in one transaction."""
        create = functools.partial(
            self._store.create_session,
            header=header,
            seed=seed,
            user_id=user_id,
            title=title,
            labels=labels,
        )
        return await self._handle(create, session_id)

    async def append_together(
        self, writes: Sequence[tuple[StoredSession, Iterable[Mapping[str, Any]]]]
    ) -> list[list[SessionEvent]]:
        """Append to several sessions in one transaction (see ``SessionStore.append_together``)."""
        return await self._append_together(writes)

    async def _append_together(
        self,
        writes: Sequence[tuple[StoredSession, Iterable[Mapping[str, Any]]]],
        *,
        heads: Mapping[str, int] | None = None,
    ) -> list[list[SessionEvent]]:
        """``append_together``, and each session named in ``heads`` appended to only when its
        handle is at that head (seq of its last event), checked under the handle's lock:
        otherwise ``ConcurrencyError`` and nothing is written. For a caller whose view of a
        session is older than a handle it shares with readers that refresh it (the ADK
        service's session objects)."""
        return (await self._together(writes, None, heads or {}))[1]

    async def _create_together(
        self,
        session_id: str,
        *,
        writes: Sequence[tuple[StoredSession, Iterable[Mapping[str, Any]]]],
        header: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> tuple[AsyncStoredSession, list[list[SessionEvent]]]:
        """``create_session`` and ``append_together(writes)`` in one transaction: the new
        session and every batch commit, or nothing does (``SessionExistsError`` when the id
        is taken, ``ConcurrencyError`` naming a handle that lost a race)."""

        def persist(prepared: list[Prepared]) -> StoredSession:
            return self._store._create(
                session_id, header=header, user_id=user_id, labels=labels, prepared=prepared
            )

        created, done = await self._together(writes, persist, {})
        assert created is not None
        return AsyncStoredSession._adopt_handle(created, self._runner), done

    async def _together(
        self,
        writes: Sequence[tuple[StoredSession, Iterable[Mapping[str, Any]]]],
        persist: Callable[[list[Prepared]], T] | None,
        heads: Mapping[str, int],
    ) -> tuple[T | None, list[list[SessionEvent]]]:
        """Prepare ``writes`` under their handles' locks, run ``persist`` on them (one
        transaction; None: ``persist_together``, skipped when there is nothing to write) and
        commit them to the handles; returns ``persist``'s result."""
        checked = check_together(self._store._ctx, writes)
        for i, (handle, _) in enumerate(checked):
            if not isinstance(handle, AsyncStoredSession):
                raise InvalidArgumentError(
                    f"writes[{i}]: {handle!r} is not a handle of the async store",
                    argument="writes",
                )
        async with contextlib.AsyncExitStack() as locks:
            # Each handle's appends run one at a time; taken in id order, so no two calls wait
            # on each other's locks.
            for handle, _ in sorted(checked, key=lambda pair: pair[0].id):
                await locks.enter_async_context(cast(AsyncStoredSession, handle)._lock)
            for handle, _ in checked:
                expected = heads.get(handle.id)
                if expected is not None and handle.seq - 1 != expected:
                    raise ConcurrencyError(
                        f"session {handle.id!r}: the log moved past seq {expected} (its head "
                        f"is seq {handle.seq - 1}); reload and retry",
                        session_id=handle.id,
                        expected=expected,
                    )
            prepared = begin_together(checked)
            cancelled = False
            result: T | None = None
            try:
                if persist is not None or prepared:
                    persisted = self._runner.submit(persist or persist_together, prepared)
                    cancelled = await _settle(persisted)
                    result = persisted.result()  # the persist step's error, nothing changed
                for handle, events, transitions in prepared:
                    handle._commit(events, transitions)
            finally:
                for handle, _, _ in prepared:
                    handle._busy = False
            for handle, events, _ in prepared:
                handle._notify(events)
        if cancelled:
            raise asyncio.CancelledError
        return result, committed_lists(writes, prepared)

    async def open_session(
        self, session_id: str, *, resume: bool = False, read_log: bool = True
    ) -> AsyncStoredSession:
        """A write handle on a stored session. Writes nothing unless ``resume=True``.

        Its synchronous readers are ``StoredSession``'s, so by default its whole log is read
        here (checked as a load checks it): ``events``, ``request_header()`` and ``fork()``
        then need no I/O on the loop. ``read_log=False`` gives the cheap write handle (the
        surface and the last event, as the sync store's ``open_session`` reads them) for a
        caller that only appends and reads the surface; it reads the rest with
        ``await handle.read_log()``.
        """
        handle = await self._handle(
            functools.partial(self._store.open_session, resume=resume), session_id
        )
        if read_log:
            await handle.read_log()
        return handle

    async def fork_session(
        self, parent_id: str, *, boundary: int | None = None, child_id: str | None = None
    ) -> AsyncStoredSession:
        """Fork a stored session (SPEC §7.5); the child is written in one transaction."""
        fork = functools.partial(self._store.fork_session, boundary=boundary, child_id=child_id)
        return await self._handle(fork, parent_id)

    async def repair(self, session_id: str) -> list[SessionEvent]:
        """Close a turn left open by a crash (SPEC §7.4); returns the appended closers."""
        return await self._runner.call(self._store.repair, session_id)

    async def delete_session(self, session_id: str) -> None:
        """Delete a session with its events and surface rows."""
        await self._runner.call(self._store.delete_session, session_id)

    async def import_jsonl(self, path: str | os.PathLike[str] | IO[bytes]) -> str:
        """Store a JSONL session exactly as the file holds it, with the metadata its header
        carries; returns its id. A file object (binary mode) is read as it is given, as by
        ``SessionStore.import_jsonl``."""
        if self._runner.threaded or not isinstance(path, str | os.PathLike):
            return await self._runner.call(self._store.import_jsonl, path)
        loop = asyncio.get_running_loop()
        source = await loop.run_in_executor(None, JsonlReader, path)  # opens, reads the header
        source._fh = _OffloadedFile(source._fh, loop)  # type: ignore[assignment]
        return await self._runner.call(self._store._import_file, source)

    async def export_jsonl(self, session_id: str, path: str | os.PathLike[str] | IO[str]) -> int:
        """Write a session as JSONL; returns the number of events. A path is published whole
        or not at all, as by ``SessionStore.export_jsonl``."""
        if self._runner.threaded or not isinstance(path, str | os.PathLike):
            return await self._runner.call(self._store.export_jsonl, session_id, path)
        loop = asyncio.get_running_loop()
        publishing = published_file(path)
        fh = await loop.run_in_executor(None, publishing.__enter__)
        out = _OffloadedFile(fh, loop)

        def export() -> int:
            count = self._store._export(session_id, out)  # type: ignore[arg-type]
            out.flush()
            return count

        try:
            count = await self._runner.call(export)
        except BaseException as exc:
            await loop.run_in_executor(None, publishing.__exit__, type(exc), exc, exc.__traceback__)
            raise
        await loop.run_in_executor(None, publishing.__exit__, None, None, None)
        return count

    # -- reading --------------------------------------------------------------------------

    async def load_session(self, session_id: str) -> Session:
        """A detached, fully validated in-memory replay of a stored session."""
        return await self._runner.call(self._store.load_session, session_id)

    async def messages(self, session_id: str, *, last: int | None = None) -> list[Any]:
        """The messages a model sees (the last ``last``), from the ``surface`` side table."""
        return await self._runner.call(
            functools.partial(self._store.messages, last=last), session_id
        )

    async def surface(self, session_id: str, *, last: int | None = None) -> tuple[int, ...]:
        """The surface's event seqs in order (the last ``last``), from the side table."""
        return await self._runner.call(
            functools.partial(self._store.surface, last=last), session_id
        )

    async def surface_messages(
        self, session_id: str, *, last: int | None = None
    ) -> list[SurfaceMessage]:
        """``(pos, seq, type, message)`` per surface node (the last ``last``), in surface order."""
        return await self._runner.call(
            functools.partial(self._store.surface_messages, last=last), session_id
        )

    async def events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[SessionEvent]:
        """An async iterator over a session's events in seq order, fetched page by page.

        Raises ``SessionNotFoundError`` here, not at the first step.
        """
        pages = await self._runner.call(
            functools.partial(self._store.events, from_seq=from_seq, to_seq=to_seq), session_id
        )
        return self._paged(pages, reader.STREAM_BATCH)

    async def _paged(self, items: Iterator[T], size: int) -> AsyncIterator[T]:
        """A sync iterator that does I/O as it advances, pulled ``size`` items per call."""

        def page() -> list[T]:
            return list(itertools.islice(items, size))

        while True:
            batch = await self._runner.call(page)
            for item in batch:
                yield item
            if len(batch) < size:
                return

    async def list_sessions(
        self,
        *,
        limit: int = 100,
        after: SessionInfo | str | None = None,
        parent: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        order: Literal["updated", "created"] = "updated",
        id_prefix: str | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[SessionInfo]:
        """The tenant's sessions newest-updated first (ties by id), paged by ``after``; or
        oldest-created first with ``order="created"``; ``id_prefix`` keeps the ids that start
        with it; filtered by ``user_id`` and ``labels``."""
        listing = functools.partial(
            self._store.list_sessions,
            limit=limit,
            after=after,
            parent=parent,
            created_after=created_after,
            created_before=created_before,
            order=order,
            id_prefix=id_prefix,
            user_id=user_id,
            labels=labels,
        )
        return await self._runner.call(listing)

    async def session_info(self, session_id: str) -> SessionInfo:
        """One session's row: bookkeeping and metadata."""
        return await self._runner.call(self._store.session_info, session_id)

    async def update_session(
        self,
        session_id: str,
        *,
        title: str | _Unset | None = UNSET,
        labels: Mapping[str, str] | _Unset | None = UNSET,
    ) -> SessionInfo:
        """Change a session's metadata (not part of its log); returns the updated info."""
        update = functools.partial(self._store.update_session, title=title, labels=labels)
        return await self._runner.call(update, session_id)

    async def iter_sessions(
        self, *, parent: str | None = None, page_size: int = 500
    ) -> AsyncIterator[SessionInfo]:
        """An async iterator over every session, oldest-created first, a page at a time (see
        ``SessionStore.iter_sessions``); bad arguments are refused here."""
        pages = self._store.iter_sessions(parent=parent, page_size=page_size)  # no I/O yet
        return self._paged(pages, page_size)

    async def head_seq(self, session_id: str) -> int:
        """The last seq of a session (-1 when its log is empty), from its row."""
        return await self._runner.call(self._store.head_seq, session_id)

    async def stats(self, session_id: str | None = None) -> StoreStats:
        """Aggregates over the whole store, or one session, computed by SQL."""
        return await self._runner.call(self._store.stats, session_id)

    async def verify(self, session_id: str) -> VerifyReport:
        """Replay the log and compare its fold with the ``surface`` table and the session row."""
        return await self._runner.call(self._store.verify, session_id)

    async def follow(
        self, session_id: str, *, after_seq: int = -1, timeout: float | None = None
    ) -> AsyncIterator[SessionEvent]:
        """Yield events as other writers commit them, in seq order, each once (an async
        iterator; ``SessionNotFoundError`` comes at its first step).

        PostgreSQL waits with LISTEN on psycopg's async connection; SQLite polls in the worker
        threads with an ``asyncio.sleep`` backoff. Returns after ``timeout`` seconds without
        a new event (``None``: never).
        """
        ctx = self._store._ctx
        after = seq_bound("after_seq", after_seq)
        timeout = timeout_arg(timeout)
        await self._runner.call(reader.check_session, ctx, session_id)
        listener = await ctx.backend.async_listener(ctx, session_id, self._runner.call)
        try:
            machine = Follower(
                session_id, ctx.tenant, after, timeout, listening=listener is not None
            )
            action = machine.start()
            while True:
                if isinstance(action, Read):
                    read = reader.events_after
                    events = await self._runner.call(read, ctx, session_id, action.after_seq)
                    for event in events:
                        yield event
                    action = machine.read(events[-1].seq if events else None)
                elif isinstance(action, Wait):
                    assert listener is not None
                    await listener.wait(action.seconds, machine.wakes)
                    action = machine.waited()
                elif isinstance(action, Sleep):
                    await asyncio.sleep(action.seconds)
                    action = machine.waited()
                else:
                    return
        finally:
            if listener is not None:
                await listener.close()


def open_async_store(
    url: str = "sqlite:///sessions.db",
    *,
    schema: str = DEFAULT_SCHEMA,
    catalog: Catalog | None = None,
    tenant: str | None = None,
    **options: Any,
) -> AsyncSessionStore:
    """A store for asyncio, opened (initialised when empty) when awaited or entered.

    ``async with open_async_store(url) as store:`` or ``store = await open_async_store(url)``
    (then ``await store.close()``). The options (``tenant`` included) are ``open_store``'s,
    with its errors.
    """
    return AsyncSessionStore(url, schema=schema, catalog=catalog, tenant=tenant, options=options)
