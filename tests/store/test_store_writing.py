"""Writing through the store: create, append, append_many, replace, concurrency (SPEC §8.3)."""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import update

from session_sql import (
    ConcurrencyError,
    CorruptSessionError,
    ReentrantAppendError,
    Replace,
    Session,
    SessionNotFoundError,
    SessionStore,
    StoreError,
    SurfaceError,
    fold_surface,
)

from .store_builders import (
    answer,
    begin_step,
    begin_turn,
    capture,
    chunk,
    dump_tables,
    event_rows,
    execute,
    failing_trigger,
    key_of,
    recorded,
    refused,
    reply,
    say,
    session_row,
    summarize,
    surface_table,
    tables,
    tool_result_data,
    tool_turn,
    tool_turn_log,
    user_message,
    view,
    wires,
)

SYNC_ONLY = {
    "test_observers_run_after_the_commit_and_cannot_undo_it": (
        "an observer is synchronous: on the async API it cannot call the store and wait"
    ),
    "test_a_refresh_with_nothing_new_reads_the_session_row_only": (
        "the async store's refresh runs on its own engine (its statements: test_store_round_trips)"
    ),
}


BATCH_SIZES = [1, 2, 12, 300]
"""Batches of every form: one event, a few (the one query), a dozen (copied on a distributed
store: ``appending.DISTRIBUTED_COPY_MIN_EVENTS``), hundreds (copied everywhere)."""


def assert_consistent(store: SessionStore, handle: Session) -> None:
    """The handle, the side table, the session row and a fresh replay all agree."""
    sid = handle.id
    fold = fold_surface(handle.events)
    assert handle.surface.nodes == fold.nodes
    assert store.surface(sid) == fold.nodes
    assert store.messages(sid) == handle.messages()
    assert wires(store.events(sid)) == wires(handle.events)
    row = session_row(store, sid)
    assert row.head_seq == handle.seq - 1
    assert row.replace_generation == handle.surface.replace_generation == len(fold.replacements)
    report = store.verify(sid)
    assert report.ok, report.problems


# -- create_session ---------------------------------------------------------------------------


def test_create_session_without_seed_writes_only_the_row(store):
    handle = store.create_session("s1")
    assert (handle.id, handle.seq, handle.first_live_seq) == ("s1", 0, 0)
    row = session_row(store, "s1")
    assert (row.head_seq, row.surface_next_pos, row.replace_generation) == (-1, 0, 0)
    assert (row.format_version, row.parent_session, row.inherited_event_count) == (0, None, 0)
    assert row.created_at == handle.header["createdAt"]
    assert row.header == dict(handle.header)
    assert event_rows(store, "s1") == []
    assert surface_table(store, "s1") == []
    assert store.verify("s1").ok


def test_create_session_generates_an_id(store):
    handle = store.create_session()
    assert handle.id and store.load_session(handle.id).id == handle.id


def test_create_session_with_seed_writes_seed_and_marker(store):
    seed = tool_turn_log(2)
    handle = store.create_session("s1", seed=seed)
    assert handle.seq == len(seed) + 1
    assert handle.first_live_seq == len(seed)  # SPEC §7.1: the seed length
    marker = handle.events[-1]
    assert (marker.type, marker.seq, marker.data) == ("session/end-seed", len(seed), {})
    stored = wires(store.events("s1"))
    assert stored[: len(seed)] == seed
    assert stored[-1] == marker.to_json()
    assert_consistent(store, handle)


@pytest.mark.requires("triggers")
def test_seed_and_marker_are_one_transaction(store):
    store.create_session("other", seed=tool_turn_log())
    with (
        failing_trigger(store, "events", "NEW.type = 'session/end-seed'"),
        refused(store, StoreError, match="injected failure"),
    ):
        store.create_session("s1", seed=tool_turn_log())
    store.create_session("s1", seed=tool_turn_log())  # the id is still free
    assert store.verify("s1").ok


