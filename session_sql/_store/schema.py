"""The SQL schema of a session store, as code (SPEC §8.1).

One ``MetaData`` per target schema holds every table, index and the ``surface_messages`` view;
the files in ``schema/`` are rendered from it (``session-sql schema --dialect sqlite``)
and a test fails when they drift. Every constraint and index is named through the naming
convention, so driver errors can be mapped by constraint name and the schema gate can compare
names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Computed,
    Connection,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    case,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import (
    CreateIndex,
    CreateSchema,
    CreateTable,
    CreateView,
    ExecutableDDLElement,
)
from sqlalchemy.sql.compiler import TypeCompiler
from sqlalchemy.sql.dml import Insert

from session_sql._store.views import AnalyticsView, CreateAnalyticsView, views_for

__all__ = [
    "APPLICATION",
    "DEFAULT_SCHEMA",
    "DEFAULT_TENANT_SETTING",
    "NAMING_CONVENTION",
    "SCHEMA_VERSION",
    "JSONText",
    "TENANT_POLICY",
    "TENANT_SETTING",
    "SchemaTables",
    "create_all",
    "default_tenant_flag",
    "meta_rows",
    "metadata_for",
    "render_ddl",
    "row_security_ddl",
    "tables_for",
    "distributed_sets",
]

SCHEMA_VERSION = 6
"""Bumped on any change to the structure below; a database of another version is refused."""

APPLICATION = "session_sql"
DEFAULT_SCHEMA = "session_sql"

NAMING_CONVENTION: dict[str, str] = {
    "pk": "pk_%(table_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
}

DialectName = Literal["sqlite", "postgresql"]


class JSONText(JSON):
    """JSON that SQLite stores in a TEXT-affinity column.

    A column declared ``JSON`` gets NUMERIC affinity in SQLite, which silently turns a
    top-level ``1.0`` into the integer ``1``; declaring it ``TEXT`` keeps the serialised text
    verbatim. Other dialects render their native JSON type.
    """

    cache_ok = True


@compiles(JSONText, "sqlite")
def _compile_json_text_sqlite(type_: JSONText, compiler: TypeCompiler, **kw: Any) -> str:
    return "TEXT"


@dataclass(frozen=True)
class SchemaTables:
    """The tables of one target schema, for building statements."""

    metadata: MetaData
    meta: Table
    sessions: Table
    session_ids: Table
    events: Table
    surface: Table
    surface_messages: Table
    """The view; select from it, never insert."""
    create_view: CreateView
    """The ``CREATE VIEW`` statement of ``surface_messages``."""
    analytics_views: tuple[AnalyticsView, ...] = tuple(views_for())
    """The views of docs/sql.md (``tool_calls``, ``turns``, ...), created after the tables."""

    @property
    def base_tables(self) -> tuple[Table, ...]:
        """The real tables in creation order (parents first)."""
        return (self.meta, self.sessions, self.session_ids, self.events, self.surface)


def _tenant_column() -> Column[str]:
    """The leading ``tenant`` column of every table (``''``: the default tenant)."""
    return Column("tenant", Text, nullable=False, server_default=text("''"))


def _of_session(sessions: Table) -> ForeignKeyConstraint:
    """A row's link to its session in the same tenant: deleting the session deletes the row."""
    return ForeignKeyConstraint(
        ["session_key", "tenant"],
        [sessions.c.session_key, sessions.c.tenant],
        ondelete="CASCADE",
    )


