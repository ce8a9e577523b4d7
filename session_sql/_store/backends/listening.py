"""PostgreSQL followers' LISTEN connections, sync and async, each outside the pool.

Each comes from the store's engine, so it connects exactly as the store does (URL,
``connect_args``, ``creator``, the connect hooks), and is detached from the pool and closed at
the end, so its LISTEN state never reaches another user of the pool. Each holds one of the
store's follower slots (``ctx.followers``) from before it connects until it is closed.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from session_sql._store.backends import translate_errors

if TYPE_CHECKING:
    from session_sql._store.context import StoreContext

__all__ = ["AsyncListenConnection", "ListenConnection", "listen_statement"]


def listen_statement(channel: str) -> sql.Composed:
    """``LISTEN`` on the store's channel (a quoted identifier)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


class ListenConnection:
    """A dedicated autocommit connection LISTENing on the store's channel (sync follow)."""

    def __init__(self, ctx: StoreContext, session_id: str) -> None:
        self._ctx = ctx
        self._session_id = session_id
        ctx.followers.take()
        try:
            with translate_errors():
                self._raw = ctx.engine.raw_connection()
                try:
                    conn = self._raw.driver_connection
                    assert isinstance(conn, psycopg.Connection)
                    self._raw.detach()
                    conn.rollback()  # end any transaction the pool's ping began
                    conn.autocommit = True
                    conn.execute(listen_statement(str(ctx.channel)))
                except BaseException:
                    self._raw.close()
                    raise
                self._conn: psycopg.Connection[Any] = conn
        except BaseException:
            ctx.followers.give_back()
            raise

    def wait(self, seconds: float, wakes: Callable[[str], bool] | None = None) -> None:
        """Return on the first notification ``wakes`` accepts (default: any commit to the
        followed session), or after ``seconds``."""
        if wakes is None:
            wakes = functools.partial(self._ctx.wakes, session_id=self._session_id)
        with translate_errors():
            notes = self._conn.notifies(timeout=seconds)
            try:
                for note in notes:
                    if wakes(note.payload):
                        break
            finally:
                notes.close()

    def close(self) -> None:
        try:
            self._raw.close()  # detached: closes the driver connection, never pools it
        finally:
            self._ctx.followers.give_back()


class AsyncListenConnection:
    """A LISTENing psycopg ``AsyncConnection``, taken from the store's async engine and
    detached from its pool (the async follow)."""

    def __init__(self, conn: Any, ctx: StoreContext, session_id: str) -> None:
        self._conn = conn
        self._ctx = ctx
        self._session_id = session_id

    @classmethod
    async def open(
        cls,
        ctx: StoreContext,
        session_id: str,
        call: Callable[[Callable[[], Any]], Awaitable[Any]],
    ) -> AsyncListenConnection:
        """Check a connection out with ``call`` (the async store's runner), then LISTEN."""

        def checkout() -> Any:
            with translate_errors():
                raw = ctx.engine.raw_connection()
                conn = raw.driver_connection
                raw.detach()  # it is ours now: closing it will not return it to the pool
                return conn

        ctx.followers.take()
        try:
            conn = await call(checkout)
            try:
                with translate_errors():
                    await conn.rollback()  # out of whatever the pool's ping began
                    await conn.set_autocommit(True)
                    await conn.execute(listen_statement(str(ctx.channel)))
            except BaseException:
                await conn.close()
                raise
        except BaseException:
            ctx.followers.give_back()
            raise
        return cls(conn, ctx, session_id)

    async def wait(self, seconds: float, wakes: Callable[[str], bool]) -> None:
        """Return on the first notification ``wakes`` accepts, or after ``seconds``."""
        with translate_errors():
            notes = self._conn.notifies(timeout=seconds)
            try:
                async for note in notes:
                    if wakes(note.payload):
                        break
            finally:
                await notes.aclose()

    async def close(self) -> None:
        try:
            await self._conn.close()
        finally:
            self._ctx.followers.give_back()
