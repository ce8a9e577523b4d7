"""Reading: messages and surface from the side table, streamed events, listing, following."""

from __future__ import annotations

import gc
import json
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, update

from session_sql import (
    CorruptSessionError,
    InvalidArgumentError,
    Session,
    SessionFormatUnsupportedError,
    SessionInfo,
    SessionStore,
    open_store,
)
from session_sql._gc import PAUSE_MIN_EVENTS
from session_sql._store import loading as loading_module
from session_sql._store import reader
from session_sql.jsonvalue import thaw

from .store_builders import (
    WireLog,
    answer,
    begin_step,
    begin_turn,
    call_tool,
    chunk,
    end_step,
    end_turn,
    execute,
    key_of,
    recorded,
    reply,
    say,
    summarize,
    tables,
    tool_turn,
    tool_turn_log,
    wires,
)

# -- messages() and surface() come from the side table -----------------------------------------


_MEASURES_SYNC = (
    "measures the sync store's statements and iterator (test_async_store.py: the async's)"
)
SYNC_ONLY = {
    "test_messages_and_surface_never_replay_the_log": _MEASURES_SYNC,
    "test_events_stream_with_bounded_memory": _MEASURES_SYNC,
}


def chunky_log(chunks: int) -> list[dict[str, Any]]:
    """A log whose surface has 5 nodes, with ``chunks`` streamed deltas in the middle."""
    log = WireLog()
    begin_turn(log)
    first = say(log, "first")
    second = say(log, "second")
    summarize(log, first, second, sources=[first, second])
    begin_step(log)
    streamed = [chunk(log, str(i % 10)) for i in range(chunks)]
    reply(log, "answer", tool_calls=["c1"], sources=streamed[-1:] or None)
    call = call_tool(log, "c1")
    answer(log, "c1", sources=[call])
    end_step(log)
    say(log, "thanks")
    reply(log, None)  # usage only: on the surface, not a message
    end_turn(log)
    return log.events


def events_rows_touched(store: SessionStore, statement: str, params: Any) -> int:
    """How many ``events`` rows the database reads to run ``statement`` (PostgreSQL)."""
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).scalar()
        conn.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    touched = 0
    stack = [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        stack.extend(node.get("Plans", []))
        if node.get("Relation Name") == "events":
            rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            rows += node.get("Rows Removed by Index Recheck", 0)
            touched += rows * node["Actual Loops"]
    return touched


def sqlite_events_access(store: SessionStore, statement: str, params: Any) -> list[str]:
    """The query-plan lines of ``statement`` that read ``events`` (SQLite)."""
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
        conn.rollback()
    return [row[-1] for row in plan if " events " in f" {row[-1]} "]


class VmSteps:
    """Counts SQLite virtual-machine instructions run on the store's connections."""

    def __init__(self, store: SessionStore) -> None:
        self.engine = store.engine
        self.count = 0

    def _tick(self) -> int:
        self.count += 1
        return 0

    def _checkout(self, dbapi_conn: Any, *args: Any) -> None:
        dbapi_conn.set_progress_handler(self._tick, 1)

    def _checkin(self, dbapi_conn: Any, *args: Any) -> None:
        dbapi_conn.set_progress_handler(None, 1)

    def __enter__(self) -> VmSteps:
        event.listen(self.engine, "checkout", self._checkout)
        event.listen(self.engine, "checkin", self._checkin)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "checkout", self._checkout)
        event.remove(self.engine, "checkin", self._checkin)


