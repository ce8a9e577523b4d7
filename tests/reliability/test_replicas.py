"""Read replicas (SPEC §12.2): ``open_store(url, replica_urls=[...])`` on a hot standby.

A throwaway primary and a hot standby streaming from it (``pg_basebackup -R``) are started
once for the module, never the shared test server. Pausing the standby's replay
(``pg_wal_replay_pause``) makes its lag visible: the store-level reads then return the
state before the pause, while the write handles, the writes and the gate, which go to the
primary, are current; a handle reads its own writes. ``follow`` on such a store listens on
the primary (a standby cannot LISTEN) and reads the standby: across a pause and a resume of
the replay it yields every event once, in order. SQLite refuses the option.
"""

from __future__ import annotations

import asyncio
import io
import os
import queue
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from session_sql import (
    ConfigurationError,
    SessionNotFoundError,
    SessionStore,
    StoreError,
    open_async_store,
    open_store,
)
from session_sql._store.backends.postgresql import listening
from session_sql._store.following import (
    CATCH_UP_MAX,
    POLL_MAX,
    Follower,
    Read,
    Sleep,
    Wait,
    payload,
)

from .conftest import _free_port, _postgres_bin, shared_temp_dir, stop_cluster, unavailable
from .reliability_builders import user_message

CATCH_UP = 30.0
"""How long a test waits for the standby to replay what the primary committed."""


@dataclass(frozen=True)
class Replicated:
    """A primary and its hot standby, with an admin engine on each."""

    primary_url: str
    standby_url: str
    primary: Engine
    standby: Engine

    def caught_up(self) -> None:
        """Wait until the standby has replayed everything the primary has committed."""
        with self.primary.connect() as conn:
            lsn = conn.execute(text("SELECT pg_current_wal_lsn()")).scalar()
        deadline = time.monotonic() + CATCH_UP
        while time.monotonic() < deadline:
            with self.standby.connect() as conn:
                done = conn.execute(
                    text("SELECT pg_last_wal_replay_lsn() >= CAST(:lsn AS pg_lsn)"), {"lsn": lsn}
                ).scalar()
            if done:
                return
            time.sleep(0.02)
        raise AssertionError(f"the standby did not replay up to {lsn} in {CATCH_UP}s")

    def pause(self) -> None:
        """Pause the standby's replay (and wait until it is paused)."""
        with self.standby.connect() as conn:
            conn.execute(text("SELECT pg_wal_replay_pause()"))
            deadline = time.monotonic() + CATCH_UP
            while conn.execute(text("SELECT pg_get_wal_replay_pause_state()")).scalar() != (
                "paused"
            ):
                assert time.monotonic() < deadline, "the standby's replay did not pause"
                time.sleep(0.01)

    def resume(self) -> None:
        with self.standby.connect() as conn:
            conn.execute(text("SELECT pg_wal_replay_resume()"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Replicated]:
    """A primary (initdb, pg_ctl) and a hot standby of it (``pg_basebackup -R``), streaming.

    As root, both run as the ``postgres`` OS user. Stopped and deleted after the module.
    """
    bin_dir = _postgres_bin()
    if bin_dir is None:
        unavailable("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    base = shared_temp_dir("session_sql_replica_")  # the servers' user must reach it
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    pg_ctl = str(bin_dir / "pg_ctl")
    started: list[Path] = []

    def run(*args: str, log: Path | None = None) -> None:
        done = subprocess.run(
            [*as_user, *args], check=False, timeout=120, capture_output=True, text=True
        )
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip()}\n{tail}")

    def start(data: Path, port: int) -> None:
        log = base / f"{data.name}.log"
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(pg_ctl, "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start")
        started.append(data)

    primary_port, standby_port = _free_port(), _free_port()
    while standby_port == primary_port:
        standby_port = _free_port()
    engines: list[Engine] = []
    try:
        primary_data, standby_data = base / "primary", base / "standby"
        run(
            str(bin_dir / "initdb"),
            *("-D", str(primary_data), "-U", "postgres", "-A", "trust", "--no-sync"),
        )
        # initdb's trust rules already let local replication connections in.
        start(primary_data, primary_port)
        run(
            str(bin_dir / "pg_basebackup"),
            *("-D", str(standby_data), "-h", "127.0.0.1", "-p", str(primary_port)),
            *("-U", "postgres", "-R", "-X", "stream", "-c", "fast"),
        )
        start(standby_data, standby_port)
        url = "postgresql+psycopg://postgres@127.0.0.1:{}/postgres"
        primary_url, standby_url = url.format(primary_port), url.format(standby_port)
        primary = create_engine(primary_url, isolation_level="AUTOCOMMIT")
        standby = create_engine(standby_url, isolation_level="AUTOCOMMIT")
        engines += [primary, standby]
        deadline = time.monotonic() + 60
        while True:
            with primary.connect() as conn:
                state = conn.execute(
                    text("SELECT state FROM pg_stat_replication WHERE state = 'streaming'")
                ).scalar()
            if state == "streaming":
                break
            assert time.monotonic() < deadline, "the standby is not streaming"
            time.sleep(0.05)
        with standby.connect() as conn:
            assert conn.execute(text("SELECT pg_is_in_recovery()")).scalar() is True
        cluster = Replicated(primary_url, standby_url, primary, standby)
        yield cluster
        cluster.resume()  # a failed test may have left the replay paused
    finally:
        for engine in engines:
            engine.dispose()
        for data in reversed(started):
            stop_cluster(as_user, pg_ctl, data)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def replicated(cluster: Replicated) -> Iterator[Replicated]:
    """The module's cluster, its replay running again after the test whatever happened."""
    yield cluster
    cluster.resume()


@pytest.fixture
def schema(cluster: Replicated) -> Iterator[str]:
    """A schema of this test alone on the primary (and so on the standby), dropped after."""
    name = f"r_{uuid.uuid4().hex}"
    yield name
    with cluster.primary.connect() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))


