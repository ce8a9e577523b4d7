"""The store's append transactions, written once and without I/O.

A transaction is a *flow*: a generator that yields what to run (a :class:`Send` of
statements, a :class:`Query`, a :class:`Copy`, :data:`COMMIT`, :data:`ROLLBACK`) and is sent
back a :class:`Reply` (row counts, rows, or the error the statement raised). The databases'
packages drive flows on their drivers: SQLite's loop (``backends/sqlite/appending.py``),
PostgreSQL's sync and async loops (``backends/postgresql/driving.py``). So the transactions,
their outcome rule and PostgreSQL's prepared-statement retry are written once, whatever runs
them, in the manner of psycopg's own generators.

An append transaction writes one or more :class:`AppendPart`: per session, a conditional head
update (``Statements.advance``: it matches only the head the writer expected), the event rows
(``rows.event_values``), the surface statements of the planner's Transitions
(:func:`surface_ops`) and, on PostgreSQL, a wake-up after the commit. Every flow decides its
outcome with :func:`classify`:

**The rule.** A part whose head update matched no row lost the race: another writer appended
first (or the session is gone), so nothing is written and the caller raises
``ConcurrencyError``; whatever else failed in that transaction (a taken key, a missing row)
follows from it. Once a part's head update has matched, its session row is locked at the head
the writer expected until the transaction ends, so no other writer can add rows past it: a
taken key among its inserts (SQLSTATE 23505, or SQLite's primary key or unique constraint, or an
``ON CONFLICT DO NOTHING`` insert that counts short) is a row *already* past the head:
``CorruptSessionError``, nothing written. A unique violation on ``events`` seen without a matched
head update (``database.translate_errors``' generic reading of a statement) is the lost race:
``ConcurrencyError``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from session_sql._store.rows import event_values
from session_sql.errors import CorruptSessionError, StoreError
from session_sql.events import SessionEvent
from session_sql.surface import AppendNode, ReplaceNodes, Transition

if TYPE_CHECKING:
    from session_sql._store.context import CompiledStatements
    from session_sql._store.schema import SchemaTables

T = TypeVar("T")

_log = logging.getLogger("session_sql")


# --------------------------------------------------------------------------------------------
# What a flow asks for, and what it is told


class Run(NamedTuple):
    """One statement: ``params`` is one parameter set, or a list of them (``many``)."""

    sql: Any  # driver SQL text (or, for PostgreSQL's COPY, a composed statement)
    params: Any = None
    many: bool = False
    fetch: bool = False  # the reply carries this statement's rows


class Send(NamedTuple):
    """Statements to run in order in the open transaction (one pipeline where the driver has
    them); the reply has each one's row count. With a ``guard`` (a loop that runs statements
    one by one: SQLite's), the statements after run ``guard`` run only when it counted 1."""

    runs: list[Run]
    guard: int = -1


class Query(NamedTuple):
    """PostgreSQL: one query of several statements, bound on the client, sent as it is; the
    reply has the rows of its last result when ``last_rows``."""

    text: str
    last_rows: bool = False


class Copy(NamedTuple):
    """PostgreSQL: ``COPY ... FROM STDIN`` of ``rows``; the reply has the count."""

    statement: Any
    rows: Sequence[tuple[Any, ...]]


class End(enum.Enum):
    """The end of the open transaction."""

    COMMIT = "commit"
    ROLLBACK = "rollback"


COMMIT: Final = End.COMMIT
ROLLBACK: Final = End.ROLLBACK
"""A rollback on a connection that broke does nothing (the server has rolled back)."""

Instruction = Send | Query | Copy | End


class Reply(NamedTuple):
    """What running an instruction gave: row counts (``-1`` not known), rows, or an error
    (the instruction's first: the statements after it did not run, or ran in vain)."""

    counts: list[int]
    rows: list[Any] | None = None
    error: Exception | None = None
    broken: bool = False  # the connection is lost (the driver discards it)


DONE: Final = Reply([])
"""The reply of an instruction that has nothing to tell (a commit, a rollback)."""

Flow = Generator[Instruction, Reply, T]


