"""Fixtures of the reliability suite: a PostgreSQL-only backend, login roles, and a restart."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.schema import DropSchema


@dataclass(frozen=True)
class PgBackend:
    """A fresh PostgreSQL schema on the test server (same shape as the root ``Backend``)."""

    url: str
    schema: str
    name: str = "postgresql"

    @property
    def table_schema(self) -> str:
        return self.schema


def _drop_schema(admin: Engine, schema: str) -> None:
    with admin.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))


@pytest.fixture
def pg_backend(postgres_admin: Engine) -> Iterator[PgBackend]:
    """A new, empty PostgreSQL schema, dropped after the test."""
    schema = f"r_{uuid.uuid4().hex}"
    yield PgBackend(postgres_admin.url.render_as_string(hide_password=False), schema)
    _drop_schema(postgres_admin, schema)


@pytest.fixture
def login_role(postgres_admin: Engine) -> Iterator[Callable[[str], str]]:
    """Create LOGIN roles with unique names; returns a URL connecting as each. Dropped after.

    ``login_role(kind)`` makes ``ssql_<kind>_<random>``; trust authentication lets it log in.
    """
    made: list[str] = []

    def make(kind: str) -> str:
        name = f"ssql_{kind}_{uuid.uuid4().hex[:12]}"
        with postgres_admin.begin() as conn:
            conn.execute(text(f'CREATE ROLE "{name}" LOGIN'))
        made.append(name)
        url = make_url(postgres_admin.url).set(username=name, password=None)
        return url.render_as_string(hide_password=False)

    yield make
    for name in made:
        with postgres_admin.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '10s'"))
            # Terminate leftovers (a follower, a pool), then drop what the role owns or was
            # granted, in this database, and the role itself.
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :r"),
                {"r": name},
            )
            conn.execute(text(f'DROP OWNED BY "{name}" CASCADE'))
            conn.execute(text(f'DROP ROLE "{name}"'))


def pg_is_ready() -> bool:
    done = subprocess.run(
        ["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"], check=False, timeout=30
    )
    return done.returncode == 0


def wait_for_postgres(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pg_is_ready():
        if time.monotonic() > deadline:
            raise RuntimeError("PostgreSQL did not come back")
        time.sleep(0.2)


def _cluster() -> tuple[str, str]:
    """(version, name) of the local cluster on port 5432."""
    listing = subprocess.run(
        ["pg_lsclusters", "--no-header"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    for line in listing.splitlines():
        version, name, port, *_ = line.split()
        if port == "5432":
            return version, name
    raise RuntimeError("no local PostgreSQL cluster on port 5432")


@pytest.fixture
def restart_postgres(postgres_server: str) -> Iterator[Callable[[], None]]:
    """Restart the local cluster (fast shutdown: every backend is terminated).

    Skips when the test server is not a local cluster this process can control. Whatever the
    test does, the server is running again when the fixture finishes.
    """
    server = make_url(postgres_server)
    if server.host not in ("127.0.0.1", "localhost") or (server.port or 5432) != 5432:
        pytest.skip(f"the test server {server.host}:{server.port} is not the local cluster")
    try:
        version, name = _cluster()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        pytest.skip(f"no local PostgreSQL cluster to restart: {exc}")
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, name]

    def restart() -> None:
        subprocess.run([*command, "restart"], check=True, timeout=120, capture_output=True)
        wait_for_postgres()

    try:
        yield restart
    finally:
        if not pg_is_ready():
            subprocess.run([*command, "start"], check=False, timeout=120, capture_output=True)
        wait_for_postgres()
