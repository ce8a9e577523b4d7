"""The store's edge: configuration and argument errors, closed stores, and nothing raw escapes.

Every refusal here is a ``SessionSQLError`` (never a SQLAlchemy, psycopg or bare built-in
exception) and is the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text, update
from sqlalchemy.schema import DropSchema

from session_sql import (
    ConfigurationError,
    InvalidArgumentError,
    PermanentStoreError,
    SessionInfo,
    SessionNotFoundError,
    SessionSQLError,
    SessionStore,
    StoreError,
    StoreStats,
    open_store,
)

from .store_builders import dump_tables, execute, say, tables, tool_turn, tool_turn_log

# Argument boundaries do not depend on the tenant (tests/store/test_tenants.py covers tenants).
DEFAULT_TENANT_ONLY = True
SYNC_ONLY = {
    "test_follow_refuses_a_bad_argument_at_the_call": (
        "the async follow is an async generator: it refuses a bad argument at its first step, "
        "not at the call (test_async_store.py's test_scans_and_row_reads checks that)"
    ),
}

REPO = Path(__file__).resolve().parents[2]


def _is_ours(error: BaseException) -> bool:
    """A session_sql error, not a driver's or SQLAlchemy's (nor a bare built-in)."""
    return isinstance(error, SessionSQLError) and type(error).__module__ == "session_sql.errors"


def _nothing_created(backend: Any, postgres_admin: Callable[[], Any]) -> bool:
    if backend.has("file"):
        return not backend.path.exists()
    with postgres_admin().connect() as conn:
        return backend.schema not in inspect(conn).get_schema_names()


# -- configuration ----------------------------------------------------------------------------


def test_a_bare_relative_path_suggests_the_sqlite_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        open_store("sessions.db")
    assert "did you mean sqlite:///sessions.db?" in str(info.value)
    assert info.value.option == "url"
    assert isinstance(info.value, ValueError)
    assert list(tmp_path.iterdir()) == []


def test_a_bare_absolute_path_suggests_four_slashes(tmp_path):
    path = tmp_path / "sessions.db"
    with pytest.raises(ConfigurationError) as info:
        open_store(str(path))
    assert f"did you mean sqlite:////{str(path).lstrip('/')}?" in str(info.value)
    assert not path.exists()


@pytest.mark.parametrize("url", ["mysql://user@host/db", "::not a url::", "", 3, None])
def test_an_unknown_scheme_lists_the_supported_ones(url):
    with pytest.raises(ConfigurationError) as info:
        open_store(url)
    assert info.value.option == "url"
    for scheme in ("sqlite:///", "postgresql://"):
        assert scheme in str(info.value)


BAD_OPTIONS: list[tuple[str, Any]] = [
    ("schema", "a-b; --"),
    ("schema", 3),
    ("schema", "9starts_with_a_digit"),
    ("synchronous", "fast"),
    ("synchronous", 3),
    ("busy_timeout_ms", -1),
    ("busy_timeout_ms", "5000"),
    ("busy_timeout_ms", True),
    ("pool_size", 0),
    ("pool_size", "5"),
    ("max_event_bytes", 0),
    ("max_event_bytes", "16MiB"),
    ("max_event_bytes", True),
    ("clock", 1234),
    ("catalog", ["todo/write"]),
]


@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS)
def test_a_bad_option_is_refused_by_name_before_anything_is_created(
    backend, request, option, value
):
    options = {"schema": backend.schema, option: value}
    with pytest.raises(ConfigurationError) as info:
        open_store(backend.url, **options)
    assert info.value.option == option
    assert option in str(info.value)
    assert _nothing_created(backend, lambda: request.getfixturevalue("postgres_admin"))


@pytest.mark.parametrize("options", [{"no_such_keyword": 1}, {"pool_recycle": "hourly"}])
def test_an_engine_keyword_sqlalchemy_refuses_is_a_configuration_error(backend, options):
    with pytest.raises(ConfigurationError) as info:
        open_store(backend.url, schema=backend.schema, **options)
    assert info.value.option == "engine_options"
    assert next(iter(options)) in str(info.value)
    assert _is_ours(info.value)


def test_create_false_refuses_a_missing_sqlite_file(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(StoreError) as info:
        open_store(f"sqlite:///{path}", create=False)
    assert str(info.value).startswith(f"no store at {path}")
    assert info.value.path == str(path)
    assert not path.exists()
    open_store(f"sqlite:///{path}").close()
    with open_store(f"sqlite:///{path}", create=False) as store:
        assert store.database_file == str(path)
        assert store.display_url == f"sqlite:///{path}"


@pytest.mark.postgresql
def test_the_display_url_hides_the_password(postgres_admin):
    schema = f"t_{uuid.uuid4().hex}"
    url = postgres_admin.url.set(password="secret").render_as_string(hide_password=False)
    try:
        with open_store(url, schema=schema) as store:
            assert "secret" not in store.display_url
            assert store.database_file is None
    finally:
        with postgres_admin.begin() as conn:
            conn.execute(DropSchema(schema, cascade=True, if_exists=True))


# -- arguments --------------------------------------------------------------------------------


@pytest.fixture
def three(store) -> SessionStore:
    """Three sessions, "s0" with a tool turn."""
    store.create_session("s0", seed=tool_turn_log())
    store.create_session("s1")
    store.create_session("s2")
    return store


NOT_INTS: list[Any] = ["3", 3.0, True, None, [3]]


@pytest.mark.parametrize("value", [-1, -(2**70), *[v for v in NOT_INTS if v is not None]])
def test_list_sessions_refuses_a_bad_limit(three, value):
    before = dump_tables(three)
    with pytest.raises(InvalidArgumentError) as info:
        three.list_sessions(limit=value)
    assert info.value.argument == "limit"
    assert isinstance(info.value, ValueError)
    assert dump_tables(three) == before


@pytest.mark.parametrize("limit", [2**62, 2**63, 2**64, 2**200])
def test_a_huge_limit_is_clamped_on_both_backends(three, limit):
    assert sorted(i.id for i in three.list_sessions(limit=limit)) == ["s0", "s1", "s2"]
    assert len(three.list_sessions(limit=limit, order="created")) == 3


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("created_after", "1000"),
        ("created_before", 1.5),
        ("created_before", True),
        ("order", "newest"),
    ],
)
def test_list_sessions_refuses_other_bad_arguments(three, argument, value):
    with pytest.raises(InvalidArgumentError) as info:
        three.list_sessions(**{argument: value})
    assert info.value.argument == argument


@pytest.mark.parametrize("after", [3, ["s1"], "no-such-session"])
def test_an_after_cursor_no_session_has_is_not_found(three, after):
    with pytest.raises(SessionNotFoundError):
        three.list_sessions(after=after)
    with pytest.raises(SessionNotFoundError):
        three.list_sessions(after=after, order="created")


def test_huge_created_bounds_are_clamped(three):
    assert len(three.list_sessions(created_after=-(2**70))) == 3
    assert len(three.list_sessions(created_before=2**70)) == 3
    assert three.list_sessions(created_after=2**70) == []


@pytest.mark.parametrize("argument", ["from_seq", "to_seq"])
@pytest.mark.parametrize("value", [v for v in NOT_INTS if v is not None])
def test_events_refuses_a_non_int_bound_at_the_call(three, argument, value):
    with pytest.raises(InvalidArgumentError) as info:
        three.events("s0", **{argument: value})  # at the call, not at the first next()
    assert info.value.argument == argument


def test_events_clamps_huge_bounds(three):
    assert [e.seq for e in three.events("s0", from_seq=11, to_seq=2**70)] == [11, 12, 13]
    assert list(three.events("s0", from_seq=2**70)) == []
    assert len(list(three.events("s0", from_seq=-(2**70)))) == 14


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("after_seq", None),
        ("after_seq", "3"),
        ("after_seq", True),
        ("after_seq", 2.0),
        ("timeout", "1"),
        ("timeout", -1),
        ("timeout", float("nan")),
        ("timeout", True),
    ],
)
def test_follow_refuses_a_bad_argument_at_the_call(three, argument, value):
    with pytest.raises(InvalidArgumentError) as info:
        three.follow("s0", **{argument: value})
    assert info.value.argument == argument


def test_follow_accepts_an_int_timeout_and_a_huge_after_seq(three):
    assert [e.seq for e in three.follow("s0", after_seq=11, timeout=0)] == [12, 13]
    assert list(three.follow("s0", after_seq=2**70, timeout=0)) == []


@pytest.mark.parametrize("page_size", [0, -1, "10", True])
def test_iter_sessions_refuses_a_bad_page_size(three, page_size):
    with pytest.raises(InvalidArgumentError):
        three.iter_sessions(page_size=page_size)


# -- closed stores ----------------------------------------------------------------------------

CLOSED_CALLS: dict[str, Callable[[SessionStore], Any]] = {
    "create_session": lambda s: s.create_session("new"),
    "open_session": lambda s: s.open_session("s0"),
    "fork_session": lambda s: s.fork_session("s0", boundary=2),
    "load_session": lambda s: s.load_session("s0"),
    "messages": lambda s: s.messages("s0"),
    "surface": lambda s: s.surface("s0"),
    "events": lambda s: list(s.events("s0")),
    "follow": lambda s: list(s.follow("s0", timeout=0)),
    "list_sessions": lambda s: s.list_sessions(),
    "count_sessions": lambda s: s.count_sessions(),
    "iter_sessions": lambda s: list(s.iter_sessions()),
    "verify": lambda s: s.verify("s0"),
    "repair": lambda s: s.repair("s0"),
    "delete_session": lambda s: s.delete_session("s1"),
    "export_jsonl": lambda s: s.export_jsonl("s0", "/dev/null"),
    "stats": lambda s: s.stats(),
    "head_seq": lambda s: s.head_seq("s0"),
}


@pytest.mark.parametrize("call", CLOSED_CALLS.values(), ids=list(CLOSED_CALLS))
def test_a_closed_store_refuses_every_call_with_a_store_error(backend, call):
    store = open_store(backend.url, schema=backend.schema)
    store.create_session("s0", seed=tool_turn_log())
    store.create_session("s1")
    store.close()
    with pytest.raises(PermanentStoreError, match="closed") as info:
        call(store)
    assert _is_ours(info.value)
    store.close()  # twice is harmless


def test_handles_and_iterators_of_a_closed_store_fail_the_same_way(backend, tmp_path):
    store = open_store(backend.url, schema=backend.schema)
    handle = store.create_session("s0")
    say(handle)  # the write path keeps a connection between appends on SQLite
    events = store.events("s0")
    follow = store.follow("s0", timeout=0)
    store.close()
    with pytest.raises(PermanentStoreError, match="closed"):
        say(handle)
    with pytest.raises(PermanentStoreError, match="closed"):
        handle.refresh()
    with pytest.raises(PermanentStoreError, match="closed"):
        next(events)
    with pytest.raises(PermanentStoreError, match="closed"):
        next(follow)
    with open_store(backend.url, schema=backend.schema) as reopened:
        assert reopened.head_seq("s0") == 0  # the refused append wrote nothing


def test_an_internal_sqlalchemy_error_becomes_a_store_error(store):
    # An error SQLAlchemy raises itself (here: ``one()`` of an empty result) is translated
    # like a driver error, so it cannot escape a public call as a SQLAlchemy type.
    from session_sql._store.database import read_tx, translate_errors

    with pytest.raises(StoreError) as info, translate_errors(), read_tx(store.engine) as conn:
        conn.execute(text("SELECT 1 WHERE 1 = 0")).one()
    assert _is_ours(info.value)


# -- stats and head_seq -----------------------------------------------------------------------


def test_head_seq_reads_the_row(store):
    handle = store.create_session("s")
    assert store.head_seq("s") == -1
    say(handle)
    say(handle)
    assert store.head_seq("s") == 1
    for missing in ("nope", 3, "\ud800"):
        with pytest.raises(SessionNotFoundError):
            store.head_seq(missing)


def test_stats_counts_a_forks_inherited_events_once(store):
    parent = store.create_session("p")
    tool_turn(parent)
    child = store.fork_session("p", child_id="c")
    say(child)
    whole = store.stats()
    assert isinstance(whole, StoreStats)
    assert (whole.sessions, whole.forks) == (2, 1)
    assert whole.events == store.head_seq("p") + 1 + 2  # the child's marker and its message
    assert [(t.tool, t.calls, t.errors) for t in whole.tools] == [("shell", 1, 0)]
    one = store.stats("c")
    assert (one.sessions, one.forks, one.events, one.session_id) == (1, 1, 2, "c")
    assert one.events_by_type == {"session/end-seed": 1, "user/message": 1}
    assert one.tools == []
    with pytest.raises(SessionNotFoundError):
        store.stats("nope")
    with pytest.raises(SessionNotFoundError):
        store.stats(3)  # type: ignore[arg-type]


def test_stats_of_an_empty_store(store):
    stats = store.stats()
    assert (stats.sessions, stats.forks, stats.events, stats.events_by_type) == (0, 0, 0, {})
    assert stats.model_dump()["tools"] == []


@pytest.mark.parametrize("module", ["app", "_support", "_stats", "_render"])
def test_the_cli_reads_through_the_public_api_only(module):
    tree = ast.parse((REPO / "session_sql" / "cli" / f"{module}.py").read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {m for m in imported if m.split(".")[0] in ("sqlalchemy", "psycopg")}
    assert "session_sql._store.stats" not in imported


# -- complete scans ---------------------------------------------------------------------------


@pytest.fixture
def six(store) -> list[str]:
    """Six sessions created in id order, with hand-set, old ``updated_at`` values."""
    ids = ["a", "b", "c", "d", "e", "f"]
    for i, sid in enumerate(ids):
        store.create_session(
            header={"version": 0, "id": sid, "createdAt": 1000 + i, "isSeeded": False}
        )
    s = tables(store).sessions
    execute(
        store,
        *(update(s).where(s.c.id == sid).values(updated_at=100 + i) for i, sid in enumerate(ids)),
    )
    return ids


def test_iter_sessions_sees_every_session_once_while_others_append(store, six):
    seen: list[str] = []
    scan = store.iter_sessions(page_size=2)
    for info in scan:
        seen.append(info.id)
        if len(seen) == 2:  # between the first and the second page
            say(store.open_session("a"))  # already seen
            say(store.open_session("e"))  # not seen yet
        if len(seen) == 4:
            say(store.open_session("f"))
            say(store.open_session("b"))
    assert seen == six


def test_paging_by_creation_is_stable_under_appends(store, six):
    seen: list[str] = []
    after: SessionInfo | str | None = None
    while True:
        page = store.list_sessions(limit=2, after=after, order="created")
        if not page:
            break
        seen.extend(i.id for i in page)
        for sid in ("a", "f", seen[-1]):
            say(store.open_session(sid))
        after = page[-1].id if len(seen) == 2 else page[-1]
    assert seen == six


def test_paging_by_update_misses_sessions_written_meanwhile(store, six):
    # Why complete scans must not page by updated_at: "a" moves ahead of the cursor.
    first = store.list_sessions(limit=2)
    assert [i.id for i in first] == ["f", "e"]
    say(store.open_session("a"))
    rest = store.list_sessions(limit=100, after=first[-1])
    assert "a" not in {i.id for i in first + rest}


def test_iter_sessions_filters_by_parent(store, six):
    say(store.open_session("a"))
    child = store.fork_session("a", child_id="a1")
    assert [i.id for i in store.iter_sessions(parent="a")] == [child.id]
    assert list(store.iter_sessions(parent="nope")) == []
