"""The schema gate (SPEC §8.2) on every backend."""

from __future__ import annotations

import contextlib
import multiprocessing
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, inspect, select, update
from sqlalchemy.schema import DropSchema

from session_sql._store.database import make_engine, read_tx, target_schema, write_tx
from session_sql._store.gate import ensure_schema
from session_sql._store.schema import SCHEMA_VERSION, render_ddl, tables_for
from session_sql.errors import (
    PermanentStoreError,
    SchemaMismatchError,
    SchemaVersionError,
)

from ..legacy_schema import create_legacy_store

WRITE_SQL = re.compile(r"^\s*(INSERT|UPDATE|DELETE|CREATE|DROP|ALTER)\b", re.IGNORECASE)


@contextmanager
def recorded_writes(engine: Engine) -> Iterator[list[str]]:
    """Collect every data- or schema-changing statement the engine runs inside the block."""
    writes: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if WRITE_SQL.match(statement):
            writes.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield writes
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _run_ddl(engine: Engine, schema: str, mutate: Callable[[str], str] = lambda s: s) -> None:
    """Create the objects from the rendered DDL, edited by ``mutate`` to break them."""
    ddl = mutate(render_ddl(engine.dialect.name, schema=schema))  # type: ignore[arg-type]
    body = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    with write_tx(engine) as conn:
        for statement in (s.strip() for s in body.split(";\n")):
            if statement:
                conn.exec_driver_sql(statement)


def _qualified(backend: Any, name: str) -> str:
    return name if backend.table_schema is None else f"{backend.schema}.{name}"


def _meta_rows(engine: Engine, backend: Any) -> dict[str, str]:
    """The meta rows but PostgreSQL's record of the catalog its server made of this build's
    DDL (the gate's fast path: test_a_store_this_build_created_opens_without_reflection)."""
    meta = tables_for(backend.table_schema).meta
    with read_tx(engine) as conn:
        rows = conn.execute(select(meta.c.key, meta.c.value).where(meta.c.key != "catalog_digest"))
        return {k: v for k, v in rows}


# --------------------------------------------------------------------------------------------
# Initialising and re-opening


