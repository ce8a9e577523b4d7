"""The schema keeps what distributing it by tenant needs (docs/citus.md).

A distributed table's primary key and unique constraints must contain the distribution column,
and a foreign key between distributed tables must join on it, so that every row of a session
(its events and surface) lives on the same node as the session. The store leads every key with
``tenant`` and the session column; these tests check that on the schema as code (both
dialects) and on a live database (reflected), and that the check notices a key without them.

The constraints today (names from the naming convention):

- sessions: ``pk_sessions (tenant, id)``
- events: ``pk_events (tenant, session_id, seq)``,
  ``fk_events_tenant_session_id_sessions (tenant, session_id) -> sessions (tenant, id)``
- surface: ``pk_surface (tenant, session_id, pos)``,
  ``uq_surface_tenant_session_id_event_seq (tenant, session_id, event_seq)``,
  ``fk_surface_tenant_session_id_sessions (tenant, session_id) -> sessions (tenant, id)``,
  ``fk_surface_tenant_session_id_event_seq_events
  (tenant, session_id, event_seq) -> events (tenant, session_id, seq)``
- session_sql_meta: ``pk_session_sql_meta (key)``, no tenant (a reference table)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from sqlalchemy import (
    Column,
    Engine,
    ForeignKeyConstraint,
    Inspector,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    inspect,
)

from session_sql._store.backends import read_tx, target_schema
from session_sql._store.gate import ensure_schema
from session_sql._store.schema import DEFAULT_SCHEMA, tables_for

DISTRIBUTION = "tenant"
SESSION_COLUMN = {"sessions": "id", "events": "session_id", "surface": "session_id"}
"""The session column of each distributed table: with the tenant, what every key must hold."""
REFERENCE = "session_sql_meta"


@dataclass(frozen=True)
class Key:
    """A primary key, unique constraint or foreign key, as code or as reflected."""

    table: str
    kind: str  # "primary key", "unique", "foreign key"
    name: str | None
    columns: tuple[str, ...]
    referred_table: str | None = None
    referred_columns: tuple[str, ...] = ()


def keys_of_tables(tables: Iterable[Table]) -> list[Key]:
    """Every key of ``tables`` (the schema as code)."""
    out: list[Key] = []
    for table in tables:
        for c in table.constraints:
            if isinstance(c, PrimaryKeyConstraint):
                out.append(Key(table.name, "primary key", c.name, tuple(x.name for x in c.columns)))
            elif isinstance(c, UniqueConstraint):
                out.append(Key(table.name, "unique", c.name, tuple(x.name for x in c.columns)))
            elif isinstance(c, ForeignKeyConstraint):
                out.append(
                    Key(
                        table.name,
                        "foreign key",
                        c.name,
                        tuple(c.column_keys),
                        c.referred_table.name,
                        tuple(e.column.name for e in c.elements),
                    )
                )
        # A unique index is a unique constraint for distribution purposes.
        for ix in table.indexes:
            if ix.unique:
                out.append(Key(table.name, "unique", ix.name, tuple(x.name for x in ix.columns)))
    return out


def keys_of_database(insp: Inspector, schema: str | None) -> list[Key]:
    """Every key of every table in ``schema`` of a live database (reflected)."""
    out: list[Key] = []
    for table in insp.get_table_names(schema):
        pk = insp.get_pk_constraint(table, schema)
        out.append(
            Key(table, "primary key", pk.get("name"), tuple(pk.get("constrained_columns") or ()))
        )
        out.extend(
            Key(table, "unique", u.get("name"), tuple(u["column_names"]))
            for u in insp.get_unique_constraints(table, schema)
        )
        out.extend(
            Key(table, "unique", ix.get("name"), tuple(str(c) for c in ix["column_names"]))
            for ix in insp.get_indexes(table, schema)
            if ix["unique"] and "duplicates_constraint" not in ix
        )
        out.extend(
            Key(
                table,
                "foreign key",
                fk.get("name"),
                tuple(fk["constrained_columns"]),
                fk["referred_table"],
                tuple(fk["referred_columns"]),
            )
            for fk in insp.get_foreign_keys(table, schema)
        )
    return out


def distribution_problems(keys: list[Key], columns: dict[str, set[str]]) -> list[str]:
    """What keeps these tables from being distributed by tenant and co-located per session.

    ``columns`` maps each table name to its column names (the reference table must have no
    tenant). An empty list means every key qualifies.
    """
    out: list[str] = []
    for key in keys:
        if key.table == REFERENCE:
            if key.kind == "foreign key":
                out.append(f"{key.table}: a reference table has foreign key {key.name}")
            continue
        if key.table not in SESSION_COLUMN:
            out.append(f"unexpected table {key.table} ({key.kind} {key.name})")
            continue
        need = {DISTRIBUTION, SESSION_COLUMN[key.table]}
        if not need <= set(key.columns):
            out.append(
                f"{key.table}: {key.kind} {key.name} ({', '.join(key.columns)}) "
                f"lacks {', '.join(sorted(need - set(key.columns)))}"
            )
        if key.kind != "foreign key":
            continue
        if key.referred_table not in SESSION_COLUMN:
            out.append(f"{key.table}: foreign key {key.name} refers to {key.referred_table}")
            continue
        # Co-located: the tenant joins the tenant, the session column the session column.
        pairs = dict(zip(key.columns, key.referred_columns, strict=True))
        if pairs.get(DISTRIBUTION) != DISTRIBUTION:
            out.append(f"{key.table}: foreign key {key.name} does not join tenant to tenant")
        if pairs.get(SESSION_COLUMN[key.table]) != SESSION_COLUMN[key.referred_table]:
            out.append(
                f"{key.table}: foreign key {key.name} does not join "
                f"{SESSION_COLUMN[key.table]} to {key.referred_table}."
                f"{SESSION_COLUMN[key.referred_table]}"
            )
    for table, names in columns.items():
        if table == REFERENCE and DISTRIBUTION in names:
            out.append(f"{REFERENCE} has a {DISTRIBUTION} column; it must stay a reference table")
        if table in SESSION_COLUMN and DISTRIBUTION not in names:
            out.append(f"{table} has no {DISTRIBUTION} column")
    return out


EXPECTED_KEYS = {
    ("sessions", "primary key", ("tenant", "id")),
    ("events", "primary key", ("tenant", "session_id", "seq")),
    ("events", "foreign key", ("tenant", "session_id")),
    ("surface", "primary key", ("tenant", "session_id", "pos")),
    ("surface", "unique", ("tenant", "session_id", "event_seq")),
    ("surface", "foreign key", ("tenant", "session_id")),
    ("surface", "foreign key", ("tenant", "session_id", "event_seq")),
    ("session_sql_meta", "primary key", ("key",)),
}
"""The keys listed in the module docstring: the check below must have seen each of them."""


def _shape(keys: list[Key]) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(k.table, k.kind, k.columns) for k in keys}


@pytest.mark.parametrize("schema", [None, DEFAULT_SCHEMA], ids=["sqlite", "postgresql"])
def test_schema_as_code_can_be_distributed_by_tenant(schema: str | None):
    # The view (surface_messages) lives in the same MetaData; only the real tables count.
    base = tables_for(schema).base_tables
    keys = keys_of_tables(base)
    assert _shape(keys) == EXPECTED_KEYS
    columns = _columns(base)
    assert set(columns) == {REFERENCE, *SESSION_COLUMN}
    assert distribution_problems(keys, columns) == []


def test_live_schema_can_be_distributed_by_tenant(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    schema = target_schema(engine, backend.schema)
    with read_tx(engine) as conn:
        insp = inspect(conn)
        keys = keys_of_database(insp, schema)
        columns = {
            t: {c["name"] for c in insp.get_columns(t, schema)}
            for t in insp.get_table_names(schema)
        }
    assert _shape(keys) == EXPECTED_KEYS
    assert set(columns) == {REFERENCE, *SESSION_COLUMN}
    assert distribution_problems(keys, columns) == []


def test_live_check_notices_a_unique_index_without_tenant(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    schema = target_schema(engine, backend.schema)
    events = engine.dialect.identifier_preparer.format_table(tables_for(schema).events)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE UNIQUE INDEX ix_no_tenant ON {events} (session_id, seq)")
    with read_tx(engine) as conn:
        keys = keys_of_database(inspect(conn), schema)
    assert distribution_problems(keys, {}) == [
        "events: unique ix_no_tenant (session_id, seq) lacks tenant"
    ]


def _columns(tables: Iterable[Table]) -> dict[str, set[str]]:
    return {t.name: {c.name for c in t.columns} for t in tables}


def _copy() -> MetaData:
    """A copy of the real tables, to add a constraint to (the real ones stay intact)."""
    md = MetaData()
    for t in tables_for(None).base_tables:
        t.to_metadata(md)
    return md


def _with(extra: UniqueConstraint, table: str) -> tuple[list[Key], dict[str, set[str]]]:
    """The real schema plus one added constraint on ``table`` (a copy; the real one is intact)."""
    md = _copy()
    md.tables[table].append_constraint(extra)
    return keys_of_tables(md.tables.values()), _columns(md.tables.values())


@pytest.mark.parametrize(
    ("added", "table", "lacks"),
    [
        (UniqueConstraint("session_id", "seq", name="uq_no_tenant"), "events", "tenant"),
        (UniqueConstraint("tenant", "type", "seq", name="uq_no_session"), "events", "session_id"),
        (UniqueConstraint("tenant", "created_at", name="uq_created"), "sessions", "id"),
    ],
)
def test_the_check_refuses_a_key_without_tenant_and_session(added, table, lacks):
    keys, columns = _with(added, table)
    problems = distribution_problems(keys, columns)
    assert len(problems) == 1
    assert f"{added.name}" in problems[0] and f"lacks {lacks}" in problems[0]


def test_the_check_refuses_a_foreign_key_that_is_not_colocated():
    md = _copy()
    # Joins the session column to the wrong place: rows need not share a node.
    md.tables["surface"].append_constraint(
        ForeignKeyConstraint(
            ["tenant", "session_id"],
            [md.tables["sessions"].c.id, md.tables["sessions"].c.tenant],
            name="fk_crossed",
        )
    )
    problems = distribution_problems(
        keys_of_tables(md.tables.values()), _columns(md.tables.values())
    )
    assert problems == [
        "surface: foreign key fk_crossed does not join tenant to tenant",
        "surface: foreign key fk_crossed does not join session_id to sessions.id",
    ]


def test_the_check_refuses_a_tenant_on_the_reference_table():
    md = _copy()
    md.tables[REFERENCE].append_column(Column("tenant", Text))
    problems = distribution_problems(
        keys_of_tables(md.tables.values()), _columns(md.tables.values())
    )
    assert problems == [f"{REFERENCE} has a tenant column; it must stay a reference table"]


def test_the_check_refuses_an_unknown_table():
    md = MetaData()
    Table("notes", md, Column("id", Text, primary_key=True))
    problems = distribution_problems(keys_of_tables(md.tables.values()), {"notes": {"id"}})
    assert problems == ["unexpected table notes (primary key None)"]
