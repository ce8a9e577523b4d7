"""Many followers of one store share one LISTEN connection (SPEC §12.2).

On PostgreSQL every ``follow`` of a store, sync or async, is woken by the store's one
listening connection: however many follow, the store's server connections stay within its
pool plus that one, every follower still gets every committed event in order, each once,
and a listening connection the server kills costs latency, never an event. SQLite's
followers poll through the pool; the same many-follower run holds there too.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg import sql
from sqlalchemy import Engine, text

from session_sql import StoreError, open_async_store, open_store
from session_sql._store.backends.postgresql import listening

from ..builders import user_message

POOL_SIZE = 2
HUB = 1  # the store's one listening connection, outside the pool
DEADLINE = 25.0  # seconds a follower may take to see the whole log (a failure, not a wait)

_CONNECTIONS = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a")
_LISTENING = text(
    "SELECT pid FROM pg_stat_activity WHERE application_name = :a AND query LIKE 'LISTEN %'"
)


class _Watch:
    """Samples the server's connections of some application_names until stopped: the most
    seen of each."""

    def __init__(self, admin: Engine, *applications: str) -> None:
        self._admin = admin
        self.most = dict.fromkeys(applications, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with self._admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            while not self._stop.is_set():
                for application in self.most:
                    now = int(conn.execute(_CONNECTIONS, {"a": application}).scalar_one())
                    self.most[application] = max(self.most[application], now)
                time.sleep(0.005)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(30)
        return self.most


def _listening(admin: Engine, application: str) -> list[int]:
    with admin.connect() as conn:
        return [int(pid) for pid in conn.execute(_LISTENING, {"a": application}).scalars()]


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class _Crowd:
    """``sync_count`` threads following on a sync store and ``async_count`` tasks following
    on an async store (one event loop in a thread of its own), each recording the seqs it
    got until it has seen ``last`` (or its follow errs or ends)."""

    def __init__(
        self,
        url: str,
        schema: str,
        session_id: str,
        *,
        sync_count: int,
        async_count: int,
        named: bool,
        **options: Any,
    ) -> None:
        self.session_id = session_id
        self.last = -1
        self._last_set = threading.Event()
        self.sync_apps = f"x-hub-sync-{uuid.uuid4().hex[:8]}"
        self.async_apps = f"x-hub-async-{uuid.uuid4().hex[:8]}"
        self._named = named  # connections named by application_name, where there are any
        self.store = open_store(url, schema=schema, **self._named_as(self.sync_apps), **options)
        self.seen: list[list[int]] = [[] for _ in range(sync_count + async_count)]
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._follow_sync, args=(self.seen[i],), daemon=True)
            for i in range(sync_count)
        ]
        self._async_seen = self.seen[sync_count:]
        self.async_store: Any = None
        self._loop_ready = threading.Event()
        self._loop_thread = threading.Thread(
            target=asyncio.run, args=(self._follow_async(url, schema, options),), daemon=True
        )

    def _named_as(self, application: str) -> dict[str, Any]:
        return {"connect_args": {"application_name": application}} if self._named else {}

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self._loop_thread.start()
        assert self._loop_ready.wait(30), "the async store did not open"

    def finish_at(self, last: int) -> None:
        """Followers stop once they have seen ``last``."""
        self.last = last
        self._last_set.set()

    def done(self, seq: int) -> bool:
        return self._last_set.is_set() and seq >= self.last

    def _follow_sync(self, seen: list[int]) -> None:
        try:
            for event in self.store.follow(self.session_id, timeout=DEADLINE):
                seen.append(event.seq)
                if self.done(event.seq):
                    return
        except BaseException as exc:
            self.errors.append(exc)

    async def _follow_async(self, url: str, schema: str, options: dict[str, Any]) -> None:
        store = await open_async_store(
            url, schema=schema, **self._named_as(self.async_apps), **options
        )
        self.async_store = store
        self._loop_ready.set()

        async def follow(seen: list[int]) -> None:
            try:
                async for event in store.follow(self.session_id, timeout=DEADLINE):
                    seen.append(event.seq)
                    if self.done(event.seq):
                        return
            except BaseException as exc:
                self.errors.append(exc)

        try:
            await asyncio.gather(*(follow(seen) for seen in self._async_seen))
        finally:
            await store.close()

    def ctx(self, api: str) -> Any:
        return (self.store if api == "sync" else self.async_store._store)._ctx

    def join(self) -> None:
        for thread in [*self._threads, self._loop_thread]:
            thread.join(DEADLINE + 10)
            assert not thread.is_alive(), "a follower never finished"

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def crowd_factory() -> Iterator[Callable[..., _Crowd]]:
    made: list[_Crowd] = []

    def make(place: Any, **kwargs: Any) -> _Crowd:
        named = place.has("server_sessions")
        crowd = _Crowd(place.url, place.schema, "followed", named=named, **kwargs)
        made.append(crowd)
        return crowd

    yield make
    for crowd in made:
        crowd.close()


def _say(handle: Any, mark: str) -> int:
    return int(handle.append("user/message", user_message(mark, id=mark), surface_op="append").seq)


def _finish(crowd: _Crowd, handle: Any, last: int) -> None:
    """End every follower at ``last`` and wait for them all."""
    crowd.finish_at(last)
    _say(handle, "e-final")  # wakes the followers that waited before finish_at
    crowd.join()


def _every_follower_got_up_to(crowd: _Crowd, last: int) -> None:
    """No follower failed, and each got seqs 0..``last`` in order, each once."""
    assert crowd.errors == []
    for seen in crowd.seen:
        assert seen[: last + 1] == list(range(last + 1))


def test_five_hundred_followers_get_every_event_and_the_store_stays_within_its_pool(
    backend, crowd_factory, request
):
    """500 followers (250 threads on a sync store, 250 tasks on an async one, PostgreSQL;
    fewer on SQLite, whose followers poll) on stores of ``pool_size=2, max_overflow=0``: each
    gets seqs 0..N in order, each once, while a writer appends; on PostgreSQL neither store
    ever has more than its pool's 2 connections plus its one listening connection."""
    half = backend.expect.crowd_half
    writer = open_store(backend.url, schema=backend.schema)
    handle = writer.create_session("followed")
    _say(handle, "e0")
    crowd = crowd_factory(
        backend,
        sync_count=half,
        async_count=half,
        pool_size=POOL_SIZE,
        max_overflow=0,
        max_followers=half,
    )
    watch = None
    if backend.has("server_sessions"):
        watch = _Watch(request.getfixturevalue("postgres_admin"), crowd.sync_apps, crowd.async_apps)
    try:
        crowd.start()
        _eventually(lambda: all(crowd.seen), "every follower got the first event")
        if backend.has("listen"):
            for api in ("sync", "async"):
                assert crowd.ctx(api).followers.held == half
                assert crowd.ctx(api).hub().followers == half
        last = 0
        for i in range(1, 21):
            last = _say(handle, f"e{i}")
            time.sleep(0.01)
        _finish(crowd, handle, last)
    finally:
        most = watch.stop() if watch is not None else {}
        writer.close()
    _every_follower_got_up_to(crowd, last)
    for seen in crowd.seen:
        assert seen == list(range(len(seen)))  # and nothing out of order past it
    if backend.has("server_sessions"):
        assert most[crowd.sync_apps] <= POOL_SIZE + HUB, most
        assert most[crowd.async_apps] <= POOL_SIZE + HUB, most
        assert most[crowd.sync_apps] >= HUB  # the sampler saw the store at all
        assert crowd.ctx("sync").hub().followers == 0


