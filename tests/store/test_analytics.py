"""The analytics views answer from the log, and every view, recipe and stats query scales.

Plans, not times, are asserted (this machine is shared): on 200k generated events, after the
ANALYZE a bulk import runs, no query may look events up by scanning them once per row.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from session_sql import open_store
from session_sql._store import transfer as transfer_module
from session_sql._store.database import analyze, read_tx
from session_sql._store.schema import tables_for
from session_sql.cli.demo import record_demo
from tests.builders import begin_turn, call_tool, end_turn, reply, say
from tests.docs.test_docs_sql import recipes
from tests.store.analytics_data import TURN, bulk_session, write_jsonl


def _rows(engine: Engine, backend: Any, sql: str) -> list[tuple[Any, ...]]:
    with read_tx(engine) as conn:
        if backend.has("schema"):
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{backend.schema}"')
        return [tuple(r) for r in conn.exec_driver_sql(sql)]


# --------------------------------------------------------------------------------------------
# What the views say about the demo session


def test_views_answer_from_the_log(backend, engine: Engine):
    run = record_demo(backend.url, schema=backend.schema)
    with open_store(backend.url, schema=backend.schema) as store:
        log = list(store.events(run.session_id))
    by_seq = {e.seq: e for e in log}
    sid = run.session_id

    calls = _rows(
        engine,
        backend,
        "SELECT call_seq, call_id, tool, arguments, turn, result_seq, is_error, latency_ms "
        f"FROM tool_calls WHERE session_id = '{sid}' ORDER BY call_seq",
    )
    expected_calls = [e for e in log if e.type == "tool/call"]
    assert [c[0] for c in calls] == [e.seq for e in expected_calls]
    for row, call in zip(calls, expected_calls, strict=True):
        assert row[1:5] == (
            call.data["callId"],
            call.data["name"],
            call.data["arguments"],
            call.data["turn"],
        )
        [result] = [
            e
            for e in log
            if e.type == "tool/result"
            and e.surface_op == "append"
            and e.data["message"]["source"]["callId"] == call.data["callId"]
        ]
        block = result.data["message"]["content"][0]
        assert row[5] == result.seq
        assert bool(row[6]) is bool(block.get("isError"))
        assert row[7] == result.time - call.time

    turns = _rows(
        engine,
        backend,
        "SELECT turn, start_seq, end_seq, duration_ms, reason, user_messages, "
        "assistant_messages, tool_calls, tool_results "
        f"FROM turns WHERE session_id = '{sid}' ORDER BY start_seq",
    )
    starts = [e for e in log if e.type == "turn/start"]
    assert [t[1] for t in turns] == [e.seq for e in starts]
    for row in turns:
        end = by_seq[row[2]]
        assert end.type == "turn/end" and end.data["turn"] == row[0]
        assert row[3] == end.time - by_seq[row[1]].time
        assert row[4] == end.data["reason"]["kind"]
        inside = [e.type for e in log if row[1] < e.seq < row[2]]
        assert row[5:] == tuple(
            inside.count(t)
            for t in ("user/message", "assistant/message", "tool/call", "tool/result")
        )

    replacements = _rows(
        engine,
        backend,
        "SELECT session_id, seq, op, reason, source_events, shadowed_events, bytes_before, "
        "bytes_after FROM replacements WHERE inherited = FALSE ORDER BY session_id, seq",
    )
    assert {(r[0], r[1]) for r in replacements} == {
        (sid, run.prune_seq),
        (sid, run.summary_seq),
        (run.fork_id, run.forget_seq),
    }
    for row in replacements:
        if row[1] == run.summary_seq and row[0] == sid:
            assert row[2] == "replace" and row[5] == len(run.summary_shadowed)
            assert row[6] > row[7] > 0
        if row[0] == run.fork_id:
            assert row[2:4] == ("remove", "the user said: forget that")
            assert row[5] == len(run.forgotten) and row[7] == 0

    seqs = _rows(
        engine,
        backend,
        f"SELECT seq, ordinal, source_seq FROM source_event_seqs WHERE session_id = '{sid}' "
        "ORDER BY seq, ordinal",
    )
    expected = [(e.seq, i, s) for e in log for i, s in enumerate(e.source_event_seqs or ())]
    assert seqs == expected and expected


def test_a_turn_ends_at_its_own_turn_end_and_counts_up_to_the_next_boundary(
    backend, engine: Engine
):
    # Both dialects' turns views (SQLite's has no window function) must agree on the edges:
    # events between a turn/end and the next turn/start belong to no turn, a turn/end of
    # another turn number ends nothing (but still bounds the counts), the last turn is open.
    with open_store(backend.url, schema=backend.schema) as store:
        h = store.create_session("edges")
        begin_turn(h, 1)  # 0
        say(h)  # 1
        call_tool(h, "c1")  # 2
        end_turn(h, 1)  # 3
        say(h)  # 4: between turns
        begin_turn(h, 2)  # 5
        reply(h, turn=2)  # 6
        end_turn(h, 3, kind="aborted")  # 7: not turn 2's end
        say(h)  # 8: after that boundary
        begin_turn(h, 3)  # 9
        say(h)  # 10
        reply(h, turn=3)  # 11: the log ends inside turn 3
    rows = _rows(
        engine,
        backend,
        "SELECT turn, start_seq, end_seq, reason, duration_ms, user_messages, "
        "assistant_messages, tool_calls, tool_results FROM turns "
        "WHERE session_id = 'edges' ORDER BY start_seq",
    )
    assert [r[:4] + r[5:] for r in rows] == [
        (1, 0, 3, "completed", 1, 0, 1, 0),
        (2, 5, None, None, 0, 1, 0, 0),
        (3, 9, None, None, 1, 1, 0, 0),
    ]
    assert rows[0][4] is not None and rows[0][4] >= 0
    assert rows[1][4] is None and rows[2][4] is None


# --------------------------------------------------------------------------------------------
# Plans on 200k events

EVENTS = 200_000
VIEW_QUERIES = {
    "tool_calls": "SELECT tool, COUNT(*), SUM(CASE WHEN is_error THEN 1 ELSE 0 END), "
    "AVG(latency_ms) FROM tool_calls GROUP BY tool",
    "tool_calls one session": "SELECT COUNT(*) FROM tool_calls WHERE session_id = 'big'",
    "turns": "SELECT COUNT(*), SUM(duration_ms), SUM(tool_calls) FROM turns",
    "turns one session": "SELECT COUNT(*), SUM(duration_ms), SUM(user_messages), "
    "SUM(assistant_messages), SUM(tool_calls), SUM(tool_results) FROM turns "
    "WHERE session_id = 'big'",
    "replacements": "SELECT COUNT(*), SUM(bytes_before - bytes_after) FROM replacements",
    # What a replacement shadowed, one session's: a primary-key search per cited seq, never a
    # pass over the session per replacement.
    "replacements one session": "SELECT * FROM replacements WHERE session_id = 'big'",
    "source_event_seqs": "SELECT COUNT(*) FROM source_event_seqs WHERE source_seq = 5",
}
# Each view asked about the small session (0.25% of the events): every read of events must be
# narrowed to that session by an index, never a pass over the other session's rows.
SMALL_SESSION_QUERIES = {
    "tool_calls small session": "SELECT * FROM tool_calls WHERE session_id = 'small'",
    "turns small session": "SELECT * FROM turns WHERE session_id = 'small'",
    "replacements small session": "SELECT * FROM replacements WHERE session_id = 'small'",
    "source_event_seqs small session": "SELECT * FROM source_event_seqs WHERE session_id = 'small'",
}


def _sqlite_problems(plan: list[str]) -> list[str]:
    """More than the one driving scan of a table, or an index built per query."""
    scans = [
        line
        for line in plan
        if re.search(r"\bSCAN \w+\b", line)
        # Scans of a subquery's or a CTE's rows (the types stats lists, the per-call and
        # per-reply rows it groups) and of the sessions table are not scans of events.
        and not re.search(
            r"VIRTUAL TABLE|SCAN \(subquery|SCAN (t|s|sessions|replacements|event_types|calls"
            r"|replies)\b",
            line,
        )
        and "CONSTANT ROW" not in line
    ]
    problems = [line for line in plan if "AUTOMATIC" in line]
    if len(scans) > 1:
        problems.extend(scans)
    return problems


def _pg_problems(node: dict[str, Any], inner: bool = False) -> list[str]:
    """A sequential scan of events on the inner side of a nested loop (over more than a few
    outer rows) or in a subplan: a scan repeated per row, quadratic in the log."""
    kind = node["Node Type"]
    out = []
    if inner and kind == "Seq Scan" and node.get("Relation Name") == "events":
        out.append(f"seq scan of events ({node.get('Alias')}) repeated per outer row")
    children = node.get("Plans", [])
    for i, child in enumerate(children):
        # Repeating a scan once per session row (a handful) is bounded; per event row it is not.
        nested_inner = kind == "Nested Loop" and i == 1 and children[0]["Plan Rows"] > 10
        sub = child.get("Parent Relationship") == "SubPlan"
        hashed = kind == "Hash"
        out.extend(_pg_problems(child, (inner or nested_inner or sub) and not hashed))
    return out


def _sqlite_unnarrowed(plan: list[str]) -> list[str]:
    """Reads of events whose search does not name the session (its ``session_key``): through
    an events index, or through the primary key (``events`` has no rowid: its rows are the
    primary key's entries), under any alias the views, recipes and stats give events."""
    reads = [line for line in plan if re.search(r"\b(SCAN|SEARCH) \w+", line)]
    events = [
        line
        for line in reads
        if "INDEX ix_events_" in line
        or re.fullmatch(r"\W*(SCAN|SEARCH) (b|c|e|m|r|t|x|ns|ne|events)\b.*", line)
    ]
    return [line for line in events if "session_key=" not in line]


def _pg_unnarrowed(node: dict[str, Any]) -> list[str]:
    """Scans of events that no index condition on the session narrows."""
    out = []
    if node.get("Relation Name") == "events":
        cond = str(node.get("Index Cond", "")) + str(node.get("Recheck Cond", ""))
        if "session_key" not in cond:
            out.append(f"{node['Node Type']} on events ({node.get('Alias')})")
    for child in node.get("Plans", []):
        out.extend(_pg_unnarrowed(child))
    return out


def _explain(engine: Engine, backend: Any, sql: str, params: Any = None) -> tuple[str, list[str]]:
    with read_tx(engine) as conn:
        if backend.has("explain_query_plan"):
            raw = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params or ())
            lines = [str(r[3]) for r in raw]
            return "\n".join(lines), _sqlite_problems(lines)
        conn.exec_driver_sql(f'SET LOCAL search_path TO "{backend.schema}"')
        [[plan]] = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql, params or {}).all()
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return json.dumps(plan), _pg_problems(plan[0]["Plan"])


