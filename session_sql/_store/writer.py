"""``StoredSession``: the core session whose commits go through one SQL transaction each.

The in-memory pipeline (snapshot → rules → plan → validators) runs unchanged; the commit step is
preceded by ``_persist``, which writes the candidate events and applies the planner's very
Transitions to the ``surface`` side table. Memory changes only after the transaction commits.
"""

from __future__ import annotations

import functools
import threading
import time as _time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from session_sql._store.engine import is_sqlite, read_tx, translate_errors
from session_sql._store.rows import event_columns, event_from_row, event_row_json
from session_sql._store.schema import SchemaTables
from session_sql.catalog import Catalog
from session_sql.errors import (
    ConcurrencyError,
    CorruptSessionError,
    InvalidSeedError,
    SessionNotFoundError,
)
from session_sql.events import SessionEvent
from session_sql.jsonvalue import FrozenDict
from session_sql.session import Clock, Session, fold_checked
from session_sql.surface import AppendNode, ReplaceNodes, Surface, Transition, is_exempt


@dataclass(frozen=True)
class StoreContext:
    """What a stored session needs from its store: engine, tables and settings."""

    engine: Engine
    tables: SchemaTables
    catalog: Catalog
    clock: Clock
    max_event_bytes: int | None
    channel: str | None  # the NOTIFY channel on PostgreSQL, None on SQLite

    @property
    def sqlite(self) -> bool:
        return is_sqlite(self.engine)

    @functools.cached_property
    def fast_writes(self) -> FastWrites:
        # Cached on the context, not in a module dict keyed by id(): a closed store's context
        # can be collected and its id reused by the next store's, with another engine.
        return FastWrites(self)


class Statements:
    """The Core statements of one schema that the writer and ``refresh`` share, built once."""

    def __init__(self, tables: SchemaTables) -> None:
        s, e, sf = tables.sessions, tables.events, tables.surface
        # The conditional head update is the optimistic lock: zero rows means another writer
        # won (or the row was edited underneath us). On PostgreSQL it also takes the row lock
        # that serialises concurrent writers of one session until commit.
        self.advance = (
            update(s)
            .where(
                s.c.id == bindparam("b_id"),
                s.c.head_seq == bindparam("b_expected_head"),
                s.c.surface_next_pos == bindparam("b_expected_pos"),
                s.c.replace_generation == bindparam("b_expected_gen"),
            )
            .values(
                head_seq=bindparam("b_head"),
                surface_next_pos=bindparam("b_pos"),
                replace_generation=bindparam("b_gen"),
                updated_at=bindparam("b_now"),
            )
        )
        self.retarget_node = (
            update(sf)
            .where(sf.c.session_id == bindparam("b_id"), sf.c.event_seq == bindparam("b_old"))
            .values(event_seq=bindparam("b_new"))
        )
        self.session_row = select(s.c.head_seq, s.c.surface_next_pos, s.c.replace_generation).where(
            s.c.id == bindparam("b_id")
        )
        self.events_from = (
            select(*event_columns(tables))
            .where(
                e.c.session_id == bindparam("b_id"),
                e.c.seq >= bindparam("b_from"),
                e.c.seq <= bindparam("b_to"),
            )
            .order_by(e.c.seq)
        )


_statements: dict[int, Statements] = {}


def statements_for(tables: SchemaTables) -> Statements:
    key = id(tables)
    found = _statements.get(key)
    if found is None:
        found = _statements[key] = Statements(tables)
    return found


def notify(conn: Connection, ctx: StoreContext, session_id: str, head_seq: int) -> None:
    """Wake followers (PostgreSQL only); delivered at commit, dropped on rollback."""
    if ctx.channel is not None:
        conn.execute(select(func.pg_notify(ctx.channel, f"{session_id}:{head_seq}")))


_Compiled = tuple[str, Callable[[dict[str, Any]], Any]]
"""A statement compiled for the store's dialect, and how to bind a dict of parameters."""


def _as_is(params: dict[str, Any]) -> dict[str, Any]:
    return params


