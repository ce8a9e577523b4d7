"""Database faults: a lost server connection, a restart, a read-only or locked file, hand edits.

* PostgreSQL: a backend terminated under an in-flight append, an append behind a stalled
  transaction (lock_timeout_ms), and a whole-server restart (of a private cluster) under a
  writer. The append in flight fails with ``StoreError`` and leaves nothing partial; the dead
  pooled connection is discarded, never handed out again; the next append succeeds.
* SQLite: a file opened read-only (or made immutable), and a write lock held by another
  connection for shorter and for longer than the busy timeout: success while within the
  timeout, a clear ``StoreError`` beyond it, and no partial state either way.
* Both: a database edited by hand so that the ``surface`` table or the session row disagrees
  with the log: ``verify`` names it, ``open_session`` refuses the session, and a handle opened
  before the edit refuses to append.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import threading
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from session_sql import (
    ConcurrencyError,
    CorruptSessionError,
    Replace,
    SessionFormatUnsupportedError,
    SessionSQLError,
    StoreError,
    TransientStoreError,
    open_store,
)

from .reliability_builders import assert_store_consistent, user_message


def _say(handle: Any, mark: str) -> Any:
    return handle.append("user/message", user_message(mark, id=mark), surface_op="append")


def _marks(store: Any, session_id: str) -> list[str]:
    return [e.data["id"] for e in store.events(session_id) if e.type == "user/message"]


# --------------------------------------------------------------------------------------------
# PostgreSQL: a connection lost under an append


def _wait_for_lock_waiter(admin: Any, application: str, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    query = text(
        "SELECT pid FROM pg_stat_activity WHERE application_name = :a AND wait_event_type = 'Lock'"
    )
    while time.monotonic() < deadline:
        with admin.connect() as conn:
            pids = conn.execute(query, {"a": application}).scalars().all()
        if pids:
            return int(pids[0])
        time.sleep(0.01)
    raise AssertionError("the append never blocked on the row lock")


@pytest.mark.postgresql
@pytest.mark.parametrize("pre_ping", [True, False], ids=["pre-ping", "no-pre-ping"])
def test_a_backend_killed_under_an_append_fails_it_cleanly_and_the_pool_recovers(
    pg_backend, postgres_admin, caplog, pre_ping
):
    """The append blocks on a row lock held elsewhere; its server backend is then terminated."""
    application = f"victim-{uuid.uuid4().hex[:8]}"
    store = open_store(
        pg_backend.url,
        schema=pg_backend.schema,
        pool_size=1,  # one pooled connection: the next append would get the dead one
        pool_pre_ping=pre_ping,
        lock_timeout_ms=0,  # wait on the row lock until the backend is terminated
        connect_args={"application_name": application},
    )
    locker = create_engine(pg_backend.url, poolclass=NullPool)
    try:
        handle = store.create_session("victim")
        _say(handle, "before")
        outcome: dict[str, BaseException | None] = {}

        def append_in_flight() -> None:
            try:
                _say(handle, "in-flight")
                outcome["error"] = None
            except BaseException as exc:
                outcome["error"] = exc

        caplog.set_level(logging.WARNING)
        with locker.connect() as lock_conn, lock_conn.begin() as lock_tx:
            lock_conn.execute(
                text(f'SELECT 1 FROM "{pg_backend.schema}".sessions WHERE id = :i FOR UPDATE'),
                {"i": "victim"},
            )
            writer = threading.Thread(target=append_in_flight)
            writer.start()
            pid = _wait_for_lock_waiter(postgres_admin, application)
            with postgres_admin.connect() as conn:
                conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            writer.join(30)
            lock_tx.rollback()

        error = outcome["error"]
        assert isinstance(error, TransientStoreError), f"in-flight append: {error!r}"
        assert "cannot reach the PostgreSQL server" in str(error)
        # Nothing partial, in the database or in the handle.
        assert handle.seq == 1
        assert _marks(store, "victim") == ["before"]
        assert_store_consistent(store, "victim")
        # The next appends get a fresh connection: the dead one was discarded, not pooled.
        _say(handle, "after-1")
        _say(handle, "after-2")
        assert _marks(store, "victim") == ["before", "after-1", "after-2"]
        assert_store_consistent(store, "victim")
        pool_errors = [r for r in caplog.records if r.name.startswith("sqlalchemy.pool")]
        assert pool_errors == [], "the dead connection went back to the pool"
    finally:
        store.close()
        locker.dispose()


@pytest.mark.postgresql
def test_an_append_behind_a_stalled_transaction_fails_after_the_lock_timeout(pg_backend):
    """A transaction holding the session row does not make an append wait forever."""
    store = open_store(pg_backend.url, schema=pg_backend.schema, lock_timeout_ms=100)
    locker = create_engine(pg_backend.url, poolclass=NullPool)
    try:
        handle = store.create_session("locked")
        _say(handle, "before")
        with locker.connect() as lock_conn, lock_conn.begin():
            lock_conn.execute(
                text(f'SELECT 1 FROM "{pg_backend.schema}".sessions WHERE id = :i FOR UPDATE'),
                {"i": "locked"},
            )
            with pytest.raises(TransientStoreError) as info:
                _say(handle, "blocked")
        message = str(info.value)
        assert "session 'locked' is locked by another transaction" in message
        assert "lock_timeout_ms" in message
        assert info.value.session_id == "locked"
        assert handle.seq == 1
        assert _marks(store, "locked") == ["before"]
        assert_store_consistent(store, "locked")
        _say(handle, "after")  # the blocker is gone: the same handle writes again
        assert _marks(store, "locked") == ["before", "after"]
        assert_store_consistent(store, "locked")
    finally:
        store.close()
        locker.dispose()


@pytest.mark.postgresql
def test_follow_connects_like_the_store_and_leaves_no_listener_behind(pg_backend, postgres_admin):
    """The LISTEN connection gets the store's connect_args (TLS settings, application_name)."""
    application = f"x-follow-probe-{uuid.uuid4().hex[:8]}"
    store = open_store(
        pg_backend.url, schema=pg_backend.schema, connect_args={"application_name": application}
    )
    listening = text(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :a "
        "AND query LIKE 'LISTEN %'"
    )

    def listeners() -> int:
        with postgres_admin.connect() as conn:
            return int(conn.execute(listening, {"a": application}).scalar_one())

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 30
        while listeners() != count:
            assert time.monotonic() < deadline, f"expected {count} listener(s)"
            time.sleep(0.01)

    try:
        handle = store.create_session("followed")
        _say(handle, "one")
        follower = store.follow("followed", timeout=30)
        assert next(follower).data["id"] == "one"  # the listener is open from here on
        wait_for(1)
        follower.close()
        wait_for(0)  # closed, not parked in the pool with its LISTEN
        _say(handle, "two")  # the pool still works
        assert _marks(store, "followed") == ["one", "two"]
    finally:
        store.close()


