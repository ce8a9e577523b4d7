"""The schema gate (SPEC §8.2): initialise an empty database, refuse any other build's.

Nothing is migrated in place. A database is either empty (initialised here, in one transaction,
unless the caller only reads), or carries this build's ``schema_version`` and exactly this
build's structure; anything else is refused before a single row is written. A database (or
PostgreSQL schema) that holds other tables but none of ours belongs to another application: it
is refused with ``SchemaVersionError`` and left exactly as it was. The way across versions is
a new store: ``migrate`` copies every session into it (reading earlier versions with
``stored_version`` and plain SQL), or an export with the build that wrote them and an import
with this one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Connection,
    Engine,
    UniqueConstraint,
    inspect,
    select,
)
from sqlalchemy.engine import Dialect, Inspector
from sqlalchemy.engine.interfaces import ReflectedColumn
from sqlalchemy.engine.reflection import ObjectKind
from sqlalchemy.exc import CompileError
from sqlalchemy.types import TypeEngine

from session_sql._store.database import (
    backend_for,
    create_tx,
    snapshot_tx,
    store_label,
    target_schema,
    translate_errors,
)
from session_sql._store.schema import (
    APPLICATION,
    SCHEMA_VERSION,
    SchemaTables,
    create_all,
    indexes_of,
    tables_for,
)
from session_sql._store.views import view_select
from session_sql.errors import (
    ConfigurationError,
    PermanentStoreError,
    SchemaMismatchError,
    SchemaVersionError,
)

__all__ = ["ensure_schema", "stored_version"]

_Columns = dict[tuple[str | None, str], list[ReflectedColumn]]
"""Reflected columns keyed by (schema, table), as ``Inspector.get_multi_columns`` returns."""

_ACROSS_VERSIONS = (
    "a database is never changed in place: copy its sessions into a new database or schema "
    "with 'session-sql migrate --from URL --to NEW_URL' (it reads schema versions 1 to "
    f"{SCHEMA_VERSION}), or export them with the build that wrote them "
    "('session-sql export --all DIR') and import them with this one ('session-sql import DIR'); "
    "see docs/operations.md"
)


def ensure_schema(
    engine: Engine, schema: str | None, *, create: bool = True, distributed: bool | None = None
) -> bool:
    """Initialise an empty database (if ``create``), or check that it is exactly this build's;
    returns whether the store is distributed (Citus).

    ``distributed``: ``None`` creates a store distributed where the ``citus`` extension is
    installed, ``True`` requires that, ``False`` creates plain tables even there; an existing
    store that is not what ``True`` or ``False`` asks for is refused (``ConfigurationError``).

    ``schema`` names the PostgreSQL schema and is ignored on SQLite. Raises
    ``SchemaVersionError`` (another build's database, session_sql tables without a version, or
    another application's tables and none of ours), ``SchemaMismatchError`` (the structure
    differs; every difference is listed) or ``StoreError`` (empty and not ``create``;
    unreachable, locked, or not a database at all). Writes nothing unless the database is empty
    and ``create`` is true.
    """
    label = store_label(engine, schema)
    schema = target_schema(engine, schema)
    tables = tables_for(schema)
    with translate_errors(database=label):
        # One snapshot for the whole look (REPEATABLE READ on PostgreSQL): under READ
        # COMMITTED each reflection query sees what committed since the one before, so a
        # rival's initialisation committing between them would show its views but none of
        # its tables, and be refused as a store without a version. (Under the init lock
        # below no rival can commit one, so READ COMMITTED is right there.)
        with snapshot_tx(engine) as conn:
            backend = backend_for(conn)
            if backend.vouches_for_schema(conn, tables):
                # Exactly the catalog this build created: nothing to reflect.
                return _distribution(conn, tables, label, distributed)
            insp = inspect(conn)
            if _present_objects(insp, tables):
                _check(conn, insp, tables, label)
                return _distribution(conn, tables, label, distributed)
            _refuse_foreign(insp, tables, label)
        if not create:
            raise PermanentStoreError.no_store(label, "it has no session_sql tables")
        # Looked empty: re-check under the init lock, since another process may be first.
        with create_tx(engine) as conn:
            backend.lock_schema_init(conn, schema)
            insp = inspect(conn)
            if not _present_objects(insp, tables):
                _refuse_foreign(insp, tables, label)
                spread = _spread(conn, label, distributed)
                create_all(conn, schema, backend.distribute if spread else None)
                backend.record_schema(conn, tables)
                return spread
            _check(conn, insp, tables, label)
            return _distribution(conn, tables, label, distributed)


def _spread(conn: Connection, label: str, distributed: bool | None) -> bool:
    """Whether a new store is created distributed (see ``ensure_schema``)."""
    if distributed is False:
        return False
    possible = backend_for(conn).can_distribute(conn)
    if distributed and not possible:
        raise ConfigurationError(
            f"{label}: distributed=True needs PostgreSQL with the citus extension "
            "(CREATE EXTENSION citus on the coordinator); this database has none",
            option="distributed",
        )
    return possible


def _distribution(conn: Connection, tables: SchemaTables, label: str, wanted: bool | None) -> bool:
    """Whether the store is distributed; refuses a half-distributed one
    (``SchemaMismatchError``, saying what is missing) and one that is not what ``wanted``
    asks for (``ConfigurationError``)."""
    spread, differences = backend_for(conn).distribution(conn, tables)
    if differences:
        listing = "".join(f"\n  - {d}" for d in differences)
        raise SchemaMismatchError(
            f"{label}: the store is distributed only in part; refusing to open it (create "
            f"a distributed store and migrate into it, see docs/citus.md):{listing}",
            expected=SCHEMA_VERSION,
            actual=str(SCHEMA_VERSION),
            differences=tuple(differences),
        )
    if wanted is not None and wanted != spread:
        have, asked = ("distributed", "False") if spread else ("plain tables", "True")
        raise ConfigurationError(
            f"{label}: the store has {have}, but distributed={asked} was asked for; open it "
            "with distributed=None, or migrate it into a new store of the other kind",
            option="distributed",
        )
    return spread


def _present_objects(insp: Inspector, tables: SchemaTables) -> set[str]:
    """Which of this build's table and view names exist in the target schema."""
    schema = tables.metadata.schema
    ours = {t.name for t in tables.base_tables} | {tables.surface_messages.name}
    live = set(insp.get_table_names(schema)) | set(insp.get_view_names(schema))
    return ours & live


