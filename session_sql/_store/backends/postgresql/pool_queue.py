"""The async connection pool's queue for checkouts from any event loop (see
``session_sql.loopsafe``, whose wake-ups it shares)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import TypeVar

from sqlalchemy.util import await_
from sqlalchemy.util import queue as sqla_queue

from session_sql.loopsafe import notify_waiter

T = TypeVar("T")


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
            notify_waiter(waiter)

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