@pytest.mark.postgresql
@pytest.mark.slow
def test_a_server_restart_under_a_writer_fails_cleanly_and_writing_resumes(
    private_postgres, record_property
):
    """On a private cluster: restarting the shared test server would break other tests."""
    store = open_store(private_postgres.url, schema=private_postgres.schema)
    outcomes: list[tuple[str, str, str]] = []  # (mark, outcome, detail)
    stop = threading.Event()
    try:
        handle = store.create_session("restarted")

        def write() -> None:
            i = 0
            while not stop.is_set():
                mark = f"m{i}"
                i += 1
                try:
                    _say(handle, mark)
                    outcomes.append((mark, "ok", ""))
                except ConcurrencyError:
                    # The append before committed but its answer was lost: catch up, go on.
                    outcomes.append((mark, "conflict", ""))
                    handle.refresh()
                except StoreError as exc:
                    outcomes.append((mark, "store-error", str(exc)))
                    time.sleep(0.02)
                except BaseException as exc:
                    outcomes.append((mark, "raw", repr(exc)))
                    return

        def oks() -> int:
            return sum(1 for _, o, _ in outcomes if o == "ok")

        followed: list[int] = []
        follow_errors: list[str] = []

        def follow() -> None:
            """Follow the session; on an error, follow again from the last seq seen."""
            while not stop.is_set():
                try:
                    after = followed[-1] if followed else -1
                    for event in store.follow("restarted", after_seq=after, timeout=0.5):
                        followed.append(event.seq)
                except StoreError as exc:
                    follow_errors.append(str(exc))
                    time.sleep(0.05)
                except BaseException as exc:
                    follow_errors.append(f"raw {exc!r}")
                    return

        writer = threading.Thread(target=write)
        follower = threading.Thread(target=follow)
        writer.start()
        follower.start()
        try:
            deadline = time.monotonic() + 60
            while oks() < 20 and time.monotonic() < deadline and writer.is_alive():
                time.sleep(0.01)
            started = time.monotonic()
            private_postgres.restart()
            restart_seconds = time.monotonic() - started
            before = oks()
            deadline = time.monotonic() + 60
            while oks() < before + 20 and time.monotonic() < deadline and writer.is_alive():
                time.sleep(0.01)
            deadline = time.monotonic() + 30
            while len(followed) < handle.seq and time.monotonic() < deadline:
                time.sleep(0.01)  # let the follower catch up
        finally:
            stop.set()
            writer.join(60)
            follower.join(60)

        raw = [o for o in outcomes if o[1] == "raw"]
        assert raw == [], raw
        failures = [o for o in outcomes if o[1] == "store-error"]
        assert failures, "no append was in flight or attempted while the server was down"
        for _, _, detail in failures:
            assert "PostgreSQL" in detail, detail
        last_failure = max(i for i, o in enumerate(outcomes) if o[1] == "store-error")
        assert any(o[1] == "ok" for o in outcomes[last_failure:]), "writing did not resume"

        # The log: every acknowledged append exactly once, in order; nothing partial; a failed
        # append is either wholly there (it committed, its answer was lost) or wholly absent.
        stored = _marks(store, "restarted")
        attempted = [m for m, _, _ in outcomes]
        assert len(stored) == len(set(stored))
        assert stored == [m for m in attempted if m in set(stored)]
        acknowledged = {m for m, o, _ in outcomes if o == "ok"}
        assert acknowledged <= set(stored)
        assert set(stored) - acknowledged <= {m for m, o, _ in failures}
        log = assert_store_consistent(store, "restarted")
        # Following again from the last seq seen after each error: every event exactly once.
        assert [f for f in follow_errors if f.startswith("raw")] == []
        assert followed == [e.seq for e in log]
        figures = {
            "appends ok": len(acknowledged),
            "failed with StoreError": len(failures),
            "failed but committed": len(set(stored) - acknowledged),
            "conflicts after reconnect": sum(1 for o in outcomes if o[1] == "conflict"),
            "restart seconds": round(restart_seconds, 1),
            "follower errors (followed again)": len(follow_errors),
            "events followed": len(followed),
        }
        print(f"\npostgres restart under a writer: {figures}")
        for name, value in figures.items():
            record_property(name, value)
    finally:
        store.close()


