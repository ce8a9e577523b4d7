"""The fast path: the store's writes and single-statement reads on DBAPI connections, with
compiled statements.

SQLAlchemy Core builds every statement (``context.Statements``); they are compiled once per
store and executed on a pooled DBAPI cursor, which takes the per-statement Core overhead off
the interactive path. This module is the one the rest of the store calls: :func:`append` (and
:func:`append_parts`), :func:`insert_session` and :class:`BulkWriter` (a new session's rows,
``bulk``), :func:`surface_tail` (the tail read), :func:`fetch_rows` (the page reads of a
load), and :func:`append_async` / :func:`read_new_async` (the async store's, on a psycopg
``AsyncConnection``). The transactions themselves are the dialects' (``appends/sqlite.py``,
``appends/postgresql.py``, ``appends/postgresql_async.py``), sharing what
the package holds, the rule that says what a failed append means included; the store's
backend names its own (``Backend.appends``). Every write's connection is checked out of
the pool for one transaction and returned, whatever thread runs it; a tail read runs on the
store's idle connection when it is free.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection

from session_sql._store import bulk, statistics
from session_sql._store.bulk import INSERT_CHUNK
from session_sql._store.context import Compiled, StoreContext
from session_sql._store.transactions import AppendDialect, AppendPart, SurfaceOp
from session_sql.events import SessionEvent
from session_sql.surface import Transition

if TYPE_CHECKING:
    from session_sql._store.backends.postgresql.appending import COPY_MIN_ROWS
    from session_sql._store.backends.postgresql.appending_async import (
        StoredHead,
        append_async,
        read_new_async,
    )
    from session_sql._store.idle import IdleConnection

__all__ = [
    "COPY_MIN_ROWS",
    "INSERT_CHUNK",
    "AppendPart",
    "BulkWriter",
    "StoredHead",
    "SurfaceOp",
    "append",
    "append_async",
    "append_parts",
    "dialect",
    "fetch_rows",
    "insert_events",
    "insert_session",
    "read_new_async",
    "surface_tail",
]

_POSTGRESQL_NAMES: Final = {
    "COPY_MIN_ROWS": "appending",
    "StoredHead": "appending_async",
    "append_async": "appending_async",
    "read_new_async": "appending_async",
}
"""PostgreSQL's names, by module of ``appends``: imported when first asked for, so that a
process using only SQLite never imports psycopg (docs/performance.md, "CLI startup")."""


def __getattr__(name: str) -> Any:
    """A PostgreSQL name of ``_POSTGRESQL_NAMES``, imported and kept here (one import: later
    lookups are plain attribute reads, on the async store's append path)."""
    module = _POSTGRESQL_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(
        importlib.import_module(f"session_sql._store.backends.postgresql.{module}"), name
    )
    globals()[name] = value
    return value


def dialect(ctx: StoreContext) -> AppendDialect:
    """The module with ``ctx``'s database's append transactions (``Backend.appends``)."""
    return ctx.backend.appends


def append(
    ctx: StoreContext,
    session_id: str,
    session_key: int,
    advance: dict[str, Any],
    events: list[SessionEvent],
    transitions: list[Transition],
    next_pos: int,
    head: int,
) -> bool:
    """Run one append transaction; False (nothing written) when the head update matched no row.

    ``advance`` binds ``Statements.advance``. Raises ``InvalidEventError`` for an event above
    the store's limits before the transaction starts, and ``CorruptSessionError`` (nothing
    written) when rows already sit past the head.
    """
    part = AppendPart(session_id, session_key, advance, events, transitions, next_pos, head)
    return append_parts(ctx, [part]) is None


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append to several sessions in one transaction: all commit or none does.

    Returns ``None`` once committed, or the index of the first part whose head update matched
    no row (nothing written: that session's writer lost a race). Raises as :func:`append`;
    what a failure means is ``appends.classify``'s rule, the same for every dialect.
    """
    lost = dialect(ctx).append_parts(ctx, parts)
    if lost is None:
        statistics.appended(ctx, sum(len(p.events) for p in parts))
    return lost


def insert_session(
    ctx: StoreContext,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart] = (),
) -> bulk.Inserted:
    """``bulk.insert_session`` with ``ctx``'s dialect: a whole new session in one transaction,
    with appends to other sessions in it."""
    inserted = bulk.insert_session(ctx, dialect(ctx), row, event_rows, surface_rows, parts)
    if inserted.lost is None:  # (else nothing was written)
        statistics.appended(ctx, len(event_rows) + sum(len(p.events) for p in parts))
    return inserted


def insert_events(conn: Connection, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """``bulk.insert_events`` with ``ctx``'s dialect: a new session's event rows, all of them."""
    bulk.insert_events(conn, ctx, dialect(ctx), rows)


class BulkWriter(bulk.BulkWriter):
    """``bulk.BulkWriter`` with ``ctx``'s dialect: an import's rows of a new session."""

    def __init__(self, conn: Connection, ctx: StoreContext) -> None:
        super().__init__(conn, ctx, dialect(ctx))


def fetch_rows(conn: Connection, stmt: Compiled, params: dict[str, Any]) -> list[Any]:
    """The rows (plain tuples) of a compiled read on ``conn``, inside its transaction.

    The driver SQL goes through ``exec_driver_sql`` (so connection events still see it), and
    the rows are fetched from the DBAPI cursor: a page of 1,000 events skips SQLAlchemy's
    result processing (columns are read as the driver returns them: see
    ``stored.event_from_row``).
    """
    result = conn.exec_driver_sql(stmt.sql, stmt.bind(params))
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


def surface_tail(ctx: StoreContext, session_id: str, before: int, limit: int) -> list[Any]:
    """``(pos, seq, type, data)`` of the last ``limit`` surface rows before position ``before``,
    newest first: the tail read, one statement on a DBAPI cursor.

    One statement reads one consistent snapshot on both backends, so it needs no explicit
    transaction; this takes the Core connection and BEGIN/COMMIT overhead off the interactive
    read (a framework's ``get_items(limit=10)``, an agent's ``messages(last=20)``). It runs on
    the store's idle connection (``backends.idle.IdleConnection``: no checkout, no pre-ping round
    trip), or, when that is in use, not kept, broken, or checkouts are watched by listeners,
    on a pooled connection.
    """
    c = ctx.compiled.surface_tail
    params = c.bind({**c.defaults, "b_id": session_id, "b_before": before, "b_limit": limit})
    engine, idle = ctx.reads()  # a store-level read: a standby's when the store has them
    rows = None if engine.pool.dispatch.checkout else _on_idle(idle, c.sql, params)
    if rows is not None:
        return rows
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        dialect(ctx).begin_read(ctx, raw)
        cur.execute(c.sql, params)
        return list(cur.fetchall())
    finally:
        raw.close()  # back to the pool, which resets (rolls back) it


def _on_idle(idle: IdleConnection, sql: str, params: Any) -> list[Any] | None:
    """The rows of one statement run on the idle connection; None when it is not available
    or the read failed (``borrow`` then discards the connection; the pool reads again)."""
    try:
        with idle.borrow() as dbapi:
            if dbapi is None:
                return None
            cursor = dbapi.cursor()
            try:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()
    except Exception:  # a broken connection, most likely: the pool's path reports the rest
        return None
