"""``AsyncStoredSession``: the async store's write handle, around the sync store's.

It holds a ``StoredSession`` and runs that handle's very append (``PendingAppend``) and
refresh with their I/O awaited: in the runner's worker threads (SQLite), or natively on
psycopg's async connections (PostgreSQL: ``backends.postgresql.appending.append_parts_async``,
``reading.read_new_async``: the sync store's very transactions, driven by the async loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.util import greenlet_spawn

from session_sql import loopsafe
from session_sql._store import forwarding, statistics
from session_sql._store.database import read_tx, translate_errors
from session_sql._store.opening import StoredLog
from session_sql._store.running import _Runner, _settle, _Uninterrupted
from session_sql._store.writer import Prepared, StoredSession
from session_sql.errors import StoreError
from session_sql.events import SessionEvent, SurfaceOp
from session_sql.pending import Item, batch_items

if TYPE_CHECKING:
    from session_sql._store.backends.postgresql.connections import AsyncWriteConnections


class AsyncStoredSession:
    """A write handle whose ``append``, ``append_many`` and ``refresh`` are coroutines.

    It wraps the sync store's handle, a ``StoredSession``, as SQLAlchemy's ``AsyncSession``
    wraps a ``Session``: the readers (``seq``, ``surface``, ``messages()``, ``events``,
    ``first_live_seq``, ...) and ``add_validator``/``subscribe`` are that handle's, forwarded,
    synchronous (no I/O); the coroutines run its very append (``PendingAppend``) with the
    persist step awaited. Validators and observers are handed this handle. Appends and
    refreshes on one handle run one at a time, in call order.

    A handle from ``open_session(..., read_log=False)`` holds the surface's events and the
    last event; the rest of its log is read by ``await read_log()``. ``events``,
    ``request_header()`` and ``fork()`` need it: on the event loop they raise ``StoreError``
    until it is read (they cannot wait for I/O there); from another thread they read it
    through the loop. ``open_session`` reads it by default.
    """

    # The sync handle's readers, forwarded (see forwarding): typed and documented as its own.
    id = forwarding.reader(StoredSession.id)
    header = forwarding.reader(StoredSession.header)
    catalog = forwarding.reader(StoredSession.catalog)
    seq = forwarding.reader(StoredSession.seq)
    events = forwarding.reader(StoredSession.events)
    surface = forwarding.reader(StoredSession.surface)
    first_live_seq = forwarding.reader(lambda s: s.first_live_seq)
    inherited_event_count = forwarding.reader(lambda s: s.inherited_event_count)
    messages = forwarding.method(StoredSession.messages)
    surface_messages = forwarding.method(StoredSession.surface_messages)
    message_for = forwarding.method(StoredSession.message_for)
    request_header = forwarding.method(StoredSession.request_header)
    add_validator = forwarding.method(StoredSession.add_validator)
    subscribe = forwarding.method(StoredSession.subscribe)
    fork = forwarding.method(StoredSession.fork)

    def __init__(self, handle: StoredSession, runner: _Runner) -> None:
        """The async face of a handle the sync store just built (used through this one only:
        its appends would not go through this handle's lock, nor be awaited)."""
        self._sync = handle
        self._runner = runner
        self._lock = loopsafe.Semaphore()
        self._loop = asyncio.get_running_loop()
        log = handle._log
        if isinstance(log, StoredLog) and not log.is_read:
            self._read_stored = log.fetch  # the sync read, run by the runner from now on
            log.fetch = self._fetch_through_loop

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, seq={self.seq})"

    async def read_log(self) -> None:
        """Read the stored events that ``open_session`` left in the store (checked as a load
        checks them), so that ``events``, ``request_header()`` and ``fork()`` need no I/O;
        nothing to do when they are in memory already."""
        log = self._sync._log
        if isinstance(log, StoredLog) and not log.is_read:
            events = await self._runner.call(self._read_stored, log.stored)
            if not log.is_read:
                log.adopt(events)

    def _fetch_through_loop(self, count: int) -> list[SessionEvent]:
        """The stored events read by the handle's loop, for a reader called outside it."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise StoreError(
                f"session {self.id!r}: this handle has not read its whole log "
                "(open_session(..., read_log=False) reads the surface and the last event); "
                "await handle.read_log() before using events, request_header() or fork() "
                "on the event loop"
            )
        if self._loop.is_closed() or not self._loop.is_running():
            raise StoreError(f"session {self.id!r}: the handle's event loop is not running")
        future = asyncio.run_coroutine_threadsafe(
            self._runner.call(self._read_stored, count), self._loop
        )
        return future.result()

    async def append(
        self,
        type: str,
        data: Any = None,
        *,
        surface_op: SurfaceOp | Mapping[str, Any] | None = None,
        source_event_seqs: Sequence[int] | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """Validate, commit and publish one event (SPEC §7.2)."""
        item = (type, data, surface_op, source_event_seqs, ignorable, None)
        return (await self._append_async([item]))[0]

    async def append_many(self, items: Iterable[Mapping[str, Any]]) -> list[SessionEvent]:
        """Append several events atomically: all commit or none does."""
        return await self._append_async(batch_items(items))

    async def refresh(self) -> list[SessionEvent]:
        """Load (and fully validate) what other writers appended; returns the new events."""
        sync = self._sync
        async with self._lock:
            writers = self._runner.writers
            # The one query's set_config would not reach a Citus worker (see
            # ``StoreContext.tenant_on_workers``): the sync read's transaction sets it there.
            if writers is None or sync._ctx.tenant_on_workers:
                row, rows = await self._runner.call(sync._read_new)
            else:
                row, rows = await self._read_new_async(writers)
            return sync._fold_new(row, rows)

    async def _read_new_async(self, writers: AsyncWriteConnections) -> tuple[Any, Sequence[Any]]:
        """``_read_new`` on the store's kept async connections, with the same checks."""
        sync = self._sync
        with translate_errors(sync.id):
            found = await writers.read_new(sync._ctx.writes, sync._session_key, sync.seq)
        if found is None:  # the row is gone: the sync read tells deleted from recreated
            return await self._runner.call(sync._read_new)
        row, rows = found
        return sync._same_creation(row), rows

    async def _append_async(self, batch: list[Item]) -> list[SessionEvent]:
        """The sync handle's append, its persist step awaited; run to its end even when the
        task is cancelled meanwhile (the cancellation is raised once the batch is committed
        or abandoned)."""
        if not batch:
            return []
        sync = self._sync
        # A big batch: the collector paused from its building to its commit (see
        # Session._paused_append), the persisting awaited included.
        async with self._lock:
            with sync._paused_append(len(batch)), sync._begin_append(batch, self) as pending:
                if self._runner.writers is None:
                    persisted = self._runner.submit(sync._persist, pending)
                    cancelled = await _settle(persisted)
                    persisted.result()  # the persist step's error, with nothing changed
                else:
                    persist = _Uninterrupted(self._persist_async(pending))
                    try:
                        await persist  # its error, with nothing changed
                    finally:
                        cancelled = persist.cancelled
        if cancelled:
            raise asyncio.CancelledError
        return pending.events

    async def _persist_async(self, pending: Prepared) -> None:
        """``_persist`` on PostgreSQL: the same transaction, on a natively awaited connection
        (``persist_together_async``)."""
        writers = self._runner.writers
        assert writers is not None
        await persist_together_async(writers, [pending])


def sync_of(handle: object) -> object:
    """The ``StoredSession`` an async handle writes through (anything else as it is)."""
    return handle._sync if isinstance(handle, AsyncStoredSession) else handle


async def persist_together_async(
    writers: AsyncWriteConnections, writes: Sequence[Prepared]
) -> None:
    """``writer.persist_together`` on the store's kept async connections: the same
    transactions, natively awaited (``AsyncWriteConnections.append``); the lost-race
    diagnosis is the sync store's own."""
    ctx = writes[0].session._ctx
    parts = [pending.session._append_part(pending) for pending in writes]
    with translate_errors(writes[0].session.id if len(writes) == 1 else None):
        lost = await writers.append(ctx.writes, parts)
    if lost is None:
        statistics.appended(ctx, sum(len(p.events) for p in parts))
        return
    await greenlet_spawn(_diagnose_lost_race, writes[lost].session)


def _diagnose_lost_race(loser: StoredSession) -> None:
    with translate_errors(loser.id), read_tx(loser._ctx.engine) as conn:
        loser._raise_lost_race(conn)
