"""The store behind PgBouncer in transaction mode (docs/operations.md, "Behind PgBouncer").

A PgBouncer of this module alone (a temp directory, a free port, transaction pooling, one
server connection per database and user) stands in front of the test server. With psycopg's
prepared statements turned off (``connect_args={"prepare_threshold": None}``) every write and
read works, tenants included (the store names its tenant per transaction); ``follow`` cannot
LISTEN through the proxy and still yields every event, at the polling interval. With prepared
statements on, the first clash is a ``PermanentStoreError`` that says what to change.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.schema import DropSchema

from session_sql import PermanentStoreError, open_async_store, open_store

from .conftest import _free_port, unavailable
from .reliability_builders import user_message

pytestmark = pytest.mark.postgresql

NO_PREPARE = {"connect_args": {"prepare_threshold": None}}


def _pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


@pytest.fixture(scope="module")
def bouncer(postgres_admin: Engine) -> Iterator[str]:
    """The URL of a transaction-pooling PgBouncer in front of the test server's database."""
    binary = _pgbouncer()
    if binary is None:
        unavailable("PgBouncer is not installed (Debian package pgbouncer)")
    upstream = make_url(postgres_admin.url)
    user = upstream.username or "postgres"
    base = Path(tempfile.mkdtemp(prefix="session_sql_pgbouncer_"))
    port = _free_port()
    (base / "users.txt").write_text(f'"{user}" ""\n')
    (base / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{upstream.database} = host={upstream.host or '127.0.0.1'} "
        f"port={upstream.port or 5432} dbname={upstream.database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {base / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 1\nmax_client_conn = 100\n"
        f"logfile = {base / 'pgbouncer.log'}\npidfile = {base / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    as_user: list[str] = []
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        shutil.chown(base, "postgres", "postgres")
        for name in ("users.txt", "pgbouncer.ini"):
            shutil.chown(base / name, "postgres", "postgres")
        as_user = ["-u", "postgres"]
    started = subprocess.run(
        [binary, "-d", *as_user, str(base / "pgbouncer.ini")],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if started.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise RuntimeError(f"pgbouncer did not start: {started.stderr.strip()}")
    try:
        deadline = time.monotonic() + 10
        while not (base / "pgbouncer.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"postgresql+psycopg://{user}@127.0.0.1:{port}/{upstream.database}"
    finally:
        pid_file = base / "pgbouncer.pid"
        if pid_file.exists():
            subprocess.run(["kill", pid_file.read_text().strip()], check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def schema(postgres_admin: Engine) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex}"
    yield name
    with postgres_admin.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(name, cascade=True, if_exists=True))


def test_every_call_works_without_prepared_statements(bouncer: str, schema: str) -> None:
    with (
        open_store(bouncer, schema=schema, **NO_PREPARE) as one,
        open_store(bouncer, schema=schema, **NO_PREPARE) as two,
    ):
        a = one.create_session("s1", labels={"team": "x"})
        b = two.open_session("s1")
        for n in range(30):  # two clients, one server connection: every statement moves
            handle = a if n % 2 == 0 else b
            handle.refresh()
            handle.append("user/message", user_message(f"m{n}", id=f"m{n}"), surface_op="append")
            assert len((one if n % 2 else two).messages("s1")) == n + 1
        b.refresh()
        b.append_many([{"type": "session/title", "data": {"title": "t"}}] * 3)
        assert [e.seq for e in one.events("s1")] == list(range(33))
        assert [i.id for i in two.list_sessions(labels={"team": "x"})] == ["s1"]
        assert one.verify("s1").ok
        assert one.fork_session("s1", child_id="c").seq == 34
        assert two.stats().sessions == 2


def test_tenants_stay_apart_through_the_proxy(bouncer: str, schema: str) -> None:
    with open_store(bouncer, schema=schema, **NO_PREPARE) as default:
        default.create_session("shared-id")
    with (
        open_store(bouncer, schema=schema, tenant="acme", **NO_PREPARE) as acme,
        open_store(bouncer, schema=schema, **NO_PREPARE) as default,
    ):
        mine = acme.create_session("shared-id", title="acme's")
        for n in range(10):  # the two tenants' transactions share the server connection
            mine.append("session/title", {"title": f"a{n}"})  # the event sets the title
            assert [i.title for i in acme.list_sessions()] == [f"a{n}"]
            assert [i.title for i in default.list_sessions()] == [None]
            assert len(list(default.events("shared-id"))) == 0


def test_follow_yields_every_event_without_listen(bouncer: str, schema: str) -> None:
    with open_store(bouncer, schema=schema, **NO_PREPARE) as store:
        handle = store.create_session("s1")
        got: list[int] = []

        def follow() -> None:
            for event in store.follow("s1", timeout=5):
                got.append(event.seq)
                if len(got) == 5:
                    return

        reader = threading.Thread(target=follow)
        reader.start()
        for n in range(5):
            handle.append("session/title", {"title": f"t{n}"})
            time.sleep(0.05)
        reader.join(timeout=10)
        assert got == [0, 1, 2, 3, 4]


def test_the_async_store_works_without_prepared_statements(bouncer: str, schema: str) -> None:
    async def scenario() -> None:
        async with open_async_store(bouncer, schema=schema, **NO_PREPARE) as store:
            handle = await store.create_session("s1")
            for n in range(20):
                await handle.append("session/title", {"title": f"t{n}"})
                assert len([e async for e in await store.events("s1")]) == n + 1
            assert (await store.verify("s1")).ok

    asyncio.run(scenario())


def test_prepared_statements_clash_with_a_clear_error(bouncer: str, schema: str) -> None:
    with open_store(bouncer, schema=schema, **NO_PREPARE) as setup:
        setup.create_session("s1").append("session/title", {"title": "t"})
    raised: list[BaseException] = []
    with open_store(bouncer, schema=schema) as one, open_store(bouncer, schema=schema) as two:
        # psycopg prepares a statement run five times on a connection; both clients name it
        # the same and meet on the proxy's one server connection.
        try:
            for _ in range(20):
                one.messages("s1")
                two.messages("s1")
        except PermanentStoreError as exc:
            raised.append(exc)
    assert raised, "prepared statements were expected to clash behind the proxy"
    assert "prepare_threshold" in str(raised[0])
