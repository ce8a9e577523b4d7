"""Writing a new session's rows: a whole session in one transaction (:func:`insert_session`,
with appends to other sessions in it), and an import's batches (:class:`BulkWriter`).

The dialect's inserts come from its module (``appends.AppendDialect``), which ``fastpath``
picks; so does the appends' outcome (``appends.classify``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, insert

from session_sql._store.context import StoreContext
from session_sql._store.database import write_tx
from session_sql._store.rows import (
    EVENT_VALUE_COLUMNS,
    NEW_SESSION_KEY,
    SURFACE_COLUMNS,
    with_session_key,
)
from session_sql._store.transactions import (
    AppendDialect,
    AppendPart,
    Check,
    classify,
    event_rows,
    first_short,
    queue_head,
    surface_ops,
    surface_upkeep,
    whole,
)
from session_sql.errors import SessionExistsError, StoreError

INSERT_CHUNK = 1000


class _LostRaceError(Exception):
    """Inside :func:`insert_session`: part ``index``'s head update matched no row."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class Inserted(NamedTuple):
    """What :func:`insert_session` did."""

    lost: int | None
    """``None`` once committed, or the index of the first part whose head update matched no
    row (nothing written)."""
    session_key: int
    """The new session's key (meaningless when ``lost`` is set)."""


def insert_session_row(conn: Connection, ctx: StoreContext, row: Mapping[str, Any]) -> int:
    """Insert a new ``sessions`` row in ``conn``'s transaction; returns its ``session_key``
    (assigned by the database: an identity on PostgreSQL, the rowid on SQLite)."""
    s = ctx.tables.sessions
    return int(conn.execute(insert(s).returning(s.c.session_key), dict(row)).scalar_one())


def insert_session(
    ctx: StoreContext,
    dialect: AppendDialect,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart] = (),
) -> Inserted:
    """Write a whole new session (its ``sessions`` row, events, surface rows) in one transaction,
    with the appends ``parts`` to other sessions in it (as ``fastpath.append_parts`` does them).

    ``event_rows`` are ``rows.event_values`` rows (the JSON text already serialised and
    checked; their ``session_key`` is replaced by the new row's); raises
    ``SessionExistsError`` when the id is taken.
    """
    try:
        key = _insert_session(ctx, dialect, row, event_rows, surface_rows, parts)
    except _LostRaceError as lost:
        return Inserted(lost.index, NEW_SESSION_KEY)
    return Inserted(None, key)


def _insert_session(
    ctx: StoreContext,
    dialect: AppendDialect,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart],
) -> int:
    t = ctx.tables
    session_id = str(row["id"])
    with write_tx(ctx.engine) as conn:
        taken = conn.execute(ctx.statements.exists, {"b_id": session_id})
        if taken.first() is not None:
            raise SessionExistsError.for_session(session_id)
        key = insert_session_row(conn, ctx, row)
        for i in range(0, len(event_rows), INSERT_CHUNK):
            chunk = with_session_key(event_rows[i : i + INSERT_CHUNK], key)
            insert_events(conn, ctx, dialect, chunk)
        for i in range(0, len(surface_rows), INSERT_CHUNK):
            conn.execute(
                insert(t.surface),
                [
                    {"session_key": key, "pos": pos, "event_seq": seq, "tenant": ctx.tenant}
                    for pos, seq in surface_rows[i : i + INSERT_CHUNK]
                ],
            )
        for i, part in enumerate(parts):
            heads, checks = _append_in(conn, ctx, dialect, part)
            if not whole([part], heads, checks):
                # Raises CorruptSessionError for rows past the head; either way the whole
                # transaction rolls back.
                classify([part], [h.rowcount for h in heads], at=first_short(checks))
                raise _LostRaceError(i)
    # After the commit: the wake-ups' transaction writes nothing (see Backend.wake).
    woken = [(session_id, int(row["head_seq"]))] if event_rows else []
    ctx.backend.wake(ctx, woken + [(p.session_id, p.head) for p in parts])
    return key


