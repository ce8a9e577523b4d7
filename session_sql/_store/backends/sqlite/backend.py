"""SQLite: pysqlite engines, ``BEGIN IMMEDIATE``, WAL, error names, and its forms of queries.

WAL, foreign keys, a busy timeout and ``synchronous`` are set on every connection; pysqlite's
own transaction handling is switched off so that we emit ``BEGIN`` ourselves — ``BEGIN
IMMEDIATE`` for writes (the write lock is taken up front, so a transaction never has to
upgrade a read lock, which SQLite refuses with ``SQLITE_BUSY`` without waiting) and a deferred
``BEGIN`` for reads (the append transaction, ``appending``, begins with the same ``BEGIN
IMMEDIATE`` on its DBAPI connection). An in-memory database is one connection, which every
thread shares in turn (a pool of exactly that connection). WAL is switched on by
``prepare_store`` once the schema gate has accepted (or created) the store, never on connect,
so opening a database that is not ours changes nothing in it. Followers poll: nothing
notifies them.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlencode

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    FromClause,
    Insert,
    LargeBinary,
    Select,
    Table,
    and_,
    bindparam,
    case,
    cast,
    event,
    func,
    literal,
    make_url,
)
from sqlalchemy import create_engine as _sa_create_engine
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool

from session_sql._store.backends.base import (
    COUNT_DIGITS,
    AsyncListener,
    Backend,
    Columns,
    Conditions,
    EngineOptions,
    Joined,
    Listener,
    Offload,
    Vacuumed,
    WithEvents,
    driver_cause,
    synchronous_mode,
)
from session_sql._store.backends.sqlite import appending, quick, vacuuming
from session_sql._store.backends.sqlite.appending import BEGIN_WRITE
from session_sql._store.backends.sqlite.errors import translate
from session_sql._store.backends.sqlite.opening import explain_wal_reader
from session_sql._store.backends.sqlite.vacuuming import INCREMENTAL_VACUUM
from session_sql._store.transactions import Run
from session_sql.errors import PermanentStoreError, SessionSQLError, StoreError

if TYPE_CHECKING:
    from session_sql._store.context import Statements, StoreContext
    from session_sql._store.schema import SchemaTables
    from session_sql._store.transactions import AppendPart

__all__ = ["SQLITE", "SQLiteBackend", "sqlite_pragmas"]

WRITE_OPTION: Final = "session_sql_write"
"""Execution option that makes the ``begin`` hook emit ``BEGIN IMMEDIATE``."""

BEGIN_READ: Final = "BEGIN"

RECLAIM_MAX_PAUSE: Final = 0.2
"""The longest pause between two incremental vacuum steps, in seconds."""
RECLAIM_BUSY_MS: Final = 100
"""How long the WAL-truncating checkpoint after a prune waits for readers before giving up."""

ANALYZE_SAMPLE_ROWS: Final = 1000
"""SQLite's ``analysis_limit``: rows sampled per index, so ANALYZE stays fast on any size."""

STATISTICS_MIN_EVENTS: Final = 10_000
"""Below this many events no statistics are written (every plan is fast on a small log)."""

STATISTICS_GROWTH: Final = 2
"""The statistics are stale once the log has grown (or shrunk) by this factor since."""

_EVENTS_SIZE = "SELECT COUNT(*), COALESCE(SUM(head_seq + 1), 0) FROM sessions WHERE head_seq >= 0"
"""Sessions with events, and events (a log holds seqs 0..head_seq): one pass over sessions."""


def sqlite_pragmas(synchronous: str = "FULL") -> tuple[str, ...]:
    """The pragmas every SQLite connection runs first, in order, for the given options.

    Foreign keys and ``synchronous`` (``FULL`` or ``NORMAL``, any case); ``ConfigurationError``
    for another mode. WAL is a property of the file, switched once by ``prepare_store``. The
    engine's connect hook runs them, and so does ``session-sql bench``'s raw-driver baseline.
    """
    mode = synchronous_mode(synchronous)
    return (
        "PRAGMA foreign_keys = ON",
        f"PRAGMA synchronous = {mode}",
    )


def _in_memory(database: str | None) -> bool:
    return database in (None, "", ":memory:")