@pytest.mark.requires("query_plans")
def test_messages_and_surface_never_replay_the_log(store, backend):
    sessions = {
        sid: Session(sid, seed=chunky_log(chunks)) for sid, chunks in (("small", 0), ("big", 2000))
    }
    for sid, session in sessions.items():
        store.create_session(sid, seed=wires(session.events[:-1]))
    assert len(sessions["big"].events) > 2000
    assert len(sessions["big"].surface.nodes) == 5
    assert len(sessions["big"].messages()) == 4

    cost: dict[str, dict[str, Any]] = {}
    for sid, session in sessions.items():
        with recorded(store.engine) as rec:
            messages = store.messages(sid)
            surface = store.surface(sid)
        assert messages == session.messages()
        assert surface == session.surface.nodes
        cost[sid] = {"queries": rec.queries, "params": rec.parameters}
        if backend.has("vm_steps"):
            with VmSteps(store) as steps:
                store.messages(sid)
                store.surface(sid)
            cost[sid]["vm"] = steps.count

    # O(1) statements: the same ones, whatever the length of the log.
    assert 1 <= len(cost["big"]["queries"]) <= 4
    assert cost["big"]["queries"] == cost["small"]["queries"]
    # ... and no events row beyond the five surface nodes is read: each node's event is
    # looked up by its primary key (at most twice: its type and its data).
    for statement, params in zip(cost["big"]["queries"], cost["big"]["params"], strict=True):
        if backend.has("explain_json"):
            touched = events_rows_touched(store, statement, params)
            assert touched <= 2 * 5, statement
            small_params = {k: "small" if v == "big" else v for k, v in params.items()}
            assert touched == events_rows_touched(store, statement, small_params)
        else:
            for line in sqlite_events_access(store, statement, params):
                assert line.startswith("SEARCH events USING"), line
                assert "PRIMARY KEY (session_key=? AND seq=?)" in line, line
    if backend.has("vm_steps"):  # the work done does not grow with the log
        assert cost["big"]["vm"] <= cost["small"]["vm"] * 1.2

    # The log itself is not read: make every chunk unreadable to a replay.
    e = tables(store).events
    big = e.c.session_key == key_of(store, "big", store.tenant)
    sabotage = update(e).where(big, e.c.type == "assistant/chunk")
    execute(store, sabotage.values(type="x/unknown"))
    with pytest.raises(SessionFormatUnsupportedError):
        store.load_session("big")
    assert store.messages("big") == sessions["big"].messages()
    assert store.surface("big") == sessions["big"].surface.nodes


def test_messages_are_fresh_lists_of_frozen_messages(store):
    writer = store.create_session("s1")
    tool_turn(writer)
    first, second = store.messages("s1"), store.messages("s1")
    assert first == second and first is not second
    first.append("mine")
    assert store.messages("s1") == second
    with pytest.raises((TypeError, AttributeError)):
        second[0]["id"] = "changed"  # type: ignore[index]
    assert store.messages("s1") == writer.messages()


def test_empty_session_reads(store):
    store.create_session("s1")
    assert store.messages("s1") == []
    assert store.surface("s1") == ()
    assert list(store.events("s1")) == []
    assert store.load_session("s1").seq == 1  # just the in-memory marker


def test_a_load_over_several_pages_and_chunks_is_the_whole_log(store, monkeypatch):
    store.create_session("s1", seed=tool_turn_log(3))  # 39 events and the marker
    whole = store.load_session("s1")
    # Pages of 8 rows, each taken from the cursor 3 rows at a time.
    monkeypatch.setattr(reader, "LOAD_BATCH", 8)
    monkeypatch.setattr(reader, "STREAM_BATCH", 3)
    paged = store.load_session("s1")
    assert paged.events == whole.events and len(paged.events) == 40
    assert paged.messages() == whole.messages()
    assert paged.surface.nodes == whole.surface.nodes
    e = tables(store).events
    execute(store, update(e).where(e.c.seq == 30).values(data={"turn": -1, "step": 1}))
    with pytest.raises(CorruptSessionError) as info:  # a chunk in the middle of a later page
        store.load_session("s1")
    assert (info.value.session_id, info.value.seq) == ("s1", 30)


