"""open_session without a replay: what it reads, what it checks, and what it reads later."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from session_sql import (
    CorruptSessionError,
    Replace,
    SessionStore,
    StoredSession,
    StoreError,
    SurfaceError,
    open_async_store,
)
from session_sql._store import opening, reader
from session_sql._store.opening import StoredLog

from .store_builders import (
    answer,
    chunk,
    execute,
    key_of,
    recorded,
    refused,
    say,
    session_row,
    summarize,
    tables,
    tool_turn,
    user_message,
    view,
)

_PATCHES_SYNC_READS = "patches or records the sync store's reads (the async store runs that code)"
SYNC_ONLY = {
    "test_open_reads_the_surface_and_the_head_never_the_log": _PATCHES_SYNC_READS,
    "test_the_log_is_read_on_first_use_once": _PATCHES_SYNC_READS,
    "test_a_second_open_takes_the_rows_it_checked_before_as_they_were": _PATCHES_SYNC_READS,
}


def long_session(store: SessionStore, sid: str, chunks: int) -> StoredSession:
    """A tool turn, ``chunks`` chunk events, a summary of the first two nodes and a message."""
    handle = store.create_session(sid)
    tool_turn(handle)
    handle.append_many(
        [
            {"type": "assistant/chunk", "data": {"turn": 2, "step": 1, "chunk": {"i": i}}}
            for i in range(chunks)
        ]
    )
    nodes = handle.surface.nodes
    summarize(handle, nodes[0], nodes[1], sources=list(nodes[:2]))
    say(handle, "last")
    return handle


def test_open_reads_the_surface_and_the_head_never_the_log(store, monkeypatch):
    parsed: list[int] = []
    real = opening.checked_event

    def counting(ctx: Any, sid: str, row: Any) -> Any:
        parsed.append(row[0])
        return real(ctx, sid, row)

    def whole_log(*args: Any) -> Any:
        raise AssertionError("open_session read the whole log")

    monkeypatch.setattr(opening, "checked_event", counting)
    statements = {}
    for sid, chunks in (("short", 10), ("long", 2000)):
        writer = long_session(store, sid, chunks)
        with monkeypatch.context() as patched:
            patched.setattr(opening, "event_rows_in", whole_log)
            patched.setattr(reader, "event_rows_in", whole_log)
            parsed.clear()
            with recorded(store.engine) as rec:
                handle = store.open_session(sid)
            # The head and the surface's events are read and checked; nothing else.
            assert sorted(parsed) == sorted({writer.seq - 1, *writer.surface.nodes})
            assert handle.seq == writer.seq and handle.surface.nodes == writer.surface.nodes
            assert handle.messages() == writer.messages()
            assert len(parsed) == len(writer.surface.nodes)  # the head is on the surface here
            say(handle, "from a fresh handle")
        statements[sid] = [s for s, _ in rec.executed]
        assert all(
            2 in (p.values() if isinstance(p, dict) else p)
            for s, p in rec.executed
            if "LIMIT" in s.upper() and "surface" not in s
        )
        assert store.verify(sid).ok
    # The same reads whatever the length of the log.
    assert statements["short"] == statements["long"]


def test_the_log_is_read_on_first_use_once(store, monkeypatch):
    writer = long_session(store, "s1", 30)
    handle = store.open_session("s1")
    log = handle._log
    assert isinstance(log, StoredLog) and not log.is_read
    reads: list[int] = []
    real = log.fetch

    def fetch(count: int) -> Any:
        reads.append(count)
        return real(count)

    log.fetch = fetch
    say(handle, "before reading")  # appending needs no read
    assert reads == [] and len(handle.events) == writer.seq + 1
    assert list(handle.events)[: writer.seq] == list(writer.events)
    assert handle.request_header() == writer.request_header()
    handle.fork(boundary=3)
    assert reads == [writer.seq] and log.is_read


def test_a_fresh_handle_equals_a_loaded_session(store):
    writer = long_session(store, "s1", 20)
    handle = store.open_session("s1")
    loaded = store.load_session("s1")
    assert view(handle) == view(writer)
    assert handle.first_live_seq == writer.seq
    assert list(handle.events) == list(loaded.events)[:-1]  # load adds its end-of-seed marker
    assert handle.request_header() == loaded.request_header()
    assert handle.surface_messages() == loaded.surface_messages()
    assert handle.messages(last=2) == loaded.messages(last=2)
    child = handle.fork(boundary=5)
    assert list(child.events)[:6] == list(loaded.events)[:6]


def test_a_fresh_handle_applies_every_surface_rule(store):
    writer = store.create_session("s1")
    seqs = tool_turn(writer)
    for _ in range(50):
        chunk(writer, turn=2)
    handle = store.open_session("s1")
    # The tool/result rule looks the shadowed result up: it is on the surface, read at open.
    result = seqs["tool/result"]
    pruned = answer(handle, "c1", "pruned", sources=[result], surface_op=Replace(result, result))
    with refused(store, SurfaceError, handle, match="may change only"):
        answer(handle, "c2", "other", sources=[pruned], surface_op=Replace(pruned, pruned))
    handle.append_many(
        [
            {"type": "user/message", "data": user_message("a"), "surface_op": "append"},
            {
                "type": "surface/removed",
                "data": {"reason": "forget"},
                "surface_op": {"op": "replace", "start": seqs["user"], "end": seqs["user"]},
                "source_event_seqs": [seqs["user"]],
            },
            {"type": "user/message", "data": user_message("b"), "surface_op": "append"},
        ]
    )
    assert store.verify("s1").ok
    assert view(store.open_session("s1")) == view(handle)


def test_verify_and_open_check_the_surface_digest(store):
    writer = long_session(store, "s1", 5)
    s = tables(store).sessions
    row = session_row(store, "s1")
    execute(store, update(s).where(s.c.id == "s1").values(surface_digest=row.surface_digest + 1))
    report = store.verify("s1")
    assert not report.ok
    assert any("surface_digest" in p for p in report.problems), report.problems
    with refused(store, CorruptSessionError, match="surface_digest"):
        store.open_session("s1")
    with refused(store, CorruptSessionError):
        writer.refresh()  # an open handle sees the row disagree with its own state
    execute(store, update(s).where(s.c.id == "s1").values(surface_digest=row.surface_digest))
    assert store.verify("s1").ok
    say(store.open_session("s1"))
    assert store.verify("s1").ok


def test_open_refuses_a_surface_event_that_may_not_be_there(store):
    long_session(store, "s1", 5)
    sf = tables(store).surface
    # A chunk (seq 4 of the tool turn) put on the surface by hand.
    execute(
        store,
        update(sf)
        .where(sf.c.session_key == key_of(store, "s1"), sf.c.pos == 3)
        .values(event_seq=4),
    )
    with refused(store, CorruptSessionError):
        store.open_session("s1")


def test_a_second_open_takes_the_rows_it_checked_before_as_they_were(store, monkeypatch):
    writer = long_session(store, "s1", 20)
    store.open_session("s1")
    checked: list[int] = []
    real = opening.checked_event

    def counting(ctx: Any, sid: str, row: Any) -> Any:
        checked.append(row[0])
        return real(ctx, sid, row)

    monkeypatch.setattr(opening, "checked_event", counting)
    handle = store.open_session("s1")
    assert checked == []  # every row is the one checked at the first open
    assert view(handle) == view(writer)
    say(writer, "new")
    checked.clear()  # view() read the handle's whole log (read_log checks every event)
    handle = store.open_session("s1")
    assert checked == [writer.seq - 1]  # only the new surface event (it is the head too)
    assert view(handle) == view(writer)
    other = store.open_session("s1")
    assert other.messages()[0] is handle.messages()[0]  # kept: the same frozen message
    assert store.verify("s1").ok


@pytest.mark.parametrize(
    "edit",
    [
        {"data": {"id": 5}},  # not a message any more
        {"surface_op": None},  # a surface event without a surfaceOp
        {"type": "x/unknown"},  # a type this store's catalog does not know
        {"time": 2**60},  # beyond the safe integers
    ],
)
def test_an_open_refuses_a_row_changed_since_an_earlier_open(store, edit):
    writer = long_session(store, "s1", 5)
    node = writer.surface.nodes[0]  # not the head: only the surface read finds it
    store.open_session("s1")
    e = tables(store).events
    execute(
        store,
        update(e).where(e.c.session_key == key_of(store, "s1"), e.c.seq == node).values(**edit),
    )
    with refused(store, CorruptSessionError) as info:
        store.open_session("s1")
    assert info.value.seq == node


async def five_chunks_and_a_message(store: Any) -> Any:
    """An async session "s1" of five chunks and a user message (seqs 0-5)."""
    writer = await store.create_session("s1")
    for i in range(5):
        await writer.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"i": i}})
    await writer.append("user/message", user_message("hi"), surface_op="append")
    return writer


def test_async_handle_reads_its_log_with_read_log(backend):
    async def body() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            writer = await five_chunks_and_a_message(store)
            handle = await store.open_session("s1", read_log=False)
            assert handle.messages() == writer.messages()  # no I/O: the surface is in memory
            with pytest.raises(StoreError, match="read_log"):
                list(handle.events)  # on the loop, the unread log cannot be waited for
            await handle.append("user/message", user_message("more"), surface_op="append")
            await handle.read_log()
            assert [e.seq for e in handle.events] == list(range(7))
            assert list(handle.events)[:6] == list(writer.events)
            await handle.read_log()  # nothing left to read

    asyncio.run(body())


def test_async_open_session_gives_the_sync_readers_on_the_loop(backend):
    """SPEC §11.3: the async handle has StoredSession's synchronous readers, so by default
    open_session reads the whole log (awaited) and the readers need no I/O on the loop."""

    async def body() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            writer = await five_chunks_and_a_message(store)
            handle = await store.open_session("s1")
            assert list(handle.events) == list(writer.events)
            assert handle.request_header() == writer.request_header()
            assert handle.fork().messages() == writer.fork().messages()
            await handle.append("user/message", user_message("more"), surface_op="append")
            assert [e.seq for e in handle.events] == list(range(7))

    asyncio.run(body())


# Opens, writes and reads a SQLite store, sync and async, then prints the modules loaded.
SQLITE_ONLY = """
import asyncio, sys
import session_sql

url = sys.argv[1]
store = session_sql.open_store(url)
session = store.create_session()
session.append("todo/write", {"items": []})
session.append_many([{"type": "todo/write", "data": {"n": n}} for n in range(40)])
store.load_session(session.id)
store.messages(session.id)
store.list_sessions()
store.close()

async def main() -> None:
    store = await session_sql.open_async_store(url)
    session = await store.create_session()
    await session.append("todo/write", {"items": []})
    await store.close()

asyncio.run(main())
print(*sorted(sys.modules))
"""


def test_a_sqlite_store_never_imports_psycopg_or_the_postgresql_backend(tmp_path: Path) -> None:
    """Which imports the PostgreSQL backend on first use, so SQLite starts without it."""
    done = subprocess.run(
        [sys.executable, "-c", SQLITE_ONLY, f"sqlite:///{tmp_path / 'store.db'}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "session_sql._store.backends.sqlite.backend" in loaded
    postgresql_only = ("psycopg", "session_sql._store.backends.postgresql.backend")
    postgresql_only += (
        "session_sql._store.backends.postgresql.appending",
        "session_sql._store.backends.postgresql.pool_queue",
    )
    assert [m for m in loaded if m.split(".")[0] == "psycopg" or m in postgresql_only] == []
