"""SQLite's append transaction: ``BEGIN IMMEDIATE`` (``Backend.begin_raw_write``), then each
part's head update, read at once, its event rows and surface upkeep, every insert counted
(``ON CONFLICT DO NOTHING``), and the outcome by ``appends.classify``.

The write lock is the database's, taken by ``BEGIN IMMEDIATE``: a head update that matches
no row is a lost race known before anything else of the part runs, so the transaction stops
there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from session_sql._store.context import StoreContext
from session_sql._store.transactions import (
    AppendPart,
    Check,
    Planned,
    abandon,
    event_rows,
    on_pooled,
    queue_head,
    queue_rows,
    refuse,
    surface_ops,
    whole,
)
from session_sql.errors import SessionSQLError


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append ``parts`` in one transaction (``appends.AppendDialect.append_parts``).

    It runs on the store's idle connection when it is free, as a tail read does (no checkout,
    no reset: the transaction ends in a commit or a rollback either way), else on a pooled
    connection; when checkouts are watched by listeners, always on a pooled one.
    """
    insert_sql = ctx.compiled.insert_event_values
    planned = []
    for p in parts:
        values = event_rows(ctx, p)
        ops = surface_ops(ctx, p.session_key, p.transitions, p.next_pos)
        planned.append(Planned(p, insert_sql, values, len(values), ops))
    if not ctx.engine.pool.dispatch.checkout:
        refused: SessionSQLError | None = None
        with ctx.idle.borrow() as idle:
            if idle is not None:
                try:
                    return _transaction(ctx, idle, idle, parts, planned)
                except SessionSQLError as exc:  # after its rollback: the connection is fine,
                    refused = exc  # so it is kept (an error inside borrow() discards it)
        if refused is not None:
            raise refused
    return on_pooled(ctx, lambda raw, dbapi: _transaction(ctx, raw, dbapi, parts, planned))


def _transaction(
    ctx: StoreContext, raw: Any, dbapi: Any, parts: Sequence[AppendPart], planned: list[Planned]
) -> int | None:
    """The transaction on ``raw`` (a pooled connection, or the idle DBAPI connection,
    ``dbapi`` itself), which it leaves outside any transaction."""
    cur = raw.cursor()
    heads: list[Any] = []
    checks: list[Check] = []
    ctx.backend.begin_raw_write(cur)
    try:
        for i, p in enumerate(planned):
            if queue_head(ctx, raw, p.part, heads).rowcount != 1:
                break  # a lost race: nothing more to run
            queue_rows(ctx, raw, cur, p, i, checks)
        if whole(parts, heads, checks):
            dbapi.commit()
            return None
    except BaseException as exc:
        return abandon(raw, dbapi, parts, heads, exc)
    return refuse(dbapi, parts, heads, checks)


def insert_rows(cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """``executemany`` of the prepared insert; the caller checks the count."""
    cur.executemany(ctx.compiled.insert_event_values, rows)


def insert_nodes(cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
    """``executemany`` of the prepared surface insert (it binds the tuples as they are)."""
    cur.executemany(ctx.compiled.insert_node.sql, rows)


def copy_allowed(cur: Any, ctx: StoreContext) -> bool:
    """SQLite has no ``COPY``."""
    return False


def begin_read(ctx: StoreContext, raw: Any) -> None:
    """Nothing: SQLite has no tenant setting (the statements filter by tenant)."""