def _refuse_foreign(insp: Inspector, tables: SchemaTables, label: str) -> None:
    """Refuse a database (schema) holding another application's tables and none of ours."""
    schema = tables.metadata.schema
    foreign = sorted(set(insp.get_table_names(schema)) | set(insp.get_view_names(schema)))
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise SchemaVersionError(
            f"{label}: is not empty and has no session_sql tables ({len(foreign)} other "
            f"table(s) or view(s): {shown}); refusing to add session_sql tables to another "
            "application's database: use an empty database"
            + (" or a new schema" if schema is not None else " file"),
            expected=SCHEMA_VERSION,
            actual=None,
        )


def _check(conn: Connection, insp: Inspector, tables: SchemaTables, label: str) -> None:
    # Reflected once and shared: PostgreSQL's Inspector does not cache get_multi_columns.
    columns = insp.get_multi_columns(
        schema=tables.metadata.schema, filter_names=_table_names(tables)
    )
    _check_version(conn, insp, columns, tables, label)
    differences = _differences(insp, columns, tables, conn.dialect)
    differences += backend_for(conn).structure_differences(conn, tables)
    if differences:
        listing = "".join(f"\n  - {d}" for d in differences)
        raise SchemaMismatchError(
            f"{label}: the database structure differs from session_sql schema version "
            f"{SCHEMA_VERSION} ({len(differences)} difference(s)); refusing to open it:"
            f"{listing}",
            expected=SCHEMA_VERSION,
            actual=str(SCHEMA_VERSION),
            differences=tuple(differences),
        )