# --------------------------------------------------------------------------------------------
# SQLite: read-only and locked files


def _seeded_sqlite(tmp_path: Any) -> tuple[str, Any]:
    path = tmp_path / "faults.db"
    url = f"sqlite:///{path}"
    with open_store(url) as store:
        handle = store.create_session("s")
        _say(handle, "one")
        handle.append("turn/start", {"turn": 1})  # left open, so repair has work to do
    return url, path


def _refusals(store: Any, handle: Any) -> dict[str, Any]:
    """Every write path, each expected to raise; returns what each raised."""
    calls = {
        "append": lambda: _say(handle, "two"),
        "append_many": lambda: handle.append_many([{"type": "todo/write", "data": {}}]),
        "replace": lambda: handle.append(
            "user/message",
            user_message("sum", id="sum"),
            surface_op=Replace(0, 0),
            source_event_seqs=[0],
        ),
        "create": lambda: store.create_session("t"),
        "fork": lambda: store.fork_session("s", child_id="child"),
        "repair": lambda: store.repair("s"),
        "resume": lambda: store.open_session("s", resume=True),
        "delete": lambda: store.delete_session("s"),
    }
    raised: dict[str, Any] = {}
    for name, call in calls.items():
        try:
            call()
        except SessionSQLError as exc:
            raised[name] = exc
        else:
            raised[name] = None
    return raised


