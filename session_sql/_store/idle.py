"""The connection a store keeps outside a checkout for single-statement reads, on either
backend (``IdleConnection``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool

from session_sql._store.database import backend_for

__all__ = ["IdleConnection"]


class IdleConnection:
    """One DBAPI connection a store keeps outside its pool, idle and in autocommit, for reads
    that need a single statement (the tail reads of ``reader.surface_tail``).

    A checkout from the pool costs more than such a read: PostgreSQL's pre-ping is a round
    trip, and the pool's events and reset run each time. This connection skips all that, and
    since it is kept in autocommit it is never left inside a transaction. It is taken without
    waiting: a caller that finds it in use (another thread, or another task of an async
    store) takes the ordinary pooled path instead, so it never serialises readers. It comes
    from the engine (the connect hooks ran on it) and is detached from the pool, so it does
    not reduce the pool's capacity; an in-memory SQLite database, whose single connection
    the pool hands to every user in turn, keeps none.

    On PostgreSQL the store's ``tenant`` is set on it for the session (row-level security
    reads it) when it is opened: it serves that store alone and never returns to the pool,
    so no other user sees the setting, and each read stays one statement.
    """

    def __init__(self, engine: Engine, tenant: str = "", *, distributed: bool = False) -> None:
        self._engine = engine
        self._tenant = tenant
        self._lock = threading.Lock()
        self._raw: Any = None
        self._backend = backend_for(engine)
        # Only beside a queue pool (the store's own): another pool class may hand out one
        # shared connection, which detaching would take from everybody else.
        kept = self._backend.keeps_idle(engine, distributed) and isinstance(engine.pool, QueuePool)
        self._closed = not kept

    @contextmanager
    def borrow(self) -> Iterator[Any]:
        """The idle DBAPI connection, or None when it is in use, closed or not kept.

        An exception inside the block discards the connection (it may be broken; the next
        borrower opens a new one).
        """
        if self._closed or not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._raw is None:
                self._raw = self._open()
            try:
                yield self._raw.dbapi_connection
            except BaseException:
                self._discard()
                raise
        finally:
            if self._closed:
                self._discard()
            self._lock.release()

    def _open(self) -> Any:
        raw = self._engine.raw_connection()
        raw.detach()  # ours now: the pool neither counts nor resets it
        dbapi: Any = raw.dbapi_connection
        try:
            self._backend.open_idle(dbapi, self._tenant)
        except BaseException:
            with suppress(Exception):
                dbapi.close()
            raise
        return raw

    def _discard(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            with suppress(Exception):  # closing a broken connection may fail: it is gone
                # Closed by the driver itself: a detached fairy of the async pool would only
                # terminate it, and psycopg wants it closed.
                raw.dbapi_connection.close()

    def close(self) -> None:
        """Close the connection now, or, if it is in use, as soon as its borrower is done."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                self._discard()
            finally:
                self._lock.release()
