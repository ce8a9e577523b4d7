"""The fast path: the append transaction on the DBAPI connection, with compiled statements.

SQLAlchemy Core builds every statement (``context.Statements``); they are compiled once per
store and executed on a pooled DBAPI cursor, which takes the per-statement Core overhead off
the interactive path. On PostgreSQL the statements of one append go through one pipeline (a
single round trip). This module is the only one that touches a DBAPI cursor; its entry points
are :func:`append` (and :func:`append_parts`), :func:`insert_session`, :func:`surface_tail`
(the tail read), :func:`fetch_rows` (the page reads of a load) and :func:`append_async` (the
async store's appends on PostgreSQL, on a psycopg ``AsyncConnection``). Every write's
connection is checked out of the pool for one transaction and returned, whatever thread runs
it; a tail read runs on the store's idle connection when it is free.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Final, NamedTuple

import psycopg
from psycopg import sql as pgsql
from sqlalchemy import Connection, Table, insert
from sqlalchemy.util import await_

from session_sql._store.context import Compiled, StoreContext
from session_sql._store.engine import PG_IDLE, begin_raw_write, pipeline, write_tx
from session_sql._store.rows import EVENT_VALUE_COLUMNS, event_values
from session_sql.errors import (
    CorruptSessionError,
    SessionExistsError,
    SessionSQLError,
    StoreError,
)
from session_sql.events import SessionEvent
from session_sql.surface import AppendNode, ReplaceNodes, Transition

INSERT_CHUNK = 1000


class SurfaceOp(enum.Enum):
    """What one batch of surface statements does."""

    INSERT_NODES = enum.auto()  # executemany; every row must be inserted (counted)
    DROP_NODES = enum.auto()  # executemany
    RETARGET_NODE = enum.auto()  # execute


def _surface_ops(
    ctx: StoreContext, session_id: str, transitions: list[Transition], next_pos: int
) -> list[tuple[SurfaceOp, Any]]:
    """The planner's Transitions as batches of driver parameters, in order."""
    c = ctx.compiled
    tenant = ctx.tenant
    ops: list[tuple[SurfaceOp, Any]] = []
    pending: list[Any] = []
    for t in transitions:
        if type(t) is AppendNode:
            row = {"tenant": tenant, "session_id": session_id, "pos": next_pos, "event_seq": t.seq}
            pending.append(c.insert_node.bind(row))
            next_pos += 1
        elif type(t) is ReplaceNodes:
            if pending:
                ops.append((SurfaceOp.INSERT_NODES, pending))
                pending = []
            # A replace keeps the first shadowed row (its pos) for the new seq; a removal
            # (seq None) deletes every shadowed row, and surface_next_pos stays.
            kept = 0 if t.seq is None else 1
            drops = [
                c.drop_node.bind({"b_tenant": tenant, "b_id": session_id, "b_seq": s})
                for s in t.shadowed[kept:]
            ]
            if drops:
                ops.append((SurfaceOp.DROP_NODES, drops))
            if t.seq is not None:
                retarget = {
                    "b_tenant": tenant,
                    "b_id": session_id,
                    "b_old": t.shadowed[0],
                    "b_new": t.seq,
                }
                ops.append((SurfaceOp.RETARGET_NODE, c.retarget_node.bind(retarget)))
    if pending:
        ops.append((SurfaceOp.INSERT_NODES, pending))
    return ops


class AppendPart(NamedTuple):
    """One session's share of an append transaction (see :func:`append_parts`)."""

    session_id: str
    advance: dict[str, Any]  # binds ``Statements.advance``
    events: list[SessionEvent]
    transitions: list[Transition]
    next_pos: int
    head: int


def _tenant_params(ctx: StoreContext) -> Any:
    """The parameters of ``set_tenant``: this store's tenant."""
    c = ctx.compiled.set_tenant
    return c.bind({**c.defaults, "b_tenant": ctx.tenant})


