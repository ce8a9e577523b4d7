"""The async API (SPEC §11.3): ``open_async_store``, ``AsyncSessionStore``, ``AsyncStoredSession``.

There is no second store here. An ``AsyncSessionStore`` drives an ordinary ``SessionStore``,
and each call runs the sync store's very code off the event loop's I/O:

* SQLite: in a worker thread of a pool sized like the connection pool.
* PostgreSQL: on the event loop, inside ``sqlalchemy.util.greenlet_spawn``, on an engine built
  on psycopg's async connections (``make_engine(..., async_driver=True)``): every statement,
  commit and pipeline sync is awaited, while the SQL and the logic are the sync store's own.
  This is ``AsyncConnection.run_sync`` at the grain of a whole public method, so each method
  keeps its one transaction, and no method had to be split for the async API.

An ``AsyncStoredSession`` (``async_handle``) wraps the sync store's handle: its append is that
handle's ``PendingAppend`` (reentrancy flag, snapshot, rules, plan, validators) on the loop,
the persist step awaited, then the commit into memory and the observers. Every call runs to
completion even when its task is cancelled: the cancellation is raised after the call has
finished, so a cancelled append either committed (and the handle shows it) or wrote nothing,
never half, and the handle stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
from collections.abc import (
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import IO, Any, TypeVar

from sqlalchemy import make_url

from session_sql import loopsafe
from session_sql._store import forwarding, loading, reader, retention
from session_sql._store.async_handle import AsyncStoredSession, persist_together_async, sync_of
from session_sql._store.database import backend_for
from session_sql._store.following import Read, Sleep, Wait
from session_sql._store.parquet import ParquetExport
from session_sql._store.retention import PrunedSession, PruneReport
from session_sql._store.running import _OffloadedFile, _Runner, _settle, _Uninterrupted
from session_sql._store.schema import DEFAULT_SCHEMA
from session_sql._store.store import SessionInfo, SessionStore, open_store
from session_sql._store.writer import (
    Prepared,
    StoredSession,
    begin_together,
    check_together,
    committed_lists,
    persist_together,
)
from session_sql.arguments import seq_bound, timeout_arg
from session_sql.catalog import Catalog
from session_sql.errors import (
    ConcurrencyError,
    InvalidArgumentError,
    SessionNotFoundError,
    StoreError,
)
from session_sql.events import SessionEvent
from session_sql.jsonl import JsonlReader, published_file
from session_sql.pending import abandon_all, commit_all
from session_sql.session import END_SEED

__all__ = ["AsyncSessionStore", "AsyncStoredSession", "open_async_store"]

T = TypeVar("T")


class AsyncSessionStore:
    """``SessionStore`` for asyncio: the same methods, as coroutines; see ``open_async_store``.

    Awaiting it, or entering it with ``async with``, opens it (once).
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str,
        catalog: Catalog | None,
        tenant: str | None = None,
        options: dict[str, Any],
    ) -> None:
        self.url = url
        self._backend = backend = backend_for(url)
        self._opening = functools.partial(
            open_store,
            url,
            schema=schema,
            catalog=catalog,
            tenant=tenant,
            async_driver=not backend.async_threads,
            **options,
        )
        threads = max(1, int(options.get("pool_size", 5)))
        self._size = threads
        self._runner = _Runner(threads=threads if backend.async_threads else None)
        self._opened: SessionStore | None = None
        # Tasks that open the store at once (a framework session's first calls, run
        # concurrently, on one loop or several) wait for one opening instead of each opening,
        # and leaking, a store.
        self._open_lock = loopsafe.Semaphore()

    async def _open(self) -> AsyncSessionStore:
        if self._opened is not None:
            return self
        cancelled = False
        async with self._open_lock:
            if self._opened is None:
                # Kept even when the opening task is cancelled meanwhile, so that the next
                # caller finds it (and close() closes it) rather than opening another.
                opening = self._runner.submit(self._opening)
                cancelled = await _settle(opening)
                try:
                    opened = opening.result()
                except StoreError as exc:
                    self._runner.shutdown()
                    if self._runner.threaded:
                        raise
                    # On the loop the backend could not ask the server why (it blocks):
                    # asked here, from a worker thread.
                    explain = self._backend.explain_open_failure
                    clearer = await asyncio.to_thread(explain, make_url(self.url), exc)
                    if clearer is None:
                        raise
                    raise clearer from exc
                except BaseException:
                    self._runner.shutdown()
                    raise
                if not self._runner.threaded:  # PostgreSQL: psycopg's, imported once opened
                    from session_sql._store.backends.postgresql.connections import (  # noqa: PLC0415
                        AsyncWriteConnections,
                    )

                    self._runner.writers = AsyncWriteConnections(opened.engine, self._size)
                self._opened = opened
        if cancelled:
            raise asyncio.CancelledError
        return self

    def __await__(self) -> Generator[Any, None, AsyncSessionStore]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSessionStore:
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _store(self) -> SessionStore:
        if self._opened is None:
            raise RuntimeError("the async store is not open: await it or use 'async with'")
        return self._opened

    @property
    def backend(self) -> str:
        return self._store.backend

    @property
    def schema(self) -> str | None:
        return self._store.schema

    @property
    def catalog(self) -> Catalog:
        return self._store.catalog

    @property
    def tenant(self) -> str:
        return self._store.tenant

    async def close(self) -> None:
        """Release every pooled connection (and the worker threads); again: nothing."""
        if self._opened is not None and not self._runner.closed:
            if self._runner.writers is not None:
                await self._runner.writers.close()
            await self._runner.call(self._opened.close)
        self._runner.shutdown()

    def __repr__(self) -> str:
        return f"AsyncSessionStore({self.url!r})"

    async def _handle(self, fn: Callable[..., StoredSession], *args: Any) -> AsyncStoredSession:
        handle = await self._runner.call(fn, *args)
        return AsyncStoredSession(handle, self._runner)

    # The sync store's methods that need nothing more than a run in the runner, forwarded
    # (see forwarding): each keeps the sync method's signature, types and docstring.
    repair = forwarding.offloaded(SessionStore.repair)
    delete_session = forwarding.offloaded(SessionStore.delete_session)

    async def export_parquet(
        self, directory: str | os.PathLike[str], *, since: str | None = None
    ) -> ParquetExport:
        """``SessionStore.export_parquet``; on PostgreSQL the files are written in a worker
        thread while the rows are read on the loop."""
        if self._runner.threaded:
            return await self._runner.call(
                functools.partial(self._store.export_parquet, directory, since=since)
            )
        loop = asyncio.get_running_loop()

        def offload(work: Callable[[], None]) -> None:
            _OffloadedFile.run(loop, work)

        return await self._runner.call(self._store._export_parquet, directory, since, offload)

    vacuum = forwarding.offloaded(SessionStore.vacuum)
    load_session = forwarding.offloaded(SessionStore.load_session)
    messages = forwarding.offloaded(SessionStore.messages)
    surface = forwarding.offloaded(SessionStore.surface)
    surface_messages = forwarding.offloaded(SessionStore.surface_messages)
    _surface_items = forwarding.offloaded(SessionStore._surface_items)
    list_sessions = forwarding.offloaded(SessionStore.list_sessions)
    count_sessions = forwarding.offloaded(SessionStore.count_sessions)
    session_info = forwarding.offloaded(SessionStore.session_info)
    update_session = forwarding.offloaded(SessionStore.update_session)
    head_seq = forwarding.offloaded(SessionStore.head_seq)
    stats = forwarding.offloaded(SessionStore.stats)
    verify = forwarding.offloaded(SessionStore.verify)

    # -- writing --------------------------------------------------------------------------

    async def create_session(
        self,
        session_id: str | None = None,
        *,
        header: Mapping[str, Any] | None = None,
        seed: Sequence[SessionEvent | Mapping[str, Any]] | None = None,
        user_id: str | None = None,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> AsyncStoredSession:
        """Create a session (with its seed and end-of-seed marker) in one transaction."""
        create = functools.partial(
            self._store.create_session,
            header=header,
            seed=seed,
            user_id=user_id,
            title=title,
            labels=labels,
        )
        return await self._handle(create, session_id)

    async def append_together(
        self, writes: Sequence[tuple[AsyncStoredSession, Iterable[Mapping[str, Any]]]]
    ) -> list[list[SessionEvent]]:
        """Append to several sessions in one transaction (see ``SessionStore.append_together``)."""
        return await self._append_together(writes)

    async def _append_together(
        self,
        writes: Sequence[tuple[AsyncStoredSession, Iterable[Mapping[str, Any]]]],
        *,
        heads: Mapping[str, int] | None = None,
    ) -> list[list[SessionEvent]]:
        """``append_together``, and each session named in ``heads`` appended to only when its
        handle is at that head (seq of its last event), checked under the handle's lock:
        otherwise ``ConcurrencyError`` and nothing is written. For a caller whose view of a
        session is older than a handle it shares with readers that refresh it (the ADK
        service's session objects)."""
        return (await self._together(writes, None, heads or {}))[1]

    async def _create_together(
        self,
        session_id: str,
        *,
        writes: Sequence[tuple[AsyncStoredSession, Iterable[Mapping[str, Any]]]],
        header: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        title: str | None = None,
    ) -> tuple[AsyncStoredSession, list[list[SessionEvent]]]:
        """``create_session`` and ``append_together(writes)`` in one transaction: the new
        session and every batch commit, or nothing does (``SessionExistsError`` when the id
        is taken, ``ConcurrencyError`` naming a handle that lost a race)."""

        def persist(prepared: list[Prepared]) -> StoredSession:
            return loading.create(
                self._store._ctx,
                session_id,
                header=header,
                seed=None,
                user_id=user_id,
                title=title,
                labels=labels,
                prepared=prepared,
            )

        created, done = await self._together(writes, persist, {})
        assert created is not None
        return AsyncStoredSession(created, self._runner), done

    async def _together(
        self,
        writes: Sequence[tuple[AsyncStoredSession, Iterable[Mapping[str, Any]]]],
        persist: Callable[[list[Prepared]], T] | None,
        heads: Mapping[str, int],
    ) -> tuple[T | None, list[list[SessionEvent]]]:
        """Prepare ``writes`` under their handles' locks, run ``persist`` on them (one
        transaction; None: ``persist_together``, skipped when there is nothing to write) and
        commit them to the handles; returns ``persist``'s result."""
        checked = check_together(self._store._ctx, writes, sync_of)
        for i, (handle, _, _) in enumerate(checked):
            if not isinstance(handle, AsyncStoredSession):
                raise InvalidArgumentError(
                    f"writes[{i}]: {handle!r} is not a handle of the async store",
                    argument="writes",
                )
        async with contextlib.AsyncExitStack() as locks:
            # Each handle's appends run one at a time; taken in id order, so no two calls wait
            # on each other's locks.
            for handle, _, _ in sorted(checked, key=lambda entry: entry[1].id):
                await locks.enter_async_context(handle._lock)
            for _, sync, _ in checked:
                expected = heads.get(sync.id)
                if expected is not None and sync.seq - 1 != expected:
                    raise ConcurrencyError(
                        f"session {sync.id!r}: the log moved past seq {expected} (its head "
                        f"is seq {sync.seq - 1}); reload and retry",
                        session_id=sync.id,
                        expected=expected,
                    )
            prepared = begin_together(checked)
            cancelled = False
            result: T | None = None
            try:
                writers = self._runner.writers
                if persist is None and prepared and writers is not None:
                    native = _Uninterrupted(persist_together_async(writers, prepared))
                    try:
                        await native  # its error, with nothing changed
                    finally:
                        cancelled = native.cancelled
                elif persist is not None or prepared:
                    persisted = self._runner.submit(persist or persist_together, prepared)
                    cancelled = await _settle(persisted)
                    result = persisted.result()  # the persist step's error, nothing changed
            except BaseException:
                abandon_all(prepared)
                raise
            commit_all(prepared)
        if cancelled:
            raise asyncio.CancelledError
        return result, committed_lists(writes, prepared)

    async def open_session(
        self, session_id: str, *, resume: bool = False, read_log: bool = True
    ) -> AsyncStoredSession:
        """A write handle on a stored session. Writes nothing unless ``resume=True``.

        Its synchronous readers are ``StoredSession``'s, so by default its whole log is read
        here (checked as a load checks it): ``events``, ``request_header()`` and ``fork()``
        then need no I/O on the loop. ``read_log=False`` gives the cheap write handle (the
        surface and the last event, as the sync store's ``open_session`` reads them) for a
        caller that only appends and reads the surface; it reads the rest with
        ``await handle.read_log()``.
        """
        handle = await self._handle(self._store.open_session, session_id)
        # The marker goes through the handle's own (natively awaited) append, as the sync
        # store's open_session appends it through the sync handle's.
        log = handle._sync._log
        if resume and handle.seq and log[len(log) - 1].type != END_SEED:
            await handle.append(END_SEED, {})
        if read_log:
            await handle.read_log()
        return handle

    async def fork_session(
        self, parent_id: str, *, boundary: int | None = None, child_id: str | None = None
    ) -> AsyncStoredSession:
        """Fork a stored session (SPEC §7.5); the child is written in one transaction."""
        fork = functools.partial(self._store.fork_session, boundary=boundary, child_id=child_id)
        return await self._handle(fork, parent_id)

    async def import_jsonl(self, path: str | os.PathLike[str] | IO[bytes]) -> str:
        """Store a JSONL session exactly as the file holds it, with the metadata its header
        carries; returns its id. A file object (binary mode) is read as it is given, as by
        ``SessionStore.import_jsonl``."""
        if self._runner.threaded or not isinstance(path, str | os.PathLike):
            return await self._runner.call(self._store.import_jsonl, path)
        loop = asyncio.get_running_loop()
        source = await loop.run_in_executor(None, JsonlReader, path)  # opens, reads the header
        source._fh = _OffloadedFile(source._fh, loop)  # type: ignore[assignment]
        return await self._runner.call(self._store._import_file, source)

    async def export_jsonl(self, session_id: str, path: str | os.PathLike[str] | IO[str]) -> int:
        """Write a session as JSONL; returns the number of events. A path is published whole
        or not at all, as by ``SessionStore.export_jsonl``."""
        if self._runner.threaded or not isinstance(path, str | os.PathLike):
            return await self._runner.call(self._store.export_jsonl, session_id, path)
        return await self._export_file(session_id, path, archive=False)

    async def _export_file(
        self, session_id: str, path: str | os.PathLike[str], *, archive: bool
    ) -> int:
        """Export to a path on the event loop (PostgreSQL): the file's I/O in the loop's
        executor, the reads awaited. ``archive``: a prune's (read from the primary, into a
        temporary file a re-run takes over)."""
        loop = asyncio.get_running_loop()
        publishing = published_file(path, reuse_temporary=archive)
        fh = await loop.run_in_executor(None, publishing.__enter__)
        out = _OffloadedFile(fh, loop)

        def export() -> int:
            count = self._store._export(session_id, out, primary=archive)  # type: ignore[arg-type]
            out.flush()
            return count

        try:
            count = await self._runner.call(export)
        except BaseException as exc:
            await loop.run_in_executor(None, publishing.__exit__, type(exc), exc, exc.__traceback__)
            raise
        await loop.run_in_executor(None, publishing.__exit__, None, None, None)
        return count

    async def prune(
        self,
        *,
        updated_before: int | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        archive_dir: str | os.PathLike[str] | None = None,
        dry_run: bool = False,
        progress: Callable[[PrunedSession], None] | None = None,
    ) -> PruneReport:
        """Delete whole sessions, oldest first, in bounded batches (see ``SessionStore.prune``):
        the same steps, each batch's I/O awaited in turn."""
        ctx = self._store._ctx
        request = retention.check_request(updated_before, user_id, labels, archive_dir, dry_run)
        steps = retention.prune_steps(ctx, request, progress)
        result: Any = None
        while not isinstance(step := retention.advance(steps, result), PruneReport):
            if isinstance(step, retention.ReadPage):
                result = await self._runner.call(retention.read_page, ctx, step.request, step.after)
            elif isinstance(step, retention.Archive):
                result = await self._archive(step.session_id, step.path)
            elif isinstance(step, retention.Delete):
                result = await self._runner.call(retention.delete_batch, ctx, step.batch)
            elif isinstance(step, retention.Pause):
                await asyncio.sleep(step.seconds)
                result = None
            else:
                result = await self._runner.call(retention.reclaim, ctx)
        return step

    async def _archive(self, session_id: str, path: os.PathLike[str]) -> int | None:
        if self._runner.threaded:
            return await self._runner.call(self._store._archive, session_id, path)
        try:
            return await self._export_file(session_id, path, archive=True)
        except SessionNotFoundError:
            return None

    # -- reading --------------------------------------------------------------------------

    async def events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[SessionEvent]:
        """An async iterator over a session's events in seq order, fetched page by page.

        Raises ``SessionNotFoundError`` here, not at the first step.
        """
        pages = await self._runner.call(
            functools.partial(self._store.events, from_seq=from_seq, to_seq=to_seq), session_id
        )
        return self._paged(pages, reader.STREAM_BATCH)

    async def _paged(self, items: Iterator[T], size: int) -> AsyncIterator[T]:
        """A sync iterator that does I/O as it advances, pulled ``size`` items per call."""

        def page() -> list[T]:
            return list(itertools.islice(items, size))

        while True:
            batch = await self._runner.call(page)
            for item in batch:
                yield item
            if len(batch) < size:
                return

    async def iter_sessions(
        self, *, parent: str | None = None, page_size: int = 500
    ) -> AsyncIterator[SessionInfo]:
        """An async iterator over every session, oldest-created first, a page at a time (see
        ``SessionStore.iter_sessions``); bad arguments are refused here."""
        pages = self._store.iter_sessions(parent=parent, page_size=page_size)  # no I/O yet
        return self._paged(pages, page_size)

    async def follow(
        self, session_id: str, *, after_seq: int = -1, timeout: float | None = None
    ) -> AsyncIterator[SessionEvent]:
        """Yield events as other writers commit them, in seq order, each once (an async
        iterator; ``SessionNotFoundError`` comes at its first step).

        PostgreSQL waits with LISTEN on psycopg's async connection; SQLite polls in the worker
        threads with an ``asyncio.sleep`` backoff. Returns after ``timeout`` seconds without
        a new event (``None``: never).
        """
        ctx = self._store._ctx
        after = seq_bound("after_seq", after_seq)
        timeout = timeout_arg(timeout)
        key = await self._runner.call(reader.follow_key, ctx, session_id)
        listener = await ctx.backend.async_listener(ctx, session_id, self._runner.call)
        try:
            machine, engine = reader.start_follow(
                ctx, session_id, after, timeout, listening=listener is not None
            )
            action = machine.start()
            while True:
                if isinstance(action, Read):
                    read = reader.events_after
                    events = await self._runner.call(
                        read, ctx, session_id, key, action.after_seq, engine
                    )
                    for event in events:
                        yield event
                    action = machine.read(events[-1].seq if events else None)
                elif isinstance(action, Wait):
                    assert listener is not None
                    await listener.wait(action.seconds, machine.wakes)
                    action = machine.waited()
                elif isinstance(action, Sleep):
                    await asyncio.sleep(action.seconds)
                    action = machine.waited()
                else:
                    return
        finally:
            if listener is not None:
                await listener.close()


def open_async_store(
    url: str = "sqlite:///sessions.db",
    *,
    schema: str = DEFAULT_SCHEMA,
    catalog: Catalog | None = None,
    tenant: str | None = None,
    distributed: bool | None = None,
    **options: Any,
) -> AsyncSessionStore:
    """A store for asyncio, opened (initialised when empty) when awaited or entered.

    ``async with open_async_store(url) as store:`` or ``store = await open_async_store(url)``
    (then ``await store.close()``). The options (``tenant`` and ``distributed`` included) are
    ``open_store``'s, with its errors.
    """
    return AsyncSessionStore(
        url,
        schema=schema,
        catalog=catalog,
        tenant=tenant,
        options={**options, "distributed": distributed},
    )
