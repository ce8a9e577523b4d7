"""verify() and the writer's refusal to build on a session whose tables disagree with its log."""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import delete, insert, update

from session_sql import (
    ConcurrencyError,
    CorruptSessionError,
    Replace,
    SessionFormatUnsupportedError,
    SessionStore,
    StoredSession,
    VerifyReport,
)
from session_sql import pending as pending_module
from session_sql import session as session_module
from session_sql import surface as surface_module
from session_sql._store import reader
from session_sql._store import rows as rows_module
from session_sql._store import store as store_module
from session_sql._store import writer as writer_module
from session_sql.surface import Replay, replay

from .store_builders import (
    answer,
    dump_tables,
    execute,
    key_of,
    recorded,
    refused,
    say,
    summarize,
    surface_table,
    tables,
    tool_turn,
    tool_turn_log,
)

SYNC_ONLY = {
    "test_verify_reads_the_log_in_pages": (
        "measures the sync store's statements (the async store runs the same code)"
    ),
}


def healthy(store: SessionStore, sid: str = "s1") -> StoredSession:
    """A closed tool turn (seqs 0–12; surface 2, 5, 7, 10), a summary of 2..5 (13), a todo (14).

    The log ends off the surface, so a lowered ``head_seq`` leaves a consistent-looking prefix.
    """
    handle = store.create_session(sid)
    tool_turn(handle)
    summarize(handle, 2, 5, sources=[2, 5])
    handle.append("todo/write", {"items": []})
    assert handle.surface.nodes == (13, 7, 10)
    return handle


@pytest.fixture
def s1(store):
    return healthy(store)


def test_verify_ok_on_healthy_sessions(store, s1):
    store.create_session("empty")
    store.create_session("seeded", seed=tool_turn_log(2))
    store.fork_session("s1", boundary=6, child_id="fork")
    for sid in ("s1", "empty", "seeded", "fork"):
        report = store.verify(sid)
        assert isinstance(report, VerifyReport)
        assert report.ok and bool(report), report.problems
        assert report.problems == ()
        assert report.session_id == sid
    assert store.verify("s1").events == s1.seq


# Hand edits of one session's rows: ``edit(store, session_id)``.
Edit = Callable[[SessionStore, str], None]


def _surface(store: SessionStore, sid: str, where: Any, **values: Any) -> None:
    sf = tables(store).surface
    execute(
        store, update(sf).where(sf.c.session_key == key_of(store, sid), where(sf)).values(**values)
    )


def _move_surface_row(store: SessionStore, sid: str) -> None:
    _surface(store, sid, lambda sf: sf.c.pos == 3, pos=9)


def _retarget_surface_row(store: SessionStore, sid: str) -> None:
    _surface(store, sid, lambda sf: sf.c.event_seq == 7, event_seq=8)  # 8 is a step/end


def _drop_surface_row(store: SessionStore, sid: str) -> None:
    sf = tables(store).surface
    execute(store, delete(sf).where(sf.c.session_key == key_of(store, sid), sf.c.event_seq == 10))


def _add_surface_row(store: SessionStore, sid: str) -> None:
    sf = tables(store).surface
    row = {"tenant": store.tenant, "session_key": key_of(store, sid), "pos": 50, "event_seq": 1}
    execute(store, insert(sf).values(row))


def _session_column(column: str, delta: int) -> Edit:
    def edit(store: SessionStore, sid: str) -> None:
        s = tables(store).sessions
        value = getattr(s.c, column) + delta
        execute(store, update(s).where(s.c.id == sid).values({column: value}))

    return edit


def _delete_event(seq: int) -> Edit:
    def edit(store: SessionStore, sid: str) -> None:
        e = tables(store).events
        execute(store, delete(e).where(e.c.session_key == key_of(store, sid), e.c.seq == seq))

    return edit


def _parent_column(store: SessionStore, sid: str) -> None:
    s = tables(store).sessions
    execute(store, update(s).where(s.c.id == sid).values(parent_session="someone"))


