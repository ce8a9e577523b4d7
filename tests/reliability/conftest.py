"""Fixtures of the reliability suite: a PostgreSQL-only backend, login roles, a private cluster."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

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


@dataclass(frozen=True)
class PrivateCluster:
    """A throwaway PostgreSQL cluster of this test alone; ``restart()`` restarts it."""

    url: str
    schema: str
    restart: Callable[[], None]


def unavailable(message: str) -> NoReturn:
    """A server binary this test needs is missing: skip, or fail under
    SESSION_SQL_REQUIRE_POSTGRES=1, where no PostgreSQL test may skip."""
    if os.environ.get("SESSION_SQL_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"SESSION_SQL_REQUIRE_POSTGRES=1 but {message}", pytrace=False)
    pytest.skip(message)


def shared_temp_dir(prefix: str) -> Path:
    """A new directory (mode 0755) where another user can reach it: in the temp directory
    when every directory above it lets others pass (not a private ``TMPDIR``), else in
    ``/tmp`` or ``/var/tmp``."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        above = Path(base).resolve()
        if all(d.stat().st_mode & stat.S_IXOTH for d in (above, *above.parents)):
            made = Path(tempfile.mkdtemp(prefix=prefix, dir=above))
            made.chmod(0o755)
            return made
    pytest.fail("no temp directory that another user can reach (tried $TMPDIR, /tmp, /var/tmp)")


def stop_cluster(as_user: list[str], pg_ctl: str, data: Path) -> None:
    """Stop a throwaway cluster at once (``-m immediate``), whatever state a test left."""
    subprocess.run(
        [*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
        check=False,
        timeout=120,
        capture_output=True,
    )


def _postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding initdb and pg_ctl."""
    candidates = [d for d in Path("/usr/lib/postgresql").glob("*/bin") if (d / "initdb").exists()]
    candidates = [d for d in candidates if (d / "pg_ctl").exists() and d.parent.name.isdigit()]
    return max(candidates, key=lambda d: int(d.parent.name), default=None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def private_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    """Start a private cluster (initdb + pg_ctl, in a temp directory, on a free port).

    Tests that restart or stop a server use this one, never the shared test server. As root,
    the cluster runs as the ``postgres`` OS user (PostgreSQL refuses to run as root). Skips when
    no PostgreSQL binaries are installed, unless SESSION_SQL_REQUIRE_POSTGRES=1 (then it
    fails). The cluster is stopped and its directory deleted afterwards.
    """
    bin_dir = _postgres_bin()
    if bin_dir is None:
        unavailable("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    base = shared_temp_dir("session_sql_pg_")  # the server's user must reach it
    data, log = base / "data", base / "server.log"
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*args: str) -> None:
        done = subprocess.run(
            [*as_user, *args], check=False, timeout=120, capture_output=True, text=True
        )
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip()}\n{tail}")

    pg_ctl = str(bin_dir / "pg_ctl")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync")
        run(pg_ctl, "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start")

        def restart() -> None:
            # -l again: without it the server would write to (and hold open) our pipes.
            run(pg_ctl, "-D", str(data), "-l", str(log), "-m", "fast", "-w", "-t", "60", "restart")

        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        yield PrivateCluster(url, f"r_{uuid.uuid4().hex}", restart)
    finally:
        stop_cluster(as_user, pg_ctl, data)
        shutil.rmtree(base, ignore_errors=True)
