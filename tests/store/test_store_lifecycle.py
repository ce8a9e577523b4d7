"""Opening, resuming, forking, repairing and deleting stored sessions (SPEC §7.4, §7.5, §8.4)."""

from __future__ import annotations

import sqlite3
import time
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from session_sql import (
    ConcurrencyError,
    PermanentStoreError,
    SchemaVersionError,
    Session,
    SessionNotFoundError,
    SessionStore,
    fold_surface,
    interrupted_turn_closers,
    open_store,
)

from .store_builders import (
    Dump,
    begin_step,
    begin_turn,
    call_tool,
    capture,
    chunk,
    dump_tables,
    end_turn,
    event_rows,
    refused,
    reply,
    say,
    session_row,
    surface_table,
    tables,
    tool_turn,
    tool_turn_log,
    view,
    wires,
)


def without_session(store: SessionStore, dump: Dump, session_id: str) -> Dump:
    """``dump`` (from ``dump_tables``) without the rows of ``session_id``: its ``sessions`` row
    and the ``events`` and ``surface`` rows that carry its ``session_key``."""
    t = tables(store)
    columns = {table.name: [c.name for c in table.c] for table in (t.sessions, t.events, t.surface)}
    sessions = columns["sessions"]
    key, ident = sessions.index("session_key"), sessions.index("id")
    keys = {row[key] for row in dump["sessions"] if row[ident] == session_id}
    assert keys, f"no session {session_id!r} in the dump"
    return {
        name: [row for row in rows if row[columns[name].index("session_key")] not in keys]
        for name, rows in dump.items()
    }


def assert_verified(store: SessionStore, *session_ids: str) -> None:
    for sid in session_ids:
        report = store.verify(sid)
        assert report.ok, (sid, report.problems)


# -- open_session -----------------------------------------------------------------------------


def test_open_session_writes_nothing_and_matches_the_writer(store):
    writer = store.create_session("s1", seed=tool_turn_log())
    tool_turn(writer, 2, close=False)
    before = dump_tables(store)
    handle = store.open_session("s1")
    assert dump_tables(store) == before
    assert view(handle) == view(writer)
    assert handle.first_live_seq == writer.seq  # the stored length at open time
    assert handle.header == writer.header
    assert handle.inherited_event_count == 0


def test_open_session_without_resume_never_adds_a_marker(store):
    writer = store.create_session("s1")
    say(writer)
    before = dump_tables(store)
    for _ in range(2):
        assert store.open_session("s1").seq == 1
    assert dump_tables(store) == before


@pytest.mark.parametrize("ending", ["empty", "marker"])
def test_resume_adds_no_marker_to_an_empty_or_marked_log(store, ending):
    if ending == "empty":
        store.create_session("s1")
    else:
        store.create_session("s1", seed=tool_turn_log())  # ends with its marker
    before = dump_tables(store)
    handle = store.open_session("s1", resume=True)
    assert dump_tables(store) == before
    assert handle.first_live_seq == handle.seq


def test_resume_appends_the_marker_durably_once(store):
    writer = store.create_session("s1")
    tool_turn(writer)
    length = writer.seq
    handle = store.open_session("s1", resume=True)
    assert handle.seq == length + 1
    marker = handle.events[-1]
    assert (marker.type, marker.seq, marker.data) == ("session/end-seed", length, {})
    assert wires(store.events("s1", from_seq=length)) == [marker.to_json()]
    # SPEC §8.4: the handle's first_live_seq is the stored length at open time; the marker,
    # like the one Session(seed=...) appends (§7.1), is the first live event.
    assert handle.first_live_seq == length
    before = dump_tables(store)
    again = store.open_session("s1", resume=True)  # reopening an untouched session
    assert dump_tables(store) == before
    assert view(again) == view(handle)
    assert_verified(store, "s1")


def test_resume_of_a_stale_writer_is_a_concurrency_problem_for_the_writer(store):
    writer = store.create_session("s1")
    say(writer)
    store.open_session("s1", resume=True)
    with pytest.raises(ConcurrencyError):
        say(writer)
    writer.refresh()
    say(writer)
    assert_verified(store, "s1")


# -- load_session -----------------------------------------------------------------------------


def test_load_session_replays_with_an_in_memory_marker(store):
    writer = store.create_session("s1")
    tool_turn(writer)
    a = say(writer, "extra")
    before = dump_tables(store)
    loaded = store.load_session("s1")
    assert dump_tables(store) == before
    assert type(loaded) is Session
    fresh = Session(seed=wires(writer.events), header=writer.header)
    assert wires(loaded.events[:-1]) == wires(fresh.events[:-1]) == wires(writer.events)
    assert loaded.events[-1].type == fresh.events[-1].type == "session/end-seed"
    assert loaded.seq == writer.seq + 1
    assert loaded.first_live_seq == writer.seq
    assert loaded.surface.nodes == writer.surface.nodes
    assert loaded.messages() == writer.messages() == store.messages("s1")
    loaded.append("user/message", writer.events[a].data, surface_op="append")  # detached
    assert dump_tables(store) == before


