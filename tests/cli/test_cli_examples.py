"""Every example printed in a ``--help`` runs as printed, on a temp store, on both backends.

The examples are read from the commands themselves (the epilogs ``docs/cli.md`` shows), then
run in the order ``session-sql --help`` lists the commands, ``delete`` last (it removes the
session the others name). The store holds what the examples assume: a session whose id starts
with ``3f2a9c``, the files ``import`` names, a ``backup/`` and an empty ``archive/`` directory,
as a user following the help would have them. Substitutions of the *location* only, never of
the command: a ``--url`` or ``--from`` names the test's store and a ``--to`` a new SQLite file
(the examples name servers this machine may not have), and ``bench`` runs a stand-in for the
workloads (they take minutes; ``test_cli_bench.py`` runs the real ones).

``session-sql`` runs in process, and the rest of a pipeline (``jq``, ``gzip``, ``>``) as real
programs and files: starting the console script once per example would take minutes on a
busy machine. ``tail -f`` and ``serve`` run as the real script, stopped with Ctrl-C (SIGINT);
``serve`` on a free port instead of the one its example names.
"""

from __future__ import annotations

import gzip
import importlib
import json
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import typer

from session_sql import open_store
from session_sql.cli import app
from session_sql.cli._docs import command_names
from session_sql.cli._support import PROG
from session_sql.cli.demo import record_demo

from .conftest import SCRIPT, Cli, Outcome

FULL_ID = "3f2a9c4e5d6b4f0a9e8d7c6b5a493827"  # the examples name it "3f2a9c"
OTHER_ID = "7b1e04c2a9d84f6e8b3c5d7e9f1a2b3c"  # held by session-1.jsonl; delete --yes names it
TENANT_BACKUPS = ("acme", "globex")  # import --restore-tenants backup-acme/ backup-globex/


def help_examples() -> list[tuple[str, str]]:
    """``(command, example line)`` for the root and every command, in ``--help`` order."""
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    ctx = typer.Context(root, info_name=PROG)
    found = [(PROG, line) for line in _example_lines(root.epilog)]
    for name in command_names():
        command = root.get_command(ctx, name)
        assert command is not None
        lines = _example_lines(command.epilog)
        assert lines, f"'{PROG} {name} --help' shows no example"
        found.extend((name, line) for line in lines)
    return found


def _example_lines(epilog: str | None) -> list[str]:
    text = (epilog or "").split("Example:\n", 1)
    return [line.strip() for line in text[1].splitlines() if line.strip()] if len(text) > 1 else []


def _prepare(cli: Cli) -> None:
    """The store and files the examples take for granted."""
    record_demo(cli.url, schema=cli.schema, session_id=FULL_ID)
    with open_store(cli.url, schema=cli.schema) as store:
        text = cli.cwd / "template.jsonl"
        store.export_jsonl(FULL_ID, text)
        lines = text.read_text(encoding="utf-8").splitlines(keepends=True)
        for name, new_id in (("session-1.jsonl", OTHER_ID), ("session-2.jsonl", "second")):
            header = json.loads(lines[0])
            header["id"] = new_id
            (cli.cwd / name).write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
        backup = cli.cwd / "backup"
        backup.mkdir()
        for info in store.iter_sessions():
            store.export_jsonl(info.id, backup / f"{info.id}.jsonl")
        text.unlink()
    for tenant in TENANT_BACKUPS:  # a backup of each, the tenant gone since
        folder = cli.cwd / f"backup-{tenant}"
        folder.mkdir()
        with open_store(cli.url, schema=cli.schema, tenant=tenant) as store:
            store.create_session(f"{tenant}-1", user_id="u", title=f"{tenant}'s")
            store.export_jsonl(f"{tenant}-1", folder / f"{tenant}-1.jsonl")
            store.delete_session(f"{tenant}-1")


