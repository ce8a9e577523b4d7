"""PostgreSQL's append transactions, on a pooled connection of the store's engine.

One session's append is one query in autocommit (:func:`one_query`: one round trip that also
commits); several sessions' go through one pipeline, every insert counted; a big batch
(``COPY_MIN_ROWS`` events or more) copies its rows. Each reads its outcome with
``appends.classify``; the one query, which cannot count rows, makes the server fail it
instead (a lost race is a division by zero, a row past the head a unique violation), and
maps those errors onto the same rule. The one query's statements run prepared on the
connection once it is known what is prepared there (:func:`trip_query`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

import psycopg
from psycopg import sql as pgsql
from sqlalchemy import Table
from sqlalchemy.util import await_

from session_sql._store.backends.postgresql import appending_async as pg_async
from session_sql._store.backends.postgresql.backend import PG_IDLE, PG_INERROR, pipeline
from session_sql._store.backends.postgresql.prepared import (
    forget_prepared,
    know_prepared,
    prepared_on,
)
from session_sql._store.context import Compiled, StoreContext
from session_sql._store.rows import EVENT_VALUE_COLUMNS, SURFACE_COLUMNS
from session_sql._store.transactions import (
    AppendPart,
    Check,
    Planned,
    SurfaceOp,
    abandon,
    classify,
    event_rows,
    on_pooled,
    queue_head,
    queue_rows,
    refuse,
    surface_ops,
    surface_upkeep,
    whole,
)

_log = logging.getLogger("session_sql")

COPY_MIN_ROWS: Final = 32
"""From this many events in one append transaction, PostgreSQL's events go in by ``COPY``."""

ROW_SECURITY_ACTIVE: Final = "SELECT row_security_active(CAST(%s AS regclass))"


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append ``parts`` in one transaction (``appends.AppendDialect.append_parts``): one
    session's as one query, a big batch by ``COPY``, else in one pipeline."""
    bulk = sum(len(p.events) for p in parts) >= COPY_MIN_ROWS
    if len(parts) == 1 and not bulk:
        return None if _append_one_trip(ctx, parts[0]) else 0
    c = ctx.compiled
    unnest = c.insert_events_unnest
    assert unnest is not None
    planned = []
    for p in parts:
        values = event_rows(ctx, p)
        count = len(values)
        ops = surface_ops(ctx, p.session_key, p.transitions, p.next_pos)
        if count > 1 and not bulk:
            # The whole batch as one statement over column arrays (a big batch copies the
            # tuples instead, see _append_bulk).
            planned.append(Planned(p, unnest.sql, [unnest_values(values)], count, ops))
        else:
            planned.append(Planned(p, c.insert_event_values, values, count, ops))
    if bulk:
        return _append_bulk(ctx, parts, planned)
    return on_pooled(ctx, lambda raw, dbapi: _append_pipelined(ctx, raw, dbapi, parts, planned))


def tenant_params(ctx: StoreContext) -> Any:
    """The parameters of ``set_tenant``: this store's tenant."""
    c = ctx.compiled.set_tenant
    return c.bind({**c.defaults, "b_tenant": ctx.tenant})


def _append_pipelined(
    ctx: StoreContext, raw: Any, dbapi: Any, parts: Sequence[AppendPart], planned: list[Planned]
) -> int | None:
    """Several sessions' append in one pipeline: the tenant's ``SET LOCAL`` (row security)
    first, then each part's head update, inserts and upkeep. The counts are known once the
    pipeline has synced; the inserts run even when a head update matched no row (their
    ``ON CONFLICT DO NOTHING`` keeps a taken key from aborting the pipeline), and
    ``appends.classify`` reads that as the lost race it is."""
    cur = raw.cursor()
    heads: list[Any] = []
    checks: list[Check] = []
    ctx.backend.begin_raw_write(cur)
    try:
        with pipeline(raw.driver_connection):
            cur.execute(ctx.compiled.set_tenant.sql, tenant_params(ctx))
            for i, p in enumerate(planned):
                queue_head(ctx, raw, p.part, heads)
                queue_rows(ctx, raw, cur, p, i, checks)
        if whole(parts, heads, checks):
            dbapi.commit()
            wake(ctx, raw, dbapi, parts)
            return None
    except BaseException as exc:
        return abandon(raw, dbapi, parts, heads, exc)
    return refuse(dbapi, parts, heads, checks)


