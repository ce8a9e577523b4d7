"""The store context: what every part of a store shares, with its statements prepared once.

A ``StoreContext`` is built by ``SessionStore`` and lives as long as the store. It holds the
Core statements of its schema and tenant and their compiled DBAPI forms (compiled on first
use, for the store's dialect); both are immutable and built once per process
(``statements_for``, ``compiled_for``), so a store opened per request does not build them
again. Everything else (kept keys and events, the idle connection) lives with the store.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Engine,
    FromClause,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy import update as sa_update
from sqlalchemy.engine import Dialect

from session_sql._store import following
from session_sql._store.database import Backend, backend_for
from session_sql._store.idle import IdleConnection
from session_sql._store.rows import event_columns
from session_sql._store.schema import (
    SchemaTables,
    tables_for,
)
from session_sql._store.transactions import Writes
from session_sql.catalog import Catalog
from session_sql.errors import PermanentStoreError
from session_sql.session import Clock

if TYPE_CHECKING:
    from session_sql._store.backends.postgresql.listening import ListenHub


class Statements:
    """The Core statements of one schema that the writer, ``refresh`` and the reads share."""

    def __init__(self, tables: SchemaTables, *, backend: Backend, tenant: str) -> None:
        s, e, sf = tables.sessions, tables.events, tables.surface
        ids = tables.session_ids
        # Every statement is scoped to the store's tenant. Core executions take its value from
        # here; the flows bind ``b_tenant`` (and the ``tenant`` column) themselves.
        tn = bindparam("b_tenant", tenant, type_=Text)
        self.tenant_param = tn
        # A session is addressed by its key (``b_key``) in every statement of its own, so that
        # on Citus each goes to the one shard holding the session; the key is read first from
        # ``session_ids`` by the public id (``key_of``: one shard too), or kept by a handle.
        key = bindparam("b_key", type_=BigInteger)
        own_session = (s.c.tenant == tn, s.c.session_key == key)
        by_id = (ids.c.tenant == tn, ids.c.id == bindparam("b_id"))
        self.key_of = select(ids.c.session_key).where(*by_id)
        self.insert_id = insert(ids)
        self.delete_id = delete(ids).where(*by_id, ids.c.session_key == key)
        # The conditional head update is the optimistic lock: zero rows means another writer
        # won, the row was edited underneath us, or the session was deleted (and perhaps
        # recreated: the incarnation differs). On PostgreSQL it also takes the row lock that
        # serialises concurrent writers of one session until commit.
        self.advance = (
            sa_update(s)
            .where(
                *own_session,
                s.c.incarnation == bindparam("b_incarnation"),
                s.c.head_seq == bindparam("b_expected_head"),
                s.c.surface_next_pos == bindparam("b_expected_pos"),
                s.c.replace_generation == bindparam("b_expected_gen"),
            )
            .values(
                head_seq=bindparam("b_head"),
                surface_next_pos=bindparam("b_pos"),
                replace_generation=bindparam("b_gen"),
                surface_digest=bindparam("b_digest"),
                updated_at=bindparam("b_now"),
                # The latest session/title event appended sets the title (metadata.title_of);
                # NULL: none in this append, the title stays.
                title=func.coalesce(bindparam("b_title", type_=Text), s.c.title),
            )
        )
        self.retarget_node = (
            sa_update(sf)
            .where(
                sf.c.session_key == key,
                sf.c.event_seq == bindparam("b_old"),
            )
            .values(event_seq=bindparam("b_new"))
        )
        self.drop_node = delete(sf).where(
            sf.c.session_key == key,
            sf.c.event_seq == bindparam("b_seq"),
        )
        # ON CONFLICT DO NOTHING, then counting the rows: a lost race on PostgreSQL (whose
        # pipeline runs the inserts before the head update's row count is known) is then not
        # an aborted pipeline, and a row already sitting past the head is caught by the count
        # instead of being silently kept.
        self.insert_event = backend.insert_ignoring_conflicts(e)
        self.insert_node = backend.insert_ignoring_conflicts(sf)
        # The session row, and its header alone, the header as JSON text (parsed by
        # ``stored.frozen_header``): built once, as every load, open and ``events()`` reads one.
        header = cast(s.c.header, Text).label("header")
        self.session_row = select(*[c for c in s.c if c.name != "header"], header).where(
            *own_session
        )
        self.session_header = select(header).where(*own_session)
        self.events_from = (
            select(*event_columns(tables.events))
            .where(
                e.c.session_key == key,
                e.c.seq >= bindparam("b_from"),
                e.c.seq <= bindparam("b_to"),
            )
            .order_by(e.c.seq)
        )
        # The async store's refresh on PostgreSQL (``backends.postgresql.reading``): the row's
        # head columns (``reading.StoredHead``) and the events past a seq up to its head, as
        # one statement, so from one snapshot.
        head = (
            s.c.head_seq,
            s.c.surface_next_pos,
            s.c.replace_generation,
            s.c.surface_digest,
            s.c.incarnation,
        )
        self.refresh_rows = (
            select(*head, *event_columns(e))
            .select_from(
                s.outerjoin(
                    e,
                    and_(
                        e.c.session_key == s.c.session_key,
                        e.c.seq >= bindparam("b_from"),
                        e.c.seq <= s.c.head_seq,
                    ),
                )
            )
            .where(*own_session)
            .order_by(e.c.seq)
        )

        # -- open_session: the row (``session_row``), and the surface with its whole events
        # (see opening.py); and all it reads as one statement (``opening``)
        self.surface_events = _surface_events(tables, backend, key)
        self.opening = _opening(self.session_row, self.surface_events, tables, own_session, key)

        # -- reads
        self.head_seq = select(s.c.head_seq).where(*own_session)
        # -- the store's one-statement writes of a row: its deletion (the events and surface
        # rows go with it, by their foreign keys; its ``session_ids`` row by ``delete_id``)
        # and its metadata (the columns to set are the execution's parameters besides
        # ``b_key``)
        self.delete_session = delete(s).where(*own_session)
        self.update_metadata = sa_update(s).where(*own_session)
        # A walk of the surface primary key with one events primary-key lookup per node
        # (``Backend.join_events``), so the cost follows the surface, never the length of
        # the log.
        with_events = functools.partial(_with_events, e=e, backend=backend, key=key)
        self.surface_messages = with_events(sf).where(sf.c.session_key == key).order_by(sf.c.pos)
        # Tail reads: the last ``b_limit`` rows before position ``b_before`` (exclusive), taken
        # from the surface key in a subquery first, so that only those rows' events are looked
        # up, whatever join the planner picks; the caller reverses them into surface order.
        before = (
            sf.c.session_key == key,
            sf.c.pos < bindparam("b_before"),
        )
        self.surface_tail = backend.last_nodes(sf, before, with_events)
        self.surface_seqs = select(sf.c.event_seq).where(sf.c.session_key == key).order_by(sf.c.pos)
        self.surface_seqs_tail = (
            select(sf.c.event_seq)
            .where(sf.c.session_key == key)
            .order_by(sf.c.pos.desc())
            .limit(bindparam("b_limit"))
        )
        self.surface_rows = (
            select(sf.c.pos, sf.c.event_seq).where(sf.c.session_key == key).order_by(sf.c.pos)
        )
        self.events_page = (
            select(*event_columns(tables.events))
            .where(
                e.c.session_key == key,
                e.c.seq > bindparam("b_after"),
                e.c.seq <= bindparam("b_to"),
            )
            .order_by(e.c.seq)
            .limit(bindparam("b_limit"))
        )
        # Streams (``events``, ``follow``) pin the session they started on: its key, read once
        # (``key_of``), then every page by that key, so a session deleted and created again
        # under its id (a new key: keys are never reused) is never spliced into the stream;
        # ``key_alive`` tells a log that ended from a session that was deleted.
        self.key_alive = select(s.c.session_key).where(*own_session)
        self.stream_page = (
            select(*event_columns(tables.events))
            .where(
                e.c.session_key == key,
                e.c.seq > bindparam("b_after"),
                e.c.seq <= bindparam("b_to"),
            )
            .order_by(e.c.seq)
            .limit(bindparam("b_limit"))
        )
        self.events_after = (
            select(*event_columns(tables.events))
            .where(
                e.c.session_key == key,
                e.c.seq > bindparam("b_after"),
            )
            .order_by(e.c.seq)
            .limit(bindparam("b_limit"))
        )


@functools.lru_cache(maxsize=256)
def statements_for(schema: str | None, backend: Backend, tenant: str) -> Statements:
    """The statements of ``schema``'s tables for ``tenant``, built once per process: they are
    immutable, and building them is most of what opening a store costs past its gate."""
    return Statements(tables_for(schema), backend=backend, tenant=tenant)


def _with_events(nodes: FromClause, *, e: Any, backend: Backend, key: Any) -> Select[Any]:
    """``(pos, event_seq, type, data)`` of surface rows ``nodes`` of the session ``key``, each
    joined to its event by one events primary-key lookup (``Backend.join_events``)."""
    data_text = cast(e.c.data, Text).label("data")
    joined, (type_, data) = backend.join_events(nodes, e, (e.c.type, data_text), key)
    return select(nodes.c.pos, nodes.c.event_seq, type_, data).select_from(joined)


def _surface_events(tables: SchemaTables, backend: Backend, key: Any) -> Select[Any]:
    """``(pos, *event_columns)`` of a session's surface rows in ``pos`` order: one events
    primary-key lookup per node, as in ``_with_events``."""
    sf = tables.surface
    joined, columns = backend.join_events(sf, tables.events, event_columns(tables.events), key)
    query = select(sf.c.pos, *columns).select_from(joined)
    return query.where(sf.c.session_key == key).order_by(sf.c.pos)


class OpenRow(NamedTuple):
    """The session row as a write handle reads it (``Statements.opening``)."""

    session_key: int
    header: str
    """As JSON text (parsed by ``stored.frozen_header``)."""
    incarnation: str
    inherited_event_count: int
    head_seq: int
    surface_next_pos: int
    replace_generation: int
    surface_digest: int


OPEN_ROW_COLUMNS = OpenRow._fields


def _opening(
    session_row: Select[Any],
    surface_events: Select[Any],
    tables: SchemaTables,
    own_session: tuple[Any, ...],
    key: Any,
) -> Select[Any]:
    """What ``open_session`` reads, as ONE statement (so from one snapshot, with no
    transaction around it): ``(part, *OPEN_ROW_COLUMNS, pos, *event_columns,
    *event_columns)``, where part 0 is the session row, part 1 the surface rows with their
    events in ``pos`` order (``surface_events``), part 2 the head event and anything past it
    (at most two rows). Each row fills its part's columns; the rest are NULL.

    On Citus it is one router query (every table by the session's key), which spares the
    coordinator the round trips of a transaction of three statements.
    """
    s, e = tables.sessions, tables.events
    row = session_row.subquery("opened")
    nodes = surface_events.subquery("nodes")
    head = select(s.c.head_seq).where(*own_session).scalar_subquery()
    ends = (
        select(*event_columns(e))
        .where(e.c.session_key == key, e.c.seq >= head)
        .order_by(e.c.seq)
        .limit(2)
        .subquery("ends")
    )
    parts = ([row.c[n] for n in OPEN_ROW_COLUMNS], list(nodes.c), list(ends.c))
    selects = []
    for i, source in enumerate((row, nodes, ends)):
        columns: list[Any] = [literal_column(str(i), Integer).label("part")]
        for j, cols in enumerate(parts):
            columns += [
                (c if j == i else cast(null(), c.type)).label(f"p{j}_{c.name}") for c in cols
            ]
        selects.append(select(*columns).select_from(source))
    both = union_all(*selects).subquery("opening")
    pos, seq = both.c.p1_pos, both.c.p2_seq
    return select(both).order_by(both.c.part, pos, seq)


class Compiled:
    """A statement compiled for the store's dialect, and how to bind a dict of parameters."""

    __slots__ = ("_positional", "bind", "defaults", "sql")

    def __init__(self, stmt: Any, dialect: Dialect, keys: list[str] | None = None) -> None:
        c = stmt.compile(dialect=dialect, column_keys=keys)
        self.sql: str = c.string
        self.defaults: dict[str, Any] = {k: v for k, v in c.params.items() if v is not None}
        """Values the compiler bound itself (SQLite's ``OFFSET`` of a ``LIMIT``)."""
        self._positional: tuple[str, tuple[str, ...]] | None = None
        self.bind: Callable[[dict[str, Any]], Any]
        if dialect.paramstyle != "qmark":
            self.bind = _as_is
            return
        names = tuple(c.positiontup or ())
        pick = itemgetter(*names)
        self.bind = pick if len(names) > 1 else lambda p: (pick(p),)

    @property
    def positional(self) -> tuple[str, tuple[str, ...]]:
        """PostgreSQL: ``sql`` with ``%s`` for each ``%(name)s``, and the names in order, so
        that several statements can be bound by one call of the driver (``one_query``)."""
        if self._positional is None:
            names: list[str] = []

            def placeholder(match: re.Match[str]) -> str:
                if match[1] is None:
                    return "%%"  # a literal percent sign, as it was
                names.append(match[1])
                return "%s"

            self._positional = (_PLACEHOLDER.sub(placeholder, self.sql), tuple(names))
        return self._positional


_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s")
"""A pyformat placeholder, or an escaped percent sign (which is not one)."""


def _as_is(params: dict[str, Any]) -> dict[str, Any]:
    return params


class CompiledStatements:
    """The statements both databases run, as driver SQL text (see ``transactions``): the
    append's, and the page read that loads and streams a log."""

    def __init__(self, st: Statements, tables: SchemaTables, dialect: Dialect) -> None:
        self.advance = Compiled(st.advance, dialect)
        # Generated columns (events.call_id) are computed by the database, never written.
        written = [c.name for c in tables.events.c if c.computed is None]
        self.insert_event = Compiled(st.insert_event, dialect, written)
        self.insert_event_values = (
            self.insert_event.sql
            if dialect.paramstyle == "qmark"
            else self.insert_event.positional[0]
        )
        """``insert_event`` with positional parameters: it binds a ``rows.event_values`` tuple
        (the compiled statements bind ``EVENT_VALUE_COLUMNS`` in that order; a test holds it)."""
        self.insert_node = Compiled(st.insert_node, dialect, [c.name for c in tables.surface.c])
        self.drop_node = Compiled(st.drop_node, dialect)
        self.retarget_node = Compiled(st.retarget_node, dialect)
        self.surface_messages = Compiled(st.surface_messages, dialect)
        self.surface_tail = Compiled(st.surface_tail, dialect)
        self.events_page = Compiled(st.events_page, dialect)
        self.stream_page = Compiled(st.stream_page, dialect)
        self.refresh_rows = Compiled(st.refresh_rows, dialect)
        self.surface_events = Compiled(st.surface_events, dialect)
        self.opening = Compiled(st.opening, dialect)
        self.key_of = Compiled(st.key_of, dialect)
        self.head_seq = Compiled(st.head_seq, dialect)


_COMPILED: dict[tuple[Statements, Any], CompiledStatements] = {}
_COMPILED_LOCK = threading.Lock()
_PLAIN = (bool, int, float, str, tuple, type(None))


def compiled_for(st: Statements, tables: SchemaTables, dialect: Dialect) -> CompiledStatements:
    """``CompiledStatements(st, tables, dialect)``, compiled once per process for each set of
    statements (one per schema and tenant, ``statements_for``) and dialect configuration.

    Compiling them is most of what a store's first read costs, and a service that opens its
    store per request would pay it at every request. The text depends only on the statements
    and on the dialect: its class and the settings it holds (paramstyle, the server version
    read at the first connect, identifier lengths, options given to ``create_engine``), all
    in the key (``_dialect_key``), so a store whose dialect differs in any of them compiles
    its own.
    """
    key = (st, _dialect_key(dialect))
    found = _COMPILED.get(key)
    if found is None:
        found = CompiledStatements(st, tables, dialect)
        with _COMPILED_LOCK:
            if len(_COMPILED) >= 256:  # bounded as statements_for is
                _COMPILED.clear()
            found = _COMPILED.setdefault(key, found)
    return found


def _dialect_key(dialect: Dialect) -> tuple[Any, ...]:
    """The dialect's class and every plain setting it holds: what the compiled text can
    depend on (objects such as the driver module or the type compiler follow from them)."""
    settings: list[tuple[str, Any]] = []
    for name, value in sorted(vars(dialect).items()):
        if isinstance(value, _PLAIN):
            try:
                hash(value)
            except TypeError:  # a tuple holding something unhashable: compared by repr
                settings.append((name, repr(value)))
            else:
                settings.append((name, value))
    return (type(dialect), tuple(settings))


class Kept:
    """Results of pure functions of stored text, by a key holding that text: bounded, per store.

    A result is exactly what computing it again would give, and it is frozen, so it is safe
    to share. Only successes are kept (a malformed row raises every time); entries whose
    text is longer than ``MAX_TEXT`` are not kept, and the oldest go once the texts kept pass
    ``BUDGET`` characters.
    """

    MAX_TEXT = 16_384
    BUDGET = 2_000_000

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[Any, int]] = {}
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        """The result kept for ``key``, or ``MISSING``."""
        entry = self._entries.get(key)
        return MISSING if entry is None else entry[0]

    def put(self, key: Any, result: Any, size: int) -> None:
        """Keep ``result`` under ``key``, whose text is ``size`` characters long."""
        if size > self.MAX_TEXT:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (result, size)
            self._size += size
            while self._size > self.BUDGET:
                oldest = next(iter(self._entries))
                self._size -= self._entries.pop(oldest)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0