def _assert_narrowed(engine: Engine, backend: Any, queries: Any) -> None:
    """Each query (``(name, sql)`` or ``(name, sql, params)``) plans without problems and
    reads events only by ranges that name the session."""
    unnarrowed = {}
    for name, sql, *params in queries:
        plan, problems = _explain(engine, backend, sql, *params)
        assert not problems, (name, problems)
        if backend.has("explain_query_plan"):
            missed = _sqlite_unnarrowed(plan.split("\n"))
        else:
            missed = _pg_unnarrowed(json.loads(plan)[0]["Plan"])
        if missed:
            unnarrowed[name] = missed
    assert not unnarrowed, unnarrowed


# One-turn sessions beside the two above, as a store holds many. Events name their session by
# session_key, and a filter on a session's id reaches them through the sessions row, so
# PostgreSQL estimates one session's events as the log over the number of distinct keys: in a
# store of two sessions any one of them looks like half the log (and is hashed, not searched).
OTHERS = 10


@pytest.fixture
def big(backend, engine: Engine) -> Engine:
    open_store(backend.url, schema=backend.schema).close()
    bulk_session(engine, backend.table_schema, "big", EVENTS)
    bulk_session(engine, backend.table_schema, "small", 32 * TURN)
    for n in range(OTHERS):
        bulk_session(engine, backend.table_schema, f"other-{n}", TURN)
    t = tables_for(backend.table_schema)
    analyze(engine, [t.sessions, t.events, t.surface])
    return engine