def test_a_long_log_is_loaded_with_the_collector_paused(store, monkeypatch):
    """Like a big batch (``_gc``), a load of PAUSE_MIN_EVENTS events or more folds them with
    the cyclic collector paused, and restores it, also when a stored event is refused."""
    seen: list[bool] = []
    fold = loading_module.fold_checked

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return fold(*args, **kwargs)

    monkeypatch.setattr(loading_module, "fold_checked", watched)
    assert gc.isenabled()
    turns = -(-PAUSE_MIN_EVENTS // 13)  # tool_turn_log: 13 events a turn, and the marker
    store.create_session("long", seed=tool_turn_log(turns))
    store.create_session("short", seed=tool_turn_log(1))
    assert len(store.load_session("long").events) >= PAUSE_MIN_EVENTS
    store.load_session("short")
    assert seen == [False, True] and gc.isenabled()
    e = tables(store).events
    long = e.c.session_key == key_of(store, "long", store.tenant)
    execute(store, update(e).where(long, e.c.seq == 30).values(data={"x": 1}))
    with pytest.raises(CorruptSessionError):
        store.load_session("long")
    assert seen[-1] is False and gc.isenabled()


@pytest.mark.parametrize("seq", [2, 5, 7])  # a user message, a reply, a tool result
def test_a_malformed_surface_event_is_corruption_not_a_crash(store, seq):
    store.create_session("s1", seed=tool_turn_log())
    e = tables(store).events
    execute(store, update(e).where(e.c.seq == seq).values(data={"no": "message"}))
    with pytest.raises(CorruptSessionError) as info:
        store.messages("s1")
    assert (info.value.session_id, info.value.seq) == ("s1", seq)


def _odd_message(i: int) -> dict[str, Any]:
    """A user message whose source holds what a lossless read must keep: numbers at the edges
    of the safe range, floats of integer size; on some, number-like strings, escapes, deep
    nesting (which take the slower, exact path)."""
    deep: Any = "leaf"
    for _ in range(70 if i % 40 == 0 else 3):
        deep = {"d": [deep]}
    source: dict[str, Any] = {
        "kind": "odd",
        "n": [10**15 - 1, -7, 0.1, 2.5, 0, i],
        "s": ["-0", "call_3e9f", "é😀"],
        "deep": deep,
    }
    if i % 5 == 1:  # what orjson alone might not read back exactly, or looks like it
        source["edges"] = [2**53 - 1, -(2**53 - 1), 1e16, -0.5, 1.5e-7, 1e300]
        source["like"] = [":1e5", "1234567890123456789", " -0"]
    if i % 3 == 0:
        source["escaped"] = "x\x01y\u2028"
    return {
        "id": f"m{i}",
        "role": "user",
        "content": [{"type": "text", "text": f"#{i}"}],
        "source": source,
    }


def _counted(fn: Any, name: str, calls: list[str]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return fn(*args, **kwargs)

    return counted


def test_items_read_as_plain_values_are_the_frozen_messages_thawed(store, monkeypatch):
    """``_surface_items`` (an integration's read, which copies the items out) builds them from
    the nodes of ``surface_messages``, as plain values: decoded so on a long read (never
    frozen), thawed from the kept ones on a short tail; exactly the same values either way,
    with the collector paused while a long read builds them."""
    count = PAUSE_MIN_EVENTS + 20
    handle = store.create_session("s1")
    handle.append_many(
        [
            {"type": "user/message", "data": _odd_message(i), "surface_op": "append"}
            for i in range(count)
        ]
    )
    expected = [(n.pos, n.seq, n.type, thaw(n.message)) for n in store.surface_messages("s1")]
    assert len(expected) == count
    collecting: list[bool] = []

    def item_of(node: Any) -> Any:
        collecting.append(gc.isenabled())
        return None if node.seq % 7 == 0 else (node.pos, node.seq, node.type, thaw(node.message))

    paths: list[str] = []
    for name in ("loads_vouched", "loads_plain"):  # orjson's value, or after a closer look
        monkeypatch.setattr(reader, name, _counted(getattr(reader, name), name, paths))
    for last in (None, count - 10, 20):
        collecting.clear()
        got = store._surface_items("s1", last, item_of)
        nodes = expected if last is None else expected[-last:]
        assert repr(got) == repr([e for e in nodes if e[1] % 7 != 0])  # values and types
        long_read = last is None or last >= PAUSE_MIN_EVENTS
        assert set(collecting) == {not long_read} and gc.isenabled()
    assert paths.count("loads_vouched") > count // 2 and paths.count("loads_plain") > count // 2
    plain = store._surface_items("s1", None, lambda node: node.message)
    assert type(plain[1]) is dict and type(plain[1]["content"]) is list  # never frozen
    plain[1]["content"].clear()  # the caller's own
    assert store._surface_items("s1", None, lambda node: node.message)[1] == expected[1][3]
    e = tables(store).events
    corrupt = e.c.session_key == key_of(store, "s1", store.tenant)
    execute(store, update(e).where(corrupt, e.c.seq == 30).values(data={"no": "message"}))
    with pytest.raises(CorruptSessionError) as info:
        store._surface_items("s1", None, item_of)
    assert (info.value.session_id, info.value.seq) == ("s1", 30) and gc.isenabled()


# -- events(): bounds and bounded memory ------------------------------------------------------


def test_events_bounds(store):
    store.create_session("s1", seed=tool_turn_log())  # seqs 0..13 with the marker
    for from_seq, to_seq, expected in [
        (0, None, range(14)),
        (5, None, range(5, 14)),
        (3, 7, range(3, 7)),
        (0, 1, range(1)),
        (13, None, range(13, 14)),
        (14, None, range(0)),
        (100, None, range(0)),
        (7, 3, range(0)),
        (4, 4, range(0)),
        (10, 1000, range(10, 14)),
    ]:
        got = store.events("s1", from_seq=from_seq, to_seq=to_seq)
        assert [e.seq for e in got] == list(expected), (from_seq, to_seq)
    assert [e.seq for e in store.events("s1", to_seq=2)] == [0, 1]


def test_events_stream_with_bounded_memory(store):
    seed = [
        {"type": "todo/write", "seq": i, "time": i, "data": {"i": i, "pad": "x" * 200}}
        for i in range(4999)
    ]
    store.create_session("big", seed=seed)  # 4,999 events and the marker

    with recorded(store.engine) as rec:
        stream = store.events("big")
        assert isinstance(stream, Iterator)
        assert not isinstance(stream, list | tuple)
        first = next(stream)
        queries_for_first = len(rec.queries)
        assert first.seq == 0
        count = 1 + sum(1 for _ in stream)
    assert count == 5000
    assert len(rec.queries) > queries_for_first  # pages were fetched as the stream advanced

    def peak(consume: Any) -> int:
        tracemalloc.start()
        try:
            consume(store.events("big"))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    streamed = peak(lambda events: sum(1 for _ in events))
    held = peak(list)
    assert streamed * 2.5 < held, (streamed, held)


# -- list_sessions ----------------------------------------------------------------------------


def _header(session_id: str, created_at: int) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": created_at, "isSeeded": False}


@pytest.fixture
def listed(store) -> list[str]:
    """Seven sessions with hand-set ``updated_at`` (ties included); ids newest first."""
    updated = {"a": 100, "b": 100, "c": 100, "d": 200, "e": 200, "f": 300, "g": 50}
    for i, sid in enumerate(updated):
        store.create_session(header=_header(sid, 1000 + i))
    s = tables(store).sessions
    execute(
        store,
        *(update(s).where(s.c.id == sid).values(updated_at=at) for sid, at in updated.items()),
    )
    return ["f", "e", "d", "c", "b", "a", "g"]


def test_list_sessions_newest_updated_first(store, listed):
    infos = store.list_sessions()
    assert [i.id for i in infos] == listed
    assert all(isinstance(i, SessionInfo) for i in infos)
    assert (infos[0].created_at, infos[0].updated_at, infos[0].head_seq) == (1005, 300, -1)
    assert infos[0].parent_session is None


def test_list_sessions_pages_by_updated_at_and_id(store, listed):
    for limit in (1, 2, 3, 7, 10):
        for cursor in ("info", "id"):
            pages: list[list[str]] = []
            after: SessionInfo | str | None = None
            while True:
                page = store.list_sessions(limit=limit, after=after)
                if not page:
                    break
                assert len(page) <= limit
                pages.append([i.id for i in page])
                after = page[-1] if cursor == "info" else page[-1].id
            assert [sid for page in pages for sid in page] == listed, (limit, cursor)
            assert all(len(page) == limit for page in pages[:-1])


def test_list_sessions_reversed_pages_the_other_way(store, listed):
    assert [i.id for i in store.list_sessions(reverse=True)] == listed[::-1]
    created = [i.id for i in store.list_sessions(order="created", limit=100)]
    assert [i.id for i in store.list_sessions(order="created", reverse=True)] == created[::-1]
    for order in ("updated", "created"):
        everything = [i.id for i in store.list_sessions(order=order, reverse=True)]
        pages: list[str] = []
        after: str | None = None
        while page := store.list_sessions(order=order, reverse=True, limit=2, after=after):
            pages += [i.id for i in page]
            after = page[-1].id
        assert pages == everything, order
    with pytest.raises(InvalidArgumentError) as refused:
        store.list_sessions(reverse="yes")  # type: ignore[arg-type]
    assert refused.value.argument == "reverse"


def test_an_append_moves_a_session_to_the_front(store, listed):
    handle = store.open_session("g")
    say(handle)
    infos = store.list_sessions(limit=2)
    assert [i.id for i in infos] == ["g", "f"]
    assert infos[0].head_seq == 0


def test_list_sessions_filters(store, listed):
    parent = store.open_session("a")
    say(parent)
    child = store.fork_session("a", child_id="a-child")
    grandchild = store.fork_session("a-child", child_id="a-grandchild")
    assert [i.id for i in store.list_sessions(parent="a")] == [child.id]
    assert [i.id for i in store.list_sessions(parent="a-child")] == [grandchild.id]
    assert store.list_sessions(parent="g") == []
    # created_after is inclusive, created_before exclusive: [after, before)
    window = store.list_sessions(created_after=1002, created_before=1005)
    assert [i.id for i in window] == ["e", "d", "c"]
    assert [i.id for i in store.list_sessions(created_before=1001)] == ["a"]
    assert store.list_sessions(limit=0) == []


def test_count_sessions_counts_what_list_sessions_lists_with_the_same_filters(store, listed):
    store.open_session("a").append("todo/write", {"items": []})
    store.fork_session("a", child_id="a-child")
    store.update_session("b", labels={"team": "x"})
    assert store.count_sessions() == len(store.list_sessions(limit=1000)) == 8
    for filters in (
        {"parent": "a"},
        {"parent": "nothing-forked-from-it"},
        {"parent": "not a valid id!"},
        {"created_after": 1002, "created_before": 1005},
        {"id_prefix": "a"},
        {"id_prefix": "a\x00"},
        {"labels": {"team": "x"}},
        {"user_id": "nobody"},
    ):
        assert store.count_sessions(**filters) == len(store.list_sessions(**filters)), filters
    assert store.count_sessions(created_after=1002, created_before=1005) == 3
    with pytest.raises(InvalidArgumentError) as refused:
        store.count_sessions(created_after="soon")  # type: ignore[arg-type]
    assert refused.value.argument == "created_after"


def test_list_sessions_by_id_prefix_compares_exactly(store):
    ids = ["abc-1", "abc-2", "abd", "ab", "a_b", "axb", "a%b", "ABC-3", "☃-1"]
    for sid in ids:
        store.create_session(sid)

    def prefixed(prefix: str) -> list[str]:
        return sorted(i.id for i in store.list_sessions(id_prefix=prefix))

    assert prefixed("abc") == ["abc-1", "abc-2"]
    assert prefixed("ab") == ["ab", "abc-1", "abc-2", "abd"]
    assert prefixed("abc-2") == ["abc-2"]
    assert prefixed("ABC") == ["ABC-3"]  # no case folding (SQLite's LIKE would fold it)
    assert prefixed("a_") == ["a_b"]  # no wildcards: '_' and '%' are plain characters
    assert prefixed("a%") == ["a%b"]
    assert prefixed("☃") == ["☃-1"]
    assert prefixed("abc-10") == []
    assert prefixed("a\x00") == []
    assert prefixed("") == sorted(ids)
    assert [i.id for i in store.list_sessions(id_prefix="abc", limit=1, order="created")] == [
        "abc-1"
    ]
    with pytest.raises(InvalidArgumentError) as refused_arg:
        store.list_sessions(id_prefix=3)  # type: ignore[arg-type]
    assert refused_arg.value.argument == "id_prefix"


def test_an_id_prefix_finds_only_the_stores_tenant(store, backend):
    store.create_session("shared-1")
    with open_store(backend.url, schema=backend.schema, tenant="elsewhere") as other:
        other.create_session("shared-2")
        assert [i.id for i in other.list_sessions(id_prefix="shared")] == ["shared-2"]
    assert [i.id for i in store.list_sessions(id_prefix="shared")] == ["shared-1"]


# -- follow -----------------------------------------------------------------------------------


def test_follow_yields_committed_events_then_returns_after_the_timeout(store):
    writer = store.create_session("s1", seed=tool_turn_log())
    started = time.monotonic()
    got = [e.seq for e in store.follow("s1", after_seq=10, timeout=0.3)]
    elapsed = time.monotonic() - started
    assert got == [11, 12, 13]
    assert 0.3 <= elapsed < 5
    assert [e.seq for e in store.follow("s1", after_seq=writer.seq - 1, timeout=0.05)] == []


def test_follow_sees_appends_from_another_thread_in_order(store):
    writer = store.create_session("s1")
    say(writer)

    def write() -> None:
        for i in range(10):
            time.sleep(0.01)
            writer.append("todo/write", {"i": i})

    thread = threading.Thread(target=write)
    thread.start()
    seen = []
    for e in store.follow("s1", after_seq=0, timeout=5):
        seen.append((e.seq, e.data["i"]))
        if len(seen) == 10:
            break
    thread.join()
    assert seen == [(i + 1, i) for i in range(10)]
