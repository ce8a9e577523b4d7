"""``session-sql migrate``: output, exit codes, resuming, refusals, the progress bar."""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import delete

from session_sql import SCHEMA_VERSION, Session, open_store
from session_sql._store.database import make_engine, write_tx
from session_sql._store.schema import tables_for

from ..legacy_schema import create_legacy_store, insert_legacy_session
from ..store.store_builders import key_of, say, tool_turn
from .conftest import SCRIPT, Cli


def _target(cli: Cli, name: str = "new.db") -> str:
    return f"sqlite:///{cli.cwd / name}"


def test_migrate_prints_one_summary_line_and_verifies(cli, demo):
    out = cli("migrate", "--to", _target(cli))

    assert out.code == 0, out.stderr
    assert out.stderr == ""  # no progress bar outside a terminal
    (line,) = out.stdout.splitlines()
    assert line.startswith(f"migrated 2 sessions of 1 tenant, schema version {SCHEMA_VERSION}, ")
    assert re.search(r": 2 copied \(\d+ events\); every session verified$", line)
    with open_store(_target(cli), create=False) as store:
        assert {info.id for info in store.iter_sessions()} == {demo.session_id, demo.fork_id}
        assert store.session_info(demo.fork_id).parent_session == demo.session_id


def test_a_rerun_skips_and_json_reports(cli, demo):
    assert cli("migrate", "--to", _target(cli), "--quiet").code == 0

    out = cli("migrate", "--to", _target(cli), "--json")

    assert out.code == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True
    assert (report["sessions"], report["copied"], report["skipped"]) == (2, 0, 2)
    assert report["failures"] == []
    assert report["source_version"] == SCHEMA_VERSION


def test_a_session_that_cannot_be_copied_is_an_error_line_and_exit_1(cli, demo):
    with cli.store() as store, write_tx(store.engine) as conn:
        sf = tables_for(store.schema).surface
        conn.execute(
            delete(sf).where(sf.c.session_key == key_of(store, demo.fork_id), sf.c.pos == 0)
        )

    out = cli("migrate", "--to", _target(cli))

    assert out.code == 1
    (error,) = out.error_lines
    assert error.startswith(f"session-sql: error: session '{demo.fork_id}' was not copied: ")
    assert "does not verify in the source" in error
    assert "1 copied" in out.stdout and "1 FAILED" in out.stdout


def test_a_conflicting_destination_is_refused_with_exit_1(cli, demo):
    with open_store(_target(cli)) as other:
        say(other.create_session(demo.session_id), "not the same")

    out = cli("migrate", "--to", _target(cli))

    assert out.code == 1
    (error,) = out.error_lines
    assert f"already holds session {demo.session_id!r}" in error
    assert "nothing was written" in error
    assert out.stdout == ""
    with open_store(_target(cli), create=False) as other:
        assert [i.id for i in other.iter_sessions()] == [demo.session_id]


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--to", "nonsense://x"], 2, "invalid --from, --to or schema"),
        (["--to", "sqlite:///new.db", "--to-schema", "a b"], 2, "schema"),
        ([], 2, "Missing option '--to'"),
    ],
)
def test_usage_errors_exit_2(cli, demo, args, code, said):
    out = cli("migrate", *args)
    assert out.code == code
    assert said in out.stderr
    assert not (cli.cwd / "new.db").exists()


def test_a_missing_source_exits_1_and_creates_nothing(sqlite_cli):
    out = sqlite_cli("migrate", "--from", "sqlite:///absent.db", "--to", _target(sqlite_cli))
    assert out.code == 1
    assert "nothing to migrate: no store at" in out.stderr
    assert not (sqlite_cli.cwd / "absent.db").exists()
    assert not (sqlite_cli.cwd / "new.db").exists()


@pytest.mark.parametrize("version", [2, 4, 5])
def test_an_earlier_version_store_is_migrated(cli, backend, version):
    tenant = "acme" if version >= 3 else ""
    engine = make_engine(cli.url)
    try:
        create_legacy_store(engine, cli.schema, version)
        session = Session("old")
        tool_turn(session, 1)
        insert_legacy_session(
            engine,
            backend.table_schema,
            version,
            session.header,
            list(session.events),
            tenant=tenant,
        )
    finally:
        engine.dispose()
    refused = cli("ls")
    assert refused.code == 1  # the gate refuses to open it, and says what to run
    assert f"schema version {version} is older" in refused.stderr
    assert "session-sql migrate" in refused.stderr

    out = cli("migrate", "--to", _target(cli))

    assert out.code == 0, out.stderr
    assert f"schema version {version}," in out.stdout and "1 copied" in out.stdout
    listed = cli("ls", "--url", _target(cli), "--tenant", tenant)
    assert listed.code == 0 and "old" in listed.stdout
    with open_store(_target(cli), tenant=tenant, create=False) as store:
        assert [e.to_json() for e in store.events("old")] == [e.to_json() for e in session.events]
        assert store.verify("old").ok


def test_distributed_needs_citus_and_plain_is_the_default_elsewhere(sqlite_cli):
    """--distributed asks for a destination on Citus (a usage error on SQLite, where nothing
    is created); --plain keeps plain tables (what SQLite always has)."""
    with sqlite_cli.store() as store:
        say(store.create_session("s1"), "hello")

    refused = sqlite_cli("migrate", "--to", _target(sqlite_cli), "--distributed")

    assert refused.code == 2
    assert "citus" in refused.stderr
    assert not (sqlite_cli.cwd / "new.db").exists()
    plain = sqlite_cli("migrate", "--to", _target(sqlite_cli), "--plain", "--json")
    assert plain.code == 0, plain.stderr
    assert json.loads(plain.stdout)["copied"] == 1
    with open_store(_target(sqlite_cli), create=False) as store:
        assert not store.distributed


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
@pytest.mark.parametrize("quiet", [False, True])
def test_the_progress_bar_is_drawn_on_a_terminal_unless_quiet(sqlite_cli, quiet):
    with sqlite_cli.store() as store:
        for n in range(3):
            tool_turn(store.create_session(f"s{n}"), 1)
    done, drawn = sqlite_cli.on_a_terminal(
        "migrate", "--to", _target(sqlite_cli), *(["-q"] if quiet else [])
    )
    assert done.returncode == 0
    assert b"3 copied" in done.stdout
    assert (b"sessions" in drawn and b"events" in drawn) is not quiet