DEFAULT_POOL = 5 + 10  # SQLAlchemy's pool_size and max_overflow
KEPT = 1  # the connection kept for single-statement reads, detached from the pool


def _crowd_of_a_default_store(
    place: Any, crowd_factory: Callable[..., _Crowd], count: int, watch_admin: Engine | None
) -> None:
    """``count`` followers (half threads on a sync store, half tasks on an async one), all
    on stores opened with the default options: each gets every event in order, and on
    PostgreSQL neither store has more connections than its pool's, the kept one and its
    one listening connection (a follower holds none while it waits)."""
    writer = open_store(place.url, schema=place.schema)
    handle = writer.create_session("followed")
    _say(handle, "e0")
    crowd = crowd_factory(place, sync_count=count // 2, async_count=count - count // 2)
    watch = None
    if watch_admin is not None:
        watch = _Watch(watch_admin, crowd.sync_apps, crowd.async_apps)
    try:
        crowd.start()
        _eventually(lambda: all(crowd.seen) or bool(crowd.errors), "every follower started")
        assert crowd.errors == []
        last = 0
        for i in range(1, 4):
            last = _say(handle, f"e{i}")
        _finish(crowd, handle, last)
    finally:
        most = watch.stop() if watch is not None else {}
        writer.close()
    _every_follower_got_up_to(crowd, last)
    for apps, connections in most.items():
        assert HUB <= connections <= DEFAULT_POOL + KEPT + HUB, (apps, most)


def test_forty_followers_of_a_default_store_all_get_the_events(backend, crowd_factory, request):
    """40 follow at once, more than a default pool's 15 connections: none is refused."""
    admin = request.getfixturevalue("postgres_admin") if backend.has("server_sessions") else None
    _crowd_of_a_default_store(backend, crowd_factory, 40, admin)


@pytest.mark.requires("listen")  # the crowd shares one listening connection per store
def test_five_hundred_followers_of_a_default_store_all_get_the_events(
    backend, crowd_factory, postgres_admin
):
    """500 follow at once (250 threads, 250 tasks) with the default options."""
    _crowd_of_a_default_store(backend, crowd_factory, 500, postgres_admin)


@pytest.mark.requires("listen")
def test_a_killed_listening_connection_loses_no_event(backend, crowd_factory, postgres_admin):
    """The server terminates the store's listening connection while 40 followers (sync and
    async) follow: none errs, the store listens again on a new connection, and every
    follower still gets every event, in order, each once."""
    writer = open_store(backend.url, schema=backend.schema)
    handle = writer.create_session("followed")
    _say(handle, "e0")
    crowd = crowd_factory(backend, sync_count=20, async_count=20, max_followers=20)
    try:
        crowd.start()
        _eventually(lambda: all(crowd.seen), "every follower got the first event")
        for i in range(1, 6):
            _say(handle, f"e{i}")
        killed = {}
        for apps in (crowd.sync_apps, crowd.async_apps):
            [pid] = _listening(postgres_admin, apps)
            killed[apps] = pid
            with postgres_admin.connect() as conn:
                assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        last = 0
        for i in range(6, 11):
            last = _say(handle, f"e{i}")  # while the hubs reconnect, or after

        def relistening() -> bool:
            now = {apps: _listening(postgres_admin, apps) for apps in killed}
            return all(len(pids) == 1 and pids != [killed[a]] for a, pids in now.items())

        _eventually(relistening, "each store listens again, on a new connection")
        for i in range(11, 16):
            last = _say(handle, f"e{i}")
            time.sleep(0.01)
        crowd.finish_at(last)
        _say(handle, "e-final")
        crowd.join()
    finally:
        writer.close()
    assert crowd.errors == []
    for seen in crowd.seen:
        assert seen[: last + 1] == list(range(last + 1))
        assert seen == list(range(len(seen)))


@pytest.mark.requires("listen")
def test_a_listening_connection_that_cannot_be_opened_is_the_followers_store_error(
    backend, monkeypatch
):
    """When LISTEN fails, the follower gets a session_sql ``StoreError`` at its first step and
    gives its slot back; the next follow tries afresh."""
    with open_store(backend.url, schema=backend.schema) as store:
        handle = store.create_session("followed")
        _say(handle, "e0")
        real = listening.listen_statement
        monkeypatch.setattr(listening, "listen_statement", lambda _channel: sql.SQL("LISTEN ("))
        with pytest.raises(StoreError):
            next(store.follow("followed", timeout=5))
        assert store._ctx.followers.held == 0
        assert store._ctx.hub().followers == 0
        monkeypatch.setattr(listening, "listen_statement", real)
        follower: Any = store.follow("followed", timeout=5)
        assert next(follower).seq == 0
        _say(handle, "e1")
        assert next(follower).seq == 1
        follower.close()
