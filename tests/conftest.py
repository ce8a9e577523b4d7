"""Shared fixtures: one contract suite over a temp-file SQLite and a PostgreSQL schema per test.

The PostgreSQL server is, in order: ``SESSION_SQL_TEST_POSTGRES_URL``; a local server on
127.0.0.1:5432 if it answers within 2 s; a testcontainers PostgreSQL if Docker works. With
none, PostgreSQL tests are skipped — unless ``SESSION_SQL_REQUIRE_POSTGRES=1``, which makes
them fail instead.
"""

from __future__ import annotations

import functools
import gc
import os
import sqlite3
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import DropSchema

from session_sql._store.database import make_engine

DEFAULT_LOCAL_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ENV_URL = "SESSION_SQL_TEST_POSTGRES_URL"
ENV_REQUIRE = "SESSION_SQL_REQUIRE_POSTGRES"


@dataclass(frozen=True)
class Backend:
    """Where one test's store lives."""

    name: str  # "sqlite" or "postgresql"
    url: str
    schema: str  # the PostgreSQL schema; passed but ignored on SQLite

    @property
    def table_schema(self) -> str | None:
        """The schema the tables are in: ``None`` on SQLite."""
        return None if self.name == "sqlite" else self.schema


@dataclass
class _Server:
    url: str | None
    version: str | None
    reason: str
    container: Any = None


def _probe(url: str) -> str:
    """The server version of ``url``; raises when it does not answer within 2 s."""
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            return str(conn.execute(text("SHOW server_version")).scalar_one())
    finally:
        engine.dispose()


def _configured_or_local() -> _Server:
    explicit = os.environ.get(ENV_URL)
    if explicit:
        url = explicit.replace("postgresql://", "postgresql+psycopg://", 1)
        try:
            return _Server(url, _probe(url), f"{ENV_URL}")
        except Exception as exc:  # a configured server that does not answer is an error
            raise pytest.UsageError(f"{ENV_URL}={explicit!r} does not answer: {exc}") from exc
    try:
        return _Server(DEFAULT_LOCAL_URL, _probe(DEFAULT_LOCAL_URL), "local server")
    except Exception as exc:
        return _Server(None, None, f"no local server ({type(exc).__name__})")


@functools.cache
def _header_server() -> _Server:
    return _configured_or_local()


def _docker_works() -> bool:
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    # The Docker SDK leaks a socket when the daemon does not answer; collect it while its
    # ResourceWarning is ignored, or -W error would turn it into a failure of a later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import docker

            client = docker.from_env()
            try:
                client.ping()
            finally:
                client.close()
        except Exception:
            return False
        finally:
            gc.collect()
    return True


def _start_container() -> _Server:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16-alpine", driver="psycopg")
        container.start()
    url = container.get_connection_url()
    return _Server(url, _probe(url), "testcontainers", container)


def pytest_report_header(config: pytest.Config) -> list[str]:
    server = _header_server()
    pg = f"PostgreSQL {server.version} ({server.reason})" if server.version else server.reason
    return [f"session_sql backends: SQLite {sqlite3.sqlite_version}; {pg}"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of a reachable PostgreSQL server; skip without one (fail if it is required)."""
    server = _header_server()
    if server.url is None and _docker_works():
        server = _start_container()
    if server.url is None:
        message = f"no PostgreSQL server reachable: {server.reason}, no Docker"
        if os.environ.get(ENV_REQUIRE) == "1":
            pytest.fail(f"{ENV_REQUIRE}=1 but {message}", pytrace=False)
        pytest.skip(message)
    try:
        yield server.url
    finally:
        if server.container is not None:
            server.container.stop()


@pytest.fixture(scope="session")
def postgres_admin(postgres_server: str) -> Iterator[Engine]:
    """An engine for creating and dropping per-test schemas."""
    engine = create_engine(postgres_server, poolclass=NullPool)
    yield engine
    engine.dispose()


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty store location: a temp SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        yield Backend("sqlite", f"sqlite:///{tmp_path / 'sessions.db'}", "session_sql")
        return
    admin: Engine = request.getfixturevalue("postgres_admin")
    schema = f"t_{uuid.uuid4().hex}"
    yield Backend("postgresql", str(admin.url.render_as_string(hide_password=False)), schema)
    with admin.begin() as conn:
        # Never wait forever on a connection a failed test left open.
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))


@pytest.fixture
def place(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], Backend]]:
    """Makes fresh, empty store locations: a new SQLite file, or a new PostgreSQL schema
    (dropped after the test)."""
    schemas: list[str] = []
    admin: Engine | None = None

    def make(kind: str) -> Backend:
        nonlocal admin
        if kind == "sqlite":
            path = tmp_path / f"store-{uuid.uuid4().hex[:8]}.db"
            return Backend("sqlite", f"sqlite:///{path}", "session_sql")
        admin = request.getfixturevalue("postgres_admin")
        schemas.append(f"t_{uuid.uuid4().hex}")
        return Backend("postgresql", admin.url.render_as_string(hide_password=False), schemas[-1])

    yield make
    if admin is not None:
        with admin.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '10s'"))
            for schema in schemas:
                conn.execute(DropSchema(schema, cascade=True, if_exists=True))


@pytest.fixture
def db_url(backend: Backend) -> tuple[str, str]:
    """``(url, schema)`` of the current backend."""
    return backend.url, backend.schema


@pytest.fixture
def engine(backend: Backend) -> Iterator[Engine]:
    """A session_sql engine on the current backend, disposed after the test."""
    eng = make_engine(backend.url)
    yield eng
    eng.dispose()


@pytest.fixture(autouse=True)
def _collector_left_as_found() -> Iterator[None]:
    """Every test leaves Python's cyclic collector as it found it: the store pauses it while
    it builds a big batch or loads a long log, and must always restore it."""
    was = gc.isenabled()
    yield
    assert gc.isenabled() == was, f"the cyclic collector was left {'off' if was else 'on'}"
