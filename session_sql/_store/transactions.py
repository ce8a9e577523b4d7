"""What every append transaction shares, whatever the dialect: the parts, their rows, and the
one rule that says what a failed append means.

An append transaction writes one or more :class:`AppendPart`: per session, a conditional head
update (``Statements.advance``: it matches only the head the writer expected), the event rows
(``rows.event_values``), the surface statements of the planner's Transitions
(:func:`surface_ops`) and, on PostgreSQL, a ``NOTIFY``. The dialects run them differently
(``appends/sqlite.py``, ``appends/postgresql.py``, ``appends/postgresql_async.py``)
and every one of them decides its outcome with :func:`classify`:

**The rule.** A part whose head update matched no row lost the race: another writer appended
first (or the session is gone), so nothing is written and the caller raises
``ConcurrencyError``; whatever else failed in that transaction (a taken key, a missing row)
follows from it. Once a part's head update has matched, its session row is locked at the head
the writer expected until the transaction ends, so no other writer can add rows past it: a
taken key among its inserts (SQLSTATE 23505, or SQLite's primary key or unique constraint, or an
``ON CONFLICT DO NOTHING`` insert that counts short) is a row *already* past the head:
``CorruptSessionError``, nothing written. A unique violation on ``events`` seen without a matched
head update (``backends.translate_errors``' generic reading of a statement) is the lost race:
``ConcurrencyError``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from session_sql._store.context import StoreContext
from session_sql._store.rows import event_values
from session_sql.errors import CorruptSessionError, StoreError
from session_sql.events import SessionEvent
from session_sql.surface import AppendNode, ReplaceNodes, Transition

T = TypeVar("T")


def on_pooled(ctx: StoreContext, run: Callable[[Any, Any], T]) -> T:
    """``run(raw, dbapi)`` on a connection checked out of the pool for one transaction (the
    DBAPI connection; an async engine's adapts psycopg's AsyncConnection to it), then
    returned: the pool resets it, or drops it when the transaction invalidated it."""
    raw = ctx.engine.raw_connection()
    try:
        dbapi = raw.dbapi_connection
        assert dbapi is not None
        return run(raw, dbapi)
    finally:
        raw.close()


class AppendPart(NamedTuple):
    """One session's share of an append transaction (see ``fastpath.append_parts``)."""

    session_id: str
    session_key: int  # the session's number in ``events`` and ``surface``
    advance: dict[str, Any]  # binds ``Statements.advance``
    events: list[SessionEvent]
    transitions: list[Transition]
    next_pos: int
    head: int


