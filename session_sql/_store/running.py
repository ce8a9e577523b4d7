"""Where the async store runs the sync store's code, and how a call outlives a cancellation.

``_Runner`` runs a call in SQLite's worker threads (``_Threads``) or in a greenlet on the loop
(PostgreSQL). Every call is a ``_Pinned`` future, which refuses ``cancel()``: ``_settle``
waits for it whatever happens to the waiting task, and ``_Uninterrupted`` gives a coroutine
run in the caller's task the same guarantee. ``_OffloadedFile`` keeps a greenlet's file I/O
off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Coroutine, Generator, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy.util import await_, greenlet_spawn

from session_sql.errors import PermanentStoreError

if TYPE_CHECKING:
    from session_sql._store.backends.postgresql.connections import AsyncWriteConnections

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


async def _outcome_of(coro: Coroutine[Any, Any, Any], outcome: list[Any]) -> None:
    """Await ``coro``; put its result and its error (one of them None) in ``outcome``."""
    try:
        outcome[:] = (await coro, None)
    except GeneratorExit:  # closed before it finished (its loop went away): nobody waits
        raise
    except BaseException as exc:
        outcome[:] = (None, exc)


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

    A thread is started when a call finds none free, up to ``size``: a store opened for one
    request and its one read starts one thread, not the pool's worth (each start waits for
    the thread to run).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._free = 0
        """Threads done with their call that no call submitted since has counted on. (Once
        all ``size`` run, a call may wait for one, and this may count one that took it: it
        then only decides what it no longer can, whether to start a thread.)"""
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...]) -> _Pinned[T]:
        loop = asyncio.get_running_loop()
        future: _Pinned[T] = _Pinned(loop=loop)
        with self._lock:
            if self._free:
                self._free -= 1
            elif len(self._threads) < self._size:
                name = f"session_sql_{len(self._threads)}"
                thread = threading.Thread(target=self._work, name=name, daemon=True)
                self._threads.append(thread)
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
            with self._lock:
                self._free += 1
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
                loop.call_soon_threadsafe(_deliver, future, *outcome)
            del future, outcome

    def shutdown(self) -> None:
        with self._lock:
            threads, self._threads, self._free = self._threads, [], 0
        for _ in threads:
            self._calls.put(None)


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
        """``fn(*args)`` run to completion; a cancellation is raised after it has finished.

        A greenlet runs in the caller's task (``_Uninterrupted``), not in a task of its own:
        the task, and the two turns of the loop that start it and report its end, cost a
        short read more than a tenth of its time (a tail read on PostgreSQL)."""
        if self._threads is not None or self.closed:
            return await self.submit(fn, *args)
        outcome: list[Any] = []
        waiting = _Uninterrupted(_outcome_of(greenlet_spawn(fn, *args), outcome))
        await waiting
        if waiting.cancelled:
            raise asyncio.CancelledError
        result, exc = outcome
        if exc is not None:
            raise exc
        return cast(T, result)

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

    @staticmethod
    def run(loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the loop's executor, awaited from the greenlet on the loop."""
        return await_(loop.run_in_executor(None, fn, *args))

    def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return self.run(self._loop, fn, *args)

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
