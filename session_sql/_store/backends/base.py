"""What the store needs from a database: the ``Backend`` interface, one subclass per database.

The rest of the store never asks which database it runs on: it asks its backend
(``StoreContext.backend``, or ``backend_for(engine)``) for the piece that differs, whether
that is a transaction's first statement, an error's meaning or a dialect's form of a query.
The backends are stateless singletons: every method takes the engine, connection or context
it works on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, FromClause, Insert, Select, Table, exc
from sqlalchemy.engine import URL, Dialect

from session_sql.errors import ConfigurationError, SessionSQLError, StoreError

if TYPE_CHECKING:
    from session_sql._store.context import CompiledStatements, Statements, StoreContext
    from session_sql._store.schema import SchemaTables
    from session_sql._store.transactions import AppendPart, Run

__all__ = [
    "AsyncListener",
    "Columns",
    "Conditions",
    "Joined",
    "Offload",
    "WithEvents",
    "Backend",
    "EngineOptions",
    "Listener",
    "Vacuumed",
    "driver_cause",
    "synchronous_mode",
]

T = TypeVar("T")

_SYNCHRONOUS_MODES: Final = ("FULL", "NORMAL")


def synchronous_mode(synchronous: str) -> str:
    """``synchronous`` as SQLite spells it (``FULL`` or ``NORMAL``, any case given);
    ``ConfigurationError`` for another mode. Checked on every backend, so that switching a
    URL never turns a bad setting into an error."""
    mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
    if mode not in _SYNCHRONOUS_MODES:
        raise ConfigurationError(
            f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}", option="synchronous"
        )
    return str(mode)


def driver_cause(error: StoreError) -> BaseException | None:
    """The driver's exception behind a translated ``error`` (``None`` when there is none)."""
    orig = error.__cause__
    return orig.orig if isinstance(orig, exc.DBAPIError) else orig


Columns = Sequence[ColumnElement[Any]]
Conditions = Sequence[ColumnElement[bool]]
Joined = tuple[FromClause, list[ColumnElement[Any]]]
"""A FROM clause, and columns as selected from it (``Backend.join_events``)."""
Offload = Callable[[Callable[[], Any]], Awaitable[Any]]
"""How the async store runs blocking store code (its runner's ``call``)."""
WithEvents = Callable[[FromClause], Select[Any]]
"""A FROM clause of surface rows selected with their events (``Backend.last_nodes``)."""

COUNT_DIGITS: Final = 10
"""The most digits of a count the analytics sum (``Backend.json_count``): 0 to 9,999,999,999,
more than any token count of one reply; summed in 64 bits, nine hundred million such values
fit."""


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """The store's engine options, checked (``make_engine``); each backend uses its own."""

    synchronous: str
    busy_timeout_ms: int
    lock_timeout_ms: int
    pool_size: int
    async_driver: bool


@dataclass(frozen=True)
class Vacuumed:
    """What a vacuum did: its kind (the SQL it ran) and notes on what is left to do."""

    action: str
    notes: tuple[str, ...] = ()


class Listener(Protocol):
    """A follower's wake-up source: a connection LISTENing for commits (sync)."""

    def wait(self, seconds: float, wakes: Callable[[str], bool] | None = None) -> None: ...

    def close(self) -> None: ...


class AsyncListener(Protocol):
    """A follower's wake-up source on the event loop."""

    async def wait(self, seconds: float, wakes: Callable[[str], bool]) -> None: ...

    async def close(self) -> None: ...


