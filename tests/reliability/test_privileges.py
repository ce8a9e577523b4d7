"""Least privilege on PostgreSQL, bound parameters, and identifiers quoted by the driver.

The roles are real LOGIN roles with unique names (trust authentication lets them in), created
and dropped by each test, never ``SET ROLE`` from a superuser session:

* a writer with exactly USAGE on the schema, SELECT/INSERT/UPDATE/DELETE on the tables and
  SELECT on the view runs the whole store API — and cannot create a store of its own;
* the same writer with the log made append-only (SELECT/INSERT only on ``events``) still runs
  it, and then cannot rewrite or delete a logged event even with hand-written SQL;
* an analyst with SELECT on ``events``, ``sessions`` and ``surface_messages`` can query them and
  cannot write anything.

The grants are read from docs/reliability.md, which prints them.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import DropSchema

import session_sql
from session_sql import Replace, StoreError, open_store
from session_sql._store.backends.postgresql.appending import COPY_MIN_ROWS

from .reliability_builders import assert_store_consistent, assistant_data, user_message

pytestmark = pytest.mark.postgresql

HOSTILE_ID = "x'); DROP TABLE events; --"

TABLES = ("session_sql_meta", "sessions", "events", "surface")


RELIABILITY_MD = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def documented_sql(heading: str, schema: str, role: str) -> list[str]:
    """The statements of the ``sql`` block of docs/reliability.md that starts with ``heading``.

    The documented names are replaced: ``session_sql_writer``/``session_sql_analyst`` by
    ``role``, the schema ``session_sql`` by ``schema`` (both quoted).
    """
    text = RELIABILITY_MD.read_text(encoding="utf-8")
    match = re.search(rf"```sql\n-- {re.escape(heading)}[^\n]*\n(.*?)```", text, re.S)
    assert match, f"docs/reliability.md lost its '{heading}' block"
    sql = re.sub(r"\bsession_sql_(writer|analyst)\b", f'"{role}"', match.group(1))
    sql = re.sub(r"\bsession_sql\.", f'"{schema}".', sql)
    sql = re.sub(r"\bSCHEMA session_sql\b", f'SCHEMA "{schema}"', sql)
    return [s.strip() for s in sql.split(";") if s.strip()]


def writer_grants(schema: str, role: str, *, append_only_log: bool = False) -> list[str]:
    grants = documented_sql("writer:", schema, role)
    if append_only_log:
        grants += documented_sql("append-only log:", schema, role)
    return grants


def analyst_grants(schema: str, role: str) -> list[str]:
    return documented_sql("analyst:", schema, role)


def text_role(url: str) -> str:
    """The user name in a URL."""
    return str(make_url(url).username)


def _run(admin: Any, statements: list[str]) -> None:
    with admin.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))


def _exercise_the_whole_api(store: Any, tmp_path: Any) -> None:
    """Every public store operation, on a session with a hostile id."""
    handle = store.create_session(HOSTILE_ID)
    handle.append("turn/start", {"turn": 1})
    handle.append("user/message", user_message("hi", id="u1"), surface_op="append")
    handle.append_many(
        [
            {"type": "step/start", "data": {"turn": 1, "step": 1}},
            {
                "type": "assistant/message",
                "data": assistant_data(1, 1, "hello"),
                "surface_op": "append",
            },
        ]
    )
    handle.append(
        "user/message",
        user_message("summary", id="s1"),
        surface_op=Replace(1, 3),
        source_event_seqs=[1, 3],
    )
    # A big batch goes in by COPY where it may; under row security by the counted INSERT.
    chunks = [{"type": "todo/write", "data": {"n": n}} for n in range(COPY_MIN_ROWS + 1)]
    assert len(handle.append_many(chunks)) == COPY_MIN_ROWS + 1
    other = store.open_session(HOSTILE_ID, resume=True)
    assert other.seq == handle.seq + 1  # resume appended its marker
    handle.refresh()
    assert store.repair(HOSTILE_ID)  # closes the open step and turn
    child = store.fork_session(HOSTILE_ID, boundary=2, child_id=f"{HOSTILE_ID} fork")
    assert child.header["parentSession"] == HOSTILE_ID
    path = tmp_path / "exported.jsonl"
    store.export_jsonl(HOSTILE_ID, path)
    store.delete_session(f"{HOSTILE_ID} fork")
    assert [s.id for s in store.list_sessions()] == [HOSTILE_ID]
    assert store.messages(HOSTILE_ID)[0]["id"] == "s1"
    assert list(store.follow(HOSTILE_ID, after_seq=handle.seq - 2, timeout=0.2))
    assert_store_consistent(store, HOSTILE_ID)
    store.delete_session(HOSTILE_ID)
    assert store.import_jsonl(path) == HOSTILE_ID
    assert_store_consistent(store, HOSTILE_ID)
    # Retention deletes through the session row's cascade too, archiving first.
    archive = tmp_path / "archive"
    archive.mkdir()
    report = store.prune(updated_before=2**53, archive_dir=archive)
    assert [p.id for p in report.sessions] == [HOSTILE_ID]
    assert store.list_sessions() == []
    assert store.import_jsonl(str(report.sessions[0].archive)) == HOSTILE_ID
    assert_store_consistent(store, HOSTILE_ID)


@pytest.mark.parametrize("append_only_log", [False, True], ids=["grants", "append-only-log"])
def test_the_store_runs_under_a_writer_role_with_only_row_grants(
    pg_backend, postgres_admin, login_role, tmp_path, append_only_log
):
    schema = pg_backend.schema
    open_store(pg_backend.url, schema=schema).close()  # the owner initialises the schema
    url = login_role("writer")
    role = text_role(url)
    _run(postgres_admin, writer_grants(schema, role, append_only_log=append_only_log))
    with open_store(url, schema=schema) as store:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT current_user")).scalar_one() == role
            assert not conn.execute(
                text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            ).scalar_one()
        _exercise_the_whole_api(store, tmp_path)
        # Hand-written SQL cannot go beyond the grants: no DDL, no change to the version row,
        # and with the append-only log no rewrite of an event either.
        q = f'"{schema}"'
        denied = [
            f"UPDATE {q}.session_sql_meta SET value = '2'",
            f"DROP TABLE {q}.events",
            f"ALTER TABLE {q}.sessions ADD COLUMN x int",
            f"CREATE TABLE {q}.sneaky (x int)",
        ]
        if append_only_log:
            denied += [f"UPDATE {q}.events SET data = '{{}}'", f"DELETE FROM {q}.events"]
        for statement in denied:
            with pytest.raises(DBAPIError) as raised, store.engine.begin() as conn:
                conn.execute(text(statement))
            assert raised.value.orig.sqlstate == "42501", statement  # insufficient_privilege

    # The writer cannot create a store: it has no right to create anything.
    with pytest.raises(StoreError, match=r"42501|permission denied"):
        open_store(url, schema=f"w_{uuid.uuid4().hex}")


def test_an_analyst_reads_events_sessions_and_surface_messages_and_writes_nothing(
    pg_backend, postgres_admin, login_role
):
    schema = pg_backend.schema
    with open_store(pg_backend.url, schema=schema) as store:
        handle = store.create_session(HOSTILE_ID)
        handle.append("user/message", user_message("hi", id="u1"), surface_op="append")
    url = login_role("analyst")
    _run(postgres_admin, analyst_grants(schema, text_role(url)))
    q = f'"{schema}"'
    analyst = create_engine(url, poolclass=NullPool)
    try:
        with analyst.connect() as conn:
            assert (
                conn.execute(
                    text(
                        f"SELECT count(*) FROM {q}.events e JOIN {q}.sessions s"
                        " ON s.session_key = e.session_key WHERE s.id = :s"
                    ),
                    {"s": HOSTILE_ID},
                ).scalar_one()
                == 1
            )
            assert conn.execute(text(f"SELECT id FROM {q}.sessions")).scalars().all() == [
                HOSTILE_ID
            ]
            row = conn.execute(text(f"SELECT data FROM {q}.surface_messages")).one()
            assert row.data["id"] == "u1"
        writes = [
            f"INSERT INTO {q}.sessions (id, format_version, created_at, inherited_event_count, "
            "header, head_seq, surface_next_pos, replace_generation, updated_at) "
            "VALUES ('x', 0, 0, 0, '{}', -1, 0, 0, 0)",
            f"UPDATE {q}.sessions SET head_seq = 7",
            f"DELETE FROM {q}.sessions",
            f"INSERT INTO {q}.events (session_key, seq, type, time, data) "
            f"VALUES ((SELECT session_key FROM {q}.sessions), 1, 't', 0, '{{}}')",
            f"UPDATE {q}.events SET data = '{{}}'",
            f"DELETE FROM {q}.events",
            f"DELETE FROM {q}.surface",
            f"DELETE FROM {q}.session_sql_meta",
            f"CREATE TABLE {q}.sneaky (x int)",
        ]
        for statement in writes:
            with pytest.raises(DBAPIError) as raised, analyst.begin() as conn:
                conn.execute(text(statement))
            assert raised.value.orig.sqlstate == "42501", statement
    finally:
        analyst.dispose()
    with open_store(pg_backend.url, schema=schema) as store:  # nothing changed
        assert [e.data["id"] for e in store.events(HOSTILE_ID)] == ["u1"]
        assert store.verify(HOSTILE_ID).ok


@pytest.mark.parametrize("kind", ["MixedCase", "reserved", "digits"])
def test_a_schema_name_that_needs_quoting_works(postgres_admin, tmp_path, kind):
    suffix = uuid.uuid4().hex[:8]
    schema = {"MixedCase": f"Sessions_{suffix}", "reserved": "select", "digits": f"_1{suffix}"}[
        kind
    ]
    url = postgres_admin.url.render_as_string(hide_password=False)
    try:
        with open_store(url, schema=schema) as store:
            _exercise_the_whole_api(store, tmp_path)
        with open_store(url, schema=schema) as store:  # the gate reflects the quoted schema
            assert_store_consistent(store, HOSTILE_ID)
        with postgres_admin.connect() as conn:
            names = conn.execute(
                text("SELECT table_name FROM information_schema.tables WHERE table_schema = :s"),
                {"s": schema},
            ).scalars()
            assert set(TABLES) | {"surface_messages"} <= set(names)
    finally:
        with postgres_admin.begin() as conn:
            conn.execute(DropSchema(schema, cascade=True, if_exists=True))


def test_a_hostile_session_id_is_stored_verbatim_on_both_backends(backend):
    with open_store(backend.url, schema=backend.schema) as store:
        handle = store.create_session(HOSTILE_ID)
        handle.append("user/message", user_message(HOSTILE_ID, id=HOSTILE_ID), surface_op="append")
        handle.append("todo/write", {HOSTILE_ID: HOSTILE_ID})
        assert [s.id for s in store.list_sessions()] == [HOSTILE_ID]
        assert store.load_session(HOSTILE_ID).header["id"] == HOSTILE_ID
        assert store.messages(HOSTILE_ID)[0]["content"][0]["text"] == HOSTILE_ID
        assert_store_consistent(store, HOSTILE_ID)
        with store.engine.connect() as conn:
            prefix = backend.table_prefix
            stored = conn.execute(text(f"SELECT id FROM {prefix}sessions")).scalars().all()
            count = conn.execute(text(f"SELECT count(*) FROM {prefix}events")).scalar_one()
        assert stored == [HOSTILE_ID]
        assert count == 2  # the events table is still there, with both events


def test_every_statement_binds_its_values(backend):
    """No value is spliced into SQL text: a hostile id never appears in a statement."""
    seen: list[str] = []
    with open_store(backend.url, schema=backend.schema) as store:

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            seen.append(statement)

        event.listen(store.engine, "before_cursor_execute", record)
        handle = store.create_session(HOSTILE_ID)
        handle.append("user/message", user_message("x", id="u"), surface_op="append")
        store.messages(HOSTILE_ID)
        store.verify(HOSTILE_ID)
        list(store.events(HOSTILE_ID))
        store.load_session(HOSTILE_ID)
        store.list_sessions(after=HOSTILE_ID)
        store.delete_session(HOSTILE_ID)
    assert len(seen) > 5
    assert [s for s in seen if HOSTILE_ID in s or "DROP" in s] == []


# SQL built by string formatting: text(f"..."), exec_driver_sql(f"..."), execute(f"..."),
# psycopg's sql.SQL(f"...") — the append path runs statements on the DBAPI cursor, which no
# engine event sees, so the source is checked as well.
_FORMATTED_SQL = re.compile(
    r"\b(text|exec_driver_sql|execute|executemany|SQL)\(\s*(f|rf|fr)[\"']"
    r"|\b(text|exec_driver_sql|execute|executemany|SQL)\([^)]*(%\s*\(|\.format\()"
)


def test_no_sql_is_built_by_string_formatting():
    package = Path(session_sql.__file__).parent
    offenders = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _FORMATTED_SQL.search(line)
        and "sql.Identifier" not in line  # psycopg composes identifiers safely
    ]
    assert offenders == []
