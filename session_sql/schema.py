"""The store's SQL schema as public names: its tables, its DDL, its views, its SQLite pragmas.

For code that works on a store's tables without going through ``SessionStore`` (the CLI's
``schema`` command, ``session-sql bench``'s raw-driver baseline, analysts' scripts): the
same objects the store builds its statements from, so nothing here can drift from it.
Importing this module loads SQLAlchemy; ``import session_sql`` does not.
"""

from __future__ import annotations

from session_sql._store.database import sqlite_pragmas
from session_sql._store.schema import DEFAULT_SCHEMA, SchemaTables, render_ddl, tables_for
from session_sql._store.views import AnalyticsView, views_for

__all__ = [
    "DEFAULT_SCHEMA",
    "AnalyticsView",
    "SchemaTables",
    "render_ddl",
    "sqlite_pragmas",
    "tables_for",
    "views_for",
]