def _unchanged(url: str, seq: int) -> None:
    with open_store(url) as store:
        assert [s.id for s in store.list_sessions()] == ["s"]
        log = assert_store_consistent(store, "s")
        assert len(log) == seq


@pytest.mark.parametrize("how", ["uri-mode-ro", "immutable-file"])
def test_read_only_sqlite_refuses_every_write_clearly_and_reads_still_work(tmp_path, how):
    url, path = _seeded_sqlite(tmp_path)
    if how == "uri-mode-ro":
        opened_as = f"sqlite:///file:{path}?mode=ro&uri=true"
    else:  # what a read-only mount or file looks like, even to root
        done = subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make the file immutable here: {done.stderr!r}")
        opened_as = url
    try:
        with open_store(opened_as) as store:
            handle = store.open_session("s")
            raised = _refusals(store, handle)
            assert {n: type(e).__name__ for n, e in raised.items()} == dict.fromkeys(
                raised, "PermanentStoreError"
            )
            assert all("read-only" in str(e) for e in raised.values()), raised
            assert handle.seq == 2
            # Reading needs no write access.
            assert store.surface("s") == (0,)
            assert len(store.load_session("s").events) == 3  # + the in-memory marker
            assert store.verify("s").ok
    finally:
        if how == "immutable-file":
            subprocess.run(["chattr", "-i", str(path)], check=True)
    _unchanged(url, 2)


