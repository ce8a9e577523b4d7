"""``SessionStore``: sessions in SQL (SPEC §8). Each public method is one transaction."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    Connection,
    Text,
    and_,
    cast,
    delete,
    event,
    func,
    insert,
    make_url,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError

from session_sql._gc import PAUSE_MIN_EVENTS, gc_paused
from session_sql._store import fastpath, reader
from session_sql._store.context import StoreContext
from session_sql._store.engine import (
    DEFAULT_MAX_OVERFLOW,
    DEFAULT_POOL_SIZE,
    analyze,
    database_label,
    enable_wal,
    is_sqlite,
    make_engine,
    read_tx,
    scope_transactions,
    snapshot_tx,
    translate_errors,
    write_tx,
)
from session_sql._store.gate import ensure_schema
from session_sql._store.importer import ImportFold
from session_sql._store.metadata import (
    EXPORT_KEY,
    UNSET,
    Metadata,
    _Unset,
    check_labels,
    check_tenant,
    check_title,
    check_user_id,
    export_header,
    split_export_header,
)
from session_sql._store.opening_failures import explain_open_failure
from session_sql._store.rows import (
    check_header_limits,
    event_from_row,
    event_values,
    frozen_header,
    stored_problems,
)
from session_sql._store.schema import DEFAULT_SCHEMA, tables_for
from session_sql._store.stats import StoreStats, collect_stats
from session_sql._store.writer import Prepared, StoredSession, append_together
from session_sql.catalog import Catalog, default_catalog
from session_sql.errors import (
    ConfigurationError,
    CorruptSessionError,
    InvalidArgumentError,
    InvalidHeaderError,
    InvalidSeedError,
    PermanentStoreError,
    SessionExistsError,
    SessionNotFoundError,
    SessionSQLError,
    StoreError,
)
from session_sql.events import SessionEvent, is_session_id
from session_sql.jsonl import JsonlReader, published_file, write_jsonl
from session_sql.jsonvalue import FrozenDict
from session_sql.messages import SurfaceMessage
from session_sql.repair import interrupted_turn_closers
from session_sql.session import (
    DEFAULT_MAX_EVENT_BYTES,
    END_SEED,
    Clock,
    Session,
    fold_checked,
    fork_seed,
    now_ms,
    replay_checked,
)
from session_sql.surface import Replay, replay

ANALYZE_AFTER_IMPORTED_EVENTS = 10_000
"""An import of at least this many events refreshes the planner statistics (ANALYZE)."""
_log = logging.getLogger(__name__)
_NO_METADATA = Metadata()
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


class SessionInfo(BaseModel):
    """One row of ``list_sessions``: the session row's bookkeeping and metadata."""

    model_config = ConfigDict(frozen=True)

    id: str
    created_at: int
    updated_at: int
    head_seq: int
    parent_session: str | None
    tenant: str = ""
    user_id: str | None = None
    title: str | None = None
    labels: dict[str, str] = {}

    @property
    def event_count(self) -> int:
        """How many events the log holds (``head_seq + 1``)."""
        return self.head_seq + 1


