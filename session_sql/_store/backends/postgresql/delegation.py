"""A distributed store's single append as one call that Citus delegates to a worker.

Through a Citus coordinator each statement of an append, and its ``BEGIN`` and ``COMMIT``, is
a round trip from the coordinator to the worker that holds the session. A PL/pgSQL function
distributed by the session's key and co-located with ``sessions``
(``create_distributed_function``), called alone in autocommit, goes to that worker whole: it
runs the append's statements there and commits there, one round trip
(docs/performance.md, "W13"). One modifying CTE does not do that: Citus runs each
modification of a CTE over two tables as a task of its own.

The function holds the statements of the most common append, one event and at most one new
surface node (a streamed chunk, a message), as the one-query form sends them
(``one_query.one_trip``): the head update, which fails with ``division_by_zero`` when it
matches no row (a lost race, as the guarded update's division does), the event insert and
the node insert, without ``ON CONFLICT`` (a row past the head is a unique violation). Citus
relays either error with its SQLSTATE, so ``one_query.one_trip_outcome`` reads them as it
reads the one query's. Any other append keeps the statements. The wake-up cannot share the
call's query (a query of two statements is a transaction block, which Citus does not
delegate), so it follows as a query of its own.

The function's name ends in a digest of its text: a store whose function another build
created (other statements) does not find its own and keeps the statements.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection, Text, and_, func, insert, literal, select, text
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement

from session_sql._store.schema import SchemaTables, tables_for

__all__ = [
    "DelegatedAppend",
    "create_delegated_append",
    "delegated_append",
    "delegated_for",
    "has_delegated",
    "may_create",
]

NAME_PREFIX: Final = "session_sql_append_"

_DISTRIBUTED: Final = text(
    "SELECT EXISTS (SELECT 1 FROM pg_dist_object WHERE classid = 'pg_proc'::regclass "
    "AND objid = to_regprocedure(:signature) AND colocationid = "
    "(SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = CAST(:sessions AS regclass))"
    "AND has_function_privilege(objid, 'EXECUTE'))"
)


class DelegatedAppend(NamedTuple):
    """The function of a store's schema, and how to call it."""

    signature: str
    """``schema.name(type, ...)``: what ``to_regprocedure`` and Citus take."""
    create: str
    """``CREATE FUNCTION ...``."""
    call: str
    """``SELECT schema.name(%s, ...)``: bound on the client with :meth:`values`."""
    advance: tuple[str, ...]
    """The head update's parameter names, in order."""
    node: tuple[str, ...]
    """The node insert's parameter names, in order."""

    def values(
        self, key: int, advance: dict[str, Any], event: tuple[Any, ...], node: Any
    ) -> list[Any]:
        """The call's values: the key, the head update's, the event row's (``rows.event_values``
        order), the node row's (``None``: no node)."""
        nodes = [None] * len(self.node) if node is None else [node[n] for n in self.node]
        return [key, *(advance[n] for n in self.advance), *event, *nodes]


def _typed(
    stmt: ClauseElement, dialect: Dialect, keys: Sequence[str] | None = None
) -> tuple[str, list[str], list[str]]:
    """``stmt`` with ``%s`` placeholders (``Compiled.positional``), its parameter names and
    their SQL types."""
    from session_sql._store.context import Compiled  # noqa: PLC0415 (it imports this)

    sql, names = Compiled(stmt, dialect, list(keys) if keys is not None else None).positional
    c: Any = stmt.compile(dialect=dialect, column_keys=list(keys) if keys is not None else None)
    return sql, list(names), [c.binds[n].type.compile(dialect=dialect) for n in names]


def _numbered(sql: str, first: int) -> str:
    """``sql``'s ``%s`` as ``$first``, ``$first+1``, ... (a function's parameters, typed by
    its signature), without the casts the driver's form puts on them: Citus fails a
    statement run on a worker inside a function whose parameter is cast to another type
    than its column's (``$1::VARCHAR`` into a ``TEXT`` column: "there is no parameter $1")."""
    count = first - 1

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match[0] == "%%":
            return "%"
        count += 1
        return "$" + str(count)

    return re.sub(r"%%|%s(?:::\w+)?", number, sql)