def test_views_recipes_and_stats_use_the_indexes(backend, big: Engine):
    plans: dict[str, tuple[str, list[str]]] = {}
    for name, sql in VIEW_QUERIES.items():
        plans[name] = _explain(big, backend, sql)
    for name, dialect, sql in recipes():
        if backend.speaks(dialect):
            plans[f"recipe {name}"] = _explain(big, backend, sql)

    # The statements stats() runs, captured as the driver gets them, explained the same way.
    captured: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("SELECT", "WITH")) and "events" in statement:
            captured.append((statement, parameters))

    with open_store(backend.url, schema=backend.schema) as store:
        engine = store._ctx.engine
        event.listen(engine, "before_cursor_execute", capture)
        try:
            stats = store.stats()
            one = store.stats("big")
        finally:
            event.remove(engine, "before_cursor_execute", capture)
    assert stats.events == EVENTS + 32 * TURN + OTHERS * TURN
    assert {t.tool: t.calls for t in one.tools} == dict.fromkeys(
        ("shell", "read_file", "edit_file", "search", "web_fetch"), EVENTS // TURN // 5
    )
    assert captured
    for i, (statement, parameters) in enumerate(captured):
        plans[f"stats {i}"] = _explain(big, backend, statement, parameters)

    bad = {name: problems for name, (_, problems) in plans.items() if problems}
    assert not bad, bad

    _assert_narrowed(big, backend, SMALL_SESSION_QUERIES.items())
    call_index = "ix_events_session_key_call_id"
    if backend.has("explain_query_plan"):
        # SQLite joins by nested loops only: the inner side must be an index search.
        for name in ("tool_calls", "tool_calls one session", "recipe tool-error-rate"):
            assert call_index in plans[name][0], (name, plans[name][0])
        # Each turn finds its next turn/start and turn/end by one search of a session's range
        # (the turn-bounds index or the primary key, as the planner's statistics make it
        # cheaper), and every read of events in the view names the session.
        for name in ("turns", "turns one session"):
            lines = plans[name][0].split("\n")
            assert not _sqlite_unnarrowed(lines), (name, plans[name][0])
            bounds = [
                line
                for line in lines
                if re.search(r"SEARCH x USING .*\(session_key=\? AND seq>\?\)", line)
            ]
            assert len(bounds) == 2, (name, plans[name][0])
        # Every stats statement reads events as ranges of sessions (events has no rowid: a
        # range of its primary key is the rows themselves, read in order), never row by row
        # through another index or across sessions; types are counted over those ranges.
        stats_plans = {name: plan for name, (plan, _) in plans.items() if name.startswith("stats")}
        assert len(stats_plans) == 2 * 5, stats_plans.keys()  # 5 statements each
        for name, plan in stats_plans.items():
            assert not _sqlite_unnarrowed(plan.split("\n")), (name, plan)
            assert "sqlite_autoindex_events" not in plan, (name, plan)
        counts = [
            plans[f"stats {i}"][0]
            for i, (statement, _) in enumerate(captured)
            if "GROUP BY events.type" in statement
        ]
        assert len(counts) == 2 and all(
            "SEARCH events USING PRIMARY KEY (session_key=?" in p for p in counts
        ), counts
    else:
        # PostgreSQL may hash the whole store (linear); one session goes through the index.
        assert (
            call_index in plans["tool_calls one session"][0]
            or "Hash" in (plans["tool_calls one session"][0])
        )
        # The turns view walks the turn boundaries only, through their partial index.
        for name in ("turns", "turns one session"):
            assert "ix_events_turn_bounds" in plans[name][0], (name, plans[name][0])


