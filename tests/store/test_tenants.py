"""Tenants and session metadata (SPEC §11.4): two tenants share one database and never meet.

Tenant A's store is driven through the sync and the async API; tenant B always writes the same
session ids, with other contents, through its own sync store. Whatever A calls must return,
change and count only A's rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select

from session_sql import (
    ConfigurationError,
    CorruptSessionError,
    InvalidArgumentError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    SessionStore,
    open_async_store,
    open_store,
)
from session_sql._store.backends.postgresql.listening import HubListener

from .async_facade import SyncFacade
from .store_builders import refused, reply, say, tables


@pytest.fixture
def pair(backend, api) -> Iterator[tuple[Any, SessionStore]]:
    """(A, B): tenant "a" through the API under test, tenant "b" through a sync store."""
    a = open_store(backend.url, schema=backend.schema, tenant="a")
    b = open_store(backend.url, schema=backend.schema, tenant="b")
    first: Any = SyncFacade(backend.url, backend.schema, a) if api == "async" else a
    try:
        yield first, b
    finally:
        first.close()
        b.close()


def _fill(a: Any, b: SessionStore) -> None:
    """The same ids in both tenants, with different logs and metadata."""
    ha = a.create_session("s1", user_id="alice", title="A's chat", labels={"app": "x"})
    say(ha, "from a")
    reply(ha, "a's answer")
    hb = b.create_session("s1", user_id="alice", title="B's chat", labels={"app": "x"})
    say(hb, "from b")
    say(hb, "more from b")
    reply(hb, "b's answer")
    b.create_session("only-b", user_id="bob")


def _rows_of(store: SessionStore, tenant: str) -> dict[str, int]:
    """How many rows each table holds for ``tenant`` (read around the store)."""
    t = tables(store)
    with store.engine.connect() as conn:
        counts = {
            table.name: conn.execute(
                select(func.count()).select_from(table).where(table.c.tenant == tenant)
            ).scalar_one()
            for table in (t.sessions, t.events, t.surface)
        }
        conn.rollback()
    return counts


def test_the_same_ids_in_two_tenants_never_meet(pair) -> None:
    a, b = pair
    _fill(a, b)
    b_before = _rows_of(b, "b")
    assert a.tenant == "a" and b.tenant == "b"

    # Reads see A's own log only.
    assert [m["content"][0]["text"] for m in a.messages("s1")] == ["from a", "a's answer"]
    assert a.head_seq("s1") == b.head_seq("s1") - 1
    assert len(list(a.events("s1"))) == a.head_seq("s1") + 1
    assert a.load_session("s1").seq == a.head_seq("s1") + 2  # the end-of-seed marker too
    assert len(a.surface("s1")) == 2
    assert a.verify("s1").ok
    info = a.session_info("s1")
    assert (info.tenant, info.title, info.event_count) == ("a", "A's chat", a.head_seq("s1") + 1)

    # Listing and counting see A's sessions only.
    assert [i.id for i in a.list_sessions()] == ["s1"]
    assert [i.id for i in a.list_sessions(user_id="alice")] == ["s1"]
    assert a.list_sessions(user_id="bob") == []
    assert [i.id for i in a.iter_sessions()] == ["s1"]
    stats = a.stats()
    assert (stats.sessions, stats.events) == (1, a.head_seq("s1") + 1)
    assert a.stats("s1").events == a.head_seq("s1") + 1

    # B's other session does not exist for A, whatever A calls.
    for call in (
        lambda: a.messages("only-b"),
        lambda: a.surface("only-b"),
        lambda: a.head_seq("only-b"),
        lambda: a.session_info("only-b"),
        lambda: a.load_session("only-b"),
        lambda: a.open_session("only-b"),
        lambda: a.fork_session("only-b"),
        lambda: a.verify("only-b"),
        lambda: a.repair("only-b"),
        lambda: a.stats("only-b"),
        lambda: a.delete_session("only-b"),
        lambda: a.update_session("only-b", title="mine now"),
        lambda: list(a.events("only-b")),
        lambda: list(a.follow("only-b", timeout=0)),
    ):
        with pytest.raises(SessionNotFoundError):
            call()
    assert a.list_sessions(parent="only-b") == []

    # Writes by A change nothing of B's.
    handle = a.open_session("s1")
    say(handle, "again from a")
    child = a.fork_session("s1", child_id="child")
    assert (child.id, a.session_info("child").title) == ("child", "A's chat")
    a.update_session("s1", title="renamed", labels={"app": "y"})
    a.repair("s1")
    with pytest.raises(SessionExistsError):
        a.create_session("s1")
    a.delete_session("child")
    assert _rows_of(b, "b") == b_before
    assert b.session_info("s1").title == "B's chat"
    assert [m["content"][0]["text"] for m in b.messages("s1")][:2] == ["from b", "more from b"]
    assert b.verify("s1").ok and b.verify("only-b").ok

    # ...and B deleting its own s1 leaves A's.
    b.delete_session("s1")
    assert a.head_seq("s1") >= 2
    assert a.verify("s1").ok


def test_export_and_import_stay_in_the_tenant(pair, tmp_path: Path) -> None:
    a, b = pair
    _fill(a, b)
    b_before = _rows_of(b, "b")
    path = tmp_path / "s1.jsonl"
    assert a.export_jsonl("s1", path) == a.head_seq("s1") + 1
    assert "from a" in path.read_text() and "from b" not in path.read_text()
    with pytest.raises(SessionNotFoundError):
        a.export_jsonl("only-b", tmp_path / "nothing.jsonl")
    # B's file imports into A under the id B also has: ids are unique per tenant.
    b.export_jsonl("only-b", tmp_path / "b.jsonl")
    assert a.import_jsonl(tmp_path / "b.jsonl") == "only-b"
    assert a.verify("only-b").ok
    assert _rows_of(b, "b") == b_before
    with pytest.raises(SessionExistsError):
        a.import_jsonl(tmp_path / "b.jsonl")


def test_default_tenant_is_the_empty_string(backend) -> None:
    with open_store(backend.url, schema=backend.schema) as plain:
        plain.create_session("s")
        assert plain.tenant == ""
        assert plain.session_info("s").tenant == ""
    with open_store(backend.url, schema=backend.schema, tenant="") as same:
        assert [i.id for i in same.list_sessions()] == ["s"]
    with open_store(backend.url, schema=backend.schema, tenant="x") as other:
        assert other.list_sessions() == []


@pytest.mark.parametrize("bad", [1, "a\x00b", "x" * 129, "\ud800", b"acme"])
def test_a_bad_tenant_is_a_configuration_error(backend, bad) -> None:
    with pytest.raises(ConfigurationError, match="tenant") as info:
        open_store(backend.url, schema=backend.schema, tenant=bad)
    assert info.value.option == "tenant"


def test_a_bad_tenant_is_refused_by_the_async_store_too(backend) -> None:
    import asyncio

    async def go() -> None:
        with pytest.raises(ConfigurationError, match="tenant"):
            await open_async_store(backend.url, schema=backend.schema, tenant=7)

    asyncio.run(go())


# -- following -------------------------------------------------------------------------------


def test_follow_yields_only_the_tenants_commits(pair) -> None:
    a, b = pair
    _fill(a, b)
    start = a.head_seq("s1")
    hb = b.open_session("s1")
    ha = a.open_session("s1")

    def write() -> None:
        time.sleep(0.2)
        say(hb, "b while a follows")
        say(ha, "a while a follows")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        got = list(a.follow("s1", after_seq=start, timeout=1.5))
    finally:
        writer.join()
    assert [e.data["content"][0]["text"] for e in got] == ["a while a follows"]


@pytest.mark.requires("listen")
def test_a_follower_never_wakes_for_another_tenant(backend) -> None:
    """The LISTEN connection of A's follower (LISTEN/NOTIFY is PostgreSQL's) sleeps through
    B's commits to the same id and through A's commits to other sessions, and wakes at once
    for its own session."""
    a = open_store(backend.url, schema=backend.schema, tenant="a")
    b = open_store(backend.url, schema=backend.schema, tenant="b")
    try:
        ha, hb, other = a.create_session("s1"), b.create_session("s1"), a.create_session("s2")
        listener = HubListener(a._ctx, "s1")
        try:
            say(hb, "b")
            say(other, "a, another session")
            started = time.monotonic()
            listener.wait(0.6)
            assert time.monotonic() - started >= 0.55  # slept through both
            say(ha, "a")
            started = time.monotonic()
            listener.wait(5.0)
            assert time.monotonic() - started < 2.0  # woke for its own session
        finally:
            listener.close()
    finally:
        a.close()
        b.close()


def test_the_notify_payload_names_tenant_and_session(backend) -> None:
    with open_store(backend.url, schema=backend.schema, tenant="t:1") as store:
        ctx = store._ctx
        payload = ctx.payload("s:1", 7)
        assert ctx.wakes(payload, "s:1")
        assert not ctx.wakes(payload, "s")
        assert not ctx.wakes('["t:2","s:1",7]', "s:1")
        assert not ctx.wakes("s:1:7", "s:1")  # not the format: ignored, never an error


# -- metadata ---------------------------------------------------------------------------------


def test_metadata_is_stored_listed_and_updated(pair) -> None:
    a, _ = pair
    a.create_session("one", user_id="u1", title="First", labels={"app": "x", "env": "prod"})
    a.create_session("two", user_id="u1", labels={"app": "x"})
    a.create_session("three", user_id="u2", labels={"app": "y", "env": "prod"})
    a.create_session("four")

    info = a.session_info("one")
    assert (info.user_id, info.title, info.labels) == ("u1", "First", {"app": "x", "env": "prod"})
    assert a.session_info("four").labels == {} and a.session_info("four").user_id is None

    def ids(**filters: Any) -> set[str]:
        return {i.id for i in a.list_sessions(**filters)}

    assert ids(user_id="u1") == {"one", "two"}
    assert ids(labels={"app": "x"}) == {"one", "two"}
    assert ids(labels={"env": "prod"}) == {"one", "three"}
    assert ids(labels={"app": "x", "env": "prod"}) == {"one"}
    assert ids(user_id="u2", labels={"app": "x"}) == set()
    assert ids(labels={}) == {"one", "two", "three", "four"}
    assert ids(user_id="nobody") == set()

    # Paging within a filter.
    first = a.list_sessions(user_id="u1", limit=1)
    rest = a.list_sessions(user_id="u1", after=first[0])
    assert {i.id for i in first + rest} == {"one", "two"} and len(rest) == 1

    before = a.session_info("one")
    updated = a.update_session("one", title="Renamed")
    assert (updated.title, updated.labels) == ("Renamed", {"app": "x", "env": "prod"})
    assert a.update_session("one", labels={"k": "v"}).labels == {"k": "v"}
    assert a.update_session("one", title=None).title is None
    assert a.update_session("one").title is None  # nothing given: nothing changes
    after = a.session_info("one")
    # Metadata is not part of the log: no event, and updated_at follows the log only.
    assert (after.head_seq, after.updated_at) == (before.head_seq, before.updated_at)
    assert ids(labels={"k": "v"}) == {"one"}


def test_a_fork_keeps_the_parents_metadata(pair) -> None:
    a, _ = pair
    parent = a.create_session("p", user_id="u", title="T", labels={"a": "b"})
    say(parent, "hi")
    a.fork_session("p", child_id="c")
    info = a.session_info("c")
    assert (info.parent_session, info.user_id, info.title, info.labels) == (
        "p",
        "u",
        "T",
        {"a": "b"},
    )


BAD_METADATA = [
    ("user_id", {"user_id": ""}),
    ("user_id", {"user_id": 5}),
    ("user_id", {"user_id": "x" * 257}),
    ("user_id", {"user_id": "a\nb"}),
    ("title", {"title": 3}),
    ("title", {"title": "t" * 1001}),
    ("title", {"title": "nul\x00"}),
    ("labels", {"labels": ["a"]}),
    ("labels", {"labels": {"": "v"}}),
    ("labels", {"labels": {'a"b': "v"}}),
    ("labels", {"labels": {"k": 1}}),
    ("labels", {"labels": {1: "v"}}),
    ("labels", {"labels": {"k": "\ud800"}}),
    ("labels", {"labels": {f"k{i}": "v" for i in range(65)}}),
]


@pytest.mark.parametrize(("argument", "kwargs"), BAD_METADATA)
def test_bad_metadata_is_refused_with_nothing_written(pair, argument, kwargs) -> None:
    a, _ = pair
    a.create_session("kept", title="old", labels={"k": "v"})
    before = a.session_info("kept")
    with refused(a._companion if hasattr(a, "_companion") else a, InvalidArgumentError) as info:
        a.create_session("new", **kwargs)
    assert info.value.argument == argument
    if argument != "user_id":
        with refused(a._companion if hasattr(a, "_companion") else a, InvalidArgumentError) as info:
            a.update_session("kept", **kwargs)
        assert info.value.argument == argument
    assert a.session_info("kept") == before


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"user_id": 5}, "user_id"),
        ({"labels": "app=x"}, "labels"),
        ({"labels": {"k": None}}, "labels"),
    ],
)
def test_bad_list_filters_are_refused(pair, kwargs, argument) -> None:
    a, _ = pair
    with pytest.raises(InvalidArgumentError) as info:
        a.list_sessions(**kwargs)
    assert info.value.argument == argument


def test_session_info_round_trips_as_json() -> None:
    info = SessionInfo(
        id="s",
        created_at=1,
        updated_at=2,
        head_seq=3,
        parent_session=None,
        tenant="t",
        user_id="u",
        title="x",
        labels={"a": "b"},
    )
    assert SessionInfo.model_validate_json(info.model_dump_json()) == info
    assert info.event_count == 4


def test_every_row_carries_its_tenant(pair) -> None:
    """Events and surface rows name their session by session_key and carry its tenant (what
    the row-level policy reads): each row's tenant is that of the session its key names."""
    a, b = pair
    _fill(a, b)
    t = tables(b)
    s = t.sessions
    with b.engine.connect() as conn:
        assert set(conn.execute(select(s.c.tenant)).scalars()) == {"a", "b"}
        for table in (t.events, t.surface):
            rows = conn.execute(
                select(table.c.tenant, s.c.tenant).join(s, table.c.session_key == s.c.session_key)
            ).all()
            total = conn.execute(select(func.count()).select_from(table)).scalar_one()
            assert len(rows) == total > 0, table.name
            assert {own for own, _ in rows} == {"a", "b"}, table.name
            assert all(own == session for own, session in rows), table.name
        conn.rollback()


