"""A synchronous face of the async API, so that the store contract's test bodies drive it.

``SyncFacade`` runs each coroutine of an ``AsyncSessionStore`` on a dedicated event loop in a
thread and waits for it; handles come back as ``HandleFacade``s, whose ``append``,
``append_many`` and ``refresh`` do the same. Anything else (``engine``, ``_ctx``, ``url``,
used by the tests' table inspection) comes from a sync store on the same database, which
the tests never write through.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from session_sql import AsyncSessionStore, AsyncStoredSession, SessionStore, open_async_store
from session_sql._store.reader import follow_key

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread until ``stop``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, awaitable: Awaitable[T]) -> T:
        if threading.current_thread() is self._thread:
            # Code running on the loop (an observer, a validator) cannot wait for the loop.
            raise RuntimeError("a synchronous store call from inside the event loop")

        async def wrapped() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class HandleFacade:
    """An ``AsyncStoredSession`` whose coroutines are run to completion on the loop."""

    def __init__(self, loop: LoopThread, handle: AsyncStoredSession) -> None:
        self._loop = loop
        self.handle = handle

    def append(self, *args: Any, **kwargs: Any) -> Any:
        return self._loop.run(self.handle.append(*args, **kwargs))

    def append_many(self, items: Any) -> Any:
        return self._loop.run(self.handle.append_many(items))

    def refresh(self) -> Any:
        return self._loop.run(self.handle.refresh())

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self.handle, name)
        except AttributeError:
            if not name.startswith("_"):
                raise
            # A private attribute the tests inspect (_log, _ctx, _incarnation) is the wrapped
            # sync handle's.
            return getattr(self.handle._sync, name)

    def __repr__(self) -> str:
        return repr(self.handle)


class SyncFacade:
    """The async store with a sync face (see the module docstring)."""

    def __init__(self, url: str, schema: str, companion: SessionStore) -> None:
        self._loop = LoopThread()
        try:
            self.astore: AsyncSessionStore = self._loop.run(
                open_async_store(url, schema=schema, tenant=companion.tenant)
            )
        except BaseException:
            self._loop.stop()
            raise
        self._companion = companion

    def _run(self, awaitable: Awaitable[T]) -> T:
        return self._loop.run(awaitable)

    def _wrap(self, handle: AsyncStoredSession) -> HandleFacade:
        return HandleFacade(self._loop, handle)

    def create_session(self, *args: Any, **kwargs: Any) -> HandleFacade:
        return self._wrap(self._run(self.astore.create_session(*args, **kwargs)))

    def open_session(self, *args: Any, **kwargs: Any) -> HandleFacade:
        return self._wrap(self._run(self.astore.open_session(*args, **kwargs)))

    def fork_session(self, *args: Any, **kwargs: Any) -> HandleFacade:
        return self._wrap(self._run(self.astore.fork_session(*args, **kwargs)))

    def append_together(self, writes: Any) -> Any:
        if isinstance(writes, list):  # unwrap the handles; anything else goes as it is
            writes = [
                (pair[0].handle, *pair[1:]) if pair and isinstance(pair[0], HandleFacade) else pair
                for pair in writes
            ]
        return self._run(self.astore.append_together(writes))

    def events(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [e async for e in await self.astore.events(*args, **kwargs)]

        return iter(self._run(collect()))

    def iter_sessions(self, **kwargs: Any) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [i async for i in await self.astore.iter_sessions(**kwargs)]

        return iter(self._run(collect()))

    def follow(self, session_id: str, **kwargs: Any) -> Iterator[Any]:
        # The sync follow refuses a missing session when called; the async iterator does at
        # its first step (no I/O can happen before it). Take that step's check here.
        self._run(self.astore._runner.call(follow_key, self.astore._store._ctx, session_id))
        return self._follow(session_id, **kwargs)

    def _follow(self, session_id: str, **kwargs: Any) -> Iterator[Any]:
        stream = self.astore.follow(session_id, **kwargs)
        try:
            while True:
                try:
                    yield self._run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(stream.aclose())

    def close(self) -> None:
        try:
            self._run(self.astore.close())
        finally:
            self._loop.stop()
            self._companion.close()

    def __enter__(self) -> SyncFacade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name in _COROUTINES:
            method = getattr(self.astore, name)
            return lambda *args, **kwargs: self._run(method(*args, **kwargs))
        return getattr(self._companion, name)


_COROUTINES = frozenset(
    {
        "head_seq",
        "stats",
        "load_session",
        "messages",
        "surface",
        "list_sessions",
        "count_sessions",
        "session_info",
        "update_session",
        "verify",
        "repair",
        "delete_session",
        "import_jsonl",
        "export_jsonl",
        "prune",
    }
)