def append(
    ctx: StoreContext,
    session_id: str,
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
    part = AppendPart(session_id, advance, events, transitions, next_pos, head)
    return append_parts(ctx, [part]) is None


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append to several sessions in one transaction: all commit or none does.

    Returns ``None`` once committed, or the index of the first part whose head update matched
    no row (nothing written: that session's writer lost a race). Raises as :func:`append`.
    """
    bulk = not ctx.sqlite and sum(len(p.events) for p in parts) >= COPY_MIN_ROWS
    if not ctx.sqlite and len(parts) == 1 and not bulk:
        return None if _append_one_trip(ctx, parts[0]) else 0
    c = ctx.compiled
    planned = []
    for p in parts:
        count = len(p.events)
        values = [event_values(ctx.tenant, p.session_id, e, ctx.max_event_bytes) for e in p.events]
        insert: tuple[str, list[Any]] = (c.insert_event_values, values)
        if count > 1 and not bulk and c.insert_events_unnest is not None:
            # PostgreSQL: the whole batch as one statement over column arrays (a big batch
            # copies the tuples instead, see _append_bulk).
            insert = (c.insert_events_unnest.sql, [_unnest_values(values)])
        ops = _surface_ops(ctx, p.session_id, p.transitions, p.next_pos)
        planned.append((p, insert, count, ops))
    if bulk:
        return _append_bulk(ctx, planned)
    if ctx.sqlite and not ctx.engine.pool.dispatch.checkout:
        # SQLite: on the store's idle connection when it is free, as a tail read runs (no
        # checkout, no reset: the transaction below ends in a commit or a rollback either
        # way). PostgreSQL's is in autocommit, for single statements only.
        refused: SessionSQLError | None = None
        with ctx.idle.borrow() as idle:
            if idle is not None:
                try:
                    return _append_planned(ctx, idle, idle, planned)
                except SessionSQLError as exc:  # after its rollback: the connection is fine,
                    refused = exc  # so it is kept (an error inside borrow() discards it)
        if refused is not None:
            raise refused
    raw = ctx.engine.raw_connection()
    try:
        # The DBAPI connection (the async engine's adapts psycopg's AsyncConnection to it);
        # the driver's own connection only for the pipeline.
        dbapi = raw.dbapi_connection
        assert dbapi is not None
        return _append_planned(ctx, raw, dbapi, planned)
    finally:
        raw.close()  # back to the pool, which resets it (or drops it when invalidated)


def _append_planned(ctx: StoreContext, raw: Any, dbapi: Any, planned: list[Any]) -> int | None:
    """:func:`append_parts`' transaction on ``raw`` (a pooled connection, or SQLite's idle
    DBAPI connection, ``dbapi`` itself), which it leaves outside any transaction."""
    c = ctx.compiled
    cur = raw.cursor()
    head_curs: list[Any] = []
    event_checks: list[tuple[Any, int, str]] = []
    node_checks: list[tuple[Any, int, str]] = []

    def lost(*, unknown_too: bool = True) -> int | None:
        """The first part whose head update matched no row (or whose count is unknown)."""
        bad = (0, -1) if unknown_too else (0,)
        return next((i for i, h in enumerate(head_curs) if h.rowcount in bad), None)

    begin_raw_write(ctx.engine, cur)
    try:
        with nullcontext() if ctx.sqlite else pipeline(raw.driver_connection):
            if not ctx.sqlite:
                # SET LOCAL of the tenant (row-level security), in the same pipeline:
                # the first statement of the transaction, no round trip of its own.
                cur.execute(c.set_tenant.sql, _tenant_params(ctx))
            for p, (insert_sql, args), count, ops in planned:
                head_cur = raw.cursor()
                head_curs.append(head_cur)
                head_cur.execute(c.advance.sql, c.advance.bind(p.advance))
                if ctx.sqlite and head_cur.rowcount != 1:
                    dbapi.rollback()
                    return len(head_curs) - 1
                event_cur = raw.cursor()
                if len(args) == 1:
                    event_cur.execute(insert_sql, args[0])
                else:
                    event_cur.executemany(insert_sql, args)
                event_checks.append((event_cur, count, p.session_id))
                _surface_upkeep(ctx, raw, cur, p, ops, node_checks)
        failed = lost()  # PostgreSQL: known once the pipeline has synced
        if failed is not None:
            dbapi.rollback()
            return failed
        for check_cur, count, session_id in event_checks + node_checks:
            if check_cur.rowcount != count:
                dbapi.rollback()
                raise _rows_past_head(session_id)
        dbapi.commit()
    except BaseException as exc:
        if getattr(dbapi, "broken", False):  # psycopg: the connection is lost
            # Discard it instead of returning it to the pool, where its reset would
            # fail (and log) or, without pre-ping, the next append would get it. No
            # rollback: the server has already rolled the transaction back.
            raw.invalidate()
            raise
        dbapi.rollback()
        # The pipeline runs the inserts even when the conditional head update matched
        # no row; their failure (a taken seq, a deleted session) then only means that
        # the race was lost, which the caller classifies.
        failed = lost(unknown_too=False)
        if isinstance(exc, Exception) and failed is not None:
            return failed
        raise
    return None


def _surface_upkeep(
    ctx: StoreContext,
    raw: Any,
    cur: Any,
    part: AppendPart,
    ops: list[tuple[SurfaceOp, Any]],
    node_checks: list[tuple[Any, int, str]],
) -> None:
    """Queue one part's surface statements and its ``NOTIFY`` on ``cur`` (in the caller's
    pipeline or transaction). Inserted nodes get a cursor per batch, whose count the caller
    reads after the sync and compares (``node_checks``)."""
    c = ctx.compiled
    for op, params in ops:
        if op is SurfaceOp.INSERT_NODES:
            batch_cur = raw.cursor()
            batch_cur.executemany(c.insert_node.sql, params)
            node_checks.append((batch_cur, len(params), part.session_id))
        elif op is SurfaceOp.DROP_NODES:
            cur.executemany(c.drop_node.sql, params)
        else:
            cur.execute(c.retarget_node.sql, params)
    if ctx.channel is not None:
        note = {"b_channel": ctx.channel, "b_payload": ctx.payload(part.session_id, part.head)}
        cur.execute(c.notify.sql, c.notify.bind(note))


COPY_MIN_ROWS: Final = 32
"""From this many events in one append transaction, PostgreSQL's events go in by ``COPY``."""


