"""The schema as code: rendered DDL files, object creation, JSON encoding and the engine setup."""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, UniqueConstraint, insert, inspect, select, text
from sqlalchemy.schema import DropSchema

from session_sql._store import schema as schema_mod
from session_sql._store.backends.postgresql import errors as pg_backend
from session_sql._store.database import (
    backend_for,
    dumps_json,
    make_engine,
    read_tx,
    target_schema,
    translate_errors,
    write_tx,
)
from session_sql._store.gate import ensure_schema
from session_sql._store.schema import (
    SCHEMA_VERSION,
    create_all,
    metadata_for,
    render_ddl,
    tables_for,
)
from session_sql.errors import (
    ConcurrencyError,
    PermanentStoreError,
    SessionExistsError,
    SessionSQLError,
    StoreError,
    TransientStoreError,
)
from session_sql.jsoncodec import _dumps_iterative

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# Rendered DDL


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_schema_files_are_fresh(dialect):
    path = REPO / "schema" / f"{dialect}.sql"
    assert path.read_text(encoding="utf-8") == render_ddl(dialect), (
        f"{path} is stale; regenerate it with "
        f"`session-sql schema --dialect {dialect} > schema/{dialect}.sql`"
    )


def test_render_ddl_is_deterministic_and_terminated():
    for dialect in ("sqlite", "postgresql"):
        first = render_ddl(dialect)
        assert first == render_ddl(dialect)
        statements = [s for s in _statements(first)]
        # ALTER: PostgreSQL's row-level security and the view's security_invoker option.
        assert all(s.startswith(("CREATE ", "INSERT ", "ALTER ")) for s in statements)
        assert not any(line != line.rstrip() for line in first.splitlines())


def test_render_ddl_mentions_every_object():
    ddl = render_ddl("postgresql")
    for name in (
        "CREATE SCHEMA IF NOT EXISTS session_sql",
        "CREATE TABLE session_sql.session_sql_meta",
        "CREATE TABLE session_sql.sessions",
        "CREATE TABLE session_sql.events",
        "CREATE TABLE session_sql.surface",
        "CREATE INDEX ix_sessions_tenant_updated_at_id ON session_sql.sessions "
        "(tenant, updated_at, id)",
        "CREATE INDEX ix_sessions_tenant_user_id_updated_at_id ON session_sql.sessions "
        "(tenant, user_id, updated_at, id)",
        "CREATE INDEX ix_sessions_tenant_parent_session",
        # The surrogate key: events and surface carry it instead of the tenant and the id.
        "session_key BIGINT GENERATED ALWAYS AS IDENTITY",
        "CONSTRAINT pk_sessions PRIMARY KEY (session_key)",
        "CREATE INDEX ix_sessions_id_tenant ON session_sql.sessions (id, tenant)",
        "CREATE TABLE session_sql.session_ids",
        "CONSTRAINT pk_session_ids PRIMARY KEY (id, tenant)",
        "CONSTRAINT pk_events PRIMARY KEY (session_key, seq)",
        "CONSTRAINT pk_surface PRIMARY KEY (session_key, pos)",
        # A row's tenant is its session's: the foreign keys name both.
        "CONSTRAINT uq_sessions_session_key_tenant UNIQUE (session_key, tenant)",
        "CONSTRAINT fk_events_session_key_tenant_sessions FOREIGN KEY(session_key, tenant) "
        "REFERENCES session_sql.sessions (session_key, tenant) ON DELETE CASCADE",
        "CONSTRAINT fk_surface_session_key_tenant_sessions FOREIGN KEY(session_key, tenant) "
        "REFERENCES session_sql.sessions (session_key, tenant) ON DELETE CASCADE",
        "CREATE INDEX ix_events_turn_bounds ON session_sql.events (session_key, seq) "
        "WHERE type = ANY (ARRAY['turn/start'::text, 'turn/end'::text])",
        "CREATE INDEX ix_events_session_key_call_id ON session_sql.events "
        "(session_key, call_id) WHERE call_id IS NOT NULL",
        "call_id TEXT GENERATED ALWAYS AS (CASE WHEN (type = 'tool/call')",
        "CREATE VIEW session_sql.surface_messages",
        "CREATE VIEW session_sql.tool_calls AS\nSELECT s.tenant AS tenant,\n"
        "       s.id AS session_id",
        "FROM session_sql.events AS c\n"
        "JOIN session_sql.sessions AS s ON s.session_key = c.session_key",
        "CREATE VIEW session_sql.turns",
        "CREATE VIEW session_sql.replacements",
        "CREATE VIEW session_sql.source_event_seqs",
        "jsonb_array_elements_text(CAST(e.source_event_seqs AS JSONB))",
        # json, not JSONB: the event text as appended, key order included.
        "data JSON NOT NULL",
        "header JSON NOT NULL",
        "ON DELETE CASCADE",
        "uq_surface_session_key_event_seq UNIQUE (session_key, event_seq)",
        "labels JSONB DEFAULT '{}' NOT NULL",
    ):
        assert name in ddl, name
    # No index of every event by type, and no public id outside sessions and the views.
    assert "data JSONB" not in ddl
    assert "ix_events_type" not in ddl
    assert "session_id BIGINT" not in ddl and "session_id TEXT" not in ddl
    # JSON columns have TEXT affinity on SQLite (a JSON-declared column would turn 1.0 into 1).
    sqlite_ddl = render_ddl("sqlite")
    assert "data TEXT NOT NULL" in sqlite_ddl
    # The rowid itself, never reused after a delete.
    assert "session_key INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" in sqlite_ddl
    assert "CREATE INDEX ix_events_turn_bounds ON events (session_key, seq) " in sqlite_ddl
    assert "JOIN json_each(e.source_event_seqs) AS src ON TRUE" in sqlite_ddl
    assert "CREATE SCHEMA" not in sqlite_ddl


