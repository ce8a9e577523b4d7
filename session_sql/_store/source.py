"""Reading a store of any schema version ``migrate`` accepts, without the gate's refusal.

A store of this build is opened through the whole gate; earlier versions (which the gate
refuses) are read with plain SQL over frozen definitions of the columns ``migrate`` reads.
Version 5 is laid out like this build (events and surface rows under the ``session_key`` of
their ``sessions`` row, with metadata and the surface digest), but its ``sessions`` keeps the
public id unique itself: it has no ``session_ids`` table. Versions 3 and 4 keep each
session's events and surface rows under its ``tenant`` and ``session_id``, with metadata and
the surface digest. Versions 1 and 2 have only the columns every version has:
``sessions`` (header, counters, ``updated_at``), ``events`` and ``surface``; they have no
tenant and no metadata (everything is the default tenant's), version 1 not even
``incarnation``, which is never read.
Rows become events and headers at the store's one seam (``stored.event_from_row``,
``stored.frozen_header``), so an old row is checked exactly as a current one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Connection,
    Engine,
    MetaData,
    Table,
    Text,
    and_,
    cast,
    false,
    func,
    inspect,
    literal,
    select,
    true,
    tuple_,
)

from session_sql._store.database import (
    backend_for,
    database_label,
    make_engine,
    read_tx,
    snapshot_tx,
    target_schema,
    translate_errors,
)
from session_sql._store.gate import ensure_schema, stored_version
from session_sql._store.metadata import Metadata, check_labels, check_title, check_user_id
from session_sql._store.rows import event_columns
from session_sql._store.schema import SCHEMA_VERSION, tables_for
from session_sql._store.stored import event_from_row, frozen_header, labels_value
from session_sql.arguments import check_options
from session_sql.errors import (
    ConfigurationError,
    CorruptSessionError,
    PermanentStoreError,
    SchemaMismatchError,
    SchemaVersionError,
    SessionNotFoundError,
    StoreError,
)
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenDict
from session_sql.surface import Replay, node_digest, surface_digest

__all__ = [
    "PAGE",
    "READABLE_VERSIONS",
    "Source",
    "SourceSession",
    "check_url",
    "describe",
    "refuse_row_security",
]

READABLE_VERSIONS = (1, 2, 3, 4, 5, SCHEMA_VERSION)
"""The schema versions a source may have: this build's and every one before it."""

TENANTED = 3
"""The first version with tenants, metadata and the surface digest."""

KEYED = 5
"""The first version whose events and surface rows name their session by ``session_key``."""

PAGE = 500
"""Sessions listed, and events read, per statement."""


@dataclass(frozen=True)
class _Layout:
    """The tables of a source and what its version keeps: tenants and metadata since 3, a
    ``session_key`` instead of ``(tenant, session_id)`` in events and surface since 5."""

    sessions: Table
    events: Table
    surface: Table
    tenanted: bool
    keyed: bool = False

    def tenant(self, table: Table) -> ColumnElement[Any]:
        return table.c.tenant if self.tenanted else literal("", Text)

    def own(self, table: Table, tenant: str) -> ColumnElement[bool]:
        if self.tenanted:
            return table.c.tenant == tenant
        return true() if tenant == "" else false()

    def of_session(
        self, table: Table, tenant: str, session_id: str, row: Any
    ) -> ColumnElement[bool]:
        """The rows of ``table`` (events or surface) that belong to one session, whose
        ``sessions`` row (read in the same snapshot) is ``row``: by its ``session_key`` from
        version 5 on (one shard of a distributed store), by tenant and id before."""
        if self.keyed:
            return table.c.session_key == int(row.session_key)
        return and_(self.own(table, tenant), table.c.session_id == session_id)

    def listing_order(self) -> tuple[ColumnElement[Any], ...]:
        """The order sessions are listed in: tenant by tenant, along an index of the version
        (the primary key before 5; from 5 on, the ``(tenant, created_at, id)`` index: neither
        5 nor this build has one on ``(tenant, id)``)."""
        s = self.sessions
        if self.keyed:
            return (s.c.tenant, s.c.created_at, s.c.id)
        return (s.c.tenant, s.c.id) if self.tenanted else (s.c.id,)


