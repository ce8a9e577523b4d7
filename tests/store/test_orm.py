"""SPEC §11.6: the ORM read models map the store's tables, load what the store reads, and
refuse every write before it reaches the database."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    Engine,
    ForeignKeyConstraint,
    Integer,
    MetaData,
    Table,
    Text,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    lambda_stmt,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import PendingRollbackError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, aliased, mapped_column
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import DropSchema

from session_sql import ReadOnlyError, SessionSQLError, SessionStore, open_store, orm, thaw
from session_sql._store.schema import tables_for
from session_sql.orm import OrmModels, ReadModel, orm_models

from .store_builders import (
    begin_turn,
    dump_tables,
    end_turn,
    recorded,
    say,
    session_row,
    summarize,
    tool_turn,
)

# The ORM reads rows around the store, by key; tenants are covered by tests/store/test_tenants.
DEFAULT_TENANT_ONLY = True


@pytest.fixture
def user_engine(backend) -> Iterator[Engine]:
    """The engine of "an existing SQLAlchemy app": plain ``create_engine``, not the store's."""
    engine = create_engine(backend.url, poolclass=NullPool)
    yield engine
    engine.dispose()


def build(store: SessionStore) -> dict[str, int]:
    """A closed tool turn, a compaction of its first two surface nodes, a second turn, and a
    fork ``child`` of the first turn that goes on by itself."""
    parent = store.create_session("parent")
    seqs = tool_turn(parent)
    shadowed = [seqs["user"], seqs["reply"]]
    seqs["summary"] = summarize(parent, seqs["user"], seqs["reply"], sources=shadowed)
    begin_turn(parent, 2)
    seqs["question 2"] = say(parent, "question 2")
    end_turn(parent, 2)
    child = store.fork_session("parent", boundary=seqs["turn/end"], child_id="child")
    seqs["child question"] = say(child, "child question")
    return seqs


def models(store: SessionStore) -> OrmModels:
    return orm_models(store.schema)


def row_of(db: Session, m: OrmModels, session_id: str) -> Any:
    """The ``SessionRow`` of ``session_id`` in the default tenant, found by its public id (the
    primary key is the internal ``session_key``)."""
    query = select(m.SessionRow).where(m.SessionRow.tenant == "", m.SessionRow.id == session_id)
    return db.scalars(query).one()


def key_of(db: Session, m: OrmModels, session_id: str) -> int:
    """The ``session_key`` of ``session_id`` in the default tenant."""
    return int(row_of(db, m, session_id).session_key)


def event_of(db: Session, m: OrmModels, session_id: str, seq: int) -> Any:
    """An ``Event`` loaded by its primary key, ``(session_key, seq)``."""
    return db.get_one(m.Event, (key_of(db, m, session_id), seq))


def plain(value: Any) -> Any:
    """Frozen store data as plain JSON values, for comparing with what the ORM loads."""
    return json.loads(json.dumps(thaw(value)))


# -- mapping ---------------------------------------------------------------------------------


def test_models_map_every_column_of_the_store_tables_and_only_those() -> None:
    for schema in ("session_sql", None):
        tables = tables_for(schema)
        pairs = zip(
            orm_models(schema), (tables.sessions, tables.events, tables.surface), strict=True
        )
        for cls, table in pairs:
            mapper = inspect(cls)
            assert mapper.local_table is table  # the store's own Table object, not a copy
            assert cls.__table__ is table
            # events and surface hold the session's key; their public id is read from sessions.
            derived = set() if table is tables.sessions else {"session_id"}
            assert {c.key for c in mapper.columns} == {c.name for c in table.columns} | derived
            assert not derived & set(table.c.keys())
            # The typing annotations describe only real columns and relationships.
            annotated = set(cls.__mro__[1].__annotations__)
            assert annotated <= set(mapper.attrs.keys())