def test_create_session_with_empty_seed_writes_the_marker(store):
    handle = store.create_session("s1", seed=[])
    assert [(e.type, e.seq) for e in store.events("s1")] == [("session/end-seed", 0)]
    assert handle.first_live_seq == 0
    assert_consistent(store, handle)


def test_seed_ending_in_a_marker_gets_no_second_one(store):
    seed = tool_turn_log()
    seed.append({"type": "session/end-seed", "seq": len(seed), "time": 1, "data": {}})
    handle = store.create_session("s1", seed=seed)
    assert wires(store.events("s1")) == seed
    assert handle.seq == len(seed)


# -- append -----------------------------------------------------------------------------------


def test_append_writes_the_event_row_and_its_surface_row(store):
    handle = store.create_session("s1")
    before = session_row(store, "s1")
    tool_turn(handle)
    handle.append("todo/write", {"items": []})
    handle.append("x/private", {"k": 1}, ignorable=True)
    rows = event_rows(store, "s1")
    assert [r.seq for r in rows] == list(range(handle.seq))
    for row, event in zip(rows, handle.events, strict=True):
        assert (row.type, row.time, row.data) == (event.type, event.time, event.data)
        wire = event.to_json()
        assert row.surface_op == (json.dumps(wire["surfaceOp"]) if "surfaceOp" in wire else None)
        assert (
            None if row.source_event_seqs is None else json.loads(row.source_event_seqs)
        ) == wire.get("sourceEventSeqs")
        assert row.ignorable is (True if event.ignorable else None)
    row = session_row(store, "s1")
    assert row.head_seq == handle.seq - 1
    assert row.surface_next_pos == len(handle.surface.nodes)
    assert row.updated_at >= before.updated_at
    assert surface_table(store, "s1") == list(enumerate(handle.surface.nodes))
    assert_consistent(store, handle)


def test_append_many_returns_the_committed_events(store):
    handle = store.create_session("s1")
    say(handle)
    events = handle.append_many(
        [
            {"type": "turn/start", "data": {"turn": 1}},
            {"type": "user/message", "data": user_message(id="m"), "surface_op": "append"},
            {"type": "todo/write", "data": {}},
        ]
    )
    assert [(e.type, e.seq) for e in events] == [
        ("turn/start", 1),
        ("user/message", 2),
        ("todo/write", 3),
    ]
    assert tuple(events) == handle.events[1:]
    assert_consistent(store, handle)


def test_append_many_of_nothing_writes_nothing(store):
    handle = store.create_session("s1")
    say(handle)
    before = dump_tables(store)
    assert handle.append_many([]) == []
    assert dump_tables(store) == before


@pytest.mark.requires("triggers")
@pytest.mark.parametrize("failing", ["events", "surface"])
def test_a_failed_transaction_leaves_no_partial_state(store, failing):
    """A batch is one transaction: the database refusing its last row undoes all of it."""
    handle = store.create_session("s1", seed=tool_turn_log())
    say(handle)
    batch = [
        {"type": "user/message", "data": user_message(id="x"), "surface_op": "append"},
        {"type": "todo/write", "data": {}},
        {"type": "user/message", "data": user_message(id="y"), "surface_op": "append"},
    ]
    last = handle.seq + 2
    column = "seq" if failing == "events" else "event_seq"
    with (
        failing_trigger(store, failing, f"NEW.{column} = {last}"),
        refused(store, StoreError, handle, match="injected failure"),
    ):
        handle.append_many(batch)
    handle.append_many(batch)  # the handle is still usable
    assert_consistent(store, handle)


def test_a_vetoing_validator_writes_nothing(store):
    handle = store.create_session("s1", seed=tool_turn_log())

    class VetoError(Exception):
        pass

    def veto(session, candidate):
        if candidate.type == "todo/write":
            raise VetoError(candidate.seq)

    handle.add_validator(veto)
    with refused(store, VetoError, handle):
        handle.append_many([{"type": "turn/start", "data": {"turn": 2}}, {"type": "todo/write"}])
    handle.append("turn/start", {"turn": 2})
    assert_consistent(store, handle)


