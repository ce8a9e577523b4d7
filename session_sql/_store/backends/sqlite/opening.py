"""Why a store cannot be opened: a clearer error than the driver's, for the failures whose
cause and remedy can be told (a WAL store on a read-only medium; a missing PostgreSQL
database or role is told by ``backends.refused``, which needs psycopg). The backends call it
(``Backend.explain_open_failure``), after the open has failed."""

from __future__ import annotations

import os
import sqlite3
from typing import Final
from urllib.parse import unquote, urlsplit

from sqlalchemy.engine import URL

from session_sql.errors import PermanentStoreError

__all__ = ["explain_wal_reader"]


_WAL_READER_FAILURES: Final = frozenset(
    {
        "SQLITE_CANTOPEN",
        "SQLITE_READONLY_CANTINIT",
        "SQLITE_READONLY_CANTLOCK",
        "SQLITE_READONLY_DIRECTORY",
    }
)
"""SQLite's answers when a WAL reader cannot create or map the ``-shm`` file."""


def _medium_file(url: URL) -> tuple[str, str] | None:
    """The file a URL opens and the URL that reads it as immutable: the plain form
    (``sqlite:///PATH``) or SQLite's URI form (``sqlite:///file:PATH?...&uri=true``), whose
    other parameters are kept. ``None`` for anything else (``:memory:``, another URI)."""
    database = url.database or ""
    if not url.query.get("uri"):
        if database in ("", ":memory:"):
            return None
        return database, f"sqlite:///{database}?immutable=1"
    parts = urlsplit(database)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        return None
    kept = [(k, v) for k, v in url.query.items() if k not in ("uri", "immutable")]
    query = "&".join(
        f"{k}={value}" for k, v in kept for value in ((v,) if isinstance(v, str) else v)
    )
    query = f"{query}&immutable=1&uri=true" if query else "immutable=1&uri=true"
    return unquote(parts.path), f"sqlite:///file:{parts.path}?{query}"


def explain_wal_reader(url: URL, orig: BaseException | None) -> PermanentStoreError | None:
    """SQLite: a WAL store in a directory this process cannot write (a read-only medium)
    cannot be read as it is, since WAL readers create the ``-shm`` file beside it; the error
    names that and the remedy, for a plain URL and for SQLite's ``file:`` URI form alike."""
    if not isinstance(orig, sqlite3.Error):
        return None
    name = str(getattr(orig, "sqlite_errorname", ""))
    medium = _medium_file(url)
    if name not in _WAL_READER_FAILURES or medium is None:
        return None
    path, immutable = medium
    directory = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, "rb") as fh:
            header = fh.read(20)
    except OSError:
        return None
    # Bytes 18 and 19 of the header (write and read format versions) are 2 in WAL mode.
    if header[18:20] != b"\x02\x02" or os.access(directory, os.W_OK):
        return None
    return PermanentStoreError(
        f"cannot read {path}: it is an SQLite store in WAL mode, and its directory {directory} "
        f"is not writable here, so SQLite cannot create {os.path.basename(path)}-shm, which "
        f"every WAL reader needs ({name}). If nothing writes to the file (a read-only medium, "
        f"a copy, a snapshot), open it as {immutable} (SQLite then reads it "
        "without locks: only safe while nobody writes it); otherwise let this process write "
        "the directory"
    )
