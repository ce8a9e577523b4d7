"""The raw-driver baseline of ``session-sql bench``: the store's SQL on a bare driver connection.

The statements are SQLAlchemy Core statements over the store's own tables (``tables_for``),
compiled once per dialect and executed with stdlib ``sqlite3`` or raw psycopg, so no per-row
SQLAlchemy cost is measured; the SQLite connection runs the engine's ``sqlite_pragmas``. The
baseline writes the same event rows and a conditional session-row update, without validation
and without surface upkeep. As the store, it creates a session with one row insert that
returns its ``session_key`` (and its ``session_ids`` row), writes events under that key, and
reads a session by its public id through the key's lookup in ``sessions``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import Text, bindparam, cast, insert, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Dialect

from session_sql.jsoncodec import dumps_compact
from session_sql.schema import sqlite_pragmas, tables_for
from session_sql.session import Session

__all__ = ["Raw", "RawPostgres", "RawSQLite", "RawStatements", "raw_statements"]

Item = dict[str, Any]


@dataclass(frozen=True)
class RawStatements:
    """The baseline's SQL, compiled once from the store's own tables for one dialect."""

    insert_session: str
    insert_id: str
    insert_event: str
    advance: str
    surface_data: str
    surface_tail: str
    log: str


_DIALECTS: dict[str, Dialect] = {
    # Named parameters on both drivers, so one dict per row binds either statement.
    "sqlite": sqlite_dialect.dialect(paramstyle="named"),
    "postgresql": postgresql.psycopg.dialect(),  # type: ignore[no-untyped-call]
}


@functools.cache
def raw_statements(backend: str, schema: str | None) -> RawStatements:
    """Compile the baseline's statements over ``tables_for(schema)`` for ``backend``."""
    t = tables_for(schema)
    s, e, sf = t.sessions, t.events, t.surface
    tn = bindparam("b_tenant", type_=Text)
    # The session's key, found by its public id in the statement itself, as the store's reads do.
    own = select(s.c.session_key).where(s.c.tenant == tn, s.c.id == bindparam("b_id"))
    key = own.scalar_subquery()
    on_event = (e.c.session_key == sf.c.session_key) & (e.c.seq == sf.c.event_seq)

    def sql_text(stmt: Any) -> str:
        return str(stmt.compile(dialect=_DIALECTS[backend]))

    return RawStatements(
        # The key is assigned by the database (an identity, the SQLite rowid) and returned.
        insert_session=sql_text(
            insert(s)
            .values({c.name: bindparam(c.name) for c in s.c if c.name != "session_key"})
            .returning(s.c.session_key)
        ),
        # The public id's row, which keeps it unique (the store writes it beside the session).
        insert_id=sql_text(
            insert(t.session_ids).values({c.name: bindparam(c.name) for c in t.session_ids.c})
        ),
        # Generated columns (events.call_id) are computed by the database, never written.
        insert_event=sql_text(
            insert(e).values({c.name: bindparam(c.name) for c in e.c if c.computed is None})
        ),
        advance=sql_text(
            update(s)
            .where(
                s.c.tenant == tn,
                s.c.id == bindparam("b_id"),
                s.c.head_seq == bindparam("b_expected"),
            )
            .values(head_seq=bindparam("b_head"), updated_at=bindparam("b_now"))
        ),
        surface_data=sql_text(
            select(cast(e.c.data, Text))
            .select_from(sf.join(e, on_event))
            .where(sf.c.session_key == key)
            .order_by(sf.c.pos)
        ),
        surface_tail=sql_text(
            select(cast(e.c.data, Text))
            .select_from(sf.join(e, on_event))
            .where(sf.c.session_key == key)
            .order_by(sf.c.pos.desc())
            .limit(bindparam("b_limit"))
            .offset(bindparam("b_offset"))  # named: SQLite compiles an OFFSET with any LIMIT
        ),
        log=sql_text(
            select(
                e.c.seq,
                e.c.type,
                e.c.time,
                cast(e.c.data, Text),
                e.c.source_event_seqs,
                e.c.surface_op,
                e.c.ignorable,
            )
            .where(e.c.session_key == key)
            .order_by(e.c.seq)
        ),
    )


def _session_row(tenant: str, session_id: str) -> dict[str, Any]:
    """An empty session's row, with the header a new ``Session`` has (untimed)."""
    header = Session(session_id).header
    return {
        "tenant": tenant,
        "id": session_id,
        "format_version": header["version"],
        "created_at": header["createdAt"],
        "parent_session": None,
        "inherited_event_count": 0,
        "header": dumps_compact(header),
        "head_seq": -1,
        "surface_next_pos": 0,
        "replace_generation": 0,
        "surface_digest": 0,  # an empty surface's (the baseline keeps no surface)
        "updated_at": header["createdAt"],
        "incarnation": uuid.uuid4().hex,  # new at every creation, as the store's
        "user_id": None,
        "title": None,
        "labels": "{}",
    }