def test_observers_run_after_the_commit_and_cannot_undo_it(store, caplog):
    handle = store.create_session("s1")
    seen = []

    def observer(session, event):
        seen.append((event.seq, [e.seq for e in store.events(session.id)]))
        session.append("todo/write", {})  # reentrant: refused, logged, swallowed

    handle.subscribe(observer)
    with caplog.at_level(logging.WARNING, logger="session_sql"):
        event = say(handle)
    assert seen == [(0, [0])]  # the event was durable when the observer ran
    assert handle.seq == 1
    assert [e.seq for e in store.events("s1")] == [0]
    assert any(isinstance(r.exc_info[1], ReentrantAppendError) for r in caplog.records)
    assert event == 0


# -- the surface table ------------------------------------------------------------------------


def test_replace_rewrites_the_surface_table(store):
    handle = store.create_session("s1")
    a, b, c, d = (say(handle, t) for t in "abcd")
    assert surface_table(store, "s1") == [(0, a), (1, b), (2, c), (3, d)]
    s1 = summarize(handle, b, c, sources=[b, c])
    assert handle.surface.nodes == (a, s1, d)
    assert surface_table(store, "s1") == [(0, a), (1, s1), (3, d)]  # start keeps its position
    row = session_row(store, "s1")
    assert (row.surface_next_pos, row.replace_generation) == (4, 1)
    e = say(handle, "e")
    assert surface_table(store, "s1") == [(0, a), (1, s1), (3, d), (4, e)]
    s2 = summarize(handle, a, d, sources=[a, s1, d])
    assert surface_table(store, "s1") == [(0, s2), (4, e)]
    assert [m["content"][0]["text"] for m in store.messages("s1")] == ["summary", "e"]
    assert session_row(store, "s1").replace_generation == 2
    assert_consistent(store, handle)


def test_replace_endpoints_are_positions_not_numbers(store):
    handle = store.create_session("s1")
    a, b, c = say(handle), say(handle), say(handle)
    s = summarize(handle, a, b, sources=[a, b])  # surface (s, c): numbers now decrease
    assert handle.surface.nodes == (s, c) and s > c
    with refused(store, SurfaceError, handle, match="reversed"):
        summarize(handle, c, s, sources=[s, c])
    t = summarize(handle, s, c, sources=[s, c])
    assert store.surface("s1") == (t,)
    assert surface_table(store, "s1") == [(0, t)]
    assert_consistent(store, handle)


def test_replace_and_appends_in_one_batch(store):
    handle = store.create_session("s1")
    a, b = say(handle), say(handle)
    events = handle.append_many(
        [
            {"type": "user/message", "data": user_message(id="c"), "surface_op": "append"},
            {
                "type": "user/message",
                "data": user_message("summary", id="s"),
                "surface_op": Replace(a, 2),
                "source_event_seqs": [a, b, 2],
            },
            {"type": "user/message", "data": user_message(id="d"), "surface_op": "append"},
        ]
    )
    assert [e.seq for e in events] == [2, 3, 4]
    assert surface_table(store, "s1") == [(0, 3), (3, 4)]
    assert_consistent(store, handle)


def test_tool_result_pruning_is_reflected_in_the_table(store):
    handle = store.create_session("s1")
    seqs = tool_turn(handle)
    long = seqs["tool/result"]
    pruned = answer(
        handle,
        "c1",
        "[pruned]",
        surface_op=Replace(long, long),
        sources=[long],
    )
    nodes = handle.surface.nodes
    assert long not in nodes and pruned in nodes
    assert (nodes.index(pruned), pruned) in surface_table(store, "s1")
    assert all(seq != long for _, seq in surface_table(store, "s1"))
    texts = [m["content"][0] for m in store.messages("s1") if m["role"] == "user"]
    assert texts[-1]["content"] == [{"type": "text", "text": "[pruned]"}]
    assert store.load_session("s1").events[long].data == handle.events[long].data  # log kept
    assert_consistent(store, handle)


