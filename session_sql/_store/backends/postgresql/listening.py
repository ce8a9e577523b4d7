"""PostgreSQL followers' wake-ups: one LISTEN connection per store, fanned out in process.

``ListenHub`` (one per store, ``StoreContext.hub``) holds a single connection LISTENing on the
store's channel and one thread that waits on it and hands each notification to the followers
of the session it names, sync (a ``threading.Event``) or async (``call_soon_threadsafe`` on
the follower's loop). So a store's server connections are its pool's plus one, however many
follow. The connection comes from the store's engine, so it connects exactly as the store
does (URL, ``connect_args``, ``creator``, the connect hooks), and is detached from the pool,
so its LISTEN state never reaches another user of the pool. It is opened with the first
follower (whose error it is when it cannot be), closed when the last one leaves or the
store closes, and reopened with a backoff when lost; a reopened connection wakes every
follower, which then reads, so a notification lost with the connection costs latency, never
an event (and a follower reads at least every ``following.LISTEN_MAX`` anyway).

The thread waits with ``selectors`` (epoll or poll: no ceiling on descriptor numbers, unlike
``select``, so a process with thousands of open sockets still listens). An error the thread
did not expect is logged with its traceback and the connection reopened as if lost; should
the thread end all the same, the hub starts another for the followers it still has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from sqlalchemy.util import greenlet_spawn

from session_sql._store import following
from session_sql._store.database import translate_errors
from session_sql.errors import PermanentStoreError, TransientStoreError

if TYPE_CHECKING:
    from session_sql._store.context import StoreContext

__all__ = ["AsyncHubListener", "HubListener", "ListenHub", "listen_statement"]

_log = logging.getLogger("session_sql")

RECONNECT_START = 0.05
"""The first pause before reopening a lost LISTEN connection; doubled after each failure."""
RECONNECT_MAX = 2.0
"""The longest pause between attempts to reopen it."""


def listen_statement(channel: str) -> sql.Composed:
    """``LISTEN`` on the store's channel (a quoted identifier)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


class _Waiter:
    """One follower's mailbox: the payloads of its session since its last wait, or a wake
    for no payload in particular (the connection was reopened, the store closed)."""

    MAX_PENDING = 64
    """Past this many unread payloads they are dropped for a plain wake: a read finds all."""

    def __init__(self, session_id: str, loop: asyncio.AbstractEventLoop | None) -> None:
        self.session_id = session_id
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._woken = False
        self._loop = loop
        self._event = threading.Event()
        self._async_event: asyncio.Event | None = None if loop is None else asyncio.Event()

    def deliver(self, payload: str | None) -> None:
        """Called by the hub's thread: ``payload`` for this session, ``None``: wake anyway."""
        with self._lock:
            if payload is None or len(self._pending) >= self.MAX_PENDING:
                self._woken = True
                self._pending.clear()
            else:
                self._pending.append(payload)
            if self._loop is None:
                self._event.set()
        if self._loop is not None:
            with suppress(RuntimeError):  # the loop is closed: nobody waits on it any more
                self._loop.call_soon_threadsafe(self._set_async)

    def _set_async(self) -> None:
        assert self._async_event is not None
        self._async_event.set()

    def take(self, wakes: Callable[[str], bool]) -> bool:
        """Whether what arrived since the last call wakes the follower (then it is used up)."""
        with self._lock:
            notes, self._pending = self._pending, []
            woken, self._woken = self._woken, False
            self._event.clear()
        # Every note is shown to ``wakes``, none skipped once one wakes: a follower reading
        # from a standby learns the newest head named (``Follower.told``).
        for note in notes:
            woken = wakes(note) or woken
        return woken

    def wait(self, seconds: float, wakes: Callable[[str], bool]) -> None:
        deadline = time.monotonic() + seconds
        while not self.take(wakes):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._event.wait(remaining)

    async def wait_async(self, seconds: float, wakes: Callable[[str], bool]) -> None:
        event = self._async_event
        assert event is not None
        deadline = time.monotonic() + seconds
        while True:
            event.clear()  # before take: a delivery after it sets the event again
            if self.take(wakes):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)


