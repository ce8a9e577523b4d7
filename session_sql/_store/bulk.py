"""Writing a new session's rows: a whole session in one transaction (:func:`insert_session`,
with appends to other sessions in it), and an import's batches (:class:`BulkWriter`).

The database's inserts are its backend's (``Backend.insert_rows``, ``insert_nodes``, ``COPY``
where it has it); the appends to other sessions are ``transactions.counted_append``, run
statement by statement in the new session's transaction (``database.run_in_transaction``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, insert

from session_sql._store import statistics
from session_sql._store.context import StoreContext
from session_sql._store.database import run_in_transaction, write_tx
from session_sql._store.rows import (
    EVENT_VALUE_COLUMNS,
    NEW_SESSION_KEY,
    SURFACE_COLUMNS,
    with_session_key,
)
from session_sql._store.transactions import (
    AppendPart,
    Planned,
    counted_append,
    event_rows,
    execute_run,
    surface_ops,
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
    """Insert a new ``sessions`` row and its ``session_ids`` row in ``conn``'s transaction;
    returns its ``session_key`` (assigned by the database: an identity on PostgreSQL, the rowid
    on SQLite). A taken id fails on ``session_ids``' key (``SessionExistsError``)."""
    s = ctx.tables.sessions
    key = int(conn.execute(insert(s).returning(s.c.session_key), dict(row)).scalar_one())
    ids = {"id": row["id"], "tenant": row["tenant"], "session_key": key}
    conn.execute(ctx.statements.insert_id, ids)
    return key


def insert_session(
    ctx: StoreContext,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart] = (),
) -> Inserted:
    """Write a whole new session (its ``sessions`` row, events, surface rows) in one transaction,
    with the appends ``parts`` to other sessions in it (as ``writer.append_parts`` does them).

    ``event_rows`` are ``rows.event_values`` rows (the JSON text already serialised and
    checked; their ``session_key`` is replaced by the new row's); raises
    ``SessionExistsError`` when the id is taken.
    """
    try:
        key = _insert_session(ctx, row, event_rows, surface_rows, parts)
    except _LostRaceError as lost:
        return Inserted(lost.index, NEW_SESSION_KEY)
    statistics.appended(ctx, len(event_rows) + sum(len(p.events) for p in parts))
    return Inserted(None, key)


def _insert_session(
    ctx: StoreContext,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart],
) -> int:
    t = ctx.tables
    session_id = str(row["id"])
    with write_tx(ctx.engine) as conn:
        taken = conn.execute(ctx.statements.key_of, {"b_id": session_id})
        if taken.first() is not None:
            raise SessionExistsError.for_session(session_id)
        key = insert_session_row(conn, ctx, row)
        for i in range(0, len(event_rows), INSERT_CHUNK):
            chunk = with_session_key(event_rows[i : i + INSERT_CHUNK], key)
            insert_events(conn, ctx, chunk)
        for i in range(0, len(surface_rows), INSERT_CHUNK):
            conn.execute(
                insert(t.surface),
                [
                    {"session_key": key, "pos": pos, "event_seq": seq, "tenant": ctx.tenant}
                    for pos, seq in surface_rows[i : i + INSERT_CHUNK]
                ],
            )
        if parts:
            # Raises CorruptSessionError for rows past a head; either way the whole
            # transaction rolls back.
            lost = run_in_transaction(conn, _appends(ctx, parts))
            if lost is not None:
                raise _LostRaceError(lost)
    # After the commit: the wake-ups' transaction writes nothing (see Backend.wake).
    woken = [(session_id, int(row["head_seq"]))] if event_rows else []
    ctx.backend.wake(ctx, woken + [(p.session_id, p.head) for p in parts])
    return key


def append_in_transaction(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """``writer.append_parts`` through a Core write transaction on the store's engine: what
    the async store's engine runs when the sync store's code appends on it (``repair``): the
    same flow, statement by statement, each awaited by SQLAlchemy's adapter. ``None`` once
    committed, else the index of the part that lost its race (nothing written)."""
    try:
        with write_tx(ctx.engine) as conn:
            lost = run_in_transaction(conn, _appends(ctx, parts))
            if lost is not None:
                raise _LostRaceError(lost)
    except _LostRaceError as lost_race:
        return lost_race.index
    ctx.backend.wake(ctx, [(p.session_id, p.head) for p in parts])
    return None


def _appends(ctx: StoreContext, parts: Sequence[AppendPart]) -> Any:
    """The appends of ``parts`` as ``transactions.counted_append``, statement by statement
    (each part's head update read before its inserts), left for the caller to commit."""
    w = ctx.writes
    backend = ctx.backend
    planned = []
    for p in parts:
        values = event_rows(w, p)
        ops = surface_ops(w, p.session_key, p.transitions, p.next_pos)
        planned.append(Planned(p, backend.insert_run(ctx, values), len(values), ops))
    return counted_append(w, parts, planned, stepwise=True, commit=False)


def insert_events(conn: Connection, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows.event_values`` rows of a new session in ``conn``'s transaction, on its
    DBAPI connection. Raises ``StoreError`` unless every row went in."""
    if not rows:
        return
    cursor = conn.connection.cursor()
    try:
        execute_run(cursor, ctx.backend.insert_run(ctx, rows))
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

    def __init__(self, conn: Connection, ctx: StoreContext) -> None:
        self.ctx = ctx
        self.backend = ctx.backend
        self.cursor = conn.connection.cursor()
        self.copy = self.backend.copy_allowed(self.cursor, ctx)

    def close(self) -> None:
        self.cursor.close()

    def events(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows.event_values`` rows."""
        if not rows:
            return
        if self.copy:
            self._copy(self.ctx.tables.events, EVENT_VALUE_COLUMNS, rows)
            return
        execute_run(self.cursor, self.backend.insert_run(self.ctx, rows))
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
        execute_run(self.cursor, self.backend.nodes_run(self.ctx, values))
        self._check(len(rows), "surface")

    def _copy(self, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        self.backend.copy_rows(self.cursor, table, columns, rows)
        self._check(len(rows), table.name)

    def _check(self, count: int, what: str) -> None:
        if self.cursor.rowcount != count:  # a new session's keys cannot be taken
            raise StoreError(f"inserted {self.cursor.rowcount} of {count} {what} rows")