def test_a_pruning_that_changes_more_than_content_is_refused(store):
    handle = store.create_session("s1")
    long = tool_turn(handle)["tool/result"]
    data = tool_result_data("c1", "[pruned]", id="another-id")
    with refused(store, SurfaceError, handle, match="only the result block"):
        handle.append("tool/result", data, surface_op=Replace(long, long), source_event_seqs=[long])


def test_empty_assistant_messages_are_on_the_surface_but_not_in_messages(store):
    handle = store.create_session("s1")
    begin_turn(handle)
    say(handle)
    begin_step(handle)
    usage_only = reply(handle, None)
    assert usage_only in store.surface("s1")
    assert len(store.messages("s1")) == 1
    assert_consistent(store, handle)


# -- optimistic concurrency -------------------------------------------------------------------


@pytest.mark.parametrize("size", BATCH_SIZES)
def test_a_stale_handles_batch_loses_whole(store, size):
    """A batch from a handle that is behind loses whichever way it would go in (one query, a
    pipeline, ``COPY``): nothing of it is written, and after ``refresh`` it goes in whole."""
    first = store.create_session("s1")
    second = store.open_session("s1")
    say(first, "first wins")
    batch = [
        {"type": "user/message", "data": user_message(f"m{i}", id=f"m{i}"), "surface_op": "append"}
        if i % 3 == 0
        else {"type": "todo/write", "data": {"i": i}}
        for i in range(size)
    ]
    with refused(store, ConcurrencyError, second):
        second.append_many(batch)
    assert len(second.refresh()) == 1
    assert [ev.seq for ev in second.append_many(batch)] == list(range(1, 1 + size))
    assert_consistent(store, second)


def test_a_stale_handle_gets_concurrency_error_and_can_retry(store):
    first = store.create_session("s1", seed=tool_turn_log())
    second = store.open_session("s1")
    say(first, "first wins")
    with refused(store, ConcurrencyError, second) as info:
        say(second, "second loses")
    assert info.value.session_id == "s1"
    assert info.value.expected == first.seq - 2
    new = second.refresh()
    assert [e.seq for e in new] == [first.seq - 1]
    assert view(second) == view(first)
    say(second, "second retries")
    assert second.refresh() == []
    first.refresh()
    assert_consistent(store, second)
    assert view(first) == view(second)


def test_refresh_picks_up_replaces(store):
    writer = store.create_session("s1")
    reader = store.open_session("s1")
    a, b = say(writer), say(writer)
    summarize(writer, a, b, sources=[a, b])
    chunk(writer)
    assert len(reader.refresh()) == 4
    assert view(reader) == view(writer)
    say(reader)
    assert_consistent(store, reader)


def test_a_refresh_with_nothing_new_reads_the_session_row_only(store):
    # Sync only (SYNC_ONLY): the async store's refresh runs on its own engine (its statements:
    # test_store_round_trips).
    writer = store.create_session("s1")
    reader = store.open_session("s1")
    with recorded(store.engine) as nothing_new:
        assert reader.refresh() == []
    say(writer)
    with recorded(store.engine) as one_new:
        assert [e.seq for e in reader.refresh()] == [0]
    assert len(nothing_new.queries) == 1 and "sessions" in nothing_new.queries[0]
    assert len(one_new.queries) == 2  # the row, then the events past the handle's log
    assert view(reader) == view(writer)


def test_a_deleted_session_refuses_appends(store):
    handle = store.create_session("s1", seed=tool_turn_log())
    store.delete_session("s1")
    with refused(store, SessionNotFoundError, handle):
        say(handle)
    with refused(store, SessionNotFoundError, handle):
        handle.refresh()


