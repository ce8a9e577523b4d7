"""Probes for the store suite, next to the shared message and event builders.

The builders (``say``, ``reply``, ``tool_turn``, ``WireLog``, ...) live in ``tests/builders.py``
and are re-exported here. Probes look at the database underneath a store: ``dump_tables``
(every row of ``sessions``, ``events`` and ``surface`` as text, in key order), ``recorded``
(the statements an engine runs) and ``refused`` (a refused call changes neither the tables nor
the handle).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, Text, cast, event, select

from session_sql import Session, SessionEvent, SessionStore
from session_sql._store import reader
from session_sql._store.schema import tables_for

from .. import builders as shared
from ..builders import *  # noqa: F403  (the shared builders, re-exported)

__all__ = [
    "FUTURE",
    "Dump",
    "HandleState",
    "Recorder",
    "WRITE_SQL",
    "capture",
    "dump_tables",
    "event_rows",
    "execute",
    "exported",
    "failing_trigger",
    "recorded",
    "refused",
    "session_row",
    "surface_table",
    "tables",
    "view",
]
__all__ += shared.__all__


# -- the database underneath ------------------------------------------------------------------

Dump = dict[str, list[tuple[str | None, ...]]]

FUTURE = 4_000_000_000_000
"""After every clock reading of the tests: ``updated_before=FUTURE`` selects every session."""


def dump_tables(store: SessionStore) -> Dump:
    """Every row of ``sessions``, ``events`` and ``surface``, each column as its text, by key."""
    t = tables_for(store.schema)
    out: Dump = {}
    with store.engine.connect() as conn:
        for table in (t.sessions, t.events, t.surface):
            query = select(*(cast(c, Text) for c in table.c)).order_by(*table.primary_key.columns)
            out[table.name] = [tuple(row) for row in conn.execute(query)]
        conn.rollback()
    return out


WRITE_SQL = re.compile(r"^\s*(INSERT|UPDATE|DELETE|CREATE|DROP|ALTER)\b", re.IGNORECASE)


_CONTROL = re.compile(r"^\s*(BEGIN|PRAGMA)\b", re.IGNORECASE)


@dataclass
class Recorder:
    """What an engine ran inside a ``recorded`` block."""

    executed: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def statements(self) -> list[str]:
        return [statement for statement, _ in self.executed]

    @property
    def queries(self) -> list[str]:
        """Statements other than transaction control (BEGIN, pragmas)."""
        return [s for s in self.statements if not _CONTROL.match(s)]

    @property
    def parameters(self) -> list[Any]:
        """The parameters of ``queries``, in the same order."""
        return [p for s, p in self.executed if not _CONTROL.match(s)]

    @property
    def writes(self) -> list[str]:
        return [s for s in self.statements if WRITE_SQL.match(s)]


@contextmanager
def recorded(engine: Engine) -> Iterator[Recorder]:
    """Record every statement SQLAlchemy runs on ``engine`` inside the block, and the reads of
    one statement that run on a DBAPI cursor of its pool or idle connection
    (``reader.one_statement``: tail reads, ``open_session`` by a kept key)."""
    rec = Recorder()

    def on_statement(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        rec.executed.append((statement, parameters))

    real_one = reader.one_statement

    def one(ctx: Any, on: Any, idle: Any, c: Any, values: dict[str, Any]) -> list[Any]:
        if ctx.engine is engine:
            rec.executed.append((c.sql, c.bind({**c.defaults, **values})))
        return real_one(ctx, on, idle, c, values)

    event.listen(engine, "before_cursor_execute", on_statement)
    reader.one_statement = one  # type: ignore[assignment]
    try:
        yield rec
    finally:
        reader.one_statement = real_one  # type: ignore[assignment]
        event.remove(engine, "before_cursor_execute", on_statement)


@contextmanager
def failing_trigger(store: SessionStore, table: str, when: str) -> Iterator[None]:
    """Make the database refuse inserts into ``table`` for rows matching ``when`` (SQL on NEW).

    A trigger fails the statement inside the server, whatever path the store takes to the
    database, so it tests that a failure in the middle of a transaction leaves nothing behind.
    """
    name = "boom_" + table
    if store.schema is None:
        create = [
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} WHEN {when} "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        ]
        drop = [f"DROP TRIGGER {name}"]
    else:
        schema = f'"{store.schema}"'
        create = [
            f"CREATE FUNCTION {schema}.{name}() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$",
            f"CREATE TRIGGER {name} BEFORE INSERT ON {schema}.{table} FOR EACH ROW "
            f"WHEN ({when}) EXECUTE FUNCTION {schema}.{name}()",
        ]
        drop = [f"DROP TRIGGER {name} ON {schema}.{table}", f"DROP FUNCTION {schema}.{name}()"]
    with store.engine.begin() as conn:
        for statement in create:
            conn.exec_driver_sql(statement)
    try:
        yield
    finally:
        with store.engine.begin() as conn:
            for statement in drop:
                conn.exec_driver_sql(statement)


# -- "a refused input changes nothing" --------------------------------------------------------


@dataclass(frozen=True)
class HandleState:
    """What a refused append must leave exactly as it was in a handle's memory."""

    seq: int
    events: tuple[SessionEvent, ...]
    nodes: tuple[int, ...]
    replace_generation: int
    messages: tuple[Any, ...]
    message_ids: tuple[int, ...]


