"""PostgreSQL's append transactions, and where they run.

One session's append is one query in autocommit (``one_query.one_trip_flow``: one round trip
that also commits); several sessions' go through one pipeline, every insert counted
(``transactions.counted_append``); a big batch (``COPY_MIN_ROWS`` events or more, fewer on
a distributed store: ``copy_min_events``) copies its rows (:func:`bulk_flow`).
:func:`append_flow` picks the form; the sync store runs it on a pooled connection
(:func:`append_parts`), the async store on one of its kept connections
(:func:`append_parts_async`), each through ``driving``'s loop for its driver. So both stores
run the same transactions, with the same checks and outcomes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import psycopg
from psycopg import sql as pgsql
from sqlalchemy import Table

from session_sql._store.backends.postgresql import driving
from session_sql._store.backends.postgresql.one_query import (
    one_trip_flow,
    tenant_first,
    tenant_runs,
)
from session_sql._store.rows import EVENT_VALUE_COLUMNS, SURFACE_COLUMNS
from session_sql._store.transactions import (
    ROLLBACK,
    AppendPart,
    Copy,
    Flow,
    Planned,
    Run,
    Send,
    SurfaceOp,
    T,
    Writes,
    classify,
    counted_append,
    event_rows,
    failed,
    finish,
    head_run,
    surface_ops,
    upkeep_runs,
    whole,
)

if TYPE_CHECKING:
    from session_sql._store.context import StoreContext

COPY_MIN_ROWS: Final = 32
"""From this many events in one append transaction, PostgreSQL's events go in by ``COPY``
(and from this many new surface nodes of a session, the nodes)."""

DISTRIBUTED_COPY_MIN_EVENTS: Final = 10
"""``COPY_MIN_ROWS`` of a distributed store. Through a Citus coordinator every row of the one
query is a statement the coordinator sends to the worker and waits for, where a ``COPY`` is one
stream, so copying pays from fewer rows (measured: the one query is faster up to about 9
events, the copy from about 10; docs/performance.md, W13)."""

DISTRIBUTED_COPY_MIN_NODES: Final = 2
"""The new surface nodes of a session from which a distributed store's batch copies them (each
row of an ``executemany`` is a statement through the coordinator; one row is one either way)."""

ROW_SECURITY_ACTIVE: Final = "SELECT row_security_active(CAST(%s AS regclass))"


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append ``parts`` in one transaction on a pooled connection (``Backend.append_parts``);
    one session's query runs in autocommit (it commits itself), and the connection goes back
    to the pool as it came (autocommit off, idle)."""
    raw = ctx.engine.raw_connection()
    try:
        driver: psycopg.Connection[Any] = raw.driver_connection  # type: ignore[assignment]
        one = _single(ctx.writes, parts) is not None
        client = psycopg.ClientCursor(driver) if one else None
        bind = _no_bind if client is None else client.mogrify
        flow = append_flow(ctx.writes, parts, driver, bind)
        if client is None:
            return _run(raw, driver, flow, None)
        return run_autocommit(raw, driver, flow, client)
    finally:
        raw.close()  # back to the pool, which resets it (or drops it when invalidated)


def run_autocommit(
    raw: Any, driver: psycopg.Connection[Any], flow: Flow[T], client: psycopg.ClientCursor[Any]
) -> T:
    """A flow of queries that commit themselves, on a pooled connection put in autocommit for
    its length (it goes back to the pool as it came: autocommit off, idle)."""
    driver.autocommit = True
    try:
        return _run(raw, driver, flow, client)
    finally:
        if not driver.closed and driver.info.transaction_status == driving.PG_IDLE:
            driver.autocommit = False


def _run(
    raw: Any,
    driver: psycopg.Connection[Any],
    flow: Flow[T],
    client: psycopg.ClientCursor[Any] | None,
) -> T:
    """``driving.run``; a connection lost, or interrupted inside a query (its transaction
    then runs or rolls back on the server alone), is dropped by the pool."""
    try:
        return driving.run(flow, driver, client)
    finally:
        if driver.broken or driver.info.transaction_status != driving.PG_IDLE:
            raw.invalidate()