def test_the_benchmark_session_imports_as_the_generated_one(backend, engine: Engine, tmp_path):
    # scripts/bench_analytics.py fills the store through import_jsonl with write_jsonl's file;
    # it must hold the same log as bulk_session's rows (what the plan test above reads).
    path = tmp_path / "bench.jsonl"
    write_jsonl(path, "imported", 100 * TURN)
    with open_store(backend.url, schema=backend.schema) as store:
        store.import_jsonl(path)
        assert store.verify("imported").ok
        bulk_session(engine, backend.table_schema, "generated", 100 * TURN)
        imported = store.stats("imported").model_dump(exclude={"session_id"})
        generated = store.stats("generated").model_dump(exclude={"session_id"})
    assert imported == generated
    assert imported["replacements"] == {"tool/result": 100 // 8}
    assert {t["tool"]: t["errors"] for t in imported["tools"]}["shell"] == 100 // 10


# --------------------------------------------------------------------------------------------
# Statistics after an import


def _analyzed(backend: Any, engine: Engine) -> bool:
    with read_tx(engine) as conn:
        if not backend.has("autoanalyze"):  # the statistics ANALYZE keeps in sqlite_stat1
            names = conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE name = 'sqlite_stat1'"
            ).all()
            return bool(names) and bool(
                conn.exec_driver_sql("SELECT 1 FROM sqlite_stat1 WHERE tbl = 'events'").all()
            )
        n = conn.execute(
            text(
                "SELECT COUNT(*) FROM pg_stat_user_tables WHERE schemaname = :s "
                "AND relname = 'events' AND (last_analyze IS NOT NULL)"
            ),
            {"s": backend.schema},
        ).scalar()
        return bool(n)


