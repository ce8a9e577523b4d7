"""``migrate`` (SPEC §11.4): every session of every tenant into a new store, verified, resumable.

Each direction (SQLite and PostgreSQL, both ways and onto themselves) copies tenants that share
session ids, forks, metadata and times; sources of schema versions 1 to 5 are built from those
releases' DDL and written as their writers wrote them. An interruption (an exception inside a
copy, or a process killed in the middle of a large session, of this version's store or of a
version 5 one) is resumed by a rerun without
duplicates; conflicting destinations and bad URLs are refused before anything is written.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Text, cast, column, delete, event, func, select, table, text, update

import session_sql
from session_sql import (
    ConfigurationError,
    MigrationProgress,
    PermanentStoreError,
    SchemaMismatchError,
    SchemaVersionError,
    Session,
    SessionExistsError,
    SessionStore,
    StoreError,
    migrate,
    open_store,
    thaw,
)
from session_sql._store import migration
from session_sql._store import source as source_module
from session_sql._store.database import make_engine, write_tx
from session_sql._store.importer import IMPORT_BATCH
from session_sql._store.schema import tables_for

from ..conftest import Backend
from ..legacy_schema import create_legacy_store, insert_legacy_session
from .store_builders import dump_tables, key_of, remove, say, summarize, tool_turn

TENANTS = ("", "acme", "globex")
T0 = 1_700_000_000_000

PG = pytest.mark.postgresql
DIRECTIONS = [
    pytest.param("sqlite", "sqlite", id="sqlite-to-sqlite"),
    pytest.param("sqlite", "postgresql", id="sqlite-to-postgresql", marks=PG),
    pytest.param("postgresql", "sqlite", id="postgresql-to-sqlite", marks=PG),
    pytest.param("postgresql", "postgresql", id="postgresql-to-postgresql", marks=PG),
]
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=PG),
]


def _open(where: Backend, tenant: str = "", **options: Any) -> SessionStore:
    return open_store(where.url, schema=where.schema, tenant=tenant, **options)


def _run(source: Backend, destination: Backend, **kw: Any) -> session_sql.MigrationReport:
    return migrate(
        source.url,
        destination.url,
        from_schema=source.schema,
        to_schema=destination.schema,
        **kw,
    )


def fill(where: Backend) -> None:
    """Three tenants holding the same session ids with different content: a session with a
    compaction and metadata, its fork (taken inside a turn) with a removal, and an empty one."""
    for tenant in TENANTS:
        name = tenant or "default"
        clock = iter(range(T0, T0 + 10_000)).__next__
        with _open(where, tenant, clock=clock) as store:
            s1 = store.create_session(
                "s1", user_id=f"user-{name}", title=f"first of {name}", labels={"app": name}
            )
            say(s1, f"hello from {name}")
            tool_turn(s1, 1)
            fork = store.fork_session("s1", boundary=5, child_id="s2")
            taken = fork.surface.nodes[1]
            remove(fork, taken, taken, [taken])
            tool_turn(s1, 2)
            nodes = s1.surface.nodes
            summarize(s1, nodes[0], nodes[2], list(nodes[0:3]))
            store.update_session("s1", title=f"renamed {name}")
            store.create_session("s3", labels={"empty": "yes"})


def snapshot(where: Backend, tenant: str) -> dict[str, Any]:
    """Everything a tenant's store answers about its sessions (what must survive a copy)."""
    with _open(where, tenant, create=False) as store:
        out: dict[str, Any] = {}
        for info in store.iter_sessions():
            session = store.load_session(info.id)
            out[info.id] = {
                "info": info.model_dump(),
                "header": thaw(session.header),
                "events": [e.to_json() for e in store.events(info.id)],
                "surface": store.surface(info.id),
                "messages": thaw(store.messages(info.id)),
                "children": [c.id for c in store.list_sessions(parent=info.id)],
                "verify": store.verify(info.id).ok,
            }
        return out