def test_refresh_refuses_stored_rows_that_do_not_replay(store):
    handle = store.create_session("s1")
    other = store.open_session("s1")
    say(handle)
    chunk(handle)
    e = tables(store).events
    execute(store, update(e).where(e.c.seq == 1).values(data={"turn": "one"}))
    before = capture(other)
    with pytest.raises(CorruptSessionError, match="seq 1") as info:
        other.refresh()
    assert (info.value.session_id, info.value.seq) == ("s1", 1)
    assert capture(other) == before


@pytest.mark.parametrize("size", BATCH_SIZES)
def test_a_batch_refuses_rows_already_past_the_head(store, size):
    """A batch is one insert statement on PostgreSQL (column arrays): a row edited in past the
    head refuses the whole batch, and a single event too (its insert fails on the taken key
    inside the transaction that carries the commit, so nothing is kept)."""
    handle = store.create_session("s1")
    say(handle)
    e = tables(store).events
    stray = {
        "session_key": key_of(store, "s1"),
        "seq": 1 + size - 1,
        "type": "todo/write",
        "time": 0,
    }
    execute(store, e.insert().values(**stray, tenant=store.tenant, data=[]))
    batch = [{"type": "todo/write", "data": {"i": i}} for i in range(size)]
    with refused(store, CorruptSessionError, handle, match="past the session's head"):
        handle.append_many(batch)
    execute(
        store,
        e.delete().where(e.c.session_key == key_of(store, "s1"), e.c.seq == stray["seq"]),
    )
    assert [ev.seq for ev in handle.append_many(batch)] == list(range(1, 1 + size))
    assert [r.data for r in event_rows(store, "s1")[1:]] == [{"i": i} for i in range(size)]
    assert_consistent(store, handle)


@pytest.mark.parametrize("size", BATCH_SIZES)
def test_a_batch_refuses_surface_rows_already_past_the_head(store, size):
    """A surface position taken past ``surface_next_pos`` refuses the batch whichever way its
    surface rows go in (a big batch's by ``COPY`` on PostgreSQL), and nothing is kept."""
    handle = store.create_session("s1")
    say(handle)
    off = handle.append("todo/write", {"off": "the surface"}).seq
    sf = tables(store).surface
    stray = {
        "tenant": store.tenant,
        "session_key": key_of(store, "s1"),
        "pos": size,
        "event_seq": off,
    }
    execute(store, sf.insert().values(**stray))
    batch = [
        {"type": "user/message", "data": user_message(f"m{i}", id=f"m{i}"), "surface_op": "append"}
        for i in range(size)
    ]
    with refused(store, CorruptSessionError, handle, match="past the session's head"):
        handle.append_many(batch)
    execute(store, sf.delete().where(sf.c.session_key == key_of(store, "s1"), sf.c.pos == size))
    assert [ev.seq for ev in handle.append_many(batch)] == list(range(2, 2 + size))
    assert_consistent(store, handle)


def test_a_big_batch_appends_then_replaces_in_order(store):
    """Surface rows inserted in a batch (by ``COPY`` on PostgreSQL) and a replace of some of
    them later in the same batch: the replace runs on the rows just inserted."""
    handle = store.create_session("s1")
    say(handle)
    batch = [
        {"type": "user/message", "data": user_message(f"m{i}", id=f"m{i}"), "surface_op": "append"}
        for i in range(40)
    ]
    batch.append(
        {
            "type": "user/message",
            "data": user_message("summary", id="sum"),
            "surface_op": Replace(5, 30),
            "source_event_seqs": list(range(5, 31)),
        }
    )
    batch += [{"type": "todo/write", "data": {"i": i}} for i in range(3)]
    handle.append_many(batch)
    assert len(handle.surface.nodes) == 1 + 40 - 26 + 1
    assert_consistent(store, handle)
