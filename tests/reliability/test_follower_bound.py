"""Followers are bounded: ``max_followers`` per store; their connection is one, shared.

On PostgreSQL every ``follow`` iterator of a store is woken by the store's one ``LISTEN``
connection, outside the pool, so the store's connections stay its pool's plus one however
many follow. The bound catches leaked iterators: one follower past it fails at its first
step with ``StoreError`` naming the bound and how to raise it; a follower that ends (closed,
collected, its store closed) gives its slot back, and one whose listening connection the
server ended carries on. SQLite's followers poll through the pool: no bound applies.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text

from session_sql import (
    ConfigurationError,
    PermanentStoreError,
    StoreError,
    open_async_store,
    open_store,
)

from .reliability_builders import user_message

POOL_SIZE = 2
MAX_OVERFLOW = 1
BOUND = 3  # the max_followers these tests set (the default, 10,000, is not the pool's)
# The pool's connections and the one kept for single-statement reads (engine.IdleConnection).
POOL_BOUND = POOL_SIZE + MAX_OVERFLOW + 1
LISTENING = 1  # the store's one listening connection, whatever the number of followers

_CONNECTIONS = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a")
_LISTENING = text(
    "SELECT pid FROM pg_stat_activity WHERE application_name = :a AND query LIKE 'LISTEN %'"
)


class _Followers:
    """One store, sync or async, driven step by step from the test (an event loop of its own
    for the async store), so one test body holds both APIs."""

    def __init__(self, api: str, url: str, schema: str, **options: Any) -> None:
        self.closed = False
        self.loop = asyncio.new_event_loop() if api == "async" else None
        if self.loop is None:
            self.store: Any = open_store(url, schema=schema, **options)
        else:
            try:
                self.store = self.run(open_async_store(url, schema=schema, **options))
            except BaseException:
                self.loop.close()
                raise

    def run(self, awaitable: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(awaitable)

    def follow(self, session_id: str, after_seq: int = -1) -> Any:
        return self.store.follow(session_id, after_seq=after_seq, timeout=30)

    def step(self, follower: Any) -> Any:
        return next(follower) if self.loop is None else self.run(anext(follower))

    def end(self, follower: Any) -> None:
        if self.loop is None:
            follower.close()
        else:
            self.run(follower.aclose())

    def settle(self) -> None:
        """Let the loop run the finalizers of collected async iterators."""
        if self.loop is not None:
            self.run(asyncio.sleep(0.05))

    @property
    def held(self) -> int:
        inner = self.store if self.loop is None else self.store._store
        return int(inner._ctx.followers.held)

    def close(self) -> None:
        """Close the store (its followers stay, to be stepped); again: nothing."""
        if self.closed:
            return
        self.closed = True
        if self.loop is None:
            self.store.close()
        else:
            self.run(self.store.close())

    def dispose(self) -> None:
        self.close()
        if self.loop is not None:
            self.run(self.loop.shutdown_asyncgens())
            self.loop.close()


class _Watch:
    """Samples the server's connections of one application_name until stopped: the most seen."""

    def __init__(self, admin: Engine, application: str) -> None:
        self._admin = admin
        self._application = application
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        # Autocommit: pg_stat_activity is read once per transaction.
        with self._admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            while not self._stop.is_set():
                now = conn.execute(_CONNECTIONS, {"a": self._application}).scalar_one()
                self.most = max(self.most, int(now))
                time.sleep(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        return self.most


def _listening(admin: Engine, application: str) -> list[int]:
    with admin.connect() as conn:
        return [int(pid) for pid in conn.execute(_LISTENING, {"a": application}).scalars()]


def _wait_for_listeners(admin: Engine, application: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(_listening(admin, application)) != count:
        assert time.monotonic() < deadline, f"expected {count} listening connection(s)"
        time.sleep(0.01)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def application() -> str:
    return f"x-follow-bound-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def watched(postgres_admin: Engine, application: str) -> Iterator[_Watch]:
    watch = _Watch(postgres_admin, application)
    yield watch
    watch.stop()


def _say(handle: Any, mark: str) -> None:
    handle.append("user/message", user_message(mark, id=mark), surface_op="append")


@pytest.mark.postgresql
def test_one_follower_past_the_bound_fails_clearly_and_connections_stay_bounded(
    pg_backend, postgres_admin, application, watched, api
):
    """With ``max_followers=3``: three followers listen on one
    connection, a fourth is refused naming the bound, and the store's connections never
    exceed the pool's plus that one; closed and collected followers give their slots back,
    and followers whose listening connection the server ended carry on."""
    writer = open_store(pg_backend.url, schema=pg_backend.schema)
    handle = writer.create_session("watched")
    _say(handle, "e0")
    followers = _Followers(
        api,
        pg_backend.url,
        pg_backend.schema,
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
        max_followers=BOUND,
        connect_args={"application_name": application},
    )
    try:
        for _round in range(2):  # the slots come back: the same again after closing
            held = [followers.follow("watched") for _ in range(BOUND)]
            assert [followers.step(f).seq for f in held] == [0] * BOUND
            _wait_for_listeners(postgres_admin, application, LISTENING)
            one_more = followers.follow("watched")
            with pytest.raises(StoreError) as refused:
                followers.step(one_more)
            assert f"max_followers={BOUND}" in str(refused.value)
            assert "larger max_followers" in str(refused.value)
            assert len(_listening(postgres_admin, application)) == LISTENING
            assert followers.held == BOUND
            for follower in held:
                followers.end(follower)
            _wait_for_listeners(postgres_admin, application, 0)
            assert followers.held == 0

        # Collected without being closed: the slot comes back all the same.
        collected = followers.follow("watched")
        assert followers.step(collected).seq == 0
        del collected
        gc.collect()
        followers.settle()
        _wait_for_listeners(postgres_admin, application, 0)
        assert followers.held == 0

        # Broken: the server ends the listening connection; the store listens again on a new
        # one and every follower gets the next event, keeping its slot.
        held = [followers.follow("watched") for _ in range(BOUND)]
        assert [followers.step(f).seq for f in held] == [0] * BOUND
        _wait_for_listeners(postgres_admin, application, LISTENING)
        [ended] = _listening(postgres_admin, application)
        with postgres_admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": ended})
        _say(handle, "e1")
        assert [followers.step(f).seq for f in held] == [1] * BOUND
        assert followers.held == BOUND
        deadline = time.monotonic() + 30
        while _listening(postgres_admin, application) in ([], [ended]):
            assert time.monotonic() < deadline, "the store never listened again"
            time.sleep(0.01)

        # The store closed: its followers fail at their next step and give their slots back.
        followers.close()
        _say(handle, "e2")
        for follower in held:
            with pytest.raises(StoreError):
                followers.step(follower)
        _wait_for_listeners(postgres_admin, application, 0)
    finally:
        followers.dispose()
        writer.close()
    assert watched.stop() <= POOL_BOUND + LISTENING


@pytest.mark.postgresql
def test_max_followers_sets_the_bound(pg_backend, postgres_admin, application, watched, api):
    """``max_followers`` lowers the default; the refusal names the value given."""
    writer = open_store(pg_backend.url, schema=pg_backend.schema)
    _say(writer.create_session("watched"), "e0")
    followers = _Followers(
        api,
        pg_backend.url,
        pg_backend.schema,
        pool_size=1,
        max_overflow=0,
        max_followers=2,
        connect_args={"application_name": application},
    )
    try:
        held = [followers.follow("watched") for _ in range(2)]
        assert [followers.step(f).seq for f in held] == [0, 0]
        with pytest.raises(PermanentStoreError, match="max_followers=2"):
            followers.step(followers.follow("watched"))
        for follower in held:
            followers.end(follower)
        assert followers.held == 0
    finally:
        followers.dispose()
        writer.close()
    assert watched.stop() <= 1 + 1 + LISTENING


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "3"])
def test_a_bad_max_followers_is_refused_on_both_backends(backend, value, request):
    """Checked on SQLite too (where it does not apply), so a URL switch never turns a bad
    setting into an error; refused before any file or schema is created."""
    with pytest.raises(ConfigurationError, match="max_followers") as refused:
        open_store(backend.url, schema=backend.schema, max_followers=value)
    assert refused.value.option == "max_followers"
    if backend.has("file"):
        assert not backend.path.exists()
    else:
        admin: Engine = request.getfixturevalue("postgres_admin")
        with admin.connect() as conn:
            assert not inspect(conn).has_schema(backend.schema)


def test_sqlite_followers_poll_through_the_pool_and_are_not_bounded(tmp_path):
    """SQLite's followers hold no connection of their own, so ``max_followers`` bounds none."""
    with open_store(f"sqlite:///{tmp_path / 's.db'}", max_followers=1) as store:
        _say(store.create_session("watched"), "e0")
        held = [store.follow("watched", timeout=5) for _ in range(4)]
        assert [next(f).seq for f in held] == [0] * 4
        assert store._ctx.followers.held == 0
        for follower in held:
            follower.close()
