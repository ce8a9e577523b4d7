"""What the schema gate reads of PostgreSQL's catalog: row-level security and the views'
rights (checked on every reflection), and the digest of the catalog a store of this build was
created with, which lets an open skip the reflection (``vouches_for_schema``)."""

from __future__ import annotations

import hashlib
from typing import Final, cast

from sqlalchemy import Connection, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert

from session_sql._store.backends.postgresql import precompiled
from session_sql._store.schema import (
    DDL_DIGEST,
    TENANT_POLICY,
    SchemaTables,
    meta_rows,
    view_names,
)

__all__ = ["record_schema", "structure_differences", "vouches_for_schema"]

_ROW_SECURITY: Final = text(
    "SELECT c.relname, c.relrowsecurity, EXISTS (SELECT 1 FROM pg_policy p "
    "WHERE p.polrelid = c.oid AND p.polname = :policy) AS has_policy "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relname = ANY(:names)"
)

# The views that read with their owner's rights: without ``security_invoker`` a view bypasses
# the row-level security of the tables it reads for every role that may select from it.
_OWNER_RIGHTS_VIEWS: Final = text(
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relkind = 'v' AND c.relname = ANY(:names) "
    "AND NOT EXISTS (SELECT 1 FROM pg_options_to_table(c.reloptions) o "
    "WHERE o.option_name = 'security_invoker' AND CAST(o.option_value AS BOOLEAN)) "
    "ORDER BY c.relname"
)


# Everything of the store's tables and views that the gate checks, as the server prints it,
# one line an object, in one order: the relations and their options, columns, constraints,
# indexes, view texts and the tenant policy. Printed with ``search_path`` set to
# ``pg_catalog`` alone, so that every role prints the same text. Anything changed or added on
# them by hand (an index, a column, a view, an option) changes it, and the gate then reflects
# as before. Each part is an index search of the catalogs by name or by the relations' oids.
_RELATIONS: Final = """
WITH r AS (
  SELECT c.oid, c.xmin, c.relname, c.relkind, c.relrowsecurity, c.relforcerowsecurity,
         c.reloptions
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = :schema AND c.relname = ANY(:names)
)"""
# The version of every catalog row the text above is printed from, as (oid, xmin): the
# store's relations, their indexes (the index and its relation), columns, defaults,
# constraints, view rules and policies. A DDL statement that changes the text writes a new
# version of one of these rows (a new xmin), adds one or removes one; only what no DDL sets
# (planner statistics) is written in place. Read in the same statement as the text, so
# both are of one snapshot.
_STATE: Final = """
SELECT string_agg(item, ',' ORDER BY item) FROM (
  SELECT format('c%s:%s', r.oid, r.xmin) FROM r
  UNION ALL
  SELECT format('i%s:%s:%s', i.indexrelid, i.xmin, ic.xmin)
    FROM r JOIN pg_catalog.pg_index i ON i.indrelid = r.oid
    JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
  UNION ALL
  SELECT format('a%s.%s:%s', a.attrelid, a.attnum, a.xmin)
    FROM r JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid WHERE a.attnum > 0
  UNION ALL
  SELECT format('d%s:%s', d.oid, d.xmin) FROM r JOIN pg_catalog.pg_attrdef d ON d.adrelid = r.oid
  UNION ALL
  SELECT format('k%s:%s', k.oid, k.xmin)
    FROM r JOIN pg_catalog.pg_constraint k ON k.conrelid = r.oid
  UNION ALL
  SELECT format('w%s:%s', w.oid, w.xmin) FROM r JOIN pg_catalog.pg_rewrite w ON w.ev_class = r.oid
  UNION ALL
  SELECT format('p%s:%s', p.oid, p.xmin) FROM r JOIN pg_catalog.pg_policy p ON p.polrelid = r.oid
) AS items(item)"""
_CATALOG_STATE: Final = text(_RELATIONS + _STATE)
"""The catalog's state alone (``_STATE``): what tells an unchanged catalog from a changed one."""
_CATALOG_TEXT: Final = text(
    _RELATIONS
    + """
SELECT (SELECT string_agg(item, E'\n' ORDER BY item) FROM (
  SELECT format('rel %s %s %s %s %s', relname, relkind, relrowsecurity, relforcerowsecurity,
                reloptions) FROM r
  UNION ALL
  SELECT format('col %s %s %s %s %s %s %s %s %s', r.relname, a.attnum, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attgenerated,
                a.attidentity, pg_get_expr(d.adbin, d.adrelid), a.attcollation)
    FROM r JOIN pg_attribute a ON a.attrelid = r.oid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('con %s %s %s', r.relname, k.conname, pg_get_constraintdef(k.oid))
    FROM r JOIN pg_constraint k ON k.conrelid = r.oid
  UNION ALL
  SELECT format('idx %s', pg_get_indexdef(i.indexrelid))
    FROM r JOIN pg_index i ON i.indrelid = r.oid
  UNION ALL
  SELECT format('view %s %s', relname, pg_get_viewdef(oid)) FROM r WHERE relkind = 'v'
  UNION ALL
  SELECT format('pol %s %s %s %s %s %s', r.relname, p.polname, p.polcmd, p.polpermissive,
                pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
    FROM r JOIN pg_policy p ON p.polrelid = r.oid WHERE p.polname = :policy
) AS items(item)), ("""
    + _STATE
    + ")"
)
_CATALOG_KEY: Final = "catalog_digest"
"""The ``session_sql_meta`` row recording, at creation, the digest of this build's DDL and of
the catalog the server made of it (``_catalog_digest``)."""