async def append_parts_async(
    w: Writes, client: psycopg.AsyncClientCursor[Any], parts: Sequence[AppendPart]
) -> int | None:
    """:func:`append_parts` on one of the async store's kept connections (``client`` is its
    client-binding cursor; the connection idle, in autocommit, the caller's alone): the same
    flows, natively awaited. The counted forms run in a transaction of their own (autocommit
    off for its length)."""
    driver = client.connection
    flow = append_flow(w, parts, driver, client.mogrify)
    if _single(w, parts) is not None:
        return await driving.run_async(flow, driver, client)
    await driver.set_autocommit(False)
    try:
        return await driving.run_async(flow, driver, client)
    finally:
        if not driver.broken and driver.info.transaction_status == driving.PG_IDLE:
            await driver.set_autocommit(True)


def _single(w: Writes, parts: Sequence[AppendPart]) -> AppendPart | None:
    """The one part of an append sent as one query (a single session, not a big batch).

    Never where the tenant settings must reach Citus's workers (``distributed_sets``): they
    are ``SET LOCAL`` statements then, which Citus sends on to a worker, and in a query of
    several statements the worker's copy fails ("cannot execute a distributed query from a
    query on a shard"); the pipeline sends each statement as its own."""
    if w.own.distributed_sets or len(parts) != 1 or len(parts[0].events) >= copy_min_events(w):
        return None
    return parts[0]


def copy_min_events(w: Writes) -> int:
    """From how many events an append transaction of the store copies them."""
    return DISTRIBUTED_COPY_MIN_EVENTS if w.own.distributed else COPY_MIN_ROWS


def _copy_min_nodes(w: Writes) -> int:
    return DISTRIBUTED_COPY_MIN_NODES if w.own.distributed else COPY_MIN_ROWS


def _no_bind(sql: str, params: Any) -> str:
    raise AssertionError("the counted forms bind on the server")


def append_flow(
    w: Writes, parts: Sequence[AppendPart], driver: Any, bind: Callable[[str, Any], str]
) -> Flow[int | None]:
    """The transaction of ``parts``: one query for one session's (a lost race is index 0),
    else a pipeline, or ``COPY`` for a big batch."""
    one = _single(w, parts)
    if one is not None:
        moved = yield from one_trip_flow(w, one, driver, bind)
        return None if moved else 0
    bulk = sum(len(p.events) for p in parts) >= copy_min_events(w)
    if bulk:
        return (yield from bulk_flow(w, parts))
    c, own = w.compiled, w.own
    unnest = own.insert_events_unnest
    planned = []
    for p in parts:
        values = event_rows(w, p)
        ops = surface_ops(w, p.session_key, p.transitions, p.next_pos)
        if len(values) > 1:  # the whole batch as one statement over column arrays
            insert = Run(unnest.sql, unnest_values(values))
        elif values:
            insert = Run(c.insert_event_values, values[0])
        else:
            insert = Run(c.insert_event_values, values, many=True)
        planned.append(Planned(p, insert, len(values), ops))
    yield from tenant_first(w)
    begin = tenant_runs(w)
    return (yield from counted_append(w, parts, planned, begin=begin, stepwise=False))


class _Bulk(NamedTuple):
    part: AppendPart
    values: list[tuple[Any, ...]]
    ops: list[tuple[SurfaceOp, Any]]