def total_sessions(where: Backend) -> int:
    """Every session row of every tenant (to see duplicates or strays)."""
    engine = make_engine(where.url)
    try:
        sessions = tables_for(where.table_schema).sessions
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(sessions)).scalar_one())
    finally:
        engine.dispose()


# --------------------------------------------------------------------------------------------
# Copying


@pytest.mark.parametrize(("source_kind", "destination_kind"), DIRECTIONS)
def test_every_tenant_is_copied_whole_and_verified(
    place, source_kind, destination_kind, monkeypatch
):
    source, destination = place(source_kind), place(destination_kind)
    fill(source)
    monkeypatch.setattr(source_module, "PAGE", 2)  # sessions and events listed across pages
    steps: list[MigrationProgress] = []

    report = _run(source, destination, progress=steps.append)

    assert report.ok and not report.failures
    assert (report.tenants, report.sessions, report.copied, report.skipped) == (3, 9, 9, 0)
    assert (
        report.copied_events
        == report.events
        == sum(len(s["events"]) for t in TENANTS for s in snapshot(source, t).values())
    )
    assert report.source_version == session_sql.SCHEMA_VERSION
    for tenant in TENANTS:
        copied = snapshot(destination, tenant)
        assert copied == snapshot(source, tenant)
        assert copied["s2"]["info"]["parent_session"] == "s1"
        assert copied["s1"]["children"] == ["s2"]
        assert copied["s1"]["info"]["title"] == f"renamed {tenant or 'default'}"
        assert all(s["verify"] for s in copied.values())
    assert total_sessions(destination) == 9
    # Progress: every session once, monotonic, ending at the totals.
    finished = [s for s in steps if s.outcome != "copying"]
    assert [s.outcome for s in finished] == ["copied"] * 9
    assert [s.sessions_done for s in finished] == list(range(1, 10))
    assert finished[-1].events_done == finished[-1].events_total == report.events
    assert all(a.events_done <= b.events_done for a, b in itertools.pairwise(steps))
    assert {(s.tenant, s.session_id) for s in finished} == {
        (t, i) for t in TENANTS for i in ("s1", "s2", "s3")
    }


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_rerun_checks_and_skips_what_is_there(place, kind, monkeypatch):
    source, destination = place(kind), place("sqlite")
    fill(source)
    _run(source, destination)
    # Both ends' sessions across pages (the destination is listed by the same pager).
    monkeypatch.setattr(source_module, "PAGE", 2)
    before = dump_tables_all(destination)

    again = _run(source, destination)

    assert again.ok
    assert (again.copied, again.skipped, again.copied_events) == (0, 9, 0)
    assert dump_tables_all(destination) == before