def _hold_write_lock(path: str, held: threading.Event, release: threading.Event) -> None:
    """Another connection taking SQLite's write lock until ``release`` is set."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(60)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_a_lock_held_within_the_busy_timeout_is_waited_for(tmp_path):
    url, path = _seeded_sqlite(tmp_path)
    with open_store(url, busy_timeout_ms=10_000) as store:
        handle = store.open_session("s")
        held, release = threading.Event(), threading.Event()
        locker = threading.Thread(target=_hold_write_lock, args=(str(path), held, release))
        locker.start()
        held.wait(10)
        threading.Timer(1.0, release.set).start()
        started = time.monotonic()
        _say(handle, "waited")  # waits for the lock, and gets it: no 'database is locked'
        waited = time.monotonic() - started
        locker.join()
        assert waited >= 0.5
        assert _marks(store, "s") == ["one", "waited"]
        assert_store_consistent(store, "s")


def test_a_lock_held_beyond_the_busy_timeout_is_a_clear_error_with_no_partial_state(tmp_path):
    url, path = _seeded_sqlite(tmp_path)
    with open_store(url, busy_timeout_ms=200) as store:
        handle = store.open_session("s")
        held, release = threading.Event(), threading.Event()
        locker = threading.Thread(target=_hold_write_lock, args=(str(path), held, release))
        locker.start()
        try:
            held.wait(10)
            started = time.monotonic()
            raised = _refusals(store, handle)
            elapsed = time.monotonic() - started
            assert {n: type(e).__name__ for n, e in raised.items()} == dict.fromkeys(
                raised, "TransientStoreError"
            )
            assert all("database is locked" in str(e) for e in raised.values()), raised
            assert elapsed >= 0.2 * len(raised) * 0.9  # each waited out the busy timeout
            assert handle.seq == 2
            # Readers never wait for a writer (WAL).
            assert store.surface("s") == (0,)
            assert store.verify("s").ok
        finally:
            release.set()
            locker.join()
        _say(handle, "after")  # the lock is gone: the same handle writes again
        assert _marks(store, "s") == ["one", "after"]
        assert_store_consistent(store, "s")


# --------------------------------------------------------------------------------------------
# Hand edits


def _edits(backend: Any) -> dict[str, str]:
    q = backend.table_prefix
    # events and surface hold the session's key, looked up by its public id.
    key = f"(SELECT session_key FROM {q}sessions WHERE id = 'e')"
    where = f"WHERE session_key = {key}"
    return {
        "surface row deleted": f"DELETE FROM {q}surface {where} AND pos = 1",
        "surface row moved": f"UPDATE {q}surface SET pos = 10 {where} AND pos = 2",
        "surface row added": (
            f"INSERT INTO {q}surface (session_key, pos, event_seq) VALUES ({key}, 9, 3)"
        ),
        "surface rows reordered": f"UPDATE {q}surface SET pos = 100 - pos {where}",
        "surface names another event": f"UPDATE {q}surface SET event_seq = 3 {where} AND pos = 2",
        "event row past the head": (
            f"INSERT INTO {q}events (session_key, seq, type, time, data) "
            f"VALUES ({key}, 5, 'todo/write', 1, '{{}}')"
        ),
        "event surface op erased": f"UPDATE {q}events SET surface_op = NULL {where} AND seq = 1",
        "head_seq": f"UPDATE {q}sessions SET head_seq = 3 WHERE id = 'e'",
        "surface_next_pos": f"UPDATE {q}sessions SET surface_next_pos = 7 WHERE id = 'e'",
        "replace_generation": f"UPDATE {q}sessions SET replace_generation = 1 WHERE id = 'e'",
    }


ROW_EDITS = {"head_seq", "surface_next_pos", "replace_generation"}


@pytest.mark.parametrize("edit", list(_edits(type("B", (), {"table_prefix": ""})())))
def test_a_hand_edit_is_reported_and_nothing_is_built_on_it(backend, edit):
    with open_store(backend.url, schema=backend.schema) as store:
        handle = store.create_session("e")
        for mark in ("m0", "m1", "m2"):
            _say(handle, mark)
        handle.append("todo/write", {"not": "on the surface"})  # seq 3
        handle.append("user/message", user_message("m4", id="m4"), surface_op="append")
        assert store.verify("e").ok
        with store.engine.begin() as conn:
            conn.execute(text(_edits(backend)[edit]))

        report = store.verify("e")
        assert not report.ok
        assert report.problems
        with pytest.raises(CorruptSessionError):
            store.open_session("e")
        with pytest.raises(CorruptSessionError):
            store.repair("e")
        # A fork is written from the log, the one source of truth, so it is allowed.
        if edit in ROW_EDITS:
            # A handle opened before the edit: the conditional update checks the whole row.
            with pytest.raises((CorruptSessionError, ConcurrencyError)):
                _say(handle, "on top")
            assert handle.seq == 5
        assert not store.verify("e").ok  # and nothing was written on top of it


# --------------------------------------------------------------------------------------------
# A misbehaving peer: garbage in the rows


def _garbage(backend: Any) -> dict[str, str]:
    q = backend.table_prefix
    on_seq_1 = (
        f"WHERE session_key = (SELECT session_key FROM {q}sessions WHERE id = 'g') AND seq = 1"
    )
    deep = "[" * 3000 + "]" * 3000
    return {
        "data not JSON": f"UPDATE {q}events SET data = 'nope' {on_seq_1}",
        "data NaN": f"UPDATE {q}events SET data = 'NaN' {on_seq_1}",
        "data lone surrogate": f"UPDATE {q}events SET data = '\"\\ud800\"' {on_seq_1}",
        "data beyond safe ints": f"UPDATE {q}events SET data = '12345678901234567890' {on_seq_1}",
        "data nested too deep": f"UPDATE {q}events SET data = '{deep}' {on_seq_1}",
        "data not a message": f"UPDATE {q}events SET data = '{{\"id\": 5}}' {on_seq_1}",
        "type malformed": f"UPDATE {q}events SET type = 'bad type!' {on_seq_1}",
        "type unknown": f"UPDATE {q}events SET type = 'x/unknown' {on_seq_1}",
        "surface_op garbage": f"UPDATE {q}events SET surface_op = '{{\"op\":' {on_seq_1}",
        "sources garbage": f"UPDATE {q}events SET source_event_seqs = '[1, \"x\"]' {on_seq_1}",
        "ignorable false": f"UPDATE {q}events SET ignorable = false {on_seq_1}",
        "time beyond safe ints": f"UPDATE {q}events SET time = 9223372036854775807 {on_seq_1}",
        "header not JSON": f"UPDATE {q}sessions SET header = 'nope'",
        "header not an object": f"UPDATE {q}sessions SET header = '\"nope\"'",
        "header nested too deep": f"UPDATE {q}sessions SET header = '{deep}'",
        "head_seq beyond the log": f"UPDATE {q}sessions SET head_seq = 9223372036854775807",
        # Not the writer's business (the header and the log are the truth), but verify's:
        "inherited_event_count": f"UPDATE {q}sessions SET inherited_event_count = 1",
        "format_version": f"UPDATE {q}sessions SET format_version = 7",
    }


# Its json type checks the syntax only: a lone surrogate escape is stored, as on SQLite.
REFUSED_BY_POSTGRES = {"data not JSON", "data NaN", "header not JSON"}
ONLY_VERIFY = {"inherited_event_count", "format_version"}


@pytest.mark.parametrize("edit", sorted(_garbage(type("B", (), {"table_prefix": ""})())))
def test_garbage_rows_are_corruption_never_a_raw_exception(backend, edit, tmp_path):
    with open_store(backend.url, schema=backend.schema) as store:
        handle = store.create_session("g")
        _say(handle, "m0")
        _say(handle, "m1")
        if backend.has("json_type_check") and edit in REFUSED_BY_POSTGRES:
            # Not JSON to PostgreSQL's json type: the peer's write fails, the session is untouched.
            with pytest.raises(DBAPIError), store.engine.begin() as conn:
                conn.execute(text(_garbage(backend)[edit]))
            assert store.verify("g").ok
            return
        with store.engine.begin() as conn:
            conn.execute(text(_garbage(backend)[edit]))

        report = store.verify("g")
        assert not report.ok and report.problems
        if edit not in ONLY_VERIFY:
            with pytest.raises((CorruptSessionError, SessionFormatUnsupportedError)):
                store.open_session("g")
        readers = {
            "open_session": lambda: store.open_session("g"),
            "load_session": lambda: store.load_session("g"),
            "messages": lambda: store.messages("g"),
            "surface": lambda: store.surface("g"),
            "events": lambda: list(store.events("g")),
            "follow": lambda: list(store.follow("g", timeout=0)),
            "list_sessions": store.list_sessions,
            "export_jsonl": lambda: store.export_jsonl("g", tmp_path / "g.jsonl"),
            "fork_session": lambda: store.fork_session("g", child_id="child"),
            "refresh": handle.refresh,
        }
        for name, read in readers.items():
            try:
                read()
            except SessionSQLError:
                pass
            except BaseException as exc:
                raise AssertionError(f"{name}: raw {type(exc).__name__}: {exc}") from exc


def test_a_fork_of_a_fork_keeps_its_inherited_prefix_through_jsonl(backend, tmp_path):
    with open_store(backend.url, schema=backend.schema) as store:
        parent = store.create_session("p")
        for mark in ("a", "b", "c"):
            _say(parent, mark)
        child = store.fork_session("p", boundary=1, child_id="c")  # inherits p's 0..1
        _say(child, "d")
        grandchild = store.fork_session("c", boundary=3, child_id="g")  # two inherited cuts
        assert grandchild.inherited_event_count == 4
        store.export_jsonl("g", tmp_path / "g.jsonl")
        store.delete_session("g")
        store.import_jsonl(tmp_path / "g.jsonl")
        assert store.load_session("g").inherited_event_count == 4
        assert store.verify("g").ok
