"""``vacuum``: giving a store's free space back, as far as each database can.

SQLite: the incremental vacuum that a prune runs (short steps, writers get in between) on a
file made with ``auto_vacuum = INCREMENTAL``; a full ``VACUUM`` rewrites the file (and turns
incremental vacuum on for a file made before it was the default) under the write lock.
PostgreSQL: ``VACUUM (ANALYZE)`` of the store's tables, online, makes the space of deleted rows
reusable; only ``VACUUM FULL`` gives it back to the file system, under an exclusive lock.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, Table, text

from session_sql._store.backends.sqlite.backend import INCREMENTAL_VACUUM
from session_sql._store.database import backend_for

__all__ = ["Vacuumed", "reclaimable_pages", "store_bytes", "vacuum"]


@dataclass(frozen=True)
class Vacuumed:
    """What a vacuum did: its kind (the SQL it ran) and notes on what is left to do."""

    action: str
    notes: tuple[str, ...] = ()


def store_bytes(engine: Engine, tables: Sequence[Table]) -> int:
    """The store's size on disk: the SQLite file and its WAL, or (PostgreSQL) the tables with
    their indexes and TOAST."""
    if engine.dialect.name == "sqlite":
        path = engine.url.database or ""
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    preparer = engine.dialect.identifier_preparer
    names = [preparer.format_table(t) for t in tables]  # quoted, as regclass reads them
    total = text(
        "SELECT sum(pg_total_relation_size(CAST(n AS regclass))) "
        "FROM unnest(CAST(:names AS text[])) AS n"
    )
    with engine.connect() as conn:
        return int(conn.execute(total, {"names": names}).scalar_one())


def reclaimable_pages(engine: Engine) -> int:
    """Free pages an incremental vacuum would give back now (0 on PostgreSQL, where
    autovacuum keeps them for new rows, and on an SQLite file without incremental vacuum)."""
    if engine.dialect.name != "sqlite":
        return 0
    raw = engine.raw_connection()
    try:
        db = raw.driver_connection
        assert isinstance(db, sqlite3.Connection)
        if int(db.execute("PRAGMA auto_vacuum").fetchone()[0]) != INCREMENTAL_VACUUM:
            return 0
        return int(db.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        raw.close()


def vacuum(engine: Engine, tables: Sequence[Table], *, full: bool, pages: int) -> Vacuumed:
    """Vacuum the store (``pages``: an incremental step's size on SQLite)."""
    if engine.dialect.name == "sqlite":
        return _sqlite(engine, full=full, pages=pages)
    return _postgresql(engine, tables, full=full)


def _sqlite(engine: Engine, *, full: bool, pages: int) -> Vacuumed:
    raw = engine.raw_connection()
    try:
        db = raw.driver_connection
        assert isinstance(db, sqlite3.Connection)
        mode = int(db.execute("PRAGMA auto_vacuum").fetchone()[0])
        if full:
            # Outside any transaction, as VACUUM must be; the pragma takes effect with it.
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            return Vacuumed("VACUUM")
    finally:
        raw.close()
    if mode != INCREMENTAL_VACUUM:
        return Vacuumed(
            "none",
            (
                "this file was created without incremental vacuum (auto_vacuum "
                f"= {mode}); run 'session-sql vacuum --full' once (it rewrites the file under "
                "the write lock and needs free disk space of the file's size)",
            ),
        )
    backend_for(engine).reclaim_space(engine, pages)
    return Vacuumed("PRAGMA incremental_vacuum")


def _postgresql(engine: Engine, tables: Sequence[Table], *, full: bool) -> Vacuumed:
    preparer = engine.dialect.identifier_preparer
    names = ", ".join(preparer.format_table(t) for t in tables)
    options = "FULL, ANALYZE" if full else "ANALYZE"
    # VACUUM cannot run in a transaction block.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # Identifiers quoted by the dialect; there are no values.
        conn.exec_driver_sql("VACUUM (" + options + ") " + names)
    if full:
        return Vacuumed(f"VACUUM ({options})")
    return Vacuumed(
        f"VACUUM ({options})",
        (
            "PostgreSQL keeps the space of deleted rows for the tables' new rows; to give it "
            "back to the file system run 'session-sql vacuum --full' (VACUUM FULL: it locks the "
            "tables against readers and writers while it rewrites them) or pg_repack",
        ),
    )