@functools.cache
def tables_for(schema: str | None) -> SchemaTables:
    """Build (once per schema name) the tables living in ``schema`` (``None`` on SQLite)."""
    md = MetaData(schema=schema, naming_convention=NAMING_CONVENTION)

    meta = Table(
        "session_sql_meta",
        md,
        Column("key", Text, nullable=False),
        Column("value", Text, nullable=False),
        PrimaryKeyConstraint("key"),
    )

    sessions = Table(
        "sessions",
        md,
        # The session's key in the other tables: a number assigned once per creation (create,
        # fork, import) and never reused, so each event row and index entry carries 8 bytes
        # instead of the tenant and the public id (SPEC §12.1; the views give the id back).
        # SQLite: the rowid itself (INTEGER PRIMARY KEY AUTOINCREMENT never reuses a key).
        Column(
            "session_key",
            BigInteger().with_variant(Integer(), "sqlite"),
            Identity(always=True),
            nullable=False,
        ),
        # Ids are unique per tenant; a row-level policy reads the tenant column of each table.
        _tenant_column(),
        Column("id", Text, nullable=False),
        Column("format_version", Integer, nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("parent_session", Text, nullable=True),
        Column("inherited_event_count", BigInteger, nullable=False),
        Column("header", JSONText(), nullable=False),
        Column("head_seq", BigInteger, nullable=False),  # -1 while the log is empty
        Column("surface_next_pos", BigInteger, nullable=False),
        Column("replace_generation", BigInteger, nullable=False),
        # A checksum of the surface rows and the two counters above (surface.surface_digest),
        # kept by every write: a write handle compares it with the rows it reads instead of
        # replaying the log; verify compares it with the replay. 0 is an empty session's.
        Column("surface_digest", BigInteger, nullable=False, server_default="0"),
        Column("updated_at", BigInteger, nullable=False),
        # A fresh uuid4 hex per creation (create, fork, import), not part of the header: a
        # handle on a session that was deleted and recreated under the same id sees it differ.
        Column("incarnation", Text, nullable=False),
        # Metadata, not part of the log: who the session belongs to, what it is called, and
        # free-form labels (a JSON object of string -> string).
        Column("user_id", Text, nullable=True),
        Column("title", Text, nullable=True),
        Column(
            "labels",
            JSONText().with_variant(JSONB(), "postgresql"),
            nullable=False,
            server_default=text("'{}'"),
        ),
        PrimaryKeyConstraint("session_key"),
        # id first: a filter on the public id alone (an analyst's, through the views) finds
        # the row without naming the tenant. Not unique here: a distributed table can only
        # hold a key that contains its distribution column (session_key); ``session_ids``
        # keeps the public id unique instead.
        Index(None, "id", "tenant"),
        # The target of the other tables' foreign keys: a row's tenant must be its session's,
        # so a writer confined to one tenant by row-level security cannot attach a row of its
        # own tenant to another tenant's session (a foreign key check ignores the policies).
        UniqueConstraint("session_key", "tenant"),
        # list_sessions pages newest-updated first (and, for complete scans, oldest-created
        # first), within a tenant and optionally within one user of it.
        Index(None, "tenant", "updated_at", "id"),
        Index(None, "tenant", "created_at", "id"),
        Index(None, "tenant", "user_id", "updated_at", "id"),
        Index(None, "tenant", "parent_session"),
        # list_sessions(labels=...) on PostgreSQL: a containment test (labels @> '{...}') that
        # this index answers, so a rare label is found without scanning the tenant's sessions.
        # SQLite has no such index; there a label filter walks the tenant's updated_at order.
        Index(
            None,
            "labels",
            postgresql_using="gin",
            postgresql_ops={"labels": "jsonb_path_ops"},
            info={"dialect": "postgresql"},
        ),
        sqlite_autoincrement=True,
    )

    # The public id's uniqueness within a tenant, and the way from an id to its session's key.
    # Its own table so that on Citus it is distributed by the id (a lookup by id goes to one
    # shard) while the per-session tables are distributed by the key. No foreign key: the two
    # are not co-located there; the store writes and deletes both in one transaction.
    session_ids = Table(
        "session_ids",
        md,
        Column("id", Text, nullable=False),
        _tenant_column(),
        Column("session_key", BigInteger, nullable=False),
        PrimaryKeyConstraint("id", "tenant"),
        sqlite_with_rowid=False,
    )

    # Fixed-width columns first: PostgreSQL aligns each bigint on 8 bytes, so this order
    # leaves no padding between them (docs/performance.md, W8).
    events = Table(
        "events",
        md,
        Column("session_key", BigInteger, nullable=False),
        Column("seq", BigInteger, nullable=False),
        Column("time", BigInteger, nullable=False),
        Column("ignorable", Boolean, nullable=True),
        _tenant_column(),
        Column("type", Text, nullable=False),
        Column("surface_op", Text, nullable=True),
        Column("source_event_seqs", Text, nullable=True),
        # json, not JSONB, on PostgreSQL: the text as appended, key order included (SPEC §12.1;
        # JSONB sorts keys, and a resumed session would miss its provider's prompt cache).
        Column("data", JSONText(), nullable=False),
        PrimaryKeyConstraint("session_key", "seq"),
        _of_session(sessions),
        # Turn boundaries only (a tenth of a typical log): the turns view walks them in log
        # order. Other questions by type are range scans of one session's primary key, or
        # store-wide scans; an index of every event by type cost more than the document
        # itself on PostgreSQL (docs/performance.md).
        Index(
            "ix_events_turn_bounds",
            "session_key",
            "seq",
            # As PostgreSQL reads the predicate back (the gate compares them).
            postgresql_where=text("type = ANY (ARRAY['turn/start'::text, 'turn/end'::text])"),
            sqlite_where=text("type IN ('turn/start', 'turn/end')"),
        ),
        sqlite_with_rowid=False,
    )
    # The call a tool/call or tool/result belongs to, computed by the database (never written):
    # calls meet their results through the index below instead of comparing JSON row by row.
    events.append_column(
        Column(
            "call_id",
            Text,
            Computed(  # STORED on PostgreSQL, which cannot index a virtual column
                case(
                    (events.c.type == "tool/call", events.c.data["callId"].as_string()),
                    (
                        events.c.type == "tool/result",
                        events.c.data[("message", "source", "callId")].as_string(),
                    ),
                ),
                persisted=True,
            ),
            nullable=True,
        )
    )
    # A call and its results share a call_id, so an entry per (session_key, call_id) finds
    # both; the type is read from the row (a third of each entry, were it indexed).
    # Partial: only calls and results are in it, so a lookup by seq never mistakes it for the
    # primary key (PostgreSQL chose it over the PK for messages()' lookups before ANALYZE).
    Index(
        None,
        events.c.session_key,
        events.c.call_id,
        postgresql_where=text("call_id IS NOT NULL"),  # unqualified, as the gate reads it back
        sqlite_where=text("call_id IS NOT NULL"),
    )

    surface = Table(
        "surface",
        md,
        Column("session_key", BigInteger, nullable=False),
        Column("pos", BigInteger, nullable=False),
        Column("event_seq", BigInteger, nullable=False),
        _tenant_column(),
        PrimaryKeyConstraint("session_key", "pos"),
        UniqueConstraint("session_key", "event_seq"),
        _of_session(sessions),
        # A surface entry always names a logged event of its own session.
        ForeignKeyConstraint(
            ["session_key", "event_seq"],
            [events.c.session_key, events.c.seq],
            ondelete="CASCADE",
        ),
        sqlite_with_rowid=False,
    )

    # No ORDER BY in the view: a view's order is not guaranteed, so readers order by
    # (session_id, pos) themselves, which the surface primary key serves.
    view = CreateView(
        select(
            surface.c.tenant,
            sessions.c.id.label("session_id"),
            surface.c.pos,
            events.c.seq,
            events.c.type,
            events.c.time,
            events.c.data,
        ).select_from(
            surface.join(sessions, surface.c.session_key == sessions.c.session_key).join(
                events,
                (surface.c.session_key == events.c.session_key)
                & (surface.c.event_seq == events.c.seq),
            )
        ),
        "surface_messages",
        metadata=md,
        schema=schema,
    )

    return SchemaTables(
        metadata=md,
        meta=meta,
        sessions=sessions,
        session_ids=session_ids,
        events=events,
        surface=surface,
        surface_messages=view.table,
        create_view=view,
    )


def metadata_for(schema: str | None) -> MetaData:
    """The ``MetaData`` for ``schema`` (``None`` on SQLite); the same object on every call."""
    return tables_for(schema).metadata


def meta_rows() -> list[dict[str, str]]:
    """The rows ``session_sql_meta`` holds in a database of this build."""
    return [
        {"key": "schema_version", "value": str(SCHEMA_VERSION)},
        {"key": "application", "value": APPLICATION},
    ]


def indexes_of(table: Table, dialect_name: str) -> list[Index]:
    """``table``'s indexes that exist on ``dialect_name``, by name (some are PostgreSQL's only:
    ``info["dialect"]`` names the one dialect an index is for)."""
    return sorted(
        (ix for ix in table.indexes if ix.info.get("dialect", dialect_name) == dialect_name),
        key=lambda ix: str(ix.name),
    )


def _ddl_elements(tables: SchemaTables, dialect_name: str) -> list[ExecutableDDLElement]:
    """Every DDL statement, in an order that satisfies dependencies; deterministic."""
    elements: list[ExecutableDDLElement] = []
    schema = tables.metadata.schema
    if schema is not None:
        elements.append(CreateSchema(schema, if_not_exists=True))
    for table in tables.base_tables:
        elements.append(CreateTable(table))
        elements.extend(CreateIndex(ix) for ix in indexes_of(table, dialect_name))
    elements.append(tables.create_view)
    elements.extend(CreateAnalyticsView(v, schema) for v in tables.analytics_views)
    return elements


TENANT_SETTING = "session_sql.tenant"
"""The PostgreSQL setting the store sets (``SET LOCAL``) in each transaction to its tenant."""

DEFAULT_TENANT_SETTING = "session_sql.default_tenant"
"""The PostgreSQL setting the store sets to ``on`` beside ``TENANT_SETTING`` when its tenant
is the default tenant ``""``: a custom setting reads ``''`` (not NULL) for the rest of a
server session once a transaction has set it locally, so ``''`` alone cannot name it."""


def default_tenant_flag(tenant: str) -> str:
    """The value of ``DEFAULT_TENANT_SETTING`` for a store of ``tenant``."""
    return "on" if tenant == "" else ""


def distributed_sets(tenant: str) -> tuple[str, ...]:
    """What each transaction of a distributed store sets first (``SET LOCAL``).

    The tenant settings, as statements that Citus sends on to the workers
    (``citus.propagate_set_commands``), where the shards' row-level security reads them: a
    ``set_config`` call stays on the coordinator. ``SET`` takes no parameters, so the tenant
    is a quoted literal (standard strings: a quote is doubled). And custom plans only: a
    prepared statement's generic plan cannot tell the shard from a parameter, and Citus would
    run it on every shard.
    """
    literal = "'" + tenant.replace("'", "''") + "'"
    return (
        "SET LOCAL citus.propagate_set_commands = 'local'",
        f"SET LOCAL {TENANT_SETTING} = {literal}",
        f"SET LOCAL {DEFAULT_TENANT_SETTING} = '{default_tenant_flag(tenant)}'",
        "SET LOCAL plan_cache_mode = force_custom_plan",
    )


TENANT_POLICY = "tenant_isolation"
"""The row-level security policy on ``sessions``, ``session_ids``, ``events`` and ``surface``
(PostgreSQL)."""


def row_security_ddl(tables: SchemaTables, dialect: Dialect) -> list[str]:
    """PostgreSQL's row-level security: each of the tenant's tables keeps a role that is not its
    owner to the rows of the tenant named by ``TENANT_SETTING``, for reading and writing.
    A row of the default tenant ``""`` also needs ``DEFAULT_TENANT_SETTING`` to be ``on``: a
    connection whose transaction-local setting has reverted reads ``''`` and sees nothing.

    Every view runs with the caller's rights (``security_invoker``, PostgreSQL 15), so it is
    filtered the same way: a view that ran with its owner's rights would read every tenant's
    rows for whoever may select from it. Identifiers are quoted by the dialect; there are no
    values.
    """
    prep = dialect.identifier_preparer
    rule = (
        f"tenant = current_setting('{TENANT_SETTING}', true) AND (tenant <> '' OR "
        f"current_setting('{DEFAULT_TENANT_SETTING}', true) = 'on')"
    )
    out: list[str] = []
    for table in (tables.sessions, tables.session_ids, tables.events, tables.surface):
        name = prep.format_table(table)
        out.append(f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY")
        out.append(f"CREATE POLICY {TENANT_POLICY} ON {name} USING ({rule}) WITH CHECK ({rule})")
    schema = tables.metadata.schema
    prefix = "" if schema is None else prep.quote_schema(schema) + "."
    out.extend(
        f"ALTER VIEW {prefix}{prep.quote(name)} SET (security_invoker = true)"
        for name in view_names(tables)
    )
    return out


def view_names(tables: SchemaTables) -> list[str]:
    """Every view of the store: ``surface_messages`` and the analytics views, in creation order."""
    return [tables.surface_messages.name, *(v.name for v in tables.analytics_views)]


DDL_DIGEST: Final = "7b689da4ffb9eddfdc8a632d793d16a7c77637c473c05397f7c22ca95ac1dd20"
"""sha256 of ``render_ddl("postgresql")``: names this build's DDL in the catalog digest a
PostgreSQL store records when it is created, so that a build whose DDL differs (with the
same ``SCHEMA_VERSION``) never trusts another's record. A test holds it equal."""


def _meta_insert(tables: SchemaTables) -> Insert:
    return insert(tables.meta).values(meta_rows())


def create_all(
    conn: Connection,
    schema: str | None,
    distribute: Callable[[Connection, SchemaTables], None] | None = None,
) -> None:
    """Create the schema (PostgreSQL), tables, indexes, view and meta rows on ``conn``;
    ``distribute`` (Citus) runs once the tables exist, before the views that read them.

    Runs inside the caller's transaction, so a failure leaves nothing behind (DDL is
    transactional on both SQLite and PostgreSQL, and on Citus).
    """
    if conn.dialect.name == "sqlite":
        schema = None
    tables = tables_for(schema)
    for element in _ddl_elements(tables, conn.dialect.name):
        # CREATE SCHEMA IF NOT EXISTS still needs CREATE on the database; a role that owns
        # an existing schema (the documented least-privilege setup) must not need it.
        if isinstance(element, CreateSchema) and inspect(conn).has_schema(str(schema)):
            continue
        if element is tables.create_view and distribute is not None:
            distribute(conn, tables)
        conn.execute(element)
    if conn.dialect.name == "postgresql":
        for statement in row_security_ddl(tables, conn.dialect):
            conn.exec_driver_sql(statement)
    conn.execute(_meta_insert(tables))


def _dialect(name: DialectName) -> Dialect:
    if name == "sqlite":
        return sqlite.dialect()
    if name == "postgresql":
        return postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
    raise ValueError(f"unknown dialect {name!r}; expected 'sqlite' or 'postgresql'")


def render_ddl(dialect_name: DialectName, schema: str = DEFAULT_SCHEMA) -> str:
    """The full DDL (plus the meta rows) for ``dialect_name``, one ``;``-terminated statement each.

    ``schema`` is ignored for SQLite. The output is deterministic, so the files in ``schema/``
    can be compared byte for byte.
    """
    dialect = _dialect(dialect_name)
    tables = tables_for(None if dialect_name == "sqlite" else schema)
    statements = [
        str(el.compile(dialect=dialect)).strip() for el in _ddl_elements(tables, dialect_name)
    ]
    if dialect_name == "postgresql":
        statements.extend(row_security_ddl(tables, dialect))
    statements.append(
        str(_meta_insert(tables).compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    )
    header = (
        f"-- session_sql schema version {SCHEMA_VERSION} for {dialect_name}.\n"
        "-- Generated by session_sql.schema.render_ddl; do not edit by hand.\n"
    )
    # SQLAlchemy leaves a space before line breaks; strip it so the files diff cleanly.
    body = "\n\n".join(
        "\n".join(line.rstrip() for line in s.splitlines()) + ";" for s in statements
    )
    return header + "\n" + body + "\n"