def capture(session: Session) -> HandleState:
    messages = session.messages()
    return HandleState(
        seq=session.seq,
        events=tuple(session.events),
        nodes=session.surface.nodes,
        replace_generation=session.surface.replace_generation,
        messages=tuple(messages),
        message_ids=tuple(id(m) for m in messages),
    )


def view(session: Session) -> tuple[Any, ...]:
    """What two handles on one session must agree on (``capture`` without identities)."""
    state = capture(session)
    return (state.seq, state.events, state.nodes, state.replace_generation, state.messages)


@contextmanager
def refused(
    store: SessionStore,
    error: type[BaseException],
    *handles: Session,
    match: str | None = None,
) -> Iterator[pytest.ExceptionInfo[Any]]:
    """Expect ``error`` from the block; the three tables and every handle stay as they were."""
    before_tables = dump_tables(store)
    before = [capture(h) for h in handles]
    with pytest.raises(error, match=match) as info:
        yield info
    assert dump_tables(store) == before_tables
    assert [capture(h) for h in handles] == before


def tables(store: SessionStore) -> Any:
    """The store's ``SchemaTables`` (for reading and hand-editing rows)."""
    return tables_for(store.schema)


def execute(store: SessionStore, *statements: Any) -> None:
    """Run hand-written statements in one committed transaction (editing rows underneath)."""
    with store.engine.begin() as conn:
        for statement in statements:
            conn.execute(statement)


def key_of(store: SessionStore, session_id: str, tenant: str | None = None) -> int:
    """The ``session_key`` of a session (``events`` and ``surface`` hold the key, not the
    public id), read first: Citus takes no subquery inside an ``INSERT``; ``tenant`` narrows
    it where ids repeat. -1 (no session's) when there is none, so a read by it finds nothing."""
    s = tables(store).sessions
    query = select(s.c.session_key).where(s.c.id == session_id)
    if tenant is not None:
        query = query.where(s.c.tenant == tenant)
    with store.engine.connect() as conn:
        key = conn.execute(query).scalar_one_or_none()
    return -1 if key is None else int(key)


def session_row(store: SessionStore, session_id: str) -> Any:
    s = tables(store).sessions
    with store.engine.connect() as conn:
        return conn.execute(select(s).where(s.c.id == session_id)).one()


def surface_table(store: SessionStore, session_id: str) -> list[tuple[int, int]]:
    """The ``(pos, event_seq)`` rows of a session's surface, by position."""
    sf = tables(store).surface
    query = select(sf.c.pos, sf.c.event_seq).where(sf.c.session_key == key_of(store, session_id))
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(query.order_by(sf.c.pos))]  # type: ignore[misc]


def event_rows(store: SessionStore, session_id: str) -> list[Any]:
    e = tables(store).events
    query = select(e).where(e.c.session_key == key_of(store, session_id)).order_by(e.c.seq)
    with store.engine.connect() as conn:
        return list(conn.execute(query))


def exported(store: SessionStore, tmp_path: Path) -> list[str]:
    """``s1``'s export, as lines; ``s1`` is deleted again."""
    store.create_session("s1", seed=shared.tool_turn_log())
    path = tmp_path / "s1.jsonl"
    store.export_jsonl("s1", path)
    store.delete_session("s1")
    return path.read_text(encoding="utf-8").splitlines(keepends=True)
