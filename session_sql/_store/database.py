"""The databases a store runs on, and the one place that tells which one an engine talks to.

``backend_for`` looks at a dialect or a URL and returns its ``Backend`` (``sqlite.SQLITE``,
``postgresql.POSTGRESQL``); everything that differs between the databases is a method of
that object. What is the same on both lives here, in terms of the backend: ``make_engine``
(URL and options checked, then the backend's engine), the transactions (``write_tx``,
``read_tx``, ``snapshot_tx``), and ``translate_errors``, the one place where driver
exceptions become session_sql errors (each backend translates its driver's, by structured
fields, never by text).

The PostgreSQL backend (psycopg, SQLAlchemy's PostgreSQL dialect) is imported the first time
a PostgreSQL URL or engine is seen, so a process using only SQLite never loads it
(docs/performance.md, "CLI startup").
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, Engine, Table, exc, make_url
from sqlalchemy.engine import URL, Dialect

from session_sql._store.backends.base import Backend, EngineOptions, synchronous_mode
from session_sql._store.backends.sqlite.backend import SQLITE, sqlite_pragmas
from session_sql._store.transactions import (
    ROLLBACK,
    Flow,
    Instruction,
    Reply,
    Send,
    T,
    drive,
    execute_run,
)
from session_sql.errors import ConfigurationError, SessionSQLError, StoreError, TransientStoreError
from session_sql.jsoncodec import dumps_compact

if TYPE_CHECKING:
    from session_sql._store.backends.postgresql.backend import PostgreSQLBackend

__all__ = [
    "BACKENDS",  # noqa: F822 - a module __getattr__ name (it imports PostgreSQL)
    "DEFAULT_MAX_OVERFLOW",
    "DEFAULT_POOL_SIZE",
    "Backend",
    "analyze",
    "backend_for",
    "create_tx",
    "database_label",
    "dumps_json",
    "fetch_rows",
    "make_engine",
    "read_tx",
    "run_in_transaction",
    "snapshot_tx",
    "sqlite_pragmas",
    "store_label",
    "target_schema",
    "translate_errors",
    "write_tx",
]


_BY_NAME: Final[dict[str, Backend]] = {SQLITE.name: SQLITE}
"""The backends imported so far, by dialect name (PostgreSQL's joins on its first use)."""
_driver_errors: tuple[type[Exception], ...] = (SQLITE.driver_error,)
"""The driver exceptions ``translate_errors`` catches: those of the backends loaded (no other
driver can have raised one)."""
_postgresql_backend: PostgreSQLBackend | None = None


def _postgresql() -> PostgreSQLBackend:
    """The PostgreSQL backend, imported and registered on first use."""
    global _driver_errors, _postgresql_backend  # set once, on the first PostgreSQL use
    if _postgresql_backend is None:
        from session_sql._store.backends.postgresql.backend import POSTGRESQL  # noqa: PLC0415 - lazy

        _BY_NAME[POSTGRESQL.name] = POSTGRESQL
        _driver_errors = (*_driver_errors, POSTGRESQL.driver_error)
        _postgresql_backend = POSTGRESQL
    return _postgresql_backend


def _named(name: str) -> Backend:
    """The backend of dialect ``name``, when it is not loaded yet (PostgreSQL's)."""
    if name != "postgresql":
        raise KeyError(name)
    return _postgresql()


def __getattr__(name: str) -> object:
    """``BACKENDS``, every backend: asking for it imports PostgreSQL's."""
    if name == "BACKENDS":
        return (SQLITE, _postgresql())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


dumps_json = dumps_compact
"""The serialiser every engine binds JSON with (floats stay floats on JSONB)."""

DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10
"""SQLAlchemy's ``QueuePool`` default: connections opened beyond ``pool_size`` at peak."""


def backend_for(target: Engine | Connection | Dialect | URL | str) -> Backend:
    """The backend of an engine, connection or dialect, or of a URL (or its text).

    A URL is told by its scheme: ``sqlite...`` is SQLite, any other PostgreSQL, the only
    other backend (``make_engine`` refuses a scheme neither accepts).
    """
    if isinstance(target, (Engine, Connection)):  # first: on every transaction's path
        try:
            return _BY_NAME[target.dialect.name]
        except KeyError:
            return _named(target.dialect.name)
    if isinstance(target, Dialect):
        try:
            return _BY_NAME[target.name]
        except KeyError:
            return _named(target.name)
    scheme = target if isinstance(target, str) else target.drivername
    return SQLITE if scheme.startswith("sqlite") else _postgresql()


# --------------------------------------------------------------------------------------------
# Engines

_SUPPORTED: Final = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://user@host/dbname "
    "(also postgres:// and postgresql+psycopg://, psycopg 3)"
)