def _append_bulk(ctx: StoreContext, planned: list[Any]) -> int | None:
    """:func:`append_parts` on PostgreSQL for a big batch: the events by ``COPY``.

    ``COPY`` cannot run in a pipeline, nor skip a taken key, so the order differs: one
    pipeline with the tenant setting, whether row security applies (``COPY FROM`` refuses
    such a table) and every conditional head update, whose counts decide before anything is
    inserted (the session rows are then locked, so a taken key can only be a row already past
    the head); then each session's events by ``COPY`` (or, under row security or on the async
    driver, one counted ``INSERT … unnest``); then, when copying, each session's first batch of
    ``COPY_MIN_ROWS`` surface rows or more by ``COPY`` (the server checks a surface row's two
    foreign keys either way, but a statement per row costs it more than the row); then one
    pipeline with the rest of the surface upkeep and ``NOTIFY``. The same transaction, checks
    and outcomes as ``append_parts``.
    """
    c = ctx.compiled
    raw = ctx.engine.raw_connection()
    try:
        dbapi = raw.dbapi_connection
        assert dbapi is not None
        cur = raw.cursor()
        try:
            with pipeline(raw.driver_connection):
                cur.execute(c.set_tenant.sql, _tenant_params(ctx))
                security = raw.cursor()
                table = ctx.engine.dialect.identifier_preparer.format_table(ctx.tables.events)
                security.execute(_ROW_SECURITY_ACTIVE, (table,))
                head_curs = []
                for p, _, _, _ in planned:
                    head_curs.append(raw.cursor())
                    head_curs[-1].execute(c.advance.sql, c.advance.bind(p.advance))
            failed = next((i for i, h in enumerate(head_curs) if h.rowcount != 1), None)
            if failed is not None:
                dbapi.rollback()
                return failed
            row = security.fetchone()
            # The async adapter's cursor has no COPY.
            copying = row is not None and not row[0] and hasattr(cur, "copy")
            for p, (_, values), count, _ in planned:
                _insert_values(cur, ctx, p.session_id, values, copying=copying)
                if cur.rowcount != count:
                    dbapi.rollback()
                    raise _rows_past_head(p.session_id)
            upkeep = [
                (p, _copy_nodes(cur, ctx, p, ops) if copying else ops) for p, *_, ops in planned
            ]
            node_checks: list[tuple[Any, int, str]] = []
            with pipeline(raw.driver_connection):
                for p, ops in upkeep:
                    _surface_upkeep(ctx, raw, cur, p, ops, node_checks)
            for check_cur, count, session_id in node_checks:
                if check_cur.rowcount != count:
                    dbapi.rollback()
                    raise _rows_past_head(session_id)
            dbapi.commit()
        except BaseException:
            if getattr(dbapi, "broken", False):  # as in append_parts: discard, no rollback
                raw.invalidate()
                raise
            dbapi.rollback()
            raise
    finally:
        raw.close()
    return None


