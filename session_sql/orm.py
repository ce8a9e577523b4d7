"""SQLAlchemy ORM read models over the store's tables (SPEC §11.6).

``SessionRow``, ``Event`` and ``SurfaceNode`` map the ``sessions``, ``events`` and ``surface``
tables of ``session_sql._store.schema`` as they are (every column of those ``Table`` objects,
nothing redeclared), for analysts and services that query sessions with the ORM, in their own
``Session`` and engine. ``SessionRow``'s primary key is the internal ``session_key`` (a new one
per creation); look a session up by ``tenant`` and ``id``. ``Event`` and ``SurfaceNode`` hold
that key, and add a read-only ``session_id``, the public id read from ``sessions``:

- ``SessionRow.events`` — the log, ordered by ``seq``; ``Event.session`` back;
- ``SessionRow.surface`` — the surface, ordered by ``pos``; ``SurfaceNode.session`` back;
- ``SurfaceNode.event`` — the event on that position (``session_key`` and
  ``event_seq = seq``);
  ``Event.surface_node`` back (``None`` when the event is not on the surface).

The module-level classes map the default PostgreSQL schema ``session_sql``.
``orm_models(schema)`` returns the classes of another schema, and ``orm_models(None)`` those of
SQLite, whose tables have no schema; ``orm_models(store.schema)`` picks the right ones for
either backend. Each schema has its own registry, built once, so several can be used in one
process.

Read-only by construction: the store is the only writer (it keeps the surface, the session row
and the log consistent in one transaction). A flush that would insert, update or delete any of
these objects, an ORM ``insert``/``update``/``delete`` statement on them, the legacy bulk
methods (``bulk_save_objects``, ``bulk_insert_mappings``, ``bulk_update_mappings``) and a Core
``insert``/``update``/``delete`` of their tables run through an ORM ``Session`` (a dialect's
``insert``, an alias of a table, a CTE of a ``SELECT`` included) raise ``ReadOnlyError``
before the statement is sent. Importing this module installs the listeners on
SQLAlchemy's ``Session`` class; they act only on these classes and their tables.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, cast

from sqlalchemy import ClauseElement, Connection, Insert, Update, and_, event, inspect, select
from sqlalchemy.orm import (
    Mapped,
    Mapper,
    ORMExecuteState,
    Session,
    UOWTransaction,
    column_property,
    registry,
    relationship,
)
from sqlalchemy.sql import visitors
from sqlalchemy.sql.dml import UpdateBase

from session_sql._store.schema import DEFAULT_SCHEMA, tables_for
from session_sql.errors import ReadOnlyError

__all__ = [
    "Event",
    "OrmModels",
    "ReadModel",
    "SessionRow",
    "SurfaceNode",
    "orm_models",
]


class ReadModel:
    """Base of every session_sql ORM class, whatever its schema: a read-only table row."""

    def __repr__(self) -> str:
        state = inspect(self)
        names = [column.key for column in state.mapper.primary_key]
        # The identity survives expiry (after a rollback); a pending object has only its dict.
        values = state.identity or tuple(state.dict.get(name) for name in names)
        keys = ", ".join(f"{name}={value!r}" for name, value in zip(names, values, strict=True))
        return f"{type(self).__name__}({keys})"


# The attribute types, for type checkers only: the mapped columns are exactly those of the
# tables (a column added to a table is mapped without a change here).


class _SessionRow(ReadModel):
    session_key: Mapped[int]
    tenant: Mapped[str]
    id: Mapped[str]
    format_version: Mapped[int]
    created_at: Mapped[int]
    parent_session: Mapped[str | None]
    inherited_event_count: Mapped[int]
    header: Mapped[dict[str, Any]]
    head_seq: Mapped[int]
    surface_next_pos: Mapped[int]
    replace_generation: Mapped[int]
    updated_at: Mapped[int]
    incarnation: Mapped[str]
    user_id: Mapped[str | None]
    title: Mapped[str | None]
    labels: Mapped[dict[str, str]]
    events: Mapped[list[_Event]]
    surface: Mapped[list[_SurfaceNode]]


class _Event(ReadModel):
    session_key: Mapped[int]
    tenant: Mapped[str]
    session_id: Mapped[str]
    """The session's public id (read from ``sessions``; the table holds ``session_key``)."""
    seq: Mapped[int]
    type: Mapped[str]
    time: Mapped[int]
    data: Mapped[dict[str, Any]]
    source_event_seqs: Mapped[str | None]
    """A JSON list as text, e.g. ``'[3, 4]'``."""
    surface_op: Mapped[str | None]
    """JSON as text: ``'"append"'`` or ``'{"op": "replace", "start": 1, "end": 4}'``."""
    ignorable: Mapped[bool | None]
    session: Mapped[_SessionRow]
    surface_node: Mapped[_SurfaceNode | None]