def _event_rows(
    tenant: str, session_key: int, head: int, items: list[Item], now: int
) -> list[dict[str, Any]]:
    rows = []
    for i, item in enumerate(items):
        op = item.get("surface_op")
        sources = item.get("source_event_seqs")
        rows.append(
            {
                "session_key": session_key,
                "tenant": tenant,
                "seq": head + 1 + i,
                "type": item["type"],
                "time": now,
                "data": json.dumps(item["data"], separators=(",", ":"), ensure_ascii=False),
                "source_event_seqs": None if sources is None else json.dumps(sources),
                "surface_op": None if op is None else json.dumps(op),
                "ignorable": None,
            }
        )
    return rows


def _advance(tenant: str, session_id: str, head: int, count: int, now: int) -> dict[str, Any]:
    return {
        "b_tenant": tenant,
        "b_id": session_id,
        "b_expected": head,
        "b_head": head + count,
        "b_now": now,
    }


def _insert_events(cursor: Any, sql: Any, rows: list[dict[str, Any]]) -> None:
    """One event row with ``execute``, more with ``executemany`` (as the store does)."""
    if len(rows) == 1:
        cursor.execute(sql, rows[0])
    else:
        cursor.executemany(sql, rows)


class _RawBaseline:
    """What both drivers do alike: the sessions' keys, the rows of a write, the reads.

    A driver gives its connection, its statements, and the context its reads and a new
    session's insert run in (``_autocommit``); ``write`` is each driver's own transaction.
    """

    conn: Any
    sql: RawStatements
    tenant: str
    keys: dict[str, int]
    """The ``session_key`` of each session this baseline created, by public id."""

    def _autocommit(self) -> AbstractContextManager[object]:
        raise NotImplementedError

    def _rows(self, session_id: str, head: int, items: list[Item]) -> tuple[int, list[Item]]:
        """The write's time (ms) and its event rows."""
        now = time.time_ns() // 1_000_000
        return now, _event_rows(self.tenant, self.keys[session_id], head, items, now)

    def new_session(self) -> str:
        sid = "raw-" + uuid.uuid4().hex
        # fetchall: the statement runs to its end, so an autocommit transaction ends too.
        with self._autocommit():
            rows = self.conn.execute(self.sql.insert_session, _session_row(self.tenant, sid))
            self.keys[sid] = int(rows.fetchall()[0][0])
            ids = {"id": sid, "tenant": self.tenant, "session_key": self.keys[sid]}
            self.conn.execute(self.sql.insert_id, ids)
        return sid

    def _fetch(self, statement: Any, **params: Any) -> list[Any]:
        with self._autocommit():
            rows: list[Any] = self.conn.execute(
                statement, {"b_tenant": self.tenant, **params}
            ).fetchall()
        return rows

    def fetch_surface(self, session_id: str) -> list[Any]:
        return [json.loads(r[0]) for r in self._fetch(self.sql.surface_data, b_id=session_id)]

    def fetch_tail(self, session_id: str, n: int) -> list[Any]:
        rows = self._fetch(self.sql.surface_tail, b_id=session_id, b_limit=n, b_offset=0)
        return [json.loads(r[0]) for r in reversed(rows)]

    def fetch_log(self, session_id: str) -> list[Any]:
        rows = self._fetch(self.sql.log, b_id=session_id)
        return [(r[0], r[1], r[2], json.loads(r[3])) for r in rows]

    def close(self) -> None:
        self.conn.close()


class RawSQLite(_RawBaseline):
    """stdlib sqlite3 on the store's file: the same rows, the engine's pragmas, BEGIN IMMEDIATE."""

    def __init__(self, path: str, synchronous: str, tenant: str = "") -> None:
        self.tenant = tenant
        # isolation_level None: BEGIN is ours, as in the engine's connect hook.
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=5)
        for pragma in sqlite_pragmas(synchronous):
            self.conn.execute(pragma)
        self.sql = raw_statements("sqlite", None)
        self.keys = {}

    def _autocommit(self) -> AbstractContextManager[object]:
        return nullcontext()  # each statement is its own transaction

    def write(self, session_id: str, head: int, items: list[Item]) -> int:
        now, rows = self._rows(session_id, head, items)
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute(self.sql.advance, _advance(self.tenant, session_id, head, len(items), now))
        _insert_events(c, self.sql.insert_event, rows)
        c.execute("COMMIT")
        return head + len(items)


class RawPostgres(_RawBaseline):
    """Raw psycopg on the store's schema: the same rows and the same conditional update."""

    def __init__(self, conninfo: str, schema: str, tenant: str = "") -> None:
        self.tenant = tenant
        self.conn = psycopg.connect(conninfo)
        self.sql = raw_statements("postgresql", schema)
        self.keys = {}

    def _autocommit(self) -> AbstractContextManager[object]:
        return self.conn.transaction()  # type: ignore[no-any-return]

    def write(self, session_id: str, head: int, items: list[Item]) -> int:
        now, rows = self._rows(session_id, head, items)
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(self.sql.advance, _advance(self.tenant, session_id, head, len(items), now))
            _insert_events(cur, self.sql.insert_event, rows)
        return head + len(items)


Raw = RawSQLite | RawPostgres