# (name, edit, what the report names)
EDITS: list[tuple[str, Edit, str]] = [
    ("surface-row-moved", _move_surface_row, "surface table"),
    ("surface-row-retargeted", _retarget_surface_row, "surface table"),
    ("surface-row-deleted", _drop_surface_row, "surface table"),
    ("surface-row-added", _add_surface_row, "surface table"),
    ("head-seq-raised", _session_column("head_seq", 1), "head_seq"),
    ("head-seq-lowered", _session_column("head_seq", -1), "head_seq"),
    ("next-pos-raised", _session_column("surface_next_pos", 1), "surface_next_pos"),
    ("next-pos-lowered", _session_column("surface_next_pos", -1), "surface_next_pos"),
    ("generation-raised", _session_column("replace_generation", 1), "replace_generation"),
    ("middle-event-deleted", _delete_event(3), "log"),
    ("surface-event-deleted", _delete_event(7), "log"),
    ("last-event-deleted", _delete_event(14), "head_seq"),
    ("parent-column", _parent_column, "parent_session"),
]


def _each_edit(store: SessionStore, check: Callable[[str, str], None], skip: str = "") -> None:
    """Edit a fresh session per case and run ``check(session_id, named)``; report all failures."""
    failures = []
    for name, edit, named in EDITS:
        if name == skip:
            continue
        sid = f"s-{name}"
        healthy(store, sid)
        edit(store, sid)
        try:
            check(sid, named)
        except (Exception, pytest.fail.Exception) as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


def test_verify_reports_each_hand_edit(store):
    healthy(store, "bystander")

    def check(sid: str, named: str) -> None:
        report = store.verify(sid)
        assert not report.ok and not bool(report)
        assert any(named in problem for problem in report.problems), report.problems

    _each_edit(store, check)
    assert store.verify("bystander").ok


# open_session reads the surface, the row and the last event, never the whole log: an event
# deleted off the surface (seq 3) is found when the handle reads its log (repair does).
OFF_SURFACE = "middle-event-deleted"


def test_the_writer_refuses_to_build_on_an_inconsistent_session(store):
    def check(sid: str, named: str) -> None:
        if sid == f"s-{OFF_SURFACE}":
            with refused(store, CorruptSessionError, match="seq 3 is missing"):
                list(store.open_session(sid).events)
        for resume in () if sid == f"s-{OFF_SURFACE}" else (False, True):
            with refused(store, CorruptSessionError) as info:
                store.open_session(sid, resume=resume)
            assert info.value.session_id == sid
        with refused(store, CorruptSessionError):
            store.repair(sid)

    # A wrong parent_session column contradicts the header, not the log.
    _each_edit(store, check, skip="parent-column")


@pytest.mark.parametrize("column", ["head_seq", "surface_next_pos", "replace_generation"])
def test_an_open_handle_refuses_to_append_on_an_edited_row(store, s1, column):
    _session_column(column, 1)(store, "s1")
    with refused(store, (CorruptSessionError, ConcurrencyError), s1):
        say(s1)
    with refused(store, CorruptSessionError, s1):  # and refresh says why, never loops
        s1.refresh()


def _insert_event(store: SessionStore, seq: int, type_: str, **extra: Any) -> None:
    t = tables(store)
    execute(
        store,
        insert(t.events).values(
            tenant=store.tenant,
            session_key=key_of(store, "s1"),
            seq=seq,
            type=type_,
            time=1,
            data={},
            **extra,
        ),
        update(t.sessions).where(t.sessions.c.id == "s1").values(head_seq=seq),
    )


def test_an_unknown_required_type_in_the_stored_log(store, s1):
    _insert_event(store, s1.seq, "x/from-the-future")
    for read in (store.load_session, store.open_session, store.repair, store.fork_session):
        with refused(store, SessionFormatUnsupportedError, match="x/from-the-future"):
            read("s1")
    with refused(store, SessionFormatUnsupportedError):
        s1.refresh()
    report = store.verify("s1")
    assert not report.ok
    assert any("x/from-the-future" in p for p in report.problems)
    assert [e.type for e in store.events("s1", from_seq=s1.seq)] == ["x/from-the-future"]


def test_an_unknown_ignorable_type_in_the_stored_log_is_kept(store, s1):
    _insert_event(store, s1.seq, "x/from-the-future", ignorable=True)
    assert store.verify("s1").ok
    loaded = store.load_session("s1")
    assert loaded.events[s1.seq].type == "x/from-the-future"
    assert loaded.surface.nodes == s1.surface.nodes
    assert len(s1.refresh()) == 1
    say(s1)
    assert store.verify("s1").ok


def test_a_stored_header_of_another_format_version(store, s1):
    s = tables(store).sessions
    header = {**s1.header, "version": 1}
    execute(store, update(s).where(s.c.id == "s1").values(header=header))
    for read in (store.load_session, store.open_session):
        with refused(store, SessionFormatUnsupportedError, match="newer"):
            read("s1")