def stored_version(engine: Engine, schema: str | None) -> int:
    """The schema version a store records, read without the rest of the gate (``migrate``
    reads stores of earlier versions).

    Raises ``StoreError`` when there is no store (the database or schema has none of our
    tables) and ``SchemaVersionError`` when the version is unknown (no meta table or row, or a
    value that is not a number) or another application wrote the database. Writes nothing.
    """
    label = store_label(engine, schema)
    schema = target_schema(engine, schema)
    tables = tables_for(schema)
    with translate_errors(database=label), snapshot_tx(engine) as conn:
        insp = inspect(conn)
        if not _present_objects(insp, tables):
            _refuse_foreign(insp, tables, label)
            raise PermanentStoreError.no_store(label, "it has no session_sql tables", hint=False)
        columns = insp.get_multi_columns(schema=schema, filter_names=[tables.meta.name])
        actual, application = _stored_meta(conn, insp, columns, tables, label)
    if application != APPLICATION:
        raise SchemaVersionError(
            f"{label}: the {tables.meta.name} table names application {application!r}, "
            f"not {APPLICATION!r}; refusing to read a database another program wrote",
            expected=SCHEMA_VERSION,
            actual=actual,
        )
    if not (actual.isdecimal() and actual.isascii() and str(int(actual)) == actual):
        raise SchemaVersionError(
            f"{label}: {_describe_version(actual)}", expected=SCHEMA_VERSION, actual=actual
        )
    return int(actual)


def _check_version(
    conn: Connection, insp: Inspector, columns: _Columns, tables: SchemaTables, label: str
) -> None:
    actual, application = _stored_meta(conn, insp, columns, tables, label)
    if actual != str(SCHEMA_VERSION):
        raise SchemaVersionError(
            f"{label}: {_describe_version(actual)}; {_ACROSS_VERSIONS}",
            expected=SCHEMA_VERSION,
            actual=actual,
        )
    if application != APPLICATION:
        raise SchemaVersionError(
            f"{label}: the {tables.meta.name} table names application {application!r}, "
            f"not {APPLICATION!r}; refusing to open a database another program wrote",
            expected=SCHEMA_VERSION,
            actual=actual,
        )


def _stored_meta(
    conn: Connection, insp: Inspector, columns: _Columns, tables: SchemaTables, label: str
) -> tuple[str, str | None]:
    """``(schema_version, application)`` from the meta table; ``SchemaVersionError`` when the
    table or the version row is missing (the version is unknown)."""
    meta = tables.meta
    schema = tables.metadata.schema
    if meta.name not in insp.get_table_names(schema):
        raise SchemaVersionError(
            f"{label}: has session_sql tables but no {meta.name} table, so its schema version "
            f"is unknown (this build writes version {SCHEMA_VERSION}); {_ACROSS_VERSIONS}",
            expected=SCHEMA_VERSION,
            actual=None,
        )
    live_columns = {c["name"] for c in columns.get((schema, meta.name), [])}
    rows: dict[str, str] = {}
    if {"key", "value"} <= live_columns:
        result = conn.execute(
            select(meta.c.key, meta.c.value).where(
                meta.c.key.in_(["schema_version", "application"])
            )
        )
        rows = {str(k): str(v) for k, v in result}
    actual = rows.get("schema_version")
    if actual is None:
        raise SchemaVersionError(
            f"{label}: has session_sql tables but no schema_version row, so its schema version "
            f"is unknown (this build writes version {SCHEMA_VERSION}); {_ACROSS_VERSIONS}",
            expected=SCHEMA_VERSION,
            actual=None,
        )
    return actual, rows.get("application")