def say(text_: str) -> dict[str, Any]:
    return user_message(text_, id=text_)


def texts(messages: list[Any]) -> list[str]:
    return [m["content"][0]["text"] for m in messages]


def in_recovery(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT pg_is_in_recovery()")).scalar())


pytestmark = pytest.mark.postgresql


# -- where the calls go ---------------------------------------------------------------------


def _reads(store: SessionStore, session_id: str) -> dict[str, Any]:
    """What every read-only call of the store returns for ``session_id`` (and the store)."""
    out = io.StringIO()
    exported = store.export_jsonl(session_id, out)
    stats = store.stats()
    return {
        "messages": texts(store.messages(session_id)),
        "messages_last": texts(store.messages(session_id, last=5)),
        "surface_messages": [m.seq for m in store.surface_messages(session_id)],
        "surface_messages_last": [m.seq for m in store.surface_messages(session_id, last=1)],
        "surface": store.surface(session_id),
        "events": [e.seq for e in store.events(session_id)],
        "load_session": store.load_session(session_id).seq,
        "list_sessions": sorted(i.id for i in store.list_sessions()),
        "iter_sessions": sorted(i.id for i in store.iter_sessions()),
        "export_jsonl": (exported, out.getvalue().count("\n")),
        "stats": (stats.sessions, stats.events),
    }


def test_store_reads_come_from_the_standby_and_see_its_lag(
    replicated: Replicated, schema: str
) -> None:
    store = open_store(replicated.primary_url, schema=schema, replica_urls=[replicated.standby_url])
    plain = open_store(replicated.primary_url, schema=schema)  # the primary's view
    try:
        ctx = store._ctx
        assert in_recovery(ctx.read_engine()) is True
        assert in_recovery(ctx.engine) is False  # the primary: writes, gate, handles
        handle = store.create_session("s1", user_id="u")
        handle.append("user/message", say("one"), surface_op="append")
        replicated.caught_up()
        before = _reads(store, "s1")
        assert before == _reads(plain, "s1")
        assert before["messages"] == ["one"]

        replicated.pause()
        handle.append("user/message", say("two"), surface_op="append")
        store.create_session("s2")
        # Every read-only call is served by the standby: the state before the pause, while
        # the primary has moved on.
        assert _reads(store, "s1") == before
        now = _reads(plain, "s1")
        assert now["messages"] == ["one", "two"]
        assert now["list_sessions"] == ["s1", "s2"]
        for call, value in now.items():
            assert value != before[call], call
        with pytest.raises(SessionNotFoundError):
            store.messages("s2")  # created on the primary, not replayed yet
        # The write handle, the primary's reads and a newly opened handle are current.
        assert texts(handle.messages()) == ["one", "two"]
        assert store.head_seq("s1") == handle.seq - 1
        assert store.session_info("s2").id == "s2"
        assert texts(store.open_session("s1").messages()) == ["one", "two"]

        replicated.resume()
        replicated.caught_up()
        assert _reads(store, "s1") == now
    finally:
        plain.close()
        store.close()


def test_a_write_handle_reads_its_own_writes_while_the_standby_lags(
    replicated: Replicated, schema: str
) -> None:
    store = open_store(replicated.primary_url, schema=schema, replica_urls=[replicated.standby_url])
    other = open_store(replicated.primary_url, schema=schema)  # a second writer
    try:
        handle = store.create_session("s")
        replicated.caught_up()
        replicated.pause()
        for i in range(5):
            handle.append("user/message", say(f"m{i}"), surface_op="append")
            assert texts(handle.messages())[-1] == f"m{i}"
            assert handle.seq == i + 1
        # Another writer's commit: the handle's refresh reads it from the primary.
        theirs = other.open_session("s")
        theirs.append("user/message", say("theirs"), surface_op="append")
        assert [e.data["id"] for e in handle.refresh()] == ["theirs"]
        assert texts(handle.messages()) == [*(f"m{i}" for i in range(5)), "theirs"]
        assert handle.seq == 6
        handle.append("user/message", say("after"), surface_op="append")  # at the head
        reopened = store.open_session("s")
        assert reopened.seq == 7
        assert [e.seq for e in reopened.events] == list(range(7))
        assert store.messages("s") == []  # the standby: still before the pause
    finally:
        other.close()
        store.close()


def test_writes_and_the_gate_go_to_the_primary(replicated: Replicated, schema: str) -> None:
    """A standby that cannot be reached at all (a closed port) does not stop a store from
    opening, creating its schema, or writing: only the store-level reads need it."""
    unreachable = f"postgresql://postgres@127.0.0.1:{_free_port()}/postgres?connect_timeout=2"
    store = open_store(replicated.primary_url, schema=schema, replica_urls=[unreachable])
    try:
        handle = store.create_session("s", title="t")
        handle.append("user/message", say("one"), surface_op="append")
        store.update_session("s", labels={"k": "v"})
        assert store.head_seq("s") == 0
        assert store.session_info("s").labels == {"k": "v"}
        assert store.verify("s").ok
        store.delete_session("s")
        with pytest.raises(StoreError):
            store.list_sessions()  # served by the standby, which is not there
    finally:
        store.close()
    # The schema the gate created on the primary reached the standby by replication.
    replicated.caught_up()
    with replicated.standby.connect() as conn:
        found = conn.execute(
            text("SELECT count(*) FROM information_schema.tables WHERE table_schema = :s"),
            {"s": schema},
        ).scalar()
    assert found
    # The gate runs on the primary: a schema missing there is refused, whatever the standby.
    with pytest.raises(StoreError):
        open_store(
            replicated.primary_url,
            schema=f"missing_{uuid.uuid4().hex[:8]}",
            create=False,
            replica_urls=[replicated.standby_url],
        )


def test_replicas_take_turns(replicated: Replicated, schema: str) -> None:
    """Two replica URLs (here the same standby twice): the reads alternate between them."""
    store = open_store(
        replicated.primary_url,
        schema=schema,
        replica_urls=[replicated.standby_url, replicated.standby_url],
    )
    try:
        ctx = store._ctx
        assert len(ctx.replicas) == 2
        picked = {id(ctx.read_engine()) for _ in range(4)}
        assert picked == {id(r) for r in ctx.replicas}
        assert ctx.engine not in ctx.replicas
    finally:
        store.close()
    with pytest.raises(StoreError):
        store.list_sessions()  # closed: the standbys' pools too


# -- follow ---------------------------------------------------------------------------------


def _collect(store: SessionStore, session_id: str, out: queue.Queue[Any]) -> None:
    try:
        for event in store.follow(session_id, timeout=20):
            out.put(event.seq)
            if event.type == "user/message" and event.data["id"] == "stop":
                break
    except BaseException as exc:
        out.put(exc)


def _take(out: queue.Queue[Any], count: int, within: float = 15.0) -> list[int]:
    seqs: list[int] = []
    deadline = time.monotonic() + within
    while len(seqs) < count:
        item = out.get(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(item, BaseException):
            raise item
        seqs.append(item)
    return seqs


def _quiet(out: queue.Queue[Any], seconds: float) -> None:
    """Nothing arrives for ``seconds``."""
    with pytest.raises(queue.Empty):
        item = out.get(timeout=seconds)
        raise AssertionError(f"unexpected delivery: {item!r}")


def _follow_across_a_pause(
    replicated: Replicated,
    writer: SessionStore,
    start: Callable[[queue.Queue[Any]], threading.Thread],
) -> None:
    handle = writer.create_session("f")
    replicated.caught_up()
    out: queue.Queue[Any] = queue.Queue()
    thread = start(out)
    time.sleep(0.2)  # (it may start after the first appends: it reads them first then)
    for i in range(3):
        handle.append("user/message", say(f"a{i}"), surface_op="append")
    assert _take(out, 3) == [0, 1, 2]

    replicated.pause()
    for i in range(4):
        handle.append("user/message", say(f"b{i}"), surface_op="append")
    # The primary's NOTIFY names heads the standby has not replayed: nothing yet, no error.
    _quiet(out, 0.5)
    replicated.resume()
    assert _take(out, 4) == [3, 4, 5, 6]

    replicated.pause()
    handle.append("user/message", say("c"), surface_op="append")
    _quiet(out, 0.3)
    replicated.resume()
    handle.append("user/message", say("stop"), surface_op="append")
    assert _take(out, 2) == [7, 8]
    thread.join(10)
    assert not thread.is_alive()
    assert out.empty()  # no duplicate came after


def test_follow_on_the_standby_yields_every_event_once_across_a_paused_replay(
    replicated: Replicated, schema: str
) -> None:
    store = open_store(replicated.primary_url, schema=schema, replica_urls=[replicated.standby_url])
    writer = open_store(replicated.primary_url, schema=schema)
    try:

        def start(out: queue.Queue[Any]) -> threading.Thread:
            thread = threading.Thread(target=_collect, args=(store, "f", out), daemon=True)
            thread.start()
            return thread

        _follow_across_a_pause(replicated, writer, start)
        assert store._ctx.hub().followers == 0  # it listened on the primary, and left
    finally:
        writer.close()
        store.close()


def test_follow_polls_the_standby_when_the_primary_cannot_listen(
    replicated: Replicated, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's LISTEN connection cannot be opened (as when the primary is unreachable):
    a follower of a store with replicas polls the standby instead of failing."""

    def refuse(_self: Any) -> Any:
        from session_sql.errors import TransientStoreError

        raise TransientStoreError("database connection unavailable: refused for the test")

    store = open_store(replicated.primary_url, schema=schema, replica_urls=[replicated.standby_url])
    writer = open_store(replicated.primary_url, schema=schema)
    try:
        monkeypatch.setattr(listening._Runner, "_connect", refuse)

        def start(out: queue.Queue[Any]) -> threading.Thread:
            thread = threading.Thread(target=_collect, args=(store, "f", out), daemon=True)
            thread.start()
            return thread

        _follow_across_a_pause(replicated, writer, start)
        # A store without replicas reports the failure, as before.
        with pytest.raises(StoreError, match="refused for the test"):
            next(writer.follow("f", timeout=1))
    finally:
        writer.close()
        store.close()


# -- the async store ------------------------------------------------------------------------


def test_the_async_store_reads_the_standby_and_its_handles_read_their_writes(
    replicated: Replicated, schema: str
) -> None:
    async def main() -> None:
        async with open_async_store(
            replicated.primary_url, schema=schema, replica_urls=[replicated.standby_url]
        ) as store:
            assert store._store._ctx.replicas
            handle = await store.create_session("s")
            await handle.append("user/message", say("one"), surface_op="append")
            await asyncio.to_thread(replicated.caught_up)
            assert texts(await store.messages("s")) == ["one"]
            await asyncio.to_thread(replicated.pause)
            await handle.append("user/message", say("two"), surface_op="append")
            assert texts(handle.messages()) == ["one", "two"]
            assert await handle.refresh() == []
            assert texts(await store.messages("s")) == ["one"]  # the standby
            assert texts(await store.messages("s", last=2)) == ["one"]
            assert [e.seq async for e in await store.events("s")] == [0]
            assert [i.id async for i in await store.iter_sessions()] == ["s"]
            assert len((await store.load_session("s")).messages()) == 1
            assert (await store.stats()).events == 1
            assert await store.head_seq("s") == 1  # the primary
            reopened = await store.open_session("s")
            assert texts(reopened.messages()) == ["one", "two"]
            await asyncio.to_thread(replicated.resume)
            await asyncio.to_thread(replicated.caught_up)
            assert texts(await store.messages("s")) == ["one", "two"]

    asyncio.run(main())


def test_the_async_follow_on_the_standby_yields_every_event_once(
    replicated: Replicated, schema: str
) -> None:
    writer = open_store(replicated.primary_url, schema=schema)

    def start(out: queue.Queue[Any]) -> threading.Thread:
        async def follow() -> None:
            async with open_async_store(
                replicated.primary_url, schema=schema, replica_urls=[replicated.standby_url]
            ) as store:
                try:
                    async for event in store.follow("f", timeout=20):
                        out.put(event.seq)
                        if event.type == "user/message" and event.data["id"] == "stop":
                            break
                except BaseException as exc:
                    out.put(exc)

        thread = threading.Thread(target=asyncio.run, args=(follow(),), daemon=True)
        thread.start()
        return thread

    try:
        _follow_across_a_pause(replicated, writer, start)
    finally:
        writer.close()


# -- refused --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "says"),
    [
        (["postgresql://postgres@127.0.0.1/postgres"], "SQLite store has no standbys"),
        ("postgresql://postgres@127.0.0.1/postgres", "must be a list"),
    ],
)
def test_sqlite_refuses_replica_urls(tmp_path: Path, replicas: Any, says: str) -> None:
    path = tmp_path / "s.db"
    with pytest.raises(ConfigurationError, match=says) as caught:
        open_store(f"sqlite:///{path}", replica_urls=replicas)
    assert caught.value.option == "replica_urls"
    assert not path.exists()  # refused before anything was opened

    async def main() -> None:
        with pytest.raises(ConfigurationError, match=says) as raised:
            await open_async_store(f"sqlite:///{path}", replica_urls=replicas)
        assert raised.value.option == "replica_urls"

    asyncio.run(main())


def test_a_replica_url_must_be_postgresql(cluster: Replicated, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"replica_urls\[1\] must be a postgresql") as e:
        open_store(
            cluster.primary_url,
            replica_urls=[cluster.standby_url, f"sqlite:///{tmp_path / 's.db'}"],
        )
    assert e.value.option == "replica_urls"


# -- the follower's catch-up, step by step (no database) -------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_follower_reading_a_standby_reads_again_until_it_reaches_the_head_it_was_told() -> None:
    clock = _Clock()
    machine = Follower("s", "", 2, None, listening=True, lagging=True, clock=clock)
    assert machine.start() == Read(2)
    assert isinstance(machine.read(None), Wait)  # nothing new, nothing announced: wait
    # Wake-ups from the primary name heads 4, then 6: every one is looked at.
    assert machine.wakes(payload("", "s", 4)) is True
    assert machine.wakes(payload("", "s", 6)) is True
    assert not machine.wakes(payload("", "other", 9))
    assert machine.told == 6
    assert machine.waited() == Read(2)
    # The standby has not replayed them: read again soon, with the polling backoff.
    first = machine.read(None)
    assert isinstance(first, Sleep)
    assert first.seconds <= POLL_MAX
    assert machine.waited() == Read(2)
    assert machine.read(4) == Read(4)  # part of it replayed: read on at once
    assert isinstance(machine.read(None), Sleep)  # still behind head 6
    assert machine.read(6) == Read(6)
    assert isinstance(machine.read(None), Wait)  # caught up: wait for the next wake-up
    # A head that never comes (the session recreated shorter): polled for CATCH_UP_MAX at most.
    assert machine.wakes(payload("", "s", 50)) is True
    assert isinstance(machine.read(None), Sleep)
    clock.now += CATCH_UP_MAX + 1
    assert isinstance(machine.read(None), Wait)


def test_a_follower_of_the_primary_waits_as_before() -> None:
    machine = Follower("s", "", -1, None, listening=True, clock=_Clock())
    machine.start()
    assert machine.wakes(payload("", "s", 3)) is True
    assert isinstance(machine.read(None), Wait)


def test_every_pending_note_reaches_the_follower() -> None:
    """A follower's mailbox shows it every notification, not only up to the first that wakes
    it, so a follower reading a standby knows the newest head."""
    waiter = listening._Waiter("s", None)
    for head in (3, 7, 5):
        waiter.deliver(payload("", "s", head))
    machine = Follower("s", "", 0, None, listening=True, lagging=True, clock=_Clock())
    assert waiter.take(machine.wakes) is True
    assert machine.told == 7