def _append_in(
    conn: Connection, ctx: StoreContext, dialect: AppendDialect, part: AppendPart
) -> tuple[list[Any], list[Check]]:
    """One append part in ``conn``'s transaction, statement by statement, up to the first
    that says it cannot be written: its head update cursor and counted inserts, for
    ``appends.whole`` and ``appends.classify``."""
    raw = conn.connection
    heads: list[Any] = []
    if queue_head(ctx, raw, part, heads).rowcount != 1:
        return heads, []
    rows = event_rows(ctx, part)
    cur = raw.cursor()
    try:
        dialect.insert_rows(cur, ctx, rows)
        checks: list[Check] = [(cur, len(rows), 0)]
        if cur.rowcount != len(rows):
            return heads, checks
        ops = surface_ops(ctx, part.session_key, part.transitions, part.next_pos)
        surface_upkeep(ctx, raw, cur, part, ops, 0, checks)
        checks = checks[1:]  # cur's count is the upkeep's now
    finally:
        cur.close()
    return heads, checks


def insert_events(
    conn: Connection, ctx: StoreContext, dialect: AppendDialect, rows: Sequence[tuple[Any, ...]]
) -> None:
    """Insert ``rows.event_values`` rows of a new session in ``conn``'s transaction, on its
    DBAPI connection. Raises ``StoreError`` unless every row went in."""
    if not rows:
        return
    cursor = conn.connection.cursor()
    try:
        dialect.insert_rows(cursor, ctx, rows)
        if cursor.rowcount != len(rows):  # a new session's seqs cannot be taken
            raise StoreError(f"inserted {cursor.rowcount} of {len(rows)} event rows")
    finally:
        cursor.close()


class BulkWriter:
    """Rows of a new session, written in its transaction on ``conn`` (an import's).

    SQLite: ``executemany`` of the prepared inserts. PostgreSQL: ``COPY`` when row-level
    security does not apply to this role (an owner's: COPY FROM refuses a table under row
    security) and the driver is the sync one; otherwise one ``INSERT … unnest`` statement
    per batch of events and ``executemany`` of the surface insert. Every batch must go in
    whole (``StoreError``).
    """

    def __init__(self, conn: Connection, ctx: StoreContext, dialect: AppendDialect) -> None:
        self.ctx = ctx
        self.dialect = dialect
        self.cursor = conn.connection.cursor()
        self.copy = dialect.copy_allowed(self.cursor, ctx)
        if self.copy:  # PostgreSQL's (its appends are loaded: ``dialect`` is them)
            from session_sql._store.backends.postgresql.appending import copy_statement  # noqa: PLC0415

            self._copy_statement = copy_statement

    def close(self) -> None:
        self.cursor.close()

    def events(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows.event_values`` rows."""
        if not rows:
            return
        if self.copy:
            self._copy(self.ctx.tables.events, EVENT_VALUE_COLUMNS, rows)
            return
        self.dialect.insert_rows(self.cursor, self.ctx, rows)
        self._check(len(rows), "event")

    def surface(self, session_key: int, rows: Sequence[tuple[int, int]]) -> None:
        """Insert the surface rows ``(pos, event_seq)`` of the session ``session_key``."""
        if not rows:
            return
        tenant = self.ctx.tenant
        values = [(session_key, pos, seq, tenant) for pos, seq in rows]
        if self.copy:
            self._copy(self.ctx.tables.surface, SURFACE_COLUMNS, values)
            return
        self.dialect.insert_nodes(self.cursor, self.ctx, values)
        self._check(len(rows), "surface")

    def _copy(self, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        with self.cursor.copy(self._copy_statement(table, columns)) as copy:
            for row in rows:
                copy.write_row(row)
        self._check(len(rows), table.name)

    def _check(self, count: int, what: str) -> None:
        if self.cursor.rowcount != count:  # a new session's keys cannot be taken
            raise StoreError(f"inserted {self.cursor.rowcount} of {count} {what} rows")