def test_orm_models_is_one_namespace_per_schema() -> None:
    assert orm_models() is orm_models("session_sql") is orm_models(schema="session_sql")
    assert orm.SessionRow is orm_models().SessionRow
    assert orm.Event.__table__.schema == "session_sql"
    sqlite_models = orm_models(None)
    assert sqlite_models is orm_models(None)
    assert sqlite_models.Event is not orm.Event
    assert sqlite_models.Event.__table__.schema is None
    row, event, node = orm_models("elsewhere")
    assert (row.__name__, event.__name__, node.__name__) == ("SessionRow", "Event", "SurfaceNode")
    assert all(issubclass(cls, ReadModel) for cls in (row, event, node))


def test_import_session_sql_does_not_import_the_orm() -> None:
    code = (
        "import sys, session_sql; session_sql.open_store; "
        "print(sorted(m for m in sys.modules if m in {'sqlalchemy.orm', 'session_sql.orm'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- reading ---------------------------------------------------------------------------------


def test_select_events_gives_the_stored_log(store, user_engine) -> None:
    build(store)
    m = models(store)
    with Session(user_engine) as db:
        for session_id in ("parent", "child"):
            rows = db.scalars(
                select(m.Event).where(m.Event.session_id == session_id).order_by(m.Event.seq)
            ).all()
            stored = list(store.events(session_id))
            assert [(e.seq, e.type, e.time, e.data) for e in rows] == [
                (s.seq, s.type, s.time, plain(s.data)) for s in stored
            ]
            for row, ev in zip(rows, stored, strict=True):
                wire = ev.to_json()
                assert row.surface_op == (
                    None if "surfaceOp" not in wire else json.dumps(wire["surfaceOp"])
                )
                sources = wire.get("sourceEventSeqs")
                assert row.source_event_seqs == (None if sources is None else json.dumps(sources))
                assert row.ignorable is (True if ev.ignorable else None)
        tool_results = db.scalars(
            select(m.Event.seq).where(m.Event.session_id == "parent", m.Event.type == "tool/result")
        ).all()
        assert tool_results == [e.seq for e in store.events("parent") if e.type == "tool/result"]


def test_session_events_and_surface_follow_seq_and_pos(store, user_engine) -> None:
    seqs = build(store)
    m = models(store)
    with Session(user_engine) as db:
        for session_id in ("parent", "child"):
            row = row_of(db, m, session_id)
            assert [e.seq for e in row.events] == list(range(row.head_seq + 1))
            assert all(e.session is row for e in row.events)
            nodes = row.surface
            assert [n.pos for n in nodes] == sorted(n.pos for n in nodes)
            assert tuple(n.event.seq for n in nodes) == tuple(store.surface(session_id))
            by_seq = {e.seq: e for e in store.events(session_id)}
            assert [n.event.data for n in nodes] == [plain(by_seq[n.event_seq].data) for n in nodes]
            assert all(n.event.surface_node is n and n.session is row for n in nodes)
        # The compaction: the summary took the first position; what it shadows is off the
        # surface but still in the log.
        parent = row_of(db, m, "parent")
        assert parent.surface[0].event.seq == seqs["summary"]
        assert parent.replace_generation == 1
        shadowed = [e for e in parent.events if e.seq in (seqs["user"], seqs["reply"])]
        assert len(shadowed) == 2 and all(e.surface_node is None for e in shadowed)
        summary = parent.surface[0].event
        assert json.loads(summary.surface_op) == {
            "op": "replace",
            "start": seqs["user"],
            "end": seqs["reply"],
        }
        assert json.loads(summary.source_event_seqs) == [seqs["user"], seqs["reply"]]


def test_surface_events_project_to_the_stored_messages(store, user_engine) -> None:
    build(store)
    m = models(store)
    with Session(user_engine) as db:
        row = row_of(db, m, "parent")
        projected = [
            n.event.data if n.event.type == "user/message" else n.event.data["message"]
            for n in row.surface
            if n.event.type == "user/message" or n.event.data["message"]["content"]
        ]
    assert projected == plain(store.messages("parent"))


def test_the_fork_is_a_session_row_with_its_parent(store, user_engine) -> None:
    seqs = build(store)
    m = models(store)
    with Session(user_engine) as db:
        child = db.scalars(
            select(m.SessionRow).where(m.SessionRow.parent_session == "parent")
        ).one()
        assert child.id == "child"
        assert child.inherited_event_count == seqs["turn/end"] + 1
        assert child.header == plain(store.load_session("child").header)
        # The inherited prefix equals the parent's events, row by row (a self-join).
        theirs = aliased(m.Event)
        pairs = db.execute(
            select(m.Event.seq, m.Event.data, theirs.data)
            .join(
                theirs,
                (theirs.seq == m.Event.seq) & (theirs.session_id == child.parent_session),
            )
            .where(m.Event.session_id == child.id, m.Event.seq < child.inherited_event_count)
            .order_by(m.Event.seq)
        ).all()
        assert [p.seq for p in pairs] == list(range(child.inherited_event_count))
        assert all(mine == parents for _, mine, parents in pairs)
        marker = child.events[child.inherited_event_count]
        assert (marker.type, marker.data) == ("session/end-seed", {"inherited": True})


def test_joins_through_relationships_and_an_aggregate(store, user_engine) -> None:
    seqs = build(store)
    m = models(store)
    with Session(user_engine) as db:
        # Events of forks of "parent", through Event.session.
        forked = db.scalars(
            select(m.Event.seq)
            .join(m.Event.session)
            .where(m.SessionRow.parent_session == "parent")
            .order_by(m.Event.seq)
        ).all()
        assert forked == [e.seq for e in store.events("child")]
        # The surface of every session, in order, through SurfaceNode.event.
        on_surface = db.execute(
            select(m.SurfaceNode.session_id, m.Event.seq, m.Event.type)
            .join(m.SurfaceNode.event)
            .order_by(m.SurfaceNode.session_id, m.SurfaceNode.pos)
        ).all()
        types = {sid: {e.seq: e.type for e in store.events(sid)} for sid in ("child", "parent")}
        assert on_surface == [
            (sid, seq, types[sid][seq]) for sid in ("child", "parent") for seq in store.surface(sid)
        ]
        # Which logged messages are off the surface now, through Event.surface_node.
        off = db.scalars(
            select(m.Event.seq)
            .outerjoin(m.Event.surface_node)
            .where(
                m.Event.session_id == "parent",
                m.Event.type.in_(["user/message", "assistant/message", "tool/result"]),
                m.SurfaceNode.pos.is_(None),
            )
            .order_by(m.Event.seq)
        ).all()
        assert off == [seqs["user"], seqs["reply"]]
        # Events per type, per session.
        counts = db.execute(
            select(m.SessionRow.id, m.Event.type, func.count())
            .join(m.SessionRow.events)
            .group_by(m.SessionRow.id, m.Event.type)
        ).all()
        assert Counter({(sid, t): n for sid, t, n in counts}) == Counter(
            (sid, e.type) for sid in ("parent", "child") for e in store.events(sid)
        )


def test_the_default_classes_work_on_either_backend_with_a_schema_translate_map(
    store, user_engine
) -> None:
    build(store)
    mapped = user_engine.execution_options(schema_translate_map={"session_sql": store.schema})
    with Session(mapped) as db:
        row = row_of(db, orm_models(), "parent")
        assert tuple(n.event.seq for n in row.surface) == tuple(store.surface("parent"))


# -- in an existing SQLAlchemy app -----------------------------------------------------------


def test_an_existing_app_joins_its_own_tables_and_keeps_writing_them(
    store, user_engine, backend
) -> None:
    build(store)
    m = models(store)

    class Base(DeclarativeBase):
        metadata = MetaData(schema=backend.table_schema)

    class Note(Base):
        __tablename__ = "app_notes"
        id: Mapped[int] = mapped_column(primary_key=True)
        session_id: Mapped[str]
        text: Mapped[str]

    Base.metadata.create_all(user_engine)
    before = dump_tables(store)
    with Session(user_engine) as db:
        db.add_all([Note(session_id="parent", text="slow"), Note(session_id="child", text="ok")])
        db.commit()
        rows = db.execute(
            select(Note.text, m.SessionRow.head_seq, func.count(m.Event.seq))
            .join(m.SessionRow, m.SessionRow.id == Note.session_id)
            .join(m.SessionRow.events)
            .group_by(Note.text, m.SessionRow.head_seq)
            .order_by(Note.text)
        ).all()
        assert rows == [
            ("ok", store.open_session("child").seq - 1, store.open_session("child").seq),
            ("slow", store.open_session("parent").seq - 1, store.open_session("parent").seq),
        ]
        # A flush that mixes the app's rows with a change to a read model is refused whole.
        db.add(Note(session_id="parent", text="lost"))
        row_of(db, m, "parent").header = {}
        with recorded(user_engine) as rec, pytest.raises(ReadOnlyError):
            db.commit()
        assert rec.writes == []  # refused before the flush began: not even the app's row
        db.rollback()
        assert db.scalars(select(Note.text).order_by(Note.text)).all() == ["ok", "slow"]
    assert dump_tables(store) == before


def test_a_refused_flush_leaves_the_app_transaction_intact(store, user_engine, backend) -> None:
    build(store)
    m = models(store)
    md = MetaData(schema=backend.table_schema)
    notes = Table("app_notes", md, Column("id", Integer, primary_key=True), Column("text", Text))
    md.create_all(user_engine)
    with Session(user_engine) as db:
        db.execute(insert(notes).values(id=1, text="kept"))  # the app's own uncommitted work
        stray = _new_event(db, m)
        db.add(stray)
        with pytest.raises(ReadOnlyError):
            db.flush()
        db.expunge(stray)
        db.commit()  # the transaction was never rolled back: the app's row commits
    with user_engine.connect() as conn:
        assert conn.execute(select(notes.c.text)).scalars().all() == ["kept"]


def test_a_read_model_changed_during_the_flush_is_still_refused(store, user_engine) -> None:
    build(store)
    m = models(store)
    before = dump_tables(store)
    with Session(user_engine) as db, recorded(user_engine) as rec:
        row = row_of(db, m, "parent")

        def late_change(session: Session, context: Any, instances: Any) -> None:
            row.head_seq = 0  # an app listener changing a read model inside the flush

        event.listen(db, "before_flush", late_change)
        row.head_seq = row.head_seq  # dirty without a net change: the flush runs
        with pytest.raises(ReadOnlyError):
            db.flush()
        assert rec.writes == []
        db.rollback()
    assert dump_tables(store) == before


def test_an_app_table_with_a_foreign_key_to_sessions(store, user_engine, backend) -> None:
    build(store)
    m = models(store)
    ids = tables_for(store.schema).session_ids
    md = MetaData(schema=backend.table_schema)
    # Session ids are unique per tenant, in session_ids: a foreign key names both.
    runs = Table(
        "app_runs",
        md,
        Column("id", Integer, primary_key=True),
        Column("tenant", Text, nullable=False),
        Column("session_id", Text),
        ForeignKeyConstraint(["session_id", "tenant"], [ids.c.id, ids.c.tenant]),
    )
    md.create_all(user_engine)
    with user_engine.begin() as conn:
        conn.execute(insert(runs), [{"id": 1, "tenant": "", "session_id": "child"}])
    with Session(user_engine) as db:
        on_row = (runs.c.tenant == m.SessionRow.tenant) & (runs.c.session_id == m.SessionRow.id)
        found = db.scalars(select(m.SessionRow).join(runs, on_row)).all()
        assert [r.id for r in found] == ["child"]


# -- read-only -------------------------------------------------------------------------------


def _new_event(db: Session, m: OrmModels) -> Any:
    return m.Event(
        session_key=key_of(db, m, "parent"),
        seq=99,
        tenant="",
        type="session/title",
        time=0,
        data={"title": "x"},
    )


Change = Callable[[Session, OrmModels], object]

# name -> (the operation refused, the class refused, the change)
CHANGES: dict[str, tuple[str, str, Change]] = {
    "add an event": ("insert", "Event", lambda db, m: db.add(_new_event(db, m))),
    "add a session": (
        "insert",
        "SessionRow",
        lambda db, m: db.add(m.SessionRow(id="new", format_version=0, created_at=0, header={})),
    ),
    "merge a new event": ("insert", "Event", lambda db, m: db.merge(_new_event(db, m))),
    "merge a changed event": (
        "update",
        "Event",
        lambda db, m: db.merge(
            m.Event(session_key=key_of(db, m, "parent"), seq=0, tenant="", data={"turn": 7})
        ),
    ),
    "edit event data": (
        "update",
        "Event",
        lambda db, m: setattr(event_of(db, m, "parent", 0), "data", {"turn": 7}),
    ),
    "edit a session row": (
        "update",
        "SessionRow",
        lambda db, m: setattr(row_of(db, m, "parent"), "head_seq", 0),
    ),
    "move a surface node": (
        "update",
        "SurfaceNode",
        lambda db, m: setattr(row_of(db, m, "parent").surface[0], "event_seq", 0),
    ),
    "delete an event": (
        "delete",
        "Event",
        lambda db, m: db.delete(event_of(db, m, "parent", 0)),
    ),
    "delete a session": (
        "delete",
        "SessionRow",
        lambda db, m: db.delete(row_of(db, m, "child")),
    ),
    "delete a surface node": (
        "delete",
        "SurfaceNode",
        lambda db, m: db.delete(row_of(db, m, "parent").surface[-1]),
    ),
}


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("how", ["flush", "commit", "autoflush"])
def test_flushing_a_change_is_refused_before_any_sql(store, user_engine, change, how) -> None:
    build(store)
    m = models(store)
    operation, entity, make_change = CHANGES[change]
    before = dump_tables(store)
    with Session(user_engine) as db, recorded(user_engine) as rec:
        make_change(db, m)
        with pytest.raises(ReadOnlyError) as info:
            if how == "flush":
                db.flush()
            elif how == "commit":
                db.commit()
            else:  # a query flushes pending changes first
                db.scalars(select(m.SessionRow)).all()
        assert rec.writes == []
        db.rollback()
        # After the rollback the session reads the database as it is, and can go on.
        assert row_of(db, m, "parent").head_seq == store.open_session("parent").seq - 1
    assert (info.value.operation, info.value.entity) == (operation, entity)
    assert isinstance(info.value, SessionSQLError) and isinstance(info.value, TypeError)
    assert "read-only" in str(info.value)
    assert dump_tables(store) == before
    assert store.verify("parent").ok and store.verify("child").ok


def test_orm_insert_update_delete_statements_are_refused(store, user_engine) -> None:
    build(store)
    m = models(store)
    before = dump_tables(store)
    parent = session_row(store, "parent").session_key
    statements = [
        (
            "insert",
            insert(m.Event),
            [{"session_key": parent, "seq": 99, "tenant": "", "type": "t", "time": 0, "data": {}}],
        ),
        ("update", update(m.Event).where(m.Event.seq == 0).values(type="x"), None),
        ("update", update(m.SessionRow).values(head_seq=0), None),
        ("delete", delete(m.SurfaceNode), None),
        ("delete", delete(m.SessionRow).where(m.SessionRow.id == "child"), None),
    ]
    with Session(user_engine) as db, recorded(user_engine) as rec:
        for operation, statement, params in statements:
            with pytest.raises(ReadOnlyError) as info:
                db.execute(statement, params)
            assert info.value.operation == operation
        assert rec.writes == []
        db.rollback()
    assert dump_tables(store) == before
    assert store.verify("parent").ok and store.verify("child").ok


def _loaded_event(db: Session, m: OrmModels) -> Any:
    ev = event_of(db, m, "parent", 0)
    ev.data = {"turn": 7}
    return ev


# name -> (the operation refused, the class refused, the write). None of these fires
# ``before_flush`` or ``do_orm_execute``.
BULK_WRITES: dict[str, tuple[str, str, Change]] = {
    "bulk_insert_mappings": (
        "insert",
        "Event",
        lambda db, m: db.bulk_insert_mappings(
            m.Event,
            [
                {
                    "session_key": key_of(db, m, "parent"),
                    "seq": 99,
                    "tenant": "",
                    "type": "t",
                    "time": 0,
                    "data": {},
                }
            ],
        ),
    ),
    "bulk_update_mappings of an event": (
        "update",
        "Event",
        lambda db, m: db.bulk_update_mappings(
            m.Event, [{"session_key": key_of(db, m, "parent"), "seq": 0, "data": {"x": 1}}]
        ),
    ),
    "bulk_update_mappings of a session row": (
        "update",
        "SessionRow",
        lambda db, m: db.bulk_update_mappings(
            m.SessionRow, [{"session_key": key_of(db, m, "parent"), "head_seq": 41}]
        ),
    ),
    "bulk_save_objects of a new event": (
        "insert",
        "Event",
        lambda db, m: db.bulk_save_objects([_new_event(db, m)]),
    ),
    "bulk_save_objects of a changed event": (
        "update",
        "Event",
        lambda db, m: db.bulk_save_objects([_loaded_event(db, m)]),
    ),
    "a Core update of the events table through the Session": (
        "update",
        "Event",
        lambda db, m: db.execute(m.Event.__table__.update().values(type="x")),
    ),
    "a Core delete of the surface table through the Session": (
        "delete",
        "SurfaceNode",
        lambda db, m: db.execute(m.SurfaceNode.__table__.delete()),
    ),
    "a Core insert into the sessions table through the Session": (
        "insert",
        "SessionRow",
        lambda db, m: db.execute(
            m.SessionRow.__table__.insert().values(
                tenant="", id="new", format_version=0, created_at=0, header={}
            )
        ),
    ),
    "legacy Query.update": (
        "update",
        "Event",
        lambda db, m: db.query(m.Event).filter(m.Event.seq == 0).update({"type": "x"}),
    ),
    "legacy Query.delete": (
        "delete",
        "SessionRow",
        lambda db, m: db.query(m.SessionRow).filter(m.SessionRow.id == "child").delete(),
    ),
    "ORM update with synchronize_session=fetch": (
        "update",
        "Event",
        lambda db, m: db.execute(
            update(m.Event).values(type="x").execution_options(synchronize_session="fetch")
        ),
    ),
    "ORM update with synchronize_session=evaluate": (
        "update",
        "SessionRow",
        lambda db, m: db.execute(
            update(m.SessionRow)
            .values(head_seq=41)
            .execution_options(synchronize_session="evaluate")
        ),
    ),
    "ORM delete with synchronize_session=False": (
        "delete",
        "Event",
        lambda db, m: db.execute(
            delete(m.Event).where(m.Event.seq > 0).execution_options(synchronize_session=False)
        ),
    ),
    "ORM update of the session row": (
        "update",
        "SessionRow",
        lambda db, m: db.execute(update(m.SessionRow).values(head_seq=41)),
    ),
    "ORM bulk update by primary key": (
        "update",
        "Event",
        lambda db, m: db.execute(
            update(m.Event), [{"session_key": key_of(db, m, "parent"), "seq": 0, "data": {}}]
        ),
    ),
    "a dialect insert into the events table, on conflict update": (
        "insert",
        "Event",
        lambda db, m: db.execute(
            _dialect_insert(db, m.Event.__table__)
            .values(
                session_key=key_of(db, m, "parent"), seq=0, tenant="", type="x", time=0, data={}
            )
            .on_conflict_do_update(index_elements=["session_key", "seq"], set_={"type": "x"})
        ),
    ),
    "a dialect insert of an Event, on conflict do nothing": (
        "insert",
        "Event",
        lambda db, m: db.execute(
            _dialect_insert(db, m.Event)
            .values(
                session_key=key_of(db, m, "parent"), seq=99, tenant="", type="x", time=0, data={}
            )
            .on_conflict_do_nothing()
        ),
    ),
    "a Core update of an alias of the events table": (
        "update",
        "Event",
        lambda db, m: db.execute(update(m.Event.__table__.alias("e")).values(type="x")),
    ),
    "an UPDATE ... RETURNING in a CTE of a SELECT": (
        "update",
        "Event",
        lambda db, m: db.execute(select(_updating_cte(m.Event.__table__.c).c.seq)).all(),
    ),
    "an ORM update in a CTE of a SELECT": (
        "update",
        "SessionRow",
        lambda db, m: db.execute(
            select(m.Event).where(
                m.Event.seq.in_(
                    select(
                        update(m.SessionRow)
                        .values(head_seq=41)
                        .returning(m.SessionRow.head_seq)
                        .cte("u")
                        .c.head_seq
                    )
                )
            )
        ).all(),
    ),
    "a lambda statement deleting the surface": (
        "delete",
        "SurfaceNode",
        lambda db, m: db.execute(_lambda_delete(m.SurfaceNode.__table__)),
    ),
}


def _dialect_insert(db: Session, target: Any) -> Any:
    """``postgresql.insert`` or ``sqlite.insert``: a subclass of Core's ``Insert``."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    return dialect.insert(target)


def _updating_cte(columns: Any) -> Any:
    return update(columns.seq.table).values(type="x").returning(columns.seq).cte("u")


def _lambda_delete(table: Table) -> Any:
    return lambda_stmt(lambda: delete(table))


@pytest.mark.parametrize("write", BULK_WRITES)
def test_every_other_orm_write_path_is_refused_before_it_is_sent(store, user_engine, write) -> None:
    """The legacy bulk methods, Core DML run through an ORM Session and legacy ``Query``
    writes are refused like a flush: nothing is sent, and the session goes on after a
    rollback."""
    build(store)
    m = models(store)
    operation, entity, make_write = BULK_WRITES[write]
    before = dump_tables(store)
    with Session(user_engine) as db, recorded(user_engine) as rec:
        with pytest.raises(ReadOnlyError) as info:
            make_write(db, m)
        assert [
            sql for sql, _ in rec.executed if not sql.lstrip().upper().startswith("SELECT")
        ] == []
        db.rollback()
        assert row_of(db, m, "parent").head_seq == store.open_session("parent").seq - 1
    assert (info.value.operation, info.value.entity) == (operation, entity)
    assert dump_tables(store) == before
    assert store.verify("parent").ok and store.verify("child").ok


def _app_table(store: SessionStore, user_engine: Engine) -> Table:
    """A table of the application's own, next to the store's, with no rows."""
    notes = Table(
        "app_notes", MetaData(schema=store.schema), Column("id", Integer, primary_key=True)
    )
    notes.create(user_engine)
    return notes


@pytest.mark.parametrize("write", BULK_WRITES)
def test_a_refused_statement_keeps_the_apps_transaction(store, user_engine, write) -> None:
    """The app's own uncommitted writes survive a refused statement; only a refused bulk
    method rolls them back (SQLAlchemy runs it in an inner transaction and rolls the whole
    Session back on any error in it), and then the Session goes on after ``rollback()``."""
    build(store)
    m = models(store)
    notes = _app_table(store, user_engine)
    with Session(user_engine) as db:
        db.execute(insert(notes).values(id=1))
        with pytest.raises(ReadOnlyError):
            BULK_WRITES[write][2](db, m)
        if write.startswith("bulk_"):
            with pytest.raises(PendingRollbackError):
                db.execute(select(notes.c.id))
            db.rollback()
            kept = []
        else:
            kept = [1]
        assert db.scalars(select(notes.c.id)).all() == kept
        db.execute(insert(notes).values(id=2))
        db.commit()
    with user_engine.connect() as conn:
        assert conn.scalars(select(notes.c.id).order_by(notes.c.id)).all() == [*kept, 2]
    assert store.verify("parent").ok and store.verify("child").ok


@pytest.mark.parametrize("change", CHANGES)
def test_a_refused_flush_keeps_the_apps_transaction(store, user_engine, change) -> None:
    build(store)
    m = models(store)
    notes = _app_table(store, user_engine)
    with Session(user_engine) as db:
        db.execute(insert(notes).values(id=1))
        CHANGES[change][2](db, m)
        with pytest.raises(ReadOnlyError):
            db.flush()
        db.expunge_all()  # drop the refused change; the transaction goes on
        db.execute(insert(notes).values(id=2))
        db.commit()
    with user_engine.connect() as conn:
        assert conn.scalars(select(notes.c.id).order_by(notes.c.id)).all() == [1, 2]
    assert store.verify("parent").ok and store.verify("child").ok


def test_the_store_still_writes_while_an_orm_session_is_open(store, user_engine) -> None:
    """The guard is on the ORM Session's connections, not on the tables: the store's own
    writes, and an app's writes to its own tables through the same Session, go on."""
    build(store)
    m = models(store)
    with Session(user_engine) as db:
        row_of(db, m, "parent")
        handle = store.open_session("parent")
        say(handle, "while the ORM reads")
        db.execute(text("SELECT 1"))
    assert store.verify("parent").ok


def test_changing_a_relationship_collection_writes_nothing(store, user_engine) -> None:
    build(store)
    m = models(store)
    before = dump_tables(store)
    with Session(user_engine) as db, recorded(user_engine) as rec:
        row = row_of(db, m, "parent")
        new = _new_event(db, m)
        row.events.pop()
        row.events.append(new)
        row.surface.clear()
        db.commit()
        assert rec.writes == []
    assert dump_tables(store) == before
    assert store.verify("parent").ok
    with Session(user_engine) as db:
        row = row_of(db, m, "parent")
        assert len(row.events) == store.open_session("parent").seq


def test_reading_is_not_refused_and_the_app_session_stays_usable(store, user_engine) -> None:
    build(store)
    m = models(store)
    with Session(user_engine) as db:
        row = row_of(db, m, "parent")
        row.head_seq = row.head_seq  # set to the same value: no net change, nothing to refuse
        db.commit()
        db.refresh(row)
        assert row.id == "parent"
        assert repr(row) == f"SessionRow(session_key={row.session_key!r})"


# -- several schemas -------------------------------------------------------------------------


@pytest.fixture
def two_postgres_stores(postgres_admin) -> Iterator[tuple[SessionStore, SessionStore]]:
    """Two stores in two fresh schemas of one PostgreSQL database, dropped afterwards."""
    schemas = [f"t_{uuid.uuid4().hex}" for _ in range(2)]
    url = postgres_admin.url.render_as_string(hide_password=False)
    stores = [open_store(url, schema=schema) for schema in schemas]
    try:
        yield stores[0], stores[1]
    finally:
        for opened in stores:
            opened.close()
        with postgres_admin.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '10s'"))
            for schema in schemas:
                conn.execute(DropSchema(schema, cascade=True, if_exists=True))


@pytest.mark.postgresql
def test_two_schemas_in_one_process(two_postgres_stores, postgres_admin) -> None:
    store, other_store = two_postgres_stores
    build(store)
    other_store.create_session("elsewhere")
    a, b = models(store), models(other_store)
    assert a.Event is not b.Event
    assert (a.Event.__table__.schema, b.Event.__table__.schema) == (
        store.schema,
        other_store.schema,
    )
    with Session(postgres_admin) as db:
        assert db.scalars(select(a.SessionRow.id).order_by(a.SessionRow.id)).all() == [
            "child",
            "parent",
        ]
        assert db.scalars(select(b.SessionRow.id)).all() == ["elsewhere"]
        assert [e.type for e in row_of(db, b, "elsewhere").events] == []
        # One query across both schemas: events per session, side by side.
        counts = db.execute(
            select(a.SessionRow.id, b.SessionRow.id, func.count(a.Event.seq))
            .join(a.SessionRow.events)
            .join(b.SessionRow, b.SessionRow.created_at > 0)
            .group_by(a.SessionRow.id, b.SessionRow.id)
            .order_by(a.SessionRow.id)
        ).all()
        assert counts == [
            ("child", "elsewhere", store.open_session("child").seq),
            ("parent", "elsewhere", store.open_session("parent").seq),
        ]
        other = row_of(db, b, "elsewhere")
        other.head_seq = 5
        with pytest.raises(ReadOnlyError):
            db.flush()
        db.rollback()
