"""``prune``: retention from the command line — selectors, dry run, archive and restore, a
report to file with --json, and bad input refused before anything changes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from sqlalchemy import select, update

from session_sql import jsonl_file_name
from session_sql._store.schema import tables_for

from ..builders import say

ERROR = "session-sql: error: "
DAY = 86_400_000
OLD = 1_600_000_000_000  # 2020: older than any --older-than below


def _state(store) -> dict[str, object]:
    tables = tables_for(store.schema)
    state: dict[str, object] = {}
    with store.engine.connect() as conn:
        for table in (tables.sessions, tables.events, tables.surface, tables.meta):
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            state[table.name] = [dict(row._mapping) for row in rows]
    return state


def _exported(store, session_id: str) -> str:
    out = io.StringIO()
    store.export_jsonl(session_id, out)
    return out.getvalue()


@pytest.fixture
def people(store) -> list[str]:
    """Four old sessions of alice and bob (labelled), and one fresh session of alice."""
    s = tables_for(store.schema).sessions
    ids = []
    for i, (user, team) in enumerate(
        [("alice", "a"), ("bob", "a"), ("alice", "b"), ("bob", "b"), ("alice", "a")]
    ):
        handle = store.create_session(f"s{i}", user_id=user, labels={"team": team})
        say(handle, f"hello {i}")
        ids.append(handle.id)
    with store.engine.begin() as conn:
        for i in range(4):
            conn.execute(update(s).where(s.c.id == f"s{i}").values(updated_at=OLD + i * DAY))
    return ids


def test_older_than_deletes_the_old_sessions_and_prints_them(cli, store, people):
    out = cli("prune", "--older-than", "30d")
    assert out.code == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:-1]] == ["s0", "s1", "s2", "s3"]
    assert out.stdout.splitlines()[-1].startswith("deleted 4 sessions (4 events, ")
    assert [info.id for info in store.list_sessions()] == ["s4"]
    again = cli("prune", "--older-than", "30d", "--json")  # nothing left to do
    assert again.code == 0 and json.loads(again.stdout)["sessions"] == []


def test_dry_run_lists_and_changes_nothing(cli, store, people, tmp_path):
    before = _state(store)
    out = cli("prune", "--older-than", "1w", "--dry-run", "--archive", str(tmp_path), "--json")
    assert out.code == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["dry_run"] and report["deleted"] == 0
    assert [(s["id"], s["events"]) for s in report["sessions"]] == [(f"s{i}", 1) for i in range(4)]
    assert report["bytes"] == sum(s["bytes"] for s in report["sessions"]) > 0
    assert _state(store) == before
    assert not list(tmp_path.glob("*.jsonl"))
    text = cli("prune", "--older-than", "1w", "--dry-run")
    assert text.stdout.splitlines()[-1].startswith("would delete 4 sessions")


def test_erasure_of_a_user_gives_a_report_to_file(cli, store, people):
    out = cli("prune", "--user", "alice", "--json")
    assert out.code == 0, out.stderr
    report = json.loads(out.stdout)
    assert [s["id"] for s in report["sessions"]] == ["s0", "s2", "s4"]
    assert {s["user_id"] for s in report["sessions"]} == {"alice"}
    assert report["deleted"] == 3 and report["events"] == 3
    assert report["started_at"] <= report["finished_at"] and report["tenant"] == ""
    assert store.list_sessions(user_id="alice") == []
    assert len(store.list_sessions(user_id="bob")) == 2


def test_labels_and_age_combine(cli, store, people):
    out = cli("prune", "--label", "team=a", "--older-than", "1d", "--json")
    assert [s["id"] for s in json.loads(out.stdout)["sessions"]] == ["s0", "s1"]


def test_the_tenant_option_keeps_to_its_tenant(cli, store, people):
    out = cli("prune", "--user", "alice", "--tenant", "acme", "--json")
    assert out.code == 0 and json.loads(out.stdout)["sessions"] == []
    assert len(store.list_sessions()) == 5


def test_an_archive_imports_back_identical(cli, store, people, tmp_path):
    archive = tmp_path / "archive" / "2026"  # created, as 'export -d' creates its directory
    exports = {sid: _exported(store, sid) for sid in people[:4]}
    out = cli("prune", "--older-than", "30d", "--archive", str(archive), "--json")
    assert out.code == 0, out.stderr
    report = json.loads(out.stdout)
    for pruned, sid in zip(report["sessions"], people[:4], strict=True):
        path = Path(pruned["archive"])
        assert path.parent == archive and path.is_file()
        assert path.name.startswith(jsonl_file_name(sid).removesuffix(".jsonl") + "~")
    assert len(list(archive.iterdir())) == 4
    restored = cli("import", str(archive))
    assert restored.code == 0, restored.stderr
    for sid, text in exports.items():
        assert _exported(store, sid) == text
        assert store.verify(sid).ok


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "give --older-than, --user or --label"),
        (["--older-than", "30 days"], 2, "is not an age such as 30d"),
        (["--older-than", "-1d"], 2, "is not an age such as 30d"),
        (["--label", "team"], 2, "is not NAME=VALUE"),
        (["--user", ""], 1, "user_id must be None or 1"),
    ],
)
def test_bad_input_changes_nothing(cli, store, people, args, code, message):
    before = _state(store)
    out = cli("prune", *args)
    assert out.code == code, out.stderr
    assert out.error_lines[-1].startswith(ERROR) and message in out.error_lines[-1]
    assert _state(store) == before


def test_an_archive_dir_that_cannot_be_written_changes_nothing(cli, store, people, tmp_path):
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    target = Path("/proc/self") if os.geteuid() == 0 else read_only  # root writes anywhere
    before = _state(store)
    out = cli("prune", "--older-than", "1d", "--archive", str(target))
    assert out.code == 1
    assert "is not writable" in out.error_lines[-1]
    assert _state(store) == before


def test_the_archive_errors_speak_of_the_option(cli, store, people, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x", encoding="utf-8")
    before = _state(store)
    for target, why in ((a_file, "is not a directory"), (a_file / "sub", "cannot create it")):
        out = cli("prune", "--older-than", "1d", "--archive", str(target))
        assert out.code == 1, out.stderr
        line = out.error_lines[-1]
        assert line.startswith(f"{ERROR}--archive ") and why in line, line
        assert "archive_dir" not in out.stderr
    assert _state(store) == before


def test_a_dry_run_does_not_create_the_archive_directory(cli, store, people, tmp_path):
    out = cli("prune", "--older-than", "1w", "--dry-run", "--archive", str(tmp_path / "new"))
    assert out.code == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("would delete 4 sessions")
    assert not (tmp_path / "new").exists()


def test_a_cut_archive_does_not_import(cli, store, people, tmp_path):
    archive = tmp_path / "archive"
    assert cli("prune", "--older-than", "30d", "--archive", str(archive)).code == 0
    (cut,) = archive.glob("s0~*.jsonl")
    lines = cut.read_text(encoding="utf-8").splitlines(keepends=True)
    cut.write_text("".join(lines[:-1]), encoding="utf-8")  # cut at a line boundary
    out = cli("import", str(archive))
    assert out.code == 1
    assert "truncated" in out.stderr and "says 1 events follow, the file holds 0" in out.stderr
    assert sorted(info.id for info in store.list_sessions()) == ["s1", "s2", "s3", "s4"]


def test_prune_on_sqlite_loads_neither_postgresql_nor_the_benchmark(sqlite_cli):
    from session_sql import open_store

    from .test_cli_startup import CLI_EXTRAS, POSTGRESQL_ONLY, among, loaded

    open_store(sqlite_cli.url).close()
    modules = loaded(sqlite_cli, "prune", "--older-than", "1d", "--json")
    assert among(modules, POSTGRESQL_ONLY + CLI_EXTRAS) == []