def test_verify_writes_nothing(store, s1):
    before = dump_tables(store)
    assert store.verify("s1").ok
    assert dump_tables(store) == before  # verify writes nothing


# -- one replay, streamed ----------------------------------------------------------------------


def test_the_stored_surface_table_is_the_replay_of_the_log(store, s1):
    answer(s1, "c1", "pruned", sources=[7], surface_op=Replace(7, 7))  # 15 keeps 7's position
    say(s1, "after")
    state = Replay(keep_surface_events=True)
    steps = list(replay(store.events("s1"), state, store.catalog))
    assert surface_table(store, "s1") == state.rows() == [(0, 13), (2, 15), (3, 10), (4, 16)]
    assert [step.position for step in steps[13:]] == [0, None, 2, 4]


def test_load_verify_and_fork_plan_each_event_once_open_plans_none(store, s1, monkeypatch):
    planned: list[int] = []
    real_plan = surface_module.plan

    def counting_plan(nodes: Any, event: Any, lookup: Any, items: Any) -> Any:
        planned.append(event.seq)
        return real_plan(nodes, event, lookup, items)

    # Wherever a module holds ``plan``: a replay cannot escape the count by importing it.
    for module in (
        surface_module,
        session_module,
        pending_module,
        rows_module,
        store_module,
        writer_module,
    ):
        if hasattr(module, "plan"):
            monkeypatch.setattr(module, "plan", counting_plan)
    every = list(range(s1.seq))
    for read in (store.load_session, store.verify):
        planned.clear()
        read("s1")
        assert planned == every, read.__name__
    planned.clear()
    store.open_session("s1")
    assert planned == []  # no replay: the surface and the row are read and checked instead
    planned.clear()
    child = store.fork_session("s1", boundary=6, child_id="fork")
    assert planned == every + list(range(child.seq))  # the parent's log, then the child's


def _event_pages(rec: Any) -> list[Any]:
    """The parameters of each query on the ``events`` table."""
    events = re.compile(r'\bFROM\s+("?\w+"?\.)?"?events"?\s', re.IGNORECASE)
    return [p for s, p in zip(rec.queries, rec.parameters, strict=True) if events.search(s)]


def _values(params: Any) -> list[Any]:
    return list(params.values()) if isinstance(params, dict) else list(params)


def test_verify_reads_the_log_in_pages(store, monkeypatch):
    handle = store.create_session("long", seed=tool_turn_log(10))  # 131 events
    monkeypatch.setattr(reader, "STREAM_BATCH", 16)
    with recorded(store.engine) as rec:
        report = store.verify("long")
    assert report.ok and report.events == handle.seq
    pages = _event_pages(rec)
    # Every query on the log fetches one page at most: the log is never read whole.
    assert len(pages) == handle.seq // 16 + 1
    assert all(16 in _values(p) for p in pages), pages


def test_verify_reports_do_not_depend_on_the_page_size(store, monkeypatch):
    reports = {}
    for name, edit, _ in EDITS:
        healthy(store, f"s-{name}")
        edit(store, f"s-{name}")
        reports[name] = store.verify(f"s-{name}")
    monkeypatch.setattr(reader, "STREAM_BATCH", 2)
    for name, _, _ in EDITS:
        assert store.verify(f"s-{name}") == reports[name], name
    # A log problem stops the fold, not the count: every stored event is still counted.
    assert reports["middle-event-deleted"].events == 14


def test_verify_memory_follows_the_surface_not_the_log(store, monkeypatch):
    monkeypatch.setattr(reader, "STREAM_BATCH", 50)
    blob = "x" * 3000
    seed = [
        {"type": "x/blob", "seq": seq, "time": 1, "data": {"text": blob}, "ignorable": True}
        for seq in range(3000)
    ]
    store.create_session("big", seed=seed)
    store.create_session("warm", seed=tool_turn_log(1))
    store.verify("warm")  # statement caches and connections, before measuring
    store.load_session("warm")

    def peak(read: Callable[[], Any]) -> int:
        tracemalloc.start()
        try:
            assert read()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole_log = peak(lambda: store.load_session("big"))  # holds every event: about 9 MB
    assert whole_log > 3000 * len(blob)
    streamed = peak(lambda: store.verify("big"))
    assert streamed * 5 < whole_log, (streamed, whole_log)
