"""``SessionStore``: sessions in SQL (SPEC §8). Each public method is one transaction."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import IO, Any, Literal

from sqlalchemy import Engine, make_url

from session_sql._gc import PAUSE_MIN_EVENTS, gc_paused
from session_sql._store import (
    connecting,
    listing,
    loading,
    parquet,
    reader,
    retention,
    transfer,
    vacuum,
    verifying,
)
from session_sql._store.database import read_tx, snapshot_tx, translate_errors, write_tx
from session_sql._store.metadata import UNSET, _Unset, check_labels, check_title
from session_sql._store.parquet import ParquetExport
from session_sql._store.retention import PrunedSession, PruneReport
from session_sql._store.schema import DEFAULT_SCHEMA
from session_sql._store.stats import StoreStats, collect_stats
from session_sql._store.stored import SessionInfo, frozen_header, listing_filters, listing_page
from session_sql._store.vacuum import VacuumReport
from session_sql._store.verifying import VerifyReport
from session_sql._store.writer import StoredSession, append_together
from session_sql.arguments import int_arg, last_arg, lookup_id, seq_bound, timeout_arg
from session_sql.catalog import Catalog
from session_sql.errors import SessionNotFoundError, StoreError
from session_sql.events import SessionEvent
from session_sql.jsonl import JsonlReader, published_file
from session_sql.jsonvalue import FrozenDict
from session_sql.messages import SurfaceMessage
from session_sql.repair import interrupted_turn_closers
from session_sql.session import DEFAULT_MAX_EVENT_BYTES, END_SEED, Clock, Session

__all__ = ["SessionInfo", "SessionStore", "VerifyReport", "open_store"]

_log = logging.getLogger(__name__)


class SessionStore:
    """A session store on SQLite or PostgreSQL; see ``open_store``."""

    def __init__(
        self,
        url: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        catalog: Catalog | None = None,
        clock: Clock | None = None,
        max_event_bytes: int | None = DEFAULT_MAX_EVENT_BYTES,
        create: bool = True,
        tenant: str | None = None,
        max_followers: int | None = None,
        replica_urls: Sequence[str] | None = None,
        distributed: bool | None = None,
        **engine_options: Any,
    ) -> None:
        self._ctx = ctx = connecting.connect(
            url,
            schema=schema,
            catalog=catalog,
            clock=clock,
            max_event_bytes=max_event_bytes,
            create=create,
            tenant=tenant,
            max_followers=max_followers,
            engine_options=engine_options,
            replica_urls=replica_urls,
            distributed=distributed,
        )
        self.url = url
        self.display_url: str = make_url(url).render_as_string(hide_password=True)
        """The URL as given, without its password: safe to print."""
        self.database_file: str | None = ctx.backend.database_file(ctx.engine)
        """The SQLite database file (``None`` in memory and on PostgreSQL)."""
        self.backend = ctx.backend.name
        self.schema = ctx.backend.target_schema(schema)
        self.tenant: str = ctx.tenant
        """The tenant whose sessions this store reads and writes (``""``: the default one)."""
        self.distributed: bool = ctx.distributed
        """Whether the store's tables are distributed over a Citus cluster."""

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def engine(self) -> Any:
        return self._ctx.engine

    @property
    def catalog(self) -> Catalog:
        return self._ctx.catalog

    def close(self) -> None:
        """Release every pooled connection; afterwards every call raises ``StoreError``.

        The store's handles and unfinished ``events``/``follow`` iterators fail the same way
        at their next database access. Closing twice is harmless.
        """
        connecting.close(self._ctx)

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        url = self._ctx.engine.url.render_as_string(hide_password=True)
        return f"SessionStore({url!r}" + (f", tenant={self.tenant!r})" if self.tenant else ")")

    # -- writing --------------------------------------------------------------------------

    def create_session(
        self,
        session_id: str | None = None,
        *,
        header: Mapping[str, Any] | None = None,
        seed: Sequence[SessionEvent | Mapping[str, Any]] | None = None,
        user_id: str | None = None,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> StoredSession:
        """Create a session (with its seed and end-of-seed marker) in one transaction.

        ``user_id``, ``title`` and ``labels`` are the session's metadata (see
        ``update_session``); a bad one raises ``InvalidArgumentError`` and nothing is written.
        The header key ``x-session-sql`` is reserved: exports carry the metadata under it.
        """
        return loading.create(
            self._ctx,
            session_id,
            header=header,
            seed=seed,
            user_id=user_id,
            title=title,
            labels=labels,
            prepared=(),
        )

    def append_together(
        self, writes: Sequence[tuple[StoredSession, Iterable[Mapping[str, Any]]]]
    ) -> list[list[SessionEvent]]:
        """Append to several sessions in one transaction: every batch commits or none does.

        ``writes`` pairs a handle of this store with ``append_many`` items, one pair per
        session. Each batch goes through its handle's whole pipeline (rules, surface,
        validators); nothing is written unless every handle is at the stored head, otherwise
        the one that lost raises (``ConcurrencyError`` naming it). Returns the committed
        events of each pair, in order. For state that several sessions share, updated with
        the event that changes it.
        """
        return append_together(self._ctx, writes)

    def open_session(self, session_id: str, *, resume: bool = False) -> StoredSession:
        """A write handle on a stored session. Writes nothing unless ``resume=True``.

        Costs O(surface), not O(log): it reads the session row, the surface with its events
        and the last event, checked against the row (``surface_digest``) instead of a replay;
        the rest of the log is read on first use of ``events``, ``request_header()`` or
        ``fork()``. ``load_session`` and ``verify`` replay the whole log.

        With ``resume`` (a process taking over an interrupted lifecycle) the end-of-seed marker
        is appended durably unless the log is empty or already ends with one.
        """
        handle = StoredSession._open(self._ctx, lookup_id(session_id))
        if resume and handle.seq and handle._log[-1].type != END_SEED:
            # first_live_seq stays the stored length at open time (§8.4): the marker, like
            # the one Session(seed=...) appends (§7.1), is the first live event.
            handle.append(END_SEED, {})
        return handle

    def fork_session(
        self, parent_id: str, *, boundary: int | None = None, child_id: str | None = None
    ) -> StoredSession:
        """Fork a stored session (SPEC §7.5); the child is written in one transaction.

        The child, in the same tenant, starts with the parent's ``user_id``, ``title`` and
        ``labels``.
        """
        return loading.fork(self._ctx, parent_id, boundary, child_id)

    def repair(self, session_id: str) -> list[SessionEvent]:
        """Close a turn left open by a crash (SPEC §7.4); returns the appended closers."""
        handle = self.open_session(session_id)
        return handle._append_events(interrupted_turn_closers(handle.events))

    def delete_session(self, session_id: str) -> None:
        """Delete a session with its events and surface rows.

        On SQLite the freed pages then go back to the file system as after a prune, once the
        free pages come to a vacuum step (1 MiB); smaller leftovers serve the next rows, or
        ``vacuum()`` gives them back.
        """
        lookup_id(session_id)
        st = self._ctx.statements
        with translate_errors(session_id), write_tx(self._ctx.engine) as conn:
            key = {"b_id": session_id, "b_key": reader.session_key(conn, self._ctx, session_id)}
            conn.execute(st.delete_id, key)
            if conn.execute(st.delete_session, key).rowcount != 1:
                raise SessionNotFoundError.for_session(session_id)
        self._ctx.keys.pop(session_id, None)
        self._reclaim()

    def _reclaim(self) -> None:
        """Give a delete's freed pages back to the file system, as a prune does (SQLite), once
        they come to a vacuum step's worth (a small delete leaves its pages for the next
        rows, or the next delete); the delete is committed, so a failure here only logs."""
        try:
            with translate_errors():
                ctx = self._ctx
                worth = ctx.backend.reclaimable_pages(ctx.engine) >= retention.VACUUM_PAGES
            if worth:
                retention.reclaim(self._ctx)
        except StoreError as exc:
            _log.warning("giving the freed space back failed (run session-sql vacuum): %s", exc)

    def vacuum(self, *, full: bool = False) -> VacuumReport:
        """Give the database's free space back, and measure the store before and after.

        SQLite: the incremental vacuum a prune runs (short steps; writers get in between);
        ``full`` rewrites the file with ``VACUUM`` under the write lock (needed once for a
        file made without incremental vacuum, which the report's notes say). PostgreSQL:
        ``VACUUM (ANALYZE)`` of the store's tables, online (their free space is reused by new
        rows); ``full`` runs ``VACUUM (FULL, ANALYZE)``, which locks them while it rewrites
        them. It covers every tenant (the tables are shared); on PostgreSQL the tables' owner
        must run it (PostgreSQL skips, with a warning, a table the role does not own).
        """
        return vacuum.run(self._ctx, full=full)

    def import_jsonl(self, path: str | os.PathLike[str] | IO[bytes]) -> str:
        """Store a JSONL session exactly as the file holds it (no marker added); returns its id.

        One streaming pass in one write transaction: each line is validated as it is read and
        the events go in in batches, so memory follows the surface, not the file. A bad line
        (``CorruptSessionError`` naming it) leaves nothing written. ``path`` may also be a file
        opened in binary mode, read from where it stands and left open.

        A header carrying ``x-session-sql`` (as every export does) restores the session's
        ``user_id``, ``title``, ``labels`` and ``updated_at``; the key itself is not stored.
        The session goes into this store's tenant, whatever tenant the file names.
        """
        with JsonlReader(path) as source:
            return self._import_file(source)

    def _import_file(self, source: JsonlReader) -> str:
        """Import an opened file, with the row its header's ``x-session-sql`` describes."""
        return transfer.import_file(self._ctx, source)

    def _refresh_statistics(self) -> None:
        """ANALYZE after a bulk write; the data is committed, so a failure only logs."""
        transfer.refresh_statistics(self._ctx)

    def export_jsonl(self, session_id: str, path: str | os.PathLike[str] | IO[str]) -> int:
        """Write a session as JSONL (header line, then one event per line); returns #events.

        The header line also carries the session's tenant, ``user_id``, ``title``, ``labels``
        and ``updated_at`` under the key ``x-session-sql``, so that ``import_jsonl`` restores
        them (a reader of the plain format keeps it as one more header key). The header and
        every event are read in one snapshot transaction, page by page: the
        export is one consistent state of the whole session, even while others append or
        delete it. A path is written under a unique temporary name, fsynced and renamed, so
        it holds a complete export or is left as it was (also when the export fails).
        """
        if isinstance(path, str | os.PathLike):
            with published_file(path) as fh:
                return self._export(session_id, fh)
        return self._export(session_id, path)

    def _export(self, session_id: str, out: IO[str], *, primary: bool = False) -> int:
        return transfer.export(self._ctx, session_id, out, primary=primary)

    def export_parquet(
        self, directory: str | os.PathLike[str], *, since: str | None = None
    ) -> ParquetExport:
        """Write the tenant's sessions as Parquet under ``directory``: one file per table
        (``sessions``, ``events``, ``messages``, ``tool_calls``, ``turns``), each
        ``directory/<table>/<export>.parquet``, read from one snapshot.

        Every row carries the tenant and the public session id (``gen_ai.conversation.id``);
        columns follow the OpenTelemetry GenAI names where one exists. ``since`` takes the
        ``cursor`` a previous export returned: only what was committed after that export is
        written (events, their messages, the calls and turns they start, and the row of each
        session that is new or was appended to), so the files of a chain of exports hold every
        event once, whatever writers did meanwhile. Each file is written under a hidden
        temporary name, fsynced and renamed. Needs the ``parquet`` extra (pyarrow);
        a bad ``since`` raises ``InvalidArgumentError`` before anything is written.
        """
        return parquet.export_parquet(self._ctx, directory, since)

    def _export_parquet(
        self, directory: str | os.PathLike[str], since: str | None, offload: parquet.Offload
    ) -> ParquetExport:
        """``export_parquet`` with its file I/O run by ``offload`` (the async store's)."""
        return parquet.export_parquet(self._ctx, directory, since, offload)

    def prune(
        self,
        *,
        updated_before: int | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        archive_dir: str | os.PathLike[str] | None = None,
        dry_run: bool = False,
        progress: Callable[[PrunedSession], None] | None = None,
    ) -> PruneReport:
        """Delete the tenant's whole sessions that match every selector given, oldest update
        first, in bounded batches (each its own short transaction); returns what was done.

        Selectors: ``updated_before`` (ms since the epoch: last append before it),
        ``user_id``, ``labels`` (every pair must match); at least one is required. With
        ``archive_dir`` each session is first exported there as ``<stem>~<tag>.jsonl``
        (``retention.archive_file_name``: the ``jsonl_file_name(id)`` stem, then a digest of
        the tenant and the session's incarnation, so no other session's archive is ever
        overwritten), fsynced and published whole, so ``import_jsonl`` gives it back
        identical, metadata included. A session written to after it was selected is kept
        (``report.kept``). Forks are copies: deleting a parent leaves its children whole.
        ``dry_run`` selects and measures, and changes nothing. ``progress`` sees each
        session as it goes. Interrupted and run again, it finishes the same work (the same
        archive file is rewritten whole, and a killed run's temporary file taken over). On
        SQLite the freed pages go back to the file system in short steps
        afterwards (stores created by this version; docs/operations.md).
        Bad arguments raise ``InvalidArgumentError`` before anything is read or written.
        """
        request = retention.check_request(updated_before, user_id, labels, archive_dir, dry_run)
        return retention.run(self._ctx, request, progress, self._archive)

    def _archive(self, session_id: str, path: os.PathLike[str]) -> int | None:
        """A prune's archive of one session, read from the primary (``None``: it is gone);
        its temporary file is one a re-run takes over if this run is killed."""
        try:
            with published_file(path, reuse_temporary=True) as fh:
                return self._export(session_id, fh, primary=True)
        except SessionNotFoundError:
            return None

    # -- reading --------------------------------------------------------------------------

    def load_session(self, session_id: str) -> Session:
        """A detached, fully validated in-memory replay of a stored session (writes nothing).

        Equal to ``Session(seed=<stored log>, header=<stored header>)``, marker included; the
        log is validated once, while it is read.
        """
        return loading.detached(self._ctx, loading.load(self._ctx, session_id), seeded=True)

    def messages(self, session_id: str, *, last: int | None = None) -> list[Any]:
        """The messages a model sees, from the ``surface`` side table (never replays).

        ``last=N`` gives the final N messages, reading the surface from its end: the cost
        follows N, not the length of the surface or of the log. ``last=0`` gives ``[]``; a
        negative or non-int ``last`` raises ``InvalidArgumentError``.
        """
        return reader.messages(self._ctx, lookup_id(session_id), last_arg(last))

    def surface(self, session_id: str, *, last: int | None = None) -> tuple[int, ...]:
        """The surface's event seqs in order (``last=N``: the final N), from the side table."""
        return reader.surface(self._ctx, lookup_id(session_id), last_arg(last))

    def surface_messages(self, session_id: str, *, last: int | None = None) -> list[SurfaceMessage]:
        """Every surface node as ``SurfaceMessage(pos, seq, type, message)``, in surface order.

        ``message`` is None for a node that projects to none (an assistant/message with empty
        content). ``last=N`` gives the final N nodes, at a cost that follows N.
        """
        return reader.surface_messages(self._ctx, lookup_id(session_id), last_arg(last))

    def _surface_items(
        self, session_id: str, last: int | None, item_of: Callable[[SurfaceMessage], Any]
    ) -> list[Any]:
        """``item_of(node)`` of each surface node (or of the last ``last``) that gives one
        (not None), in order: an integration's read of its items, which copies them out.

        The nodes of a long read are plain values the caller owns (decoded so, never frozen;
        a short tail's are the kept frozen ones: ``reader.surface_messages``), and the items
        are built here, with the collector paused (``_gc``), so that the nodes are freed
        before the items are handed over: the collector then scans the items alone.
        """
        session_id, last = lookup_id(session_id), last_arg(last)
        long_read = last is None or last >= PAUSE_MIN_EVENTS
        with gc_paused() if long_read else nullcontext():
            nodes = reader.surface_messages(self._ctx, session_id, last, plain=True)
            items = [item for item in map(item_of, nodes) if item is not None]
            del nodes
        return items

    def events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[SessionEvent]:
        """Stream a session's events in seq order (``to_seq`` exclusive), bounded memory."""
        start = seq_bound("from_seq", from_seq)
        bound = None if to_seq is None else seq_bound("to_seq", to_seq)
        engine = self._ctx.read_engine()  # every page from one database
        self._header(session_id, engine)  # fail now, not at the first next()
        return reader.stream_events(self._ctx, session_id, start, bound, engine)

    def follow(
        self, session_id: str, *, after_seq: int = -1, timeout: float | None = None
    ) -> Iterator[SessionEvent]:
        """Yield events as other processes commit them (see ``reader.follow``)."""
        after = seq_bound("after_seq", after_seq)
        wait = timeout_arg(timeout)
        self._header(session_id)
        return reader.follow(self._ctx, session_id, after, wait)

    def list_sessions(
        self,
        *,
        limit: int = 100,
        after: SessionInfo | str | None = None,
        parent: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        order: Literal["updated", "created"] = "updated",
        id_prefix: str | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        reverse: bool = False,
        include_hidden: bool = True,
    ) -> list[SessionInfo]:
        """The tenant's sessions newest-updated first (ties by id), paged by ``after`` (an info
        or an id).

        ``order="created"`` lists oldest-created first (ties by id) instead: an order no write
        changes, for complete scans (see ``iter_sessions``). ``limit`` must be >= 0; a limit
        beyond what any table holds is clamped. ``id_prefix`` keeps the sessions whose id
        starts with it, compared exactly (case and all), so that a short prefix can name a
        session as in git. ``user_id`` keeps that user's sessions; ``labels`` keeps the
        sessions carrying every given label with the given value. ``reverse=True`` lists in
        the opposite order (oldest-updated, or newest-created, first), paged the same way.
        ``include_hidden=False`` leaves out the sessions labelled ``session_sql.hidden=true``
        (``session_sql.metadata.HIDDEN_LABEL``), as ``session-sql ls`` does unless asked.
        """
        page = listing_page(limit, order, reverse)
        wanted = listing_filters(parent, created_after, created_before, id_prefix, user_id, labels)
        return listing.list_sessions(self._ctx, wanted, include_hidden, page, order, after)

    def count_sessions(
        self,
        *,
        parent: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        id_prefix: str | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        include_hidden: bool = True,
    ) -> int:
        """How many of the tenant's sessions ``list_sessions`` lists with these filters and
        no limit: a page's "of N" (``session-sql ls`` prints it)."""
        wanted = listing_filters(parent, created_after, created_before, id_prefix, user_id, labels)
        return listing.count_sessions(self._ctx, wanted, include_hidden)

    def iter_sessions(
        self, *, parent: str | None = None, page_size: int = 500
    ) -> Iterator[SessionInfo]:
        """Every session, oldest-created first (ties by id), read a page at a time.

        For complete scans (verify every session, copy a store): the order is one that appends
        never change, so a session that exists for the whole scan is yielded exactly once, even
        while other processes write. Each page is its own read; memory stays bounded.
        """
        int_arg("page_size", page_size, minimum=1)
        return listing.iter_sessions(self._ctx, parent, min(page_size, 100_000))

    def head_seq(self, session_id: str) -> int:
        """The last seq of a session (-1 when its log is empty), from its row."""
        lookup_id(session_id)
        with translate_errors(session_id):
            # By the kept key: one statement on the idle connection; else by the id.
            rows = reader.by_kept_key_alone(self._ctx, session_id, self._ctx.compiled.head_seq)
        if rows:
            return int(rows[0][0])
        with translate_errors(session_id), read_tx(self._ctx.engine) as conn:
            key = reader.session_key(conn, self._ctx, session_id)
            head = conn.execute(self._ctx.statements.head_seq, {"b_key": key}).scalar()
        if head is None:
            raise SessionNotFoundError.for_session(session_id)
        return int(head)

    def session_info(self, session_id: str) -> SessionInfo:
        """One session's row: bookkeeping and metadata (``SessionNotFoundError`` when missing)."""
        with translate_errors(session_id), read_tx(self._ctx.engine) as conn:
            return listing.session_info(conn, self._ctx, session_id)

    def update_session(
        self,
        session_id: str,
        *,
        title: str | _Unset | None = UNSET,
        labels: Mapping[str, str] | _Unset | None = UNSET,
    ) -> SessionInfo:
        """Change a session's metadata (not part of its log); returns the updated info.

        Only the arguments given change: ``title=None`` clears the title, ``labels``
        replaces every label (``None`` or ``{}``: none). Neither the log nor ``updated_at``
        (which follows the log) changes. Raises ``SessionNotFoundError`` or
        ``InvalidArgumentError`` (nothing written).
        """
        changes: dict[str, Any] = {}
        if not isinstance(title, _Unset):
            changes["title"] = check_title(title)
        if not isinstance(labels, _Unset):
            changes["labels"] = check_labels(labels, "labels")
        lookup_id(session_id)
        with translate_errors(session_id), write_tx(self._ctx.engine) as conn:
            if changes:
                key = reader.session_key(conn, self._ctx, session_id)
                conn.execute(self._ctx.statements.update_metadata, {"b_key": key, **changes})
            return listing.session_info(conn, self._ctx, session_id)

    def stats(self, session_id: str | None = None) -> StoreStats:
        """Aggregates over the tenant's sessions, or one session, computed by SQL.

        Events a fork inherited are counted once, in the session that wrote them.
        """
        if session_id is not None:
            lookup_id(session_id)
        with translate_errors(session_id), snapshot_tx(self._ctx.read_engine()) as conn:
            return collect_stats(conn, self._ctx.tables, self._ctx.tenant, session_id)

    def verify(self, session_id: str) -> VerifyReport:
        """Replay the log and compare its fold with the ``surface`` table and the session row.

        The log is streamed in pages from one snapshot and folded as it comes: memory follows
        the surface, not the length of the log.
        """
        return self._verify(session_id)

    def _verify(
        self, session_id: str, seen: Callable[[SessionEvent], None] | None = None
    ) -> VerifyReport:
        """``verify``, showing each event read to ``seen`` (see ``verifying.verify``)."""
        return verifying.verify(self._ctx, session_id, seen)

    # -- internals ------------------------------------------------------------------------

    def _header(self, session_id: str, engine: Engine | None = None) -> FrozenDict:
        """The session's header, read on ``engine`` (default: the primary)."""
        lookup_id(session_id)
        query = self._ctx.statements.session_header
        with translate_errors(session_id), read_tx(engine or self._ctx.engine) as conn:
            key = reader.session_key(conn, self._ctx, session_id)
            row = conn.execute(query, {"b_key": key}).first()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        return frozen_header(session_id, row.header)


def open_store(
    url: str = "sqlite:///sessions.db",
    *,
    schema: str = DEFAULT_SCHEMA,
    catalog: Catalog | None = None,
    tenant: str | None = None,
    distributed: bool | None = None,
    **options: Any,
) -> SessionStore:
    """Open (initialising when empty) a store; refuses another build's schema.

    ``distributed`` (PostgreSQL with Citus, docs/citus.md): when the store is initialised,
    ``None`` (default) distributes its tables where the ``citus`` extension is installed,
    ``True`` requires it (``ConfigurationError`` without it), ``False`` creates plain tables
    even there. An existing store is opened as it is, unless ``True`` or ``False`` asks for
    the other kind (``ConfigurationError``); a store distributed only in part is refused
    (``SchemaMismatchError``). With ``create``, a distributed store whose schema lacks this
    build's append function (``session_sql_append_<digest>``) gets it, where the role may
    create in the schema.

    ``options``: ``create`` (default True: an empty database or missing SQLite file is
    initialised; False: it is a ``StoreError`` and nothing is created — for read-only use),
    ``synchronous`` ("FULL" or "NORMAL", SQLite), ``busy_timeout_ms`` (SQLite),
    ``lock_timeout_ms`` (PostgreSQL: how long a statement waits for a row lock before
    ``StoreError``; default 5000, 0 waits forever), ``pool_size``, ``max_event_bytes``
    (default 16 MiB; None for no limit), ``max_followers`` (PostgreSQL: how many ``follow``
    iterators may listen at once, all on the store's one ``LISTEN`` connection, none holding
    a pooled one while it waits; default 10,000; one more is ``StoreError``), ``clock``, and any
    ``sqlalchemy.create_engine`` keyword. A database with other tables and no session_sql
    tables is refused (``SchemaVersionError``), never written to. A URL or option that
    cannot work raises ``ConfigurationError`` saying what would.

    ``tenant`` (default ``""``): the store reads, lists, forks, exports and writes only this
    tenant's sessions; session ids are unique per tenant.

    ``replica_urls`` (PostgreSQL; default None): ``postgresql://`` URLs of hot standbys of
    ``url``, each with a pool of the store's options. The read-only calls (``messages``,
    ``surface``, ``surface_messages``, ``events``, ``load_session``, ``list_sessions``,
    ``iter_sessions``, ``follow``, ``export_jsonl``, ``stats``) are served by them in turn
    and see their replay lag; every write, the schema gate, ``head_seq``, ``session_info``,
    ``verify`` and the write handles (``open_session``, ``create_session``, their
    ``refresh``) use the primary, so a handle reads its own writes. ``follow`` listens on the
    primary and reads the standby, waiting for it to replay what a wake-up names. An SQLite
    store refuses the option (``ConfigurationError``).
    """
    return SessionStore(
        url, schema=schema, catalog=catalog, tenant=tenant, distributed=distributed, **options
    )