def test_a_bulk_import_refreshes_the_planner_statistics(
    backend, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    run = record_demo(backend.url, schema=backend.schema)
    path = tmp_path / "demo.jsonl"
    with open_store(backend.url, schema=backend.schema) as store:
        store.export_jsonl(run.session_id, path)
        store.delete_session(run.session_id)
        store.import_jsonl(path)  # far below the threshold: no ANALYZE
        assert not _analyzed(backend, engine)
        store.delete_session(run.session_id)
        monkeypatch.setattr(transfer_module, "ANALYZE_AFTER_IMPORTED_EVENTS", 10)
        store.import_jsonl(path)
    assert _analyzed(backend, engine)


# --------------------------------------------------------------------------------------------
# DuckDB attaches the store and runs the views' questions

try:
    import duckdb
except ImportError:  # the duckdb extra is not installed
    duckdb = None


def _duckdb_connection() -> Any:
    """A DuckDB connection that can load the sqlite and postgres extensions.

    Where the extensions come from a wheel (``duckdb-ext-sqlite``, for machines without
    network access), point DuckDB at them; otherwise INSTALL fetches them.
    """
    assert duckdb is not None
    config: dict[str, Any] = {}
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is not None and spec.submodule_search_locations:
        config["extension_directory"] = os.path.join(
            next(iter(spec.submodule_search_locations)), "extensions"
        )
    conn = duckdb.connect(config=config)
    for extension in ("sqlite", "postgres"):
        conn.execute(f"INSTALL {extension}")
        conn.execute(f"LOAD {extension}")
    return conn


@pytest.mark.skipif(duckdb is None, reason="duckdb is not installed (pip install '.[duckdb]')")
def test_duckdb_attaches_the_store_and_queries_the_views(backend):
    run = record_demo(backend.url, schema=backend.schema)
    conn = _duckdb_connection()
    if backend.has("file"):
        conn.execute(f"ATTACH '{backend.path}' AS store (TYPE sqlite, READ_ONLY)")
        prefix = "store"
    else:
        dsn = backend.url.replace("postgresql+psycopg://", "postgresql://")
        conn.execute(f"ATTACH '{dsn}' AS store (TYPE postgres, READ_ONLY)")
        prefix = f"store.{backend.schema}"
    tools = conn.execute(
        f"SELECT tool, COUNT(*) AS calls, "
        f"SUM(CASE WHEN CAST(is_error AS BOOLEAN) THEN 1 ELSE 0 END) AS errors "
        f"FROM {prefix}.tool_calls WHERE NOT CAST(inherited AS BOOLEAN) "
        "GROUP BY tool ORDER BY calls DESC, tool"
    ).fetchall()
    assert [(t, int(c), int(e)) for t, c, e in tools] == [
        ("shell", 4, 1),
        ("edit_file", 2, 0),
        ("read_file", 2, 1),
    ]
    [(turns,)] = conn.execute(
        f"SELECT COUNT(*) FROM {prefix}.turns WHERE session_id = '{run.session_id}'"
    ).fetchall()
    assert turns == 3
    removed = conn.execute(
        f"SELECT seq, op FROM {prefix}.replacements WHERE op = 'remove'"
    ).fetchall()
    assert removed == [(run.forget_seq, "remove")]
    # Heavy work runs in DuckDB itself: copy the log once, then query the copy.
    conn.execute(f"CREATE TABLE events AS SELECT * FROM {prefix}.events")
    [(n,)] = conn.execute("SELECT COUNT(*) FROM events WHERE type = 'tool/call'").fetchall()
    [(m,)] = conn.execute(f"SELECT COUNT(*) FROM {prefix}.tool_calls").fetchall()
    assert n == m > 0
    conn.close()


@pytest.fixture
def huge_and_small(backend, engine: Engine) -> Engine:
    """A store of two sessions, one of them most of the log: PostgreSQL's statistics then
    put half the log under any one session key."""
    open_store(backend.url, schema=backend.schema).close()
    bulk_session(engine, backend.table_schema, "big", EVENTS)
    bulk_session(engine, backend.table_schema, "small", 32 * TURN)
    t = tables_for(backend.table_schema)
    analyze(engine, [t.sessions, t.events, t.surface])
    return engine


def test_stats_of_a_small_session_beside_a_huge_one_reads_only_its_events(
    backend, huge_and_small: Engine
):
    captured: list[tuple[str, Any]] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "events" in statement:
            captured.append((statement, parameters))

    with open_store(backend.url, schema=backend.schema) as store:
        event.listen(store._ctx.engine, "before_cursor_execute", capture)
        try:
            small = store.stats("small")
        finally:
            event.remove(store._ctx.engine, "before_cursor_execute", capture)
        whole = store.stats()
    assert small.events == 32 * TURN
    assert sum(small.events_by_type.values()) == 32 * TURN
    # One call a turn, the five tools in turn.
    assert sorted(t.tool for t in small.tools) == sorted(
        ("shell", "read_file", "edit_file", "search", "web_fetch")
    )
    assert sorted(t.calls for t in small.tools) == [6, 6, 6, 7, 7]
    assert whole.events == EVENTS + 32 * TURN
    _assert_narrowed(huge_and_small, backend, ((s, s, p) for s, p in captured))


def test_the_duckdb_extra_installs_the_duckdb_the_recipe_is_tested_with():
    # The recipe above runs on the test extra's pinned DuckDB; a user's `pip install
    # 'session-sql[duckdb]'` must get one of the same minor release, never the next major.
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    [tested] = [r for r in map(Requirement, extras["test"]) if r.name == "duckdb"]
    [offered] = [r for r in map(Requirement, extras["duckdb"]) if r.name == "duckdb"]
    [pin] = [s.version for s in tested.specifier if s.operator == "=="]
    assert offered.specifier.contains(pin), (offered, pin)
    major, minor = (int(part) for part in pin.split(".")[:2])
    for newer in (f"{major}.{minor + 1}.0", f"{major + 1}.0.0"):
        assert not offered.specifier.contains(newer), (offered, newer)
    if duckdb is not None:
        assert offered.specifier.contains(duckdb.__version__), duckdb.__version__


@pytest.mark.postgresql
def test_the_replacements_of_a_session_cost_its_length_not_length_times_replacements(place):
    """A replacement's shadowed events are found by their keys: the pages read stay within
    one pass over the table plus a few per replacement, whatever plan the statistics of a
    mid-sized session suggest (PostgreSQL once hashed the whole session per replacement)."""
    backend = place("postgresql")
    replacements = 50
    with open_store(backend.url, schema=backend.schema) as store:
        engine = store.engine
        bulk_session(engine, backend.schema, "mid", replacements * 8 * TURN)
        t = tables_for(backend.schema)
        analyze(engine, [t.sessions, t.events, t.surface])
        with read_tx(engine) as conn:
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{backend.schema}"')
            pages = conn.execute(
                text("SELECT pg_relation_size('events') / current_setting('block_size')::int")
            ).scalar_one()
            [[plan]] = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                "SELECT * FROM replacements WHERE session_id = 'mid'"
            ).all()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    top = plan[0]["Plan"]
    assert top["Actual Rows"] == replacements
    read = top["Shared Hit Blocks"] + top["Shared Read Blocks"]
    assert read <= pages + 10 * replacements, (read, pages, json.dumps(plan))