def _append_bulk(
    ctx: StoreContext, parts: Sequence[AppendPart], planned: list[Planned]
) -> int | None:
    """:func:`append_parts` for a big batch: the events by ``COPY``.

    ``COPY`` cannot run in a pipeline, nor skip a taken key, so the order differs: one
    pipeline with the tenant setting, whether row security applies (``COPY FROM`` refuses
    such a table) and every conditional head update, whose counts decide before anything is
    inserted (the session rows are then locked, so a taken key can only be a row already past
    the head); then each session's events by ``COPY`` (or, under row security or on the async
    driver, one counted ``INSERT … unnest``); then, when copying, each session's first batch of
    ``COPY_MIN_ROWS`` surface rows or more by ``COPY`` (the server checks a surface row's two
    foreign keys either way, but a statement per row costs it more than the row); then one
    pipeline with the rest of the surface upkeep. The same transaction, checks and outcomes
    (``appends.classify``) as the pipeline's; followers are woken after the commit.
    """
    return on_pooled(ctx, lambda raw, dbapi: _bulk_transaction(ctx, raw, dbapi, parts, planned))


def _bulk_transaction(
    ctx: StoreContext, raw: Any, dbapi: Any, parts: Sequence[AppendPart], planned: list[Planned]
) -> int | None:
    """:func:`_append_bulk`'s transaction on a pooled connection."""
    c = ctx.compiled
    cur = raw.cursor()
    heads: list[Any] = []
    checks: list[Check] = []
    running: list[int] = []  # the part whose inserts run, while they do
    try:
        with pipeline(raw.driver_connection):
            cur.execute(c.set_tenant.sql, tenant_params(ctx))
            security = raw.cursor()
            table = ctx.engine.dialect.identifier_preparer.format_table(ctx.tables.events)
            security.execute(ROW_SECURITY_ACTIVE, (table,))
            for p in planned:
                queue_head(ctx, raw, p.part, heads)
        if whole(parts, heads, checks):
            row = security.fetchone()
            # The async adapter's cursor has no COPY.
            copying = row is not None and not row[0] and hasattr(cur, "copy")
            checks = _bulk_rows(ctx, raw, cur, planned, copying, running)
            if whole(parts, heads, checks):
                dbapi.commit()
                wake(ctx, raw, dbapi, parts)
                return None
    except BaseException as exc:
        return abandon(raw, dbapi, parts, heads, exc, running[-1] if running else None)
    return refuse(dbapi, parts, heads, checks)


def _bulk_rows(
    ctx: StoreContext,
    raw: Any,
    cur: Any,
    planned: list[Planned],
    copying: bool,
    running: list[int],
) -> list[Check]:
    """:func:`_append_bulk`'s writes once every head update has matched: the counted inserts,
    up to the first that wrote fewer rows than it was given (then nothing more runs)."""
    upkeep = []
    for i, p in enumerate(planned):
        running.append(i)
        _insert_values(cur, ctx, p.args, copying=copying)
        if cur.rowcount != p.expected:
            return [(cur, p.expected, i)]
    for i, p in enumerate(planned):
        running.append(i)
        ops = p.ops
        if copying and ops and ops[0][0] is SurfaceOp.INSERT_NODES:
            rows = ops[0][1]
            if len(rows) >= COPY_MIN_ROWS:
                # The first batch of surface rows, when big, by COPY (it precedes the part's
                # other surface statements).
                with cur.copy(copy_statement(ctx.tables.surface, SURFACE_COLUMNS)) as copy:
                    for r in rows:
                        copy.write_row((r["session_key"], r["pos"], r["event_seq"], r["tenant"]))
                if cur.rowcount != len(rows):
                    return [(cur, len(rows), i)]
                ops = ops[1:]
        upkeep.append(ops)
    running.clear()
    checks: list[Check] = []
    with pipeline(raw.driver_connection):
        for i, (p, ops) in enumerate(zip(planned, upkeep, strict=True)):
            surface_upkeep(ctx, raw, cur, p.part, ops, i, checks)
    return checks


