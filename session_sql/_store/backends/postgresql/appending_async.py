"""The async store's appends and refresh reads on PostgreSQL, on a psycopg
``AsyncConnection``: the sync store's one query (``appends.postgresql.one_query``), natively
awaited, with the same outcome rule (``appends.postgresql.one_trip_outcome``).

The two modules import each other as modules (each uses the other's functions only when
called), so either may be imported first.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg

from session_sql._store.backends.postgresql import appending as pg
from session_sql._store.backends.postgresql.backend import PG_INERROR
from session_sql._store.backends.postgresql.prepared import forget_prepared
from session_sql._store.context import StoreContext
from session_sql._store.transactions import AppendPart


async def append_async(
    ctx: StoreContext, cur: psycopg.AsyncClientCursor[Any], part: AppendPart
) -> bool:
    """``fastpath.append`` on a psycopg ``AsyncConnection`` (PostgreSQL, the async store): the
    same statements, checks and outcome as the sync store's one round trip, natively awaited.

    ``cur`` is a client-binding cursor on a connection that is idle, in autocommit, and the
    caller's alone. Each await on the asyncio driver costs a trip through the event loop, so
    the statements of ``appends.postgresql.one_trip`` are bound on the client and sent as one
    query: one await, one round trip, and (several statements in one query being one implicit
    transaction) committed when it returns, or rolled back whole by the first error.
    Afterwards the connection is idle again, unless it broke. With psycopg's prepared
    statements on, the statements run prepared on the connection, as the sync store's do
    (``appends.postgresql.trip_query``).
    """
    driver = cur.connection
    literal = False
    while True:
        trip = pg.trip_query(cur.mogrify, ctx, part, driver, literal=literal)
        try:
            await cur.execute(trip.query)  # compiled statements, bound by the driver
        except psycopg.Error as exc:
            if driver.broken:
                raise
            forget_prepared(driver)
            if driver.info.transaction_status == PG_INERROR:
                await driver.rollback()  # the failed explicit block of a listening store
            if trip.uses is not None and exc.sqlstate in pg.STALE_PREPARED:
                literal = True  # nothing was written: once more, unprepared
                continue
            return pg.one_trip_outcome(exc, part)
        names = None
        if trip.reads_prepared:
            while cur.nextset():
                pass
            names = await cur.fetchall() if cur.description is not None else None
        pg.settle_prepared(driver, trip, names)
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
        ";".join([cur.mogrify(tenant.sql, pg.tenant_params(ctx)), cur.mogrify(c.sql, params)])
    )
    cur.nextset()  # past the tenant setting's result
    rows = await cur.fetchall()
    if not rows:
        return None
    columns = len(StoredHead._fields)
    return StoredHead(*rows[0][:columns]), [r[columns:] for r in rows if r[columns] is not None]