class Backend(ABC):
    """One database's side of every rule that differs between databases."""

    name: ClassVar[str]
    """The SQLAlchemy dialect name (``store.backend``; the key of dialect-specific DDL)."""
    driver: ClassVar[str]
    """The SQLAlchemy driver name every engine of this backend uses."""
    schemes: ClassVar[frozenset[str]]
    """The URL schemes that name this backend."""
    driver_error: ClassVar[type[Exception]]
    """The base class of the driver's exceptions (``translate_errors`` dispatches on it)."""
    listens: ClassVar[bool]
    """Whether followers are woken by NOTIFY (else they poll through the pool)."""
    standbys: ClassVar[bool]
    """Whether a store may serve its reads from hot standbys (``replica_urls``)."""
    single_writer: ClassVar[bool]
    """Whether every write takes one database-wide lock (a long job pauses between its
    transactions so that other writers get in)."""
    async_threads: ClassVar[bool]
    """Whether the async store runs this backend in worker threads (else on the event loop,
    through the async driver: ``make_engine(..., async_driver=True)``)."""
    distributable: ClassVar[bool]
    """Whether a store here may be distributed over several servers (PostgreSQL, where the
    ``citus`` extension is installed)."""

    stale_statistics: ClassVar[bool]
    """Whether the planner statistics go stale unless the store refreshes them (SQLite writes
    none by itself; PostgreSQL's autovacuum analyzes): ``_store.statistics``."""

    # -- the append transactions (the package's ``appending``) --------------------------

    @abstractmethod
    def append_parts(self, ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
        """Append ``parts`` in one transaction: ``None`` once committed, or the index of the
        part whose writer lost the race; raises ``CorruptSessionError`` (see
        ``transactions.classify``)."""

    @abstractmethod
    def own_statements(
        self,
        st: Statements,
        tables: SchemaTables,
        dialect: Dialect,
        tenant_on_workers: bool,
        delegated: bool = False,
        distributed: bool = False,
    ) -> Any:
        """The statements only this database's transactions run, compiled for ``dialect``
        (``transactions.Writes.own``), or None."""

    @abstractmethod
    def insert_run(self, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> Run:
        """The insert of ``rows.event_values`` rows, counted by whoever runs it."""

    @abstractmethod
    def nodes_run(self, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> Run:
        """The insert of surface rows ``(session_key, pos, event_seq, tenant)``, counted."""

    def drop_nodes_run(self, compiled: CompiledStatements, own: Any) -> Callable[..., Run]:
        """``Writes.drop_nodes``: the delete of a session's shadowed surface rows by their
        seqs, here a statement per row (``Statements.drop_node``)."""
        from session_sql._store.transactions import Run  # noqa: PLC0415 (it imports this)

        drop = compiled.drop_node

        def run(key: int, seqs: list[int]) -> Run:
            return Run(drop.sql, [drop.bind({"b_key": key, "b_seq": s}) for s in seqs], many=True)

        return run

    @abstractmethod
    def copy_allowed(self, cur: Any, ctx: StoreContext) -> bool:
        """Whether ``cur`` (in its transaction) may write a new session's rows by ``COPY``."""

    def copy_rows(
        self, cur: Any, table: Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """``COPY`` ``rows`` into ``table`` on ``cur`` (where ``copy_allowed`` said so)."""
        raise NotImplementedError(f"{self.name} has no COPY")

    @abstractmethod
    def begin_read(self, ctx: StoreContext, raw: Any) -> None:
        """Start a read on the pooled connection ``raw``: the tenant setting, if any."""

    # -- engines -----------------------------------------------------------------------

    @abstractmethod
    def create_engine(self, url: URL, options: EngineOptions, kw: dict[str, Any]) -> Engine:
        """An engine for ``url`` (already normalised to ``driver``); ``kw`` goes to
        ``sqlalchemy.create_engine``."""

    @abstractmethod
    def prepare_store(self, engine: Engine) -> None:
        """What an accepted store needs once (SQLite: WAL); run after the schema gate."""

    @abstractmethod
    def scope_transactions(self, engine: Engine, tenant: str, tenant_on_workers: bool) -> None:
        """Make every transaction on ``engine`` carry the tenant (row-level security)."""

    @abstractmethod
    def require_existing(self, url: URL) -> None:
        """With ``create=False``: refuse a store that connecting would create (a file)."""

    @abstractmethod
    def target_schema(self, schema: str | None) -> str | None:
        """The schema objects live in (``None``: the database itself)."""

    @abstractmethod
    def notify_channel(self, schema: str | None) -> str | None:
        """The NOTIFY channel of a store in ``schema``, or ``None`` when nothing notifies."""

    @abstractmethod
    def database_label(self, engine: Engine) -> str:
        """How errors name the database (never with a password)."""

    @abstractmethod
    def database_file(self, engine: Engine) -> str | None:
        """The database file, or ``None`` (in memory, or a server)."""

    @abstractmethod
    def explain_open_failure(self, url: URL, error: StoreError) -> StoreError | None:
        """A clearer error for a store that could not be opened, or ``None`` to keep
        ``error`` (SQLite: ``sqlite.opening``; PostgreSQL: ``postgresql.refused``)."""

    @abstractmethod
    def same_store(
        self, engine: Engine, schema: str | None, other: Engine, other_schema: str
    ) -> bool:
        """Whether two engines of this backend reach the same store (``migrate``)."""

    # -- transactions ------------------------------------------------------------------

    @abstractmethod
    def begin_write(self, conn: Connection) -> None:
        """Prepare ``conn`` (not yet in a transaction) so that its next ``begin`` writes."""

    @abstractmethod
    def begin_create(self, conn: Connection) -> None:
        """Prepare ``conn`` (not yet in a transaction) whose next transaction may create the
        store's tables: what must be chosen before the first table exists (SQLite's
        ``auto_vacuum``)."""

    @abstractmethod
    def begin_snapshot(self, conn: Connection) -> None:
        """Prepare ``conn`` so that its next transaction reads one snapshot throughout."""

    @abstractmethod
    def lock_schema_init(self, conn: Connection, schema: str | None) -> None:
        """Serialise schema initialisation of ``schema`` until the transaction ends."""

    @abstractmethod
    def analyze(self, conn: Connection, tables: Sequence[Table]) -> None:
        """Refresh the planner statistics of ``tables`` inside a write transaction."""

    @abstractmethod
    def statistics_stale(self, conn: Connection) -> bool:
        """Whether the store's planner statistics no longer describe its size (read inside a
        read transaction): the store then runs ``analyze`` (``_store.statistics``)."""

    # -- connections kept outside a checkout -------------------------------------------

    @abstractmethod
    def keeps_idle(self, engine: Engine, tenant_on_workers: bool) -> bool:
        """Whether a store may keep a connection detached from this engine's pool."""

    @abstractmethod
    def open_idle(self, dbapi_connection: Any, tenant: str) -> None:
        """Make a freshly detached connection ready for single-statement reads."""

    # -- following ---------------------------------------------------------------------

    @abstractmethod
    def listener(self, ctx: StoreContext, session_id: str) -> Listener | None:
        """A LISTEN connection for a follower of ``session_id``, or ``None``: poll."""

    @abstractmethod
    async def async_listener(
        self, ctx: StoreContext, session_id: str, call: Offload
    ) -> AsyncListener | None:
        """``listener`` for the async store; ``call`` runs blocking store code its way."""

    @abstractmethod
    def wake(self, ctx: StoreContext, notes: Sequence[tuple[str, int]]) -> None:
        """Wake the followers of each ``(session_id, head)`` after its commit (nothing when
        followers poll). Never raises: the writes are durable already, and a follower that
        misses a wake-up finds the events at its next poll."""

    # -- errors ------------------------------------------------------------------------

    @abstractmethod
    def translate_error(
        self, orig: Exception, session_id: str | None, database: str | None
    ) -> SessionSQLError:
        """The session_sql error for the driver's ``orig``, decided by structured fields
        (SQLite's error name, PostgreSQL's SQLSTATE and constraint), never message text."""

    # -- statements --------------------------------------------------------------------

    @abstractmethod
    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        """``INSERT ... ON CONFLICT DO NOTHING`` into ``table``."""

    @abstractmethod
    def join_events(
        self, nodes: FromClause, events: Table, columns: Columns, key: ColumnElement[Any]
    ) -> Joined:
        """``nodes`` (surface rows of the session ``key``) joined to their events with one
        primary-key lookup per node: the FROM clause, and ``columns`` (of ``events``) as
        selected from it."""

    @abstractmethod
    def last_nodes(self, nodes: Table, where: Conditions, with_events: WithEvents) -> Select[Any]:
        """The last ``b_limit`` surface rows matching ``where``, newest first, each with its
        event (``with_events``)."""

    # -- listing, stats, schema gate, migrate ------------------------------------------

    @abstractmethod
    def text_bytes(self, column: ColumnElement[Any]) -> ColumnElement[int]:
        """The size in bytes of a JSON text column's value (its UTF-8 text as stored)."""

    @abstractmethod
    def json_count(
        self, column: ColumnElement[Any], path: tuple[str, ...]
    ) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        """``(count, present)`` of the value at ``path`` in a JSON column: ``count`` is it
        as a 64-bit integer when it is a JSON integer of at most ``COUNT_DIGITS`` digits (a
        token count an analytics sum can hold), else NULL; ``present`` is true when the path
        holds a value other than JSON null. Present without a count: a value the analytics
        skip and count as skipped (``1.5``, ``"abc"``, ``-5``, ``3e9``, ``true``)."""

    @abstractmethod
    def reclaim_space(self, engine: Engine, pages: int) -> None:
        """After a prune: give the space of deleted rows back as this database can without a
        long exclusive lock (SQLite: incremental vacuum, ``pages`` per transaction; PostgreSQL:
        autovacuum does it). Raises driver errors (wrap in ``translate_errors``)."""

    @abstractmethod
    def store_bytes(self, engine: Engine, tables: Sequence[Table]) -> int:
        """The store's size on disk (``SessionStore.vacuum``'s before and after)."""

    @abstractmethod
    def reclaimable_pages(self, engine: Engine) -> int:
        """Free pages an incremental vacuum would give back now (0 where there is none)."""

    @abstractmethod
    def vacuum(
        self, engine: Engine, tables: Sequence[Table], *, full: bool, pages: int
    ) -> Vacuumed:
        """Give the store's free space back as this database can (``pages``: an incremental
        step's size); ``full`` rewrites, under an exclusive lock."""

    @abstractmethod
    def labels_match(
        self, labels: ColumnElement[Any], wanted: Mapping[str, str]
    ) -> list[ColumnElement[bool]]:
        """Conditions that a session's ``labels`` include every ``wanted`` pair."""

    @abstractmethod
    def same_column_type(self, expected: str, live: str) -> bool:
        """Whether a live column's type is the declared one, as this database compares."""

    @abstractmethod
    def structure_differences(self, conn: Connection, tables: SchemaTables) -> list[str]:
        """Differences the schema gate checks on this database only (row-level security)."""

    @abstractmethod
    def vouches_for_schema(self, conn: Connection, tables: SchemaTables) -> bool:
        """True when the catalog is, to the byte, one that this build created and checked:
        the gate then skips its reflection. False says nothing (the gate reflects)."""

    @abstractmethod
    def record_schema(self, conn: Connection, tables: SchemaTables) -> None:
        """After ``create_all`` in the same transaction: record what ``vouches_for_schema``
        needs to recognise this catalog later, if it needs anything."""

    @abstractmethod
    def can_distribute(self, conn: Connection) -> bool:
        """Whether a new store here can be distributed over several servers (Citus)."""

    @abstractmethod
    def distribute(self, conn: Connection, tables: SchemaTables) -> None:
        """Distribute the new, empty tables (``create_all``'s hook, before the views)."""

    @abstractmethod
    def distribution(self, conn: Connection, tables: SchemaTables) -> tuple[bool, list[str]]:
        """Whether the store is distributed, and what keeps its distribution from being
        complete (the gate refuses a half-distributed store)."""

    @abstractmethod
    def row_security_applies(self, engine: Engine, sessions: Table) -> bool:
        """Whether row-level security keeps this role to the rows of its tenant."""

    @abstractmethod
    def delegates_append(self, engine: Engine, tables: SchemaTables, *, create: bool) -> bool:
        """Whether a distributed store's single append can go to its worker as one delegated
        call (its schema holds this build's function for it); ``create``: a schema without
        that function gets it first, where the role may create in the schema."""

    @abstractmethod
    def refuse_row_security(self, engine: Engine, sessions: Table, side: str) -> None:
        """Refuse a role that row-level security keeps to one tenant (``migrate``)."""
