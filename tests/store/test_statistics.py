"""A store grown by ordinary appends keeps its planner statistics, so the analytics views and
recipes of docs/sql.md use the indexes they were written for (plans asserted, not times).

SQLite writes no statistics by itself: the store checks them every so many appended events and
when it closes (``_store.statistics``); PostgreSQL's autovacuum keeps its own.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import Engine

from session_sql import open_store
from session_sql._store import statistics
from session_sql._store.backends.sqlite import backend as sqlite_backend
from session_sql._store.database import read_tx
from tests.docs.test_docs_sql import recipes
from tests.store.analytics_data import TURN, append_session
from tests.store.test_analytics import VIEW_QUERIES, _analyzed, _explain

MIN_EVENTS = 40 * TURN  # the threshold, lowered so that a test grows past it in seconds


@pytest.fixture
def thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_backend, "STATISTICS_MIN_EVENTS", MIN_EVENTS)
    monkeypatch.setattr(statistics, "CHECK_EVERY_EVENTS", 20 * TURN)
    # The sample, as small beside these logs as SQLite's 1,000 rows beside a real store's.
    monkeypatch.setattr(sqlite_backend, "ANALYZE_SAMPLE_ROWS", 100)


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path / 'grown.db'}"


def _analyzed_events(engine: Engine) -> int:
    with read_tx(engine) as conn:
        [stat] = conn.exec_driver_sql(
            "SELECT stat FROM sqlite_stat1 WHERE tbl = 'events' AND idx = 'events'"
        ).one()
    return int(stat.split()[0])


def _grown(backend: Any, big: int = 96 * TURN) -> None:
    with open_store(backend.url, schema=backend.schema, create=True) as store:
        append_session(store, "big", big)
        append_session(store, "small", 8 * TURN)
        for n in range(4):
            append_session(store, f"other-{n}", TURN)


def test_a_store_grown_by_appends_has_statistics_and_the_views_use_the_indexes(
    backend, engine: Engine, thresholds: None
):
    _grown(backend)
    plans = {name: _explain(engine, backend, sql) for name, sql in VIEW_QUERIES.items()}
    for name, dialect, sql in recipes():
        if backend.speaks(dialect):
            plans[f"recipe {name}"] = _explain(engine, backend, sql)
    bad = {name: problems for name, (_, problems) in plans.items() if problems}
    assert not bad, bad
    if not backend.has("explain_query_plan"):
        return  # (autovacuum's statistics, or none: the plans above hold either way)
    assert _analyzed(backend, engine)
    # The turns view walks the turn boundaries through their partial index, not a session's
    # whole primary key (which a sampled ANALYZE alone leads it to).
    for name in ("turns", "turns one session"):
        plan = plans[name][0]
        assert "SEARCH t USING INDEX ix_events_turn_bounds (session_key=?)" in plan, plan
        bounds = re.findall(r"SEARCH x USING INDEX ix_events_turn_bounds", plan)
        assert len(bounds) == 2, plan
    # Replacements look their shadowed events up one by one, never a session per row.
    plan = plans["recipe compaction-savings"][0]
    assert "SEARCH x USING PRIMARY KEY (session_key=?)\n" not in plan + "\n", plan
    assert "SEARCH x USING PRIMARY KEY (session_key=? AND seq=?)" in plan, plan
    assert "ix_events_session_key_call_id" in plans["recipe tool-error-rate"][0]


def test_sqlite_statistics_are_written_while_a_store_appends_and_refreshed_as_it_grows(
    sqlite_url: str, thresholds: None
):
    with open_store(sqlite_url, create=True) as store:
        append_session(store, "small", 20 * TURN)  # below the threshold: nothing written
        assert not statistics.refresh_if_stale(store._ctx)
        append_session(store, "big", 60 * TURN)  # past it, and checked on the way
        engine = store._ctx.engine
        first = _analyzed_events(engine)
        assert MIN_EVENTS <= first <= 80 * TURN
        assert not statistics.refresh_if_stale(store._ctx)  # fresh: nothing to do
        store.open_session("big").append_many(
            [{"type": "todo/write", "data": {"n": n}} for n in range(2 * first)]
        )
        assert _analyzed_events(engine) == store.stats().events  # grown twofold: refreshed


def test_sqlite_statistics_are_checked_when_the_store_closes(
    sqlite_url: str, thresholds: None, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(statistics, "CHECK_EVERY_EVENTS", 10**9)  # only the close checks
    store = open_store(sqlite_url, create=True)
    append_session(store, "big", 48 * TURN)
    engine = store._ctx.engine
    with read_tx(engine) as conn:
        assert not conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'"
        ).all()
    store.close()
    with open_store(sqlite_url) as reopened:
        assert _analyzed_events(reopened._ctx.engine) == 48 * TURN
