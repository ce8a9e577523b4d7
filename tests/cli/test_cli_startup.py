"""What each command imports: --help and --version start without the store, SQLAlchemy or
rich, the reading commands without the demo or the benchmark, and none on SQLite with
psycopg or the PostgreSQL backend (docs/performance.md, "CLI startup"). The modules loaded
are checked, not the time, which depends on the machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Runs the command line as the console script does, then prints the modules it loaded.
RUNNER = """
import contextlib, io, sys
from session_sql.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(code, *sorted(sys.modules))
"""

HEAVY = (
    "sqlalchemy",
    "psycopg",
    "pydantic",
    "rich",
    "session_sql._store",
    "session_sql.schema",
    "starlette",  # the inspector's extra (serve)
    "uvicorn",
    "session_sql.inspector",
)
CLI_EXTRAS = ("session_sql.cli.bench", "session_sql.cli.demo", "session_sql.cli._bench_raw")
POSTGRESQL_ONLY = (
    "psycopg",
    "session_sql._store.backends.postgresql.appending",
    "session_sql._store.backends.postgresql.appending_async",
    "session_sql._store.backends.postgresql.connections",
    "session_sql._store.backends.postgresql.listening",
    "session_sql._store.backends.postgresql.backend",
    "session_sql._store.backends.postgresql.prepared",
    "session_sql._store.backends.postgresql.refused",
    "session_sql._store.backends.postgresql.pool_queue",
)
"""What only a PostgreSQL store uses: imported when one is opened, never for SQLite."""


def loaded(cli, *args: str) -> set[str]:
    """The modules ``session-sql ARGS`` loaded, run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        cwd=cli.cwd,
        env={**os.environ, **cli.env},
        timeout=120,
        check=False,
    )
    code, *modules = done.stdout.split()
    assert code == "0", done.stderr
    return set(modules)


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The ``modules`` that are one of ``names`` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_help_and_version_load_neither_the_store_nor_rich(sqlite_cli, args):
    assert among(loaded(sqlite_cli, *args), HEAVY + CLI_EXTRAS) == []


def test_reading_commands_load_neither_the_demo_nor_the_benchmark(sqlite_cli):
    store = sqlite_cli.store()
    try:
        session = store.create_session("startup-1")
        session.append("todo/write", {"items": [{"text": "one"}]})
    finally:
        store.close()
    listing = loaded(sqlite_cli, "ls")
    assert among(listing, (*CLI_EXTRAS, "rich", "session_sql.cli._render")) == []  # a pipe
    assert "session_sql._store" in listing  # (the check sees what the command needs)
    for args in (["show", "startup"], ["tail", "startup"], ["show", "startup", "--events"]):
        assert among(loaded(sqlite_cli, *args), CLI_EXTRAS) == [], args


def test_reading_commands_on_sqlite_load_no_sqlalchemy(sqlite_cli):
    """``ls``, ``show`` and ``tail`` on this build's SQLite file read through the quick
    reader (``backends.sqlite.quick``): neither SQLAlchemy nor the store is imported."""
    store = sqlite_cli.store()
    try:
        session = store.create_session("startup-3")
        session.append("todo/write", {"items": [{"text": "one"}]})
    finally:
        store.close()
    readings = (
        ["ls"],
        ["ls", "--json", "--user", "u", "--label", "a=b", "--since", "7d"],
        ["show", "startup"],
        ["show", "startup", "--events"],
        ["show", "startup", "--surface"],
        ["tail", "startup"],
    )
    for args in readings:
        modules = loaded(sqlite_cli, *args)
        assert "session_sql._store.backends.sqlite.quick" in modules, (
            args
        )  # (the check sees the reader)
        assert among(modules, ("sqlalchemy", "session_sql._store.store", *POSTGRESQL_ONLY)) == []


def test_reading_commands_on_sqlite_load_neither_psycopg_nor_the_postgresql_backend(sqlite_cli):
    """What the quick reader leaves to the store (a follow, a tenant) opens it without
    PostgreSQL's modules."""
    store = sqlite_cli.store()
    try:
        session = store.create_session("startup-2")
        session.append("todo/write", {"items": [{"text": "one"}]})
    finally:
        store.close()
    for args in (["tail", "startup", "-f", "--timeout", "0"], ["ls", "--tenant", "acme"]):
        modules = loaded(sqlite_cli, *args)
        assert "session_sql._store.backends.sqlite.backend" in modules, args  # (the store was used)
        assert among(modules, POSTGRESQL_ONLY) == [], args