def test_render_ddl_rejects_unknown_dialect():
    with pytest.raises(ValueError, match="unknown dialect"):
        render_ddl("mysql")  # type: ignore[arg-type]


def test_metadata_is_cached_per_schema_and_named():
    assert metadata_for("a") is metadata_for("a")
    assert metadata_for("a") is not metadata_for("b")
    assert metadata_for(None).schema is None
    tables = tables_for("a")
    assert tables.events.fullname == "a.events"
    names = {c.name for t in tables.base_tables for c in t.constraints}
    assert {"pk_sessions", "pk_events", "pk_surface", "pk_session_sql_meta"} <= names
    assert "fk_events_session_key_tenant_sessions" in names
    assert "fk_surface_session_key_tenant_sessions" in names
    assert "fk_surface_session_key_event_seq_events" in names
    # translate_errors maps driver errors by these names: an id is unique per tenant by
    # ``session_ids``' primary key (the sessions' is the surrogate session_key), never by a
    # unique constraint on ``sessions`` (Citus could not distribute it by session_key).
    assert tables.session_ids.primary_key.name == pg_backend.ID_SESSIONS
    assert [c.name for c in tables.session_ids.primary_key.columns] == ["id", "tenant"]
    assert not [
        c
        for c in tables.sessions.constraints
        if isinstance(c, UniqueConstraint) and "id" in c.columns
    ]
    assert tables.sessions.primary_key.name == "pk_sessions"
    assert [c.name for c in tables.sessions.primary_key.columns] == ["session_key"]
    assert tables.events.primary_key.name == pg_backend.PK_EVENTS


def test_not_null_everywhere_except_the_optional_columns():
    nullable = {
        f"{t.name}.{c.name}" for t in tables_for(None).base_tables for c in t.columns if c.nullable
    }
    assert nullable == {
        "sessions.parent_session",
        "sessions.user_id",
        "sessions.title",
        "events.source_event_seqs",
        "events.surface_op",
        "events.call_id",  # generated: NULL on events other than tool calls and results
        "events.ignorable",
    }


# --------------------------------------------------------------------------------------------
# Creating the objects


def _statements(ddl: str) -> list[str]:
    body = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    return [s.strip() for s in body.split(";\n") if s.strip()]


