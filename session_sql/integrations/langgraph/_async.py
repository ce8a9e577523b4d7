"""``AsyncSessionSQLSaver``: LangGraph checkpoints in an ``AsyncSessionStore``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from session_sql import AsyncSessionStore, InvalidArgumentError, loopsafe, open_async_store

from ._ops import Op, run_async
from ._saver import Saver

T = TypeVar("T")


class AsyncSessionSQLSaver(Saver):
    """LangGraph checkpoints in an ``AsyncSessionStore``, one session per thread.

    The ``a``-prefixed methods are the API; the sync ones run them on the saver's event loop
    from another thread (as LangGraph's async savers do) and refuse to run on that loop.
    """

    store: AsyncSessionStore
    _takes = (
        AsyncSessionStore,
        "an AsyncSessionStore",
        "a SessionStore goes with SessionSQLSaver",
    )

    def __init__(
        self, store: AsyncSessionStore, *, serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(store, serde=serde)
        self._lock = loopsafe.Semaphore()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_url(
        cls, url: str, **open_store_options: Any
    ) -> AsyncIterator[AsyncSessionSQLSaver]:
        """A saver on a store of its own (``open_async_store(url, **open_store_options)``)."""
        serde = open_store_options.pop("serde", None)
        async with open_async_store(url, **open_store_options) as store:
            yield cls(store, serde=serde)

    async def _async(self, op: Op[T]) -> T:
        self._loop = asyncio.get_running_loop()
        async with self._lock:
            return await run_async(op)

    def _sync(self, op: Op[T]) -> T:
        """``op`` run on the saver's loop, from another thread."""
        return self._run(self._async(op))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            coro.close()
            raise InvalidArgumentError(
                "AsyncSessionSQLSaver's sync methods run its async ones on its event loop "
                "from another thread; on that loop, use the a-prefixed methods (or "
                "graph.ainvoke / astream / aget_state)",
                argument="saver",
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()