def test_fresh_database_is_initialised(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with read_tx(engine) as conn:
        insp = inspect(conn)
        tables = set(insp.get_table_names(backend.table_schema))
        views = set(insp.get_view_names(backend.table_schema))
    assert {"session_sql_meta", "sessions", "events", "surface"} <= tables
    assert views == {"surface_messages", "tool_calls", "turns", "replacements", "source_event_seqs"}
    assert _meta_rows(engine, backend) == {
        "schema_version": str(SCHEMA_VERSION),
        "application": "session_sql",
    }


def test_reopening_is_a_no_op(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with recorded_writes(engine) as writes:
        ensure_schema(engine, backend.schema)
        fresh = make_engine(backend.url)
        try:
            ensure_schema(fresh, backend.schema)  # a fresh engine too
        finally:
            fresh.dispose()
    assert writes == []


def _other_app_table(engine: Engine, backend: Any, *, create_schema: bool) -> None:
    with write_tx(engine) as conn:
        if create_schema and backend.table_schema is not None:
            conn.exec_driver_sql(f'CREATE SCHEMA "{backend.schema}"')  # test-generated name
        conn.exec_driver_sql(f"CREATE TABLE {_qualified(backend, 'other_app')} (x INTEGER)")
        conn.exec_driver_sql(f"INSERT INTO {_qualified(backend, 'other_app')} VALUES (7)")


def _live_objects(engine: Engine, backend: Any) -> set[str]:
    with read_tx(engine) as conn:
        insp = inspect(conn)
        schema = backend.table_schema
        return set(insp.get_table_names(schema)) | set(insp.get_view_names(schema))


def test_unrelated_tables_beside_a_store_are_left_alone(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    _other_app_table(engine, backend, create_schema=False)
    ensure_schema(engine, backend.schema)
    with read_tx(engine) as conn:
        assert conn.exec_driver_sql(
            f"SELECT x FROM {_qualified(backend, 'other_app')}"
        ).scalars().all() == [7]


@pytest.mark.parametrize("create", [True, False])
def test_another_applications_database_is_refused_and_unchanged(
    backend, engine: Engine, create: bool
):
    """Tables and no session_sql tables: another application's; never add ours to it."""
    _other_app_table(engine, backend, create_schema=True)
    with recorded_writes(engine) as writes, pytest.raises(SchemaVersionError) as info:
        ensure_schema(engine, backend.schema, create=create)
    assert "has no session_sql tables" in str(info.value)
    assert "other_app" in str(info.value)
    assert writes == []
    assert _live_objects(engine, backend) == {"other_app"}


def test_an_empty_database_is_not_created_for_reading(backend, engine: Engine):
    with (
        recorded_writes(engine) as writes,
        pytest.raises(PermanentStoreError, match=r"^no store at "),
    ):
        ensure_schema(engine, backend.schema, create=False)
    assert writes == []
    assert _live_objects(engine, backend) == set()
    if backend.table_schema is not None:
        with read_tx(engine) as conn:
            assert not inspect(conn).has_schema(backend.schema)


@pytest.mark.postgresql
def test_each_postgres_schema_is_its_own_store(postgres_admin):
    """Another schema's session_sql tables neither block nor satisfy this schema."""
    first, second = f"t_{uuid.uuid4().hex}", f"t_{uuid.uuid4().hex}"
    engine = make_engine(postgres_admin.url.render_as_string(hide_password=False))
    try:
        ensure_schema(engine, first)
        meta = tables_for(first).meta
        with write_tx(engine) as conn:
            conn.execute(update(meta).where(meta.c.key == "schema_version").values(value="0"))
        ensure_schema(engine, second)  # not refused because of the first schema
        with read_tx(engine) as conn:
            assert "events" in inspect(conn).get_table_names(second)
        with pytest.raises(SchemaVersionError):
            ensure_schema(engine, first)
    finally:
        engine.dispose()
        with postgres_admin.begin() as conn:
            for name in (first, second):
                conn.execute(DropSchema(name, cascade=True, if_exists=True))


# --------------------------------------------------------------------------------------------
# Refusing other versions


@pytest.mark.parametrize(
    ("version", "relation"),
    [("0", "older"), (str(SCHEMA_VERSION - 1), "older"), (str(SCHEMA_VERSION + 1), "newer")],
)
def test_other_schema_version_is_refused(backend, engine: Engine, version: str, relation: str):
    ensure_schema(engine, backend.schema)
    meta = tables_for(backend.table_schema).meta
    with write_tx(engine) as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=version))
    with recorded_writes(engine) as writes, pytest.raises(SchemaVersionError) as info:
        ensure_schema(engine, backend.schema)
    error = info.value
    assert type(error) is SchemaVersionError
    assert error.expected == SCHEMA_VERSION
    assert error.actual == version
    assert relation in str(error)
    assert "export" in str(error) and "import" in str(error)
    assert writes == []
    assert _meta_rows(engine, backend)["schema_version"] == version


@pytest.mark.parametrize("version", [1, 2])
def test_an_earlier_release_database_is_refused(backend, engine: Engine, version: int):
    """Version 2 (no tenants, no metadata) and version 1 (no ``sessions.incarnation`` either)
    are refused, never written."""

    def edit(ddl: str) -> str:
        if version == 2:
            return ddl
        lines = [line for line in ddl.splitlines() if "incarnation" not in line]
        return "\n".join(lines).replace("'schema_version', '2'", "'schema_version', '1'")

    create_legacy_store(engine, backend.schema, 2, edit)
    with recorded_writes(engine) as writes, pytest.raises(SchemaVersionError) as info:
        ensure_schema(engine, backend.schema)
    assert info.value.actual == str(version)
    assert "older" in str(info.value)
    assert writes == []
    with read_tx(engine) as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("sessions", backend.table_schema)}
    assert "tenant" not in columns
    assert ("incarnation" in columns) == (version == 2)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_a_tenanted_earlier_release_database_is_refused(backend, engine: Engine, version: int):
    """Versions 3 to 5 had tenants and metadata; 5 even this build's tables but for
    ``session_ids`` (the public id was unique in ``sessions``). The version says it first, and
    the refusal names the way across: ``migrate``."""
    create_legacy_store(engine, backend.schema, version)
    with recorded_writes(engine) as writes, pytest.raises(SchemaVersionError) as info:
        ensure_schema(engine, backend.schema)
    assert info.value.actual == str(version)
    assert "older" in str(info.value)
    assert "session-sql migrate" in str(info.value)
    assert writes == []


