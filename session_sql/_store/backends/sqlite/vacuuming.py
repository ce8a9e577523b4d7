"""SQLite's vacuum: the incremental vacuum that a prune runs (short steps, writers get in
between) on a file made with ``auto_vacuum = INCREMENTAL``; a full ``VACUUM`` rewrites the file
(and turns incremental vacuum on for a file made before it was the default) under the write
lock (``SessionStore.vacuum``, ``Backend.vacuum``)."""

from __future__ import annotations

import os
import sqlite3

from sqlalchemy import Engine

from session_sql._store.backends.base import Vacuumed

INCREMENTAL_VACUUM = 2
"""``PRAGMA auto_vacuum``'s value for INCREMENTAL."""


def store_bytes(engine: Engine) -> int:
    """The store's size on disk: the SQLite file and its WAL."""
    path = engine.url.database or ""
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def reclaimable_pages(engine: Engine) -> int:
    """Free pages an incremental vacuum would give back now (0 on a file without incremental
    vacuum)."""
    raw = engine.raw_connection()
    try:
        db = raw.driver_connection
        assert isinstance(db, sqlite3.Connection)
        if int(db.execute("PRAGMA auto_vacuum").fetchone()[0]) != INCREMENTAL_VACUUM:
            return 0
        return int(db.execute("PRAGMA freelist_count").fetchone()[0])
    finally:
        raw.close()


def vacuum(engine: Engine, *, full: bool, pages: int) -> Vacuumed | None:
    """A full ``VACUUM``, or what stops an incremental one; ``None``: run the incremental
    vacuum (``Backend.reclaim_space``, ``pages`` per transaction)."""
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
    return None
