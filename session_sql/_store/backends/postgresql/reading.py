"""The async store's refresh on PostgreSQL: one query on a kept ``AsyncConnection``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from session_sql._store.backends.postgresql.one_query import tenant_params

if TYPE_CHECKING:
    from session_sql._store.transactions import Writes


class StoredHead(NamedTuple):
    """The session row's columns that ``refresh`` checks (``Statements.refresh_rows``' first)."""

    head_seq: int
    surface_next_pos: int
    replace_generation: int
    surface_digest: int
    incarnation: str


async def read_new_async(
    w: Writes, cur: Any, session_id: str, from_seq: int
) -> tuple[StoredHead, list[Any]] | None:
    """``refresh``'s reads on a kept psycopg ``AsyncClientCursor``: the session row and its
    event rows from ``from_seq`` up to its head (``None`` when there is no such session).

    The tenant setting and one statement that outer-joins the row to those events (one
    snapshot, as the sync read's head-bounded pair gives), bound on the client and sent as
    one query: one await and one round trip, where the pooled path pays a checkout,
    ``BEGIN``, two reads and the end of its transaction.
    """
    c = w.compiled.refresh_rows
    params = c.bind({**c.defaults, "b_tenant": w.tenant, "b_id": session_id, "b_from": from_seq})
    tenant = w.compiled.set_tenant
    await cur.execute(
        ";".join([cur.mogrify(tenant.sql, tenant_params(w)), cur.mogrify(c.sql, params)])
    )
    cur.nextset()  # past the tenant setting's result
    rows = await cur.fetchall()
    if not rows:
        return None
    columns = len(StoredHead._fields)
    return StoredHead(*rows[0][:columns]), [r[columns:] for r in rows if r[columns] is not None]
