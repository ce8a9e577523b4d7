"""Shared fixtures: one contract suite over a temp-file SQLite and a PostgreSQL schema per test,
and the store's contract modules (``CITUS_CONTRACT``) over a distributed schema on Citus too.

The PostgreSQL server is, in order: ``SESSION_SQL_TEST_POSTGRES_URL``; a local server on
127.0.0.1:5432 if it answers within 2 s; a testcontainers PostgreSQL if Docker works. With
none, PostgreSQL tests are skipped — unless ``SESSION_SQL_REQUIRE_POSTGRES=1``, which makes
them fail instead. The Citus cluster is one the tests start (``citus.cluster``); without
Citus installed its cases skip, unless ``SESSION_SQL_REQUIRE_CITUS=1``.
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

from .citus.cluster import ENV_REQUIRE_CITUS, CitusCluster, citus_missing, start_cluster

DEFAULT_LOCAL_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ENV_URL = "SESSION_SQL_TEST_POSTGRES_URL"
ENV_REQUIRE = "SESSION_SQL_REQUIRE_POSTGRES"


CAPABILITIES: dict[str, frozenset[str]] = {
    "sqlite": frozenset(
        {
            "file",  # the store is one file, at the URL's path
            "explain_query_plan",  # plans as EXPLAIN QUERY PLAN lines
            "vm_steps",  # the work of a statement, counted in VM steps
            "async_in_worker",  # the async store runs the sync driver in a worker thread
            "appends_on_kept_connection",  # appends and tail reads share one kept connection
            "triggers",  # a test's trigger can fail an insert inside the server
            "query_plans",  # a statement's plan names the indexes it walks (a test reads it)
        }
    ),
    "postgresql": frozenset(
        {
            "schema",  # the store is a named schema of a shared database
            "server_sessions",  # connections are the server's, named by application_name
            "listen",  # followers wake on LISTEN/NOTIFY through one listening connection
            "vacuum_full",  # a full vacuum rewrites the tables
            "json_type_check",  # the json column refuses text that is not JSON
            "explain_json",  # plans as EXPLAIN (FORMAT JSON)
            "named_constraints",  # a violation names the constraint it broke
            "autoanalyze",  # the server analyzes tables itself; pg_stat_user_tables says when
            "dead_rows",  # deleted rows take space until a VACUUM
            "prepared_statements",  # the one-query append runs prepared on its connection
            "racing_first_open",  # two first opens can interleave (no lock of the whole file)
            "labels_index",  # a GIN index answers label filters
            "row_level_security",  # each table keeps a tenant policy under row-level security
            "jsonb_in_old_schemas",  # schema version 4 kept events' data as JSONB (keys sorted)
            "triggers",  # a test's trigger can fail an insert inside the server
            "query_plans",  # a statement's plan names the indexes it walks (a test reads it)
        }
    ),
}
CAPABILITIES["citus"] = (
    CAPABILITIES["postgresql"]
    - {
        # Each statement's plan is Citus's (a custom scan over a task), not PostgreSQL's.
        "explain_json",
        "query_plans",
        # Dead rows and vacuums are the workers' shards', not the coordinator's.
        "dead_rows",
        # Citus refuses triggers on distributed tables.
        "triggers",
        "vacuum_full",
        # The prepared one-query append is PostgreSQL's own subject (tests/store/
        # test_prepared_appends.py); a role under row-level security appends unprepared here.
        "prepared_statements",
    }
    | {"distributed"}  # the per-session tables are spread over workers by session_key
)
"""What each backend has: tests ask for these (``@pytest.mark.requires(...)`` or
``backend.has(...)``) instead of naming a backend. Only this table knows the names."""

CITUS_CONTRACT = frozenset(
    f"tests/store/{name}.py"
    for name in (
        "test_analytics",
        "test_append_together",
        "test_byte_fidelity",
        "test_session_keys",
        "test_store_lifecycle",
        "test_store_open",
        "test_store_reading",
        "test_store_refusals",
        "test_store_tail",
        "test_store_verify",
        "test_store_writing",
        "test_stream_pinning",
        "test_tenants",
    )
)
"""The store contract modules that run on a distributed store too. Each case creates a
distributed schema of its own (half a second on the test cluster), so not every module, and
of the store's API and tenant cases (tests/store/conftest.py) the sync API with the default
tenant and the async API with a named one."""


@dataclass(frozen=True)
class Expect:
    """Values a test expects that differ by backend, for reasons of the database's own."""

    vacuum_action: str  # what ``vacuum()`` reports it ran
    cli_sql_hint: str  # how ``demo`` says to explore the store with SQL
    bench_workloads: tuple[str, ...]  # the bench's workloads, in order
    bench_w1: tuple[str, ...]  # the W1 workloads of the bench
    async_statement_thread: str  # where the async store's statements run
    crowd_half: int  # followers per API in the crowd test (SQLite's poll: fewer)
    kill_within: float  # about how long opening an empty store takes (seconds)
    gate_type_differences: frozenset[str]  # the gate's words for events.data BLOB/JSONB, pos INT