def _insert_values(
    cur: Any, ctx: StoreContext, session_id: str, values: list[Any], *, copying: bool
) -> None:
    """Insert ``rows.event_values`` rows of one session past its (locked) head; the caller
    checks ``cur.rowcount``. A taken key is a row already past the head."""
    if not copying:
        unnest = ctx.compiled.insert_events_unnest
        assert unnest is not None  # PostgreSQL
        cur.execute(unnest.sql, _unnest_values(values))
        return
    try:
        with cur.copy(_copy_statement(ctx.tables.events, EVENT_VALUE_COLUMNS)) as copy:
            for row in values:
                copy.write_row(row)
    except psycopg.errors.UniqueViolation as exc:  # the caller rolls back
        raise _rows_past_head(session_id) from exc


def _copy_nodes(
    cur: Any, ctx: StoreContext, part: AppendPart, ops: list[tuple[SurfaceOp, Any]]
) -> list[tuple[SurfaceOp, Any]]:
    """Insert the part's first batch of surface rows by ``COPY`` when it holds
    ``COPY_MIN_ROWS`` rows or more (it precedes the part's other surface statements); the
    statements left to run. A taken position or seq is a row already past the head."""
    if not ops or ops[0][0] is not SurfaceOp.INSERT_NODES or len(ops[0][1]) < COPY_MIN_ROWS:
        return ops
    rows = ops[0][1]
    try:
        with cur.copy(_copy_statement(ctx.tables.surface, _SURFACE_COLUMNS)) as copy:
            for row in rows:
                copy.write_row((row["tenant"], row["session_id"], row["pos"], row["event_seq"]))
    except psycopg.errors.UniqueViolation as exc:  # the caller rolls back
        raise _rows_past_head(part.session_id) from exc
    if cur.rowcount != len(rows):
        raise _rows_past_head(part.session_id)
    return ops[1:]


