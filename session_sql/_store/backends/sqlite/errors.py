"""SQLite's errors as session_sql errors, by SQLite's error name.

The one translation of a ``sqlite3`` error, for the SQLite backend (``backends/sqlite.py``,
which wraps SQLAlchemy's errors) and for the quick reads (``quick``), which run on ``sqlite3``
alone: it lives outside ``backends/``, whose package imports SQLAlchemy.
"""

from __future__ import annotations

import sqlite3

from session_sql.errors import (
    PermanentStoreError,
    SessionSQLError,
    StoreError,
    TransientStoreError,
)

__all__ = ["translate"]


def translate(orig: sqlite3.Error, session_id: str | None, database: str | None) -> SessionSQLError:
    """The session_sql error for an SQLite error, by its error name (``sqlite_errorname``)."""
    name: str = getattr(orig, "sqlite_errorname", None) or ""
    where = f": {database}" if database else ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return TransientStoreError(
            f"database is locked{where}: another connection held it beyond the busy timeout",
            session_id=session_id,
        )
    if name.startswith("SQLITE_READONLY"):
        return PermanentStoreError(f"database is read-only{where} ({name})", session_id=session_id)
    if name == "SQLITE_NOTADB":
        return PermanentStoreError(
            f"not a session_sql database: {database or 'the file is not an SQLite database'}",
            session_id=session_id,
        )
    if name.startswith("SQLITE_CANTOPEN"):
        return PermanentStoreError(
            f"cannot open database file{where} ({name})", session_id=session_id
        )
    if name.startswith("SQLITE_CORRUPT"):
        return PermanentStoreError(
            f"database file is corrupt{where} ({name})", session_id=session_id
        )
    if name == "SQLITE_FULL":
        return PermanentStoreError(f"database or disk is full{where}", session_id=session_id)
    # SQLite reports no constraint name, so a constraint violation stays a StoreError; the
    # store avoids duplicate inserts by checking inside its BEGIN IMMEDIATE transaction.
    label = name or type(orig).__name__
    return StoreError(f"SQLite error {label}{where}: {orig}", session_id=session_id)