# --------------------------------------------------------------------------------------------
# What an append writes


@dataclass(frozen=True, slots=True)
class Writes:
    """What an append transaction needs of its store (``StoreContext.writes``): compiled
    statements, the tenant its rows carry, the size limit, and the wake-up's parameters when
    the store listens."""

    compiled: CompiledStatements
    own: Any  # the database's own statements (``Backend.own_statements``), or None
    tables: SchemaTables
    tenant: str
    max_event_bytes: int | None
    wake_notes: Callable[[Iterable[tuple[str, int]]], list[dict[str, str]]] | None
    drop_nodes: Callable[[int, list[int]], Run]
    """The statement deleting a session's shadowed surface rows (``Backend.drop_nodes_run``)."""


class AppendPart(NamedTuple):
    """One session's share of an append transaction (``writer.StoredSession._append_part``)."""

    session_id: str
    session_key: int  # the session's number in ``events`` and ``surface``
    advance: dict[str, Any]  # binds ``Statements.advance``
    events: list[SessionEvent]
    transitions: list[Transition]
    next_pos: int
    head: int


class SurfaceOp(enum.Enum):
    """What one batch of surface statements does."""

    INSERT_NODES = enum.auto()  # executemany; every row must be inserted (counted)
    DROP_NODES = enum.auto()  # (session key, shadowed seqs): ``Writes.drop_nodes``
    RETARGET_NODE = enum.auto()  # execute


def surface_ops(
    w: Writes, session_key: int, transitions: list[Transition], next_pos: int
) -> list[tuple[SurfaceOp, Any]]:
    """The planner's Transitions as batches of driver parameters, in order."""
    c = w.compiled
    tenant = w.tenant
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
            if len(t.shadowed) > kept:
                ops.append((SurfaceOp.DROP_NODES, (session_key, list(t.shadowed[kept:]))))
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


def event_rows(w: Writes, part: AppendPart) -> list[tuple[Any, ...]]:
    """The part's ``events`` rows (``rows.event_values``: checked against the store's limits,
    so an event too big raises ``InvalidEventError`` before anything is sent)."""
    tenant, key, limit = w.tenant, part.session_key, w.max_event_bytes
    return [event_values(tenant, key, e, limit) for e in part.events]


class Planned(NamedTuple):
    """A part ready for a counted transaction: its event insert and surface batches."""

    part: AppendPart
    insert: Run  # the event rows' insert (one statement, or ``many``)
    expected: int  # the event rows the insert must write
    ops: list[tuple[SurfaceOp, Any]]


def head_run(w: Writes, part: AppendPart) -> Run:
    """The part's conditional head update."""
    advance = w.compiled.advance
    return Run(advance.sql, advance.bind(part.advance))


def upkeep_runs(w: Writes, ops: list[tuple[SurfaceOp, Any]]) -> tuple[list[Run], list[int]]:
    """A part's surface statements, and the count each must reach (``-1``: not counted; the
    node inserts are, to the row). A batch of one runs as one execution."""
    c = w.compiled
    runs: list[Run] = []
    expected: list[int] = []
    for op, params in ops:
        if op is SurfaceOp.INSERT_NODES:
            one = len(params) == 1
            runs.append(Run(c.insert_node.sql, params[0] if one else params, many=not one))
            expected.append(len(params))
        elif op is SurfaceOp.DROP_NODES:
            runs.append(w.drop_nodes(*params))
            expected.append(-1)
        else:
            runs.append(Run(c.retarget_node.sql, params))
            expected.append(-1)
    return runs, expected


def wake_runs(w: Writes, heads: Iterable[tuple[str, int]]) -> list[Run]:
    """The wake-ups of the followers of each ``(session id, head)`` (none when the store does
    not listen)."""
    if w.wake_notes is None:
        return []
    notify = w.own.notify
    return [Run(notify.sql, notify.bind(n)) for n in w.wake_notes(heads)]


# --------------------------------------------------------------------------------------------
# The flows


Check = tuple[int, int, int]
"""A counted insert: the rows it wrote, the rows it was given, and its part's index."""