def _describe_version(actual: str) -> str:
    number = int(actual) if actual.isdecimal() and actual.isascii() else None
    if number is None or str(number) != actual:
        return (
            f"the stored schema version is {actual!r}, which is not one this build "
            f"understands (this build writes {str(SCHEMA_VERSION)!r})"
        )
    relation = "newer" if number > SCHEMA_VERSION else "older"
    return f"schema version {number} is {relation} than this build's version {SCHEMA_VERSION}" + (
        "; upgrade session_sql to open it" if relation == "newer" else ""
    )


# --------------------------------------------------------------------------------------------
# Structure comparison


def _table_names(tables: SchemaTables) -> list[str]:
    return [t.name for t in tables.base_tables]


def _differences(
    insp: Inspector, columns: _Columns, tables: SchemaTables, dialect: Dialect
) -> list[str]:
    """Every way the live structure differs from ``tables``, one readable line each."""
    schema = tables.metadata.schema
    names = _table_names(tables)
    # One reflection query per kind for all tables (get_multi_*), not one per table.
    pks = insp.get_multi_pk_constraint(schema=schema, filter_names=names)
    uniques = insp.get_multi_unique_constraints(schema=schema, filter_names=names)
    indexes = insp.get_multi_indexes(schema=schema, filter_names=names)
    fks = insp.get_multi_foreign_keys(schema=schema, filter_names=names)
    checks = insp.get_multi_check_constraints(schema=schema, filter_names=names)

    backend = backend_for(dialect)  # whose dialect options the indexes declare
    out: list[str] = []
    for table in tables.base_tables:
        key = (schema, table.name)
        if key not in columns:
            out.append(f"missing table {table.name}")
            continue
        out.extend(_column_differences(table.name, table.columns, columns[key], dialect))

        pk: Mapping[str, Any] = pks.get(key) or {}
        expected_pk = (str(table.primary_key.name), tuple(c.name for c in table.primary_key))
        live_pk = (pk.get("name"), tuple(pk.get("constrained_columns") or ()))
        if not _same_named(expected_pk, live_pk):
            out.append(
                f"{table.name}: primary key is {_fmt(live_pk)}, expected {_fmt(expected_pk)}"
            )

        expected_uq = {
            (str(c.name), tuple(col.name for col in c.columns))
            for c in table.constraints
            if isinstance(c, UniqueConstraint)
        }
        live_uq = {(u["name"], tuple(u["column_names"])) for u in uniques.get(key, [])}
        out.extend(_set_differences(table.name, "unique constraint", expected_uq, live_uq))

        ours = indexes_of(table, backend.name)
        expected_ix = {
            (str(ix.name), tuple(c.name for c in ix.columns), bool(ix.unique)) for ix in ours
        }
        live_ix = {
            (ix["name"], tuple(str(c) for c in ix["column_names"]), bool(ix["unique"]))
            for ix in indexes.get(key, [])
            if "duplicates_constraint" not in ix  # PostgreSQL's index behind a UNIQUE
        }
        out.extend(_set_differences(table.name, "index", expected_ix, live_ix))
        partial = {
            str(ix.name): _predicate(ix.dialect_options[backend.name].get("where"))
            for ix in ours
            if ix.dialect_options[backend.name].get("where") is not None
        }
        access = {
            str(ix.name): (
                ix.dialect_options[backend.name].get("using") or "btree",
                dict(ix.dialect_options[backend.name].get("ops") or {}),
            )
            for ix in ours
        }
        out.extend(_index_option_differences(table.name, indexes.get(key, []), partial, access))

        expected_fk = {
            (
                str(fk.name),
                tuple(fk.column_keys),
                fk.referred_table.name,
                tuple(e.column.name for e in fk.elements),
                (fk.ondelete or "").upper(),
            )
            for fk in table.foreign_key_constraints
        }
        live_fk = {
            (
                fk["name"],
                tuple(fk["constrained_columns"]),
                fk["referred_table"],
                tuple(fk["referred_columns"]),
                str(fk.get("options", {}).get("ondelete") or "").upper(),
            )
            for fk in fks.get(key, [])
        }
        out.extend(_set_differences(table.name, "foreign key", expected_fk, live_fk))
        out.extend(_foreign_key_option_differences(table.name, fks.get(key, [])))

        expected_ck = {str(c.name) for c in table.constraints if isinstance(c, CheckConstraint)}
        out.extend(
            f"{table.name}: unexpected check constraint {ck.get('name') or '(unnamed)'} "
            f"CHECK ({ck.get('sqltext')})"
            for ck in checks.get(key, [])
            if ck.get("name") not in expected_ck
        )

    view = tables.surface_messages
    if view.name not in insp.get_view_names(schema):
        out.append(f"missing view {view.name}")
    else:
        live_view = insp.get_multi_columns(
            schema=schema, filter_names=[view.name], kind=ObjectKind.VIEW
        )
        live_names = [c["name"] for c in live_view.get((schema, view.name), [])]
        expected_names = [c.name for c in view.columns]
        if live_names != expected_names:
            out.append(
                f"view {view.name}: columns are ({', '.join(live_names)}), "
                f"expected ({', '.join(expected_names)})"
            )
        else:
            live_body = _view_body(
                str(insp.get_view_definition(view.name, schema)), schema, dialect
            )
            expected_body = _view_body(
                str(tables.create_view.compile(dialect=dialect)), schema, dialect
            )
            if live_body != expected_body:
                out.append(f"view {view.name}: its definition differs from this build's")
    out.extend(_analytics_view_differences(insp, tables, dialect))
    return out


