"""A semaphore (and lock) that tasks of different event loops (threads) can share.

asyncio's ``Lock``, ``Semaphore`` and ``Queue`` belong to one loop: the first that waits on
one binds it, a task of another loop then gets ``RuntimeError``, and a release from another
thread wakes its waiter without waking that waiter's loop, which then sleeps forever. An
async store is used from several loops (a thread each, or one ``asyncio.run`` after
another), so the store's own locks, and the framework adapters', are this one: a mutex guards
the state, and a waiter is woken on its own loop with ``call_soon_threadsafe``. Taking a free
one costs that mutex, no more.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

__all__ = ["Semaphore", "notify_waiter"]


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def notify_waiter(waiter: asyncio.Future[None]) -> bool:
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
                if notify_waiter(self._waiters.popleft()):
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