class _SurfaceNode(ReadModel):
    session_key: Mapped[int]
    tenant: Mapped[str]
    session_id: Mapped[str]
    """The session's public id (read from ``sessions``; the table holds ``session_key``)."""
    pos: Mapped[int]
    event_seq: Mapped[int]
    session: Mapped[_SessionRow]
    event: Mapped[_Event]


class OrmModels(NamedTuple):
    """The ORM classes of one schema; unpacks as ``SessionRow, Event, SurfaceNode``."""

    SessionRow: type[_SessionRow]
    Event: type[_Event]
    SurfaceNode: type[_SurfaceNode]


def _model_class(base: type[ReadModel], name: str, table: Any) -> type[Any]:
    return type(name, (base,), {"__module__": __name__, "__qualname__": name, "__table__": table})


def orm_models(schema: str | None = DEFAULT_SCHEMA) -> OrmModels:
    """The ORM classes mapping the tables in ``schema`` (``None``: SQLite); built once per name.

    The same classes on every call with the same name, however it is passed, from any thread.
    """
    with _build_lock:  # two threads must not map one schema twice
        return _build(schema)


_build_lock = threading.Lock()
_read_tables: dict[Any, str] = {}
"""Every table a read model maps, with the model's name: what an ORM Session may not write.

Replaced, never changed in place, so a guard can iterate it while another thread maps a
schema."""


def _public_id(sessions: Any, table: Any) -> Any:
    """The session's public id beside a row of ``table`` (which holds its ``session_key``)."""
    owner = select(sessions.c.id).where(sessions.c.session_key == table.c.session_key)
    return column_property(owner.scalar_subquery())


def _map_session_child(
    reg: registry,
    sessions: Any,
    row: type,
    model: type,
    table: Any,
    back: str,
    links: dict[str, Any],
) -> None:
    """Map a model of a table whose rows belong to one session: its public ``session_id``,
    its ``session`` (the ``back`` collection on ``row``), and its ``links``."""
    reg.map_imperatively(
        model,
        table,
        properties={
            "session_id": _public_id(sessions, table),
            "session": relationship(row, back_populates=back, viewonly=True),
            **links,
        },
    )


@functools.cache
def _build(schema: str | None) -> OrmModels:
    tables = tables_for(schema)
    sessions, events, surface = tables.sessions, tables.events, tables.surface
    global _read_tables
    _read_tables = {**_read_tables, sessions: "SessionRow", events: "Event", surface: "SurfaceNode"}
    row = cast("type[_SessionRow]", _model_class(_SessionRow, "SessionRow", sessions))
    ev = cast("type[_Event]", _model_class(_Event, "Event", events))
    node = cast("type[_SurfaceNode]", _model_class(_SurfaceNode, "SurfaceNode", surface))

    # viewonly: the relationships load, they never write (nor cascade a write).
    reg = registry()
    reg.map_imperatively(
        row,
        sessions,
        properties={
            "events": relationship(
                ev, back_populates="session", order_by=events.c.seq, viewonly=True
            ),
            "surface": relationship(
                node, back_populates="session", order_by=surface.c.pos, viewonly=True
            ),
        },
    )
    on_surface = and_(
        surface.c.session_key == events.c.session_key,
        surface.c.event_seq == events.c.seq,
    )
    # An event and its surface node: each a row of one session, and each the other's link.
    to_node = relationship(
        node, primaryjoin=on_surface, back_populates="event", viewonly=True, uselist=False
    )
    to_event = relationship(
        ev, primaryjoin=on_surface, back_populates="surface_node", viewonly=True
    )
    child = functools.partial(_map_session_child, reg, sessions, row)
    child(ev, events, "events", {"surface_node": to_node})
    child(node, surface, "surface", {"event": to_event})
    return OrmModels(row, ev, node)