def _analytics_view_differences(
    insp: Inspector, tables: SchemaTables, dialect: Dialect
) -> list[str]:
    """The views of docs/sql.md: present, with this build's columns and definition."""
    schema = tables.metadata.schema
    live_views = set(insp.get_view_names(schema))
    names = [v.name for v in tables.analytics_views if v.name in live_views]
    live_columns = insp.get_multi_columns(schema=schema, filter_names=names, kind=ObjectKind.VIEW)
    out: list[str] = []
    for view in tables.analytics_views:
        if view.name not in live_views:
            out.append(f"missing view {view.name}")
            continue
        live_names = [c["name"] for c in live_columns.get((schema, view.name), [])]
        if live_names != list(view.columns):
            out.append(
                f"view {view.name}: columns are ({', '.join(live_names)}), "
                f"expected ({', '.join(view.columns)})"
            )
            continue
        live = _view_fingerprint(str(insp.get_view_definition(view.name, schema)), schema, dialect)
        expected = _view_fingerprint(view_select(view, schema, dialect), schema, dialect)
        if live != expected:
            out.append(f"view {view.name}: its definition differs from this build's")
    return out


_LITERAL_OR_REFERENCE = re.compile(r"'(?:[^']|'')*'|\b[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\b")
_COMPARISON = re.compile(r"<>|!=|>=|<=|=|<|>")
_ANY_ARRAY = re.compile(r"=\s*any\s*\(\s*array\[")


def _view_fingerprint(definition: str, schema: str | None, dialect: Dialect) -> list[str]:
    """What a view reads and how it compares, robust to how the server prints it back.

    SQLite keeps a view's text verbatim; PostgreSQL re-prints it (casts, parentheses, ``IN``
    as ``= ANY (ARRAY[...])``), differently across versions. Both keep every string literal,
    every qualified column reference (``c.call_id``) and every comparison operator, so the
    sorted list of those tells a changed view from a re-printed one without depending on the
    server's formatting.
    """
    text = definition.lower()
    if schema is not None:
        quoted = dialect.identifier_preparer.quote_schema(schema).lower()
        text = text.replace(f"{quoted}.", "")
        text = re.sub(rf'(?<![\w."]){re.escape(schema.lower())}\.', "", text)
    text = text.replace('"', "")
    # The view's own prologue (SQLite returns the whole CREATE VIEW statement).
    head = re.match(r"(?s)\s*create\s+view\s+.*?\s+as\s+(?=select\b)", text)
    if head is not None:
        text = text[head.end() :]
    text = _ANY_ARRAY.sub(" in (", text)
    tokens = _LITERAL_OR_REFERENCE.findall(text)
    # Operators outside literals, JSON arrows and casts.
    bare = _LITERAL_OR_REFERENCE.sub(" ", text).replace("->>", " ").replace("->", " ")
    tokens.extend(_COMPARISON.findall(bare))
    return sorted(tokens)