def _normalise_url(url: str | URL) -> tuple[Backend, URL]:
    """``url`` parsed, with its backend's driver; ``ConfigurationError`` with a hint."""
    if isinstance(url, URL):
        parsed = url
    elif not isinstance(url, str):
        raise ConfigurationError(
            f"database URL must be a string, not {type(url).__name__}: use {_SUPPORTED}",
            option="url",
        )
    else:
        try:
            parsed = make_url(url)
        except (exc.ArgumentError, ValueError) as error:
            raise ConfigurationError(
                f"invalid database URL {url!r}: {_url_hint(url)}", option="url"
            ) from error
    backend: Backend = SQLITE if parsed.drivername in SQLITE.schemes else _postgresql()
    if parsed.drivername in backend.schemes:
        return backend, parsed.set(drivername=backend.driver)
    raise ConfigurationError(
        f"unsupported database URL scheme {parsed.drivername!r}: use {_SUPPORTED}", option="url"
    )


def _url_hint(url: str) -> str:
    if url and "://" not in url and ":" not in url.split("/", 1)[0]:
        # A bare file path: relative stays relative, "/abs" gives "sqlite:////abs".
        return f"did you mean sqlite:///{url}?"
    return f"use {_SUPPORTED}"


def _int_option(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int >= {minimum}, not {value!r}", option=name)
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}", option=name)
    return value


def make_engine(
    url: str | URL,
    *,
    synchronous: str = "FULL",
    busy_timeout_ms: int = 5000,
    lock_timeout_ms: int = 5000,
    pool_size: int = DEFAULT_POOL_SIZE,
    async_driver: bool = False,
    **kw: Any,
) -> Engine:
    """Create an engine for a ``sqlite:///path`` or ``postgresql://`` URL.

    ``postgresql://`` and ``postgres://`` use psycopg 3. ``synchronous`` (``FULL`` or
    ``NORMAL``) and ``busy_timeout_ms`` apply to SQLite only, ``lock_timeout_ms`` (PostgreSQL's
    ``lock_timeout``; 0 waits forever) to PostgreSQL only; all are checked on both, so a URL
    switch never turns a bad setting into an error. ``kw`` goes to
    ``sqlalchemy.create_engine``. Raises ``ConfigurationError`` for another scheme, a bad
    option, or a keyword ``create_engine`` refuses.

    ``async_driver`` (PostgreSQL; the async store's engine): the sync face of an asyncio
    engine on psycopg's async connections. SQLite ignores it: the async store runs SQLite in
    worker threads.
    """
    backend, parsed = _normalise_url(url)
    given = ", ".join(sorted(kw)) or "none"
    kw.setdefault("json_serializer", dumps_json)
    kw.setdefault("json_deserializer", json.loads)
    _int_option("busy_timeout_ms", busy_timeout_ms, 0)
    _int_option("lock_timeout_ms", lock_timeout_ms, 0)
    _int_option("pool_size", pool_size, 1)
    options = EngineOptions(
        synchronous=synchronous_mode(synchronous),
        busy_timeout_ms=busy_timeout_ms,
        lock_timeout_ms=lock_timeout_ms,
        pool_size=pool_size,
        async_driver=async_driver,
    )
    try:
        return backend.create_engine(parsed, options, kw)
    except (TypeError, exc.ArgumentError) as error:
        # create_engine refuses an unknown keyword, or a value of the wrong kind.
        raise ConfigurationError(
            f"a store option is invalid (create_engine keywords given: {given}): {error}",
            option="engine_options",
        ) from error


# --------------------------------------------------------------------------------------------
# Transactions


@contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A connection inside a write transaction that commits on success, rolls back on error.

    SQLite takes the write lock at ``BEGIN IMMEDIATE`` (waiting up to the busy timeout), so
    a read-then-write inside it cannot fail half-way on a lock upgrade.
    """
    with engine.connect() as conn:
        backend_for(conn).begin_write(conn)
        with conn.begin():
            yield conn


@contextmanager
def create_tx(engine: Engine) -> Iterator[Connection]:
    """``write_tx`` for a transaction that may create the store (see ``Backend.begin_create``)."""
    with engine.connect() as conn:
        backend = backend_for(conn)
        backend.begin_create(conn)
        backend.begin_write(conn)
        with conn.begin():
            yield conn


@contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    """A connection inside a read transaction: one consistent snapshot on SQLite (WAL)."""
    with engine.connect() as conn, conn.begin():
        yield conn


@contextmanager
def snapshot_tx(engine: Engine) -> Iterator[Connection]:
    """A read transaction in which every statement sees the same snapshot.

    SQLite (WAL) read transactions already do; PostgreSQL needs REPEATABLE READ, since under
    READ COMMITTED each statement takes a fresh snapshot.
    """
    with engine.connect() as conn:
        backend_for(conn).begin_snapshot(conn)
        with conn.begin():
            yield conn


def analyze(engine: Engine, tables: Sequence[Table]) -> None:
    """Refresh the planner statistics of ``tables`` (``ANALYZE``).

    Without them a planner guesses row counts from nothing and can pick a nested loop where
    a join over a million events needs an index or a hash (docs/sql.md).
    """
    with write_tx(engine) as conn:
        backend_for(conn).analyze(conn, tables)


def target_schema(engine: Engine | Connection, schema: str | None) -> str | None:
    """The schema objects live in: ``schema`` on PostgreSQL, ``None`` (the file) on SQLite."""
    return backend_for(engine).target_schema(schema)


def database_label(engine: Engine) -> str:
    """How errors name the database: the file path, or the URL without its password."""
    return backend_for(engine).database_label(engine)


def store_label(engine: Engine, schema: str | None) -> str:
    """How errors name a store: its database, and its schema where it has one."""
    target = target_schema(engine, schema)
    return database_label(engine) + (f" (schema {target})" if target is not None else "")


# --------------------------------------------------------------------------------------------
# Error translation


@contextmanager
def translate_errors(
    session_id: str | None = None, *, database: str | None = None
) -> Iterator[None]:
    """Turn SQLAlchemy and driver exceptions raised inside the block into session_sql errors.

    session_sql's own errors pass through. ``session_id`` names the session in the raised
    error; ``database`` names the database file in "not a database" errors. The original
    exception is always chained.
    """
    try:
        yield
    except SessionSQLError:
        raise
    except exc.DBAPIError as error:
        raise _translate_driver_error(error.orig, session_id, database) from error
    except _driver_errors as error:
        raise _translate_driver_error(error, session_id, database) from error
    except (exc.TimeoutError, exc.DisconnectionError) as error:
        raise TransientStoreError(f"database connection unavailable: {error}") from error
    except exc.SQLAlchemyError as error:
        # Anything else SQLAlchemy raises (a statement it cannot run, a closed result) must
        # not reach the caller as a SQLAlchemy type either.
        raise StoreError(f"database error: {error}", session_id=session_id) from error


def _translate_driver_error(
    orig: BaseException | None, session_id: str | None, database: str | None
) -> SessionSQLError:
    for backend in tuple(_BY_NAME.values()):
        if isinstance(orig, backend.driver_error):
            return backend.translate_error(orig, session_id, database)
    return StoreError(f"database error: {orig}", session_id=session_id)


def fetch_rows(conn: Connection, stmt: Any, params: dict[str, Any]) -> list[Any]:
    """The rows (plain tuples) of a compiled read on ``conn``, inside its transaction.

    The driver SQL goes through ``exec_driver_sql`` (so connection events still see it), and
    the rows are fetched from the DBAPI cursor: a page of 1,000 events skips SQLAlchemy's
    result processing (columns are read as the driver returns them: see
    ``stored.event_from_row``).
    """
    result = conn.exec_driver_sql(stmt.sql, stmt.bind(params))
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


def run_in_transaction(conn: Connection, flow: Flow[T]) -> T:
    """Drive ``flow`` statement by statement inside ``conn``'s open transaction, which the
    caller ends: the flow's ``ROLLBACK`` is left to it (the flow then returns or raises, and
    the caller's transaction rolls back), and the flow must not commit."""
    cursor = conn.connection.cursor()

    def run(instruction: Instruction) -> Reply:
        if instruction is ROLLBACK:
            return Reply([])
        assert isinstance(instruction, Send), instruction
        counts: list[int] = []
        try:
            for one in instruction.runs:
                counts.append(execute_run(cursor, one))
        except Exception as exc:
            return Reply(counts, error=exc)
        return Reply(counts)

    try:
        return drive(flow, run)
    finally:
        flow.close()
        cursor.close()