@functools.cache
def _legacy_layout(schema: str | None, version: int) -> _Layout:
    """Versions 1 to 5: the columns migrate reads, as those versions had them. Versions 1
    and 2 have no tenant and no metadata; 3 and 4 add them and the surface digest (4's
    ``events.data`` is JSONB on PostgreSQL: read as text like every version's); 5 names a
    session's events and surface rows by the ``session_key`` of its row."""
    md = MetaData(schema=schema)
    tenanted, keyed = version >= TENANTED, version >= KEYED

    def tenant() -> list[Column[Any]]:
        return [Column("tenant", Text)] if tenanted else []

    def owner() -> list[Column[Any]]:
        """How a row of events or surface names its session."""
        if keyed:
            return [Column("session_key", BigInteger)]
        return [*tenant(), Column("session_id", Text)]

    metadata: list[Column[Any]] = []
    if tenanted:
        metadata = [
            Column("surface_digest", BigInteger),
            Column("user_id", Text),
            Column("title", Text),
            Column("labels", Text),
        ]
    # Version 5 lists sessions along its (tenant, created_at, id) index (``listing_order``).
    key = [Column("session_key", BigInteger), Column("created_at", BigInteger)] if keyed else []
    sessions = Table(
        "sessions",
        md,
        *key,
        *tenant(),
        Column("id", Text),
        Column("inherited_event_count", BigInteger),
        Column("header", Text),
        Column("head_seq", BigInteger),
        Column("surface_next_pos", BigInteger),
        Column("replace_generation", BigInteger),
        Column("updated_at", BigInteger),
        *metadata,
    )
    events = Table(
        "events",
        md,
        *owner(),
        Column("seq", BigInteger),
        Column("type", Text),
        Column("time", BigInteger),
        Column("data", Text),
        Column("source_event_seqs", Text),
        Column("surface_op", Text),
        Column("ignorable", Boolean),
    )
    surface = Table(
        "surface",
        md,
        *owner(),
        Column("pos", BigInteger),
        Column("event_seq", BigInteger),
    )
    return _Layout(sessions, events, surface, tenanted=tenanted, keyed=keyed)


def current_layout(schema: str | None) -> _Layout:
    """This build's tables."""
    t = tables_for(schema)
    return _Layout(t.sessions, t.events, t.surface, tenanted=True, keyed=True)


def session_keys(engine: Engine, layout: _Layout, label: str) -> Iterator[tuple[str, str]]:
    """Every ``(tenant, id)`` of a store, tenant by tenant, a keyset page per read."""
    s = layout.sessions
    order = layout.listing_order()
    query = select(layout.tenant(s), s.c.id, *order).order_by(*order).limit(PAGE)
    after: tuple[Any, ...] | None = None
    while True:
        page = query
        if after is not None:
            page = page.where(tuple_(*order) > tuple_(*after))
        with translate_errors(database=label), read_tx(engine) as conn:
            rows = conn.execute(page).all()
        yield from ((str(row[0]), str(row[1])) for row in rows)
        if len(rows) < PAGE:
            return
        after = tuple(rows[-1][2:])