_READ: dict[tuple[str, str | None], tuple[str, str]] = {}
"""By database and schema: the catalog state and text this process last read together
(``_CATALOG_TEXT``), so that an open finding the same state takes the same text."""


def _catalog_text(conn: Connection, tables: SchemaTables, *, reuse: bool = False) -> str | None:
    """The live catalog of the store's schema (``_CATALOG_TEXT``), or ``None`` when the schema
    does not exist. Leaves ``search_path`` as it found it.

    ``reuse``: when this process read the text before and the catalog's state
    (``_CATALOG_STATE``) is the same now, that text, without printing it again: no row it
    was printed from has changed since. Printing it is most of what opening a store costs on
    a new connection (the views' text, every definition, each catalog the server loads).
    """
    names = [*(t.name for t in tables.base_tables), *view_names(tables)]
    schema = tables.metadata.schema
    where = (conn.engine.url.set(password=None).render_as_string(hide_password=False), schema)
    if reuse:
        read = _READ.get(where)
        state = {"schema": schema, "names": names}
        if read is not None:
            now = precompiled.execute(conn, ("catalog state",), lambda: _CATALOG_STATE, state)
            if now.scalar_one() == read[0]:
                return read[1]
    # The old path first: a target list is evaluated in order.
    was = conn.exec_driver_sql(
        "SELECT current_setting('search_path'), set_config('search_path', 'pg_catalog', true)"
    ).scalar_one()
    try:
        params = {"schema": schema, "names": names, "policy": TENANT_POLICY}
        catalog, state_now = conn.execute(_CATALOG_TEXT, params).one()
    finally:
        conn.execute(text("SELECT set_config('search_path', :was, true)"), {"was": was})
    if catalog is not None and state_now is not None:
        if len(_READ) >= 256:  # a text is some 14 kB: bounded
            _READ.clear()
        _READ[where] = (state_now, catalog)
    return cast(str | None, catalog)


def _catalog_digest(catalog: str) -> str:
    """sha256 of this build's DDL (``schema.DDL_DIGEST``) and the catalog the server made."""
    return hashlib.sha256(f"{DDL_DIGEST}\n{catalog}".encode()).hexdigest()


def structure_differences(conn: Connection, tables: SchemaTables) -> list[str]:
    """Row-level security is on for the three tables, each with its tenant policy
    (policies an administrator added beside it are allowed)."""
    names = [t.name for t in (tables.sessions, tables.events, tables.surface)]
    params = {"policy": TENANT_POLICY, "schema": tables.metadata.schema, "names": names}
    found = {row.relname: row for row in conn.execute(_ROW_SECURITY, params)}
    out: list[str] = []
    for name in names:
        row = found.get(name)
        if row is None:
            continue  # a missing table is reported already
        if not row.relrowsecurity:
            out.append(f"{name}: row-level security is not enabled")
        if not row.has_policy:
            out.append(f"{name}: missing row-level security policy {TENANT_POLICY}")
    views = {"schema": tables.metadata.schema, "names": view_names(tables)}
    out.extend(
        f"view {name}: reads with its owner's rights, bypassing row-level security "
        f"(ALTER VIEW {name} SET (security_invoker = true))"
        for name in conn.execute(_OWNER_RIGHTS_VIEWS, views).scalars()
    )
    return out


def vouches_for_schema(conn: Connection, tables: SchemaTables) -> bool:
    """The server prints its catalog in its own way, so the text this build's DDL became
    is recorded when the store is created (``record_schema``) and compared here: equal,
    this build made exactly this catalog and its gate checked it then."""
    catalog = _catalog_text(conn, tables, reuse=True)
    meta = tables.meta
    if catalog is None or f"\ncol {meta.name} 2 value text" not in "\n" + catalog:
        return False  # no meta table to read (a failed read would end the transaction)
    query = precompiled.execute(
        conn, ("meta rows", meta.schema), lambda: select(meta.c.key, meta.c.value), {}
    )
    rows = {str(row.key): str(row.value) for row in query}
    return rows.get(_CATALOG_KEY) == _catalog_digest(catalog) and all(
        rows.get(row["key"]) == row["value"] for row in meta_rows()
    )


def record_schema(conn: Connection, tables: SchemaTables) -> None:
    """After ``create_all``, in its transaction: the digest ``vouches_for_schema`` compares."""
    catalog = _catalog_text(conn, tables)
    assert catalog is not None  # just created
    row = {"key": _CATALOG_KEY, "value": _catalog_digest(catalog)}
    conn.execute(pg_insert(tables.meta).values(row))
