"""The quick SQLite reader of ``ls``, ``show`` and ``tail`` (``backends.sqlite.quick``)
against the store.

The quick reader exists on SQLite only (it is the command line's way round importing
SQLAlchemy), so these tests run there alone: every read is made through both readers, and the
answers, or the errors, must be the same. Where the quick reader cannot vouch for a file it
must decline (``None``), so that the full store's gate speaks.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_sql import SessionNotFoundError, SessionSQLError, SessionStore, StoreError, open_store
from session_sql._store.backends.sqlite import quick
from session_sql._store.backends.sqlite.quick import QuickReader, open_quick, schema_digest
from session_sql._store.schema import DEFAULT_SCHEMA, meta_rows
from session_sql.cli.demo import record_demo

from ..builders import say, tool_turn, user_message

USERS = ("alice", "bob", None)
LABELS = ({}, {"team": "a"}, {"team": "b", "env": "prod"}, {"env": "prod"}, {"a.b:c/d-e_f": "x"})
IDS = ("abc-1", "abc-2", "abd", "ABC", "a%b", "a_b", "zz-long")


def _ticking_clock() -> Callable[[], int]:
    """Milliseconds that repeat (three events per tick), so that ordering ties by id."""
    counter = itertools.count()
    return lambda: 1_700_000_000_000 + next(counter) // 3


def build_store(path: Path) -> str:
    """A store with what the reads tell apart: users, labels, titles, forks, equal times,
    look-alike ids, a compaction, tool calls, and a log longer than a page."""
    url = f"sqlite:///{path}"
    record_demo(url)
    store = open_store(url, clock=_ticking_clock())
    try:
        for i, sid in enumerate(IDS):
            session = store.create_session(
                sid,
                user_id=USERS[i % len(USERS)],
                labels=LABELS[i % len(LABELS)],
                title=None if i % 2 else f"title {i}",
            )
            for n in range(i + 1):
                say(session, f"m{n}")
            if i % 3 == 0:
                tool_turn(session)
        for i in range(12):
            store.create_session(f"s{i:02d}", user_id=USERS[i % 3], labels=LABELS[i % 5])
        store.fork_session("abc-1", child_id="abc-1-fork")
        store.fork_session("abc-1", child_id="fork-2")
        long = store.create_session("long")
        long.append_many(
            [
                {
                    "type": "user/message",
                    "data": user_message(str(n), id=f"u{n}"),
                    "surface_op": "append",
                }
                for n in range(2345)
            ]
        )
    finally:
        store.close()
    return url


@pytest.fixture(scope="module")
def readers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SessionStore, QuickReader]]:
    url = build_store(tmp_path_factory.mktemp("quick") / "sessions.db")
    store = open_store(url, create=False)
    reader = open_quick(url)
    assert reader is not None
    yield store, reader
    reader.close()
    store.close()


def outcome(read: Callable[[], Any]) -> tuple[Any, ...]:
    """What a read gives: its value (an iterator drained), or its error's type and text."""
    try:
        value = read()
        if isinstance(value, Iterator):
            value = list(value)
        return ("ok", value)
    except SessionSQLError as exc:
        return ("error", type(exc), str(exc))


def assert_same(readers: tuple[SessionStore, QuickReader], name: str, *args: Any, **kw: Any):
    store, reader = readers
    expected = outcome(lambda: getattr(store, name)(*args, **kw))
    assert outcome(lambda: getattr(reader, name)(*args, **kw)) == expected, (name, args, kw)
    return expected


def all_ids(store: SessionStore) -> list[str]:
    return [info.id for info in store.iter_sessions()]


def test_every_session_reads_the_same(readers):
    store, _ = readers
    ids = all_ids(store)
    assert len(ids) > 20
    for sid in ids:
        assert assert_same(readers, "head_seq", sid)[0] == "ok"
        assert assert_same(readers, "events", sid)[0] == "ok"
        assert assert_same(readers, "surface", sid)[0] == "ok"
        assert assert_same(readers, "messages", sid)[0] == "ok"


def test_the_demo_session_with_its_compaction_reads_the_same(readers):
    store, _ = readers
    demo = [i for i in all_ids(store) if i not in IDS and len(i) == 32]
    assert demo
    for sid in demo:
        _, events = assert_same(readers, "events", sid)
        assert any(e.surface_op is not None and e.surface_op != "append" for e in events)
        assert assert_same(readers, "messages", sid)[1]


@pytest.mark.parametrize(
    ("from_seq", "to_seq"),
    [
        (0, None),
        (5, None),
        (999, 1001),
        (1000, 2000),
        (2344, None),
        (3000, None),
        (7, 3),
        (0, 0),
        (-1, None),
        (0, -1),
        (True, None),
        ("1", None),
        (2**63, None),
    ],
)
def test_ranges_of_a_long_log_read_the_same(readers, from_seq, to_seq):
    assert_same(readers, "events", "long", from_seq=from_seq, to_seq=to_seq)