class Source:
    """The store migrated from; only ever read."""

    def __init__(self, url: str, schema: str) -> None:
        check_url(url, "from_url")
        check_options(schema, None, None, None)
        engine = make_engine(url)
        try:
            target = target_schema(engine, schema)
            try:
                backend_for(engine).require_existing(engine.url)
                self.version = stored_version(engine, target)
            except StoreError as exc:
                if exc.path is None:
                    raise
                raise PermanentStoreError(
                    f"nothing to migrate: no store at {exc.path}", path=exc.path
                ) from exc
            if self.version == SCHEMA_VERSION:
                ensure_schema(engine, target, create=False)  # the whole gate
                self.layout = current_layout(target)
            elif self.version in READABLE_VERSIONS:
                self.layout = _legacy_layout(target, self.version)
                _check_legacy_columns(engine, self.layout, self.version)
            else:
                label = database_label(engine)
                raise SchemaVersionError(
                    f"{label}: schema version {self.version} is not one migrate can read "
                    f"(it reads versions {', '.join(map(str, READABLE_VERSIONS))})"
                    + ("; upgrade session_sql to read it" if self.version > SCHEMA_VERSION else ""),
                    expected=SCHEMA_VERSION,
                    actual=str(self.version),
                )
            if self.layout.tenanted:
                refuse_row_security(engine, self.layout.sessions, "source")
        except BaseException:
            engine.dispose()
            raise
        self.engine = engine
        self.schema = target
        self.label = database_label(engine) + (f" (schema {target})" if target else "")

    def close(self) -> None:
        self.engine.dispose()

    def totals(self) -> tuple[int, int, int]:
        """``(tenants, sessions, events)`` in the source."""
        s = self.layout.sessions
        with translate_errors(database=self.label), read_tx(self.engine) as conn:
            sessions, events = conn.execute(
                select(func.count(), func.coalesce(func.sum(s.c.head_seq + 1), 0))
            ).one()
            tenants = min(int(sessions), 1)  # before version 3, every session is tenant ""
            if self.layout.tenanted:
                tenants = conn.execute(select(func.count(func.distinct(s.c.tenant)))).scalar_one()
        return int(tenants), int(sessions), int(events)

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """Every ``(tenant, id)`` in primary-key order, a page per read."""
        return session_keys(self.engine, self.layout, self.label)

    def has(self, tenant: str, session_id: str) -> bool:
        s = self.layout.sessions
        with translate_errors(session_id), read_tx(self.engine) as conn:
            query = select(s.c.id).where(self.layout.own(s, tenant), s.c.id == session_id)
            return conn.execute(query).first() is not None

    def event_count(self, tenant: str, session_id: str) -> int:
        """The number of events the session's row claims (0 when it is gone)."""
        s = self.layout.sessions
        with translate_errors(session_id), read_tx(self.engine) as conn:
            head = conn.execute(
                select(s.c.head_seq).where(self.layout.own(s, tenant), s.c.id == session_id)
            ).scalar()
        return 0 if head is None else max(int(head) + 1, 0)

    @contextmanager
    def read(self, tenant: str, session_id: str) -> Iterator[SourceSession]:
        """One session in one snapshot: its row and surface digest now, its events paged."""
        layout = self.layout
        s, sf = layout.sessions, layout.surface
        columns = [
            cast(s.c.header, Text).label("header"),
            s.c.head_seq,
            s.c.surface_next_pos,
            s.c.replace_generation,
            s.c.inherited_event_count,
            s.c.updated_at,
        ]
        if layout.tenanted:
            columns += [s.c.surface_digest, s.c.user_id, s.c.title, s.c.labels]
        if layout.keyed:
            columns.append(s.c.session_key)
        with translate_errors(session_id), snapshot_tx(self.engine) as conn:
            row = conn.execute(
                select(*columns).where(layout.own(s, tenant), s.c.id == session_id)
            ).first()
            if row is None:
                raise SessionNotFoundError(
                    f"{describe(self.label, tenant, session_id)} was deleted from the source "
                    "during the migration",
                    session_id=session_id,
                )
            header = frozen_header(session_id, row.header)
            if str(header["id"]) != session_id:
                raise CorruptSessionError(
                    f"{describe(self.label, tenant, session_id)}: its header names id "
                    f"{header['id']!r}",
                    session_id=session_id,
                )
            metadata = Metadata()
            if layout.tenanted:
                metadata = Metadata(
                    check_user_id(row.user_id),
                    check_title(row.title),
                    check_labels(labels_value(session_id, row.labels), "labels"),
                )
            row_sum = 0
            nodes = select(sf.c.pos, sf.c.event_seq).where(
                layout.of_session(sf, tenant, session_id, row)
            )
            for pos, seq in conn.execute(nodes):
                row_sum += node_digest(pos, seq)
            yield SourceSession(
                conn,
                layout,
                tenant,
                session_id,
                header,
                metadata,
                row,
                surface_digest(row_sum, row.surface_next_pos, row.replace_generation),
            )


