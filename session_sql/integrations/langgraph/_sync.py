"""``SessionSQLSaver``: LangGraph checkpoints in a ``SessionStore``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol

from session_sql import SessionStore, open_store

from ._ops import Op, run_sync
from ._saver import Saver

T = TypeVar("T")


class SessionSQLSaver(Saver):
    """LangGraph checkpoints in a ``SessionStore``, one session per thread.

    The store stays the caller's to close; ``from_url`` opens (and closes) one of its own.
    Calls are serialised by a lock; the ``a``-prefixed methods run the sync ones in a worker
    thread.
    """

    store: SessionStore
    _takes = (
        SessionStore,
        "a SessionStore",
        "an AsyncSessionStore goes with AsyncSessionSQLSaver",
    )

    def __init__(self, store: SessionStore, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(store, serde=serde)
        self._lock = threading.RLock()

    @classmethod
    @contextlib.contextmanager
    def from_url(cls, url: str, **open_store_options: Any) -> Iterator[SessionSQLSaver]:
        """A saver on a store of its own (``open_store(url, **open_store_options)``)."""
        serde = open_store_options.pop("serde", None)
        store = open_store(url, **open_store_options)
        try:
            yield cls(store, serde=serde)
        finally:
            store.close()

    def _sync(self, op: Op[T]) -> T:
        with self._lock:
            return run_sync(op)

    async def _async(self, op: Op[T]) -> T:
        return await asyncio.to_thread(self._sync, op)