def bulk_flow(w: Writes, parts: Sequence[AppendPart]) -> Flow[int | None]:
    """A big batch: the events by ``COPY``.

    ``COPY`` cannot run in a pipeline, nor skip a taken key, so the order differs from the
    pipeline's: one pipeline with the tenant setting, whether row security applies (``COPY
    FROM`` refuses such a table) and every conditional head update, whose counts decide
    before anything is inserted (the session rows are then locked, so a taken key can only be
    a row already past the head); then each session's events by ``COPY`` (or, under row
    security, one counted ``INSERT … unnest``); then, when copying, each session's first batch
    of ``COPY_MIN_ROWS`` surface rows or more (``DISTRIBUTED_COPY_MIN_NODES`` on a distributed
    store) by ``COPY`` (the server checks a surface row's two foreign keys either way, but a
    statement per row costs it more than the row); then one pipeline with the rest of the
    surface upkeep. The same checks and outcomes (``transactions.classify``) as the
    pipeline's; followers are woken after the commit.
    """
    own = w.own
    bulk = [
        _Bulk(p, event_rows(w, p), surface_ops(w, p.session_key, p.transitions, p.next_pos))
        for p in parts
    ]
    events, surface = copy_statement(w.tables.events, EVENT_VALUE_COLUMNS), None
    copy_min_nodes = _copy_min_nodes(w)
    yield from tenant_first(w)
    runs = [
        *tenant_runs(w),
        Run(ROW_SECURITY_ACTIVE, (qualified(w.tables.events),), fetch=True),
        *(head_run(w, b.part) for b in bulk),
    ]
    reply = yield Send(runs)
    heads = reply.counts[len(runs) - len(bulk) :]
    if reply.error is not None:
        return (yield from failed(parts, heads, reply.error))
    if not whole(parts, heads, []):
        yield ROLLBACK
        return classify(parts, heads)
    copying = reply.rows is not None and not reply.rows[0][0]
    for i, b in enumerate(bulk):
        if copying:
            reply = yield Copy(events, b.values)
        else:
            unnest = own.insert_events_unnest
            reply = yield Send([Run(unnest.sql, unnest_values(b.values))])
        if reply.error is not None:
            return (yield from failed(parts, heads, reply.error, at=i))
        if reply.counts[0] != len(b.values):
            yield ROLLBACK
            return classify(parts, heads, at=i)
    upkeep: list[Run] = []
    counted: list[tuple[int, int, int]] = []
    for i, b in enumerate(bulk):
        ops = b.ops
        if copying and ops and ops[0][0] is SurfaceOp.INSERT_NODES:
            rows = ops[0][1]
            if len(rows) >= copy_min_nodes:
                surface = surface or copy_statement(w.tables.surface, SURFACE_COLUMNS)
                values = [(r["session_key"], r["pos"], r["event_seq"], r["tenant"]) for r in rows]
                reply = yield Copy(surface, values)
                if reply.error is not None:
                    return (yield from failed(parts, heads, reply.error, at=i))
                if reply.counts[0] != len(rows):
                    yield ROLLBACK
                    return classify(parts, heads, at=i)
                ops = ops[1:]
        runs, expected = upkeep_runs(w, ops)
        counted += [(len(upkeep) + k, n, i) for k, n in enumerate(expected) if n >= 0]
        upkeep += runs
    checks: list[tuple[int, int, int]] = []
    if upkeep:
        reply = yield Send(upkeep)
        if reply.error is not None:
            return (yield from failed(parts, heads, reply.error))
        checks = [(reply.counts[k], n, i) for k, n, i in counted]
    return (yield from finish(w, parts, heads, checks))


def unnest_values(values: Sequence[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """``Statements.insert_events_unnest``'s parameters from ``rows.event_values`` rows."""
    columns = zip(*values, strict=True)
    return {f"u_{name}": list(col) for name, col in zip(EVENT_VALUE_COLUMNS, columns, strict=True)}


def qualified(table: Table) -> str:
    """``schema.table``, quoted, as ``regclass`` reads it."""
    return pgsql.Identifier(str(table.schema), table.name).as_string(None)


def copy_statement(table: Table, columns: Sequence[str]) -> pgsql.Composed:
    """``COPY table (columns) FROM STDIN``, identifiers quoted by psycopg."""
    return pgsql.SQL("COPY {} ({}) FROM STDIN").format(
        pgsql.Identifier(str(table.schema), table.name),
        pgsql.SQL(", ").join(map(pgsql.Identifier, columns)),
    )