class ListenHub:
    """A store's one LISTEN connection and the followers it wakes (see the module)."""

    def __init__(self, ctx: StoreContext) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._waiters: dict[str, set[_Waiter]] = {}
        self._count = 0
        self._runner: _Runner | None = None
        self._closed = False
        self.delivered = 0
        """Notifications handed to followers so far: how a test tells a LISTEN wake-up from
        a follower's periodic read."""
        self.restarts = 0
        """Times the listening thread was started again after it failed."""

    @property
    def followers(self) -> int:
        """How many followers are registered now."""
        return self._count

    @property
    def backend_pid(self) -> int | None:
        """The server pid of the LISTEN connection, while it is open (for tests and stats)."""
        runner = self._runner
        return None if runner is None else runner.pid

    def register(self, waiter: _Waiter) -> concurrent.futures.Future[None]:
        """Add ``waiter``; the future resolves once the connection LISTENs (or fails to)."""
        with self._lock:
            if self._closed:
                raise PermanentStoreError.closed("open_store")
            self._waiters.setdefault(waiter.session_id, set()).add(waiter)
            self._count += 1
            if self._runner is None:
                self._runner = _Runner(self, self._ctx)
            return self._runner.ready

    def unregister(self, waiter: _Waiter) -> None:
        """Remove ``waiter``; the last one leaving ends the connection."""
        with self._lock:
            waiters = self._waiters.get(waiter.session_id)
            if waiters is None or waiter not in waiters:
                return
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[waiter.session_id]
            self._count -= 1
            runner = self._runner if self._count == 0 else None
        if runner is not None:
            runner.poke()

    def close(self) -> None:
        """The store closed: end the connection and wake every follower (its next read fails)."""
        with self._lock:
            self._closed = True
            runner = self._runner
        if runner is not None:
            runner.poke()
        self.wake_all()

    def wake_all(self) -> None:
        with self._lock:
            everyone = [w for waiters in self._waiters.values() for w in waiters]
        for waiter in everyone:
            waiter.deliver(None)

    def dispatch(self, payload: str) -> None:
        """Hand a notification to the followers of the session it names (this tenant's)."""
        parsed = following.parse_payload(payload)
        if parsed is None or parsed[0] != self._ctx.tenant or not isinstance(parsed[1], str):
            return
        with self._lock:
            waiters = list(self._waiters.get(parsed[1], ()))
            self.delivered += len(waiters)
        for waiter in waiters:
            waiter.deliver(payload)

    def stopping(self, runner: _Runner) -> bool:
        """Whether ``runner`` should end (the store closed, or nobody follows); if so it is
        no longer the hub's, so the next follower starts another."""
        with self._lock:
            if self._runner is not runner:
                return True
            if self._closed or self._count == 0:
                self._runner = None
                return True
            return False

    def failed(self, runner: _Runner) -> None:
        """``runner``'s first connection failed: the next follower tries afresh."""
        with self._lock:
            if self._runner is runner:
                self._runner = None

    def died(self, runner: _Runner) -> None:
        """``runner``'s thread ended on an error: another takes over for the followers
        registered, with the same ``ready`` (when it was resolved, the new one wakes them all
        once it listens, as a reopened connection does)."""
        with self._lock:
            if self._runner is not runner:
                return
            self._runner = None
            if self._closed or self._count == 0:
                return
            self.restarts += 1
            self._runner = _Runner(self, self._ctx, ready=runner.ready)


