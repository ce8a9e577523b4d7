"""Quick reads of a SQLite store: what ``ls``, ``show`` and ``tail`` read, on ``sqlite3`` alone.

Importing SQLAlchemy takes longer than everything else such a command does (docs/performance.md,
"CLI startup"). A ``QuickReader`` opens the file read-only and vouches for it only when it is
exactly what this build creates: the version rows of ``session_sql_meta`` and, in
``sqlite_master``, the text of every table, index and view (``SCHEMA_DIGEST``; a test holds it
to a fresh store). For anything else (another URL form, a tenant, a missing file, another
build's or a hand-altered database, any error while opening) :func:`open_quick` answers
``None`` and the caller opens the full store, whose gate says what is wrong.

The statements are the SQLite text of the store's own (``context.Statements``, ``listing``),
the rows are decoded by the same functions (``stored``) and the arguments checked by the same
checks, so both readers give the same answers and raise the same errors (tested).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from session_sql._store.backends.sqlite.errors import translate
from session_sql._store.metadata import HIDDEN_LABEL
from session_sql._store.stored import (
    INFO_COLUMNS,
    ListingFilters,
    SessionInfo,
    event_from_row,
    frozen_header,
    info_from_values,
    listing_filters,
    listing_page,
    project_row,
)
from session_sql.arguments import last_arg, lookup_id, seq_bound
from session_sql.catalog import Catalog, default_catalog
from session_sql.errors import SessionNotFoundError
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenList

__all__ = ["SCHEMA_DIGEST", "QuickReader", "StoreReads", "open_quick", "schema_digest"]

SCHEMA_DIGEST: Final = "3ab061272afdf7b62f9d3947cfc3f168dc7bddcad58a867b646bbf6b129a568f"
"""sha256 of a fresh store's ``sqlite_master`` (:func:`schema_digest`); a test fails when the
schema changes without it."""

META_ROWS: Final = {"schema_version": "6", "application": "session_sql"}
"""The ``session_sql_meta`` rows of this build (``schema.meta_rows``; a test holds them equal)."""

DEFAULT_SCHEMA: Final = "session_sql"
"""``schema.DEFAULT_SCHEMA`` (a test holds them equal)."""

URL_PREFIXES: Final = ("sqlite:///", "sqlite+pysqlite:///")
STREAM_BATCH: Final = 1000  # as ``reader.STREAM_BATCH``: the pages of ``events``
MAX_SEQ: Final = 2**63 - 1

_INFO = "SELECT " + ", ".join(INFO_COLUMNS) + " FROM sessions WHERE tenant = ?"
_KEY = "(SELECT session_key FROM sessions WHERE tenant = ? AND id = ?)"
_HEAD = "SELECT head_seq FROM sessions WHERE tenant = ? AND id = ?"
_HEADER = "SELECT CAST(header AS TEXT) FROM sessions WHERE tenant = ? AND id = ?"
_KEY_OF = "SELECT session_key FROM sessions WHERE tenant = ? AND id = ?"
_KEY_ALIVE = "SELECT session_key FROM sessions WHERE tenant = ? AND session_key = ?"
_EVENTS_PAGE = (
    "SELECT seq, type, time, CAST(data AS TEXT), source_event_seqs, surface_op, ignorable "
    "FROM events WHERE session_key = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?"
)
_SURFACE_SEQS = "SELECT event_seq FROM surface WHERE session_key = " + _KEY + " ORDER BY pos"
_SURFACE_MESSAGES = (
    "SELECT surface.pos, surface.event_seq, events.type, CAST(events.data AS TEXT) "
    "FROM surface JOIN events "
    "ON events.session_key = surface.session_key AND events.seq = surface.event_seq "
    "WHERE surface.session_key = " + _KEY + " ORDER BY surface.pos"
)
_SURFACE_MESSAGES_BACKWARDS = _SURFACE_MESSAGES + " DESC"
_PAGES: Final = {
    # (order, descending): the condition of the rows after a cursor, and the ORDER BY
    ("updated", True): (
        " AND (updated_at < ? OR (updated_at = ? AND id < ?))",
        " ORDER BY updated_at DESC, id DESC LIMIT ?",
    ),
    ("updated", False): (
        " AND (updated_at > ? OR (updated_at = ? AND id > ?))",
        " ORDER BY updated_at, id LIMIT ?",
    ),
    ("created", True): (
        " AND (created_at < ? OR (created_at = ? AND id < ?))",
        " ORDER BY created_at DESC, id DESC LIMIT ?",
    ),
    ("created", False): (
        " AND (created_at > ? OR (created_at = ? AND id > ?))",
        " ORDER BY created_at, id LIMIT ?",
    ),
}
_SCHEMA_ROWS = (
    "SELECT type, name, tbl_name, sql FROM sqlite_master "
    "WHERE name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY type, name"
)


class StoreReads(Protocol):
    """What the reading commands use of a store: ``SessionStore`` and ``QuickReader`` both."""

    @property
    def catalog(self) -> Catalog: ...

    def head_seq(self, session_id: str) -> int: ...

    def list_sessions(
        self,
        *,
        limit: int = ...,
        after: SessionInfo | str | None = ...,
        parent: str | None = ...,
        created_after: int | None = ...,
        created_before: int | None = ...,
        order: Literal["updated", "created"] = ...,
        id_prefix: str | None = ...,
        user_id: str | None = ...,
        labels: Mapping[str, str] | None = ...,
        reverse: bool = ...,
        include_hidden: bool = ...,
    ) -> list[SessionInfo]: ...

    def count_sessions(
        self,
        *,
        parent: str | None = ...,
        created_after: int | None = ...,
        created_before: int | None = ...,
        id_prefix: str | None = ...,
        user_id: str | None = ...,
        labels: Mapping[str, str] | None = ...,
        include_hidden: bool = ...,
    ) -> int: ...

    def events(
        self, session_id: str, *, from_seq: int = ..., to_seq: int | None = ...
    ) -> Iterator[SessionEvent]: ...

    def surface(self, session_id: str) -> tuple[int, ...]: ...

    def messages(self, session_id: str, *, last: int | None = None) -> list[Any]: ...

    def close(self) -> None: ...


def schema_digest(conn: sqlite3.Connection) -> str:
    """sha256 of the database's own objects in ``sqlite_master`` (type, name, table, text)."""
    rows = conn.execute(_SCHEMA_ROWS).fetchall()
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def open_quick(url: str, schema: str = DEFAULT_SCHEMA, tenant: str = "") -> QuickReader | None:
    """A quick reader of the SQLite file ``url`` names, or ``None`` when it cannot vouch for
    the file (then open the full store). Only the default schema name and tenant: the store
    checks any other."""
    path = _plain_path(url)
    if path is None or schema != DEFAULT_SCHEMA or tenant != "":
        return None
    try:
        conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    except (sqlite3.Error, OSError, ValueError):
        return None
    try:
        conn.isolation_level = None  # statements run in the transactions ``_read`` opens
        conn.execute("BEGIN")  # the version and the schema from one snapshot
        meta = dict(conn.execute("SELECT key, value FROM session_sql_meta").fetchall())
        digest = schema_digest(conn)
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.close()
        return None
    if meta != META_ROWS or digest != SCHEMA_DIGEST:
        conn.close()
        return None
    return QuickReader(conn)


