"""How tail reads and ``open_session`` by a kept key run: one statement on the store's idle
connection, the ordinary path when that cannot answer alone, and the kept projections; and
SQLite's appends on that connection.
The answers are the contract's (``test_store_tail.py``, ``test_store_writing.py``); these
tests pin down the machinery behind them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import delete, event, text, update

from session_sql import (
    ConcurrencyError,
    CorruptSessionError,
    SessionStore,
    StoreError,
    open_store,
)
from session_sql._store.context import MISSING, Kept

from ..builders import summarize
from .store_builders import execute, key_of, recorded, reply, say, tables, user_message

SYNC_ONLY_BECAUSE = (
    "every test inspects the sync store's kept idle connection (idle_dbapi, store.engine's "
    "checkouts); the async API reads through its own engine, which the facade does not expose"
)


def idle_dbapi(store: SessionStore) -> Any:
    """The idle connection's DBAPI connection (None when none is open)."""
    raw = store._ctx.idle._raw
    return None if raw is None else raw.dbapi_connection


def test_tail_reads_run_on_the_idle_connection_without_a_checkout(
    store: SessionStore, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create_session("s")
    for text_ in "abc":
        say(handle, text_)
    # Opened on first use: the first tail read, or on SQLite the first append.
    assert (idle_dbapi(store) is None) is not backend.has("appends_on_kept_connection")
    first = store.messages("s", last=2)
    kept = idle_dbapi(store)
    assert kept is not None
    pool = store.engine.pool
    checkouts: list[int] = []
    connect = pool.connect
    monkeypatch.setattr(pool, "connect", lambda: checkouts.append(1) or connect())
    assert store.messages("s", last=2) == first
    assert [n.seq for n in store.surface_messages("s", last=2)] == [1, 2]
    assert checkouts == []
    assert idle_dbapi(store) is kept  # the same connection, every time
    assert [m["content"][0]["text"] for m in first] == ["b", "c"]
    store.messages("s")  # a full read takes the pool
    assert checkouts == [1]


def test_the_idle_connection_and_the_pool_give_the_same_answers(store: SessionStore) -> None:
    """A checkout listener sends tail reads to the pool (listeners see every connection used),
    which reads what the idle connection reads."""
    handle = store.create_session("s")
    for text_ in "abcd":
        say(handle, text_)
    reply(handle, None)  # a node without a message
    idle = [store.messages("s", last=3), store.surface_messages("s", last=3)]
    assert idle_dbapi(store) is not None
    checkouts: list[Any] = []

    def on_checkout(*args: Any) -> None:
        checkouts.append(args)

    event.listen(store.engine, "checkout", on_checkout)
    try:
        pooled = [store.messages("s", last=3), store.surface_messages("s", last=3)]
    finally:
        event.remove(store.engine, "checkout", on_checkout)
    assert pooled == idle
    assert len(checkouts) >= 2  # every read on the pool (messages needed two statements)
    assert [m["content"][0]["text"] for m in idle[0]] == ["b", "c", "d"]


def test_a_tail_needing_more_pages_is_read_again_in_one_snapshot(store: SessionStore) -> None:
    handle = store.create_session("s")
    say(handle, "a")
    for _ in range(5):
        reply(handle, None)  # on the surface, projects to no message
    with recorded(store.engine) as rec:
        assert [m["content"][0]["text"] for m in store.messages("s", last=1)] == ["a"]
    # The one statement found no message in the last node: the read began again, in pages.
    tail_sql = store._ctx.compiled.surface_tail.sql
    assert rec.queries[0] == tail_sql
    assert len(rec.queries) > 2


def handle_state(handle: Any) -> tuple[Any, ...]:
    """What a write handle opened on a session holds of it (see ``opening``)."""
    s = handle._state
    return (
        handle.seq,
        handle.surface.nodes,
        (s.positions, s.next_pos, s.replace_generation, s.digest),
        handle._incarnation,
        handle.messages(),
    )


def test_open_session_by_a_kept_key_is_one_statement_on_the_idle_connection(
    store: SessionStore, backend: Any, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``open_session`` of a session whose key the store keeps reads the row, the surface
    with its events and the head as one statement (``Statements.opening``), without a
    checkout, and holds what a store that knows only the id reads in its snapshot."""
    handle = store.create_session("s")
    for text_ in "abc":
        say(handle, text_)
    reply(handle, None)  # a node without a message
    nodes = handle.surface.nodes
    summarize(handle, nodes[0], nodes[1], sources=list(nodes[:2]))
    say(handle, "d")
    store.messages("s", last=1)  # the idle connection is open
    checkouts = counted_checkouts(store, monkeypatch)
    with recorded(store.engine) as rec:
        opened = store.open_session("s")
    assert rec.queries == [store._ctx.compiled.opening.sql]
    assert checkouts == []
    assert handle_state(opened) == handle_state(handle)
    # A store that keeps no key reads by the id.
    with open_store(backend.url, schema=backend.schema, tenant=tenant) as other:
        with recorded(other.engine) as by_id:
            assert handle_state(other.open_session("s")) == handle_state(handle)
        compiled = store._ctx.compiled  # the key by the id, then the same one statement
        assert by_id.queries == [compiled.key_of.sql, compiled.opening.sql]
        with recorded(other.engine) as again:
            other.open_session("s")  # the key is kept now
        assert again.queries == [store._ctx.compiled.opening.sql]
    say(opened, "from the opened handle")
    assert store.verify("s").ok


def test_head_seq_by_a_kept_key_is_one_statement_on_the_idle_connection(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create_session("s")
    assert store.head_seq("s") == -1
    say(handle, "a")
    checkouts = counted_checkouts(store, monkeypatch)
    with recorded(store.engine) as rec:
        assert store.head_seq("s") == 0
    assert rec.queries == [store._ctx.compiled.head_seq.sql]
    assert checkouts == []


def test_open_session_of_an_empty_session_by_its_kept_key(store: SessionStore) -> None:
    store.create_session("s")
    with recorded(store.engine) as rec:
        opened = store.open_session("s")
    assert rec.queries == [store._ctx.compiled.opening.sql]
    assert opened.seq == 0 and opened.surface.nodes == ()
    say(opened, "first")
    assert store.verify("s").ok


def test_a_broken_idle_connection_is_replaced(store: SessionStore, backend: Any) -> None:
    handle = store.create_session("s")
    say(handle, "a")
    store.messages("s", last=1)
    dead = idle_dbapi(store)
    if backend.has("server_sessions"):
        with store.engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": dead.info.backend_pid})
            conn.commit()
    else:
        dead.close()
    assert [m["content"][0]["text"] for m in store.messages("s", last=1)] == ["a"]
    assert idle_dbapi(store) is None  # discarded; the pool answered
    assert [n.seq for n in store.surface_messages("s", last=1)] == [0]
    assert idle_dbapi(store) not in (None, dead)


def test_a_busy_idle_connection_sends_the_reader_to_the_pool(store: SessionStore) -> None:
    handle = store.create_session("s")
    say(handle, "a")
    store.messages("s", last=1)
    answers: list[Any] = []
    with store._ctx.idle.borrow() as taken:
        assert taken is not None
        with store._ctx.idle.borrow() as second:
            assert second is None  # taken without waiting
        reader = threading.Thread(target=lambda: answers.append(store.messages("s", last=1)))
        reader.start()
        reader.join(10)
    assert [m["content"][0]["text"] for (m,) in answers] == ["a"]


def counted_checkouts(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one at each checkout from the store's pool."""
    checkouts: list[int] = []
    pool = store.engine.pool
    connect = pool.connect
    monkeypatch.setattr(pool, "connect", lambda: checkouts.append(1) or connect())
    return checkouts


def test_sqlite_appends_run_on_the_idle_connection(
    store: SessionStore, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create_session("s")
    say(handle, "a")
    store.messages("s", last=1)
    kept = idle_dbapi(store)
    checkouts = counted_checkouts(store, monkeypatch)
    say(handle, "b")
    handle.append_many(
        [
            {"type": "user/message", "data": user_message(t, id=t), "surface_op": "append"}
            for t in "cd"
        ]
    )
    assert [m["content"][0]["text"] for m in store.messages("s", last=4)] == list("abcd")
    if backend.has("appends_on_kept_connection"):
        assert checkouts == []  # no checkout: the appends and the read ran on the kept one
        assert idle_dbapi(store) is kept and not kept.in_transaction
    else:  # PostgreSQL's idle connection is in autocommit: appends take the pool
        assert len(checkouts) == 2


def test_an_append_finding_the_idle_connection_busy_takes_the_pool(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = store.create_session("s")
    store.messages("s", last=1)  # opens the idle connection
    checkouts = counted_checkouts(store, monkeypatch)
    with store._ctx.idle.borrow() as taken:
        assert taken is not None
        say(handle, "a")  # same thread: borrow never waits, so this would hang if it did
    assert checkouts == [1]
    assert [m["content"][0]["text"] for m in store.messages("s", last=1)] == ["a"]


def test_a_lost_race_or_a_refused_batch_leaves_the_idle_connection_usable(
    store: SessionStore,
) -> None:
    """Appends refused inside their transaction roll it back: whichever connection ran them
    is left outside any transaction, nothing is written, and the next append goes through."""
    handle = store.create_session("s")
    say(handle, "a")
    stale = store.open_session("s")
    kept = idle_dbapi(store)  # opened by the appends (SQLite) or open_session's read
    assert kept is not None
    say(handle, "b")
    with pytest.raises(ConcurrencyError):
        say(stale, "lost")
    events = tables(store).events
    key = key_of(store, "s", store.tenant)
    stray = {"tenant": store.tenant, "session_key": key, "seq": handle.seq + 1}  # the batch's 2nd
    execute(store, events.insert().values(**stray, type="todo/write", time=0, data=[]))
    with pytest.raises(CorruptSessionError):
        handle.append_many([{"type": "todo/write", "data": {"i": i}} for i in range(2)])
    execute(store, delete(events).where(events.c.seq == stray["seq"]))
    dbapi = idle_dbapi(store)
    assert dbapi is None or not getattr(dbapi, "in_transaction", False)
    assert dbapi is kept  # a refusal is no reason to drop the connection
    say(handle, "c")
    assert [m["content"][0]["text"] for m in store.messages("s")] == list("abc")


def test_closing_the_store_closes_the_idle_connection(backend: Any) -> None:
    store = open_store(backend.url, schema=backend.schema)
    say(store.create_session("s"), "a")
    store.messages("s", last=1)
    assert idle_dbapi(store) is not None
    store.close()
    assert idle_dbapi(store) is None
    with pytest.raises(StoreError):
        store.messages("s", last=1)
    with pytest.raises(StoreError):
        store.surface_messages("s", last=1)


def test_an_in_memory_store_keeps_no_idle_connection() -> None:
    with open_store("sqlite://") as store:
        say(store.create_session("s"), "a")
        assert store.messages("s", last=1)[0]["content"][0]["text"] == "a"
        assert idle_dbapi(store) is None


def test_a_kept_projection_never_hides_a_corrupt_row(store: SessionStore) -> None:
    handle = store.create_session("s")
    say(handle, "a")
    good = store.messages("s", last=1)
    assert store.messages("s", last=1)[0] is good[0]  # kept: the same frozen message
    events = tables(store).events
    with store.engine.begin() as conn:
        conn.execute(update(events).where(events.c.seq == 0).values(data={"id": "u"}))
    for _ in range(2):  # refused every time: failures are never kept
        with pytest.raises(CorruptSessionError):
            store.messages("s", last=1)
        with pytest.raises(CorruptSessionError):
            store.surface_messages("s", last=1)


def test_kept_projections_stay_within_their_budget() -> None:
    kept = Kept()
    kept.BUDGET = 100
    for i in range(10):
        kept.put(("user/message", f"{i:02d}" * 10), i, 20)  # 20 characters each
    assert kept._size <= 100
    assert kept.get(("user/message", "09" * 10)) == 9  # the newest stay
    assert kept.get(("user/message", "00" * 10)) is MISSING  # the oldest went
    kept.put(("user/message", "x" * (Kept.MAX_TEXT + 1)), "big", Kept.MAX_TEXT + 1)
    assert kept.get(("user/message", "x" * (Kept.MAX_TEXT + 1))) is MISSING
    kept.clear()
    assert kept._size == 0 and kept.get(("user/message", "09" * 10)) is MISSING