def dump_tables_all(where: Backend) -> Any:
    with _open(where) as store:
        return dump_tables(store)


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_large_session_is_streamed_in_pages_and_batches(place, kind, monkeypatch):
    """The source's events are read a page per statement (never the whole log), the copy
    goes in in import batches, and progress is reported inside the session."""
    source, destination = place("sqlite"), place(kind)
    monkeypatch.setattr(migration, "PROGRESS_EVENTS", 100)
    monkeypatch.setattr(source_module, "PAGE", 100)
    with _open(source) as store:
        big = store.create_session("big")
        for turn in range(1, 81):
            tool_turn(big, turn)  # 13 events a turn: more than one import batch
        count = big.seq
    assert count > IMPORT_BATCH
    pages: list[Any] = []

    def page(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if "FROM events" in statement and "LIMIT" in statement and conn.engine.url == engine_url:
            pages.append(parameters)

    engine_url = make_engine(source.url).url
    event.listen(Engine, "before_cursor_execute", page)
    steps: list[MigrationProgress] = []
    try:
        report = _run(source, destination, progress=steps.append)
    finally:
        event.remove(Engine, "before_cursor_execute", page)

    assert report.ok and report.copied_events == count
    assert len(pages) == count // 100 + 1  # one statement per page of 100
    inside = [s.events_done for s in steps if s.outcome == "copying"]
    assert inside == list(range(100, count, 100))
    with _open(destination) as copied, _open(source) as original:
        assert copied.verify("big").ok
        assert [e.to_json() for e in copied.events("big")] == [
            e.to_json() for e in original.events("big")
        ]


# --------------------------------------------------------------------------------------------
# Earlier schema versions


def _legacy_sessions() -> list[tuple[Any, list[Any], int]]:
    """``(header, events, inherited_event_count)``: a session with a compaction, its fork, and
    an empty one, built in memory as an earlier release would have logged them."""
    clock = iter(range(T0, T0 + 10_000)).__next__
    parent = Session("p1", clock=clock)
    tool_turn(parent, 1)
    nodes = parent.surface.nodes
    summarize(parent, nodes[0], nodes[1], list(nodes[0:2]))
    child = parent.fork(4, "c1")
    say(child, "on the fork")
    empty = Session("e1", clock=clock)
    return [
        (parent.header, list(parent.events), 0),
        (child.header, list(child.events), child.inherited_event_count),
        (empty.header, [], 0),
    ]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", BACKENDS)
def test_an_earlier_version_is_read_into_the_default_tenant(place, kind, version, monkeypatch):
    source, destination = place(kind), place("sqlite")
    monkeypatch.setattr(source_module, "PAGE", 2)
    engine = make_engine(source.url)
    try:
        create_legacy_store(engine, source.schema, version)
        schema = source.table_schema
        built = _legacy_sessions()
        for header, events, inherited in built:
            insert_legacy_session(
                engine,
                schema,
                version,
                header,
                events,
                inherited_event_count=inherited,
                updated_at=T0 + 500,
            )
    finally:
        engine.dispose()
    with pytest.raises(SchemaVersionError):
        _open(source, create=False)  # the gate refuses it; migrate reads it

    report = _run(source, destination)

    assert report.ok, report.failures
    assert (report.source_version, report.tenants, report.copied) == (version, 1, 3)
    with _open(destination) as store:
        for header, events, _ in built:
            sid = header["id"]
            info = store.session_info(sid)
            assert (info.tenant, info.user_id, info.title, info.labels) == ("", None, None, {})
            assert info.updated_at == T0 + 500
            assert info.created_at == header["createdAt"]
            assert [e.to_json() for e in store.events(sid)] == [e.to_json() for e in events]
            assert store.verify(sid).ok
        assert store.session_info("c1").parent_session == "p1"
        assert store.load_session("c1").inherited_event_count == built[1][2]
    assert total_sessions(destination) == 3


def build_legacy(reference: Backend, where: Backend, version: int) -> None:
    """A store of schema ``version`` (3 to 5) at ``where`` holding what ``reference``, a store
    of this build, holds: every tenant's sessions, row for row as that release wrote them."""
    engine = make_engine(where.url)
    try:
        create_legacy_store(engine, where.schema, version)
        for tenant in TENANTS:
            with _open(reference, tenant, create=False) as store:
                for info in store.iter_sessions():
                    session = store.load_session(info.id)
                    insert_legacy_session(
                        engine,
                        where.table_schema,
                        version,
                        session.header,
                        list(store.events(info.id)),
                        tenant=tenant,
                        user_id=info.user_id,
                        title=info.title,
                        labels=info.labels,
                        inherited_event_count=session.inherited_event_count,
                        updated_at=info.updated_at,
                    )
    finally:
        engine.dispose()


def data_texts(where: Backend, version: int) -> dict[tuple[str, str, int], str]:
    """Every event's ``data`` as the database gives it back, respelled compactly (so key
    order shows and whitespace does not), by ``(tenant, session id, seq)``."""
    t = tables_for(where.table_schema)
    s = t.sessions
    if version < 5:  # tenant and session id in each row; from 5 on, the session's key
        names = ("tenant", "session_id", "seq", "data")
        e = table("events", *(column(n) for n in names), schema=where.table_schema)
        query = select(e.c.tenant, e.c.session_id, e.c.seq, cast(e.c.data, Text))
    else:
        e = t.events
        query = select(s.c.tenant, s.c.id, e.c.seq, cast(e.c.data, Text)).join_from(
            e, s, e.c.session_key == s.c.session_key
        )
    engine = make_engine(where.url)
    try:
        with engine.connect() as conn:
            return {
                (tenant, sid, seq): json.dumps(json.loads(data))
                for tenant, sid, seq, data in conn.execute(query)
            }
    finally:
        engine.dispose()


def source_pages(source: Backend) -> tuple[dict[str, list[Any]], Callable[[], None]]:
    """The paged statements (``LIMIT``) the source's tables get, by table, and how to stop
    recording them."""
    pages: dict[str, list[Any]] = {"sessions": [], "events": []}
    url = make_engine(source.url).url
    prefix = re.escape(f"{source.schema}.") if source.has("schema") else ""

    def on_statement(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if conn.engine.url != url or "LIMIT" not in statement:
            return
        for name, found in pages.items():
            if re.search(rf"\bFROM {prefix}{name}\b", statement):
                found.append(parameters)

    event.listen(Engine, "before_cursor_execute", on_statement)
    return pages, lambda: event.remove(Engine, "before_cursor_execute", on_statement)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize(("source_kind", "destination_kind"), DIRECTIONS)
def test_a_tenanted_earlier_version_is_copied_whole_in_pages_and_resumed(
    place, source_kind, destination_kind, version, monkeypatch
):
    """Versions 3 and 4 key events and surface by tenant and session id, version 5 by the
    session's key (with the public id unique in ``sessions`` itself). Their stores, built
    from that release's DDL with what a store of this build holds (tenants sharing ids,
    metadata, forks, a replacement and a removal), copy into this build identically, a page
    of sessions and of events per statement; a rerun skips all of it."""
    reference, source, destination = place(source_kind), place(source_kind), place(destination_kind)
    fill(reference)
    expected = {tenant: snapshot(reference, tenant) for tenant in TENANTS}
    build_legacy(reference, source, version)
    with pytest.raises(SchemaVersionError) as refused:
        _open(source, create=False)  # the gate refuses it and says what to do
    assert refused.value.actual == str(version)
    assert f"schema version {version} is older" in str(refused.value)
    assert "'session-sql migrate --from URL --to NEW_URL'" in str(refused.value)
    monkeypatch.setattr(source_module, "PAGE", 2)
    pages, stop = source_pages(source)
    try:
        report = _run(source, destination)
    finally:
        stop()

    assert report.ok, report.failures
    assert (report.source_version, report.tenants, report.sessions) == (version, 3, 9)
    assert (report.copied, report.skipped) == (9, 0)
    logs = [len(s["events"]) for t in TENANTS for s in expected[t].values()]
    assert report.copied_events == report.events == sum(logs)
    for tenant in TENANTS:
        copied = snapshot(destination, tenant)
        assert copied == expected[tenant]
        assert copied["s2"]["info"]["parent_session"] == "s1"
        assert copied["s1"]["info"]["title"] == f"renamed {tenant or 'default'}"
        assert all(s["verify"] for s in copied.values())
    # Streaming: 9 sessions listed two at a time; each log read two events per statement.
    assert len(pages["sessions"]) == 5
    assert len(pages["events"]) == sum(math.ceil(n / 2) for n in logs)
    # The data goes in as the source gave it back: the release's text on SQLite and in
    # version 5's json column; on PostgreSQL, the JSONB of versions 3 and 4 (keys sorted) as
    # read, which the json column then keeps.
    read = data_texts(source, version)
    assert data_texts(destination, session_sql.SCHEMA_VERSION) == read
    if version >= 5 or not source.has("jsonb_in_old_schemas"):
        assert read == data_texts(reference, session_sql.SCHEMA_VERSION)
    before = dump_tables_all_tenants(destination)

    again = _run(source, destination)

    assert again.ok and (again.copied, again.skipped, again.copied_events) == (0, 9, 0)
    assert dump_tables_all_tenants(destination) == before


@pytest.mark.parametrize("stored", ["0", str(session_sql.SCHEMA_VERSION + 1), "two", "02"])
def test_a_source_of_an_unknown_version_is_refused(place, stored):
    source, destination = place("sqlite"), place("sqlite")
    engine = make_engine(source.url)
    try:
        create_legacy_store(
            engine,
            source.schema,
            2,
            lambda d: d.replace("'schema_version', '2'", f"'schema_version', '{stored}'"),
        )
    finally:
        engine.dispose()

    with pytest.raises(SchemaVersionError) as info:
        _run(source, destination)

    assert info.value.actual == stored
    assert "migrate" in str(info.value) or "not one" in str(info.value)
    assert not Path(destination.url.removeprefix("sqlite:///")).exists()


@pytest.mark.parametrize("version", [2, 5])
def test_an_earlier_version_missing_a_column_is_refused(place, version):
    source, destination = place("sqlite"), place("sqlite")
    engine = make_engine(source.url)
    try:
        create_legacy_store(
            engine,
            source.schema,
            version,
            lambda d: d.replace("\treplace_generation BIGINT NOT NULL,\n", ""),
        )
    finally:
        engine.dispose()
    with pytest.raises(SchemaMismatchError, match=r"sessions\.replace_generation"):
        _run(source, destination)
    assert not Path(destination.url.removeprefix("sqlite:///")).exists()


# --------------------------------------------------------------------------------------------
# Interruptions


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_interrupted_migration_resumes_without_duplicates(place, kind, monkeypatch):
    source, destination = place("sqlite"), place(kind)
    fill(source)
    real = migration._SessionCopy.raw_events
    copies = 0

    def failing(self: Any) -> Iterator[Any]:
        nonlocal copies
        copies += 1
        for n, item in enumerate(real(self)):
            if copies == 5 and n == 3:
                raise RuntimeError("the machine went away")
            yield item

    monkeypatch.setattr(migration._SessionCopy, "raw_events", failing)
    with pytest.raises(RuntimeError):
        _run(source, destination)
    assert total_sessions(destination) == 4  # the fifth was rolled back whole
    monkeypatch.setattr(migration._SessionCopy, "raw_events", real)

    report = _run(source, destination)

    assert report.ok
    assert (report.copied, report.skipped) == (5, 4)
    assert total_sessions(destination) == 9
    for tenant in TENANTS:
        assert snapshot(destination, tenant) == snapshot(source, tenant)


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from session_sql import migrate

    def progress(step):
        if step.outcome == "copying" and step.session_id == "m-big":
            os.kill(os.getpid(), signal.SIGKILL)

    migrate(sys.argv[1], sys.argv[2], from_schema=sys.argv[3], to_schema=sys.argv[4],
            progress=progress)
    """
)


@pytest.mark.parametrize("version", ["current", 5])
@pytest.mark.parametrize("kind", BACKENDS)
def test_a_process_killed_inside_a_large_session_resumes(place, kind, version, tmp_path):
    """``kill -9`` in the middle of a large session's copy, from a store of this version or
    of version 5 (the upgrade to this one): the rerun checks what was committed, copies the
    rest, and every session ends up there once, verified and identical."""
    built, destination = place("sqlite"), place(kind)
    with _open(built) as store:
        for sid in ("a1", "a2", "a3"):
            say(store.create_session(sid), f"hi {sid}")
        big = store.create_session("m-big")
        for turn in range(1, 101):
            tool_turn(big, turn)
        big_count = big.seq
        say(store.create_session("z1"), "hi z1")  # after m-big, by id and by creation
    source = built
    if version == 5:
        source = place("sqlite")
        build_legacy(built, source, 5)
    expected = snapshot(built, "")
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    args = [source.url, destination.url, source.schema, destination.schema]

    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == -signal.SIGKILL, done.stderr
    assert total_sessions(destination) == 3  # a1..a3; m-big's transaction died with it
    report = _run(source, destination)
    assert report.ok
    assert report.source_version == (5 if version == 5 else session_sql.SCHEMA_VERSION)
    assert (report.copied, report.skipped) == (2, 3)
    with _open(destination) as store:
        assert store.head_seq("m-big") == big_count - 1
        assert all(store.verify(i.id).ok for i in store.iter_sessions())
    assert snapshot(destination, "") == expected
    assert total_sessions(destination) == 5


# --------------------------------------------------------------------------------------------
# Refusals: nothing is written


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_destination_holding_other_data_is_refused_untouched(place, kind):
    source, destination = place("sqlite"), place(kind)
    fill(source)
    with _open(destination, "acme") as store:
        say(store.create_session("s2"), "something else")  # same tenant and id, other log
    before = dump_tables_all_tenants(destination)

    with pytest.raises(SessionExistsError) as info:
        _run(source, destination)

    assert info.value.session_id == "s2" and info.value.tenant == "acme"
    assert "'s2'" in str(info.value) and "'acme'" in str(info.value)
    assert dump_tables_all_tenants(destination) == before


def dump_tables_all_tenants(where: Backend) -> Any:
    """Every row of the three tables, whatever the tenant."""
    engine = make_engine(where.url)
    t = tables_for(where.table_schema)
    try:
        with engine.connect() as conn:
            return {
                table.name: sorted(map(tuple, conn.execute(select(*table.c)).all()), key=repr)
                for table in (t.sessions, t.events, t.surface)
            }
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "change",
    ["title", "labels", "updated_at", "an event", "missing from the source", "other tenant"],
)
def test_each_kind_of_difference_is_refused(place, change):
    source, destination = place("sqlite"), place("sqlite")
    fill(source)
    _run(source, destination)
    s = tables_for(None).sessions
    e = tables_for(None).events
    with _open(destination) as store:
        if change == "title":
            store.update_session("s3", title="edited")
        elif change == "labels":
            store.update_session("s3", labels={"empty": "no"})
        elif change == "missing from the source":
            store.create_session("s4")
        with write_tx(store.engine) as conn:
            if change == "updated_at":
                conn.execute(update(s).where(s.c.tenant == "", s.c.id == "s3").values(updated_at=1))
            if change == "an event":
                conn.execute(
                    update(e)
                    .where(e.c.session_key == key_of(store, "s1", ""), e.c.seq == 0)
                    .values(time=e.c.time + 1)
                )
    if change == "other tenant":
        with _open(destination, "initech") as store:
            store.create_session("s1")
    before = dump_tables_all_tenants(destination)

    with pytest.raises(SessionExistsError) as info:
        _run(source, destination)

    assert info.value.session_id in ("s1", "s3", "s4")
    assert "nothing was written" in str(info.value)
    assert dump_tables_all_tenants(destination) == before


def test_bad_urls_are_refused_and_create_nothing(place, tmp_path):
    source, destination = place("sqlite"), place("sqlite")
    fill(source)
    target = Path(destination.url.removeprefix("sqlite:///"))
    with pytest.raises(PermanentStoreError, match="nothing to migrate"):
        migrate(f"sqlite:///{tmp_path / 'missing.db'}", destination.url)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(ConfigurationError):
        migrate("nonsense://somewhere", destination.url)
    with pytest.raises(ConfigurationError):
        migrate(source.url, "nonsense://somewhere")
    with pytest.raises(StoreError):
        migrate(source.url, f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    with pytest.raises(ConfigurationError, match="same store"):
        migrate(source.url, source.url)
    with pytest.raises(ConfigurationError, match="schema"):
        migrate(source.url, destination.url, to_schema="no; drop")
    assert not target.exists()
    (tmp_path / "text.db").write_text("not a database\n" * 100)
    with pytest.raises(StoreError):
        migrate(source.url, f"sqlite:///{tmp_path / 'text.db'}")
    assert (tmp_path / "text.db").read_text() == "not a database\n" * 100


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_empty_source_gives_an_empty_store(place, kind):
    source, destination = place("sqlite"), place(kind)
    _open(source).close()

    report = _run(source, destination)

    assert report.ok and (report.sessions, report.copied, report.tenants) == (0, 0, 0)
    with _open(destination, create=False) as store:
        assert store.list_sessions() == []


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_empty_earlier_version_store_has_no_tenant(place, kind):
    source, destination = place(kind), place("sqlite")
    engine = make_engine(source.url)
    try:
        create_legacy_store(engine, source.schema, 2)
    finally:
        engine.dispose()
    report = _run(source, destination)
    assert report.ok and (report.source_version, report.sessions, report.tenants) == (2, 0, 0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_same_store_as_both_ends_is_refused(place, kind):
    where = place(kind)
    fill(where)
    before = dump_tables_all_tenants(where)
    with pytest.raises(ConfigurationError, match="same store"):
        _run(where, where)
    assert dump_tables_all_tenants(where) == before


def test_a_destination_of_another_version_is_refused(place):
    source, destination = place("sqlite"), place("sqlite")
    fill(source)
    engine = make_engine(destination.url)
    try:
        create_legacy_store(engine, destination.schema, 2)
    finally:
        engine.dispose()
    with pytest.raises(SchemaVersionError):
        _run(source, destination)


# --------------------------------------------------------------------------------------------
# Sessions that cannot be copied


def test_a_corrupt_source_session_fails_alone(place):
    """A source session whose surface table disagrees with its log is reported and not
    copied; the others are."""
    source, destination = place("sqlite"), place("sqlite")
    fill(source)
    sf = tables_for(None).surface
    with _open(source) as store, write_tx(store.engine) as conn:
        conn.execute(
            delete(sf).where(sf.c.session_key == key_of(store, "s1", "acme"), sf.c.pos == 0)
        )

    report = _run(source, destination)

    assert not report.ok
    assert [(f.tenant, f.session_id) for f in report.failures] == [("acme", "s1")]
    assert "does not verify in the source" in report.failures[0].error
    assert report.copied == 8
    with _open(destination, "acme") as store:
        assert {i.id for i in store.iter_sessions()} == {"s2", "s3"}
    # Once repaired at the source, a rerun copies it and skips the rest.
    with _open(source) as store, write_tx(store.engine) as conn:
        conn.execute(
            delete(tables_for(None).sessions).where(
                tables_for(None).sessions.c.tenant == "acme",
                tables_for(None).sessions.c.id == "s1",
            )
        )
    again = _run(source, destination)
    assert again.ok and (again.copied, again.skipped) == (0, 8)


def test_an_event_the_destination_refuses_fails_that_session(place):
    source, destination = place("sqlite"), place("sqlite")
    with _open(source) as store:
        say(store.create_session("small"), "x")
        say(store.create_session("large"), "y" * 5000)
    report = _run(source, destination, max_event_bytes=2000)
    assert [f.session_id for f in report.failures] == ["large"]
    assert report.copied == 1
    with _open(destination) as store:
        assert [i.id for i in store.iter_sessions()] == ["small"]


@pytest.mark.postgresql
def test_a_role_under_row_level_security_is_refused(place, postgres_admin):
    """A role that is not the tables' owner sees one tenant at most: it cannot migrate."""
    source = place("postgresql")
    fill(source)
    role = f"r_{uuid.uuid4().hex[:12]}"
    with postgres_admin.begin() as conn:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(f'GRANT USAGE ON SCHEMA "{source.schema}" TO "{role}"'))
        conn.execute(text(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{source.schema}" TO "{role}"'))
    try:
        url = postgres_admin.url.set(username=role).render_as_string(hide_password=False)
        with pytest.raises(ConfigurationError, match="row-level security"):
            migrate(url, source.url, from_schema=source.schema, to_schema=source.schema + "_x")
    finally:
        with postgres_admin.begin() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))


def test_the_names_are_exported():
    for name in ("migrate", "MigrationReport", "MigrationProgress", "MigrationFailure"):
        assert name in session_sql.__all__
        assert getattr(session_sql, name) is getattr(migration, name)
