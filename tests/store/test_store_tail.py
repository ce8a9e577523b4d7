"""SPEC §11.1: tail reads, ``messages``/``surface``/``surface_messages`` with ``last=N``."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_sql import (
    InvalidArgumentError,
    Session,
    SessionNotFoundError,
    SessionStore,
    SurfaceMessage,
)

from ..core.builders import Clock
from ..core.test_properties import run
from .store_builders import (
    WireLog,
    chunk,
    recorded,
    remove,
    reply,
    say,
    summarize,
    tables,
)
from .test_store_reading import VmSteps, sqlite_events_access

SYNC_ONLY = {
    "test_a_tail_read_costs_n_not_the_surface": (
        "records the statements on store.engine, the facade's sync companion, which the async "
        "API's reads do not use (test_async_store.py checks the async tail reads)"
    ),
}


def texts(messages: list[Any]) -> list[str]:
    return [m["content"][0]["text"] for m in messages]


def mixed(store: SessionStore, sid: str = "s1") -> Session:
    """Surface: a summary, messages, two usage-only replies (no message), one removal."""
    handle = store.create_session(sid)
    for text in "abcdef":
        say(handle, text)
    summary = summarize(handle, 0, 1, [0, 1])  # seq 6
    remove(handle, 3, 3, [3])  # seq 7
    reply(handle, None)  # seq 8: on the surface, projects to no message
    say(handle, "g")
    reply(handle, None)  # seq 10
    assert handle.surface.nodes == (summary, 2, 4, 5, 8, 9, 10)
    return handle


def test_tail_reads_are_the_final_entries(store: SessionStore) -> None:
    handle = mixed(store)
    full = store.messages("s1")
    assert texts(full) == ["summary", "c", "e", "f", "g"]
    nodes = store.surface_messages("s1")
    assert nodes == handle.surface_messages()  # the stored positions are the replay's
    assert nodes[0] == SurfaceMessage(0, 6, "user/message", full[0])
    assert [(n.pos, n.seq, n.type) for n in nodes[-3:]] == [
        (6, 8, "assistant/message"),
        (7, 9, "user/message"),
        (8, 10, "assistant/message"),
    ]
    assert nodes[-1].message is None
    for n in range(0, 10):
        want = full[-n:] if n else []
        assert store.messages("s1", last=n) == handle.messages(last=n) == want, n
        assert store.surface("s1", last=n) == (handle.surface.nodes[-n:] if n else ())
        assert store.surface_messages("s1", last=n) == (nodes[-n:] if n else [])
    huge = 2**70  # beyond any BIGINT: everything
    assert store.messages("s1", last=huge) == handle.messages(last=huge) == full
    assert store.surface_messages("s1", last=huge) == nodes
    assert store.surface("s1", last=huge) == handle.surface.nodes
    assert texts(store.messages("s1", last=2)) == ["f", "g"]  # the empty replies do not count
    assert store.surface("s1", last=2) == (9, 10)


def test_messages_last_reads_past_many_nodes_without_a_message(store: SessionStore) -> None:
    handle = store.create_session("s1")
    for text in "abc":
        say(handle, text)
    for _ in range(40):
        reply(handle, None)  # 40 trailing nodes that project to no message
    assert texts(store.messages("s1", last=2)) == ["b", "c"]
    assert texts(store.messages("s1", last=3)) == ["a", "b", "c"]
    assert texts(store.messages("s1", last=99)) == ["a", "b", "c"]
    assert store.messages("s1", last=2) == handle.messages(last=2)


@pytest.mark.parametrize("last", [-1, 1.5, "3", True, [2]])
def test_a_bad_last_is_refused(store: SessionStore, last: Any) -> None:
    handle = mixed(store)
    for read in (store.messages, store.surface, store.surface_messages):
        with pytest.raises(InvalidArgumentError, match="last") as info:
            read("s1", last=last)
        assert info.value.argument == "last"
    for local in (handle.messages, handle.surface_messages):
        with pytest.raises(InvalidArgumentError, match="last"):
            local(last=last)


@pytest.mark.parametrize("last", [None, 0, 3])
def test_tail_reads_of_a_missing_session(store: SessionStore, last: int | None) -> None:
    for read in (store.messages, store.surface, store.surface_messages):
        with pytest.raises(SessionNotFoundError):
            read("nope", last=last)
    store.create_session("empty")
    assert store.messages("empty", last=last) == []
    assert store.surface("empty", last=last) == ()
    assert store.surface_messages("empty", last=last) == []


def long_log(nodes: int) -> list[dict[str, Any]]:
    """``nodes`` user messages on the surface, each followed by a log-only chunk."""
    log = WireLog()
    for i in range(nodes):
        say(log, f"m{i}")
        chunk(log, str(i % 10))
    return log.events


def surface_rows_touched(store: SessionStore, statement: str, params: Any) -> dict[str, int]:
    """Rows read per table to run ``statement`` (PostgreSQL ``EXPLAIN ANALYZE``)."""
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).scalar()
        conn.rollback()
    if isinstance(plan, str):
        plan = json.loads(plan)
    touched: dict[str, int] = {}
    stack = [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        stack.extend(node.get("Plans", []))
        relation = node.get("Relation Name")
        if relation is not None:
            rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            rows += node.get("Rows Removed by Index Recheck", 0)
            touched[relation] = touched.get(relation, 0) + rows * node["Actual Loops"]
    return touched


@pytest.mark.requires("query_plans")
def test_a_tail_read_costs_n_not_the_surface(store: SessionStore, backend: Any) -> None:
    for sid, nodes in (("small", 25), ("big", 2000)):
        store.create_session(sid, seed=long_log(nodes))
    if backend.has("autoanalyze"):
        # Statistics, as autovacuum keeps them: without any the planner guesses a handful of
        # surface rows per session and reads the session's whole key range before its LIMIT
        # (as it would for the raw ``ORDER BY pos DESC LIMIT n``); the events it looks up
        # are the N rows either way, since the LIMIT sits in a subquery below the lookups.
        t = tables(store)
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            for table in (t.surface, t.events):
                conn.exec_driver_sql(f'ANALYZE "{table.schema}"."{table.name}"')
    last = 20
    cost: dict[str, Any] = {}
    for sid in ("small", "big"):
        with recorded(store.engine) as rec:
            got = store.messages(sid, last=last)
            seqs = store.surface(sid, last=last)
            nodes = store.surface_messages(sid, last=last)
        total = 25 if sid == "small" else 2000
        assert texts(got) == [f"m{i}" for i in range(total - last, total)]
        assert seqs == tuple(n.seq for n in nodes) == tuple(range(2 * total - 40, 2 * total, 2))
        cost[sid] = {"queries": rec.queries, "params": rec.parameters}
        if backend.has("vm_steps"):
            with VmSteps(store) as steps:
                store.messages(sid, last=last)
                store.surface(sid, last=last)
                store.surface_messages(sid, last=last)
            cost[sid]["vm"] = steps.count
    # One statement per read, the same ones whatever the length of the surface ...
    assert len(cost["big"]["queries"]) == 3
    assert cost["big"]["queries"] == cost["small"]["queries"]
    # ... each reading ``last`` surface rows and their events by primary key.
    for statement, params in zip(cost["big"]["queries"], cost["big"]["params"], strict=True):
        if backend.has("explain_json"):
            touched = surface_rows_touched(store, statement, params)
            assert touched["surface"] == last, statement
            assert touched.get("events", 0) <= 2 * last, statement
        else:
            for line in sqlite_events_access(store, statement, params):
                assert line.startswith("SEARCH events USING"), line
                assert "PRIMARY KEY (session_key=? AND seq=?)" in line, line
            with store.engine.connect() as conn:
                plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            surface_lines = [r[-1] for r in plan if " surface " in f" {r[-1]} "]
            assert surface_lines and all(x.startswith("SEARCH surface") for x in surface_lines)
    if backend.has("vm_steps"):  # the work done does not grow with the surface
        assert cost["big"]["vm"] <= cost["small"]["vm"] * 1.2


_ids = itertools.count()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_tail_reads_are_slices_of_the_full_reads(store: SessionStore, draw: Any) -> None:
    """Random sessions with replaces, prunes and removals, appended through a stored handle."""
    local = Session("local", clock=Clock())
    run(draw, local, check_refusals=False)
    sid = f"p{next(_ids)}"
    handle = store.create_session(sid)
    for event in local.events:
        handle.append(
            event.type,
            event.data,
            surface_op=event.surface_op,
            source_event_seqs=event.source_event_seqs,
            ignorable=event.ignorable,
        )
    full, seqs, nodes = store.messages(sid), store.surface(sid), store.surface_messages(sid)
    assert full == local.messages() and seqs == local.surface.nodes
    assert nodes == handle.surface_messages()
    sizes = {0, 1, 2, len(full), len(nodes), len(nodes) + 1}
    sizes.add(draw.draw(st.integers(0, len(nodes) + 1)))
    for n in sorted(sizes):
        assert store.messages(sid, last=n) == local.messages(last=n) == (full[-n:] if n else [])
        assert store.surface(sid, last=n) == (seqs[-n:] if n else ())
        assert store.surface_messages(sid, last=n) == (nodes[-n:] if n else [])