MISSING: Any = object()
"""``Kept.get`` for a key not kept (a kept result may be ``None``)."""


class FollowerSlots:
    """The store's bound on its ``follow`` iterators listening at once (PostgreSQL).

    They share one ``LISTEN`` connection (``ListenHub``), so the bound no longer guards the
    server's connections: it catches leaked iterators, each of which keeps a registration
    and reads through the pool at every commit to its session. One more than the bound
    fails at once rather than waiting, since a follower may hold its slot for hours and a
    wait would only hide the leak or the misconfiguration.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """How many followers hold a slot now."""
        return self._held

    def take(self) -> None:
        """Hold a slot (``give_back`` returns it); ``StoreError`` when all are held."""
        with self._lock:
            if self._held >= self.limit:
                raise PermanentStoreError(
                    f"this store already has {self.limit} followers listening "
                    f"(max_followers={self.limit}); end one (close its iterator), or open "
                    "the store with a larger max_followers= (they share one LISTEN "
                    "connection; each reads through the pool)"
                )
            self._held += 1

    def give_back(self) -> None:
        with self._lock:
            self._held -= 1


class SessionKeys(dict[str, int]):
    """Public ids and the keys last read for them (``reader.session_key``), so a store-level
    tail read by id is one statement (``reader.surface_tail``).

    A kept key is never wrong, only stale: keys are never reused, and a session's
    ``session_ids`` row goes in the transaction that deletes it, so a read by a stale key
    finds no rows, and the reader then looks the id up again. Bounded: emptied when full.
    """

    LIMIT = 65_536

    def __setitem__(self, session_id: str, key: int) -> None:
        if len(self) >= self.LIMIT:
            self.clear()
        super().__setitem__(session_id, key)


class StoreContext:
    """What a store's parts need: engine, tables, settings, and the prepared statements."""

    def __init__(
        self,
        *,
        engine: Engine,
        tables: SchemaTables,
        catalog: Catalog,
        clock: Clock,
        max_event_bytes: int | None,
        channel: str | None,
        max_followers: int,
        tenant: str = "",
        replicas: Sequence[Engine] = (),
        distributed: bool = False,
        tenant_on_workers: bool = False,
        delegated: bool = False,
    ) -> None:
        self.engine = engine
        self.distributed = distributed
        """Whether the store's tables are distributed (Citus; ``ensure_schema``)."""
        self.tenant_on_workers = tenant_on_workers
        """A distributed store whose role row-level security keeps to its tenant: the tenant
        settings must reach the workers (``schema.distributed_sets``)."""
        self.delegated = delegated
        """A distributed store whose single appends go to their worker as one delegated call
        (``backends.postgresql.delegation``)."""
        """The primary: every write, the schema gate, LISTEN, and the write handles' reads."""
        self.replicas: tuple[Engine, ...] = tuple(replicas)
        """The hot standbys (``replica_urls``) that serve the store-level reads, in turn."""
        self.tables = tables
        self.catalog = catalog
        self.clock = clock
        """The store's one millisecond clock: event times and ``updated_at`` alike."""
        self.max_event_bytes = max_event_bytes
        self.backend = backend_for(engine)
        """The database's side of every rule that differs between databases."""
        self.channel = channel
        """The NOTIFY channel when the backend ``listens`` (PostgreSQL), else ``None``."""
        self.followers = FollowerSlots(max_followers)
        """Bounds the followers listening at once (SQLite's followers poll through the pool
        and are not counted)."""
        self._hub: ListenHub | None = None
        self._hub_lock = threading.Lock()
        self.tenant = tenant
        """Every row this store reads or writes is this tenant's."""
        self.statements = statements_for(tables.metadata.schema, self.backend, tenant)
        self.idle = IdleConnection(engine, tenant, tenant_on_workers=tenant_on_workers)
        """The connection kept for single-statement reads (see ``reader.surface_tail``)."""
        self._replica_idle = tuple(
            IdleConnection(r, tenant, tenant_on_workers=tenant_on_workers) for r in self.replicas
        )
        self._turn = itertools.count()
        self.parsed = Kept()
        """Tail reads' projected messages by ``(type, data text)``: an agent reads its last
        N messages every turn, and all but the newest are rows it read the turn before
        (see ``reader``)."""
        self.keys = SessionKeys()
        """Session keys by public id (see ``SessionKeys``)."""
        self.checked = Kept()
        """``open_session``'s checked surface events by session id and row: a service opens
        a session for each request, and all but the newest surface rows are rows it checked
        the request before (see ``opening``)."""
        self.appended_events = 0
        """Events committed since the planner statistics were last checked (``statistics``)."""

    def reads(self) -> tuple[Engine, IdleConnection]:
        """Where a store-level read runs (the one place that picks it): the primary, or
        with replicas the next standby in turn, with its idle connection.

        Only the read-only calls of the store come here (``messages``, ``surface``,
        ``events``, ``load_session``, listings, ``follow``'s reads, ``export_jsonl``,
        ``stats``). A write handle, its ``refresh`` and every write read the primary, so a
        handle never sees a state older than its own commits, however far a standby lags.
        """
        if not self.replicas:
            return self.engine, self.idle
        turn = next(self._turn) % len(self.replicas)  # atomic: count's next holds the GIL
        return self.replicas[turn], self._replica_idle[turn]

    def read_engine(self) -> Engine:
        """The engine of the next store-level read (``reads``)."""
        return self.reads()[0]

    def close_reads(self) -> None:
        """The store closes: close the idle connections (the primary's and the standbys')."""
        self.idle.close()
        for idle in self._replica_idle:
            idle.close()

    def payload(self, session_id: str, head: int) -> str:
        """The NOTIFY payload of a commit: ``[tenant, session id, head seq]`` as JSON."""
        return following.payload(self.tenant, session_id, head)

    def wake_notes(self, heads: Iterable[tuple[str, int]]) -> list[dict[str, str]]:
        """``Statements.notify``'s parameters waking the followers of each ``(session id,
        head)``."""
        channel = str(self.channel)
        return [{"b_channel": channel, "b_payload": self.payload(i, h)} for i, h in heads]

    def wakes(self, payload: str, session_id: str) -> bool:
        """Whether a NOTIFY ``payload`` is a commit to ``session_id`` of this store's tenant.

        Followers ignore every other notification on the channel, so a follower of one
        tenant's session never wakes for another's (nor for another session).
        """
        parsed = following.parse_payload(payload)
        return parsed is not None and parsed[:2] == (self.tenant, session_id)

    def hub(self) -> ListenHub:
        """The store's one LISTEN connection and its followers (PostgreSQL), made on first use."""
        with self._hub_lock:
            if self._hub is None:
                # Imported here: it needs psycopg, which an SQLite store never imports.
                from session_sql._store.backends.postgresql.listening import ListenHub  # noqa: PLC0415

                self._hub = ListenHub(self)
            return self._hub

    def close_hub(self) -> None:
        """The store closes: end the LISTEN connection and wake its followers, if any."""
        with self._hub_lock:
            hub = self._hub
        if hub is not None:
            hub.close()

    @functools.cached_property
    def writes(self) -> Writes:
        """What the append transactions need of this store (``transactions.Writes``), with
        its database's own statements (``Backend.own_statements``)."""
        notes = None
        if self.backend.listens:

            def notes(heads: Iterable[tuple[str, int]]) -> list[dict[str, str]]:
                return self.wake_notes(heads)

        own = self.backend.own_statements(
            self.statements,
            self.tables,
            self.engine.dialect,
            self.tenant_on_workers,
            self.delegated,
            self.distributed,
        )
        drop = self.backend.drop_nodes_run(self.compiled, own)
        return Writes(
            self.compiled, own, self.tables, self.tenant, self.max_event_bytes, notes, drop
        )

    @functools.cached_property
    def compiled(self) -> CompiledStatements:
        """The statements as driver SQL text, compiled on first use (once per process for
        each schema, tenant and dialect: see ``compiled_for``)."""
        return compiled_for(self.statements, self.tables, self.engine.dialect)