def counted_append(
    w: Writes,
    parts: Sequence[AppendPart],
    planned: Sequence[Planned],
    *,
    begin: Sequence[Run] = (),
    stepwise: bool,
    commit: bool = True,
) -> Flow[int | None]:
    """The counted append transaction: ``None`` once committed, or the index of the part
    whose writer lost the race (nothing written); ``CorruptSessionError`` raised for rows
    past a matched head (see the module's rule).

    ``begin`` runs first (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's tenant setting).
    ``stepwise`` (SQLite, whose ``BEGIN IMMEDIATE`` holds the database's write lock) reads
    each part's head update before running its inserts, and stops at the first that lost;
    otherwise (a PostgreSQL pipeline) every statement is sent at once, the inserts' ``ON
    CONFLICT DO NOTHING`` keeping a taken key from aborting it, and the counts are read when
    it has synced. Without ``commit`` the caller's transaction is left open (and to the
    caller to end) once every part is whole; it is rolled back otherwise.
    """
    heads: list[int] = []
    checks: list[Check] = []
    if stepwise:
        first = list(begin)  # sent with the first part
        for i, p in enumerate(planned):
            at = len(first)  # the head update's place: the part's rows run only if it matched
            upkeep, expected = upkeep_runs(w, p.ops)
            reply = yield Send([*first, head_run(w, p.part), p.insert, *upkeep], at)
            first = []
            counts = reply.counts
            if len(counts) > at:
                heads.append(counts[at])
            if reply.error is not None:
                return (yield from failed(parts, heads, reply.error))
            if counts[at] != 1:
                break  # a lost race: nothing more ran
            _check(checks, counts, at + 1, p, expected, i)
    else:
        runs = list(begin)
        places: list[tuple[int, list[int]]] = []  # each part's head update's place, upkeep's
        for p in planned:
            upkeep, expected = upkeep_runs(w, p.ops)
            places.append((len(runs), expected))
            runs += [head_run(w, p.part), p.insert, *upkeep]
        reply = yield Send(runs)
        counts = reply.counts
        heads = [counts[at] for at, _ in places]  # those read, even when one failed
        if reply.error is not None:
            return (yield from failed(parts, heads, reply.error))
        for i, (p, (at, expected)) in enumerate(zip(planned, places, strict=True)):
            _check(checks, counts, at + 1, p, expected, i)
    return (yield from finish(w, parts, heads, checks, commit=commit))


def finish(
    w: Writes,
    parts: Sequence[AppendPart],
    heads: Sequence[int],
    checks: Sequence[Check],
    *,
    commit: bool = True,
) -> Flow[int | None]:
    """The end of an append transaction whose statements all ran: rolled back and
    :func:`classify`-ed unless it is :func:`whole`, else committed (unless the caller ends
    it) and its followers woken."""
    if not whole(parts, heads, checks):
        yield ROLLBACK
        return classify(parts, heads, at=first_short(checks))
    if commit:
        reply = yield COMMIT
        if reply.error is not None:
            return (yield from failed(parts, heads, reply.error))
        if w.wake_notes is not None:
            yield from wake_after_commit(w, parts)
    return None


def _check(
    checks: list[Check], counts: list[int], at: int, p: Planned, expected: list[int], i: int
) -> None:
    """Add part ``i``'s counted inserts to ``checks``: its events' at ``at``, then its surface
    upkeep's (``expected``, -1 for a statement not counted)."""
    checks.append((counts[at], p.expected, i))
    for k, n in enumerate(expected, at + 1):
        if n >= 0:
            checks.append((counts[k], n, i))


def failed(
    parts: Sequence[AppendPart], heads: Sequence[int], error: Exception, at: int | None = None
) -> Flow[int]:
    """After a statement of an append transaction raised ``error``: roll back, then
    :func:`classify` it (``at`` the part whose statements were running, if known)."""
    yield ROLLBACK
    return classify(parts, heads, at=at, error=error)