_CAST = re.compile(r"::[a-z_][a-z0-9_]*(?:\s+varying)?(?:\[\])?")


def _predicate(where: Any) -> str | None:
    """A partial index's WHERE, compared without the server's parentheses, quotes, case and
    re-printing (PostgreSQL gives ``IN ('a', 'b')`` back as ``= ANY (ARRAY['a'::text, ...])``)."""
    if where is None:
        return None
    text = _ANY_ARRAY.sub(" in (", str(where).lower())
    text = re.sub(r'[()"\]]', "", _CAST.sub("", text))
    return re.sub(r"\s+", " ", text).strip()


def _index_option_differences(
    table: str,
    live: Sequence[Mapping[str, Any]],
    partial: Mapping[str, str | None],
    access: Mapping[str, tuple[str, dict[str, str]]],
) -> list[str]:
    """Our indexes have no INCLUDE, are partial exactly where this build says (``partial``:
    index name -> its normalised WHERE) and of the access method and operator classes it says
    (``access``: name -> (method, {column: operator class}))."""
    out: list[str] = []
    for ix in live:
        options: Mapping[str, Any] = ix.get("dialect_options") or {}
        where = options.get("postgresql_where", options.get("sqlite_where"))
        expected = partial.get(str(ix["name"]))
        if _predicate(where) != expected:
            shape = f"partial (WHERE {where})" if where is not None else "a full one"
            wanted = f"WHERE {expected}" if expected is not None else "a full one"
            out.append(f"{table}: index {ix['name']} is {shape}, expected {wanted}")
        if options.get("postgresql_include"):
            out.append(f"{table}: index {ix['name']} INCLUDEs {options['postgresql_include']}")
        method = (options.get("postgresql_using") or "btree", options.get("postgresql_ops") or {})
        expected_method = access.get(str(ix["name"]), ("btree", {}))
        if method != expected_method:
            out.append(
                f"{table}: index {ix['name']} is {_access(method)}, "
                f"expected {_access(expected_method)}"
            )
    return out


def _access(method: tuple[str, Mapping[str, str]]) -> str:
    using, ops = method
    classes = ", ".join(f"{column} {op}" for column, op in sorted(ops.items()))
    return f"{using} ({classes})" if classes else using


def _foreign_key_option_differences(table: str, live: Sequence[Mapping[str, Any]]) -> list[str]:
    """Our foreign keys are NOT DEFERRABLE, with no ON UPDATE action and no MATCH clause."""
    out: list[str] = []
    for fk in live:
        options: Mapping[str, Any] = fk.get("options") or {}
        if options.get("deferrable") or options.get("initially"):
            initially = f" INITIALLY {options['initially']}" if options.get("initially") else ""
            out.append(
                f"{table}: foreign key {fk['name']} is DEFERRABLE{initially}, "
                "expected NOT DEFERRABLE"
            )
        for option in ("onupdate", "match"):
            if options.get(option) and str(options[option]).upper() not in ("NO ACTION", "SIMPLE"):
                out.append(f"{table}: foreign key {fk['name']} has {option} {options[option]}")
    return out


_VIEW_NOISE = re.compile(r'[\s()";]+')


