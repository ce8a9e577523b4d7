"""PostgreSQL's own statements: built and compiled for a PostgreSQL store only.

The statements both databases run are ``context.Statements``; these are the ones only
PostgreSQL's transactions use: the one-round-trip append's (a head update that fails the
query when it matches no row, inserts without ``ON CONFLICT``), a batch of events as one
statement over column arrays, the tenant setting that row-level security reads, and the
wake-up. Built once per store (``StoreContext.writes``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Insert,
    Integer,
    Table,
    Text,
    any_,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal_column,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Dialect

from session_sql._store.backends.postgresql.delegation import delegated_for
from session_sql._store.context import Compiled, Statements
from session_sql._store.schema import (
    DEFAULT_TENANT_SETTING,
    TENANT_SETTING,
    JSONText,
    SchemaTables,
    default_tenant_flag,
    distributed_sets,
)
from session_sql._store.transactions import Run


class OwnStatements:
    """PostgreSQL's statements of one schema and tenant, as Core and compiled."""

    def __init__(
        self,
        st: Statements,
        tables: SchemaTables,
        tenant: str,
        dialect: Dialect,
        *,
        tenant_on_workers: bool = False,
        delegated: bool = False,
        distributed: bool = False,
    ):
        s, e, sf = tables.sessions, tables.events, tables.surface
        # The one-round-trip append: its statements and the commit go in one message, so
        # nothing may depend on a row count read by the client. The head update fails the
        # transaction itself when it matches no row (1 / count(*) of the updated rows:
        # division_by_zero, read as a lost race), and the inserts carry no ON CONFLICT: once
        # the head update has matched, a row already past the head is a unique violation.
        advanced = st.advance.returning(s.c.head_seq).cte("advanced")
        guarded = select((literal_column("1", Integer) // func.count()).label("advanced"))
        written = [c.name for c in e.c if c.computed is None]  # the database computes the rest
        self.guarded_advance = Compiled(guarded.select_from(advanced), dialect)
        self.insert_event_strict = Compiled(insert(e), dialect, written)
        self.insert_node_strict = Compiled(insert(sf), dialect, [c.name for c in sf.c])
        # A batch of events as ONE statement; same conflict rule and row count as
        # ``Statements.insert_event``.
        self.insert_events_unnest = Compiled(insert_unnest(e), dialect)
        # A replace's shadowed surface rows as ONE statement (``Statements.drop_node`` is one
        # row each: through a Citus coordinator, a round trip to the worker per row).
        self.drop_nodes = Compiled(
            delete(sf).where(
                sf.c.session_key == bindparam("b_key", type_=BigInteger),
                sf.c.event_seq == any_(bindparam("b_seqs", type_=ARRAY(BigInteger))),
            ),
            dialect,
        )
        self.notify_core = select(func.pg_notify(bindparam("b_channel"), bindparam("b_payload")))
        self.notify = Compiled(self.notify_core, dialect)
        # SET LOCAL of the tenant settings that row-level security reads.
        self.set_tenant = Compiled(
            select(
                func.set_config(bindparam("b_setting", TENANT_SETTING), st.tenant_param, true()),
                func.set_config(
                    bindparam("b_default_setting", DEFAULT_TENANT_SETTING),
                    bindparam("b_default", default_tenant_flag(tenant), type_=Text),
                    true(),
                ),
            ),
            dialect,
        )
        self.distributed_sets = distributed_sets(tenant) if tenant_on_workers else ()
        """What a distributed store's transactions set first (``distributed_sets``), else
        empty."""
        self.distributed = distributed
        """The store's tables are distributed (Citus): its appends copy from fewer rows
        (``appending.copy_min_events``)."""
        self.delegated = delegated_for(tables.metadata.schema) if delegated else None
        """A distributed store's function for a single append, when its schema has this
        build's (``delegation``), else ``None``."""

    def drop_run(self, key: int, seqs: list[int]) -> Run:
        """``Writes.drop_nodes``: a session's shadowed surface rows deleted by one statement."""
        return Run(self.drop_nodes.sql, drop_nodes_params(key, seqs))


def drop_nodes_params(key: int, seqs: list[int]) -> dict[str, Any]:
    """``OwnStatements.drop_nodes``'s parameters."""
    return {"b_key": key, "b_seqs": seqs}


def insert_unnest(table: Table) -> Insert:
    """``INSERT INTO table SELECT * FROM unnest(:u_<col>::<type>[], ...) ON CONFLICT DO
    NOTHING`` over every column of ``table``; JSON columns travel as text and are cast back."""
    written = [c for c in table.c if c.computed is None]  # the database computes the rest
    names = [c.name for c in written]
    arrays = [
        cast(bindparam(f"u_{c.name}"), ARRAY(Text if _is_json(c) else c.type)) for c in written
    ]
    rows = func.unnest(*arrays).table_valued(*names).render_derived(name="r")
    columns = [cast(rows.c[c.name], c.type) if _is_json(c) else rows.c[c.name] for c in written]
    return pg_insert(table).from_select(names, select(*columns)).on_conflict_do_nothing()


def _is_json(column: Any) -> bool:
    return isinstance(column.type, JSONText)