class AppendDialect(Protocol):
    """What a dialect's module provides to ``fastpath`` (which picks one per store)."""

    def append_parts(self, ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
        """Append ``parts`` in one transaction: ``None`` once committed, or the index of the
        part whose writer lost the race; raises ``CorruptSessionError`` (see :func:`classify`)."""
        ...

    def insert_rows(self, cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert ``rows.event_values`` rows on ``cur``; the caller checks ``cur.rowcount``."""
        ...

    def insert_nodes(self, cur: Any, ctx: StoreContext, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert surface rows ``(session_key, pos, event_seq, tenant)`` on ``cur``; the caller
        checks ``cur.rowcount``."""
        ...

    def copy_allowed(self, cur: Any, ctx: StoreContext) -> bool:
        """Whether ``cur`` (in its transaction) may write a new session's rows by ``COPY``."""
        ...

    def begin_read(self, ctx: StoreContext, raw: Any) -> None:
        """Start a read on the pooled connection ``raw``: the tenant setting, if any."""
        ...


class SurfaceOp(enum.Enum):
    """What one batch of surface statements does."""

    INSERT_NODES = enum.auto()  # executemany; every row must be inserted (counted)
    DROP_NODES = enum.auto()  # executemany
    RETARGET_NODE = enum.auto()  # execute


def surface_ops(
    ctx: StoreContext, session_key: int, transitions: list[Transition], next_pos: int
) -> list[tuple[SurfaceOp, Any]]:
    """The planner's Transitions as batches of driver parameters, in order."""
    c = ctx.compiled
    tenant = ctx.tenant
    ops: list[tuple[SurfaceOp, Any]] = []
    pending: list[Any] = []
    for t in transitions:
        if type(t) is AppendNode:
            row = {
                "session_key": session_key,
                "pos": next_pos,
                "event_seq": t.seq,
                "tenant": tenant,
            }
            pending.append(c.insert_node.bind(row))
            next_pos += 1
        elif type(t) is ReplaceNodes:
            if pending:
                ops.append((SurfaceOp.INSERT_NODES, pending))
                pending = []
            # A replace keeps the first shadowed row (its pos) for the new seq; a removal
            # (seq None) deletes every shadowed row, and surface_next_pos stays.
            kept = 0 if t.seq is None else 1
            drops = [
                c.drop_node.bind({"b_key": session_key, "b_seq": s}) for s in t.shadowed[kept:]
            ]
            if drops:
                ops.append((SurfaceOp.DROP_NODES, drops))
            if t.seq is not None:
                retarget = {
                    "b_key": session_key,
                    "b_old": t.shadowed[0],
                    "b_new": t.seq,
                }
                ops.append((SurfaceOp.RETARGET_NODE, c.retarget_node.bind(retarget)))
    if pending:
        ops.append((SurfaceOp.INSERT_NODES, pending))
    return ops


def event_rows(ctx: StoreContext, part: AppendPart) -> list[tuple[Any, ...]]:
    """The part's ``events`` rows (``rows.event_values``: checked against the store's limits,
    so an event too big raises ``InvalidEventError`` before anything is sent)."""
    tenant, key, limit = ctx.tenant, part.session_key, ctx.max_event_bytes
    return [event_values(tenant, key, e, limit) for e in part.events]


class Planned(NamedTuple):
    """A part ready for a counted transaction: its event insert and surface batches."""

    part: AppendPart
    insert_sql: str
    args: list[Any]  # one execution per entry
    expected: int  # the event rows the insert must write
    ops: list[tuple[SurfaceOp, Any]]


Check = tuple[Any, int, int]
"""A counted insert: its cursor, the rows it must have written, and its part's index."""


def queue_head(ctx: StoreContext, raw: Any, part: AppendPart, heads: list[Any]) -> Any:
    """Run (or queue, in a pipeline) the part's conditional head update on a cursor of its
    own, kept in ``heads`` so that :func:`classify` can read its row count."""
    c = ctx.compiled
    cur = raw.cursor()
    heads.append(cur)
    cur.execute(c.advance.sql, c.advance.bind(part.advance))
    return cur


def queue_rows(
    ctx: StoreContext, raw: Any, cur: Any, planned: Planned, index: int, checks: list[Check]
) -> None:
    """Run (or queue) a planned part's event insert and surface upkeep; each counted insert
    goes in ``checks``."""
    event_cur = raw.cursor()
    if len(planned.args) == 1:
        event_cur.execute(planned.insert_sql, planned.args[0])
    else:
        event_cur.executemany(planned.insert_sql, planned.args)
    checks.append((event_cur, planned.expected, index))
    surface_upkeep(ctx, raw, cur, planned.part, planned.ops, index, checks)


def surface_upkeep(
    ctx: StoreContext,
    raw: Any,
    cur: Any,
    part: AppendPart,
    ops: list[tuple[SurfaceOp, Any]],
    index: int,
    checks: list[Check],
) -> None:
    """Queue one part's surface statements on ``cur``, in the caller's pipeline or
    transaction. Inserted nodes get a cursor per batch, whose count the caller checks
    (``checks``). Followers are woken after the commit (``Backend.wake``), never inside it."""
    c = ctx.compiled
    for op, params in ops:
        if op is SurfaceOp.INSERT_NODES:
            batch_cur = raw.cursor()
            batch_cur.executemany(c.insert_node.sql, params)
            checks.append((batch_cur, len(params), index))
        elif op is SurfaceOp.DROP_NODES:
            cur.executemany(c.drop_node.sql, params)
        else:
            cur.execute(c.retarget_node.sql, params)


def first_short(checks: Sequence[Check]) -> int | None:
    """The part of the first counted insert that wrote fewer rows than it was given."""
    return next((index for cur, count, index in checks if cur.rowcount != count), None)


def whole(parts: Sequence[AppendPart], heads: list[Any], checks: list[Check]) -> bool:
    """Whether a transaction whose statements all ran may commit: every part's head update
    matched and every counted insert wrote its rows (else :func:`refuse` it)."""
    return (
        len(heads) == len(parts)
        and all(h.rowcount == 1 for h in heads)
        and all(cur.rowcount == count for cur, count, _ in checks)
    )


def refuse(dbapi: Any, parts: Sequence[AppendPart], heads: list[Any], checks: list[Check]) -> int:
    """Roll back a transaction that is not :func:`whole`, and :func:`classify` it."""
    dbapi.rollback()
    return classify(parts, [h.rowcount for h in heads], at=first_short(checks))


def abandon(
    raw: Any,
    dbapi: Any,
    parts: Sequence[AppendPart],
    heads: list[Any],
    exc: BaseException,
    at: int | None = None,
) -> int:
    """After a statement of an append transaction raised ``exc``: a lost connection is
    discarded (not returned to the pool, where its reset would fail, or, without pre-ping, the
    next append would get it; the server has rolled back already), else the transaction is
    rolled back and the failure classified (:func:`classify`, ``at`` the part whose statements
    were running, if known)."""
    if getattr(dbapi, "broken", False):  # psycopg: the connection is lost
        raw.invalidate()
        raise exc
    dbapi.rollback()
    return classify(parts, [h.rowcount for h in heads], at=at, error=exc)


def classify(
    parts: Sequence[AppendPart],
    heads: Sequence[int],
    *,
    at: int | None = None,
    error: BaseException | None = None,
) -> int:
    """The module's rule applied to a failed append transaction, after its rollback (nothing
    was written): the index of the first part whose writer lost the race, else
    ``CorruptSessionError`` raised for rows past a matched head, else ``error`` re-raised.

    ``heads`` are the parts' head-update row counts, in order (1 matched, 0 matched no row,
    -1 not known: not run, or its result not read); ``at`` is the part whose insert counted
    short (no ``error``) or whose statements raised ``error``, when known. A count not known
    is a lost race only when nothing raised (every statement ran, yet the match is not
    confirmed); after an error it is a statement the error kept from running.
    """
    if error is not None and not isinstance(error, Exception):
        raise error  # an interrupt: never read as an outcome
    for i, count in enumerate(heads):
        if count == 0 or (count != 1 and error is None):
            return i
    if at is not None and at < len(heads) and heads[at] == 1:
        if error is None:
            raise rows_past_head(parts[at].session_id)
        if taken_key(error):
            raise rows_past_head(parts[at].session_id) from error
    if error is not None:
        raise error
    raise StoreError("the append failed, for no reason its transaction reported")


def taken_key(error: BaseException) -> bool:
    """Whether ``error`` is a unique or primary key violation (PostgreSQL's SQLSTATE 23505,
    SQLite's constraint codes)."""
    if getattr(error, "sqlstate", None) == "23505":
        return True
    name = getattr(error, "sqlite_errorname", None)
    return name in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE")


def rows_past_head(session_id: str) -> CorruptSessionError:
    """Rows already sit past the session's head: what a taken key under a matched head means."""
    return CorruptSessionError(
        f"session {session_id!r}: rows already exist past the session's head "
        "(events or surface positions); run verify, refusing to append",
        session_id=session_id,
    )