# -- fork_session -----------------------------------------------------------------------------


def test_fork_of_a_closed_log_is_the_parent_plus_the_marker(store):
    parent = store.create_session("p")
    tool_turn(parent)
    before = dump_tables(store)
    child = store.fork_session("p", child_id="c")
    after = dump_tables(store)
    assert without_session(store, after, "c") == before  # only the child's rows were added
    stored = wires(store.events("c"))
    assert stored[:-1] == wires(parent.events)
    assert stored[-1]["type"] == "session/end-seed"
    assert stored[-1]["data"] == {"inherited": True}
    assert child.seq == parent.seq + 1 == child.first_live_seq
    assert child.inherited_event_count == parent.seq
    assert child.header["parentSession"] == "p"
    assert child.header["isSeeded"] is True
    row = session_row(store, "c")
    assert (row.parent_session, row.inherited_event_count) == ("p", parent.seq)
    assert surface_table(store, "c") == surface_table(store, "p")
    assert store.messages("c") == store.messages("p")
    assert_verified(store, "p", "c")


def test_fork_inside_an_open_turn_closes_it(store):
    parent = store.create_session("p")
    begin_turn(parent)
    say(parent)
    begin_step(parent)
    chunk(parent)
    reply(parent, "two calls", tool_calls=["c1", "c2"])
    boundary = call = call_tool(parent, "c1")
    later = say(parent, "after the boundary")
    child = store.fork_session("p", boundary=boundary, child_id="c")
    stored = list(store.events("c"))
    assert wires(stored[: boundary + 1]) == wires(parent.events[: boundary + 1])
    marker = stored[boundary + 1]
    assert (marker.type, marker.data) == ("session/end-seed", {"inherited": True})
    closers = stored[boundary + 2 :]
    assert [e.type for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert [e.data["error"]["code"] for e in closers[:2]] == [
        "TOOL_OUTCOME_UNKNOWN",
        "TOOL_NOT_STARTED",
    ]
    assert closers[0].source_event_seqs == (call,)
    assert closers[-1].data["reason"] == {"kind": "forked"}
    assert child.seq == len(stored) == child.first_live_seq
    assert child.inherited_event_count == boundary + 1
    assert later not in store.surface("c")
    assert store.surface("c") == fold_surface(stored).nodes
    assert interrupted_turn_closers(stored) == []
    assert_verified(store, "p", "c")


def test_a_fork_is_an_ordinary_writable_session(store):
    parent = store.create_session("p", seed=tool_turn_log())
    child = store.fork_session("p", boundary=5)
    tool_turn(child, 2)
    assert store.open_session(child.id).seq == child.seq
    assert [info.id for info in store.list_sessions(parent="p")] == [child.id]
    assert parent.seq == store.open_session("p").seq
    assert_verified(store, "p", child.id)


# -- repair -----------------------------------------------------------------------------------


def test_repair_closes_an_interrupted_turn(store):
    writer = store.create_session("s1")
    tool_turn(writer)
    begin_turn(writer, 2)
    say(writer)
    begin_step(writer, 2)
    reply(writer, "calling", turn=2, tool_calls=["x1"])
    call = call_tool(writer, "x1", turn=2)
    length = writer.seq
    closers = store.repair("s1")
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]
    assert [e.seq for e in closers] == list(range(length, length + 3))
    assert closers[0].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert closers[0].source_event_seqs == (call,)
    assert closers[-1].data["reason"] == {"kind": "interrupted"}
    assert {e.time for e in closers} == {writer.events[-1].time}
    assert wires(store.events("s1", from_seq=length)) == wires(closers)
    assert interrupted_turn_closers(list(store.events("s1"))) == []
    assert_verified(store, "s1")
    before = dump_tables(store)
    assert store.repair("s1") == []  # nothing left to close
    assert dump_tables(store) == before


def test_repair_of_a_balanced_log_writes_nothing(store):
    writer = store.create_session("s1", seed=tool_turn_log())
    begin_turn(writer, 2)
    end_turn(writer, 2)
    before = dump_tables(store)
    assert store.repair("s1") == []
    assert store.repair("s1") == []
    assert dump_tables(store) == before
    empty = store.create_session("empty")
    assert store.repair("empty") == []
    assert capture(store.open_session("empty")).seq == empty.seq == 0


# -- delete_session ---------------------------------------------------------------------------


def test_delete_cascades_to_events_and_surface_only_of_that_session(store):
    keep = store.create_session("keep", seed=tool_turn_log())
    store.create_session("gone", seed=tool_turn_log(2))
    child = store.fork_session("gone", child_id="child")
    kept_rows = without_session(store, dump_tables(store), "gone")
    store.delete_session("gone")
    assert dump_tables(store) == kept_rows
    assert event_rows(store, "gone") == [] and surface_table(store, "gone") == []
    assert {info.id for info in store.list_sessions()} == {keep.id, child.id}
    assert_verified(store, "keep", "child")  # a child outlives its parent
    again = store.create_session("gone")  # the id is free again
    say(again)
    assert [e.seq for e in store.events("gone")] == [0]


