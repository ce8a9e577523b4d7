"""Quick reads of a SQLite store without SQLAlchemy, as public names.

``open_quick(url)`` opens a SQLite store read-only on the ``sqlite3`` module alone, for a
program that reads a few things and exits (``session-sql ls``, ``show`` and ``tail`` start in
a fraction of the store's import time); it answers ``None`` whenever it cannot vouch that
the file is exactly this build's store, and the caller then opens the store
(``open_store``), whose gate says what is wrong. ``StoreReads`` is what both offer.
"""

from __future__ import annotations

from session_sql._store.backends.sqlite.quick import QuickReader, StoreReads, open_quick

__all__ = ["QuickReader", "StoreReads", "open_quick"]
