"""The async store's connections on PostgreSQL (``AsyncWriteConnections``), kept outside a
checkout, on which it appends and refreshes natively. (The idle connection for
single-statement reads, on either backend, is ``idle.IdleConnection``.)"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.util import greenlet_spawn

from session_sql import loopsafe
from session_sql._store.backends.postgresql import appending, reading
from session_sql._store.backends.postgresql.backend import is_quiet
from session_sql._store.backends.postgresql.driving import PG_IDLE
from session_sql._store.transactions import AppendPart, StoredHead, Writes
from session_sql.errors import PermanentStoreError

__all__ = ["AsyncWriteConnections"]


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

    async def append(self, w: Writes, parts: Sequence[AppendPart]) -> int | None:
        """``Backend.append_parts`` on a kept connection (``appending.append_parts_async``)."""
        raw = await self.take()
        try:
            return await appending.append_parts_async(w, self.cursor(raw), parts)
        finally:
            await self.give(raw)

    async def read_new(
        self, w: Writes, session_key: int, from_seq: int
    ) -> tuple[StoredHead, list[Any]] | None:
        """``refresh``'s read on a kept connection (``reading.read_new_async``)."""
        raw = await self.take()
        try:
            return await reading.read_new_async(w, self.cursor(raw), session_key, from_seq)
        finally:
            await self.give(raw)

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