_URI_PARAMETERS: Final = frozenset(
    {"cache", "immutable", "mode", "modeof", "nolock", "psow", "vfs"}
)
"""Query parameters of SQLite's URI filenames (https://sqlite.org/uri.html)."""


def _uri_parameters(url: URL, connect_args: dict[str, Any], kw: dict[str, Any]) -> URL:
    """Honour SQLite URI parameters on a plain ``sqlite:///path?mode=ro`` URL.

    pysqlite applies them only in ``file:`` URI form with ``uri=true``, and ignores them (with
    a warning) otherwise, so ``?immutable=1``, the way to read a WAL store on a read-only
    medium, would silently do nothing. Here they are taken off the URL, which keeps naming
    the file, and each connection opens the ``file:`` URI with them instead.
    """
    given = {k: v for k, v in url.query.items() if k in _URI_PARAMETERS}
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


def _affinity(declared: str) -> str:
    """SQLite's rules for a declared column type (https://sqlite.org/datatype3.html §3.1)."""
    declared = declared.upper()
    if "INT" in declared:
        return "INTEGER"
    if any(word in declared for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in declared or not declared or declared == "NULLTYPE":
        return "BLOB"
    if any(word in declared for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


class SQLiteBackend(Backend):
    """SQLite through pysqlite (the stdlib's ``sqlite3``)."""

    name = "sqlite"
    driver = "sqlite+pysqlite"
    schemes = frozenset({"sqlite", "sqlite+pysqlite"})
    driver_error = sqlite3.Error
    listens = False
    standbys = False
    single_writer = True
    async_threads = True
    distributable = False
    stale_statistics = True

    def append_parts(self, ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
        return appending.append_parts(ctx, parts)

    def own_statements(
        self,
        st: Statements,
        tables: SchemaTables,
        dialect: Dialect,
        tenant_on_workers: bool,
        delegated: bool = False,
        distributed: bool = False,
    ) -> Any:
        return None  # SQLite runs only the statements both databases share

    def insert_run(self, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> Run:
        return Run(ctx.compiled.insert_event_values, rows, many=True)

    def nodes_run(self, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> Run:
        return Run(ctx.compiled.insert_node.sql, rows, many=True)  # binds the tuples as they are

    def copy_allowed(self, cur: Any, ctx: StoreContext) -> bool:
        return False  # SQLite has no COPY

    def begin_read(self, ctx: StoreContext, raw: Any) -> None:
        return  # no tenant setting: the statements filter by tenant

    # -- engines -----------------------------------------------------------------------

    def create_engine(self, url: URL, options: EngineOptions, kw: dict[str, Any]) -> Engine:
        pragmas = sqlite_pragmas(options.synchronous)
        busy_timeout_ms = options.busy_timeout_ms
        connect_args = dict(kw.pop("connect_args", {}))
        # sqlite3's ``timeout`` is the busy timeout, set before any statement runs — including
        # the journal_mode pragma, which must wait too when another process holds the file.
        connect_args["timeout"] = busy_timeout_ms / 1000
        if _in_memory(url.database):
            # One database per connection, so every thread must use the same one: a pool of
            # exactly that connection, which threads take in turn (waiting like the busy
            # timeout).
            kw.setdefault("poolclass", QueuePool)
            kw.update(pool_size=1, max_overflow=0, creator=_one_connection(connect_args))
            kw.setdefault("pool_timeout", busy_timeout_ms / 1000)
        else:
            kw.setdefault("poolclass", QueuePool)
            kw.setdefault("pool_size", options.pool_size)
            url = _uri_parameters(url, connect_args, kw)
        engine = _sa_create_engine(url, connect_args=connect_args, **kw)

        def on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
            # Take over BEGIN from pysqlite (see module docstring); sqlite3 still issues
            # COMMIT and ROLLBACK correctly with isolation_level None.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                for pragma in pragmas:
                    cursor.execute(pragma)
            finally:
                cursor.close()

        def on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get(WRITE_OPTION)
            conn.exec_driver_sql(BEGIN_WRITE if write else BEGIN_READ)

        event.listen(engine, "connect", on_connect)
        event.listen(engine, "begin", on_begin)
        return engine

    def prepare_store(self, engine: Engine) -> None:
        """Switch the store's file to WAL (a persistent, one-time change).

        Called once the schema gate has accepted the database, so that a file that is not a
        session_sql store is never switched. Raises driver errors (wrap in
        ``translate_errors``).
        """
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

    def scope_transactions(self, engine: Engine, tenant: str, tenant_on_workers: bool) -> None:
        return  # no row-level security: every statement filters on the tenant itself

    def require_existing(self, url: URL) -> None:
        """A missing file is an error; connecting would create it."""
        parsed = make_url(url)
        database = parsed.database or ""
        path = database.removeprefix("file:") if parsed.query.get("uri") else database
        if path in ("", ":memory:") or not Path(path).exists():
            raise PermanentStoreError.no_store(database or ":memory:", "the file does not exist")

    def target_schema(self, schema: str | None) -> str | None:
        return None  # the file

    def notify_channel(self, schema: str | None) -> str | None:
        return None

    def database_label(self, engine: Engine) -> str:
        return engine.url.database or ":memory:"

    def database_file(self, engine: Engine) -> str | None:
        file = engine.url.database
        return None if _in_memory(file) else file

    def explain_open_failure(self, url: URL, error: StoreError) -> StoreError | None:
        return explain_wal_reader(url, driver_cause(error))

    def same_store(
        self, engine: Engine, schema: str | None, other: Engine, other_schema: str
    ) -> bool:
        """The same file (two in-memory databases never are)."""
        paths = [e.url.database or "" for e in (engine, other)]
        if any(p in ("", ":memory:") for p in paths):
            return False
        return os.path.realpath(paths[0]) == os.path.realpath(paths[1])

    # -- transactions ------------------------------------------------------------------

    def begin_write(self, conn: Connection) -> None:
        """``BEGIN IMMEDIATE``: the write lock up front (waiting up to the busy timeout), so
        a read-then-write cannot fail half-way on a lock upgrade."""
        conn.execution_options(**{WRITE_OPTION: True})

    def begin_create(self, conn: Connection) -> None:
        """``auto_vacuum = INCREMENTAL``, so that a prune can give pages back to the file
        system in short steps (``reclaim_space``). SQLite takes it only before the first
        table exists and outside a transaction, so on the DBAPI connection itself (in
        autocommit: the driver's transaction handling is off); on a database that has tables
        already (a rival created it first) it changes nothing."""
        conn.connection.driver_connection.execute(  # type: ignore[union-attr]
            "PRAGMA auto_vacuum = INCREMENTAL"
        )

    def begin_snapshot(self, conn: Connection) -> None:
        return  # a WAL read transaction is one snapshot already

    def lock_schema_init(self, conn: Connection, schema: str | None) -> None:
        return  # the BEGIN IMMEDIATE of write_tx already serialises it

    def analyze(self, conn: Connection, tables: Sequence[Table]) -> None:
        """The sample is capped (``analysis_limit``), so this takes milliseconds; then the
        session-keyed figures are set from exact counts (``_correct_session_keyed``)."""
        preparer = conn.dialect.identifier_preparer
        conn.exec_driver_sql("PRAGMA analysis_limit = " + str(int(ANALYZE_SAMPLE_ROWS)))
        for t in tables:
            conn.exec_driver_sql("ANALYZE " + preparer.format_table(t))
        _correct_session_keyed(conn)

    def statistics_stale(self, conn: Connection) -> bool:
        """Stale when a log of at least ``STATISTICS_MIN_EVENTS`` has none, or has grown or
        shrunk by ``STATISTICS_GROWTH`` since (nothing else ever writes them on SQLite)."""
        _, events = conn.exec_driver_sql(_EVENTS_SIZE).one()
        if events < STATISTICS_MIN_EVENTS:
            return False
        analyzed = _analyzed_events(conn)
        return analyzed is None or not (
            analyzed / STATISTICS_GROWTH < events < analyzed * STATISTICS_GROWTH
        )

    # -- connections kept outside a checkout -------------------------------------------

    def keeps_idle(self, engine: Engine, tenant_on_workers: bool) -> bool:
        # An in-memory database is one connection, which the pool hands to every user.
        return not _in_memory(engine.url.database)

    def open_idle(self, dbapi_connection: Any, tenant: str) -> None:
        return  # the connect hook set everything

    # -- following ---------------------------------------------------------------------

    def listener(self, ctx: StoreContext, session_id: str) -> Listener | None:
        return None

    async def async_listener(
        self, ctx: StoreContext, session_id: str, call: Offload
    ) -> AsyncListener | None:
        return None

    def wake(self, ctx: StoreContext, notes: Sequence[tuple[str, int]]) -> None:
        return

    # -- errors ------------------------------------------------------------------------

    def translate_error(
        self, orig: Exception, session_id: str | None, database: str | None
    ) -> SessionSQLError:
        assert isinstance(orig, sqlite3.Error)
        return translate(orig, session_id, database)

    # -- statements --------------------------------------------------------------------

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return sqlite_insert(table).on_conflict_do_nothing()

    def join_events(
        self, nodes: FromClause, events: Table, columns: Columns, key: ColumnElement[Any]
    ) -> Joined:
        """A plain join: SQLite always runs it as a nested loop over ``nodes``."""
        e = events
        by_key = (e.c.session_key == nodes.c.session_key) & (e.c.seq == nodes.c.event_seq)
        return nodes.join(e, by_key), list(columns)

    def last_nodes(self, nodes: Table, where: Conditions, with_events: WithEvents) -> Select[Any]:
        """The surface key walked backwards, each event looked up as it goes (the nested
        loop of ``join_events``), so the LIMIT stops it after ``b_limit`` rows; a subquery
        would be materialised and sorted again, a third of a tail read."""
        newest_first = with_events(nodes).where(*where).order_by(nodes.c.pos.desc())
        return newest_first.limit(bindparam("b_limit"))

    # -- listing, stats, schema gate, migrate ------------------------------------------

    def text_bytes(self, column: ColumnElement[Any]) -> ColumnElement[int]:
        return func.length(cast(column, LargeBinary))  # a BLOB's length is in bytes

    def json_count(
        self, column: ColumnElement[Any], path: tuple[str, ...]
    ) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        where = literal("$" + "".join(f'."{key}"' for key in path))
        kind = func.json_type(column, where)
        value = func.json_extract(column, where)
        sane = and_(kind == "integer", value >= 0, value < 10**COUNT_DIGITS)
        return case((sane, value)), and_(kind.is_not(None), kind != "null")

    def reclaim_space(self, engine: Engine, pages: int) -> None:
        """Incremental vacuum, ``pages`` per ``BEGIN IMMEDIATE`` transaction with a pause
        after each, so a writer waits for one step at most; then a passive checkpoint, which
        moves the shrunken database into the file and truncates it, and a truncating one
        that gives up after ``RECLAIM_BUSY_MS`` rather than make writers wait for readers. A
        file made before ``auto_vacuum`` was set when a store is created keeps its size
        (VACUUM it: docs/operations.md)."""
        raw = engine.raw_connection()
        try:
            db = raw.driver_connection
            assert isinstance(db, sqlite3.Connection)
            if db.execute("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL_VACUUM:
                return
            free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
            for _ in range(free // pages + 1):  # bounded, whatever others free meanwhile
                if not db.execute("PRAGMA freelist_count").fetchone()[0]:
                    break
                # A script, because the pragma frees one page per step of its statement and
                # the driver's execute() steps once; executescript steps each to the end.
                began = time.monotonic()
                try:
                    db.executescript(
                        f"{BEGIN_WRITE}; PRAGMA incremental_vacuum({int(pages)}); COMMIT;"
                    )
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                # As long again without the lock: writers waiting for it get in (their busy
                # handler retries at growing intervals, and would lose every race to us).
                time.sleep(min(time.monotonic() - began, RECLAIM_MAX_PAUSE))
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            timeout = int(db.execute("PRAGMA busy_timeout").fetchone()[0])
            db.execute("PRAGMA busy_timeout = " + str(int(RECLAIM_BUSY_MS)))
            try:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # busy: a row says so
            finally:
                db.execute("PRAGMA busy_timeout = " + str(int(timeout)))
        finally:
            raw.close()

    def store_bytes(self, engine: Engine, tables: Sequence[Table]) -> int:
        return vacuuming.store_bytes(engine)

    def reclaimable_pages(self, engine: Engine) -> int:
        return vacuuming.reclaimable_pages(engine)

    def vacuum(
        self, engine: Engine, tables: Sequence[Table], *, full: bool, pages: int
    ) -> Vacuumed:
        done = vacuuming.vacuum(engine, full=full, pages=pages)
        if done is not None:
            return done
        self.reclaim_space(engine, pages)
        return Vacuumed("PRAGMA incremental_vacuum")

    def labels_match(
        self, labels: ColumnElement[Any], wanted: Mapping[str, str]
    ) -> list[ColumnElement[bool]]:
        return [labels[name].as_string() == value for name, value in wanted.items()]

    def same_column_type(self, expected: str, live: str) -> bool:
        # SQLite only honours type affinity, so BIGINT and INTEGER are the same column here.
        return _affinity(expected) == _affinity(live)

    def structure_differences(self, conn: Connection, tables: SchemaTables) -> list[str]:
        return []

    def vouches_for_schema(self, conn: Connection, tables: SchemaTables) -> bool:
        """SQLite keeps each object's text as it was created, so a fresh store's catalog is
        known in advance (``quick.SCHEMA_DIGEST``): the text and the version rows, compared
        in the gate's snapshot, are the whole check."""
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        if quick.schema_digest(raw) != quick.SCHEMA_DIGEST:
            return False
        meta = dict(raw.execute("SELECT key, value FROM session_sql_meta").fetchall())
        return meta == quick.META_ROWS

    def record_schema(self, conn: Connection, tables: SchemaTables) -> None:
        return  # nothing to record: the expected catalog is this build's constant

    def can_distribute(self, conn: Connection) -> bool:
        return False

    def distribute(self, conn: Connection, tables: SchemaTables) -> None:
        raise AssertionError("an SQLite store is never distributed")

    def distribution(self, conn: Connection, tables: SchemaTables) -> tuple[bool, list[str]]:
        return False, []

    def row_security_applies(self, engine: Engine, sessions: Table) -> bool:
        return False

    def delegates_append(self, engine: Engine, tables: SchemaTables, *, create: bool) -> bool:
        return False  # never distributed

    def refuse_row_security(self, engine: Engine, sessions: Table, side: str) -> None:
        return  # no row-level security


SQLITE: Final = SQLiteBackend()


def _analyzed_events(conn: Connection) -> int | None:
    """The events the statistics were taken on (``sqlite_stat1``), or ``None``: none yet."""
    found = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
    ).first()
    if found is None:
        return None
    row = conn.exec_driver_sql(
        "SELECT stat FROM sqlite_stat1 WHERE tbl = 'events' AND idx = 'events'"
    ).first()
    return None if row is None else int(str(row[0]).split()[0])


def _correct_session_keyed(conn: Connection) -> None:
    """Set the first two figures of every events and surface index (rows; rows per session:
    each of them starts with ``session_key``) from exact counts, and reload them.

    A sampled ANALYZE reads the first ``analysis_limit`` entries of each index: a few
    sessions, so it takes a session for a few hundred rows, however long the logs are. With
    that, the turns view walks a whole session's primary key instead of its turn boundaries'
    partial index. The sampled ratio between an index and its table is kept.
    """
    sessions, events = conn.exec_driver_sql(_EVENTS_SIZE).one()
    if not sessions or _analyzed_events(conn) is None:
        return
    rows = conn.exec_driver_sql(
        "SELECT tbl, idx, stat FROM sqlite_stat1 WHERE tbl IN ('events', 'surface')"
    ).all()
    sampled = {(tbl, idx): str(stat).split() for tbl, idx, stat in rows}
    table_rows = int(sampled.get(("events", "events"), ["0"])[0])
    for (tbl, idx), figures in sampled.items():
        if len(figures) < 3 or not figures[0].isdigit():
            continue
        total = int(figures[0])
        if tbl == "events" and table_rows:
            total = max(1, round(total * events / table_rows))
        tail = [int(f) for f in figures[2:] if f.isdigit()]
        per_session = max(1, round(total / sessions), *(tail[:1] or [1]))
        stat = " ".join([str(total), str(per_session), *figures[2:]])
        conn.exec_driver_sql(
            "UPDATE sqlite_stat1 SET stat = ? WHERE tbl = ? AND idx = ?", (stat, tbl, idx)
        )
    conn.exec_driver_sql("ANALYZE sqlite_master")  # the planner reads the new figures
