"""docs/sql.md: every recipe runs on both dialects, and every table and column is documented."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from session_sql import open_store
from session_sql._store.schema import tables_for
from session_sql.cli.demo import record_demo

SQL_MD = Path(__file__).resolve().parents[2] / "docs" / "sql.md"
RECIPE = re.compile(
    r"```sql\n-- recipe: (?P<name>[a-z0-9-]+)(?: \((?P<dialect>sqlite|postgresql)\))?\n"
    r"(?P<body>.*?)```",
    re.S,
)
DIALECTS = ("sqlite", "postgresql")


def recipes() -> list[tuple[str, str | None, str]]:
    """``(name, dialect or None for both, sql)`` of every recipe in docs/sql.md."""
    text = SQL_MD.read_text(encoding="utf-8")
    return [(m["name"], m["dialect"], m["body"]) for m in RECIPE.finditer(text)]


def test_recipes_are_found_and_cover_both_dialects():
    found = recipes()
    names = {name for name, _, _ in found}
    assert {
        "tokens-per-session-and-model",
        "tool-error-rate",
        "compaction-savings",
        "removals",
        "sessions-per-day",
        "longest-tool-results",
    } <= names
    for name in names:
        dialects = [d for n, d, _ in found if n == name]
        assert dialects == [None] or sorted(dialects) == sorted(DIALECTS), name
    # Every ```sql block under "## Recipes" is a recipe the test can find.
    section = SQL_MD.read_text(encoding="utf-8").split("## Recipes", 1)[1].split("\n## ", 1)[0]
    assert section.count("```sql") == len(found)


def _run(backend, sql: str) -> list[tuple[Any, ...]]:
    """Run ``sql`` with the raw driver, as pasted into ``sqlite3`` or ``psql``."""
    if backend.has("file"):
        conn = sqlite3.connect(backend.path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()
    with psycopg.connect(backend.driver_dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{backend.schema}"')
        return conn.execute(sql).fetchall()


def test_every_recipe_runs_and_answers_correctly(backend):
    run = record_demo(backend.url, schema=backend.schema)
    with open_store(backend.url, schema=backend.schema) as store:
        main = list(store.events(run.session_id))
        fork = list(store.events(run.fork_id))[run.fork_boundary + 1 :]
    results = {
        name: _run(backend, sql) for name, dialect, sql in recipes() if backend.speaks(dialect)
    }
    assert all(results.values()), [name for name, rows in results.items() if not rows]

    own = {run.session_id: main, run.fork_id: fork}
    tokens = {row[0]: row[2:] for row in results["tokens-per-session-and-model"]}
    for sid, events in own.items():
        replies = [e for e in events if e.type == "assistant/message"]
        assert tokens[sid] == (
            len(replies),
            sum(e.data["usage"]["inputTokens"] for e in replies),
            sum(e.data["usage"]["outputTokens"] for e in replies),
        )

    tools = {row[0]: (row[1], row[2], float(row[3])) for row in results["tool-error-rate"]}
    assert tools == {"shell": (4, 1, 25.0), "edit_file": (2, 0, 0.0), "read_file": (2, 1, 50.0)}

    savings = {row[1]: row for row in results["compaction-savings"]}
    assert set(savings) == {run.prune_seq, run.summary_seq}
    assert savings[run.summary_seq][3] == len(run.summary_shadowed)
    assert all(row[6] > 0 for row in savings.values())

    assert results["removals"] == [
        (
            run.fork_id,
            run.forget_seq,
            "the user said: forget that",
            2,
            "user/message, assistant/message",
        )
    ]

    [(day, sessions, forks)] = results["sessions-per-day"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", day) and (sessions, forks) == (2, 1)

    longest = results["longest-tool-results"][0]
    assert (longest[0], longest[1], longest[2], longest[4]) == (
        run.session_id,
        run.pruned_seq,
        "shell",
        "shadowed",
    )

    context = {row[0]: row[1] for row in results["context-size-now"]}
    with open_store(backend.url, schema=backend.schema) as store:
        assert context[run.session_id] == len(store.surface(run.session_id))
    assert results["forks"] == [(run.fork_id, run.session_id, run.fork_boundary, len(fork))]


def test_every_table_and_column_is_documented():
    text = SQL_MD.read_text(encoding="utf-8")
    tables = tables_for(None)
    for table in tables.base_tables:
        section = text.split(f"### `{table.name}`", 1)
        assert len(section) == 2, table.name
        body = section[1].split("\n### ", 1)[0]
        for column in table.columns:
            assert f"| `{column.name}` |" in body, f"{table.name}.{column.name}"
    assert "### The view `surface_messages`" in text
    for column in tables.surface_messages.columns:
        assert f"`{column.name}`" in text
    for view in tables.analytics_views:
        section = text.split(f"### `{view.name}`", 1)
        assert len(section) == 2, view.name
        body = section[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        for name in view.columns:
            assert f"`{name}`" in body, f"{view.name}.{name}"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_recipes_mention_only_documented_objects(dialect):
    known = {"events", "sessions", "surface", "surface_messages", "session_sql_meta"}
    known |= {v.name for v in tables_for(None).analytics_views}
    for _, recipe_dialect, sql in recipes():
        if recipe_dialect not in (None, dialect):
            continue
        used = set(re.findall(r"\b(?:FROM|JOIN)\s+([a-z_]+)\b", sql))
        assert used <= known | {"json_each", "lateral"}, used