class _Runner:
    """The hub's thread and the connection it LISTENs on, until stopped."""

    def __init__(
        self,
        hub: ListenHub,
        ctx: StoreContext,
        *,
        ready: concurrent.futures.Future[None] | None = None,
    ) -> None:
        self._hub = hub
        self._ctx = ctx
        self.ready: concurrent.futures.Future[None] = ready or concurrent.futures.Future()
        self.pid: int | None = None
        self._poke_r, self._poke_w = os.pipe()
        self._pipe_lock = threading.Lock()
        self._ended = False
        os.set_blocking(self._poke_w, False)
        self._thread = threading.Thread(target=self._run, name="session_sql-listen", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Make the thread look at the hub now (a follower left, the store closed)."""
        with self._pipe_lock:  # never a write to a closed descriptor, since reused
            if not self._ended:
                with suppress(BlockingIOError):  # the pipe is full: poked already
                    os.write(self._poke_w, b"x")

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException:
            _log.exception("the LISTEN thread failed; starting another")
            self._hub.died(self)
        finally:
            with self._pipe_lock:
                self._ended = True
                os.close(self._poke_r)
                os.close(self._poke_w)

    def _serve(self) -> None:
        backoff = RECONNECT_START
        failing = RECONNECT_START  # the pause after an unexpected error, never reset
        while not self._hub.stopping(self):
            try:
                driver = self._connect()
            except BaseException as exc:
                if not self.ready.done():
                    self._hub.failed(self)
                    self.ready.set_exception(exc)
                    return
                self._pause(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX)
                continue
            backoff = RECONNECT_START
            if self.ready.done():
                self._hub.wake_all()  # reopened: whatever was committed meanwhile is read
            else:
                self.ready.set_result(None)
            unexpected = False
            try:
                self._listen(driver.pgconn)
            except (psycopg.Error, OSError):
                pass  # lost: reopen (the followers read at least every LISTEN_MAX meanwhile)
            except Exception:
                _log.exception("the LISTEN connection failed; reopening it")
                unexpected = True
            finally:
                self.pid = None
                self._close(driver)
            if unexpected:
                self._pause(failing)
                failing = min(failing * 2, RECONNECT_MAX)

    def _pause(self, seconds: float) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._poke_r, selectors.EVENT_READ)
            if selector.select(seconds):
                os.read(self._poke_r, 512)

    def _listen(self, pgconn: Any) -> None:
        """Hand each notification to the hub until stopped; raises when the connection is lost."""
        self.pid = pgconn.backend_pid
        sock = pgconn.socket
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_READ)
            selector.register(self._poke_r, selectors.EVENT_READ)
            while not self._hub.stopping(self):
                readable = {key.fd for key, _ in selector.select(following.LISTEN_MAX)}
                if self._poke_r in readable:
                    os.read(self._poke_r, 512)
                if sock in readable:
                    self._consume(pgconn)

    def _consume(self, pgconn: Any) -> None:
        """Hand the notifications that arrived to the hub; raises when the connection is lost."""
        pgconn.consume_input()
        while (note := pgconn.notifies()) is not None:
            self._hub.dispatch(note.extra.decode("utf-8", "replace"))
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            raise psycopg.OperationalError("the LISTEN connection was lost")

    def _connect(self) -> Any:
        """The psycopg connection of a pool connection, detached, in autocommit, LISTENing
        (the async engine's checked out on a loop of this thread's own)."""
        ctx = self._ctx

        def checkout() -> Any:
            with translate_errors():
                raw = ctx.engine.raw_connection()
                driver = raw.driver_connection  # gone from the proxy once detached
                raw.detach()  # ours now: closing it will not return it to the pool
                dbapi = raw.dbapi_connection
                assert dbapi is not None
                try:
                    dbapi.rollback()  # end any transaction the pool's ping began
                    dbapi.autocommit = True
                    cursor = dbapi.cursor()
                    try:
                        cursor.execute(listen_statement(str(ctx.channel)))
                    finally:
                        cursor.close()
                except BaseException:
                    # Closed as is: the pool's reset (a rollback) of a connection the server
                    # ended (a restart) would fail and log an error for nothing.
                    with suppress(Exception):
                        dbapi.close()
                    raise
                return driver

        if ctx.engine.dialect.is_async:
            return asyncio.run(greenlet_spawn(checkout))
        return checkout()

    def _close(self, driver: Any) -> None:
        """Close the psycopg connection itself: a detached proxy's ``close`` does not reach an
        async engine's."""
        with suppress(Exception):  # a lost connection may fail to close: it is gone anyway
            if isinstance(driver, psycopg.AsyncConnection):
                asyncio.run(driver.close())
            else:
                driver.close()


def _polls_instead(ctx: StoreContext, error: BaseException) -> bool:
    """Whether a follower whose LISTEN connection could not be opened polls instead of
    failing: on a store that reads from standbys, when the primary is unreachable (the
    standby it reads from may still be replaying what the primary committed)."""
    if not (ctx.replicas and isinstance(error, TransientStoreError)):
        return False
    _log.warning("follow: the primary cannot LISTEN now (%s); polling the standby instead", error)
    return True


class HubListener:
    """A sync follower's registration with the store's hub; holds a follower slot."""

    @classmethod
    def open(cls, ctx: StoreContext, session_id: str) -> HubListener | None:
        """A registration, or ``None`` when the follower polls instead (``_polls_instead``)."""
        try:
            return cls(ctx, session_id)
        except TransientStoreError as exc:
            if _polls_instead(ctx, exc):
                return None
            raise

    def __init__(self, ctx: StoreContext, session_id: str) -> None:
        self._ctx = ctx
        self._session_id = session_id
        self._waiter = _Waiter(session_id, None)
        ctx.followers.take()
        try:
            hub = ctx.hub()
            ready = hub.register(self._waiter)
            try:
                ready.result()  # the connection's error, when it could not be opened
            except BaseException:
                hub.unregister(self._waiter)
                raise
        except BaseException:
            ctx.followers.give_back()
            raise

    def wait(self, seconds: float, wakes: Callable[[str], bool] | None = None) -> None:
        """Return on the first notification ``wakes`` accepts (default: any commit to the
        followed session), or after ``seconds``."""
        if wakes is None:
            ctx, session_id = self._ctx, self._session_id
            wakes = lambda payload: ctx.wakes(payload, session_id)  # noqa: E731
        self._waiter.wait(seconds, wakes)

    def close(self) -> None:
        try:
            self._ctx.hub().unregister(self._waiter)
        finally:
            self._ctx.followers.give_back()


class AsyncHubListener:
    """An async follower's registration with the store's hub, woken on its own loop."""

    def __init__(self, ctx: StoreContext, waiter: _Waiter) -> None:
        self._ctx = ctx
        self._waiter = waiter

    @classmethod
    async def open(cls, ctx: StoreContext, session_id: str) -> AsyncHubListener | None:
        """A registration, or ``None`` when the follower polls instead (``_polls_instead``)."""
        try:
            return await cls._open(ctx, session_id)
        except TransientStoreError as exc:
            if _polls_instead(ctx, exc):
                return None
            raise

    @classmethod
    async def _open(cls, ctx: StoreContext, session_id: str) -> AsyncHubListener:
        waiter = _Waiter(session_id, asyncio.get_running_loop())
        ctx.followers.take()
        try:
            hub = ctx.hub()
            ready = hub.register(waiter)
            try:
                # Shielded: the future is shared, a cancelled follower must not cancel it.
                await asyncio.shield(asyncio.wrap_future(ready))
            except BaseException:
                hub.unregister(waiter)
                raise
        except BaseException:
            ctx.followers.give_back()
            raise
        return cls(ctx, waiter)

    async def wait(self, seconds: float, wakes: Callable[[str], bool]) -> None:
        """Return on the first notification ``wakes`` accepts, or after ``seconds``."""
        await self._waiter.wait_async(seconds, wakes)

    async def close(self) -> None:
        try:
            self._ctx.hub().unregister(self._waiter)
        finally:
            self._ctx.followers.give_back()