class FastWrites:
    """The append transaction on the DBAPI connection, with statements compiled once.

    SQLAlchemy Core builds every statement; they are compiled once per engine and executed on
    the pooled DBAPI cursor, which takes the per-statement Core overhead off the interactive
    path. On PostgreSQL the statements go through one pipeline (a single round trip).
    """

    def __init__(self, ctx: StoreContext) -> None:
        self.engine = ctx.engine
        self._local = threading.local()
        self._lock = threading.Lock()
        self._kept: set[Any] = set()
        self._closed = False
        self.sqlite = ctx.sqlite
        self.channel = ctx.channel
        self.max_event_bytes = ctx.max_event_bytes
        dialect = ctx.engine.dialect
        self.positional = dialect.paramstyle == "qmark"
        st = statements_for(ctx.tables)
        sf = ctx.tables.surface
        event_columns = [c.name for c in ctx.tables.events.c]
        surface_columns = [c.name for c in sf.c]

        def compiled(stmt: Any, keys: list[str] | None = None) -> _Compiled:
            c = stmt.compile(dialect=dialect, column_keys=keys)
            if not self.positional:
                return c.string, _as_is
            names = tuple(c.positiontup or ())
            pick = itemgetter(*names)
            return c.string, (pick if len(names) > 1 else lambda p: (pick(p),))

        self.advance = compiled(st.advance)
        # ON CONFLICT DO NOTHING, then counting the rows: a lost race on PostgreSQL (whose
        # pipeline runs the inserts before the head update's row count is known) is then
        # not an aborted pipeline, and a row already sitting past the head is caught by
        # the count instead of being silently kept.
        upsert = sqlite_insert if self.sqlite else pg_insert
        self.insert_event = compiled(
            upsert(ctx.tables.events).on_conflict_do_nothing(), event_columns
        )
        self.insert_surface = compiled(upsert(sf).on_conflict_do_nothing(), surface_columns)
        self.drop_node = compiled(
            delete(sf).where(
                sf.c.session_id == bindparam("b_id"), sf.c.event_seq == bindparam("b_seq")
            )
        )
        self.retarget = compiled(st.retarget_node)
        self.notify = compiled(
            select(func.pg_notify(bindparam("b_channel"), bindparam("b_payload")))
        )

    @staticmethod
    def _args(stmt: _Compiled, params: dict[str, Any]) -> Any:
        """The driver's parameters for ``stmt``: a tuple in order (qmark) or the dict."""
        return stmt[1](params)

    def append(
        self,
        session_id: str,
        advance: dict[str, Any],
        events: list[SessionEvent],
        transitions: list[Transition],
        next_pos: int,
        head: int,
    ) -> bool:
        """Run one append transaction; False (nothing written) when the head moved."""
        args = self._args
        rows = [event_row_json(session_id, e, self.max_event_bytes) for e in events]
        event_rows = [args(self.insert_event, row) for row in rows]
        surface_ops: list[tuple[_Compiled, Any, bool]] = []
        pending: list[Any] = []
        for t in transitions:
            if type(t) is AppendNode:
                pending.append(
                    args(
                        self.insert_surface,
                        {"session_id": session_id, "pos": next_pos, "event_seq": t.seq},
                    )
                )
                next_pos += 1
            elif type(t) is ReplaceNodes:
                if pending:
                    surface_ops.append((self.insert_surface, pending, True))
                    pending = []
                drops = [
                    args(self.drop_node, {"b_id": session_id, "b_seq": s}) for s in t.shadowed[1:]
                ]
                if drops:
                    surface_ops.append((self.drop_node, drops, True))
                surface_ops.append(
                    (
                        self.retarget,
                        args(
                            self.retarget,
                            {"b_id": session_id, "b_old": t.shadowed[0], "b_new": t.seq},
                        ),
                        False,
                    )
                )
        if pending:
            surface_ops.append((self.insert_surface, pending, True))
        raw = self._checkout()
        keep = False
        try:
            dbapi = raw.driver_connection
            assert dbapi is not None
            cur = raw.cursor()
            head_cur = raw.cursor()
            event_cur = raw.cursor()
            append_checks: list[tuple[Any, int]] = []
            if self.sqlite:
                cur.execute("BEGIN IMMEDIATE")
            try:
                with nullcontext() if self.sqlite else dbapi.pipeline():
                    head_cur.execute(self.advance[0], args(self.advance, advance))
                    if self.sqlite and head_cur.rowcount != 1:
                        dbapi.rollback()
                        return False
                    if len(event_rows) == 1:
                        event_cur.execute(self.insert_event[0], event_rows[0])
                    else:
                        event_cur.executemany(self.insert_event[0], event_rows)
                    for (sql_text, _), params, many in surface_ops:
                        if sql_text == self.insert_surface[0]:
                            # One cursor per batch of appends: each count is read after sync.
                            batch_cur = raw.cursor()
                            batch_cur.executemany(sql_text, params)
                            append_checks.append((batch_cur, len(params)))
                        elif many:
                            cur.executemany(sql_text, params)
                        else:
                            cur.execute(sql_text, params)
                    if self.channel is not None:
                        cur.execute(
                            self.notify[0],
                            args(
                                self.notify,
                                {"b_channel": self.channel, "b_payload": f"{session_id}:{head}"},
                            ),
                        )
                if head_cur.rowcount != 1:  # PostgreSQL: known once the pipeline has synced
                    dbapi.rollback()
                    return False
                if event_cur.rowcount != len(event_rows) or any(
                    c.rowcount != n for c, n in append_checks
                ):
                    dbapi.rollback()
                    raise CorruptSessionError(
                        f"session {session_id!r}: rows already exist past the session's head "
                        "(events or surface positions); run verify, refusing to append",
                        session_id=session_id,
                    )
                dbapi.commit()
                keep = True
            except BaseException as exc:
                if getattr(dbapi, "broken", False):  # psycopg: the connection is lost
                    # Discard it instead of returning it to the pool, where its reset would
                    # fail (and log) or, without pre-ping, the next append would get it. No
                    # rollback: the server has already rolled the transaction back.
                    raw.invalidate()
                    raise
                dbapi.rollback()
                # The pipeline runs the inserts even when the conditional head update matched
                # no row; their failure (a taken seq, a deleted session) then only means that
                # the race was lost, which the caller classifies.
                if isinstance(exc, Exception) and head_cur.rowcount == 0:
                    return False
                raise
        finally:
            self._checkin(raw, keep)
        return True

    def _checkout(self) -> Any:
        """The connection for one append.

        On SQLite each thread keeps its connection between appends, which saves a pool
        checkout and reset per event on the interactive path. PostgreSQL connections go back
        to the pool every time, so that pre-ping replaces one the server has dropped.
        """
        raw = getattr(self._local, "raw", None)
        if raw is not None:
            self._local.raw = None
            return raw
        return self.engine.raw_connection()

    def _checkin(self, raw: Any, keep: bool) -> None:
        if keep and self.sqlite and raw.dbapi_connection is not None:
            with self._lock:
                if not self._closed:
                    self._local.raw = raw
                    self._kept.add(raw)
                    return
        with self._lock:
            self._kept.discard(raw)
        raw.close()  # back to the pool, which resets it (or drops it when invalidated)

    def close(self) -> None:
        """Return every kept connection to the pool (the store is closing)."""
        with self._lock:
            self._closed = True
            kept, self._kept = self._kept, set()
        for raw in kept:
            raw.close()


