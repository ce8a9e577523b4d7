"""Waiting primitives that tasks of different event loops (threads) can share.

asyncio's ``Lock``, ``Semaphore`` and ``Queue`` belong to one loop: the first that waits on
one binds it, a task of another loop then gets ``RuntimeError``, and a release from another
thread wakes its waiter without waking that waiter's loop, which then sleeps forever. An
async store is used from several loops (a thread each, or one ``asyncio.run`` after
another), so the store's own locks are these: a mutex guards the state, and a waiter is woken
on its own loop with ``call_soon_threadsafe``. Taking a free one costs that mutex, no more.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import TypeVar

from sqlalchemy.util import await_
from sqlalchemy.util import queue as sqla_queue

T = TypeVar("T")


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _notify(waiter: asyncio.Future[None]) -> bool:
    """Wake ``waiter`` on its loop; False when that loop is closed (nobody waits there)."""
    try:
        waiter.get_loop().call_soon_threadsafe(_wake, waiter)
    except RuntimeError:
        return False
    return True


class Semaphore:
    """``asyncio.Semaphore`` (``Semaphore(1)``: ``asyncio.Lock``) for tasks of any loop.

    A release hands the slot to the first waiter, so a waiter never loses its turn to a
    newcomer, and a waiter cancelled after it was handed the slot passes it on.
    """

    __slots__ = ("_mutex", "_value", "_waiters")

    def __init__(self, value: int = 1) -> None:
        self._mutex = threading.Lock()
        self._value = value
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._value == 0

    async def acquire(self) -> bool:
        with self._mutex:
            if self._value > 0:  # then nobody waits: a release with waiters hands over
                self._value -= 1
                return True
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            with self._mutex:
                handed = waiter not in self._waiters
                if not handed:
                    self._waiters.remove(waiter)
            if handed:  # the slot is ours already: pass it on
                self.release()
            raise
        return True

    def release(self) -> None:
        with self._mutex:
            while self._waiters:
                if _notify(self._waiters.popleft()):
                    return
            self._value += 1

    async def __aenter__(self) -> None:
        with self._mutex:  # acquire()'s fast path, inlined: every append enters one
            if self._value > 0:
                self._value -= 1
                return
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class Queue(sqla_queue.QueueCommon[T]):
    """The async connection pool's queue (SQLAlchemy's ``AsyncAdaptedQueue`` wraps an
    ``asyncio.Queue``), for checkouts from any loop; used from a greenlet on the loop.

    A put wakes every waiter and each takes an item if one is left: the pool rarely has
    waiters, and so a woken waiter that went away loses nobody's turn.
    """

    def __init__(self, maxsize: int = 0, use_lifo: bool = False) -> None:
        self.maxsize = maxsize
        self.use_lifo = use_lifo
        self._items: deque[T] = deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._mutex = threading.Lock()

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self._items)

    def qsize(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        with self._mutex:
            if self.full():
                raise sqla_queue.Full()
            self._items.append(item)
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _notify(waiter)

    def put(self, item: T, block: bool = True, timeout: float | None = None) -> None:
        self.put_nowait(item)  # the pool never waits to give a connection back

    def get_nowait(self) -> T:
        return self.get(False)

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._mutex:
                if self._items:
                    return self._items.pop() if self.use_lifo else self._items.popleft()
                if not block:
                    raise sqla_queue.Empty()
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
            left = None if deadline is None else deadline - time.monotonic()
            try:
                if left is not None and left <= 0:
                    raise sqla_queue.Empty()
                await_(asyncio.wait_for(waiter, left))
            except TimeoutError as exc:
                raise sqla_queue.Empty() from exc
            finally:
                with self._mutex:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
