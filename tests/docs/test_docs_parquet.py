"""docs/sql.md, "Offline analytics on Parquet exports": each recipe runs with DuckDB on the
files an export wrote, offline, and answers as the recipes on the live store do."""

from __future__ import annotations

import re
from typing import Any

import pytest

from session_sql import open_store
from session_sql.cli.demo import record_demo

from .test_docs_sql import SQL_MD, _run, recipes

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

PARQUET_RECIPE = re.compile(
    r"```sql\n-- parquet recipe: (?P<name>[a-z0-9-]+)\n(?P<body>.*?)```", re.S
)


def parquet_recipes() -> dict[str, str]:
    text = SQL_MD.read_text(encoding="utf-8")
    return {m["name"]: m["body"] for m in PARQUET_RECIPE.finditer(text)}


def test_the_parquet_recipes_answer_as_the_live_ones(backend, tmp_path, monkeypatch):
    run = record_demo(backend.url, schema=backend.schema)
    with open_store(backend.url, schema=backend.schema) as store:
        first = store.export_parquet(tmp_path / "lake")
        # A second, incremental export: the recipes read both files of each table.
        store.open_session(run.session_id).append("todo/write", {"items": []})
        store.export_parquet(tmp_path / "lake", since=first.cursor)
        own = {
            run.session_id: list(store.events(run.session_id)),
            run.fork_id: list(store.events(run.fork_id))[run.fork_boundary + 1 :],
        }
    turns = {sid: [e.type for e in events].count("turn/start") for sid, events in own.items()}
    live = {name: _run(backend, sql) for name, dialect, sql in recipes() if backend.speaks(dialect)}
    monkeypatch.chdir(tmp_path)
    found = parquet_recipes()
    assert set(found) == {
        "tokens-per-session-and-model",
        "tool-error-rate",
        "sessions-per-day",
        "turns-per-session",
        "tool-calls-with-their-results",
    }
    conn = duckdb.connect()  # no extension: DuckDB reads Parquet by itself
    answers: dict[str, list[tuple[Any, ...]]] = {
        name: conn.execute(sql).fetchall() for name, sql in found.items()
    }
    assert all(answers.values()), [name for name, rows in answers.items() if not rows]
    assert answers["tokens-per-session-and-model"] == [
        tuple(row) for row in live["tokens-per-session-and-model"]
    ]
    tools = {row[0]: (row[1], row[2], float(row[3])) for row in answers["tool-error-rate"]}
    assert tools == {"shell": (4, 1, 25.0), "edit_file": (2, 0, 0.0), "read_file": (2, 1, 50.0)}
    assert [tuple(r) for r in answers["sessions-per-day"]] == [
        tuple(r) for r in live["sessions-per-day"]
    ]
    assert {row[0]: row[1] for row in answers["turns-per-session"] if row[1]} == {
        sid: n for sid, n in turns.items() if n
    }
    results = answers["tool-calls-with-their-results"]
    assert len(results) == 8 and sum(1 for r in results if r[4]) == 2