class VerifyReport(BaseModel):
    """The outcome of ``verify``: ``ok`` when the log, the surface table and the row agree."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    ok: bool
    events: int
    problems: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


class ImportSource(Protocol):
    """What ``_import`` stores: a header, then the events in order (a ``JsonlReader``, or a
    session of another store that ``migrate`` reads)."""

    header: FrozenDict

    def raw_events(self) -> Iterator[tuple[int, Any]]:
        """``(position, event)`` pairs; the position is what ``corrupt`` names (a line, a seq)."""
        ...

    def corrupt(self, position: int, exc: Exception, session_id: str) -> CorruptSessionError:
        """The error for a bad event at ``position``, saying where it was read."""
        ...

    def close(self) -> None: ...


class _Loaded(NamedTuple):
    """A stored session read back: its row and its fully validated log."""

    header: FrozenDict
    log: list[SessionEvent]
    inherited_event_count: int
    incarnation: str
    state: Replay
    metadata: Metadata


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
        **engine_options: Any,
    ) -> None:
        _check_options(schema, catalog, clock, max_event_bytes)
        followers = _followers_option(max_followers, engine_options)
        tenant = check_tenant(tenant)
        engine = make_engine(url, **engine_options)
        target = None if is_sqlite(engine) else schema
        file = engine.url.database if target is None else None
        try:
            if not create:
                _require_sqlite_file(engine.url)
            ensure_schema(engine, target, create=create)
            with translate_errors(database=database_label(engine)):
                enable_wal(engine)
            scope_transactions(engine, tenant)
        except (TypeError, ValueError) as exc:
            engine.dispose()
            if isinstance(exc, SessionSQLError) or not engine_options:
                raise
            # A create_engine keyword of the wrong kind shows up only at the first connect.
            raise ConfigurationError(
                f"a store option is invalid ({', '.join(sorted(engine_options))}): {exc}",
                option="engine_options",
            ) from exc
        except StoreError as exc:
            engine.dispose()
            clearer = explain_open_failure(engine, exc)
            if clearer is None:
                raise
            raise clearer from exc
        except BaseException:
            engine.dispose()
            raise
        self.url = url
        self.display_url: str = make_url(url).render_as_string(hide_password=True)
        """The URL as given, without its password: safe to print."""
        self.database_file: str | None = None if file in (None, "", ":memory:") else file
        """The SQLite database file (``None`` in memory and on PostgreSQL)."""
        self.backend = engine.dialect.name
        self.schema = target
        self.tenant: str = tenant
        """The tenant whose sessions this store reads and writes (``""``: the default one)."""
        self._ctx = StoreContext(
            engine=engine,
            tables=tables_for(target),
            catalog=default_catalog() if catalog is None else catalog,
            clock=now_ms if clock is None else clock,
            max_event_bytes=max_event_bytes,
            channel=None if target is None else target,
            max_followers=followers,
            tenant=tenant,
        )

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
        engine = self._ctx.engine
        if not event.contains(engine, "do_connect", _refuse_closed):
            # Without this the engine would quietly open a new pool on its next use.
            event.listen(engine, "do_connect", _refuse_closed)
        self._ctx.idle.close()
        engine.dispose()

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
        return self._create(
            session_id, header=header, seed=seed, user_id=user_id, title=title, labels=labels
        )

    def _create(
        self,
        session_id: str | None = None,
        *,
        header: Mapping[str, Any] | None = None,
        seed: Sequence[SessionEvent | Mapping[str, Any]] | None = None,
        user_id: str | None = None,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
        prepared: Sequence[Prepared] = (),
    ) -> StoredSession:
        """``create_session`` with ``prepared`` batches of other sessions (``begin_together``'s)
        in its transaction: all commit or none does. The handles are not touched: the caller
        commits them. For a session created with changes to state other sessions hold (the
        ADK service's app and user state); a lost race raises as ``append_together`` does."""
        ctx = self._ctx
        if isinstance(header, Mapping) and EXPORT_KEY in header:
            raise InvalidHeaderError(
                f"header key {EXPORT_KEY!r} is reserved: an export carries the session's "
                "tenant and metadata under it (pass user_id, title and labels instead)"
            )
        metadata = Metadata(
            check_user_id(user_id), check_title(title), check_labels(labels, "labels")
        )
        session = Session(
            session_id,
            seed=seed,
            header=header,
            catalog=ctx.catalog,
            clock=ctx.clock,
            max_event_bytes=ctx.max_event_bytes,
        )
        log = list(session.events)
        state = session._state  # the seed's replay: the session is not used again
        incarnation = self._insert_session(session.header, log, 0, state, metadata, prepared)
        handle = StoredSession._attach(ctx, session.header, log, 0, incarnation, state)
        handle.first_live_seq = session.first_live_seq
        return handle

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
        handle = StoredSession._open(self._ctx, _lookup_id(session_id))
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
        loaded = self._load(parent_id)
        ctx = self._ctx
        parent = self._detached(loaded, seeded=False)
        log, header, inherited = fork_seed(parent, boundary, child_id, ctx.clock())
        state = Replay()
        for _ in replay(log, state, ctx.catalog, log.__getitem__):
            pass
        incarnation = self._insert_session(header, log, inherited, state, loaded.metadata)
        return StoredSession._attach(ctx, header, log, inherited, incarnation, state)

    def repair(self, session_id: str) -> list[SessionEvent]:
        """Close a turn left open by a crash (SPEC §7.4); returns the appended closers."""
        handle = self.open_session(session_id)
        return handle._append_events(interrupted_turn_closers(handle.events))

    def delete_session(self, session_id: str) -> None:
        """Delete a session with its events and surface rows."""
        _lookup_id(session_id)
        s = self._ctx.tables.sessions
        with translate_errors(session_id), write_tx(self._ctx.engine) as conn:
            gone = conn.execute(delete(s).where(self._own(s), s.c.id == session_id)).rowcount
        if gone != 1:
            raise SessionNotFoundError.for_session(session_id)

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
        try:
            source.header, exported = split_export_header(source.header)
        except BaseException:
            source.close()
            raise
        if exported is None:
            return self._import(source)
        return self._import(source, metadata=exported.metadata, updated_at=exported.updated_at)

    def _import(
        self,
        source: ImportSource,
        *,
        metadata: Metadata = _NO_METADATA,
        updated_at: int | None = None,
        check: Callable[[Replay, int], None] | None = None,
        analyze: bool = True,
    ) -> str:
        """Store the session ``source`` reads, in one write transaction (``import_jsonl``; the
        async store and ``migrate`` hand it theirs).

        ``metadata`` and ``updated_at`` (default: now) go into the new row. ``check`` sees the
        fold of the whole log and its inherited prefix before the commit: raising there writes
        nothing. ``analyze``:
        refresh the planner statistics after a large import (a caller importing many sessions
        does it once at the end instead).
        """
        ctx = self._ctx
        s = ctx.tables.sessions
        try:
            header = source.header
            session_id = str(header["id"])
            check_header_limits(header, ctx.max_event_bytes)  # before the transaction
            with translate_errors(session_id), write_tx(ctx.engine) as conn:
                taken = conn.execute(ctx.statements.exists, {"b_id": session_id})
                if taken.first() is not None:
                    raise SessionExistsError.for_session(session_id)
                # The row goes first (the events reference it); its counters are set at the end.
                now = ctx.clock() if updated_at is None else updated_at
                row = _session_row(
                    ctx.tenant, header, 0, -1, 0, 0, 0, now, uuid.uuid4().hex, metadata
                )
                conn.execute(insert(s), row)
                folded = ImportFold(conn, ctx, session_id, bool(header["isSeeded"]))
                try:
                    for position, raw in source.raw_events():
                        folded.add(raw, position, source)
                    folded.flush()
                finally:
                    folded.close()
                if check is not None:
                    check(folded.state, folded.inherited)
                conn.execute(
                    update(s)
                    .where(self._own(s), s.c.id == session_id)
                    .values(
                        head_seq=folded.state.length - 1,
                        surface_next_pos=folded.state.next_pos,
                        replace_generation=folded.state.replace_generation,
                        surface_digest=folded.state.digest,
                        inherited_event_count=folded.inherited,
                    )
                )
                if folded.state.length and ctx.channel is not None:
                    # Wakes followers; delivered at commit, dropped on rollback.
                    payload = ctx.payload(session_id, folded.state.length - 1)
                    conn.execute(
                        ctx.statements.notify, {"b_channel": ctx.channel, "b_payload": payload}
                    )
            if analyze and folded.state.length >= ANALYZE_AFTER_IMPORTED_EVENTS:
                self._refresh_statistics()
        finally:
            source.close()
        return session_id

    def _refresh_statistics(self) -> None:
        """ANALYZE after a bulk write; the data is committed, so a failure only logs."""
        t = self._ctx.tables
        try:
            analyze(self._ctx.engine, [t.sessions, t.events, t.surface])
        except SQLAlchemyError as exc:
            _log.warning("ANALYZE after the import failed (run it yourself): %s", exc)

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

    def _export(self, session_id: str, out: IO[str]) -> int:
        _lookup_id(session_id)
        s = self._ctx.tables.sessions
        with translate_errors(session_id), snapshot_tx(self._ctx.engine) as conn:
            row = conn.execute(
                select(
                    _header_text(s),
                    s.c.head_seq,
                    s.c.updated_at,
                    s.c.user_id,
                    s.c.title,
                    s.c.labels,
                ).where(self._own(s), s.c.id == session_id)
            ).first()
            if row is None:
                raise SessionNotFoundError.for_session(session_id)
            metadata = Metadata(row.user_id, row.title, _labels_value(session_id, row.labels))
            header = export_header(
                frozen_header(session_id, row.header), self._ctx.tenant, metadata, row.updated_at
            )
            events = reader.snapshot_events(conn, self._ctx, session_id, row.head_seq)
            return write_jsonl(out, header, events)

    # -- reading --------------------------------------------------------------------------

    def load_session(self, session_id: str) -> Session:
        """A detached, fully validated in-memory replay of a stored session (writes nothing).

        Equal to ``Session(seed=<stored log>, header=<stored header>)``, marker included; the
        log is validated once, while it is read.
        """
        return self._detached(self._load(session_id), seeded=True)

    def messages(self, session_id: str, *, last: int | None = None) -> list[Any]:
        """The messages a model sees, from the ``surface`` side table (never replays).

        ``last=N`` gives the final N messages, reading the surface from its end: the cost
        follows N, not the length of the surface or of the log. ``last=0`` gives ``[]``; a
        negative or non-int ``last`` raises ``InvalidArgumentError``.
        """
        return reader.messages(self._ctx, _lookup_id(session_id), _last_arg(last))

    def surface(self, session_id: str, *, last: int | None = None) -> tuple[int, ...]:
        """The surface's event seqs in order (``last=N``: the final N), from the side table."""
        return reader.surface(self._ctx, _lookup_id(session_id), _last_arg(last))

    def surface_messages(self, session_id: str, *, last: int | None = None) -> list[SurfaceMessage]:
        """Every surface node as ``SurfaceMessage(pos, seq, type, message)``, in surface order.

        ``message`` is None for a node that projects to none (an assistant/message with empty
        content). ``last=N`` gives the final N nodes, at a cost that follows N.
        """
        return reader.surface_messages(self._ctx, _lookup_id(session_id), _last_arg(last))

    def events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[SessionEvent]:
        """Stream a session's events in seq order (``to_seq`` exclusive), bounded memory."""
        start = _seq_bound("from_seq", from_seq)
        bound = None if to_seq is None else _seq_bound("to_seq", to_seq)
        self._header(session_id)  # fail now, not at the first next()
        return reader.stream_events(self._ctx, session_id, start, bound)

    def follow(
        self, session_id: str, *, after_seq: int = -1, timeout: float | None = None
    ) -> Iterator[SessionEvent]:
        """Yield events as other processes commit them (see ``reader.follow``)."""
        after = _seq_bound("after_seq", after_seq)
        wait = _timeout_arg(timeout)
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
    ) -> list[SessionInfo]:
        """The tenant's sessions newest-updated first (ties by id), paged by ``after`` (an info
        or an id).

        ``order="created"`` lists oldest-created first (ties by id) instead: an order no write
        changes, for complete scans (see ``iter_sessions``). ``limit`` must be >= 0; a limit
        beyond what any table holds is clamped. ``id_prefix`` keeps the sessions whose id
        starts with it, compared exactly (case and all), so that a short prefix can name a
        session as in git. ``user_id`` keeps that user's sessions; ``labels`` keeps the
        sessions carrying every given label with the given value.
        """
        limit = min(_int_arg("limit", limit, minimum=0), _MAX_BOUND)
        if id_prefix is not None and type(id_prefix) is not str:
            raise InvalidArgumentError(
                f"id_prefix must be a str, got {type(id_prefix).__name__}", argument="id_prefix"
            )
        user = check_user_id(user_id, argument="user_id")
        wanted = check_labels(labels, "labels")
        if order not in ("updated", "created"):
            raise InvalidArgumentError(
                f"order must be 'updated' or 'created', got {order!r}", argument="order"
            )
        for name, bound in (("created_after", created_after), ("created_before", created_before)):
            if bound is not None:
                _int_arg(name, bound)
        s = self._ctx.tables.sessions
        key = s.c.updated_at if order == "updated" else s.c.created_at
        query = (
            select(*_info_columns(s))
            .where(self._own(s))
            .order_by(*((key.desc(), s.c.id.desc()) if order == "updated" else (key, s.c.id)))
        )
        if user is not None:
            query = query.where(s.c.user_id == user)
        if wanted and not self._ctx.sqlite:
            query = query.where(type_coerce(s.c.labels, JSONB).contains(wanted))  # the GIN index
        else:
            for name, value in wanted.items():
                query = query.where(s.c.labels[name].as_string() == value)
        if parent is not None:
            if not is_session_id(parent):
                return []  # no session can have it as its parent
            query = query.where(s.c.parent_session == parent)
        if id_prefix:
            if not id_prefix.isprintable():
                return []  # no session id has it (and PostgreSQL text cannot hold a NUL)
            # substr, not LIKE: SQLite's LIKE ignores case and both treat % and _ as wildcards.
            query = query.where(func.substr(s.c.id, 1, len(id_prefix)) == id_prefix)
        if created_after is not None:
            query = query.where(s.c.created_at >= _clamp(created_after))
        if created_before is not None:
            query = query.where(s.c.created_at < _clamp(created_before))
        with translate_errors(), read_tx(self._ctx.engine) as conn:
            if after is not None:
                cursor = after if isinstance(after, SessionInfo) else self._info(conn, after)
                if order == "updated":
                    query = query.where(
                        or_(
                            s.c.updated_at < cursor.updated_at,
                            and_(s.c.updated_at == cursor.updated_at, s.c.id < cursor.id),
                        )
                    )
                else:
                    query = query.where(
                        or_(
                            s.c.created_at > cursor.created_at,
                            and_(s.c.created_at == cursor.created_at, s.c.id > cursor.id),
                        )
                    )
            rows = conn.execute(query.limit(limit)).all()
        return [_info_from_row(row) for row in rows]

    def iter_sessions(
        self, *, parent: str | None = None, page_size: int = 500
    ) -> Iterator[SessionInfo]:
        """Every session, oldest-created first (ties by id), read a page at a time.

        For complete scans (verify every session, copy a store): the order is one that appends
        never change, so a session that exists for the whole scan is yielded exactly once, even
        while other processes write. Each page is its own read; memory stays bounded.
        """
        _int_arg("page_size", page_size, minimum=1)
        return self._iter_sessions(parent, min(page_size, 100_000))

    def _iter_sessions(self, parent: str | None, page_size: int) -> Iterator[SessionInfo]:
        after: SessionInfo | None = None
        while True:
            page = self.list_sessions(limit=page_size, after=after, parent=parent, order="created")
            yield from page
            if len(page) < page_size:
                return
            after = page[-1]

    def head_seq(self, session_id: str) -> int:
        """The last seq of a session (-1 when its log is empty), from its row."""
        _lookup_id(session_id)
        s = self._ctx.tables.sessions
        with translate_errors(session_id), read_tx(self._ctx.engine) as conn:
            head = conn.execute(
                select(s.c.head_seq).where(self._own(s), s.c.id == session_id)
            ).scalar()
        if head is None:
            raise SessionNotFoundError.for_session(session_id)
        return int(head)

    def session_info(self, session_id: str) -> SessionInfo:
        """One session's row: bookkeeping and metadata (``SessionNotFoundError`` when missing)."""
        with translate_errors(session_id), read_tx(self._ctx.engine) as conn:
            return self._info(conn, session_id)

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
        _lookup_id(session_id)
        s = self._ctx.tables.sessions
        with translate_errors(session_id), write_tx(self._ctx.engine) as conn:
            if changes:
                conn.execute(update(s).where(self._own(s), s.c.id == session_id).values(changes))
            return self._info(conn, session_id)

    def stats(self, session_id: str | None = None) -> StoreStats:
        """Aggregates over the tenant's sessions, or one session, computed by SQL.

        Events a fork inherited are counted once, in the session that wrote them.
        """
        if session_id is not None:
            _lookup_id(session_id)
        with translate_errors(session_id), snapshot_tx(self._ctx.engine) as conn:
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
        """``verify``, showing each event read to ``seen`` (``migrate`` compares the copied log
        with its source in the same pass)."""
        problems: list[str] = []
        ctx = self._ctx
        _lookup_id(session_id)
        state = Replay(keep_surface_events=True)
        marker: SessionEvent | None = None  # the event at seq inherited_event_count, if folded
        count = 0
        with translate_errors(session_id), snapshot_tx(ctx.engine) as conn:
            row = self._session_row(conn, session_id)
            table = self._surface_table(conn, session_id)
            rows = reader.event_rows_in(conn, ctx, session_id)  # all, past the head too

            def events() -> Iterator[SessionEvent]:
                nonlocal count
                for r in rows:
                    count += 1
                    event = event_from_row(session_id, r)
                    if seen is not None:
                        seen(event)
                    yield event

            try:
                for step in replay_checked(events(), state, ctx.catalog, parsed=True):
                    if step.event.seq == row.inherited_event_count:
                        marker = step.event
            except SessionSQLError as exc:
                problems.append(f"log: {exc}")
                count += sum(1 for _ in rows)  # the report still counts every stored event
        if not problems:
            problems.extend(stored_problems(row, state, table))
        try:
            header = frozen_header(session_id, row.header)
        except SessionSQLError as exc:
            problems.append(f"header: {exc}")
            header = FrozenDict()
        for column, said in (
            ("id", header.get("id")),
            ("format_version", header.get("version")),
            ("created_at", header.get("createdAt")),
            ("parent_session", header.get("parentSession")),
        ):
            if header and getattr(row, column) != said:
                problems.append(
                    f"sessions.{column} is {getattr(row, column)!r}, header says {said!r}"
                )
        inherited = row.inherited_event_count
        if inherited and not (
            header.get("isSeeded") is True
            and marker is not None
            and marker.type == END_SEED
            and marker.data == {"inherited": True}
        ):
            problems.append(
                f"sessions.inherited_event_count is {inherited}, but seq {inherited} is not the "
                "end of an inherited prefix"
            )
        return VerifyReport(
            session_id=session_id, ok=not problems, events=count, problems=tuple(problems)
        )

    # -- internals ------------------------------------------------------------------------

    def _own(self, table: Any) -> Any:
        """The condition that keeps ``table``'s rows of this store's tenant."""
        return table.c.tenant == self._ctx.statements.tenant_param

    def _info(self, conn: Connection, session_id: str) -> SessionInfo:
        _lookup_id(session_id)
        s = self._ctx.tables.sessions
        row = conn.execute(
            select(*_info_columns(s)).where(self._own(s), s.c.id == session_id)
        ).first()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        return _info_from_row(row)

    def _header(self, session_id: str) -> FrozenDict:
        _lookup_id(session_id)
        query = self._ctx.statements.session_header
        with translate_errors(session_id), read_tx(self._ctx.engine) as conn:
            row = conn.execute(query, {"b_id": session_id}).first()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        return frozen_header(session_id, row.header)

    def _session_row(self, conn: Connection, session_id: str) -> Any:
        """The session row (``header`` as JSON text); ``SessionNotFoundError`` when missing."""
        row = conn.execute(self._ctx.statements.session_row, {"b_id": session_id}).first()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        return row

    def _surface_table(self, conn: Connection, session_id: str) -> list[tuple[int, int]]:
        """The ``surface`` rows as ``(pos, event_seq)`` in ``pos`` order."""
        query = self._ctx.statements.surface_rows
        return [(pos, seq) for pos, seq in conn.execute(query, {"b_id": session_id}).all()]

    def _detached(self, loaded: _Loaded, *, seeded: bool) -> Session:
        """An in-memory session over a loaded log (``seeded``: add the end-of-seed marker)."""
        ctx = self._ctx
        return Session._from_checked(
            loaded.header,
            loaded.log,
            loaded.inherited_event_count,
            ctx.catalog,
            ctx.clock,
            ctx.max_event_bytes,
            state=loaded.state,
            seeded=seeded,
        )

    def _load(self, session_id: str) -> _Loaded:
        """Read and fully validate a stored session (its log up to the row's head).

        Row and log come from one snapshot, and each event is planned once. A long log is
        read with the cyclic collector paused, as a big batch is built (see ``_gc``): every
        object it builds is kept in the log.
        """
        _lookup_id(session_id)
        ctx = self._ctx
        log: list[SessionEvent] = []
        state = Replay()
        with translate_errors(session_id), snapshot_tx(ctx.engine) as conn:
            row = self._session_row(conn, session_id)
            header = frozen_header(session_id, row.header)
            rows = reader.event_rows_in(
                conn, ctx, session_id, row.head_seq, batch=reader.LOAD_BATCH
            )
            long_log = row.head_seq + 1 >= PAUSE_MIN_EVENTS
            try:
                with gc_paused() if long_log else nullcontext():
                    fold_checked(
                        map(functools.partial(event_from_row, session_id), rows),
                        log,
                        state,
                        ctx.catalog,
                        parsed=True,
                    )
            except InvalidSeedError as exc:
                raise CorruptSessionError(
                    f"session {session_id!r} seq {exc.seq}: stored event is invalid: {exc}",
                    session_id=session_id,
                    seq=exc.seq,
                ) from exc
        metadata = Metadata(row.user_id, row.title, _labels_value(session_id, row.labels))
        return _Loaded(header, log, row.inherited_event_count, row.incarnation, state, metadata)

    def _insert_session(
        self,
        header: FrozenDict,
        log: list[SessionEvent],
        inherited_event_count: int,
        state: Replay,
        metadata: Metadata,
        prepared: Sequence[Prepared] = (),
    ) -> str:
        """Write a whole new session in one transaction (with ``prepared``, see ``_create``);
        returns its incarnation (new at every creation, so a recreated session differs).
        ``state`` is the replay of ``log``: its rows and counters are what gets stored."""
        ctx = self._ctx
        session_id = str(header["id"])
        surface_rows = state.rows()
        check_header_limits(header, ctx.max_event_bytes)  # the limits, before the transaction
        event_rows = [event_values(ctx.tenant, session_id, e, ctx.max_event_bytes) for e in log]
        incarnation = uuid.uuid4().hex
        row = _session_row(
            ctx.tenant,
            header,
            inherited_event_count,
            len(log) - 1,
            state.next_pos,
            state.replace_generation,
            state.digest,
            ctx.clock(),
            incarnation,
            metadata,
        )
        parts = [handle._append_part(events, moves) for handle, events, moves in prepared]
        with translate_errors(session_id):
            failed = fastpath.insert_session(ctx, row, event_rows, surface_rows, parts)
        if failed is not None:
            loser = prepared[failed][0]
            with translate_errors(loser.id), read_tx(ctx.engine) as conn:
                loser._raise_lost_race(conn)
        return incarnation


def _session_row(
    tenant: str,
    header: FrozenDict,
    inherited_event_count: int,
    head_seq: int,
    surface_next_pos: int,
    replace_generation: int,
    surface_digest: int,
    updated_at: int,
    incarnation: str,
    metadata: Metadata,
) -> dict[str, Any]:
    """The ``sessions`` row of a new session."""
    return {
        "tenant": tenant,
        "id": str(header["id"]),
        "format_version": header["version"],
        "created_at": header["createdAt"],
        "parent_session": header.get("parentSession"),
        "inherited_event_count": inherited_event_count,
        "header": header,
        "head_seq": head_seq,
        "surface_next_pos": surface_next_pos,
        "replace_generation": replace_generation,
        "surface_digest": surface_digest,
        "updated_at": updated_at,
        "incarnation": incarnation,
        "user_id": metadata.user_id,
        "title": metadata.title,
        "labels": dict(metadata.labels),
    }


def _info_columns(s: Any) -> list[Any]:
    """The ``sessions`` columns a ``SessionInfo`` is built from."""
    return [
        s.c.id,
        s.c.created_at,
        s.c.updated_at,
        s.c.head_seq,
        s.c.parent_session,
        s.c.tenant,
        s.c.user_id,
        s.c.title,
        s.c.labels,
    ]


def _info_from_row(row: Any) -> SessionInfo:
    values = row._asdict()
    values["labels"] = _labels_value(row.id, row.labels)
    return SessionInfo.model_validate(values)


def _labels_value(session_id: str, raw: Any) -> dict[str, str]:
    """A stored ``labels`` value as a dict; ``CorruptSessionError`` when it is not one."""
    if isinstance(raw, str):  # a driver that hands JSON back as text
        raw = json.loads(raw)
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise CorruptSessionError(
            f"session {session_id!r}: stored labels are not an object of strings: {raw!r}",
            session_id=session_id,
        )
    return dict(raw)


def _refuse_closed(*_args: Any) -> None:
    raise PermanentStoreError.closed("open_store")


def _check_options(schema: object, catalog: object, clock: object, max_event_bytes: object) -> None:
    """Refuse an unusable store option with ``ConfigurationError`` naming it."""
    if not isinstance(schema, str) or _SCHEMA_NAME.match(schema) is None:
        raise ConfigurationError(
            "schema must be a plain identifier (letters, digits, '_', at most 63 characters, "
            f"not starting with a digit), got {schema!r}",
            option="schema",
        )
    if catalog is not None and not isinstance(catalog, Catalog):
        raise ConfigurationError(
            f"catalog must be a Catalog (e.g. DEFAULT_CATALOG.extend(...)), not {catalog!r}",
            option="catalog",
        )
    if clock is not None and not callable(clock):
        raise ConfigurationError(
            f"clock must be a callable returning epoch milliseconds, not {clock!r}",
            option="clock",
        )
    if max_event_bytes is not None and (
        isinstance(max_event_bytes, bool)
        or not isinstance(max_event_bytes, int)
        or max_event_bytes < 1
    ):
        raise ConfigurationError(
            f"max_event_bytes must be an int >= 1 or None (no limit), not {max_event_bytes!r}",
            option="max_event_bytes",
        )


_MAX_BOUND = 2**62
"""Beyond this no seq or row count can exist, and every driver binds it as a BIGINT."""


def _int_arg(name: str, value: object, *, minimum: int | None = None) -> int:
    """An int argument (not a bool), at least ``minimum``; ``InvalidArgumentError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"{name} must be an int, not {type(value).__name__} {value!r}", argument=name
        )
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, got {value}", argument=name)
    return value


def _followers_option(max_followers: object, engine_options: Mapping[str, Any]) -> int:
    """The bound on a store's listening followers: ``max_followers``, by default as many as
    the pool may open (``pool_size`` + ``max_overflow``): however many followers its callers
    start, they add no more server connections than the pool itself may open."""
    if max_followers is None:
        pool = engine_options.get("pool_size", DEFAULT_POOL_SIZE)
        overflow = engine_options.get("max_overflow", DEFAULT_MAX_OVERFLOW)
        # Checked by the engine, not here; an unbounded overflow (-1) adds nothing.
        pool = pool if isinstance(pool, int) else DEFAULT_POOL_SIZE
        overflow = overflow if isinstance(overflow, int) else DEFAULT_MAX_OVERFLOW
        return max(1, pool + max(0, overflow))
    if isinstance(max_followers, bool) or not isinstance(max_followers, int) or max_followers < 1:
        raise ConfigurationError(
            "max_followers must be an int >= 1 (how many follow iterators may listen at "
            f"once) or None (pool_size + max_overflow), not {max_followers!r}",
            option="max_followers",
        )
    return max_followers


def _last_arg(last: object) -> int | None:
    """A tail read's ``last``: None (everything) or an int >= 0, clamped to a BIGINT."""
    return None if last is None else min(_int_arg("last", last, minimum=0), _MAX_BOUND)


def _clamp(value: int) -> int:
    return max(-_MAX_BOUND, min(value, _MAX_BOUND))


def _seq_bound(name: str, seq: object) -> int:
    """A seq bound, clamped to what a BIGINT holds (beyond it, no seq can exist anyway)."""
    return max(-1, min(_int_arg(name, seq), _MAX_BOUND))


def _timeout_arg(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgumentError(
            f"timeout must be a number of seconds or None, not {timeout!r}", argument="timeout"
        )
    if not timeout >= 0:  # also refuses NaN
        raise InvalidArgumentError(f"timeout must be >= 0, got {timeout}", argument="timeout")
    return float(timeout)


def _lookup_id(session_id: Any) -> str:
    """Check an id about to be looked up; raises ``SessionNotFoundError`` for a malformed one.

    No session can have such an id, and the driver must not see it: a lone surrogate cannot
    be encoded, and PostgreSQL refuses to compare text with an int.
    """
    if not is_session_id(session_id):
        raise SessionNotFoundError(
            f"session {session_id!r} not found: not a valid session id "
            "(1–128 printable characters)",
            session_id=session_id,
        )
    return session_id


def _header_text(sessions: Any) -> Any:
    """The header column as JSON text: parsed by ``rows.frozen_header``, never by the driver."""
    return cast(sessions.c.header, Text).label("header")


def open_store(
    url: str = "sqlite:///sessions.db",
    *,
    schema: str = DEFAULT_SCHEMA,
    catalog: Catalog | None = None,
    tenant: str | None = None,
    **options: Any,
) -> SessionStore:
    """Open (initialising when empty) a store; refuses another build's schema.

    ``options``: ``create`` (default True: an empty database or missing SQLite file is
    initialised; False: it is a ``StoreError`` and nothing is created — for read-only use),
    ``synchronous`` ("FULL" or "NORMAL", SQLite), ``busy_timeout_ms`` (SQLite),
    ``lock_timeout_ms`` (PostgreSQL: how long a statement waits for a row lock before
    ``StoreError``; default 5000, 0 waits forever), ``pool_size``, ``max_event_bytes``
    (default 16 MiB; None for no limit), ``max_followers`` (PostgreSQL: how many ``follow``
    iterators may hold their own ``LISTEN`` connection at once; default ``pool_size`` +
    ``max_overflow``; one more is ``StoreError``), ``clock``, and any
    ``sqlalchemy.create_engine`` keyword. A database with other tables and no session_sql
    tables is refused (``SchemaVersionError``), never written to. A URL or option that
    cannot work raises ``ConfigurationError`` saying what would.

    ``tenant`` (default ``""``): the store reads, lists, forks, exports and writes only this
    tenant's sessions; session ids are unique per tenant.
    """
    return SessionStore(url, schema=schema, catalog=catalog, tenant=tenant, **options)


def _require_sqlite_file(url: URL) -> None:
    """With ``create=False``, a missing SQLite file is an error; connecting would create it."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return
    database = parsed.database or ""
    path = database.removeprefix("file:") if parsed.query.get("uri") else database
    if path in ("", ":memory:") or not Path(path).exists():
        raise PermanentStoreError.no_store(database or ":memory:", "the file does not exist")
