"""Engines, transactions and driver-error translation: all SQLite/PostgreSQL differences.

* SQLite: WAL, foreign keys, a busy timeout and ``synchronous`` are set on every connection;
  pysqlite's own transaction handling is switched off so that we emit ``BEGIN`` ourselves —
  ``BEGIN IMMEDIATE`` for writes (the write lock is taken up front, so a transaction never has
  to upgrade a read lock, which SQLite refuses with ``SQLITE_BUSY`` without waiting) and a
  deferred ``BEGIN`` for reads. :func:`begin_raw_write` is the same ``BEGIN IMMEDIATE`` for
  the fast path's DBAPI connection. An in-memory database is one connection, which every
  thread shares in turn (a pool of exactly that connection).
  WAL is switched on by :func:`enable_wal` once the schema gate has accepted (or created) the
  store, never on connect, so opening a database that is not ours changes nothing in it.
* PostgreSQL: psycopg 3 with a ``QueuePool`` that pings before use, and a ``lock_timeout`` on
  every connection so that a write blocked by a stalled transaction fails instead of waiting
  forever (the counterpart of SQLite's busy timeout).
* JSON is written compactly, and floats are written so that JSONB keeps them floats.
* :func:`translate_errors` is the one place where driver exceptions become session_sql errors,
  decided by structured fields (SQLSTATE, constraint name, SQLite error name), never by text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import select as io_select
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final
from urllib.parse import quote, urlencode

import psycopg
from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Table,
    bindparam,
    event,
    exc,
    func,
    make_url,
    select,
)
from sqlalchemy import create_engine as _sa_create_engine
from sqlalchemy.engine import URL
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, QueuePool
from sqlalchemy.util import await_, greenlet_spawn

from session_sql import loopsafe
from session_sql._store import pool_queue
from session_sql._store.schema import (
    DEFAULT_TENANT_SETTING,
    NAMING_CONVENTION,
    TENANT_SETTING,
    default_tenant_flag,
)
from session_sql.errors import (
    ConcurrencyError,
    ConfigurationError,
    PermanentStoreError,
    SessionExistsError,
    SessionSQLError,
    StoreError,
    TransientStoreError,
)
from session_sql.jsoncodec import dumps_compact

dumps_json = dumps_compact
"""The serialiser every engine binds JSON with (floats stay floats on JSONB)."""

__all__ = [
    "AsyncWriteConnections",
    "IdleConnection",
    "begin_raw_write",
    "database_label",
    "dumps_json",
    "enable_wal",
    "is_sqlite",
    "lock_schema_init",
    "make_engine",
    "pipeline",
    "read_tx",
    "scope_transactions",
    "sqlite_pragmas",
    "snapshot_tx",
    "target_schema",
    "translate_errors",
    "write_tx",
]

_WRITE_OPTION: Final = "session_sql_write"
"""Execution option that makes the SQLite ``begin`` hook emit ``BEGIN IMMEDIATE``."""

_SQLITE_BEGIN_WRITE: Final = "BEGIN IMMEDIATE"
_SQLITE_BEGIN_READ: Final = "BEGIN"

_SYNCHRONOUS_MODES: Final = ("FULL", "NORMAL")

_PG_DRIVERS: Final = frozenset({"postgresql", "postgres", "postgresql+psycopg"})
_SQLITE_DRIVERS: Final = frozenset({"sqlite", "sqlite+pysqlite"})

# Driver errors are mapped by constraint name, and the names come from the naming convention.
_PK_SESSIONS: Final = NAMING_CONVENTION["pk"] % {"table_name": "sessions"}
_PK_EVENTS: Final = NAMING_CONVENTION["pk"] % {"table_name": "events"}


# --------------------------------------------------------------------------------------------
# JSON


# --------------------------------------------------------------------------------------------
# Engines


def _normalise_url(url: str | URL) -> URL:
    """``url`` parsed, with the driver session_sql uses; ``ConfigurationError`` with a hint."""
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
    driver = parsed.drivername
    if driver in _PG_DRIVERS:
        return parsed.set(drivername="postgresql+psycopg")
    if driver in _SQLITE_DRIVERS:
        return parsed.set(drivername="sqlite+pysqlite")
    raise ConfigurationError(
        f"unsupported database URL scheme {driver!r}: use {_SUPPORTED}", option="url"
    )


_SUPPORTED: Final = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://user@host/dbname "
    "(also postgres:// and postgresql+psycopg://, psycopg 3)"
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


def is_sqlite(engine: Engine | Connection) -> bool:
    """Whether ``engine`` talks to SQLite (else PostgreSQL)."""
    return engine.dialect.name == "sqlite"


def sqlite_pragmas(synchronous: str = "FULL") -> tuple[str, ...]:
    """The pragmas every SQLite connection runs first, in order, for the given options.

    Foreign keys and ``synchronous`` (``FULL`` or ``NORMAL``, any case); ``ConfigurationError``
    for another mode. WAL is a property of the file, switched once by :func:`enable_wal`. The
    engine's connect hook runs them, and so does ``session-sql bench``'s raw-driver baseline.
    """
    mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
    if mode not in _SYNCHRONOUS_MODES:
        raise ConfigurationError(
            f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}", option="synchronous"
        )
    return (
        "PRAGMA foreign_keys = ON",
        f"PRAGMA synchronous = {mode}",
    )


DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10
"""SQLAlchemy's ``QueuePool`` default: connections opened beyond ``pool_size`` at peak."""


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
    ``lock_timeout``; 0 waits forever) to PostgreSQL only; all are checked on both. ``kw`` goes
    to ``sqlalchemy.create_engine``. Raises ``ConfigurationError`` for another scheme, a bad
    option, or a keyword ``create_engine`` refuses.

    ``async_driver`` (PostgreSQL; the async store's engine): the sync face of an asyncio
    engine on psycopg's async connections. The store's ordinary code runs on it unchanged
    inside ``sqlalchemy.util.greenlet_spawn``, every I/O step being awaited on the event loop.
    SQLite ignores it: the async store runs SQLite in worker threads.
    """
    parsed = _normalise_url(url)
    given = ", ".join(sorted(kw)) or "none"
    kw.setdefault("json_serializer", dumps_json)
    kw.setdefault("json_deserializer", json.loads)
    _int_option("busy_timeout_ms", busy_timeout_ms, 0)
    _int_option("lock_timeout_ms", lock_timeout_ms, 0)
    _int_option("pool_size", pool_size, 1)
    # Checked on both backends (it applies to SQLite only), so a URL switch never turns a
    # bad setting into an error.
    pragmas = sqlite_pragmas(synchronous)
    try:
        if parsed.drivername.startswith("sqlite"):
            return _sqlite_engine(parsed, pragmas, busy_timeout_ms, pool_size, kw)
        return _postgresql_engine(parsed, lock_timeout_ms, pool_size, kw, async_driver=async_driver)
    except (TypeError, exc.ArgumentError) as error:
        # create_engine refuses an unknown keyword, or a value of the wrong kind.
        raise ConfigurationError(
            f"a store option is invalid (create_engine keywords given: {given}): {error}",
            option="engine_options",
        ) from error


def _sqlite_engine(
    url: URL, pragmas: tuple[str, ...], busy_timeout_ms: int, pool_size: int, kw: dict[str, Any]
) -> Engine:
    connect_args = dict(kw.pop("connect_args", {}))
    # sqlite3's ``timeout`` is the busy timeout, set before any statement runs — including the
    # journal_mode pragma, which must wait too when another process holds the file.
    connect_args["timeout"] = busy_timeout_ms / 1000
    in_memory = url.database in (None, "", ":memory:")
    if in_memory:
        # One database per connection, so every thread must use the same one: a pool of
        # exactly that connection, which threads take in turn (waiting like the busy timeout).
        kw.setdefault("poolclass", QueuePool)
        kw.update(pool_size=1, max_overflow=0, creator=_one_connection(connect_args))
        kw.setdefault("pool_timeout", busy_timeout_ms / 1000)
    else:
        kw.setdefault("poolclass", QueuePool)
        kw.setdefault("pool_size", pool_size)
        url = _sqlite_uri_parameters(url, connect_args, kw)
    engine = _sa_create_engine(url, connect_args=connect_args, **kw)

    def on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take over BEGIN from pysqlite (see module docstring); sqlite3 still issues COMMIT
        # and ROLLBACK correctly with isolation_level None.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in pragmas:
                cursor.execute(pragma)
        finally:
            cursor.close()

    def on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE_OPTION)
        conn.exec_driver_sql(_SQLITE_BEGIN_WRITE if write else _SQLITE_BEGIN_READ)

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    return engine


_SQLITE_URI_PARAMETERS: Final = frozenset(
    {"cache", "immutable", "mode", "modeof", "nolock", "psow", "vfs"}
)
"""Query parameters of SQLite's URI filenames (https://sqlite.org/uri.html)."""


def _sqlite_uri_parameters(url: URL, connect_args: dict[str, Any], kw: dict[str, Any]) -> URL:
    """Honour SQLite URI parameters on a plain ``sqlite:///path?mode=ro`` URL.

    pysqlite applies them only in ``file:`` URI form with ``uri=true``, and ignores them (with
    a warning) otherwise, so ``?immutable=1``, the way to read a WAL store on a read-only
    medium, would silently do nothing. Here they are taken off the URL, which keeps naming
    the file, and each connection opens the ``file:`` URI with them instead.
    """
    given = {k: v for k, v in url.query.items() if k in _SQLITE_URI_PARAMETERS}
    if not given or url.query.get("uri") or "creator" in kw or url.database is None:
        return url
    plain = url.difference_update_query(given)
    _, options = url.get_dialect()().create_connect_args(plain)
    options = {**options, **connect_args, "uri": True}
    target = f"file:{quote(url.database, safe='/')}?{urlencode(given, doseq=True)}"
    kw["creator"] = functools.partial(sqlite3.connect, target, **options)
    return plain


def _one_connection(connect_args: dict[str, Any]) -> Any:
    """A ``creator`` that opens one in-memory database, usable from any thread, and always
    returns it (the pool of one never holds it in two threads at once)."""
    opened: list[sqlite3.Connection] = []
    lock = threading.Lock()

    def creator() -> sqlite3.Connection:
        with lock:
            if not opened:
                opened.append(sqlite3.connect(":memory:", check_same_thread=False, **connect_args))
            return opened[0]

    return creator


def begin_raw_write(engine: Engine, cursor: Any) -> None:
    """Open a write transaction on a pooled DBAPI connection's cursor, as :func:`write_tx` does.

    SQLite: ``BEGIN IMMEDIATE`` (the driver's own transaction handling is off, see
    ``on_connect``). psycopg opens the transaction implicitly with the first statement.
    """
    if is_sqlite(engine):
        cursor.execute(_SQLITE_BEGIN_WRITE)


def enable_wal(engine: Engine) -> None:
    """Switch an SQLite store's file to WAL (a persistent, one-time change); no-op on PostgreSQL.

    Called once the schema gate has accepted the database, so that a file that is not a
    session_sql store is never switched. Raises driver errors (wrap in ``translate_errors``).
    """
    if not is_sqlite(engine):
        return
    raw = engine.raw_connection()
    try:
        cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            timeout_ms = cursor.execute("PRAGMA busy_timeout").fetchone()[0]
            _enable_wal(cursor, int(timeout_ms))
        finally:
            cursor.close()
    finally:
        raw.close()


def _enable_wal(cursor: sqlite3.Cursor, busy_timeout_ms: int) -> None:
    """Switch the file to WAL, waiting like the busy timeout.

    SQLite answers SQLITE_BUSY at once, without calling the busy handler, when several
    connections switch a fresh file to WAL together; so retry here, bounded by the timeout.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    delay = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            busy = str(getattr(error, "sqlite_errorname", "")).startswith("SQLITE_BUSY")
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class _LoopSafePool(AsyncAdaptedQueuePool):
    """The async pool, whose checkouts may wait on any event loop: an async store serves every
    loop that uses it (psycopg's async connections wait on whichever loop awaits them)."""

    _queue_class = pool_queue.Queue[ConnectionPoolEntry]


def _postgresql_engine(
    url: URL,
    lock_timeout_ms: int,
    pool_size: int,
    kw: dict[str, Any],
    *,
    async_driver: bool = False,
) -> Engine:
    connect_args = dict(kw.pop("connect_args", {}))
    _check_client_encoding(url.query.get("client_encoding"))
    _check_client_encoding(connect_args.get("client_encoding"))
    if "connect_timeout" not in url.query:
        # libpq waits forever for an unreachable host by default.
        connect_args.setdefault("connect_timeout", 10)
    kw.setdefault("poolclass", _LoopSafePool if async_driver else QueuePool)
    kw.setdefault("pool_size", pool_size)
    kw.setdefault("pool_pre_ping", True)
    if async_driver:
        # Imported here: the asyncio extension pulls in sqlalchemy.orm, which a sync store
        # never needs (importing session_sql must stay light).
        from sqlalchemy.ext.asyncio import create_async_engine  # noqa: PLC0415 - see above

        engine = create_async_engine(url, connect_args=connect_args, **kw).sync_engine
    else:
        engine = _sa_create_engine(url, connect_args=connect_args, **kw)

    def on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        _require_utf8_server(getattr(dbapi_connection, "driver_connection", dbapi_connection))
        # Set per connection (not via connect_args), so that a ``creator`` gets them as well,
        # and UTF-8 whatever PGCLIENTENCODING says: every str the store binds is encodable.
        # No try/finally: a failed or interrupted statement (Ctrl-C while connecting) fails the
        # connect and the pool drops the connection; restoring autocommit on a connection
        # still inside the statement would raise and hide the interrupt.
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        dbapi_connection.execute(
            "SELECT set_config('lock_timeout', %s, false), "
            "set_config('client_encoding', 'UTF8', false)",
            (f"{lock_timeout_ms}ms",),
        )
        dbapi_connection.autocommit = autocommit

    # First, before the dialect's own first-connect initialisation, which cannot read a
    # SQL_ASCII server's version and would fail with a bare TypeError.
    event.listen(engine, "connect", on_connect, insert=True)
    if kw["pool_pre_ping"]:
        engine.dialect.do_ping = functools.partial(_quiet_ping, engine.dialect.do_ping)  # type: ignore[method-assign]
    return engine


def _is_utf8(name: str) -> bool:
    """Whether ``name`` spells UTF-8 as PostgreSQL reads encoding names (case, punctuation)."""
    return "".join(ch for ch in name.lower() if ch.isalnum()) in ("utf8", "unicode")


def _check_client_encoding(value: object) -> None:
    """A ``client_encoding`` given in the URL or ``connect_args`` must be UTF-8: the store
    binds any str, which another client encoding cannot carry."""
    if value is None or (isinstance(value, str) and _is_utf8(value)):
        return
    raise ConfigurationError(
        f"client_encoding {value!r} cannot carry every string the store writes; the store "
        "talks UTF-8 to PostgreSQL: drop client_encoding (or give 'UTF8')",
        option="client_encoding",
    )


def _require_utf8_server(driver_connection: Any) -> None:
    """Refuse a database whose server encoding cannot store every string the store accepts
    (LATIN1 has no emoji, SQL_ASCII stores bytes unchecked): ``ConfigurationError``.

    Read from the status the server sent at connect, so it costs no round trip.
    """
    info = driver_connection.info
    encoding = info.parameter_status("server_encoding") or "UTF8"
    if _is_utf8(encoding):
        return
    name = info.dbname
    raise ConfigurationError(
        f"PostgreSQL database {name!r} has server encoding {encoding}, which cannot store "
        "every string a session holds; use a database created with ENCODING 'UTF8' TEMPLATE "
        "template0 (CREATE DATABASE agents ENCODING 'UTF8' TEMPLATE template0; pg_dump and "
        "pg_restore carry an existing database's data over)",
        option="url",
    )


def _quiet_ping(ping: Any, dbapi_connection: Any) -> bool:
    """The pool's pre-ping without a round trip while the connection is plainly alive.

    A connection the server ended (a restart, ``pg_terminate_backend``, an idle timeout) gets
    the server's FATAL message and then end-of-file, so its socket turns readable; an idle
    pooled connection otherwise receives nothing. So a connection that is idle, whose libpq
    status is OK and whose socket has nothing to read is alive as far as a ping could tell
    (a ping into a silently dead network would hang rather than fail); anything else gets
    the dialect's real ping (``ping``), which fails on a dead connection as before. Each
    checkout then costs a ``select()`` instead of a round trip: an append is one round trip.
    """
    quiet = _is_quiet(getattr(dbapi_connection, "driver_connection", dbapi_connection))
    return True if quiet else bool(ping(dbapi_connection))


def _is_quiet(conn: Any) -> bool:
    """A psycopg connection that is open, idle and has nothing to read (see ``_quiet_ping``)."""
    try:
        pgconn = conn.pgconn
        return bool(
            pgconn.status == _PQ_OK
            and pgconn.transaction_status == PG_IDLE
            and not io_select.select([pgconn.socket], [], [], 0)[0]
        )
    except Exception:  # a closed connection has no socket: not quiet
        return False


def _set_tenant_sql(is_local: str) -> str:
    """Set both tenant settings (``TENANT_SETTING``, ``DEFAULT_TENANT_SETTING``) to bound
    values, for the transaction (``is_local`` ``true``) or the session (``false``)."""
    return (
        f"SELECT set_config('{TENANT_SETTING}', %s, {is_local}), "
        f"set_config('{DEFAULT_TENANT_SETTING}', %s, {is_local})"
    )


SET_TENANT: Final = _set_tenant_sql("true")
"""``SET LOCAL`` of the tenant settings with bound values (what row-level security reads)."""


def scope_transactions(engine: Engine, tenant: str) -> None:
    """Set the tenant settings at the start of every transaction on ``engine`` (PostgreSQL).

    They are transaction-local (``set_config(..., true)``), so they never outlive the
    transaction on a pooled connection (they read ``''`` after it, which names no tenant).
    They are sent in one pipeline with psycopg's ``BEGIN``: no round trip is added to a
    transaction. The fast path sets them in its own pipeline.
    """
    if is_sqlite(engine):
        return
    values = (tenant, default_tenant_flag(tenant))

    def on_begin(conn: Connection) -> None:
        driver = conn.connection.driver_connection
        with pipeline(driver):
            done = driver.execute(SET_TENANT, values)  # type: ignore[union-attr]
            if isinstance(driver, psycopg.AsyncConnection):
                await_(done)

    event.listen(engine, "begin", on_begin)


@contextmanager
def pipeline(driver_connection: Any) -> Iterator[None]:
    """psycopg's pipeline mode on a pooled connection, sync or async (one round trip).

    On an async engine's connection (inside ``greenlet_spawn``) the async pipeline is entered
    and left through ``await_``, so the statements in the block queue exactly as they do on a
    sync connection, and the sync happens on the event loop.
    """
    if not isinstance(driver_connection, psycopg.AsyncConnection):
        with driver_connection.pipeline():
            yield
        return
    manager = driver_connection.pipeline()
    await_(manager.__aenter__())
    try:
        yield
    except BaseException as error:
        if not await_(manager.__aexit__(type(error), error, error.__traceback__)):
            raise
    else:
        await_(manager.__aexit__(None, None, None))


class IdleConnection:
    """One DBAPI connection a store keeps outside its pool, idle and in autocommit, for reads
    that need a single statement (the tail reads of ``fastpath``).

    A checkout from the pool costs more than such a read: PostgreSQL's pre-ping is a round
    trip, and the pool's events and reset run each time. This connection skips all that, and
    since it is kept in autocommit it is never left inside a transaction. It is taken without
    waiting: a caller that finds it in use (another thread, or another task of an async
    store) takes the ordinary pooled path instead, so it never serialises readers. It comes
    from the engine (the connect hooks ran on it) and is detached from the pool, so it does
    not reduce the pool's capacity; an in-memory SQLite database, whose single connection
    the pool hands to every user in turn, keeps none.

    On PostgreSQL the store's ``tenant`` is set on it for the session (row-level security
    reads it) when it is opened: it serves that store alone and never returns to the pool,
    so no other user sees the setting, and each read stays one statement.
    """

    def __init__(self, engine: Engine, tenant: str = "") -> None:
        self._engine = engine
        self._tenant = tenant
        self._lock = threading.Lock()
        self._raw: Any = None
        in_memory = is_sqlite(engine) and engine.url.database in (None, "", ":memory:")
        # Only beside a queue pool (the store's own): another pool class may hand out one
        # shared connection, which detaching would take from everybody else.
        self._closed = in_memory or not isinstance(engine.pool, QueuePool)

    @contextmanager
    def borrow(self) -> Iterator[Any]:
        """The idle DBAPI connection, or None when it is in use, closed or not kept.

        An exception inside the block discards the connection (it may be broken; the next
        borrower opens a new one).
        """
        if self._closed or not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            if self._raw is None:
                self._raw = self._open()
            try:
                yield self._raw.dbapi_connection
            except BaseException:
                self._discard()
                raise
        finally:
            if self._closed:
                self._discard()
            self._lock.release()

    def _open(self) -> Any:
        raw = self._engine.raw_connection()
        raw.detach()  # ours now: the pool neither counts nor resets it
        dbapi: Any = raw.dbapi_connection
        if not is_sqlite(self._engine):
            try:
                dbapi.rollback()  # out of whatever the pool's ping began
                dbapi.autocommit = True
                cursor = dbapi.cursor()
                try:
                    cursor.execute(
                        _set_tenant_sql("false"),
                        (self._tenant, default_tenant_flag(self._tenant)),
                    )
                finally:
                    cursor.close()
            except BaseException:
                with suppress(Exception):
                    dbapi.close()
                raise
        return raw

    def _discard(self) -> None:
        raw, self._raw = self._raw, None
        if raw is not None:
            with suppress(Exception):  # closing a broken connection may fail: it is gone
                # Closed by the driver itself: a detached fairy of the async pool would only
                # terminate it, and psycopg wants it closed.
                raw.dbapi_connection.close()

    def close(self) -> None:
        """Close the connection now, or, if it is in use, as soon as its borrower is done."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                self._discard()
            finally:
                self._lock.release()


class AsyncWriteConnections:
    """psycopg ``AsyncConnection``s that an async store on PostgreSQL keeps for its appends.

    An append on the async engine's pool pays a checkout (its pre-ping is a round trip), the
    pool's events and reset, and SQLAlchemy's adapter around every await. These connections
    are taken from that pool once, kept checked out, and lent to one append at a time; at
    most ``size`` are held, and an append that finds none free waits for one on the loop. A
    connection that broke is given back to the pool invalidated (the pool replaces it); one
    left inside a transaction is never lent again either.
    """

    def __init__(self, engine: Engine, size: int) -> None:
        self._engine = engine
        self._idle: list[Any] = []
        self._cursors: dict[Any, psycopg.AsyncClientCursor[Any]] = {}
        self._slots = loopsafe.Semaphore(size)
        self._closed = False

    async def take(self) -> Any:
        """A kept connection (the pool's proxy; its ``driver_connection`` is idle, in
        autocommit, the caller's alone), which the caller must ``give`` back.

        A kept connection is checked as the pool's pre-ping checks a pooled one
        (:func:`_quiet_ping`, no round trip); one the server ended while it sat idle is
        given back invalidated and another taken, since an append, sent with its commit,
        cannot be retried once sent. (Taken and given without an async context manager:
        this is on every append's path.)
        """
        await self._slots.acquire()
        try:
            if self._closed:
                raise PermanentStoreError.closed("open_async_store")
            while self._idle:
                try:
                    raw = self._idle.pop()
                except IndexError:  # taken meanwhile by an append of another loop's thread
                    break
                if _is_quiet(raw.driver_connection):
                    return raw
                self._cursors.pop(raw, None)
                await greenlet_spawn(_give_back, raw, True)
            return await greenlet_spawn(self._checkout)
        except BaseException:
            self._slots.release()
            raise

    def cursor(self, raw: Any) -> psycopg.AsyncClientCursor[Any]:
        """The client-binding cursor kept with a taken connection (one per connection, made
        once: a cursor is usable again after any outcome of its last query)."""
        cursor = self._cursors.get(raw)
        if cursor is None:
            cursor = self._cursors[raw] = psycopg.AsyncClientCursor(raw.driver_connection)
        return cursor

    async def give(self, raw: Any) -> None:
        """Take back what ``take`` lent: kept when it is idle and usable, else returned to the
        pool (invalidated when broken or left inside a transaction)."""
        try:
            conn = raw.driver_connection
            usable = not conn.broken and conn.info.transaction_status == PG_IDLE
            if usable and not self._closed:
                self._idle.append(raw)
            else:
                self._cursors.pop(raw, None)
                await greenlet_spawn(_give_back, raw, not usable)
        finally:
            self._slots.release()

    def _checkout(self) -> Any:
        raw = self._engine.raw_connection()
        dbapi: Any = raw.dbapi_connection
        try:
            dbapi.rollback()  # out of whatever the pool's ping began
            dbapi.autocommit = True  # the appends send BEGIN themselves (in their pipeline)
        except BaseException:
            _give_back(raw, True)
            raise
        return raw

    async def close(self) -> None:
        """Give every idle connection back to the pool; lent ones go back when returned."""
        self._closed = True
        idle, self._idle = self._idle, []
        self._cursors.clear()
        for raw in idle:
            await greenlet_spawn(_give_back, raw, False)


PG_IDLE: Final = psycopg.pq.TransactionStatus.IDLE
_PQ_OK: Final = psycopg.pq.ConnStatus.OK


def _give_back(raw: Any, broken: bool) -> None:
    """Return a held connection to its pool (invalidated first when it cannot be reused)."""
    with suppress(Exception):
        if broken:
            raw.invalidate()
        else:
            raw.dbapi_connection.autocommit = False  # as the pool's other connections
        raw.close()


def target_schema(engine: Engine | Connection, schema: str | None) -> str | None:
    """The schema objects live in: ``schema`` on PostgreSQL, ``None`` (the file) on SQLite."""
    return None if is_sqlite(engine) else schema


def database_label(engine: Engine) -> str:
    """How errors name the database: the file path, or the URL without its password."""
    if is_sqlite(engine):
        return engine.url.database or ":memory:"
    return engine.url.render_as_string(hide_password=True)


def lock_schema_init(conn: Connection, schema: str | None) -> None:
    """Serialise schema initialisation of ``schema`` until the transaction ends.

    On SQLite the ``BEGIN IMMEDIATE`` of :func:`write_tx` already does. On PostgreSQL a
    transaction-level advisory lock on a key derived from the schema name does, so that two
    first opens cannot both see an empty schema and both create it.
    """
    if is_sqlite(conn):
        return
    digest = hashlib.blake2b(f"session_sql:init:{schema}".encode(), digest_size=8).digest()
    key = int.from_bytes(digest, "big", signed=True)
    conn.execute(select(func.pg_advisory_xact_lock(bindparam("key", key, BigInteger))))


@contextmanager
def write_tx(engine: Engine) -> Iterator[Connection]:
    """A connection inside a write transaction that commits on success, rolls back on error.

    SQLite takes the write lock at ``BEGIN IMMEDIATE`` (waiting up to the busy timeout), so
    a read-then-write inside it cannot fail half-way on a lock upgrade.
    """
    with engine.connect() as conn:
        if is_sqlite(conn):
            conn.execution_options(**{_WRITE_OPTION: True})
        with conn.begin():
            yield conn


ANALYZE_SAMPLE_ROWS: Final = 1000
"""SQLite's ``analysis_limit``: rows sampled per index, so ANALYZE stays fast on any size."""


def analyze(engine: Engine, tables: Sequence[Table]) -> None:
    """Refresh the planner statistics of ``tables`` (``ANALYZE``).

    Without them a planner guesses row counts from nothing and can pick a nested loop where
    a join over a million events needs an index or a hash (docs/sql.md). On SQLite the
    sample is capped (``analysis_limit``), so this takes milliseconds; PostgreSQL samples
    anyway, and skips (with a warning, not an error) a table the role does not own.
    """
    with write_tx(engine) as conn:
        preparer = conn.dialect.identifier_preparer
        if is_sqlite(conn):
            conn.exec_driver_sql("PRAGMA analysis_limit = " + str(int(ANALYZE_SAMPLE_ROWS)))
            for t in tables:
                conn.exec_driver_sql("ANALYZE " + preparer.format_table(t))
        else:
            conn.exec_driver_sql("ANALYZE " + ", ".join(preparer.format_table(t) for t in tables))


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
        if not is_sqlite(conn):
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


# --------------------------------------------------------------------------------------------
# Error translation

_PG_CONNECTION_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03"})
# The branch of the other SQLSTATEs whose cause says what to do. Retrying may succeed after a
# serialization failure, a deadlock, a statement timeout (or cancel), too many connections or
# no memory; it fails the same way on a full disk, a database or role that does not exist, a
# refused login or a missing privilege.
_PG_ERROR_KINDS: Final[dict[str, type[StoreError]]] = {
    **dict.fromkeys(("40001", "40P01", "57014", "53300", "53200"), TransientStoreError),
    **dict.fromkeys(("53100", "3D000", "28000", "28P01", "42501"), PermanentStoreError),
}


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
    except (sqlite3.Error, psycopg.Error) as error:
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
    if isinstance(orig, sqlite3.Error):
        return _translate_sqlite(orig, session_id, database)
    if isinstance(orig, psycopg.Error):
        return _translate_psycopg(orig, session_id)
    return StoreError(f"database error: {orig}", session_id=session_id)


def _translate_sqlite(
    orig: sqlite3.Error, session_id: str | None, database: str | None
) -> SessionSQLError:
    name: str = getattr(orig, "sqlite_errorname", None) or ""
    where = f": {database}" if database else ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return TransientStoreError(
            f"database is locked{where}: another connection held it beyond the busy timeout",
            session_id=session_id,
        )
    if name.startswith("SQLITE_READONLY"):
        return PermanentStoreError(f"database is read-only{where} ({name})", session_id=session_id)
    if name == "SQLITE_NOTADB":
        return PermanentStoreError(
            f"not a session_sql database: {database or 'the file is not an SQLite database'}",
            session_id=session_id,
        )
    if name.startswith("SQLITE_CANTOPEN"):
        return PermanentStoreError(
            f"cannot open database file{where} ({name})", session_id=session_id
        )
    if name.startswith("SQLITE_CORRUPT"):
        return PermanentStoreError(
            f"database file is corrupt{where} ({name})", session_id=session_id
        )
    if name == "SQLITE_FULL":
        return PermanentStoreError(f"database or disk is full{where}", session_id=session_id)
    # SQLite reports no constraint name, so a constraint violation stays a StoreError; the
    # store avoids duplicate inserts by checking inside its BEGIN IMMEDIATE transaction.
    label = name or type(orig).__name__
    return StoreError(f"SQLite error {label}{where}: {orig}", session_id=session_id)


def _translate_psycopg(orig: psycopg.Error, session_id: str | None) -> SessionSQLError:
    sqlstate = orig.sqlstate or ""
    constraint = orig.diag.constraint_name
    if sqlstate == "23505" and constraint == _PK_SESSIONS:
        return SessionExistsError.for_session(session_id)
    if sqlstate == "23505" and constraint == _PK_EVENTS:
        return ConcurrencyError.appended_first(session_id)
    if (
        sqlstate.startswith("08")
        or sqlstate in _PG_CONNECTION_SQLSTATES
        or (not sqlstate and isinstance(orig, psycopg.OperationalError))
    ):
        return TransientStoreError(
            f"cannot reach the PostgreSQL server: {orig}", session_id=session_id
        )
    if sqlstate == "55P03":  # lock_not_available: lock_timeout expired
        what = f"session {session_id!r}" if session_id else "the database object"
        return TransientStoreError(
            f"{what} is locked by another transaction for longer than lock_timeout_ms; nothing "
            "was written: retry later, or end the transaction holding the lock",
            session_id=session_id,
        )
    if sqlstate == "25006":
        return PermanentStoreError(f"database is read-only: {orig}", session_id=session_id)
    label = f"SQLSTATE {sqlstate}" if sqlstate else type(orig).__name__
    kind = _PG_ERROR_KINDS.get(sqlstate, StoreError)
    return kind(f"PostgreSQL error ({label}): {orig}", session_id=session_id)
