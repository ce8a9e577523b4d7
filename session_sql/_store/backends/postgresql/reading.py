"""The async store's ``refresh`` on PostgreSQL: the tenant setting and
``Statements.refresh_rows`` as one query (``transactions.refresh_flow``) on a kept
``AsyncConnection``: one round trip, one snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from session_sql._store.backends.postgresql import driving
from session_sql._store.backends.postgresql.one_query import tenant_params
from session_sql._store.transactions import (
    Query,
    StoredHead,
    Writes,
    refresh_flow,
    refresh_params,
)

if TYPE_CHECKING:
    pass


def _read(w: Writes, cur: Any, session_key: int, from_seq: int) -> Query:
    params = refresh_params(w, session_key, from_seq)
    tenant = w.own.set_tenant
    text = ";".join(
        [
            cur.mogrify(tenant.sql, tenant_params(w)),
            cur.mogrify(w.compiled.refresh_rows.sql, params),
        ]
    )
    return Query(text, last_rows=True)


async def read_new_async(
    w: Writes, cur: psycopg.AsyncClientCursor[Any], session_key: int, from_seq: int
) -> tuple[StoredHead, list[Any]] | None:
    """The async store's read, on a kept connection's client cursor (idle, in autocommit:
    the query's statements are one implicit transaction)."""
    read = _read(w, cur, session_key, from_seq)
    return await driving.run_async(refresh_flow(read), cur.connection, cur)