def delegated_append(
    tables: SchemaTables, advance: ClauseElement, dialect: Dialect
) -> DelegatedAppend:
    """The function of ``tables``' schema for ``advance`` (``Statements.advance``)."""
    e, sf = tables.events, tables.surface
    written = [c.name for c in e.c if c.computed is None]
    adv_sql, adv_names, adv_types = _typed(advance, dialect)
    ev_sql, _, ev_types = _typed(insert(e), dialect, written)
    node_sql, node_names, node_types = _typed(insert(sf), dialect, [c.name for c in sf.c])
    first_event = 2 + len(adv_names)
    first_node = first_event + len(ev_types)
    body = (
        "BEGIN\n"
        f"  {_numbered(adv_sql, 2)};\n"
        "  IF NOT FOUND THEN\n"
        "    RAISE EXCEPTION 'the session moved on' USING ERRCODE = 'division_by_zero';\n"
        "  END IF;\n"
        f"  {_numbered(ev_sql, first_event)};\n"
        f"  IF ${first_node} IS NOT NULL THEN\n"
        f"    {_numbered(node_sql, first_node)};\n"
        "  END IF;\n"
        "END"
    )
    types = ["BIGINT", *adv_types, *ev_types, *node_types]
    digest = hashlib.blake2b(("\n".join(types) + "\n" + body).encode(), digest_size=8).hexdigest()
    prep = dialect.identifier_preparer
    schema = tables.metadata.schema
    name = NAME_PREFIX + digest
    qualified = (prep.quote_schema(schema) + "." if schema else "") + prep.quote(name)
    signature = f"{qualified}({', '.join(types)})"
    create = (
        f"CREATE FUNCTION {signature} RETURNS void LANGUAGE plpgsql AS $session_sql$\n"
        f"{body}\n$session_sql$"
    )
    call = f"SELECT {qualified}({', '.join(['%s'] * len(types))})"
    return DelegatedAppend(signature, create, call, tuple(adv_names), tuple(node_names))


@functools.lru_cache(maxsize=64)
def delegated_for(schema: str | None) -> DelegatedAppend:
    """The function of a store in ``schema`` (its statements do not depend on the tenant,
    which is one of their parameters)."""
    from session_sql._store.context import statements_for  # noqa: PLC0415 (imports this)
    from session_sql._store.database import backend_for  # noqa: PLC0415

    st = statements_for(schema, backend_for("postgresql+psycopg://"), "")
    dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
    return delegated_append(tables_for(schema), st.advance, dialect)


def create_delegated_append(conn: Connection, fn: DelegatedAppend, sessions: str) -> None:
    """Create ``fn`` and distribute it by its first argument (the session's key), co-located
    with ``sessions`` (a qualified table name)."""
    conn.execute(text(fn.create.replace(":", "\\:")))
    conn.execute(
        text("SELECT create_distributed_function(:f, '$1', colocate_with => :with)"),
        {"f": fn.signature, "with": sessions},
    )


def may_create(conn: Connection, fn: DelegatedAppend, schema: str | None) -> bool:
    """Whether ``fn`` is missing and this role may create it in ``schema`` (the current
    schema when None)."""
    missing = func.to_regprocedure(literal(fn.signature, Text)).is_(None)
    where = literal(schema, Text) if schema is not None else func.current_schema()
    allowed = func.has_schema_privilege(where, literal("CREATE", Text))
    return bool(conn.execute(select(and_(missing, allowed))).scalar_one())


def has_delegated(conn: Connection, fn: DelegatedAppend, sessions: str) -> bool:
    """Whether ``fn`` exists, Citus delegates it (distributed, co-located with ``sessions``)
    and this role may call it (it runs with the caller's rights; PostgreSQL grants
    ``EXECUTE`` to every role unless it was revoked: then the statements append)."""
    return bool(
        conn.execute(_DISTRIBUTED, {"signature": fn.signature, "sessions": sessions}).scalar_one()
    )