def _run_line(cli: Cli, line: str) -> list[Outcome]:
    """Run one example: ``&&`` lists of ``|`` pipelines, with an optional ``> FILE`` at the end."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&>")
    lexer.whitespace_split = True
    tokens = list(lexer)
    assert not any(ch in t for t in tokens for ch in "*?$`"), f"{line}: needs a real shell"
    outcomes: list[Outcome] = []
    for listed in _split(tokens, "&&"):
        target: Path | None = None
        pipeline = listed
        if ">" in listed:
            at = listed.index(">")
            target, pipeline = cli.cwd / listed[at + 1], listed[:at]
        data: bytes | None = None
        for i, stage in enumerate(_split(pipeline, "|")):
            if stage[0] == PROG:
                assert i == 0, f"{line}: {PROG} must come first in a pipeline"
                args = _located(cli, stage[1:])
                stdin = "y\n" if args[:1] == ["delete"] and "--yes" not in args else None
                out = cli(*args, input=stdin)
                outcomes.append(out)
                assert out.code == 0, (line, out.stderr)
                data = out.stdout.encode()
            else:
                assert shutil.which(stage[0]), f"{line}: needs {stage[0]} installed"
                done = subprocess.run(stage, input=data, capture_output=True, check=False)
                assert done.returncode == 0, (line, done.stderr)
                data = done.stdout
        if target is not None:
            target.write_bytes(data or b"")
    return outcomes


def _split(tokens: list[str], separator: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token == separator:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def _located(cli: Cli, args: list[str]) -> list[str]:
    """``args`` with a ``--url`` value replaced by the test store's URL; for ``migrate``, its
    ``--from`` too, and its ``--to`` by a SQLite file of its own (one per destination named)."""
    located = list(args)
    migrating = located[:1] == ["migrate"]
    for i, arg in enumerate(located[:-1]):
        if arg == "--url" or (migrating and arg == "--from"):
            located[i + 1] = cli.url
        elif migrating and arg == "--to":
            name = "".join(c if c.isalnum() else "-" for c in located[i + 1])
            located[i + 1] = f"sqlite:///{cli.cwd / name}.db"
    return located


def _follow_until_interrupted(cli: Cli, line: str) -> None:
    """Run ``tail -f`` as the real script; once it printed the last events, press Ctrl-C."""
    args = _located(cli, shlex.split(line)[1:])
    process = cli.popen(*args)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert json.loads(first)["seq"] >= 0
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert err == ""
    assert all(json.loads(line)["seq"] >= 0 for line in rest.splitlines())


def _serve_until_interrupted(cli: Cli, line: str) -> None:
    """Run ``serve`` as the real script on a free port; once it answers, press Ctrl-C."""
    import socket

    import httpx

    args = _located(cli, shlex.split(line)[1:])
    with socket.socket() as sock:  # the example's port may be taken on this machine
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    args[args.index("--port") + 1] = port
    process = cli.popen(*args)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("serving "), first
        address = first.split(" at ", 1)[1].strip()
        # (With a token: the address sets the cookie and redirects to the page.)
        response = httpx.get(address, timeout=60.0, follow_redirects=True)
        assert response.status_code == 200, response.text
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert err == ""


def _fake_bench(
    url: str | None, *, quick: bool, progress, only: object = None, citus_url: object = None
) -> dict[str, object]:
    progress("W1 append")
    return {
        "backend": "sqlite" if url is None else url.split(":")[0],
        "quick": quick,
        "workloads": [],
    }


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed")
def test_every_help_example_runs_as_printed(cli, monkeypatch):
    _prepare(cli)
    # The CLI imports the benchmark only when `bench` runs: import it here to patch it.
    monkeypatch.setattr(importlib.import_module("session_sql.cli.bench"), "run", _fake_bench)
    examples = help_examples()
    ordered = [e for e in examples if e[0] != "delete"] + [e for e in examples if e[0] == "delete"]
    ran: list[str] = []
    for command, line in ordered:
        if command == "tail" and " -f" in line:
            _follow_until_interrupted(cli, line)
        elif command == "serve":
            _serve_until_interrupted(cli, line)
        else:
            for out in _run_line(cli, line):
                assert "error" not in out.stderr, (line, out.stderr)
                assert "FrozenDict(" not in out.stdout and "FrozenList(" not in out.stdout, line
        ran.append(command)
    assert set(ran) >= set(command_names()) | {PROG}

    # What the examples left behind is what they promise.
    with gzip.open(cli.cwd / "3f2a9c.jsonl.gz", "rt", encoding="utf-8") as fh:
        assert json.loads(fh.readline())["id"] == FULL_ID
    assert "CREATE TABLE agents.sessions" in (cli.cwd / "schema.sql").read_text()
    assert (cli.cwd / "backup" / f"{FULL_ID}.jsonl").exists()
    with open_store(cli.url, schema=cli.schema) as store:
        ids = {info.id for info in store.iter_sessions()}
    assert "second" in ids  # imported from session-2.jsonl
    assert FULL_ID not in ids and OTHER_ID not in ids  # the delete examples deleted them
    for tenant in TENANT_BACKUPS:  # restored into their tenants, metadata included
        with open_store(cli.url, schema=cli.schema, tenant=tenant) as store:
            assert store.session_info(f"{tenant}-1").title == f"{tenant}'s"
    migrated = sorted(cli.cwd.glob("sqlite---*.db"))
    assert migrated, "the migrate examples wrote no store"
    for path in migrated:  # each a whole copy, taken before the delete examples ran
        with open_store(f"sqlite:///{path}", create=False) as store:
            assert FULL_ID in {info.id for info in store.iter_sessions()}


def test_the_examples_need_no_shell_features():
    """The examples stay runnable by the small runner above (and by any POSIX shell)."""
    for _, line in help_examples():
        assert line.startswith(PROG + " "), line
        assert not any(ch in line for ch in "*?$`;"), line