EXPECT = {
    "sqlite": Expect(
        vacuum_action="PRAGMA incremental_vacuum",
        cli_sql_hint="6. Explore it with SQL:  sqlite3 ",
        bench_workloads=(
            "W1 append (FULL)",
            "W1 append (NORMAL)",
            "W2 append_many x100",
            "W1 append (FULL) tenant acme",
            "W2 append_many x100 tenant acme",
            "W2 append_many x5000",
            "W3 compaction-heavy",
            "W4 messages() of 2k nodes",
            "W5 load_session",
            "W5 events()",
            "W5 load_session 5k",
            "W5 events() 5k",
            "W6 follow latency",
            "W8 storage",
            "W9 messages(last=20)",
            "W10 open_session + append",
        ),
        bench_w1=("W1 append (FULL)", "W1 append (NORMAL)", "W1 append (FULL) tenant acme"),
        async_statement_thread="worker",
        crowd_half=10,
        kill_within=0.04,
        gate_type_differences=frozenset({"events.data: type is BLOB, expected TEXT"}),
    ),
    "postgresql": Expect(
        vacuum_action="VACUUM (ANALYZE)",
        cli_sql_hint="psql ",
        bench_workloads=(
            "W1 append",
            "W2 append_many x100",
            "W1 append tenant acme",
            "W2 append_many x100 tenant acme",
            "W2 append_many x5000",
            "W3 compaction-heavy",
            "W4 messages() of 2k nodes",
            "W5 load_session",
            "W5 events()",
            "W5 load_session 5k",
            "W5 events() 5k",
            "W6 follow latency",
            "W7 8 writers x 8 sessions",
            "W7 fleet 8 processes",
            "W7 8 writers x 1 session",
            "W8 storage",
            "W9 messages(last=20)",
            "W10 open_session + append",
            "W11 async appends x16",
        ),
        bench_w1=("W1 append", "W1 append tenant acme"),
        async_statement_thread="AsyncConnection",
        crowd_half=250,
        kill_within=0.15,
        # JSONB would sort the keys of every event (SPEC §12.1): the gate refuses it.
        gate_type_differences=frozenset(
            {
                "events.data: type is JSONB, expected JSON",
                "surface.pos: type is INTEGER, expected BIGINT",
            }
        ),
    ),
}
EXPECT["citus"] = EXPECT["postgresql"]  # a coordinator answers as PostgreSQL


@dataclass(frozen=True)
class Backend:
    """Where one test's store lives, and what its database can do."""

    name: str  # "sqlite" or "postgresql": a key of CAPABILITIES, read by nothing else
    url: str
    schema: str  # the PostgreSQL schema; passed but ignored on SQLite

    @property
    def capabilities(self) -> frozenset[str]:
        return CAPABILITIES[self.name]

    def has(self, capability: str) -> bool:
        """Whether this backend has ``capability`` (a name of ``CAPABILITIES``)."""
        if capability not in ALL_CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}")
        return capability in self.capabilities

    def speaks(self, dialect: str | None) -> bool:
        """Whether SQL written for ``dialect`` (a recipe's tag; ``None``: any) runs here."""
        return dialect in (None, self.name)

    @property
    def expect(self) -> Expect:
        return EXPECT[self.name]

    @property
    def table_schema(self) -> str | None:
        """The schema the tables are in: ``None`` where the store is not a schema."""
        return self.schema if self.has("schema") else None

    @property
    def table_prefix(self) -> str:
        """What goes before a table's name in hand-written SQL: ``"schema".`` or nothing."""
        return f'"{self.schema}".' if self.has("schema") else ""

    @property
    def path(self) -> Path:
        """The database file of a store that is one file."""
        assert self.has("file"), "the store is not a file"
        return Path(self.url.removeprefix("sqlite:///"))

    @property
    def driver_dsn(self) -> str:
        """The URL as the raw driver takes it (no SQLAlchemy driver suffix)."""
        return self.url.replace("postgresql+psycopg://", "postgresql://")