def test_create_all_creates_every_object_and_meta_rows(backend, engine: Engine):
    with write_tx(engine) as conn:
        create_all(conn, backend.schema)
    schema = backend.table_schema
    with read_tx(engine) as conn:
        insp = inspect(conn)
        assert {"session_sql_meta", "sessions", "events", "surface"} <= set(
            insp.get_table_names(schema)
        )
        assert "surface_messages" in insp.get_view_names(schema)
        meta = tables_for(schema).meta
        rows = {k: v for k, v in conn.execute(select(meta.c.key, meta.c.value))}
    assert rows == {"schema_version": str(SCHEMA_VERSION), "application": "session_sql"}


def test_rendered_ddl_passes_the_gate(backend, engine: Engine):
    """Running the DDL text (what schema/*.sql holds) yields exactly what the gate expects."""
    ddl = render_ddl(engine.dialect.name, schema=backend.schema)  # type: ignore[arg-type]
    with write_tx(engine) as conn:
        for statement in _statements(ddl):
            conn.exec_driver_sql(statement)
    ensure_schema(engine, backend.schema)


def test_create_all_rolls_back_with_its_transaction(backend, engine: Engine):
    with pytest.raises(RuntimeError), write_tx(engine) as conn:
        create_all(conn, backend.schema)
        raise RuntimeError("abort")
    with read_tx(engine) as conn:
        assert inspect(conn).get_table_names(backend.table_schema) == []


@pytest.mark.postgresql
def test_postgres_schema_name_is_quoted(postgres_admin: Engine):
    odd = f'T_{uuid.uuid4().hex[:8]} "odd"; x'
    engine = make_engine(postgres_admin.url.render_as_string(hide_password=False))
    try:
        ensure_schema(engine, odd)
        ensure_schema(engine, odd)  # the gate reflects the quoted schema too
        with read_tx(engine) as conn:
            assert "events" in inspect(conn).get_table_names(odd)
    finally:
        engine.dispose()
        with postgres_admin.begin() as conn:
            conn.execute(DropSchema(odd, cascade=True, if_exists=True))


