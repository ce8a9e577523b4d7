"""The planner statistics of a store grown by appends (docs/performance.md).

SQLite writes none by itself: without them the analytics views and recipes of docs/sql.md pick
plans that scan a session once per row, quadratic in the log. A bulk import runs ANALYZE
(``transfer``); appends count what they write, and every ``CHECK_EVERY_EVENTS`` of them, and
when the store closes after any, the backend says whether its statistics are stale
(``Backend.statistics_stale``: on SQLite, none yet on a large log, or a log grown or shrunk by
half since) and the store runs ``analyze``. PostgreSQL's autovacuum keeps its own.
"""

from __future__ import annotations

import logging
from typing import Final

from sqlalchemy.exc import SQLAlchemyError

from session_sql._store.context import StoreContext
from session_sql._store.database import analyze, read_tx
from session_sql.errors import SessionSQLError

__all__ = ["CHECK_EVERY_EVENTS", "appended", "closing", "refresh_if_stale"]

CHECK_EVERY_EVENTS: Final = 10_000
"""Appended events between two checks of a long-lived store's statistics."""

_log = logging.getLogger("session_sql")


def appended(ctx: StoreContext, events: int) -> None:
    """Count ``events`` committed by ``ctx``'s store; check the statistics every so many.

    The count is a plain attribute of the store's context, read and written without a lock:
    two threads committing at once may lose one of their additions, which only moves the
    next check a few events later (every append pays for this, so it costs no lock)."""
    if not ctx.backend.stale_statistics:
        return
    count = ctx.appended_events + events
    due = count >= CHECK_EVERY_EVENTS
    ctx.appended_events = 0 if due else count
    if due:
        refresh_if_stale(ctx)


def closing(ctx: StoreContext) -> None:
    """Before the store's connections go: check once more if it appended since the last."""
    count, ctx.appended_events = ctx.appended_events, 0
    if count:
        refresh_if_stale(ctx)


def refresh_if_stale(ctx: StoreContext) -> bool:
    """ANALYZE when the backend finds the statistics stale; True when it ran. The appends
    are committed, so a failure (a busy database, a read-only file) only logs."""
    if not ctx.backend.stale_statistics:
        return False
    t = ctx.tables
    try:
        with read_tx(ctx.engine) as conn:
            stale = ctx.backend.statistics_stale(conn)
        if stale:
            analyze(ctx.engine, [t.sessions, t.events, t.surface])
    except (SQLAlchemyError, SessionSQLError) as exc:
        _log.warning("refreshing the planner statistics failed (run ANALYZE yourself): %s", exc)
        return False
    return stale
