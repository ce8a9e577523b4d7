"""Followers are woken after an append commits, never inside its transaction (SPEC §12.2).

A ``NOTIFY`` inside the append would hold PostgreSQL's database-wide notify lock across the
append's durable commit, so appends to different sessions would wait for each other's WAL
flush. The wake-up is a transaction of its own after the commit; these tests check that every
write path still sends it, that a failed or lost wake-up never fails or loses an append (it
costs a follower latency: it finds the events at its next poll), and that nothing is sent
for a payload PostgreSQL would refuse.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from session_sql import ConcurrencyError, SessionStore, open_async_store, open_store
from session_sql._store.backends.postgresql import one_query as pg_appends
from session_sql._store.context import StoreContext

# LISTEN/NOTIFY is PostgreSQL's (a SQLite store's followers poll).
pytestmark = pytest.mark.requires("listen")

ITEMS = [
    {"type": "turn/start", "data": {"turn": 1}},
    {"type": "step/start", "data": {"turn": 1, "step": 1}},
    {"type": "step/end", "data": {"turn": 1, "step": 1}},
]


@pytest.fixture
def pg_url(backend: Any) -> tuple[str, str]:
    return str(backend.url), str(backend.schema)


@pytest.fixture
def store(pg_url: tuple[str, str]) -> Iterator[SessionStore]:
    url, schema = pg_url
    with open_store(url, schema=schema, tenant="acme") as opened:
        yield opened


class Listener:
    """A LISTEN connection of the test's own on the store's channel."""

    def __init__(self, url: str, channel: str) -> None:
        self.conn = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
        self.conn.autocommit = True
        self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def payloads(self, expected: int, timeout: float = 5.0) -> list[list[Any]]:
        got: list[list[Any]] = []
        deadline = time.monotonic() + timeout
        while len(got) < expected and time.monotonic() < deadline:
            for note in self.conn.notifies(timeout=0.2, stop_after=expected - len(got)):
                got.append(json.loads(note.payload))
        return got

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def listener(store: SessionStore, pg_url: tuple[str, str]) -> Iterator[Listener]:
    opened = Listener(pg_url[0], str(store._ctx.channel))
    yield opened
    opened.close()


def _jsonl(store: SessionStore, tmp_path: Path) -> Path:
    handle = store.create_session("exported")
    handle.append_many(ITEMS)
    path = tmp_path / "exported.jsonl"
    store.export_jsonl("exported", path)
    store.delete_session("exported")
    return path


WRITES: dict[str, Callable[[SessionStore, Path], list[list[Any]]]] = {}


def write(name: str) -> Callable[[Any], Any]:
    def register(fn: Any) -> Any:
        WRITES[name] = fn
        return fn

    return register


@write("append (one query)")
def _append(store: SessionStore, tmp_path: Path) -> list[list[Any]]:
    store.create_session("s").append("turn/start", {"turn": 1})
    return [["acme", "s", 0]]


@write("append_many (one query)")
def _append_many(store: SessionStore, tmp_path: Path) -> list[list[Any]]:
    store.create_session("s").append_many(ITEMS)
    return [["acme", "s", 2]]


@write("append_many of a big batch (COPY)")
def _append_big(store: SessionStore, tmp_path: Path) -> list[list[Any]]:
    items = [{"type": "turn/start", "data": {"turn": i}} for i in range(40)]
    store.create_session("s").append_many(items)
    return [["acme", "s", 39]]


@write("append_together (pipeline)")
def _together(store: SessionStore, tmp_path: Path) -> list[list[Any]]:
    a, b = store.create_session("a"), store.create_session("b")
    store.append_together([(a, ITEMS[:1]), (b, ITEMS)])
    return [["acme", "a", 0], ["acme", "b", 2]]


@write("fork (a new session's rows)")
def _fork(store: SessionStore, tmp_path: Path) -> list[list[Any]]:
    store.create_session("p").append_many(ITEMS)
    child = store.fork_session("p", child_id="c")
    return [["acme", "p", 2], ["acme", "c", child.seq - 1]]


@write("import_jsonl")
def _import(store: SessionStore, tmp_path: Path) -> list[list[Any]]:
    path = _jsonl(store, tmp_path)
    store.import_jsonl(path)
    return [["acme", "exported", 2], ["acme", "exported", 2]]


@pytest.mark.parametrize("name", list(WRITES))
def test_every_write_path_wakes_the_followers_after_its_commit(
    name: str, store: SessionStore, listener: Listener, tmp_path: Path
) -> None:
    expected = WRITES[name](store, tmp_path)
    # A notification is delivered only once its transaction has committed; each one names
    # a commit whose events are already readable.
    got = listener.payloads(len(expected))
    assert sorted(got) == sorted(expected)
    for _, session_id, head in got:
        assert store.open_session(session_id).seq > head
    assert listener.payloads(1, timeout=0.3) == []  # one wake-up per commit, no more


def test_the_async_append_wakes_the_followers(
    pg_url: tuple[str, str], store: SessionStore, listener: Listener
) -> None:
    async def run() -> None:
        async with open_async_store(pg_url[0], schema=pg_url[1], tenant="acme") as astore:
            handle = await astore.create_session("s")
            await handle.append("turn/start", {"turn": 1})
            await handle.append_many(ITEMS)

    asyncio.run(run())
    assert listener.payloads(2) == [["acme", "s", 0], ["acme", "s", 3]]


def test_the_one_query_commits_before_it_wakes(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake-up runs after ``COMMIT``, as a transaction of its own that writes nothing."""
    sent: list[str] = []
    real = pg_appends.one_query

    def spy(bind: Any, ctx: StoreContext, part: Any) -> str:
        sent.append(real(bind, ctx, part))
        return sent[-1]

    monkeypatch.setattr(pg_appends, "one_query", spy)
    store.create_session("s").append("turn/start", {"turn": 1})
    [query] = sent
    head, commit, wake = query.rsplit(";", 2)
    assert head.startswith("BEGIN;")
    assert commit == "COMMIT"
    assert wake.startswith("SELECT pg_notify(")
    assert "pg_notify" not in head


