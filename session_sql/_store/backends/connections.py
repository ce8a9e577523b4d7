"""The connections a store keeps outside a checkout: the idle one for single-statement reads
(``IdleConnection``, either backend) and the async store's append connections on PostgreSQL
(``AsyncWriteConnections``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.pool import QueuePool
from sqlalchemy.util import greenlet_spawn

from session_sql import loopsafe
from session_sql._store.backends import backend_for
from session_sql._store.backends.postgresql import PG_IDLE, is_quiet
from session_sql.errors import PermanentStoreError

__all__ = ["AsyncWriteConnections", "IdleConnection"]


class IdleConnection:
    """One DBAPI connection a store keeps outside its pool, idle and in autocommit, for reads
    that need a single statement (the tail reads of ``fastpath``).

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

    def __init__(self, engine: Engine, tenant: str = "") -> None:
        self._engine = engine
        self._tenant = tenant
        self._lock = threading.Lock()
        self._raw: Any = None
        self._backend = backend_for(engine)
        # Only beside a queue pool (the store's own): another pool class may hand out one
        # shared connection, which detaching would take from everybody else.
        kept = self._backend.keeps_idle(engine) and isinstance(engine.pool, QueuePool)
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


class AsyncWriteConnections:
    """psycopg ``AsyncConnection``s that an async store on PostgreSQL keeps for its appends.

    An append on the async engine's pool pays a checkout (its pre-ping is a round trip), the
    pool's events and reset, and SQLAlchemy's adapter around every await. These connections
    are taken from that pool once, kept checked out, and lent to one append at a time; at
    most ``size`` are held, and an append that finds none free waits for one on the loop. A
    connection that broke is given back to the pool invalidated (the pool replaces it); one
    left inside a transaction is never lent again either.
    """

    def __init__(self, engine: Engine, size: int) -> None:
        self._engine = engine
        self._idle: list[Any] = []
        self._cursors: dict[Any, psycopg.AsyncClientCursor[Any]] = {}
        self._slots = loopsafe.Semaphore(size)
        self._closed = False

    async def take(self) -> Any:
        """A kept connection (the pool's proxy; its ``driver_connection`` is idle, in
        autocommit, the caller's alone), which the caller must ``give`` back.

        A kept connection is checked as the pool's pre-ping checks a pooled one
        (``postgresql.is_quiet``, no round trip); one the server ended while it sat idle is
        given back invalidated and another taken, since an append, sent with its commit,
        cannot be retried once sent. (Taken and given without an async context manager:
        this is on every append's path.)
        """
        await self._slots.acquire()
        try:
            if self._closed:
                raise PermanentStoreError.closed("open_async_store")
            while self._idle:
                try:
                    raw = self._idle.pop()
                except IndexError:  # taken meanwhile by an append of another loop's thread
                    break
                if is_quiet(raw.driver_connection):
                    return raw
                self._cursors.pop(raw, None)
                await greenlet_spawn(_give_back, raw, True)
            return await greenlet_spawn(self._checkout)
        except BaseException:
            self._slots.release()
            raise

    def cursor(self, raw: Any) -> psycopg.AsyncClientCursor[Any]:
        """The client-binding cursor kept with a taken connection (one per connection, made
        once: a cursor is usable again after any outcome of its last query)."""
        cursor = self._cursors.get(raw)
        if cursor is None:
            cursor = self._cursors[raw] = psycopg.AsyncClientCursor(raw.driver_connection)
        return cursor

    async def give(self, raw: Any) -> None:
        """Take back what ``take`` lent: kept when it is idle and usable, else returned to the
        pool (invalidated when broken or left inside a transaction)."""
        try:
            conn = raw.driver_connection
            usable = not conn.broken and conn.info.transaction_status == PG_IDLE
            if usable and not self._closed:
                self._idle.append(raw)
            else:
                self._cursors.pop(raw, None)
                await greenlet_spawn(_give_back, raw, not usable)
        finally:
            self._slots.release()

    def _checkout(self) -> Any:
        raw = self._engine.raw_connection()
        dbapi: Any = raw.dbapi_connection
        try:
            dbapi.rollback()  # out of whatever the pool's ping began
            dbapi.autocommit = True  # the appends send BEGIN themselves (in their pipeline)
        except BaseException:
            _give_back(raw, True)
            raise
        return raw

    async def close(self) -> None:
        """Give every idle connection back to the pool; lent ones go back when returned."""
        self._closed = True
        idle, self._idle = self._idle, []
        self._cursors.clear()
        for raw in idle:
            await greenlet_spawn(_give_back, raw, False)


def _give_back(raw: Any, broken: bool) -> None:
    """Return a held connection to its pool (invalidated first when it cannot be reused)."""
    with suppress(Exception):
        if broken:
            raw.invalidate()
        else:
            raw.dbapi_connection.autocommit = False  # as the pool's other connections
        raw.close()