if TYPE_CHECKING:
    SessionRow = _SessionRow
    Event = _Event
    SurfaceNode = _SurfaceNode
else:
    SessionRow, Event, SurfaceNode = orm_models(DEFAULT_SCHEMA)


# -- read-only -------------------------------------------------------------------------------


def _refuse(operation: str, target: object) -> NoReturn:
    what = target.__name__ if isinstance(target, type) else repr(target)
    raise ReadOnlyError(
        f"session_sql ORM models are read-only: refusing to {operation} {what}; "
        "write through the store (StoredSession.append, fork_session, delete_session)",
        operation=operation,
        entity=target.__name__ if isinstance(target, type) else type(target).__name__,
    )


@event.listens_for(Session, "before_flush")
def _refuse_flush(session: Session, context: UOWTransaction, instances: object) -> None:
    # Runs before the flush begins a transaction, so nothing is sent and the session stays
    # usable (``rollback()`` discards the refused changes).
    for obj in session.new:
        if isinstance(obj, ReadModel):
            _refuse("insert", obj)
    for obj in session.deleted:
        if isinstance(obj, ReadModel):
            _refuse("delete", obj)
    for obj in session.dirty:
        if isinstance(obj, ReadModel) and session.is_modified(obj):
            _refuse("update", obj)


@event.listens_for(Session, "do_orm_execute")
def _refuse_orm_dml(state: ORMExecuteState) -> None:
    if not (state.is_insert or state.is_update or state.is_delete):
        return
    mapper = state.bind_mapper
    if mapper is not None and issubclass(mapper.class_, ReadModel):
        _refuse(
            "insert" if state.is_insert else "update" if state.is_update else "delete",
            mapper.class_,
        )


def _refuse_row_write(operation: str) -> Any:
    def listener(mapper: Mapper[Any], connection: Any, target: object) -> None:
        session = inspect(target).session
        # The flush calls ``before_update`` for every dirty object, changed or not.
        if operation != "update" or session is None or session.is_modified(target):
            _refuse(operation, target)

    return listener


# A second line behind ``before_flush``, for objects that become dirty during the flush itself.
for _operation, _hook in (
    ("insert", "before_insert"),
    ("update", "before_update"),
    ("delete", "before_delete"),
):
    event.listen(ReadModel, _hook, _refuse_row_write(_operation), propagate=True)


# The legacy bulk methods fire none of the events above: they hand statements straight to the
# Session's connection. So every connection an ORM Session begins on also refuses, before it is
# sent, a statement that writes a read model's table (whatever built it: the bulk methods, or a
# Core statement run through the Session). The store never writes through an ORM Session.


@event.listens_for(Session, "after_begin")
def _guard_connection(session: Session, transaction: object, connection: Connection) -> None:
    if not event.contains(connection, "before_execute", _refuse_table_dml):
        event.listen(connection, "before_execute", _refuse_table_dml)


def _refuse_table_dml(
    conn: Connection, statement: object, multiparams: object, params: object, options: object
) -> None:
    written = _written_read_table(statement)
    if written is not None:
        operation, name = written
        raise ReadOnlyError(
            f"session_sql ORM models are read-only: refusing to {operation} {name} rows "
            "through an ORM Session; write through the store (StoredSession.append, "
            "fork_session, delete_session)",
            operation=operation,
            entity=name,
        )


def _written_read_table(statement: object) -> tuple[str, str] | None:
    """The operation and model of the first INSERT, UPDATE or DELETE in ``statement`` whose
    target is a read model's table, or ``None``.

    The whole statement is walked: a write can hide in a CTE (``WITH u AS (UPDATE events ...)
    SELECT ...``), its class can be a dialect's (``postgresql.insert``), and its target an
    alias or an ORM-annotated copy of the table.
    """
    if not isinstance(statement, ClauseElement):
        return None
    for element in visitors.iterate(statement):
        if isinstance(element, UpdateBase):
            name = _read_model_of(element.table)
            if name is not None:
                operation = (
                    "insert"
                    if isinstance(element, Insert)
                    else "update"
                    if isinstance(element, Update)
                    else "delete"
                )
                return operation, name
    return None


def _read_model_of(target: Any) -> str | None:
    for table, name in _read_tables.items():
        if target.is_derived_from(table):
            return name
    return None
