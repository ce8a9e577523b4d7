"""One lock per key (a session), kept only while a task holds it or waits for it."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from session_sql import loopsafe


class KeyedLocks:
    """Serialise one process's writes to each key (appends are read-check-write).

    The locks are the store's own kind, which serve tasks of every event loop: one service may
    be used from threads that each run a loop (as the store may). A key's lock is dropped when
    its last holder leaves, so the table does not grow with every session ever written.
    """

    __slots__ = ("_holders", "_locks", "_mutex")

    def __init__(self) -> None:
        self._locks: dict[str, loopsafe.Semaphore] = {}
        self._holders: dict[str, int] = {}
        self._mutex = threading.Lock()

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the block."""
        with self._mutex:
            lock = self._locks.setdefault(key, loopsafe.Semaphore())
            self._holders[key] = self._holders.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            with self._mutex:
                self._holders[key] -= 1
                if not self._holders[key]:
                    del self._holders[key], self._locks[key]