ALL_CAPABILITIES = frozenset().union(*CAPABILITIES.values())


def skip_lacking(request: pytest.FixtureRequest, backend: Backend) -> None:
    """Skip this backend's case of a test marked ``requires`` with a capability it lacks."""
    for mark in request.node.iter_markers("requires"):
        lacking = [c for c in mark.args if not backend.has(c)]
        if lacking:
            pytest.skip(f"{backend.name} lacks {', '.join(lacking)}: this case does not apply")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A ``requires`` mark acts through the ``backend`` fixture: refuse one on a test without
    it, which would run everywhere unasked. A backend's case of a test that needs what the
    backend lacks is deselected: it never applied, so it is neither run nor reported as a
    skip (``skip_lacking`` covers a case whose backend is known only when it runs)."""
    kept: list[pytest.Item] = []
    lacking: list[pytest.Item] = []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        marks = list(item.iter_markers("requires"))
        if marks and "backend" not in fixtures:
            raise pytest.UsageError(f"{item.nodeid}: requires(...) needs the backend fixture")
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("backend") if callspec is not None else None
        needed = {c for mark in marks for c in mark.args}
        has = CAPABILITIES.get(name, frozenset())
        outside = "distributed" in has and (
            _relative(item) not in CITUS_CONTRACT
            or (callspec.params.get("api") == "sync" and callspec.params.get("tenant"))
        )
        if (name in CAPABILITIES and not needed <= has) or outside:
            lacking.append(item)
        else:
            kept.append(item)
    if lacking:
        config.hook.pytest_deselected(items=lacking)
        items[:] = kept


def _relative(item: pytest.Item) -> str:
    return Path(str(item.path)).resolve().relative_to(ROOT).as_posix()


ROOT = Path(__file__).resolve().parent.parent


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
        pytest.param("citus", id="citus", marks=pytest.mark.citus),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty store location: a temp SQLite file, a new PostgreSQL schema, or a new
    schema on a Citus coordinator (where the store it holds is created distributed)."""
    if "file" in CAPABILITIES[request.param]:
        sqlite = Backend(request.param, f"sqlite:///{tmp_path / 'sessions.db'}", "session_sql")
        skip_lacking(request, sqlite)
        yield sqlite
        return
    skip_lacking(request, Backend(request.param, "", ""))
    fixture = "citus_admin" if "distributed" in CAPABILITIES[request.param] else "postgres_admin"
    admin: Engine = request.getfixturevalue(fixture)
    schema = f"t_{uuid.uuid4().hex}"
    yield Backend(request.param, str(admin.url.render_as_string(hide_password=False)), schema)
    with admin.begin() as conn:
        # Never wait forever on a connection a failed test left open.
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))


@functools.cache
def _citus_missing() -> str | None:
    return citus_missing()


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[CitusCluster]:
    """A running Citus cluster (coordinator + 2 workers) the tests start: ``.url`` is the
    coordinator's; ``stop_worker(i)`` and ``start_worker(i)`` take a worker down and bring
    it back. Skips without Citus installed, unless ``SESSION_SQL_REQUIRE_CITUS=1``."""
    reason = _citus_missing()
    if reason is not None:
        if os.environ.get(ENV_REQUIRE_CITUS) == "1":
            pytest.fail(f"{ENV_REQUIRE_CITUS}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    cluster = start_cluster(workers=2)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def citus_admin(citus_cluster: CitusCluster) -> Iterator[Engine]:
    """An engine on the coordinator, for creating and dropping per-test schemas."""
    engine = create_engine(citus_cluster.url, poolclass=NullPool)
    yield engine
    engine.dispose()


@pytest.fixture
def place(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], Backend]]:
    """Makes fresh, empty store locations: a new SQLite file, or a new PostgreSQL schema
    (dropped after the test)."""
    schemas: list[str] = []
    admin: Engine | None = None

    def make(kind: str) -> Backend:
        nonlocal admin
        if "file" in CAPABILITIES[kind]:
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