def test_view_joins_surface_to_events_in_surface_order(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    t = tables_for(target_schema(engine, backend.schema))
    with write_tx(engine) as conn:
        key = _insert_session(conn, t, "s1")
        conn.execute(
            insert(t.events),
            [
                {"session_key": key, "seq": i, "type": "user/message", "time": i, "data": {"i": i}}
                for i in range(3)
            ],
        )
        conn.execute(
            insert(t.surface),
            [
                {"session_key": key, "pos": 0, "event_seq": 2},
                {"session_key": key, "pos": 1, "event_seq": 0},
            ],
        )
    view = t.surface_messages
    with read_tx(engine) as conn:
        rows = conn.execute(
            select(view.c.tenant, view.c.session_id, view.c.pos, view.c.seq, view.c.data).order_by(
                view.c.session_id, view.c.pos
            )
        ).all()
    # The view gives the public id and tenant back (the tables hold the key).
    assert [tuple(r) for r in rows] == [("", "s1", 0, 2, {"i": 2}), ("", "s1", 1, 0, {"i": 0})]


def test_surface_must_name_a_logged_event(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    t = tables_for(target_schema(engine, backend.schema))
    with pytest.raises(StoreError) as info, translate_errors("s1"), write_tx(engine) as conn:
        key = _insert_session(conn, t, "s1")
        conn.execute(insert(t.surface).values(session_key=key, pos=0, event_seq=7))
    assert info.value.__cause__ is not None


def test_deleting_a_session_cascades(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    t = tables_for(target_schema(engine, backend.schema))
    with write_tx(engine) as conn:
        key = _insert_session(conn, t, "s1")
        conn.execute(insert(t.events).values(session_key=key, seq=0, type="x", time=0, data=None))
        conn.execute(insert(t.surface).values(session_key=key, pos=0, event_seq=0))
    with write_tx(engine) as conn:
        conn.execute(t.sessions.delete().where(t.sessions.c.id == "s1"))
    with read_tx(engine) as conn:
        assert conn.execute(select(t.events.c.seq)).all() == []
        assert conn.execute(select(t.surface.c.pos)).all() == []


def _insert_session(conn: Any, t: schema_mod.SchemaTables, session_id: str) -> int:
    """Insert a bare session row; its ``session_key`` (what events and surface rows name)."""
    result = conn.execute(
        insert(t.sessions).values(
            id=session_id,
            format_version=0,
            created_at=0,
            parent_session=None,
            inherited_event_count=0,
            header={"version": 0, "id": session_id, "createdAt": 0, "isSeeded": False},
            head_seq=-1,
            surface_next_pos=0,
            replace_generation=0,
            updated_at=0,
            incarnation=session_id,
        )
    )
    key = result.inserted_primary_key[0]
    assert isinstance(key, int)
    conn.execute(insert(t.session_ids).values(id=session_id, session_key=key))
    return key


# --------------------------------------------------------------------------------------------
# JSON encoding

ROUND_TRIP_VALUES: list[Any] = [
    1e16,
    -1e16,
    1.5e300,
    1e-7,
    0.1,
    2**53 - 1,
    -(2**53 - 1),
    1.0,
    0,
    5e-324,
    1.7976931348623157e308,
    9007199254740993.0,
    None,
    True,
    "e+1 is text, not a number",
    "ünïcödé ✓",
    [1.0, 1, 1e16, {"x": 1e20, "y": [2.5e17]}],
    {"nested": {"big": 1e16, "small": 1e-7, "int": 10}},
]


def _same(a: Any, b: Any) -> bool:
    """Equal, with every number of the same Python type."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@pytest.mark.parametrize("value", ROUND_TRIP_VALUES, ids=repr)
def test_dumps_json_round_trips_types(value):
    assert _same(json.loads(dumps_json(value)), value)


def test_json_round_trip_through_the_events_column(backend, engine: Engine):
    """Through json on PostgreSQL (a 1e16 read back must stay a float, not turn into an int)."""
    ensure_schema(engine, backend.schema)
    t = tables_for(target_schema(engine, backend.schema))
    with write_tx(engine) as conn:
        key = _insert_session(conn, t, "s1")
        conn.execute(
            insert(t.events),
            [
                {"session_key": key, "seq": i, "type": "x", "time": 0, "data": v}
                for i, v in enumerate(ROUND_TRIP_VALUES)
            ],
        )
    with read_tx(engine) as conn:
        got = conn.execute(select(t.events.c.data).order_by(t.events.c.seq)).scalars().all()
    for value, back in zip(ROUND_TRIP_VALUES, got, strict=True):
        assert _same(back, value), (value, back)


def test_dumps_json_is_compact_and_keeps_unicode():
    assert dumps_json({"a": [1, 2.5], "b": "é"}) == '{"a":[1,2.5],"b":"é"}'
    assert dumps_json(1e16) == "10000000000000000.0"
    assert dumps_json([1.5e300]) == "[" + str(int(1.5e300)) + ".0]"


def test_dumps_json_accepts_frozen_containers():
    class FrozenDict(dict):  # type: ignore[type-arg]
        pass

    class FrozenList(tuple):  # type: ignore[type-arg]
        pass

    value = FrozenDict(a=FrozenList([1, FrozenDict(b=1e16)]))
    assert dumps_json(value) == '{"a":[1,{"b":10000000000000000.0}]}'
    assert _dumps_iterative(FrozenDict(a=FrozenList([1]))) == '{"a":[1]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, [1e16, -math.inf]])
def test_dumps_json_refuses_non_finite_floats(bad):
    with pytest.raises(ValueError):
        dumps_json(bad)


def test_dumps_json_refuses_cycles_and_objects():
    cyclic: list[Any] = [1e16]
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="Circular"):
        dumps_json(cyclic)
    with pytest.raises(TypeError):
        dumps_json({"x": object()})
    with pytest.raises(TypeError):
        dumps_json([1e16, {1, 2}])


def test_dumps_json_handles_nesting_deeper_than_the_recursion_limit():
    value: Any = 1.0
    for _ in range(50_000):
        value = [value]
    encoded = dumps_json(value)
    assert encoded == "[" * 50_000 + "1.0" + "]" * 50_000


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A named function: hypothesis inspects the extend function's source, which is
    # unreliable for a lambda split over several lines.
    return st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=5), children, max_size=4
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    _containers,
    max_leaves=20,
)


@given(json_values)
def test_slow_path_matches_json_dumps(value):
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    got = _dumps_iterative(value)
    if "e+" in expected:
        assert _same(json.loads(got), json.loads(expected))
    else:
        assert got == expected
    assert _same(json.loads(dumps_json(value)), value)


# --------------------------------------------------------------------------------------------
# Engines and transactions


def test_make_engine_rejects_bad_options(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ValueError, match="synchronous"):
        make_engine(url, synchronous="OFF")
    with pytest.raises(ValueError, match="unsupported"):
        make_engine("mysql://localhost/x")
    with pytest.raises(ValueError, match="busy_timeout_ms"):
        make_engine(url, busy_timeout_ms=-1)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="lock_timeout_ms"):
            make_engine("postgresql://u@h/db", lock_timeout_ms=bad)


def test_make_engine_rewrites_postgres_urls():
    for url in ("postgresql://u@h/db", "postgres://u@h/db", "postgresql+psycopg://u@h/db"):
        engine = make_engine(url)
        assert engine.url.drivername == "postgresql+psycopg"
        engine.dispose()


@pytest.mark.parametrize(("synchronous", "level"), [("FULL", 2), ("normal", 1)])
def test_sqlite_connection_pragmas(tmp_path: Path, synchronous: str, level: int):
    engine = make_engine(
        f"sqlite:///{tmp_path / 'x.db'}", synchronous=synchronous, busy_timeout_ms=1234
    )
    try:
        with engine.connect() as conn:
            pragma = conn.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "delete"  # not before the gate
        backend_for(engine).prepare_store(engine)  # WAL
        with engine.connect() as conn:
            pragma = conn.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            assert pragma("PRAGMA foreign_keys").scalar() == 1
            assert pragma("PRAGMA busy_timeout").scalar() == 1234
            assert pragma("PRAGMA synchronous").scalar() == level
    finally:
        engine.dispose()


def test_sqlite_write_tx_takes_the_write_lock_at_begin(tmp_path: Path):
    """A second writer waits at BEGIN IMMEDIATE and fails there, not half-way through."""
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}", busy_timeout_ms=50)
    try:
        with write_tx(engine):
            other = sqlite3.connect(path, timeout=0.05, isolation_level=None)
            try:
                with pytest.raises(sqlite3.OperationalError) as info:
                    other.execute("BEGIN IMMEDIATE")
                assert info.value.sqlite_errorname == "SQLITE_BUSY"
                other.execute("BEGIN")  # readers are not blocked (WAL)
                other.execute("SELECT count(*) FROM sqlite_master").fetchall()
                other.execute("COMMIT")
            finally:
                other.close()
        # And our own writer reports the lock as a StoreError.
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with (
                pytest.raises(TransientStoreError, match="locked") as err,
                translate_errors(),
                write_tx(engine),
            ):
                pass
            assert isinstance(err.value.__cause__, Exception)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    finally:
        engine.dispose()


def test_sqlite_read_tx_is_a_snapshot(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    backend_for(engine).prepare_store(engine)  # WAL, as open_store does once the gate accepted
    try:
        with write_tx(engine) as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        with read_tx(engine) as reader:
            assert reader.exec_driver_sql("SELECT count(*) FROM t").scalar() == 0
            with write_tx(engine) as writer:
                writer.exec_driver_sql("INSERT INTO t VALUES (1)")
            assert reader.exec_driver_sql("SELECT count(*) FROM t").scalar() == 0
        with read_tx(engine) as reader:
            assert reader.exec_driver_sql("SELECT count(*) FROM t").scalar() == 1
    finally:
        engine.dispose()


# --------------------------------------------------------------------------------------------
# Error translation


def test_duplicate_session_is_session_exists_on_postgres(backend, engine: Engine):
    ensure_schema(engine, backend.schema)
    t = tables_for(target_schema(engine, backend.schema))
    with write_tx(engine) as conn:
        _insert_session(conn, t, "dup")
    with pytest.raises(SessionSQLError) as info, translate_errors("dup"), write_tx(engine) as conn:
        _insert_session(conn, t, "dup")
    assert info.value.__cause__ is not None
    if backend.has("named_constraints"):
        assert isinstance(info.value, SessionExistsError)
        assert info.value.session_id == "dup"
    else:  # SQLite reports no constraint name; the store checks inside BEGIN IMMEDIATE
        assert isinstance(info.value, StoreError)


@pytest.mark.postgresql
def test_duplicate_event_is_concurrency_error_on_postgres(postgres_admin: Engine):
    schema = f"t_{uuid.uuid4().hex}"
    engine = make_engine(postgres_admin.url.render_as_string(hide_password=False))
    try:
        ensure_schema(engine, schema)
        t = tables_for(schema)
        with write_tx(engine) as conn:
            key = _insert_session(conn, t, "s")
            row = {"session_key": key, "seq": 0, "type": "x", "time": 0, "data": {}}
            conn.execute(insert(t.events).values(row))
        with pytest.raises(ConcurrencyError), translate_errors("s"), write_tx(engine) as conn:
            conn.execute(insert(t.events).values(row))
    finally:
        engine.dispose()
        with postgres_admin.begin() as conn:
            conn.execute(DropSchema(schema, cascade=True, if_exists=True))


@pytest.mark.postgresql
def test_unreachable_postgres_is_store_error():
    engine = make_engine("postgresql://nobody@127.0.0.1:1/none")
    try:
        with (
            pytest.raises(TransientStoreError, match="cannot reach") as info,
            translate_errors(),
            read_tx(engine) as conn,
        ):
            conn.execute(text("SELECT 1"))
        assert info.value.__cause__ is not None
    finally:
        engine.dispose()


def test_read_only_sqlite_is_store_error(tmp_path: Path):
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}")
    ensure_schema(engine, None)
    engine.dispose()
    ro = make_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        with (
            pytest.raises(PermanentStoreError, match="read-only"),
            translate_errors(),
            write_tx(ro) as conn,
        ):
            conn.exec_driver_sql("DELETE FROM session_sql_meta")
    finally:
        ro.dispose()


@pytest.mark.postgresql
def test_a_statement_timeout_is_transient(postgres_admin: Engine):
    engine = make_engine(postgres_admin.url.render_as_string(hide_password=False))
    try:
        with (
            pytest.raises(TransientStoreError, match="57014") as info,
            translate_errors(),
            read_tx(engine) as conn,
        ):
            conn.execute(text("SET LOCAL statement_timeout = '20ms'"))
            conn.execute(text("SELECT pg_sleep(5)"))
        assert info.value.__cause__ is not None
    finally:
        engine.dispose()


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("sqlstate", "branch"),
    [
        ("40001", TransientStoreError),  # serialization_failure
        ("40P01", TransientStoreError),  # deadlock_detected
        ("53300", TransientStoreError),  # too_many_connections
        ("53100", PermanentStoreError),  # disk_full
        ("42501", PermanentStoreError),  # insufficient_privilege
        ("XX000", StoreError),  # internal_error: no branch says what to do
    ],
)
def test_postgres_errors_take_the_branch_of_their_sqlstate(
    postgres_admin: Engine, sqlstate: str, branch: type[StoreError]
):
    """The server raises each SQLSTATE for real; the branch follows from the SQLSTATE alone."""
    engine = make_engine(postgres_admin.url.render_as_string(hide_password=False))
    raise_it = f"DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{sqlstate}'; END $$"
    try:
        with pytest.raises(StoreError) as info, translate_errors(), read_tx(engine) as conn:
            conn.execute(text(raise_it))
        assert type(info.value) is branch
        assert f"SQLSTATE {sqlstate}" in str(info.value)
    finally:
        engine.dispose()


def test_own_errors_and_programming_errors_pass_through():
    with pytest.raises(SessionExistsError), translate_errors():
        raise SessionExistsError("x")
    with pytest.raises(KeyError), translate_errors():
        raise KeyError("x")