def test_a_write_handle_reads_and_checks_its_own_tenants_surface(pair, api):
    """open_session's surface, head and surface_digest are the (tenant, session)'s own: a hand
    edit of one tenant's digest stops a writer of that tenant only."""
    a, b = pair
    _fill(a, b)
    ha, hb = a.open_session("s1"), b.open_session("s1")
    assert (ha.seq, len(ha.surface.nodes)) == (2, 2)
    assert (hb.seq, len(hb.surface.nodes)) == (3, 3)
    assert ha.messages()[0]["content"][0]["text"] == "from a"
    s = tables(b).sessions
    with b.engine.begin() as conn:
        conn.execute(
            s.update()
            .where(s.c.tenant == "b", s.c.id == "s1")
            .values(surface_digest=s.c.surface_digest + 1)
        )
    with refused(b, CorruptSessionError, match="surface_digest"):
        b.open_session("s1")
    assert not b.verify("s1").ok
    say(a.open_session("s1"), "a is unaffected")
    assert a.verify("s1").ok


@pytest.mark.requires("labels_index")
def test_a_label_filter_is_answered_by_the_labels_index(backend) -> None:
    """On PostgreSQL a rare label is found through the GIN index, not by walking the tenant's
    sessions; commonly carried labels still page through the updated_at index."""
    store = open_store(backend.url, schema=backend.schema, tenant="a")
    try:
        store.create_session("template", labels={"team": "t0"})
        engine = store._ctx.engine
        statements: list[tuple[str, Any]] = []

        def capture(conn, cursor, statement, parameters, context, executemany) -> None:
            statements.append((statement, parameters))

        with engine.begin() as conn:
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{backend.schema}"')
            # Every column but session_key, which the identity gives each new row.
            conn.exec_driver_sql(
                "INSERT INTO sessions (tenant, id, format_version, created_at, parent_session, "
                "inherited_event_count, header, head_seq, surface_next_pos, replace_generation, "
                "surface_digest, updated_at, incarnation, user_id, title, labels) "
                "SELECT tenant, 's' || n, format_version, created_at + n, "
                "parent_session, inherited_event_count, header, head_seq, surface_next_pos, "
                "replace_generation, surface_digest, updated_at + n, 'i' || n, user_id, title, "
                "jsonb_build_object('team', 't' || mod(n, 50), 'tier', "
                "CASE WHEN n = 4321 THEN 'gold' ELSE 'basic' END) "
                "FROM sessions, generate_series(1, 20000) AS n WHERE id = 'template'"
            )
            conn.exec_driver_sql("ANALYZE sessions")
        event.listen(engine, "before_cursor_execute", capture)
        try:
            [gold] = store.list_sessions(labels={"tier": "gold"}, limit=50)
        finally:
            event.remove(engine, "before_cursor_execute", capture)
        assert (gold.id, gold.labels) == ("s4321", {"team": "t21", "tier": "gold"})
        [(statement, parameters)] = [s for s in statements if "FROM" in s[0]]
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT set_config('session_sql.tenant', 'a', true)")
            plan = "\n".join(
                row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, parameters)
            )
        assert "ix_sessions_labels" in plan, plan
        assert len(store.list_sessions(labels={"team": "t7", "tier": "basic"}, limit=50)) == 50
    finally:
        store.close()