def test_the_long_log_is_whole_across_pages(readers):
    _, reader = readers
    seqs = [e.seq for e in reader.events("long")]
    assert seqs == list(range(len(seqs))) and len(seqs) > 2 * quick.STREAM_BATCH


@pytest.mark.parametrize("given_id", ["missing", "", "abc", "x" * 300, 7, None, "a\x00b"])
def test_missing_and_invalid_ids_fail_the_same(readers, given_id):
    for name in ("head_seq", "events", "surface", "messages"):
        kind, *_ = assert_same(readers, name, given_id)
        assert kind == "error"


id_prefixes = st.one_of(
    st.none(),
    st.sampled_from(["", "a", "ab", "abc", "abc-", "A", "a%", "a_", "s0", "zz", "nope", "\x00"]),
    st.text(max_size=4),
)
listing_args = st.fixed_dictionaries(
    {},
    optional={
        "limit": st.one_of(st.integers(-1, 40), st.just(2**70), st.just(True)),
        "order": st.sampled_from(["updated", "created", "other"]),
        "reverse": st.one_of(st.booleans(), st.just(1)),
        "id_prefix": id_prefixes,
        "user_id": st.sampled_from([None, "alice", "bob", "carol", "", "a\nb"]),
        "labels": st.sampled_from([None, {}, *LABELS, {"team": "c"}, {"bad name": "x"}, {"t": 1}]),
        "parent": st.sampled_from([None, "abc-1", "abd", "missing", "", "bad\x00"]),
        "created_after": st.one_of(st.none(), st.integers(1_699_999_999_990, 1_700_000_000_100)),
        "created_before": st.one_of(st.none(), st.integers(1_699_999_999_990, 1_700_000_000_100)),
        "after": st.sampled_from([None, "abc-1", "s05", "long", "missing", ""]),
    },
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=listing_args)
def test_listings_and_counts_are_the_same(readers, args):
    assert_same(readers, "list_sessions", **args)
    counted = {k: v for k, v in args.items() if k not in ("limit", "order", "reverse", "after")}
    assert_same(readers, "count_sessions", **counted)


def test_a_listing_pages_through_every_session_in_both_orders(readers):
    store, reader = readers
    for order, reverse in itertools.product(("updated", "created"), (False, True)):
        seen, after = [], None
        while True:
            page = reader.list_sessions(limit=4, after=after, order=order, reverse=reverse)
            assert page == store.list_sessions(limit=4, after=after, order=order, reverse=reverse)
            seen += [info.id for info in page]
            if len(page) < 4:
                break
            after = page[-1]
        assert sorted(seen) == sorted(all_ids(store)) and len(set(seen)) == len(seen)


def test_the_catalog_is_the_stores(readers):
    store, reader = readers
    assert reader.catalog.item_types == store.catalog.item_types


# -- what the quick reader refuses to vouch for -------------------------------------------


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "sessions.db"
    store = open_store(f"sqlite:///{path}")
    say(store.create_session("one"), "hi")
    store.close()
    return path


def test_a_fresh_store_matches_the_recorded_schema(store_file):
    conn = sqlite3.connect(store_file)
    try:
        assert schema_digest(conn) == quick.SCHEMA_DIGEST, "schema changed: update SCHEMA_DIGEST"
    finally:
        conn.close()
    assert {row["key"]: row["value"] for row in meta_rows()} == quick.META_ROWS
    assert quick.DEFAULT_SCHEMA == DEFAULT_SCHEMA


def test_planner_statistics_do_not_change_the_schema(store_file):
    conn = sqlite3.connect(store_file)
    conn.execute("ANALYZE")
    conn.commit()
    conn.close()
    reader = open_quick(f"sqlite:///{store_file}")
    assert reader is not None
    reader.close()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///{path}?mode=ro",
        "sqlite:///file:{path}",
        "sqlite+aiosqlite:///{path}",
        "postgresql://postgres@127.0.0.1/test",
        "sqlite:///{path}.missing",
    ],
)
def test_other_urls_and_missing_files_are_left_to_the_store(store_file, url):
    assert open_quick(url.format(path=store_file)) is None


def test_a_tenant_or_another_schema_name_is_left_to_the_store(store_file):
    url = f"sqlite:///{store_file}"
    assert open_quick(url, tenant="acme") is None
    assert open_quick(url, schema="other") is None
    reader = open_quick(url, schema=DEFAULT_SCHEMA, tenant="")
    assert reader is not None
    reader.close()