def wake_after_commit(w: Writes, parts: Sequence[AppendPart]) -> Flow[None]:
    """Wake the followers of ``parts`` after their transaction committed: one ``pg_notify``
    per part in a transaction of its own, which writes nothing (no WAL flush while it holds
    the notify lock). The appends are durable already, so a failure is logged, never raised:
    a follower that misses it finds the events at its next poll (``following``)."""
    runs = wake_runs(w, ((p.session_id, p.head) for p in parts))
    if not runs:
        return
    reply = yield Send(runs)
    if reply.error is None:
        reply = yield COMMIT
    if reply.error is not None:
        _log.warning("waking the followers after an append failed: %s", reply.error)
        yield ROLLBACK


class StoredHead(NamedTuple):
    """The session row's columns that ``refresh`` checks (``Statements.refresh_rows``' first)."""

    head_seq: int
    surface_next_pos: int
    replace_generation: int
    surface_digest: int
    incarnation: str


def refresh_params(w: Writes, session_key: int, from_seq: int) -> Any:
    """``Statements.refresh_rows``' parameters: the session's events from ``from_seq`` on."""
    c = w.compiled.refresh_rows
    return c.bind({**c.defaults, "b_tenant": w.tenant, "b_key": session_key, "b_from": from_seq})


def refresh_flow(read: Instruction) -> Flow[tuple[StoredHead, list[Any]] | None]:
    """``refresh``'s read: the session row and its event rows from a seq up to its head, as
    one statement (``Statements.refresh_rows``, so from one snapshot), run by ``read`` (the
    database's form of it: one query with the tenant setting on PostgreSQL); ``None`` when
    there is no such session."""
    reply = yield read
    if reply.error is not None:
        raise reply.error
    rows = reply.rows or []
    if not rows:
        return None
    columns = len(StoredHead._fields)
    return StoredHead(*rows[0][:columns]), [r[columns:] for r in rows if r[columns] is not None]


def whole(parts: Sequence[AppendPart], heads: Sequence[int], checks: Sequence[Check]) -> bool:
    """Whether a transaction whose statements all ran may commit: every part's head update
    matched and every counted insert wrote its rows (else it is rolled back and classified)."""
    if len(heads) != len(parts):
        return False
    for count in heads:
        if count != 1:
            return False
    for count, n, _ in checks:  # noqa: SIM110 - a loop, not all(): every append asks
        if count != n:
            return False
    return True


def first_short(checks: Sequence[Check]) -> int | None:
    """The part of the first counted insert that wrote fewer rows than it was given."""
    return next((index for count, n, index in checks if count != n), None)


def drive(flow: Flow[T], run: Callable[[Instruction], Reply]) -> T:
    """Run ``flow`` to its end with ``run`` doing each instruction (a database's sync loop)."""
    try:
        instruction = next(flow)
        while True:
            instruction = flow.send(run(instruction))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def execute_run(cursor: Any, run: Run) -> int:
    """One of a flow's statements on a DBAPI cursor, as the loops that run statements one by
    one do (SQLite's; one inside an open transaction, ``database.run_in_transaction``); its
    row count."""
    if run.many:
        cursor.executemany(run.sql, run.params)
    elif run.params is None:
        cursor.execute(run.sql)
    else:
        cursor.execute(run.sql, run.params)
    return int(cursor.rowcount)


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
    SQLite's constraint codes). Citus relays a worker's violation during a ``COPY`` as an
    internal error (XX000) that keeps only the worker's message."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate == "23505":
        return True
    if sqlstate == "XX000":
        message = getattr(getattr(error, "diag", None), "message_primary", None) or ""
        return message.startswith(RELAYED_TAKEN_KEY)
    name = getattr(error, "sqlite_errorname", None)
    return name in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE")


RELAYED_TAKEN_KEY = "duplicate key value violates unique constraint"
"""How a unique violation's message begins (PostgreSQL's, relayed by Citus as XX000)."""


def rows_past_head(session_id: str) -> CorruptSessionError:
    """Rows already sit past the session's head: what a taken key under a matched head means."""
    return CorruptSessionError(
        f"session {session_id!r}: rows already exist past the session's head "
        "(events or surface positions); run verify, refusing to append",
        session_id=session_id,
    )