def _unnest_values(values: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """``Statements.insert_events_unnest``'s parameters from ``rows.event_values`` rows."""
    columns = zip(*values, strict=True)
    return {f"u_{name}": list(col) for name, col in zip(EVENT_VALUE_COLUMNS, columns, strict=True)}


def _rows_past_head(session_id: str) -> CorruptSessionError:
    return CorruptSessionError(
        f"session {session_id!r}: rows already exist past the session's head "
        "(events or surface positions); run verify, refusing to append",
        session_id=session_id,
    )


def _one_trip(ctx: StoreContext, part: AppendPart) -> list[tuple[Compiled, list[Any]]]:
    """The statements of one session's append in PostgreSQL's one-round-trip form, each with
    the parameters it runs with (one execution per entry): the tenant setting, the guarded
    head update, the event rows, the surface upkeep and ``NOTIFY``, in that order.

    Nothing in it depends on a row count read by the client (see ``Statements``): a lost
    race fails the guard, a row past the head fails an insert, either way the whole
    transaction rolls back, so it can be sent with its commit.
    """
    c = ctx.compiled
    rows = [event_values(ctx.tenant, part.session_id, e, ctx.max_event_bytes) for e in part.events]
    out: list[tuple[Compiled, list[Any]]] = [
        (c.set_tenant, [_tenant_params(ctx)]),
        (c.guarded_advance, [c.guarded_advance.bind(part.advance)]),
    ]
    out.append((c.insert_event_strict, rows))  # tuples, in the statement's order
    for op, params in _surface_ops(ctx, part.session_id, part.transitions, part.next_pos):
        if op is SurfaceOp.INSERT_NODES:
            out.append((c.insert_node_strict, params))
        elif op is SurfaceOp.DROP_NODES:
            out.append((c.drop_node, params))
        else:
            out.append((c.retarget_node, [params]))
    if ctx.channel is not None:
        payload = {"b_channel": ctx.channel, "b_payload": ctx.payload(part.session_id, part.head)}
        out.append((c.notify, [c.notify.bind(payload)]))
    return out


def _outcome(exc: BaseException, session_id: str) -> bool:
    """What a failed one-round-trip append means (nothing was written): False for a lost
    race (the guard), ``CorruptSessionError`` raised for a row past the head; else re-raised."""
    if isinstance(exc, psycopg.errors.DivisionByZero):
        return False
    if isinstance(exc, psycopg.errors.UniqueViolation):
        raise _rows_past_head(session_id) from exc
    raise exc


def _append_one_trip(ctx: StoreContext, part: AppendPart) -> bool:
    """One session's append on PostgreSQL as one round trip that also commits: False
    (nothing written) when its head update matched no row.

    The statements of :func:`_one_trip`, bound on the client, go as one query on a pooled
    connection put in autocommit: several statements in one query are one implicit
    transaction, committed when the query returns or rolled back whole by the first error.
    One query is one send and one wait, where a pipeline flushes and polls once per
    statement. The connection goes back to the pool as it came (autocommit off, idle).
    """
    raw = ctx.engine.raw_connection()
    try:
        dbapi: Any = raw.dbapi_connection  # the async engine's adapts an AsyncConnection
        driver: Any = raw.driver_connection
        dbapi.autocommit = True
        try:
            if isinstance(driver, psycopg.AsyncConnection):  # inside greenlet_spawn
                return bool(await_(append_async(ctx, psycopg.AsyncClientCursor(driver), part)))
            cur = psycopg.ClientCursor(driver)
            try:
                cur.execute(_one_query(cur.mogrify, ctx, part))  # compiled statements
            except psycopg.Error as exc:
                if driver.broken:
                    raise
                return _outcome(exc, part.session_id)
            return True
        except BaseException:
            # Lost, or interrupted inside the query (its transaction then runs or rolls back
            # on the server alone): the pool drops the connection (see append_parts).
            if driver.broken or driver.info.transaction_status != PG_IDLE:
                raw.invalidate()
            raise
        finally:
            if not driver.closed and driver.info.transaction_status == PG_IDLE:
                dbapi.autocommit = False
    finally:
        raw.close()


def _one_query(bind: Callable[[str, Any], str], ctx: StoreContext, part: AppendPart) -> str:
    """:func:`_one_trip`'s statements joined into one query and bound by one call of ``bind``
    (a client cursor's ``mogrify``), in their positional form: a call per statement cost
    the driver's fixed work (a transformer, the query's lookup) seven times over. An insert
    of several rows is one multi-row ``VALUES`` statement: one statement for the server to
    parse, and no arrays for the client to adapt (binding ``unnest`` arrays cost more than
    the rows' own values)."""
    statements: list[str] = []
    values: list[Any] = []
    for stmt, params in _one_trip(ctx, part):
        sql, names = stmt.positional
        if len(params) > 1 and sql.startswith("INSERT "):
            head, sep, row = sql.partition(" VALUES ")
            statements.append(head + sep + ", ".join([row] * len(params)))
        else:
            statements.extend([sql] * len(params))
        for one in params:
            values.extend(one if type(one) is tuple else [one[name] for name in names])
    return bind(";".join(statements), values)


def _copy_statement(table: Table, columns: Sequence[str]) -> pgsql.Composed:
    """``COPY table (columns) FROM STDIN``, identifiers quoted by psycopg."""
    return pgsql.SQL("COPY {} ({}) FROM STDIN").format(
        pgsql.Identifier(str(table.schema), table.name),
        pgsql.SQL(", ").join(map(pgsql.Identifier, columns)),
    )


def fetch_rows(conn: Connection, stmt: Compiled, params: dict[str, Any]) -> list[Any]:
    """The rows (plain tuples) of a compiled read on ``conn``, inside its transaction.

    The driver SQL goes through ``exec_driver_sql`` (so connection events still see it), and
    the rows are fetched from the DBAPI cursor: a page of 1,000 events skips SQLAlchemy's
    result processing (columns are read as the driver returns them: see
    ``rows.event_from_row``).
    """
    result = conn.exec_driver_sql(stmt.sql, stmt.bind(params))
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


class _LostRaceError(Exception):
    """Inside :func:`insert_session`: part ``index``'s head update matched no row."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


def insert_session(
    ctx: StoreContext,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart] = (),
) -> int | None:
    """Write a whole new session (its ``sessions`` row, events, surface rows) in one transaction,
    with the appends ``parts`` to other sessions in it (as :func:`append_parts` does them).

    ``event_rows`` are ``rows.event_values`` rows (the JSON text already serialised and
    checked); raises ``SessionExistsError`` when the id is taken. Returns ``None`` once
    committed, or the index of the first part whose head update matched no row (nothing
    written).
    """
    try:
        _insert_session(ctx, row, event_rows, surface_rows, parts)
    except _LostRaceError as lost:
        return lost.index
    return None


def _insert_session(
    ctx: StoreContext,
    row: Mapping[str, Any],
    event_rows: Sequence[tuple[Any, ...]],
    surface_rows: Sequence[tuple[int, int]],
    parts: Sequence[AppendPart],
) -> None:
    t = ctx.tables
    session_id = str(row["id"])
    with write_tx(ctx.engine) as conn:
        taken = conn.execute(ctx.statements.exists, {"b_id": session_id})
        if taken.first() is not None:
            raise SessionExistsError.for_session(session_id)
        conn.execute(insert(t.sessions), dict(row))
        for i in range(0, len(event_rows), INSERT_CHUNK):
            insert_events(conn, ctx, event_rows[i : i + INSERT_CHUNK])
        for i in range(0, len(surface_rows), INSERT_CHUNK):
            conn.execute(
                insert(t.surface),
                [
                    {"tenant": ctx.tenant, "session_id": session_id, "pos": pos, "event_seq": seq}
                    for pos, seq in surface_rows[i : i + INSERT_CHUNK]
                ],
            )
        if event_rows and ctx.channel is not None:
            # Wakes followers; delivered at commit, dropped on rollback.
            payload = {
                "b_channel": ctx.channel,
                "b_payload": ctx.payload(session_id, int(row["head_seq"])),
            }
            conn.execute(ctx.statements.notify, payload)
        for i, part in enumerate(parts):
            if not _append_in(conn, ctx, part):
                raise _LostRaceError(i)  # rolls the whole transaction back


def _append_in(conn: Connection, ctx: StoreContext, part: AppendPart) -> bool:
    """One append part in ``conn``'s transaction, statement by statement; False (nothing of
    it written) when its head update matched no row."""
    c = ctx.compiled
    raw = conn.connection
    cur = raw.cursor()
    try:
        cur.execute(c.advance.sql, c.advance.bind(part.advance))
        if cur.rowcount != 1:
            return False
        rows = [
            event_values(ctx.tenant, part.session_id, e, ctx.max_event_bytes) for e in part.events
        ]
        _insert_rows(cur, ctx, rows)
        if cur.rowcount != len(rows):  # the row is ours now: a taken seq sits past the head
            raise _rows_past_head(part.session_id)
        ops = _surface_ops(ctx, part.session_id, part.transitions, part.next_pos)
        checks: list[tuple[Any, int, str]] = []
        _surface_upkeep(ctx, raw, cur, part, ops, checks)
        for check_cur, count, session_id in checks:
            if check_cur.rowcount != count:
                raise _rows_past_head(session_id)
    finally:
        cur.close()
    return True


def insert_events(conn: Connection, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows.event_values`` rows of a new session in ``conn``'s transaction, on its
    DBAPI connection. Raises ``StoreError`` unless every row went in."""
    if not rows:
        return
    cursor = conn.connection.cursor()
    try:
        _insert_rows(cursor, ctx, rows)
        if cursor.rowcount != len(rows):  # a new session's seqs cannot be taken
            raise StoreError(f"inserted {cursor.rowcount} of {len(rows)} event rows")
    finally:
        cursor.close()


