"""``SessionStore.vacuum``: the store's free space given back, with its size before and after."""

from __future__ import annotations

from dataclasses import dataclass

from session_sql._store.context import StoreContext
from session_sql._store.database import translate_errors
from session_sql._store.retention import VACUUM_PAGES

__all__ = ["VacuumReport", "run"]


@dataclass(frozen=True)
class VacuumReport:
    """What ``vacuum`` did: the SQL it ran (``action``; ``"none"`` when it could not),
    the store's bytes on disk before and after, and what is left to do (``notes``)."""

    backend: str
    action: str
    bytes_before: int
    bytes_after: int
    notes: tuple[str, ...] = ()


def run(ctx: StoreContext, *, full: bool) -> VacuumReport:
    """Vacuum the whole database of the store (every tenant: the tables are shared)."""
    t = ctx.tables
    tables = [t.sessions, t.events, t.surface]
    with translate_errors():
        backend, engine = ctx.backend, ctx.engine
        before = backend.store_bytes(engine, tables)
        done = backend.vacuum(engine, tables, full=full, pages=VACUUM_PAGES)
        after = backend.store_bytes(engine, tables)
    return VacuumReport(ctx.backend.name, done.action, before, after, done.notes)
