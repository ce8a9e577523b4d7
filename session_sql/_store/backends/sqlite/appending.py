"""SQLite's append transaction and the loop that runs the store's flows on ``sqlite3``.

The transaction is ``transactions.counted_append`` run stepwise: ``BEGIN IMMEDIATE`` takes the
database's write lock, so a head update that matches no row is a lost race known before
anything else of the part runs, and the transaction stops there. Every insert is counted
(``ON CONFLICT DO NOTHING``) and the outcome is ``transactions.classify``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from session_sql._store.transactions import (
    COMMIT,
    DONE,
    ROLLBACK,
    AppendPart,
    Flow,
    Instruction,
    Planned,
    Reply,
    Run,
    Send,
    T,
    counted_append,
    event_rows,
    execute_run,
    surface_ops,
)
from session_sql.errors import SessionSQLError

if TYPE_CHECKING:
    from session_sql._store.context import StoreContext

BEGIN_WRITE = "BEGIN IMMEDIATE"


def append_parts(ctx: StoreContext, parts: Sequence[AppendPart]) -> int | None:
    """Append ``parts`` in one transaction (``Backend.append_parts``).

    It runs on the store's idle connection when it is free, as a tail read does (no checkout,
    no reset: the transaction ends in a commit or a rollback either way), else on a pooled
    connection; when checkouts are watched by listeners, always on a pooled one.
    """
    w = ctx.writes
    insert_sql = w.compiled.insert_event_values
    planned = []
    for p in parts:
        values = event_rows(w, p)
        ops = surface_ops(w, p.session_key, p.transitions, p.next_pos)
        insert = Run(insert_sql, values[0]) if len(values) == 1 else Run(insert_sql, values, True)
        planned.append(Planned(p, insert, len(values), ops))
    flow = counted_append(w, parts, planned, begin=[Run(BEGIN_WRITE)], stepwise=True)
    if not ctx.engine.pool.dispatch.checkout:
        refused: SessionSQLError | None = None
        with ctx.idle.borrow() as idle:
            if idle is not None:
                try:
                    return run_flow(flow, idle)
                except SessionSQLError as exc:  # after its rollback: the connection is fine,
                    refused = exc  # so it is kept (an error inside borrow() discards it)
        if refused is not None:
            raise refused
    raw = ctx.engine.raw_connection()
    try:
        return run_flow(flow, raw.dbapi_connection)
    finally:
        raw.close()  # back to the pool, which resets it


def run_flow(flow: Flow[T], conn: Any) -> T:
    """Drive ``flow`` on ``conn`` (a ``sqlite3`` connection outside any transaction), which it
    leaves outside any transaction: an interrupt, or an error the flow raises, rolls back.
    (``transactions.drive``, inlined: every append runs it.)"""
    cur = conn.cursor()
    try:
        instruction = next(flow)
        while True:
            instruction = flow.send(_run(conn, cur, instruction))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except BaseException:
        conn.rollback()
        raise
    finally:
        flow.close()
        cur.close()


def _run(conn: Any, cur: Any, instruction: Instruction) -> Reply:
    """One instruction on ``sqlite3``: statements in order, each one's row count (every
    append runs this)."""
    if type(instruction) is Send:
        counts: list[int] = []
        rows = None
        guard = instruction.guard
        try:
            for k, run in enumerate(instruction.runs):
                count = execute_run(cur, run)
                counts.append(count)
                if run.fetch:
                    rows = cur.fetchall()
                if k == guard and count != 1:
                    break  # the guard did not match: the rest must not run
        except Exception as exc:
            return Reply(counts, error=exc)
        return Reply(counts, rows)
    if instruction is ROLLBACK:
        conn.rollback()
        return DONE
    assert instruction is COMMIT, instruction
    try:
        conn.commit()
    except Exception as exc:
        return Reply([], error=exc)
    return DONE
