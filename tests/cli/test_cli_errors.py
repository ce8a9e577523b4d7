"""Exit codes and error lines, in process and through the real entry points."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, inspect, update
from sqlalchemy.pool import NullPool

from session_sql._store.schema import tables_for
from session_sql.cli import main

from .conftest import SCRIPT

ONE_LINE = "session-sql: error: "


def test_bare_command_prints_help(sqlite_cli):
    out = sqlite_cli()
    assert out.code == 0
    assert out.stdout.startswith("Usage: session-sql [OPTIONS] COMMAND [ARGS]...")


def test_version(sqlite_cli):
    out = sqlite_cli("--version")
    assert out.code == 0
    assert out.stdout.startswith("session-sql ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["frobnicate"], "No such command 'frobnicate'."),
        (["ls", "--bogus"], "No such option: --bogus"),
        (["ls", "--limit", "0"], "Invalid value for '--limit'"),
        (["show"], "Missing argument 'ID'."),
        (["tail", "x", "-n", "many"], "Invalid value for '--lines' / '-n'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(sqlite_cli, args, message):
    out = sqlite_cli(*args)
    assert out.code == 2
    assert out.stdout == ""
    [line] = out.error_lines
    assert line.startswith(ONE_LINE)
    assert message in line
    assert line.endswith("--help')")


@pytest.mark.parametrize("url", ["nosuchdb://x/y", "::not a url::"])
def test_a_bad_url_is_a_usage_error(sqlite_cli, url):
    out = sqlite_cli("ls", "--url", url)
    assert out.code == 2
    [line] = out.error_lines
    assert line.startswith(ONE_LINE + "invalid --url")


def test_a_bare_path_as_url_suggests_the_sqlite_url(sqlite_cli):
    out = sqlite_cli("ls", "--url", "sessions.db")
    assert out.code == 2
    [line] = out.error_lines
    assert line.startswith(ONE_LINE + "invalid --url 'sessions.db'")
    assert "did you mean sqlite:///sessions.db?" in line


def test_a_bad_schema_name_is_a_usage_error(sqlite_cli):
    out = sqlite_cli("init", "--url", "postgresql://postgres@127.0.0.1:1/x", "--schema", "a-b; --")
    assert out.code == 2
    assert out.error_lines[0].startswith(ONE_LINE + "invalid --url or --schema")


@pytest.mark.parametrize("command", ["ls", "stats", "show x", "tail x", "verify --all"])
def test_reading_commands_never_create_a_sqlite_file(sqlite_cli, tmp_path, command):
    out = sqlite_cli(*command.split())
    assert out.code == 1
    [line] = out.error_lines
    assert line.startswith(ONE_LINE + f"no store at {tmp_path / 'sessions.db'}")
    assert not (tmp_path / "sessions.db").exists()


READING_COMMANDS = ["ls", "stats", "show x", "tail x", "export x", "verify --all", "repair x"]


@pytest.mark.parametrize("command", READING_COMMANDS)
def test_reading_commands_on_an_empty_database_create_nothing(cli, backend, command):
    """An empty SQLite file, or a PostgreSQL schema that does not exist (a typo): no store."""
    if backend.table_schema is None:
        path = cli.cwd / "sessions.db"
        path.touch()
    out = cli(*command.split())
    assert out.code == 1
    [line] = out.error_lines
    assert line.startswith(ONE_LINE + "no store at ")
    assert "session-sql init" in line
    if backend.table_schema is None:
        assert path.stat().st_size == 0
        assert sorted(p.name for p in cli.cwd.iterdir()) == ["sessions.db"]
    else:
        engine = create_engine(backend.url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                assert not inspect(conn).has_schema(backend.schema)
        finally:
            engine.dispose()


def test_missing_session_exits_1(cli):
    assert cli("init").code == 0
    for command in ("show", "tail", "export", "repair", "verify", "stats"):
        out = cli(command, "no-such-session")
        assert out.code == 1, command
        assert out.error_lines == [
            ONE_LINE + "session 'no-such-session' not found: no session id is or starts with "
            "it (see 'session-sql ls')"
        ], command


def test_unreachable_postgres_is_one_line(sqlite_cli):
    out = sqlite_cli("ls", "--url", "postgresql://postgres@127.0.0.1:1/test")
    assert out.code == 1
    [line] = out.error_lines
    assert line.startswith(ONE_LINE + "cannot reach the PostgreSQL server")


def test_debug_adds_the_traceback(sqlite_cli):
    quiet = sqlite_cli("ls")
    assert "Traceback" not in quiet.stderr
    loud = sqlite_cli("--debug", "ls")
    assert loud.code == 1
    assert "Traceback (most recent call last)" in loud.stderr
    assert loud.stderr.rstrip().splitlines()[-1].startswith(ONE_LINE)
    by_env = sqlite_cli("ls", env={"SESSION_SQL_DEBUG": "1"})
    assert "Traceback" in by_env.stderr


def test_main_returns_the_exit_code(sqlite_cli, capsys):
    assert main(["schema"]) == 0
    assert "CREATE TABLE" in capsys.readouterr().out
    assert main(["show", "x"]) == 1
    assert main(["ls", "--nope"]) == 2


# -- the real entry points --------------------------------------------------------------------


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_console_script(cli):
    assert cli.script("init").code == 0
    out = cli.script("ls", "--json")
    assert (out.code, json.loads(out.stdout)) == (0, [])
    bad = cli.script("show", "nope")
    assert (bad.code, bad.stdout) == (1, "")
    assert bad.error_lines == [
        ONE_LINE + "session 'nope' not found: no session id is or starts with it "
        "(see 'session-sql ls')"
    ]
    usage = cli.script("ls", "--nope")
    assert usage.code == 2 and len(usage.error_lines) == 1


def test_python_dash_m(cli):
    assert cli.script("init", module=True).code == 0
    out = cli.script("demo", module=True)
    assert out.code == 0, out.stderr
    assert "6. Explore it with SQL" in out.stdout
    assert "\x1b[" not in out.stdout
    usage = cli.script("verify", module=True)
    assert usage.code == 2


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_a_closed_pipe_stops_quietly(sqlite_cli):
    """``session-sql ... | head``: when the reader is gone, exit 0 without a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away before the first write
    try:
        out = sqlite_cli.script(
            "schema", stdout=write_end, capture_output=False, stderr=subprocess.PIPE
        )
    finally:
        os.close(write_end)
    assert out.code == 0
    assert out.stderr == ""