def _insert_rows(cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows.event_values`` rows on ``cur``: one statement over column arrays on
    PostgreSQL, ``executemany`` of the prepared insert on SQLite; the caller checks the count."""
    c = ctx.compiled
    if c.insert_events_unnest is not None:
        cur.execute(c.insert_events_unnest.sql, _unnest_values(rows))
    else:
        cur.executemany(c.insert_event_values, rows)


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
        self.cursor = conn.connection.cursor()
        self.copy = False
        # The async engine's adapted cursor has no COPY; it takes the INSERT path.
        if not ctx.sqlite and hasattr(self.cursor, "copy"):
            prep = conn.dialect.identifier_preparer
            self.cursor.execute(_ROW_SECURITY_ACTIVE, (prep.format_table(ctx.tables.events),))
            row = self.cursor.fetchone()
            self.copy = row is not None and not row[0]

    def close(self) -> None:
        self.cursor.close()

    def events(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows.event_values`` rows."""
        if not rows:
            return
        if self.copy:
            self._copy(self.ctx.tables.events, EVENT_VALUE_COLUMNS, rows)
            return
        _insert_rows(self.cursor, self.ctx, rows)
        self._check(len(rows), "event")

    def surface(self, session_id: str, rows: Sequence[tuple[int, int]]) -> None:
        """Insert the surface rows ``(pos, event_seq)`` of ``session_id``."""
        if not rows:
            return
        tenant = self.ctx.tenant
        values = [(tenant, session_id, pos, seq) for pos, seq in rows]
        if self.copy:
            self._copy(self.ctx.tables.surface, _SURFACE_COLUMNS, values)
            return
        c = self.ctx.compiled.insert_node
        if self.ctx.sqlite:
            self.cursor.executemany(c.sql, values)
        else:
            named = [dict(zip(_SURFACE_COLUMNS, v, strict=True)) for v in values]
            self.cursor.executemany(c.sql, named)
        self._check(len(rows), "surface")

    def _copy(self, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
        with self.cursor.copy(_copy_statement(table, columns)) as copy:
            for row in rows:
                copy.write_row(row)
        self._check(len(rows), table.name)

    def _check(self, count: int, what: str) -> None:
        if self.cursor.rowcount != count:  # a new session's keys cannot be taken
            raise StoreError(f"inserted {self.cursor.rowcount} of {count} {what} rows")


_ROW_SECURITY_ACTIVE: Final = "SELECT row_security_active(CAST(%s AS regclass))"
_SURFACE_COLUMNS: Final = ("tenant", "session_id", "pos", "event_seq")


def surface_tail(ctx: StoreContext, session_id: str, before: int, limit: int) -> list[Any]:
    """``(pos, seq, type, data)`` of the last ``limit`` surface rows before position ``before``,
    newest first: the tail read, one statement on a DBAPI cursor.

    One statement reads one consistent snapshot on both backends, so it needs no explicit
    transaction; this takes the Core connection and BEGIN/COMMIT overhead off the interactive
    read (a framework's ``get_items(limit=10)``, an agent's ``messages(last=20)``). It runs on
    the store's idle connection (``engine.IdleConnection``: no checkout, no pre-ping round
    trip), or, when that is in use, not kept, broken, or checkouts are watched by listeners,
    on a pooled connection.
    """
    c = ctx.compiled.surface_tail
    params = c.bind({**c.defaults, "b_id": session_id, "b_before": before, "b_limit": limit})
    rows = None if ctx.engine.pool.dispatch.checkout else _on_idle(ctx, c.sql, params)
    if rows is not None:
        return rows
    raw = ctx.engine.raw_connection()
    try:
        cur = raw.cursor()
        if not ctx.sqlite:
            # The tenant setting first, in one pipeline with psycopg's BEGIN (the read's
            # rows are then fetched outside the pipeline, as the async adapter needs).
            with pipeline(raw.driver_connection):
                raw.cursor().execute(ctx.compiled.set_tenant.sql, _tenant_params(ctx))
        cur.execute(c.sql, params)
        return list(cur.fetchall())
    finally:
        raw.close()  # back to the pool, which resets (rolls back) it


def _on_idle(ctx: StoreContext, sql: str, params: Any) -> list[Any] | None:
    """The rows of one statement run on the idle connection; None when it is not available
    or the read failed (``borrow`` then discards the connection; the pool reads again)."""
    try:
        with ctx.idle.borrow() as dbapi:
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


async def append_async(
    ctx: StoreContext, cur: psycopg.AsyncClientCursor[Any], part: AppendPart
) -> bool:
    """:func:`append` on a psycopg ``AsyncConnection`` (PostgreSQL, the async store): the same
    statements, checks and outcome as the sync store's one round trip, natively awaited.

    ``cur`` is a client-binding cursor on a connection that is idle, in autocommit, and the
    caller's alone. Each await on the asyncio driver costs a trip through the event loop, so
    the statements of :func:`_one_trip` are bound on the client and sent as one query: one
    await, one round trip, and (several statements in one query being one implicit
    transaction) committed when it returns, or rolled back whole by the first error.
    Afterwards the connection is idle again, unless it broke.
    """
    query = _one_query(cur.mogrify, ctx, part)
    try:
        await cur.execute(query)  # compiled statements, bound by the driver
    except psycopg.Error as exc:
        if cur.connection.broken:
            raise
        return _outcome(exc, part.session_id)
    return True


class StoredHead(NamedTuple):
    """The session row's columns that ``refresh`` checks (``Statements.refresh_rows``' first)."""

    head_seq: int
    surface_next_pos: int
    replace_generation: int
    surface_digest: int
    incarnation: str


async def read_new_async(
    ctx: StoreContext, cur: Any, session_id: str, from_seq: int
) -> tuple[StoredHead, list[Any]] | None:
    """``refresh``'s reads on a kept psycopg ``AsyncClientCursor`` (PostgreSQL, the async
    store): the session row and its event rows from ``from_seq`` up to its head (``None``
    when there is no such session).

    The tenant setting and one statement that outer-joins the row to those events (one
    snapshot, as the sync read's head-bounded pair gives), bound on the client and sent as
    one query: one await and one round trip, where the pooled path pays a checkout,
    ``BEGIN``, two reads and the end of its transaction.
    """
    c = ctx.compiled.refresh_rows
    params = c.bind({**c.defaults, "b_tenant": ctx.tenant, "b_id": session_id, "b_from": from_seq})
    tenant = ctx.compiled.set_tenant
    await cur.execute(
        ";".join([cur.mogrify(tenant.sql, _tenant_params(ctx)), cur.mogrify(c.sql, params)])
    )
    cur.nextset()  # past the tenant setting's result
    rows = await cur.fetchall()
    if not rows:
        return None
    columns = len(StoredHead._fields)
    return StoredHead(*rows[0][:columns]), [r[columns:] for r in rows if r[columns] is not None]