class SourceSession:
    """One source session inside its snapshot transaction."""

    def __init__(
        self,
        conn: Connection,
        layout: _Layout,
        tenant: str,
        session_id: str,
        header: FrozenDict,
        metadata: Metadata,
        row: Any,
        digest: int,
    ) -> None:
        self._conn = conn
        self._layout = layout
        self.tenant = tenant
        self.session_id = session_id
        self.header = header
        self.metadata = metadata
        self.updated_at = int(row.updated_at)
        self._row = row
        self._digest = digest

    def events(self) -> Iterator[SessionEvent]:
        """Events ``0..head_seq`` in pages; a missing seq is ``CorruptSessionError``."""
        e = self._layout.events
        head = int(self._row.head_seq)
        query = (
            select(*event_columns(e))
            .where(self._layout.of_session(e, self.tenant, self.session_id, self._row))
            .order_by(e.c.seq)
            .limit(PAGE)
        )
        expected = 0
        while expected <= head:
            rows = self._conn.execute(query.where(e.c.seq >= expected, e.c.seq <= head)).all()
            for row in rows:
                if row[0] != expected:  # its seq: one is missing
                    break
                yield event_from_row(self.session_id, row)
                expected += 1
            if expected <= head and (len(rows) < PAGE or rows[-1][0] != expected - 1):
                raise CorruptSessionError(
                    f"session {self.session_id!r}: event seq {expected} is missing below the "
                    f"head {head} in the source; run 'session-sql verify' on it there",
                    session_id=self.session_id,
                    seq=expected,
                )

    def problems(self, state: Replay, inherited: int) -> list[str]:
        """How the fold of the copied log differs from the source's row and surface table."""
        row = self._row
        found: list[str] = []
        for column, stored, folded in (
            ("head_seq", row.head_seq, state.length - 1),
            ("surface_next_pos", row.surface_next_pos, state.next_pos),
            ("replace_generation", row.replace_generation, state.replace_generation),
            ("inherited_event_count", row.inherited_event_count, inherited),
        ):
            if stored != folded:
                found.append(f"sessions.{column} is {stored}, the log implies {folded}")
        if self._digest != state.digest:
            found.append("the surface table differs from the fold of the log")
        stored_digest = getattr(row, "surface_digest", None)
        if stored_digest is not None and stored_digest != state.digest:
            found.append(
                f"sessions.surface_digest is {stored_digest}, the log implies {state.digest}"
            )
        return found


def _check_legacy_columns(engine: Engine, layout: _Layout, version: int) -> None:
    """Refuse an earlier-version source that lacks a column of ``layout``."""
    missing: list[str] = []
    with translate_errors(database=database_label(engine)), read_tx(engine) as conn:
        insp = inspect(conn)
        for table in (layout.sessions, layout.events, layout.surface):
            live = {c["name"] for c in insp.get_columns(table.name, table.schema)}
            missing += [f"{table.name}.{c.name}" for c in table.c if c.name not in live]
    if missing:
        raise SchemaMismatchError(
            f"{database_label(engine)}: a schema version {version} store without the columns "
            f"{', '.join(missing)}; refusing to read it",
            expected=SCHEMA_VERSION,
            actual=str(version),
            differences=tuple(f"missing column {m}" for m in missing),
        )


def refuse_row_security(engine: Engine, sessions: Table, side: str) -> None:
    """Refuse a role that row-level security keeps to one tenant: it would see no session,
    or only some, and a migration must see them all."""
    backend_for(engine).refuse_row_security(engine, sessions, side)


def describe(label: str, tenant: str, session_id: str) -> str:
    return f"{label}: session {session_id!r}" + (f" of tenant {tenant!r}" if tenant else "")


def check_url(url: object, name: str) -> None:
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"{name} must be a database URL, not {url!r}", option="url")