def test_module_has_no_side_effects_on_import():
    done = subprocess.run(
        [sys.executable, "-c", "import session_sql.cli, session_sql.cli._docs"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_a_reader_that_stops_early_ends_the_command_quietly(cli, store):
    """``session-sql show ID --events | head -1`` through a real shell pipe: the output is far
    larger than the pipe's buffer, so the command is still writing when ``head`` exits."""
    big = store.create_session("big")
    big.append_many([{"type": "todo/write", "data": {"items": [{"text": "x" * 100}]}}] * 3000)
    for command in ("show big --events", "export big"):
        done = subprocess.run(
            ["bash", "-c", f"'{SCRIPT}' {command} | head -1; echo \"exit=${{PIPESTATUS[0]}}\""],
            capture_output=True,
            text=True,
            cwd=cli.cwd,
            env={**os.environ, **cli.env},
            timeout=120,
            check=False,
        )
        first, status = done.stdout.splitlines()
        assert status == "exit=0", (command, done.stderr)
        assert done.stderr == "", command
        assert ("todo/write" in first) if command.startswith("show") else '"id":"big"' in first


PYTHON_NAMES = re.compile(
    r"\w\(\)|\b(?:export|import)_jsonl\b|\bopen_store\b|\blist_sessions\b|\bsession_sql\.\w"
    r"|\b(?:from|to|after)_seq\b|Traceback|Error:"
)


def test_errors_name_commands_and_options_not_python_functions(cli, store):
    for sid in ("run-1", "run-2"):
        store.create_session(sid).append("todo/write", {"items": [{"text": sid}]})
    bad = cli.cwd / "bad.jsonl"
    bad.write_text('{"version": 0, "id": "b", "createdAt": 1, "isSeeded": false}\n{"x": \n')
    failing = [
        ["show", "nope"],
        ["show", "run"],
        ["show", "run-1", "--surface", "--from", "1"],
        ["export", "--all"],
        ["export", "run-1", "--skip-existing"],
        ["import", str(bad)],
        ["delete", "--yes", "run"],
        ["delete", "--yes", "run-"],
        ["tail", "run-1", "-n", "-1"],
        ["ls", "--url", "nosuchdb://x"],
    ]
    for args in failing:
        out = cli(*args)
        assert out.code in (1, 2), args
        [line] = out.error_lines
        assert line.startswith(ONE_LINE), args
        assert not PYTHON_NAMES.search(line), (args, line)

    meta = tables_for(store.schema).meta
    with store.engine.begin() as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value="999"))
    [line] = cli("ls").error_lines
    assert "'session-sql export --all DIR'" in line and "'session-sql import DIR'" in line
    assert not PYTHON_NAMES.search(line), line


def test_tail_takes_any_number_of_lines(cli, store):
    store.create_session("s").append("todo/write", {"items": [{"text": "one"}]})
    out = cli("tail", "s", "-n", str(10**30))
    assert out.code == 0, out.stderr
    assert len(out.stdout.splitlines()) == 1


def test_serve_on_a_busy_port_is_one_line(sqlite_cli):
    """The port is taken: one error line naming it and exit code 1, not the web server's
    own log and exit code."""
    import socket

    assert sqlite_cli("init").code == 0
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = sqlite_cli.script("serve", "--port", str(port), module=True)
    assert out.code == 1, out.stderr
    assert out.stdout == ""
    [line] = out.error_lines
    assert line.startswith(ONE_LINE + f"cannot listen on 127.0.0.1 port {port}: ")
    assert "in use" in line
