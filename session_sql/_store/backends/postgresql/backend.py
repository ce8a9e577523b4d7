"""PostgreSQL: psycopg 3 engines, the tenant of row-level security, SQLSTATEs, NOTIFY.

psycopg 3 with a ``QueuePool`` that pings before use (without a round trip while a connection
is plainly alive: ``_quiet_ping``), and a ``lock_timeout`` on every connection so that a write
blocked by a stalled transaction fails instead of waiting forever (the counterpart of SQLite's
busy timeout). Every transaction sets the store's tenant for row-level security, in one
pipeline with psycopg's ``BEGIN``. Followers LISTEN (``listening``) for the ``NOTIFY`` each
commit sends on the store's channel.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import select as io_select
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import psycopg
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    FromClause,
    Insert,
    Select,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    event,
    func,
    literal,
    select,
    true,
    type_coerce,
)
from sqlalchemy import create_engine as _sa_create_engine
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, QueuePool
from sqlalchemy.util.concurrency import in_greenlet

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
)
from session_sql._store.backends.postgresql import (
    appending,
    delegation,
    first_connect,
    pool_queue,
    vacuuming,
)
from session_sql._store.backends.postgresql import catalog as pg_catalog
from session_sql._store.backends.postgresql import distribution as citus
from session_sql._store.backends.postgresql.delegation import delegated_for
from session_sql._store.backends.postgresql.driving import PG_IDLE
from session_sql._store.backends.postgresql.errors import translate
from session_sql._store.backends.postgresql.one_query import tenant_params
from session_sql._store.backends.postgresql.prepared import forgetting_rollback
from session_sql._store.backends.postgresql.refused import explain_refused_connection
from session_sql._store.rows import SURFACE_COLUMNS
from session_sql._store.schema import (
    DEFAULT_TENANT_SETTING,
    TENANT_SETTING,
    default_tenant_flag,
    distributed_sets,
)
from session_sql._store.transactions import Run
from session_sql.errors import (
    ConfigurationError,
    SessionSQLError,
    StoreError,
)

if TYPE_CHECKING:
    from session_sql._store.context import CompiledStatements, Statements, StoreContext
    from session_sql._store.schema import SchemaTables
    from session_sql._store.transactions import AppendPart

__all__ = [
    "POSTGRESQL",
    "SET_TENANT",
    "PostgreSQLBackend",
    "is_quiet",
]

_log = logging.getLogger("session_sql")
_PQ_OK: Final = psycopg.pq.ConnStatus.OK


# --------------------------------------------------------------------------------------------
# Engines


class _LoopSafePool(AsyncAdaptedQueuePool):
    """The async pool, whose checkouts may wait on any event loop: an async store serves every
    loop that uses it (psycopg's async connections wait on whichever loop awaits them)."""

    _queue_class = pool_queue.Queue[ConnectionPoolEntry]


def _create_engine(
    url: URL, lock_timeout_ms: int, pool_size: int, kw: dict[str, Any], *, async_driver: bool
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
    # The store has no hstore column: without this, the dialect's first connect looks the
    # type up in the catalog, a round trip and a catalog read on every new engine.
    kw.setdefault("use_native_hstore", False)
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
        row = dbapi_connection.execute(
            "SELECT set_config('lock_timeout', %s, false), "
            "set_config('client_encoding', 'UTF8', false), "
            f"set_config('citus.node_connection_timeout', %s, false), {first_connect.ANSWERS}",
            (f"{lock_timeout_ms}ms", str(CITUS_NODE_CONNECTION_TIMEOUT_MS)),
        ).fetchone()
        dbapi_connection.autocommit = autocommit
        first_connect.keep_answers(
            getattr(dbapi_connection, "driver_connection", dbapi_connection), row[3:]
        )

    # First, before the dialect's own first-connect initialisation, which cannot read a
    # SQL_ASCII server's version and would fail with a bare TypeError.
    event.listen(engine, "connect", on_connect, insert=True)
    if kw["pool_pre_ping"]:
        engine.dialect.do_ping = functools.partial(_quiet_ping, engine.dialect.do_ping)  # type: ignore[method-assign]
    first_connect.answer_first_connect(engine.dialect)
    engine.dialect.do_rollback = functools.partial(  # type: ignore[method-assign]
        forgetting_rollback, engine.dialect.do_rollback
    )
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
    quiet = is_quiet(getattr(dbapi_connection, "driver_connection", dbapi_connection))
    return True if quiet else bool(ping(dbapi_connection))


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read now (``poll``: any descriptor number, where
    ``select`` refuses those past 1,023)."""
    poller = io_select.poll()
    poller.register(fd, io_select.POLLIN)
    return bool(poller.poll(0))


def is_quiet(conn: Any) -> bool:
    """A psycopg connection that is open, idle and has nothing to read (see ``_quiet_ping``)."""
    try:
        pgconn = conn.pgconn
        return bool(
            pgconn.status == _PQ_OK
            and pgconn.transaction_status == PG_IDLE
            and not _readable(pgconn.socket)
        )
    except Exception:  # a closed connection has no socket: not quiet
        return False


CITUS_NODE_CONNECTION_TIMEOUT_MS: Final = 5000
"""How long a Citus coordinator waits to reach a worker for the store (its default is 30 s,
beyond the store's own connect timeout of 10 s): a worker that is down then fails the call
with ``TransientStoreError`` in seconds. On plain PostgreSQL the setting is an unused
placeholder."""


# --------------------------------------------------------------------------------------------
# The tenant, and psycopg's pipeline


def _set_tenant_sql(is_local: str) -> str:
    """Set both tenant settings (``TENANT_SETTING``, ``DEFAULT_TENANT_SETTING``) to bound
    values, for the transaction (``is_local`` ``true``) or the session (``false``)."""
    return (
        f"SELECT set_config('{TENANT_SETTING}', %s, {is_local}), "
        f"set_config('{DEFAULT_TENANT_SETTING}', %s, {is_local})"
    )


SET_TENANT: Final = _set_tenant_sql("true")
"""``SET LOCAL`` of the tenant settings with bound values (what row-level security reads)."""


# --------------------------------------------------------------------------------------------
# Statements


class PostgreSQLBackend(Backend):
    """PostgreSQL through psycopg 3 (sync, or async for the async store)."""

    name = "postgresql"
    driver = "postgresql+psycopg"
    schemes = frozenset({"postgresql", "postgres", "postgresql+psycopg"})
    driver_error = psycopg.Error
    listens = True
    standbys = True
    single_writer = False
    async_threads = False
    distributable = True
    stale_statistics = False

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
        from session_sql._store.backends.postgresql.statements import (  # noqa: PLC0415
            OwnStatements,  # (it imports the context, which imports this module)
        )

        tenant = str(st.tenant_param.value)
        return OwnStatements(
            st,
            tables,
            tenant,
            dialect,
            tenant_on_workers=tenant_on_workers,
            delegated=delegated,
            distributed=distributed,
        )

    def drop_nodes_run(self, compiled: CompiledStatements, own: Any) -> Callable[..., Run]:
        run: Callable[..., Run] = own.drop_run  # one statement (``drop_nodes``)
        return run

    def insert_run(self, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> Run:
        """One statement over column arrays (``Statements.insert_events_unnest``)."""
        unnest = ctx.writes.own.insert_events_unnest
        return Run(unnest.sql, appending.unnest_values(rows))

    def nodes_run(self, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> Run:
        named = [dict(zip(SURFACE_COLUMNS, row, strict=True)) for row in rows]
        return Run(ctx.compiled.insert_node.sql, named, many=True)  # pyformat: named

    def copy_rows(
        self, cur: Any, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        with cur.copy(appending.copy_statement(table, columns)) as copy:
            for row in rows:
                copy.write_row(row)

    def copy_allowed(self, cur: Any, ctx: StoreContext) -> bool:
        """``COPY`` needs the sync driver's cursor (the async engine's adapted one has none),
        and no row-level security on ``events`` for this role (``COPY FROM`` refuses it)."""
        if not hasattr(cur, "copy"):
            return False
        cur.execute(appending.ROW_SECURITY_ACTIVE, (appending.qualified(ctx.tables.events),))
        row = cur.fetchone()
        return row is not None and not row[0]

    def begin_read(self, ctx: StoreContext, raw: Any) -> None:
        """The tenant setting first, in one pipeline with psycopg's ``BEGIN`` (the read's
        rows are then fetched outside it); on the async engine, through its adapter."""
        w = ctx.writes
        driver = raw.driver_connection
        if w.own.distributed_sets:  # one query of its own (see ``one_query.tenant_first``)
            raw.cursor().execute(";".join(w.own.distributed_sets))
            return
        set_tenant, params = w.own.set_tenant.sql, tenant_params(w)
        if isinstance(driver, psycopg.AsyncConnection):
            raw.cursor().execute(set_tenant, params)
            return
        with driver.pipeline():
            raw.cursor().execute(set_tenant, params)

    # -- engines -----------------------------------------------------------------------

    def create_engine(self, url: URL, options: EngineOptions, kw: dict[str, Any]) -> Engine:
        """``async_driver``: the sync face of an asyncio engine on psycopg's async
        connections. The store's ordinary code runs on it unchanged inside
        ``sqlalchemy.util.greenlet_spawn``, every I/O step being awaited on the event loop."""
        return _create_engine(
            url, options.lock_timeout_ms, options.pool_size, kw, async_driver=options.async_driver
        )

    def prepare_store(self, engine: Engine) -> None:
        return

    def scope_transactions(self, engine: Engine, tenant: str, tenant_on_workers: bool) -> None:
        """Set the tenant settings at the start of every transaction on ``engine``.

        They are transaction-local (``set_config(..., true)``), so they never outlive the
        transaction on a pooled connection (they read ``''`` after it, which names no tenant).
        They are sent in one pipeline with psycopg's ``BEGIN``: no round trip is added to a
        transaction. The append flows set them themselves (``appending``, ``one_query``).
        On a distributed store they are ``SET LOCAL`` statements that reach the workers
        (``schema.distributed_sets``).
        """
        values = (tenant, default_tenant_flag(tenant))
        sets = ";".join(distributed_sets(tenant))

        def on_begin(conn: Connection) -> None:
            driver = conn.connection.driver_connection
            if isinstance(driver, psycopg.AsyncConnection):  # SQLAlchemy's adapter awaits it
                cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                if tenant_on_workers:
                    cursor.execute(sets)
                else:
                    cursor.execute(SET_TENANT, values)
                return
            if tenant_on_workers:  # one query of its own (see ``one_query.tenant_first``)
                driver.execute(sets)  # type: ignore[union-attr]
                return
            with driver.pipeline():  # type: ignore[union-attr]
                driver.execute(SET_TENANT, values)  # type: ignore[union-attr]

        event.listen(engine, "begin", on_begin)

    def require_existing(self, url: URL) -> None:
        return  # connecting creates nothing; the gate finds no tables

    def target_schema(self, schema: str | None) -> str | None:
        return schema

    def notify_channel(self, schema: str | None) -> str | None:
        return schema  # one channel per store: its schema's name

    def database_label(self, engine: Engine) -> str:
        return engine.url.render_as_string(hide_password=True)

    def database_file(self, engine: Engine) -> str | None:
        return None

    def explain_open_failure(self, url: URL, error: StoreError) -> StoreError | None:
        if in_greenlet():  # the async store opening on its loop asks from a thread instead
            return None
        return explain_refused_connection(driver_cause(error))

    def same_store(
        self, engine: Engine, schema: str | None, other: Engine, other_schema: str
    ) -> bool:
        """The same database (by URL, passwords aside) and schema."""
        return engine.url.set(password=None) == other.url.set(password=None) and (
            schema == other_schema
        )

    # -- transactions ------------------------------------------------------------------

    def begin_write(self, conn: Connection) -> None:
        return  # the conditional updates take their row locks

    def begin_create(self, conn: Connection) -> None:
        return  # nothing to choose before the tables exist

    def begin_snapshot(self, conn: Connection) -> None:
        # Under READ COMMITTED each statement takes a fresh snapshot.
        conn.execution_options(isolation_level="REPEATABLE READ")

    def lock_schema_init(self, conn: Connection, schema: str | None) -> None:
        """A transaction-level advisory lock on a key derived from the schema name, so that
        two first opens cannot both see an empty schema and both create it."""
        digest = hashlib.blake2b(f"session_sql:init:{schema}".encode(), digest_size=8).digest()
        key = int.from_bytes(digest, "big", signed=True)
        conn.execute(select(func.pg_advisory_xact_lock(bindparam("key", key, BigInteger))))

    def analyze(self, conn: Connection, tables: Sequence[Table]) -> None:
        """PostgreSQL samples anyway, and skips (with a warning, not an error) a table the
        role does not own."""
        preparer = conn.dialect.identifier_preparer
        conn.exec_driver_sql("ANALYZE " + ", ".join(preparer.format_table(t) for t in tables))

    def statistics_stale(self, conn: Connection) -> bool:
        """Never: autovacuum's autoanalyze refreshes them as tables change."""
        return False

    # -- connections kept outside a checkout -------------------------------------------

    def keeps_idle(self, engine: Engine, tenant_on_workers: bool) -> bool:
        # A distributed store's tenant setting reaches the workers only as SET LOCAL, inside
        # a transaction: an autocommit connection's statements would run without it.
        return not tenant_on_workers

    def open_idle(self, dbapi_connection: Any, tenant: str) -> None:
        """Autocommit, with the store's tenant set for the session: the connection serves
        that store alone and never returns to the pool, so each read stays one statement."""
        dbapi_connection.rollback()  # out of whatever the pool's ping began
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(_set_tenant_sql("false"), (tenant, default_tenant_flag(tenant)))
        finally:
            cursor.close()

    # -- following ---------------------------------------------------------------------

    def listener(self, ctx: StoreContext, session_id: str) -> Listener | None:
        # Imported here: the listeners translate errors with the package's wrapper, which
        # dispatches to this module.
        from session_sql._store.backends.postgresql.listening import HubListener  # noqa: PLC0415

        return HubListener.open(ctx, session_id)

    async def async_listener(
        self, ctx: StoreContext, session_id: str, call: Offload
    ) -> AsyncListener | None:
        from session_sql._store.backends.postgresql.listening import AsyncHubListener  # noqa: PLC0415

        return await AsyncHubListener.open(ctx, session_id)

    def wake(self, ctx: StoreContext, notes: Sequence[tuple[str, int]]) -> None:
        """``pg_notify`` on the store's channel for each note, in a transaction of its own on
        a pooled connection: it writes nothing, so its commit waits for no WAL flush while it
        holds PostgreSQL's database-wide notify lock (which a ``NOTIFY`` inside the append
        would hold across the append's durable commit)."""
        rows = ctx.wake_notes(notes)
        if not rows:
            return
        try:
            with ctx.engine.connect() as conn:
                for row in rows:
                    conn.execute(ctx.writes.own.notify_core, row)
                conn.commit()
        except SQLAlchemyError as exc:
            _log.warning("waking the followers after a commit failed: %s", exc)

    # -- errors ------------------------------------------------------------------------

    def translate_error(
        self, orig: Exception, session_id: str | None, database: str | None
    ) -> SessionSQLError:
        assert isinstance(orig, psycopg.Error)
        return translate(orig, session_id)

    # -- statements --------------------------------------------------------------------

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return pg_insert(table).on_conflict_do_nothing()

    def join_events(
        self, nodes: FromClause, events: Table, columns: Columns, key: ColumnElement[Any]
    ) -> Joined:
        """A LATERAL subquery with LIMIT 1, which cannot be flattened into a join, so it
        stays one lookup per node (the planner may otherwise pick a hash join that reads
        every event of the session, as it does while the table has no statistics yet).
        It names the session's key itself, not the node's: Citus routes a subquery by the
        value of its distribution column, never through a correlation."""
        e = events
        by_key = (e.c.session_key == key) & (e.c.seq == nodes.c.event_seq)
        lookup = select(*columns).where(by_key).limit(1).lateral("ev")
        return nodes.join(lookup, true()), list(lookup.c)

    def last_nodes(self, nodes: Table, where: Conditions, with_events: WithEvents) -> Select[Any]:
        """The rows taken from the surface key in a subquery first, so that only their
        events are looked up, whatever join the planner picks."""
        tail = (
            select(nodes.c.session_key, nodes.c.pos, nodes.c.event_seq)
            .where(*where)
            .order_by(nodes.c.pos.desc())
            .limit(bindparam("b_limit"))
            .subquery("tail")
        )
        return with_events(tail).order_by(tail.c.pos.desc())

    # -- listing, stats, schema gate, migrate ------------------------------------------

    def text_bytes(self, column: ColumnElement[Any]) -> ColumnElement[int]:
        return func.octet_length(cast(column, Text))

    def json_count(
        self, column: ColumnElement[Any], path: tuple[str, ...]
    ) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        node = column[path]  # ``json`` keeps the number as written: 3e9 and 1.0 stay so
        written = node.as_string()
        kind = func.json_typeof(node)
        sane = and_(kind == "number", written.regexp_match(f"^[0-9]{{1,{COUNT_DIGITS}}}$"))
        return case((sane, cast(written, BigInteger))), and_(kind.is_not(None), kind != "null")

    def reclaim_space(self, engine: Engine, pages: int) -> None:
        """Nothing to do here: autovacuum marks the deleted rows' space reusable (for this
        table's next rows) once no transaction can see them; only ``VACUUM FULL`` gives it
        back to the file system, under an exclusive lock (docs/operations.md)."""
        return

    def store_bytes(self, engine: Engine, tables: Sequence[Table]) -> int:
        return vacuuming.store_bytes(engine, tables)

    def reclaimable_pages(self, engine: Engine) -> int:
        return 0  # autovacuum keeps the space for new rows

    def vacuum(
        self, engine: Engine, tables: Sequence[Table], *, full: bool, pages: int
    ) -> Vacuumed:
        return vacuuming.vacuum(engine, tables, full=full)

    def labels_match(
        self, labels: ColumnElement[Any], wanted: Mapping[str, str]
    ) -> list[ColumnElement[bool]]:
        if not wanted:
            return []
        return [type_coerce(labels, JSONB).contains(wanted)]  # the GIN index

    def same_column_type(self, expected: str, live: str) -> bool:
        return expected == live

    def structure_differences(self, conn: Connection, tables: SchemaTables) -> list[str]:
        return pg_catalog.structure_differences(conn, tables)

    def vouches_for_schema(self, conn: Connection, tables: SchemaTables) -> bool:
        return pg_catalog.vouches_for_schema(conn, tables)

    def record_schema(self, conn: Connection, tables: SchemaTables) -> None:
        pg_catalog.record_schema(conn, tables)

    def can_distribute(self, conn: Connection) -> bool:
        return citus.citus_installed(conn)

    def distribute(self, conn: Connection, tables: SchemaTables) -> None:
        citus.distribute(conn, tables)
        sessions = conn.dialect.identifier_preparer.format_table(tables.sessions)
        delegation.create_delegated_append(conn, delegated_for(tables.metadata.schema), sessions)

    def distribution(self, conn: Connection, tables: SchemaTables) -> tuple[bool, list[str]]:
        placed = citus.distribution(conn, tables)
        return bool(placed), citus.distribution_differences(tables, placed)

    def row_security_applies(self, engine: Engine, sessions: Table) -> bool:
        return self._row_security(engine, sessions)[0]

    def delegates_append(self, engine: Engine, tables: SchemaTables, *, create: bool) -> bool:
        from session_sql._store.database import create_tx, read_tx, translate_errors  # noqa: PLC0415

        sessions = engine.dialect.identifier_preparer.format_table(tables.sessions)
        schema = tables.metadata.schema
        fn = delegated_for(schema)
        with translate_errors(database=self.database_label(engine)):
            with read_tx(engine) as conn:
                if delegation.has_delegated(conn, fn, sessions):
                    return True
                # A store another build created holds its own function, or none: this
                # build's goes beside it, once, by a role that may create in the schema.
                if not create or not delegation.may_create(conn, fn, schema):
                    return False
            with create_tx(engine) as conn:
                self.lock_schema_init(conn, schema)
                if delegation.may_create(conn, fn, schema):  # nobody was first
                    delegation.create_delegated_append(conn, fn, sessions)
            with read_tx(engine) as conn:
                return delegation.has_delegated(conn, fn, sessions)

    def _row_security(self, engine: Engine, sessions: Table) -> tuple[bool, str]:
        """Whether row-level security applies to the role on ``sessions``, and the role."""
        # Imported here: the package imports this module.
        from session_sql._store.database import read_tx, translate_errors  # noqa: PLC0415

        name = engine.dialect.identifier_preparer.format_table(sessions)
        with translate_errors(database=self.database_label(engine)), read_tx(engine) as conn:
            active, role = conn.execute(
                select(func.row_security_active(literal(name, Text)), func.current_user())
            ).one()
        return bool(active), str(role)

    def refuse_row_security(self, engine: Engine, sessions: Table, side: str) -> None:
        """A role kept to one tenant would see no session, or only some, and a migration
        must see them all."""
        label = self.database_label(engine)
        active, role = self._row_security(engine, sessions)
        if active:
            raise ConfigurationError(
                f"the {side} {label}: role {role!r} is subject to row-level "
                "security and sees one tenant's sessions at most; migrate reads and checks every "
                "tenant's: connect as the owner of the tables (the role that ran 'session-sql "
                "init') or a superuser",
                option="url",
            )


POSTGRESQL: Final = PostgreSQLBackend()