RECREATED = r"was deleted \(and recreated\) since this handle opened it"


def test_a_handle_on_a_recreated_session_refuses_to_append(backend, tmp_path):
    """Exported, deleted and imported back: every column but the incarnation and the
    session_key is equal (both are new for each creation; a key is never reused)."""
    with open_store(backend.url, schema=backend.schema, clock=lambda: 1_000) as store:
        old = store.create_session("s")
        say(old)
        store.export_jsonl("s", tmp_path / "s.jsonl")
        row = session_row(store, "s")
        store.delete_session("s")
        store.import_jsonl(tmp_path / "s.jsonl")
        again = session_row(store, "s")
        assert again.incarnation != row.incarnation
        assert again.session_key != row.session_key
        fresh = {"incarnation": 0, "session_key": 0}
        assert {**again._asdict(), **fresh} == {**row._asdict(), **fresh}
        with refused(store, SessionNotFoundError, old, match=RECREATED):
            say(old)
        with refused(store, SessionNotFoundError, old, match=RECREATED):
            old.refresh()


def test_refresh_refuses_the_events_of_a_recreated_session(backend):
    with open_store(backend.url, schema=backend.schema, clock=lambda: 1_000) as store:
        old = store.create_session("s")
        say(old)
        store.delete_session("s")
        new = store.create_session("s")
        say(new)
        say(new, "the newcomer's")
        with refused(store, SessionNotFoundError, old, match=RECREATED):
            old.refresh()
        with refused(store, SessionNotFoundError, old, match=RECREATED):
            say(old)
        assert [e.seq for e in store.events("s")] == [e.seq for e in new.events]


def test_a_fork_and_a_recreated_session_have_their_own_incarnation(store):
    first = store.create_session("s")
    say(first)
    child = store.fork_session("s", child_id="child")
    store.delete_session("s")
    store.create_session("s")
    rows = [session_row(store, first.id), session_row(store, child.id)]
    assert rows[0].incarnation != rows[1].incarnation
    assert first._incarnation not in {r.incarnation for r in rows}


# -- open_store and close ---------------------------------------------------------------------


def test_close_releases_every_connection(backend, request):
    app = f"close-{uuid.uuid4().hex[:12]}"
    named = backend.has("server_sessions")
    options = {"connect_args": {"application_name": app}} if named else {}

    def server_connections() -> int:
        admin = create_engine(backend.url, poolclass=NullPool)  # the backend's own server
        query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :app")
        try:
            with admin.connect() as conn:
                return int(conn.execute(query, {"app": app}).scalar_one())
        finally:
            admin.dispose()

    with open_store(backend.url, schema=backend.schema, **options) as store:
        say(store.create_session("s1"))
        assert [e.seq for e in store.events("s1")] == [0]
        assert store.engine.pool.checkedin() >= 1
        if named:
            assert server_connections() >= 1
    assert store.engine.pool.checkedin() == store.engine.pool.checkedout() == 0
    if named:
        deadline = time.monotonic() + 5
        while server_connections() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server_connections() == 0


def test_open_store_refuses_a_schema_name_that_is_not_an_identifier(backend):
    for schema in ("", "two words", 'x"; DROP TABLE sessions; --', "a" * 64, "1abc"):
        with pytest.raises(ValueError, match="plain identifier"):
            open_store(backend.url, schema=schema)


# --------------------------------------------------------------------------------------------
# Opening: only an empty database is initialised, and only when asked to create


def test_create_false_opens_an_existing_store_and_creates_nothing_otherwise(backend, tmp_path):
    with pytest.raises(PermanentStoreError, match=r"^no store at .*session-sql init"):
        open_store(backend.url, schema=backend.schema, create=False)
    if backend.table_schema is None:
        assert list(tmp_path.iterdir()) == []  # not even the SQLite file
    open_store(backend.url, schema=backend.schema).close()  # create=True by default
    with open_store(backend.url, schema=backend.schema, create=False) as store:
        store.create_session("s1")
        assert [info.id for info in store.list_sessions()] == ["s1"]


def test_another_applications_sqlite_file_is_refused_byte_for_byte_unchanged(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.close()
    before = path.read_bytes()
    for create in (True, False):
        with pytest.raises(SchemaVersionError, match=r"no session_sql tables.*notes"):
            open_store(f"sqlite:///{path}", create=create)
    assert path.read_bytes() == before  # no tables added, and not switched to WAL either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_an_opened_sqlite_store_is_in_wal_mode(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store, store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_create_false_accepts_an_sqlite_uri_filename(tmp_path):
    path = tmp_path / "s.db"
    open_store(f"sqlite:///{path}").close()
    with open_store(f"sqlite:///file:{path}?mode=ro&uri=true", create=False) as store:
        assert store.list_sessions() == []
    with pytest.raises(PermanentStoreError, match="no store at"):
        open_store(f"sqlite:///file:{tmp_path / 'nope.db'}?mode=ro&uri=true", create=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db", "s.db-shm", "s.db-wal"]