@pytest.mark.parametrize(
    "change",
    [
        "CREATE INDEX ix_mine ON sessions (title)",
        "CREATE VIEW mine AS SELECT id FROM sessions",
        "DROP INDEX ix_events_turn_bounds",
        "UPDATE session_sql_meta SET value = '4' WHERE key = 'schema_version'",
        "INSERT INTO session_sql_meta VALUES ('extra', 'x')",
        "DROP VIEW turns",
    ],
)
def test_a_database_not_exactly_this_builds_is_left_to_the_store(store_file, change):
    conn = sqlite3.connect(store_file)
    conn.execute(change)
    conn.commit()
    conn.close()
    assert open_quick(f"sqlite:///{store_file}") is None


def test_files_that_are_not_stores_are_left_to_the_store(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database")
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE things (x)")
    conn.close()
    for path in (text, empty, other, tmp_path):
        assert open_quick(f"sqlite:///{path}") is None, path


def test_quick_reads_write_nothing(store_file):
    def digest() -> list[str]:
        """The database and its write-ahead log (absent and empty alike: a reader of a WAL
        database may leave an empty log behind, as SQLite's own readers do)."""
        return [
            hashlib.sha256(p.read_bytes() if p.exists() else b"").hexdigest()
            for p in (store_file, Path(f"{store_file}-wal"))
        ]

    before = digest()
    reader = open_quick(f"sqlite:///{store_file}")
    assert reader is not None
    try:
        assert [i.id for i in reader.list_sessions()] == ["one"]
        assert len(list(reader.events("one"))) == reader.head_seq("one") + 1
        assert reader.messages("one")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader._conn.execute("DELETE FROM sessions")
    finally:
        reader.close()
    assert digest() == before


def test_corrupt_rows_fail_the_same(tmp_path):
    path = tmp_path / "sessions.db"
    url = f"sqlite:///{path}"
    store = open_store(url)
    for sid in ("bad-data", "bad-header", "bad-labels"):
        say(store.create_session(sid), "hi")
    store.close()
    conn = sqlite3.connect(path)
    key = "SELECT session_key FROM sessions WHERE id = ?"
    conn.execute(
        "UPDATE events SET data = '{not json' WHERE session_key = (" + key + ")",
        ("bad-data",),
    )
    conn.execute("UPDATE sessions SET header = '[1]' WHERE id = ?", ("bad-header",))
    conn.execute("UPDATE sessions SET labels = '[1]' WHERE id = ?", ("bad-labels",))
    conn.commit()
    conn.close()
    store = open_store(url, create=False)
    reader = open_quick(url)
    assert reader is not None
    try:
        pair = (store, reader)
        for sid in ("bad-data", "bad-header"):
            for name in ("events", "messages"):
                assert_same(pair, name, sid)
        assert assert_same(pair, "events", "bad-data")[1].__name__ == "CorruptSessionError"
        assert assert_same(pair, "events", "bad-header")[1].__name__ == "CorruptSessionError"
        assert assert_same(pair, "list_sessions")[1].__name__ == "CorruptSessionError"
    finally:
        reader.close()
        store.close()


def test_a_driver_error_is_a_store_error(store_file):
    """A database changed under an open reader fails with the store's error for it, never
    with a bare ``sqlite3`` exception."""
    reader = open_quick(f"sqlite:///{store_file}")
    assert reader is not None
    try:
        conn = sqlite3.connect(store_file)
        conn.execute("DROP TABLE surface")
        conn.commit()
        conn.close()
        with pytest.raises(StoreError, match="no such table: surface"):
            reader.surface("one")
        assert reader.head_seq("one") >= 0  # the connection is still usable
    finally:
        reader.close()


def test_a_reader_sees_what_writers_commit_after_it_opened(store_file):
    """Each read is its own transaction: a reader kept open sees later commits, a session
    deleted and created again, and reads on while a writer holds its write lock (WAL)."""
    url = f"sqlite:///{store_file}"
    reader = open_quick(url)
    assert reader is not None
    store = open_store(url, create=False)
    try:
        before = reader.head_seq("one")
        say(store.open_session("one"), "again")
        assert reader.head_seq("one") == before + 1 == store.head_seq("one")
        assert list(reader.events("one")) == list(store.events("one"))
        store.delete_session("one")
        with pytest.raises(SessionNotFoundError):
            reader.head_seq("one")
        say(store.create_session("one"), "reborn")
        assert reader.messages("one") == store.messages("one")
        writer = sqlite3.connect(store_file, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # another process's write in progress
            writer.execute("UPDATE sessions SET title = 'pending' WHERE id = 'one'")
            assert [i.title for i in reader.list_sessions()] == [None]  # not committed yet
            writer.execute("COMMIT")
        finally:
            writer.close()
        assert [i.title for i in reader.list_sessions()] == ["pending"]
    finally:
        store.close()
        reader.close()