def test_unreadable_schema_version_is_refused(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    meta = tables_for(backend.table_schema).meta
    with write_tx(engine) as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value="one"))
    with pytest.raises(SchemaVersionError, match="not one this build understands"):
        ensure_schema(engine, backend.schema)


@pytest.mark.parametrize(
    "stored", [f"0{SCHEMA_VERSION}", f" {SCHEMA_VERSION}", f"{SCHEMA_VERSION}.0"]
)
def test_a_non_canonical_schema_version_is_refused_as_found(backend, engine: Engine, stored: str):
    """'01' is not version 1: the gate compares the stored text and says what it found."""
    ensure_schema(engine, backend.schema)
    meta = tables_for(backend.table_schema).meta
    with write_tx(engine) as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=stored))
    with pytest.raises(SchemaVersionError) as info:
        ensure_schema(engine, backend.schema)
    message = str(info.value)
    assert f"the stored schema version is {stored!r}" in message
    assert f"this build writes '{SCHEMA_VERSION}'" in message
    assert "older" not in message and "newer" not in message
    assert info.value.actual == stored


def test_tables_without_meta_table_are_refused(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with write_tx(engine) as conn:
        conn.exec_driver_sql(f"DROP TABLE {_qualified(backend, 'session_sql_meta')}")
    with recorded_writes(engine) as writes, pytest.raises(SchemaVersionError) as info:
        ensure_schema(engine, backend.schema)
    assert type(info.value) is SchemaVersionError
    assert info.value.actual is None
    assert "no session_sql_meta table" in str(info.value)
    assert writes == []
    with read_tx(engine) as conn:
        assert "session_sql_meta" not in inspect(conn).get_table_names(backend.table_schema)


def test_only_one_of_our_tables_is_enough_to_refuse(backend, engine: Engine):
    with write_tx(engine) as conn:
        if backend.table_schema is not None:
            conn.exec_driver_sql(f'CREATE SCHEMA "{backend.schema}"')
        conn.exec_driver_sql(f"CREATE TABLE {_qualified(backend, 'events')} (x INTEGER)")
    with pytest.raises(SchemaVersionError):
        ensure_schema(engine, backend.schema)


def test_meta_without_version_row_is_refused(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    meta = tables_for(backend.table_schema).meta
    with write_tx(engine) as conn:
        conn.execute(meta.delete().where(meta.c.key == "schema_version"))
    with pytest.raises(SchemaVersionError, match="no schema_version row") as info:
        ensure_schema(engine, backend.schema)
    assert info.value.actual is None


def test_other_application_is_refused(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    meta = tables_for(backend.table_schema).meta
    with write_tx(engine) as conn:
        conn.execute(update(meta).where(meta.c.key == "application").values(value="other"))
    with pytest.raises(SchemaVersionError, match="application"):
        ensure_schema(engine, backend.schema)


# --------------------------------------------------------------------------------------------
# Refusing a different structure


def _mismatch(engine: Engine, backend: Any) -> SchemaMismatchError:
    with recorded_writes(engine) as writes, pytest.raises(SchemaMismatchError) as info:
        ensure_schema(engine, backend.schema)
    assert writes == []
    error = info.value
    assert error.expected == SCHEMA_VERSION
    for difference in error.differences:
        assert difference in str(error)
    return error


def test_dropped_index_is_a_mismatch(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with write_tx(engine) as conn:
        conn.exec_driver_sql(f"DROP INDEX {_qualified(backend, 'ix_events_turn_bounds')}")
    error = _mismatch(engine, backend)
    assert error.differences == ("events: missing index ix_events_turn_bounds (session_key, seq)",)


def test_extra_column_is_a_mismatch(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with write_tx(engine) as conn:
        conn.exec_driver_sql(f"ALTER TABLE {_qualified(backend, 'sessions')} ADD COLUMN note TEXT")
    error = _mismatch(engine, backend)
    assert error.differences == ("sessions: unexpected column note",)


def test_changed_nullability_is_a_mismatch(backend, engine: Engine):
    _run_ddl(
        engine,
        backend.schema,
        lambda ddl: ddl.replace("type TEXT NOT NULL", "type TEXT").replace(
            "parent_session TEXT,", "parent_session TEXT NOT NULL,"
        ),
    )
    error = _mismatch(engine, backend)
    assert set(error.differences) == {
        "events.type: is NULL, expected NOT NULL",
        "sessions.parent_session: is NOT NULL, expected NULL",
    }


def test_changed_type_is_a_mismatch(backend, engine: Engine):
    # On SQLite only the affinity counts: BIGINT -> INTEGER is no difference, TEXT -> BLOB is.
    _run_ddl(
        engine,
        backend.schema,
        lambda ddl: (
            ddl.replace("data TEXT NOT NULL", "data BLOB NOT NULL")
            .replace("data JSON NOT NULL", "data JSONB NOT NULL")
            .replace("\tpos BIGINT NOT NULL", "\tpos INTEGER NOT NULL")
        ),
    )
    error = _mismatch(engine, backend)
    assert set(error.differences) == backend.expect.gate_type_differences


def test_missing_constraints_and_view_are_mismatches(backend, engine: Engine):
    _run_ddl(
        engine,
        backend.schema,
        lambda ddl: (
            re.sub(r"(CREATE|ALTER) VIEW .*?;\n", "", ddl, flags=re.DOTALL)
            .replace(
                "\tCONSTRAINT uq_surface_session_key_event_seq UNIQUE (session_key, event_seq),\n",
                "",
            )
            # The foreign key of events (the last line of its table), without its ON DELETE.
            .replace(
                " ON DELETE CASCADE\n)\n WITHOUT ROWID;\n\nCREATE INDEX ix_events_",
                "\n)\n WITHOUT ROWID;\n\nCREATE INDEX ix_events_",
            )
            .replace(
                " ON DELETE CASCADE\n);\n\nCREATE INDEX ix_events_",
                "\n);\n\nCREATE INDEX ix_events_",
            )
        ),
    )
    error = _mismatch(engine, backend)
    assert set(error.differences) == {
        "surface: missing unique constraint uq_surface_session_key_event_seq "
        "(session_key, event_seq)",
        "events: foreign key fk_events_session_key_tenant_sessions is "
        "fk_events_session_key_tenant_sessions (session_key, tenant) -> sessions "
        "(session_key, tenant), expected fk_events_session_key_tenant_sessions "
        "(session_key, tenant) -> sessions (session_key, tenant) ON DELETE CASCADE",
        "missing view surface_messages",
        "missing view tool_calls",
        "missing view turns",
        "missing view replacements",
        "missing view source_event_seqs",
    }


def test_every_difference_is_listed(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with write_tx(engine) as conn:
        index = _qualified(backend, "ix_sessions_tenant_parent_session")
        conn.exec_driver_sql(f"DROP INDEX {index}")
        conn.exec_driver_sql(f"CREATE INDEX ix_mine ON {_qualified(backend, 'events')} (time)")
        conn.exec_driver_sql(f"ALTER TABLE {_qualified(backend, 'surface')} ADD COLUMN z TEXT")
    error = _mismatch(engine, backend)
    assert set(error.differences) == {
        "sessions: missing index ix_sessions_tenant_parent_session (tenant, parent_session)",
        "events: unexpected index ix_mine (time)",
        "surface: unexpected column z",
    }
    assert "3 difference(s)" in str(error)


# Tampering that names and columns alone do not show (partial index, deferrable foreign key,
# an added CHECK, another view body): each is built from the rendered DDL, edited.

_TAMPERING = {
    "partial index": (
        lambda ddl: ddl.replace(
            "(tenant, parent_session);",
            "(tenant, parent_session) WHERE parent_session IS NOT NULL;",
        ),
        "sessions: index ix_sessions_tenant_parent_session is partial (WHERE ",
    ),
    "another partial index predicate": (
        # As each dialect renders the predicate (PostgreSQL reads IN back as = ANY).
        lambda ddl: ddl.replace(
            "WHERE type IN ('turn/start', 'turn/end');", "WHERE type IN ('turn/start');"
        ).replace(
            "WHERE type = ANY (ARRAY['turn/start'::text, 'turn/end'::text]);",
            "WHERE type = ANY (ARRAY['turn/start'::text]);",
        ),
        "events: index ix_events_turn_bounds is partial (WHERE ",
    ),
    "deferrable foreign key": (
        lambda ddl: ddl.replace(
            "(session_key, tenant) ON DELETE CASCADE",
            "(session_key, tenant) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED",
            1,
        ),
        "events: foreign key fk_events_session_key_tenant_sessions is DEFERRABLE INITIALLY "
        "DEFERRED, "
        "expected NOT DEFERRABLE",
    ),
    "added check constraint": (
        lambda ddl: ddl.replace(
            "\tCONSTRAINT pk_events PRIMARY KEY",
            "\tCONSTRAINT ck_seq CHECK (seq >= 0),\n\tCONSTRAINT pk_events PRIMARY KEY",
        ),
        "events: unexpected check constraint ck_seq CHECK (",
    ),
    "changed view body": (
        lambda ddl: ddl.replace(".event_seq = ", ".event_seq >= "),
        "view surface_messages: its definition differs from this build's",
    ),
    "changed analytics view body": (
        lambda ddl: ddl.replace("r.call_id = c.call_id", "r.call_id >= c.call_id"),
        "view tool_calls: its definition differs from this build's",
    ),
    "changed analytics view literal": (
        lambda ddl: ddl.replace("m.type = 'user/message'", "m.type = 'user/note'"),
        "view turns: its definition differs from this build's",
    ),
    "full index for a partial one": (
        lambda ddl: ddl.replace(
            "(session_key, call_id) WHERE call_id IS NOT NULL;",
            "(session_key, call_id);",
        ),
        "events: index ix_events_session_key_call_id is a full one, expected WHERE "
        "call_id is not null",
    ),
    "plain column for a generated one": (
        lambda ddl: re.sub(r"call_id TEXT GENERATED ALWAYS AS \(.*\) STORED", "call_id TEXT", ddl),
        "events.call_id: is a plain column, expected a generated one",
    ),
}


@pytest.mark.parametrize("kind", list(_TAMPERING))
def test_tampering_beyond_names_and_columns_is_a_mismatch(backend, engine: Engine, kind: str):
    mutate, expected = _TAMPERING[kind]
    ddl = render_ddl(engine.dialect.name, schema=backend.schema)  # type: ignore[arg-type]
    assert mutate(ddl) != ddl, "the edit must change the DDL"
    _run_ddl(engine, backend.schema, mutate)
    error = _mismatch(engine, backend)
    [difference] = error.differences
    assert difference.startswith(expected)


# PostgreSQL's labels index: a GIN index with the jsonb_path_ops class that containment uses.
_PG_TAMPERING = {
    "btree for the labels GIN index": (
        lambda ddl: ddl.replace("USING gin (labels jsonb_path_ops)", "(labels)"),
        "sessions: index ix_sessions_labels is btree, expected gin (labels jsonb_path_ops)",
    ),
    "another operator class": (
        lambda ddl: ddl.replace("USING gin (labels jsonb_path_ops)", "USING gin (labels)"),
        "sessions: index ix_sessions_labels is gin, expected gin (labels jsonb_path_ops)",
    ),
}


@pytest.mark.requires("labels_index")
@pytest.mark.parametrize("kind", list(_PG_TAMPERING))
def test_index_method_and_operator_class_are_checked(backend, engine: Engine, kind: str):
    mutate, expected = _PG_TAMPERING[kind]
    ddl = render_ddl("postgresql", schema=backend.schema)
    assert mutate(ddl) != ddl, "the edit must change the DDL"
    _run_ddl(engine, backend.schema, mutate)
    assert list(_mismatch(engine, backend).differences) == [expected]


def test_the_labels_index_is_postgresql_only():
    assert "ix_sessions_labels" in render_ddl("postgresql")
    assert "ix_sessions_labels" not in render_ddl("sqlite")


def test_the_untouched_rendered_ddl_passes_the_gate(backend, engine: Engine):
    _run_ddl(engine, backend.schema)
    ensure_schema(engine, backend.schema)


def test_missing_table_is_a_mismatch(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    with write_tx(engine) as conn:
        conn.exec_driver_sql(f"DROP VIEW {_qualified(backend, 'surface_messages')}")
        conn.exec_driver_sql(f"DROP TABLE {_qualified(backend, 'surface')}")
    error = _mismatch(engine, backend)
    assert set(error.differences) == {"missing table surface", "missing view surface_messages"}


# --------------------------------------------------------------------------------------------
# Files that are not databases


def test_text_file_is_not_a_database(tmp_path: Path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100, encoding="utf-8")
    engine = make_engine(f"sqlite:///{path}")
    try:
        with pytest.raises(PermanentStoreError, match="not a session_sql database") as info:
            ensure_schema(engine, None)
    finally:
        engine.dispose()
    assert str(path) in str(info.value)
    assert info.value.__cause__ is not None
    assert path.read_text(encoding="utf-8").startswith("these are my notes")


def test_missing_directory_is_store_error(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    try:
        with pytest.raises(PermanentStoreError, match="cannot open"):
            ensure_schema(engine, None)
    finally:
        engine.dispose()


# --------------------------------------------------------------------------------------------
# Concurrent first opens


def _open_in_child(url: str, schema: str, barrier: Any, results: Any) -> None:
    engine = make_engine(url, busy_timeout_ms=30_000)
    try:
        barrier.wait(timeout=60)
        ensure_schema(engine, schema)
        results.put("ok")
    except BaseException as exc:
        results.put(f"{type(exc).__name__}: {exc}")
    finally:
        engine.dispose()


@pytest.mark.slow
def test_concurrent_first_opens_do_not_race(backend, engine: Engine):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_open_in_child, args=(backend.url, backend.schema, barrier, results))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == ["ok"] * 4
    assert all(p.exitcode == 0 for p in procs)
    ensure_schema(engine, backend.schema)
    assert _meta_rows(engine, backend) == {
        "schema_version": str(SCHEMA_VERSION),
        "application": "session_sql",
    }
    # Exactly one set of meta rows: the primary key would have refused a second insert anyway,
    # but no process may have failed on it either (all reported ok above).
    t = tables_for(target_schema(engine, backend.schema))
    with read_tx(engine) as conn:
        keys = conn.execute(select(t.meta.c.key)).scalars().all()
        assert (
            len(keys)
            == len(set(keys))
            == len(_meta_rows(engine, backend)) + ("catalog_digest" in keys)
        )


@pytest.mark.requires("row_level_security")
def test_row_security_switched_off_is_a_mismatch(backend, engine: Engine):
    """PostgreSQL: each table keeps row-level security on, with its tenant policy."""
    ensure_schema(engine, backend.schema)
    with write_tx(engine) as conn:
        conn.exec_driver_sql(
            f"ALTER TABLE {_qualified(backend, 'events')} DISABLE ROW LEVEL SECURITY"
        )
        conn.exec_driver_sql(f"DROP POLICY tenant_isolation ON {_qualified(backend, 'surface')}")
        # A policy an administrator adds beside ours is fine.
        conn.exec_driver_sql(
            f"CREATE POLICY extra ON {_qualified(backend, 'sessions')} FOR SELECT USING (true)"
        )
    error = _mismatch(engine, backend)
    assert set(error.differences) == {
        "events: row-level security is not enabled",
        "surface: missing row-level security policy tenant_isolation",
    }


def test_the_ddl_digest_names_this_builds_ddl():
    """A PostgreSQL store records the digest of the DDL that made it: a change of the DDL
    must change the constant, or a store made by the other DDL would skip the reflection."""
    import hashlib

    from session_sql._store.schema import DDL_DIGEST

    rendered = hashlib.sha256(render_ddl("postgresql").encode()).hexdigest()
    assert rendered == DDL_DIGEST, "the DDL changed: set schema.DDL_DIGEST to " + rendered


def _reflections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every structure reflection the gate makes from now on, by label."""
    from session_sql._store import gate

    made: list[str] = []
    check = gate._check

    def counted(conn: Any, insp: Any, tables: Any, label: str) -> None:
        made.append(label)
        check(conn, insp, tables, label)

    monkeypatch.setattr(gate, "_check", counted)
    return made


def test_a_store_this_build_created_opens_without_reflection(backend, engine, monkeypatch):
    ensure_schema(engine, backend.schema)
    reflections = _reflections(monkeypatch)
    with recorded_writes(engine) as writes:
        for _ in range(3):
            ensure_schema(engine, backend.schema)
    assert reflections == []
    assert writes == []


@pytest.mark.parametrize("change", ["index", "view", "version"])
def test_any_change_to_the_catalog_sends_the_gate_back_to_reflection(
    backend, engine, monkeypatch, change
):
    """An index added, a view's option or text changed, the version row edited: each one
    makes the catalog differ from the one recorded, and the full gate decides (and here
    refuses), as before the fast path."""
    ensure_schema(engine, backend.schema)
    t = tables_for(backend.table_schema)
    with write_tx(engine) as conn:
        if change == "index":
            conn.exec_driver_sql(f"CREATE INDEX ix_extra ON {_qualified(backend, 'events')} (time)")
        elif change == "view":
            view = _qualified(backend, "tool_calls")
            conn.exec_driver_sql(f"DROP VIEW {view}")
            conn.exec_driver_sql(f"CREATE VIEW {view} AS SELECT 1 AS x")
        else:
            conn.execute(update(t.meta).where(t.meta.c.key == "schema_version").values(value="4"))
    reflections = _reflections(monkeypatch)
    with pytest.raises((SchemaMismatchError, SchemaVersionError)):
        ensure_schema(engine, backend.schema)
    assert len(reflections) == 1


def test_a_store_of_another_ddl_with_the_same_version_is_reflected(backend, engine, monkeypatch):
    """What one build recorded does not vouch for another build's expectations."""
    ensure_schema(engine, backend.schema)
    import session_sql._store.backends.postgresql.catalog as pg
    from session_sql._store.backends.sqlite import quick

    monkeypatch.setattr(pg, "DDL_DIGEST", "another build")
    monkeypatch.setattr(quick, "SCHEMA_DIGEST", "another build")
    reflections = _reflections(monkeypatch)
    ensure_schema(engine, backend.schema)  # reflected, and found to be this build's
    assert len(reflections) == 1


@contextmanager
def printed_catalogs(engine: Engine) -> Iterator[list[str]]:
    """Every statement that prints the catalog's text (the views' definitions among it)."""
    printed: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "pg_get_viewdef" in statement:
            printed.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield printed
    finally:
        event.remove(engine, "before_cursor_execute", record)


@pytest.mark.requires("row_level_security")
def test_an_unchanged_catalog_is_not_printed_again(backend, engine, monkeypatch):
    """PostgreSQL: an open that finds the catalog rows as this process last printed them
    (the same versions of the same rows) takes that text, and vouches without reflection."""
    ensure_schema(engine, backend.schema)
    reflections = _reflections(monkeypatch)
    with printed_catalogs(engine) as printed, recorded_writes(engine) as writes:
        for _ in range(3):
            ensure_schema(engine, backend.schema)
    assert printed == []
    assert reflections == []
    assert writes == []


_CHANGED_AFTER_OPEN = {
    "policy": "ALTER POLICY tenant_isolation ON {surface} USING (true)",
    "foreign key": "ALTER TABLE {surface} DROP CONSTRAINT fk_surface_session_key_event_seq_events",
    "renamed index": "ALTER INDEX {schema}ix_events_turn_bounds RENAME TO ix_other",
    "renamed column": "ALTER TABLE {events} RENAME COLUMN ignorable TO skippable",
    "default": "ALTER TABLE {events} ALTER COLUMN tenant SET DEFAULT 'acme'",
    "view body": (
        "CREATE OR REPLACE VIEW {schema}source_event_seqs AS "
        "SELECT * FROM {schema}source_event_seqs WHERE false"
    ),
}


@pytest.mark.requires("row_level_security")
@pytest.mark.parametrize("change", list(_CHANGED_AFTER_OPEN))
def test_a_change_after_an_open_sends_the_next_one_to_reflection(
    backend, engine, monkeypatch, change
):
    """PostgreSQL: whatever changes the catalog's text after an open (none of these touches
    the relations' own rows) sends the next open of the process back to the full gate,
    which decides as it did before there was a fast path."""
    ensure_schema(engine, backend.schema)
    ensure_schema(engine, backend.schema)  # the catalog text this process read, taken again
    statement = _CHANGED_AFTER_OPEN[change].format(
        schema=f"{backend.schema}.",
        events=_qualified(backend, "events"),
        surface=_qualified(backend, "surface"),
    )
    with write_tx(engine) as conn:
        conn.exec_driver_sql(statement)
    reflections = _reflections(monkeypatch)
    with contextlib.suppress(SchemaMismatchError):
        ensure_schema(engine, backend.schema)
    assert len(reflections) == 1
