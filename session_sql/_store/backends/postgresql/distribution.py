"""The store distributed on Citus: the tables distributed at creation, and what the gate
checks of a distribution (complete, or none at all).

The per-session tables (``sessions``, ``events``, ``surface``) are distributed by
``session_key`` and co-located, so that every statement of one session goes to the shard
holding it; ``session_ids`` is distributed by the public id, so a lookup by id goes to one
shard too; ``session_sql_meta`` is a reference table (a copy on every node).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from sqlalchemy import Connection, Table, text

from session_sql._store.backends.postgresql import precompiled
from session_sql._store.schema import SchemaTables

__all__ = [
    "Placement",
    "citus_installed",
    "distribute",
    "distribution",
    "distribution_differences",
]


class Placement(NamedTuple):
    """How Citus holds one table (a row of ``pg_dist_partition``)."""

    method: str
    """``h``: hash-distributed; ``n``: a reference table (or a Citus local table)."""
    replication: str
    """``t``: a reference table's copies on every node; ``s``: statement-based."""
    column: str | None
    """The distribution column (``None`` for a reference table)."""
    colocation: int


_INSTALLED: Final = text("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")

_PLACEMENTS: Final = text(
    "SELECT c.relname, p.partmethod, p.repmodel, "
    "CASE WHEN p.partkey IS NULL OR p.partkey = '' THEN NULL "
    "ELSE column_to_column_name(p.logicalrelid, p.partkey) END AS column_name, "
    "p.colocationid FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relname = ANY(:names)"
)


def citus_installed(conn: Connection) -> bool:
    """Whether the database has the ``citus`` extension (then a new store is distributed
    unless it is opened with ``distributed=False``)."""
    return bool(
        precompiled.execute(conn, ("citus installed",), lambda: _INSTALLED, {}).scalar_one()
    )


def distribution(conn: Connection, tables: SchemaTables) -> dict[str, Placement]:
    """How Citus holds the store's tables, by name; empty without Citus or when none of
    them is distributed."""
    if not citus_installed(conn):
        return {}
    names = [t.name for t in tables.base_tables]
    params = {"schema": tables.metadata.schema, "names": names}
    return {
        row.relname: Placement(row.partmethod, row.repmodel, row.column_name, row.colocationid)
        for row in conn.execute(_PLACEMENTS, params)
    }


def _per_session(tables: SchemaTables) -> tuple[Table, ...]:
    return (tables.sessions, tables.events, tables.surface)


def distribute(conn: Connection, tables: SchemaTables) -> None:
    """Distribute the store's new, empty tables in the creating transaction, before the
    views and the meta rows: the meta table a reference table, ``sessions`` by its key in a
    co-location group of its own, ``events`` and ``surface`` co-located with it, and
    ``session_ids`` by the public id."""

    def name(table: Table) -> str:
        return conn.dialect.identifier_preparer.format_table(table)

    conn.execute(text("SELECT create_reference_table(:t)"), {"t": name(tables.meta)})
    sessions = name(tables.sessions)
    conn.execute(
        text("SELECT create_distributed_table(:t, 'session_key', colocate_with => 'none')"),
        {"t": sessions},
    )
    for table in (tables.events, tables.surface):
        conn.execute(
            text("SELECT create_distributed_table(:t, 'session_key', colocate_with => :with)"),
            {"t": name(table), "with": sessions},
        )
    conn.execute(
        text("SELECT create_distributed_table(:t, 'id', colocate_with => 'none')"),
        {"t": name(tables.session_ids)},
    )


def distribution_differences(tables: SchemaTables, placed: dict[str, Placement]) -> list[str]:
    """What keeps a distribution from being this build's, one line each; none when no table
    is distributed (a plain store) or all are as ``distribute`` makes them."""
    if not placed:
        return []
    out: list[str] = []
    meta = placed.get(tables.meta.name)
    if meta is None or (meta.method, meta.replication) != ("n", "t"):
        out.append(f"{tables.meta.name}: not a reference table")
    sessions = placed.get(tables.sessions.name)
    for table in _per_session(tables):
        place = placed.get(table.name)
        if place is None or (place.method, place.column) != ("h", "session_key"):
            out.append(f"{table.name}: not distributed by session_key")
        elif sessions is not None and place.colocation != sessions.colocation:
            out.append(f"{table.name}: not co-located with {tables.sessions.name}")
    ids = placed.get(tables.session_ids.name)
    if ids is None or (ids.method, ids.column) != ("h", "id"):
        out.append(f"{tables.session_ids.name}: not distributed by id")
    return out