def _plain_path(url: str) -> str | None:
    """The file of a plain SQLite URL (``sqlite:///PATH``), or ``None`` for any other form
    (in memory, a query string, percent-escapes, a ``file:`` URI: the full store's)."""
    for prefix in URL_PREFIXES:
        if url.startswith(prefix):
            path = url[len(prefix) :]
            plain = not path.startswith("file:") and not any(c in path for c in "?#%")
            if plain and path not in ("", ":memory:"):
                return path
    return None


class QuickReader:
    """The store's reads of ``ls``, ``show`` and ``tail`` on one read-only ``sqlite3``
    connection, with the store's answers and errors (the default tenant's sessions)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._catalog = default_catalog()

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _read(self, session_id: str | None = None) -> Iterator[sqlite3.Connection]:
        """One read transaction; a driver error becomes the store's error for it."""
        conn = self._conn
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise translate(exc, session_id, None) from exc

    def _require(self, conn: sqlite3.Connection, session_id: str) -> None:
        if conn.execute(_HEAD, ("", session_id)).fetchone() is None:
            raise SessionNotFoundError.for_session(session_id)

    def head_seq(self, session_id: str) -> int:
        lookup_id(session_id)
        with self._read(session_id) as conn:
            row = conn.execute(_HEAD, ("", session_id)).fetchone()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        return int(row[0])

    def list_sessions(
        self,
        *,
        limit: int = 100,
        after: SessionInfo | str | None = None,
        parent: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        order: Literal["updated", "created"] = "updated",
        id_prefix: str | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        reverse: bool = False,
        include_hidden: bool = True,
    ) -> list[SessionInfo]:
        limit, descending = listing_page(limit, order, reverse)
        where = _where(
            listing_filters(parent, created_after, created_before, id_prefix, user_id, labels),
            include_hidden,
        )
        if where is None:
            return []
        sql, params = where
        page_after, ordered = _PAGES[order, descending]
        with self._read() as conn:
            if after is not None:
                cursor = after if isinstance(after, SessionInfo) else self._info(conn, after)
                at = cursor.updated_at if order == "updated" else cursor.created_at
                sql += page_after
                params += [at, at, cursor.id]
            rows = conn.execute(sql + ordered, [*params, limit]).fetchall()
        return [info_from_values(row) for row in rows]

    def _info(self, conn: sqlite3.Connection, session_id: str) -> SessionInfo:
        lookup_id(session_id)
        row = conn.execute(_INFO + " AND id = ?", ("", session_id)).fetchone()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        return info_from_values(row)

    def count_sessions(
        self,
        *,
        parent: str | None = None,
        created_after: int | None = None,
        created_before: int | None = None,
        id_prefix: str | None = None,
        user_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        include_hidden: bool = True,
    ) -> int:
        where = _where(
            listing_filters(parent, created_after, created_before, id_prefix, user_id, labels),
            include_hidden,
        )
        if where is None:
            return 0
        sql, params = where
        with self._read() as conn:
            row = conn.execute("SELECT count(*) FROM (" + sql + ")", params).fetchone()
        return int(row[0])

    def events(
        self, session_id: str, *, from_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[SessionEvent]:
        start = seq_bound("from_seq", from_seq)
        bound = MAX_SEQ if to_seq is None else seq_bound("to_seq", to_seq) - 1
        lookup_id(session_id)
        with self._read(session_id) as conn:
            row = conn.execute(_HEADER, ("", session_id)).fetchone()
        if row is None:
            raise SessionNotFoundError.for_session(session_id)
        frozen_header(session_id, row[0])  # fail now, not at the first next()
        return self._stream(session_id, start - 1, bound)

    def _stream(self, session_id: str, after: int, bound: int) -> Iterator[SessionEvent]:
        """The pages of ``events``, pinned to the session's key as ``reader.stream_events``'s
        are: a session deleted mid-stream ends it with ``SessionNotFoundError``, and one
        created again under its id is never spliced in."""
        key: int | None = None
        while True:
            with self._read(session_id) as conn:
                if key is None:
                    found = conn.execute(_KEY_OF, ("", session_id)).fetchone()
                    if found is None:
                        raise SessionNotFoundError.for_session(session_id)
                    key = int(found[0])
                params = (key, after, bound, STREAM_BATCH)
                rows = conn.execute(_EVENTS_PAGE, params).fetchall()
                if len(rows) < STREAM_BATCH and (
                    conn.execute(_KEY_ALIVE, ("", key)).fetchone() is None
                ):
                    raise SessionNotFoundError.deleted_while_read(session_id)
            for row in rows:
                yield event_from_row(session_id, row)
            if len(rows) < STREAM_BATCH:
                return
            after = rows[-1][0]  # its seq

    def surface(self, session_id: str) -> tuple[int, ...]:
        lookup_id(session_id)
        with self._read(session_id) as conn:
            seqs = [seq for (seq,) in conn.execute(_SURFACE_SEQS, ("", session_id))]
            if not seqs:
                self._require(conn, session_id)
        return FrozenList(seqs)

    def messages(self, session_id: str, *, last: int | None = None) -> list[Any]:
        lookup_id(session_id)
        last = last_arg(last)
        items = self._catalog.item_types
        if last is not None:
            return self._last_messages(session_id, last, items)
        with self._read(session_id) as conn:
            rows = conn.execute(_SURFACE_MESSAGES, ("", session_id)).fetchall()
            if not rows:
                self._require(conn, session_id)
        projected = (project_row(session_id, seq, t, data, items) for _, seq, t, data in rows)
        return [m for m in projected if m is not None]

    def _last_messages(self, session_id: str, last: int, items: Any) -> list[Any]:
        """The final ``last`` messages, read from the surface's end (cost follows ``last``)."""
        found: list[Any] = []
        with self._read(session_id) as conn:
            self._require(conn, session_id)
            rows = conn.execute(_SURFACE_MESSAGES_BACKWARDS, ("", session_id))
            for _, seq, t, data in rows:
                if len(found) >= last:
                    break
                message = project_row(session_id, seq, t, data, items)
                if message is not None:
                    found.append(message)
        return found[::-1]


def _where(
    wanted: ListingFilters | None, include_hidden: bool = True
) -> tuple[str, list[Any]] | None:
    """``SELECT`` of the listed columns with the listing's checked filters, and its
    parameters (``listing._filters``, in SQLite's text); ``None`` when no session can match."""
    if wanted is None:
        return None
    sql = _INFO
    params: list[Any] = [""]
    if wanted.user_id is not None:
        sql += " AND user_id = ?"
        params.append(wanted.user_id)
    for name, value in wanted.labels.items():
        # A label name is [A-Za-z0-9_.:/-]: quoted as a JSON path member, as SQLAlchemy does.
        sql += " AND CAST(json_extract(labels, ?) AS VARCHAR) = ?"
        params += ['$."' + name + '"', value]
    if wanted.parent is not None:
        sql += " AND parent_session = ?"
        params.append(wanted.parent)
    if wanted.id_prefix is not None:
        sql += " AND substr(id, 1, ?) = ?"
        params += [len(wanted.id_prefix), wanted.id_prefix]
    if wanted.created_after is not None:
        sql += " AND created_at >= ?"
        params.append(wanted.created_after)
    if wanted.created_before is not None:
        sql += " AND created_at < ?"
        params.append(wanted.created_before)
    if not include_hidden:
        sql += " AND NOT coalesce(CAST(json_extract(labels, ?) AS VARCHAR) = 'true', 0)"
        params.append('$."' + HIDDEN_LABEL + '"')
    return sql, params