def _view_body(definition: str, schema: str | None, dialect: Dialect) -> str:
    """A view's SELECT, normalised for comparison: case, spacing, parentheses, quotes, ``;``
    and schema qualifiers do not count (PostgreSQL rewrites all of them in pg_get_viewdef)."""
    text = definition.strip()
    head = re.match(r"(?is)\s*CREATE\s+VIEW\s+.*?\s+AS\s+(?=SELECT\b)", text)
    if head is not None:
        text = text[head.end() :]
    if schema is not None:
        quoted = dialect.identifier_preparer.quote_schema(schema)
        text = text.replace(f"{quoted}.", "")
        text = re.sub(rf'(?<![\w."]){re.escape(schema)}\.', "", text)
    return _VIEW_NOISE.sub("", text).lower()


def _column_differences(
    table: str,
    expected: Iterable[Any],
    live: Sequence[Mapping[str, Any]],
    dialect: Dialect,
) -> list[str]:
    out: list[str] = []
    same_type = backend_for(dialect).same_column_type
    live_by_name = {c["name"]: c for c in live}
    expected_names = set()
    for column in expected:
        expected_names.add(column.name)
        found = live_by_name.get(column.name)
        if found is None:
            out.append(f"{table}: missing column {column.name}")
            continue
        want, have = _type_label(column.type, dialect), _type_label(found["type"], dialect)
        if not same_type(want, have):
            out.append(f"{table}.{column.name}: type is {have}, expected {want}")
        if (column.computed is not None) != bool(found.get("computed")):
            out.append(
                f"{table}.{column.name}: is "
                + (
                    "a plain column, expected a generated one"
                    if column.computed is not None
                    else "generated, expected a plain column"
                )
            )
        if bool(found["nullable"]) != bool(column.nullable):
            out.append(
                f"{table}.{column.name}: is {_nullability(found['nullable'])}, "
                f"expected {_nullability(column.nullable)}"
            )
    out.extend(
        f"{table}: unexpected column {c['name']}" for c in live if c["name"] not in expected_names
    )
    return out


def _nullability(nullable: object) -> str:
    return "NULL" if nullable else "NOT NULL"


def _type_label(type_: TypeEngine[Any], dialect: Dialect) -> str:
    try:
        return str(type_.compile(dialect=dialect)).upper()
    except CompileError:  # e.g. NullType for an unknown reflected type
        return type(type_).__name__.upper()


def _same_named(expected: tuple[Any, ...], live: tuple[Any, ...]) -> bool:
    # A live name of None means the backend did not report one (SQLite may not); then only
    # the rest of the tuple is compared.
    if live[0] is None:
        return expected[1:] == live[1:]
    return expected == live


def _set_differences(
    table: str, kind: str, expected: set[tuple[Any, ...]], live: set[tuple[Any, ...]]
) -> list[str]:
    """Differences between named items (constraints, indexes); item[0] is the name."""
    out: list[str] = []
    unmatched = set(live)
    for item in sorted(expected, key=repr):
        same = next((x for x in unmatched if _same_named(item, x)), None)
        if same is not None:
            unmatched.discard(same)
            continue
        renamed = next((x for x in unmatched if x[0] == item[0]), None)
        if renamed is not None:
            unmatched.discard(renamed)
            out.append(f"{table}: {kind} {item[0]} is {_fmt(renamed)}, expected {_fmt(item)}")
        else:
            out.append(f"{table}: missing {kind} {_fmt(item)}")
    out.extend(f"{table}: unexpected {kind} {_fmt(x)}" for x in sorted(unmatched, key=repr))
    return out


def _fmt(item: tuple[Any, ...]) -> str:
    name, columns, *rest = item
    text = f"{name or '(unnamed)'} ({', '.join(columns)})"
    if len(rest) == 1 and isinstance(rest[0], bool):
        return text + (" UNIQUE" if rest[0] else "")
    if len(rest) == 3:
        referred_table, referred_columns, ondelete = rest
        text += f" -> {referred_table} ({', '.join(referred_columns)})"
        if ondelete:
            text += f" ON DELETE {ondelete}"
    return text