def test_appends_send_the_server_no_warning(pg_url: tuple[str, str]) -> None:
    """The one query's block is explicit: a ``COMMIT`` ending an implicit one would commit it
    with a WARNING, which the server logs (a line per append) and sends to the client. A lost
    race fails inside the block, which is rolled back: the connection goes back to the pool
    idle and out of autocommit, and the next append on it works."""
    url, schema = pg_url
    notices: list[str] = []
    with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
        handle = store.create_session("s")
        # By the kept key, on the store's idle connection (opened now, kept apart from the
        # pool): the pool's one connection is then the appends'.
        stale = store.open_session("s")
        raw = store.engine.raw_connection()
        conn = raw.driver_connection
        conn.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
        raw.close()
        handle.append("turn/start", {"turn": 1})
        handle.append_many(ITEMS[1:])
        with pytest.raises(ConcurrencyError):
            stale.append("turn/start", {"turn": 1})
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.autocommit is False
        handle.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        assert store.head_seq("s") == 3
    assert notices == []


def test_a_failed_wake_up_fails_no_append(
    store: SessionStore, listener: Listener, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """PostgreSQL refuses the notification after the append committed (here: a payload over
    its limit): the append succeeds, a warning is logged, and a follower still gets it."""
    ctx: StoreContext = store._ctx
    too_long = [{"b_channel": str(ctx.channel), "b_payload": "x" * 9000}]
    monkeypatch.setattr(
        StoreContext, "wake_notes", lambda self, heads: too_long if list(heads) else []
    )
    handle = store.create_session("s")
    with caplog.at_level(logging.WARNING, logger="session_sql"):
        handle.append("turn/start", {"turn": 1})  # the one query
        handle.append_many([{"type": "turn/start", "data": {"turn": i}} for i in range(40)])
    assert [e.seq for e in store.events("s")] == list(range(41))
    assert sum("waking the followers" in r.getMessage() for r in caplog.records) == 2
    assert handle.append("turn/end", {"turn": 1, "reason": {"kind": "done"}}).seq == 41
    assert listener.payloads(1, timeout=0.5) == []


def test_a_lost_wake_up_costs_latency_never_an_event(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No notification at all (the writer died between its commit and its wake-up): the
    follower still yields every event, in order, at its next poll."""
    monkeypatch.setattr(StoreContext, "wake_notes", lambda self, heads: [])
    handle = store.create_session("s")
    got: list[int] = []

    def follow() -> None:
        got.extend(e.seq for e in store.follow("s", timeout=4.0) if e.seq < 30)

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(0.2)
    for i in range(30):
        handle.append("turn/start", {"turn": i})
    follower.join(timeout=10)
    assert got == list(range(30))