def fast_writes(ctx: StoreContext) -> FastWrites:
    return ctx.fast_writes


class StoredSession(Session):
    """A write handle on a stored session: ``Session``'s API plus ``refresh()``.

    Several processes may hold handles on one session; each append succeeds only if nobody
    appended since this handle last saw the log (``ConcurrencyError`` otherwise).
    """

    _ctx: StoreContext
    _next_pos: int

    @classmethod
    def _attach(
        cls,
        ctx: StoreContext,
        header: FrozenDict,
        log: list[SessionEvent],
        inherited_event_count: int,
        next_pos: int,
        surface: Surface | None = None,
    ) -> StoredSession:
        session = cls._from_checked(
            header,
            log,
            inherited_event_count,
            ctx.catalog,
            ctx.clock,
            ctx.max_event_bytes,
            surface=surface,
        )
        assert isinstance(session, StoredSession)
        session._ctx = ctx
        session._next_pos = next_pos
        return session

    def _check_event_size(self, event: SessionEvent) -> None:
        """Checked by the writer on the very text it stores (one serialisation per event)."""

    def _persist(self, events: list[SessionEvent], transitions: list[Transition]) -> None:
        ctx = self._ctx
        head = events[-1].seq
        generation = self._surface.replace_generation + sum(
            1 for t in transitions if type(t) is ReplaceNodes
        )
        next_pos = self._next_pos + sum(1 for t in transitions if type(t) is AppendNode)
        advance = {
            "b_id": self.id,
            "b_expected_head": self.seq - 1,
            "b_expected_pos": self._next_pos,
            "b_expected_gen": self._surface.replace_generation,
            "b_head": head,
            "b_pos": next_pos,
            "b_gen": generation,
            "b_now": _time.time_ns() // 1_000_000,
        }
        with translate_errors(self.id):
            moved = fast_writes(ctx).append(
                self.id, advance, events, transitions, self._next_pos, head
            )
        if not moved:
            with translate_errors(self.id), read_tx(ctx.engine) as conn:
                self._raise_lost_race(conn)
        self._next_pos = next_pos

    def _raise_lost_race(self, conn: Connection) -> None:
        row = conn.execute(statements_for(self._ctx.tables).session_row, {"b_id": self.id}).first()
        if row is None:
            raise SessionNotFoundError(f"session {self.id!r} no longer exists", session_id=self.id)
        if row.head_seq == self.seq - 1:
            raise CorruptSessionError(
                f"session {self.id!r}: the session row disagrees with the log (surface_next_pos "
                f"{row.surface_next_pos} != {self._next_pos} or replace_generation "
                f"{row.replace_generation} != {self._surface.replace_generation}); "
                "run verify; refusing to append",
                session_id=self.id,
            )
        raise ConcurrencyError(
            f"session {self.id!r}: another writer appended first (head is now seq "
            f"{row.head_seq}, this handle expected {self.seq - 1}); refresh() and retry",
            session_id=self.id,
            expected=self.seq - 1,
        )

    def refresh(self) -> list[SessionEvent]:
        """Load (and fully validate) what other writers appended; returns the new events."""
        ctx = self._ctx
        st = statements_for(ctx.tables)
        with translate_errors(self.id), read_tx(ctx.engine) as conn:
            row = conn.execute(st.session_row, {"b_id": self.id}).first()
            if row is None:
                raise SessionNotFoundError(f"session {self.id!r} not found", session_id=self.id)
            # Bounded by the head read first: on PostgreSQL each statement has its own
            # snapshot, and every event up to a committed head is committed with it.
            rows = conn.execute(
                st.events_from, {"b_id": self.id, "b_from": self.seq, "b_to": row.head_seq}
            ).all()
        if not rows and (row.head_seq, row.surface_next_pos, row.replace_generation) == (
            self.seq - 1,
            self._next_pos,
            self._surface.replace_generation,
        ):
            return []  # otherwise the row moved without events: the check below refuses it
        log, base = self._log, len(self._log)
        surface = self._surface.copy()
        try:
            fold_checked(
                (event_from_row(self.id, r) for r in rows), log, surface, ctx.catalog, parsed=True
            )
        except InvalidSeedError as exc:
            del log[base:]
            raise CorruptSessionError(
                f"session {self.id!r} seq {exc.seq}: stored event is invalid: {exc}",
                session_id=self.id,
                seq=exc.seq,
            ) from exc
        except BaseException:
            del log[base:]
            raise
        added = log[base:]
        next_pos = self._next_pos + sum(
            1 for e in added if e.surface_op == "append" and not is_exempt(e, ctx.catalog)
        )
        if (row.head_seq, row.surface_next_pos, row.replace_generation) != (
            len(log) - 1,
            next_pos,
            surface.replace_generation,
        ):
            del log[base:]
            raise CorruptSessionError(
                f"session {self.id!r}: the session row (head_seq {row.head_seq}, "
                f"surface_next_pos {row.surface_next_pos}, replace_generation "
                f"{row.replace_generation}) disagrees with its log; run verify",
                session_id=self.id,
            )
        self._surface = surface
        self._next_pos = next_pos
        return added