def _insert_values(cur: Any, ctx: StoreContext, values: list[Any], *, copying: bool) -> None:
    """Insert ``rows.event_values`` rows of one session past its (locked) head; the caller
    checks ``cur.rowcount`` (a ``COPY`` raises on a taken key instead)."""
    if not copying:
        insert_rows(cur, ctx, values)
        return
    with cur.copy(copy_statement(ctx.tables.events, EVENT_VALUE_COLUMNS)) as copy:
        for row in values:
            copy.write_row(row)


def unnest_values(values: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """``Statements.insert_events_unnest``'s parameters from ``rows.event_values`` rows."""
    columns = zip(*values, strict=True)
    return {f"u_{name}": list(col) for name, col in zip(EVENT_VALUE_COLUMNS, columns, strict=True)}


def copy_statement(table: Table, columns: Sequence[str]) -> pgsql.Composed:
    """``COPY table (columns) FROM STDIN``, identifiers quoted by psycopg."""
    return pgsql.SQL("COPY {} ({}) FROM STDIN").format(
        pgsql.Identifier(str(table.schema), table.name),
        pgsql.SQL(", ").join(map(pgsql.Identifier, columns)),
    )


def one_trip(ctx: StoreContext, part: AppendPart) -> list[tuple[Compiled, list[Any]]]:
    """The statements of one session's append in PostgreSQL's one-round-trip form, each with
    the parameters it runs with (one execution per entry): the tenant setting, the guarded
    head update, the event rows and the surface upkeep, in that order.

    Nothing in it depends on a row count read by the client (see ``Statements``): a lost
    race fails the guard, a row past the head fails an insert, either way the whole
    transaction rolls back, so it can be sent with its commit.
    """
    c = ctx.compiled
    out: list[tuple[Compiled, list[Any]]] = [
        (c.set_tenant, [tenant_params(ctx)]),
        (c.guarded_advance, [c.guarded_advance.bind(part.advance)]),
    ]
    out.append((c.insert_event_strict, event_rows(ctx, part)))  # in the statement's order
    for op, params in surface_ops(ctx, part.session_key, part.transitions, part.next_pos):
        if op is SurfaceOp.INSERT_NODES:
            out.append((c.insert_node_strict, params))
        elif op is SurfaceOp.DROP_NODES:
            out.append((c.drop_node, params))
        else:
            out.append((c.retarget_node, [params]))
    return out


PREPARED_PREFIX: Final = "session_sql_"
"""How the names of the one query's prepared statements start (then a digest of the text)."""

PREPARED_NAMES: Final = (
    "SELECT name FROM pg_prepared_statements WHERE from_sql AND left(name, 12) = 'session_sql_'"
)
"""The store's statements prepared on this connection (the names of ``PREPARED_PREFIX``)."""

STALE_PREPARED: Final = frozenset({"26000", "42P05"})
"""invalid_sql_statement_name, duplicate_prepared_statement: what was known to be prepared on
the connection was not what the server had (the statement failed before ``COMMIT``)."""

_PLACEHOLDER: Final = re.compile(r"%%|%s")


class PreparedForm(NamedTuple):
    """A statement of the one query as a prepared statement of the connection."""

    name: str
    prepare: str  # PREPARE name AS ...: final text, no client parameters
    call: str  # EXECUTE name(%s, ...): bound with the query


@functools.lru_cache(maxsize=256)
def prepared_form(sql: str) -> PreparedForm:
    """``sql`` (a statement's positional form: ``%s`` for each parameter, ``%%`` for a percent
    sign) as a statement to prepare once per connection, named by a digest of its text (so a
    name always means the same statement), and the ``EXECUTE`` that runs it."""
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match[0] == "%%":
            return "%"  # the statement is sent as it is, with no client parameters
        count += 1
        return "$" + str(count)

    body = _PLACEHOLDER.sub(number, sql)
    name = PREPARED_PREFIX + hashlib.blake2b(sql.encode(), digest_size=16).hexdigest()
    call = "EXECUTE " + name + ("(" + ", ".join(["%s"] * count) + ")" if count else "")
    return PreparedForm(name, "PREPARE " + name + " AS " + body, call)


@functools.lru_cache(maxsize=64)
def _bound_name(sql: str, values: tuple[Any, ...]) -> str:
    """The name of ``sql`` prepared with ``values`` bound into it (the tenant setting)."""
    key = json.dumps([sql, values], separators=(",", ":"))
    return PREPARED_PREFIX + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


class TripQuery(NamedTuple):
    """One session's append as one query (:func:`trip_query`)."""

    query: str
    uses: frozenset[str] | None  # the prepared statements it runs (and prepares if needed)
    reads_prepared: bool  # its last result lists the connection's prepared statements


def trip_query(
    bind: Callable[[str, Any], str],
    ctx: StoreContext,
    part: AppendPart,
    driver: Any,
    *,
    literal: bool = False,
) -> TripQuery:
    """The one query of ``part`` for the psycopg connection ``driver``.

    With psycopg's prepared statements on (its ``prepare_threshold``; a transaction-pooling
    proxy needs them off, and then the query is :func:`one_query` as it is), the statements
    run as prepared statements of the connection (:func:`prepared_query`): the server then
    parses and plans them once per connection, not on every append. What is prepared on a
    connection is known from the last query that ran on it; when it is not (a new
    connection, a failed statement, a rollback of an open transaction: psycopg's may send
    ``DEALLOCATE ALL``), or ``literal`` is asked for, the query is :func:`one_query` and reads
    the connection's prepared statements in the same round trip (``PREPARED_NAMES``).
    """
    if getattr(driver, "prepare_threshold", None) is None:
        return TripQuery(one_query(bind, ctx, part), None, False)
    known = None if literal else prepared_on(driver)
    if known is None:
        return TripQuery(one_query(bind, ctx, part) + ";" + PREPARED_NAMES, None, True)
    query, uses = prepared_query(bind, ctx, part, known)
    return TripQuery(query, uses, False)


def settle_prepared(driver: Any, trip: TripQuery, names: list[Any] | None) -> None:
    """After ``trip`` ran on ``driver`` to its end: what is prepared on the connection now
    (``names``: the rows of its last result, when it read them)."""
    if trip.reads_prepared and names is not None:
        know_prepared(driver, {str(row[0]) for row in names})
    elif trip.uses is not None:
        known = prepared_on(driver)
        if known is None or not trip.uses <= known:  # (else nothing new: no new set)
            know_prepared(driver, set(trip.uses) if known is None else known | trip.uses)


def prepared_query(
    bind: Callable[[str, Any], str], ctx: StoreContext, part: AppendPart, known: set[str]
) -> tuple[str, frozenset[str]]:
    """:func:`one_query` with each statement ``EXECUTE``d as a prepared statement of the
    connection (``PREPARE``d first in the same query when not in ``known``), and the names
    it uses.

    The same statements run in the same order, in the same transaction, with the same values
    bound by the driver, so a lost race, a taken key or the wake-up fail as they do in
    :func:`one_query`; an insert of several rows is one ``EXECUTE`` per row. The tenant
    setting is prepared with the store's tenant bound into it (its name covers the values).
    ``PREPARE`` is not transactional: a statement prepared by a query that then failed stays
    prepared."""
    trip = one_trip(ctx, part)
    (tenant, (tenant_params,)), rest = trip[0], trip[1:]
    tenant_sql, tenant_names = tenant.positional
    tenant_values = tuple(tenant_params[name] for name in tenant_names)
    tenant_name = _bound_name(tenant_sql, tenant_values)
    prepares: list[str] = []
    if tenant_name not in known:
        prepares.append(bind("PREPARE " + tenant_name + " AS " + tenant_sql, tenant_values))
    uses = {tenant_name}
    statements = ["EXECUTE " + tenant_name]
    values: list[Any] = []
    for stmt, params in rest:
        sql, names = stmt.positional
        form = prepared_form(sql)
        if form.name not in known and form.name not in uses:
            prepares.append(form.prepare)
        uses.add(form.name)
        statements.extend([form.call] * len(params))
        for one in params:
            values.extend(one if type(one) is tuple else [one[name] for name in names])
    statements = _with_wake(ctx, part, statements, values)
    return ";".join([*prepares, bind(";".join(statements), values)]), frozenset(uses)


def one_query(bind: Callable[[str, Any], str], ctx: StoreContext, part: AppendPart) -> str:
    """:func:`one_trip`'s statements joined into one query and bound by one call of ``bind``
    (a client cursor's ``mogrify``), in their positional form: a call per statement cost
    the driver's fixed work (a transformer, the query's lookup) seven times over. An insert
    of several rows is one multi-row ``VALUES`` statement: one statement for the server to
    parse, and no arrays for the client to adapt (binding ``unnest`` arrays cost more than
    the rows' own values).

    When the store listens, the query is ``BEGIN; ...; COMMIT; SELECT pg_notify(...)``: the
    wake-up runs in a transaction of its own after the append's, which writes nothing and so
    never waits for a WAL flush. (``NOTIFY`` inside the append would hold PostgreSQL's one
    database-wide notify lock across the append's durable commit, so that appends to
    different sessions queued on it one flush at a time; docs/performance.md.) A first
    error skips the rest of the query, the ``NOTIFY`` included."""
    statements: list[str] = []
    values: list[Any] = []
    for stmt, params in one_trip(ctx, part):
        sql, names = stmt.positional
        if len(params) > 1 and sql.startswith("INSERT "):
            head, sep, row = sql.partition(" VALUES ")
            statements.append(head + sep + ", ".join([row] * len(params)))
        else:
            statements.extend([sql] * len(params))
        for one in params:
            values.extend(one if type(one) is tuple else [one[name] for name in names])
    return bind(";".join(_with_wake(ctx, part, statements, values)), values)


def _with_wake(
    ctx: StoreContext, part: AppendPart, statements: list[str], values: list[Any]
) -> list[str]:
    """``statements`` as one explicit block followed by the wake-up when the store listens
    (its values appended to ``values``); as they are otherwise.

    An explicit block: a COMMIT that ends the query's implicit transaction instead commits
    it with a WARNING ("there is no transaction in progress"), which the server writes to its
    log and sends to the client on every append."""
    notes = ctx.wake_notes([(part.session_id, part.head)]) if ctx.backend.listens else []
    if not notes:
        return statements
    sql, names = ctx.compiled.notify.positional
    values.extend(notes[0][name] for name in names)
    return ["BEGIN", *statements, "COMMIT", sql]


def wake(ctx: StoreContext, raw: Any, dbapi: Any, parts: Sequence[AppendPart]) -> None:
    """Wake the followers of ``parts`` after their transaction committed, on its connection
    ``raw`` (idle): one ``pg_notify`` per part in one transaction of its own, which writes
    nothing (no WAL flush while it holds the notify lock). The appends are durable already,
    so a failure here is logged, never raised: a follower that misses it finds the events at
    its next poll (``following``)."""
    if not ctx.backend.listens:
        return
    c = ctx.compiled
    notes = [c.notify.bind(n) for n in ctx.wake_notes((p.session_id, p.head) for p in parts)]
    if not notes:
        return
    try:
        cur = raw.cursor()
        with pipeline(raw.driver_connection):
            cur.executemany(c.notify.sql, notes)
        dbapi.commit()
    except psycopg.Error as exc:
        _log.warning("waking the followers after an append failed: %s", exc)
        if getattr(dbapi, "broken", False) or raw.driver_connection.broken:
            raw.invalidate()
        else:
            dbapi.rollback()


def one_trip_outcome(exc: psycopg.Error, part: AppendPart) -> bool:
    """What a failed one query means, by ``appends.classify``: its statements run in order,
    so the guard's division by zero is the head update matching no row, and any later error
    ran under the matched head (nothing was written). False for a lost race;
    ``CorruptSessionError`` raised for a taken key; anything else re-raised, except an error
    of PostgreSQL's notify code (``async.c``), which only the wake-up after the ``COMMIT`` can
    raise: the append committed (True), and its followers find it at their next poll."""
    if exc.diag.source_file == "async.c":
        _log.warning("waking the followers after an append failed: %s", exc)
        return True
    matched = 0 if isinstance(exc, psycopg.errors.DivisionByZero) else 1
    classify([part], [matched], at=0, error=exc)
    return False


def _append_one_trip(ctx: StoreContext, part: AppendPart) -> bool:
    """One session's append as one round trip that also commits: False (nothing written)
    when its head update matched no row.

    The statements of :func:`one_trip`, bound on the client, go as one query on a pooled
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
                cursor = psycopg.AsyncClientCursor(driver)
                return bool(await_(pg_async.append_async(ctx, cursor, part)))
            cur = psycopg.ClientCursor(driver)
            literal = False
            while True:
                trip = trip_query(cur.mogrify, ctx, part, driver, literal=literal)
                try:
                    cur.execute(trip.query)  # compiled statements
                except psycopg.Error as exc:
                    if driver.broken:
                        raise
                    forget_prepared(driver)
                    if driver.info.transaction_status == PG_INERROR:
                        driver.rollback()  # the failed explicit block of a listening store
                    if trip.uses is not None and exc.sqlstate in STALE_PREPARED:
                        literal = True  # nothing was written: once more, unprepared
                        continue
                    return one_trip_outcome(exc, part)
                settle_prepared(driver, trip, _last_rows(cur) if trip.reads_prepared else None)
                return True
        except BaseException:
            # Lost, or interrupted inside the query (its transaction then runs or rolls back
            # on the server alone): the pool drops the connection (see appends.abandon).
            if driver.broken or driver.info.transaction_status != PG_IDLE:
                raw.invalidate()
            raise
        finally:
            if not driver.closed and driver.info.transaction_status == PG_IDLE:
                dbapi.autocommit = False
    finally:
        raw.close()


def _last_rows(cur: Any) -> list[Any] | None:
    """The rows of the last result of a query of several statements (None if it has none)."""
    while cur.nextset():
        pass
    return list(cur.fetchall()) if cur.description is not None else None


def insert_rows(cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """One statement over column arrays (``Statements.insert_events_unnest``); the caller
    checks the count."""
    unnest = ctx.compiled.insert_events_unnest
    assert unnest is not None
    cur.execute(unnest.sql, unnest_values(rows))


def insert_nodes(cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """``executemany`` of the surface insert, each tuple named for its pyformat parameters."""
    named = [dict(zip(SURFACE_COLUMNS, row, strict=True)) for row in rows]
    cur.executemany(ctx.compiled.insert_node.sql, named)


def copy_allowed(cur: Any, ctx: StoreContext) -> bool:
    """``COPY`` needs the sync driver's cursor (the async engine's adapted one has none), and
    no row-level security on ``events`` for this role (``COPY FROM`` refuses such a table)."""
    if not hasattr(cur, "copy"):
        return False
    cur.execute(
        ROW_SECURITY_ACTIVE,
        (ctx.engine.dialect.identifier_preparer.format_table(ctx.tables.events),),
    )
    row = cur.fetchone()
    return row is not None and not row[0]


def begin_read(ctx: StoreContext, raw: Any) -> None:
    """The tenant setting first, in one pipeline with psycopg's ``BEGIN`` (the read's rows
    are then fetched outside the pipeline, as the async adapter needs)."""
    with pipeline(raw.driver_connection):
        raw.cursor().execute(ctx.compiled.set_tenant.sql, tenant_params(ctx))
