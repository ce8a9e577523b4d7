"""Moving a whole session in and out: ``import_jsonl`` (and ``migrate``'s copies) and
``export_jsonl``."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any, Protocol

from sqlalchemy import Text, cast, select, update
from sqlalchemy.exc import SQLAlchemyError

from session_sql._store import reader
from session_sql._store.bulk import insert_session_row
from session_sql._store.context import StoreContext
from session_sql._store.database import analyze, snapshot_tx, translate_errors, write_tx
from session_sql._store.importer import ImportFold
from session_sql._store.listing import own
from session_sql._store.loading import new_row
from session_sql._store.metadata import Metadata, export_header, split_export_header
from session_sql._store.rows import check_header_limits
from session_sql._store.stored import frozen_header, labels_value
from session_sql.arguments import lookup_id
from session_sql.errors import CorruptSessionError, SessionExistsError, SessionNotFoundError
from session_sql.jsonl import JsonlReader, write_jsonl
from session_sql.jsonvalue import FrozenDict
from session_sql.surface import Replay

ANALYZE_AFTER_IMPORTED_EVENTS = 10_000
"""An import of at least this many events refreshes the planner statistics (ANALYZE)."""
_log = logging.getLogger(__name__)
NO_METADATA = Metadata()


class ImportSource(Protocol):
    """What ``import_source`` stores: a header, then the events in order (a ``JsonlReader``,
    or a session of another store that ``migrate`` reads)."""

    header: FrozenDict

    def raw_events(self) -> Iterator[tuple[int, Any]]:
        """``(position, event)`` pairs; the position is what ``corrupt`` names (a line, a seq)."""
        ...

    def corrupt(self, position: int, exc: Exception, session_id: str) -> CorruptSessionError:
        """The error for a bad event at ``position``, saying where it was read."""
        ...

    def close(self) -> None: ...


def import_file(ctx: StoreContext, source: JsonlReader) -> str:
    """Import an opened file, with the row its header's ``x-session-sql`` describes."""
    try:
        source.header, exported = split_export_header(source.header)
    except BaseException:
        source.close()
        raise
    if exported is None:
        return import_source(ctx, source)
    return import_source(ctx, source, metadata=exported.metadata, updated_at=exported.updated_at)


def import_source(
    ctx: StoreContext,
    source: ImportSource,
    *,
    metadata: Metadata = NO_METADATA,
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
    s = ctx.tables.sessions
    try:
        header = source.header
        session_id = str(header["id"])
        check_header_limits(header, ctx.max_event_bytes)  # before the transaction
        with translate_errors(session_id), write_tx(ctx.engine) as conn:
            taken = conn.execute(ctx.statements.key_of, {"b_id": session_id})
            if taken.first() is not None:
                raise SessionExistsError.for_session(session_id)
            # The row goes first (the events reference it); its counters are set at the end.
            now = ctx.clock() if updated_at is None else updated_at
            row = new_row(ctx.tenant, header, 0, -1, 0, 0, 0, now, uuid.uuid4().hex, metadata)
            key = insert_session_row(conn, ctx, row)
            folded = ImportFold(conn, ctx, session_id, key, bool(header["isSeeded"]))
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
                .where(own(ctx, s), s.c.session_key == key)
                .values(
                    head_seq=folded.state.length - 1,
                    surface_next_pos=folded.state.next_pos,
                    replace_generation=folded.state.replace_generation,
                    surface_digest=folded.state.digest,
                    inherited_event_count=folded.inherited,
                )
            )
        ctx.keys[session_id] = key
        if folded.state.length:  # after the commit (see Backend.wake)
            ctx.backend.wake(ctx, [(session_id, folded.state.length - 1)])
        if analyze and folded.state.length >= ANALYZE_AFTER_IMPORTED_EVENTS:
            refresh_statistics(ctx)
    finally:
        source.close()
    return session_id


def refresh_statistics(ctx: StoreContext) -> None:
    """ANALYZE after a bulk write; the data is committed, so a failure only logs."""
    t = ctx.tables
    try:
        analyze(ctx.engine, [t.sessions, t.events, t.surface])
    except SQLAlchemyError as exc:
        _log.warning("ANALYZE after the import failed (run it yourself): %s", exc)


def export(ctx: StoreContext, session_id: str, out: IO[str], *, primary: bool = False) -> int:
    """Write one session to ``out`` from one snapshot (see ``SessionStore.export_jsonl``);
    ``primary``: read the primary, never a standby (a prune's archive, checked against the
    row it deletes)."""
    lookup_id(session_id)
    s = ctx.tables.sessions
    engine = ctx.engine if primary else ctx.read_engine()
    with translate_errors(session_id), snapshot_tx(engine) as conn:
        key = reader.session_key(conn, ctx, session_id)
        row = conn.execute(
            select(
                # As JSON text: parsed by ``stored.frozen_header``, never by the driver.
                cast(s.c.header, Text).label("header"),
                s.c.head_seq,
                s.c.updated_at,
                s.c.user_id,
                s.c.title,
                s.c.labels,
            ).where(own(ctx, s), s.c.session_key == key)
        ).first()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        metadata = Metadata(row.user_id, row.title, labels_value(session_id, row.labels))
        header = export_header(
            frozen_header(session_id, row.header),
            ctx.tenant,
            metadata,
            row.updated_at,
            events=row.head_seq + 1,
        )
        events = reader.snapshot_events(conn, ctx, session_id, key, row.head_seq)
        return write_jsonl(out, header, events)
