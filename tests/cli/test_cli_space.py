"""``vacuum``, ``delete`` giving space back, and ``export --format parquet`` from the CLI."""

from __future__ import annotations

import json
import re

import pytest

from tests.builders import say

pq = pytest.importorskip("pyarrow.parquet")


def fill(store, count: int = 400) -> None:
    handle = store.create_session("big")
    for _ in range(count):
        say(handle, "x" * 4000)
    say(store.create_session("small"), "kept")


def test_delete_gives_the_space_back_on_sqlite(sqlite_cli, tmp_path):
    with sqlite_cli.store() as store:
        fill(store)
    before = sqlite_cli("vacuum")  # checkpoints: the file holds every page
    assert before.code == 0, before.stderr
    size = (tmp_path / "sessions.db").stat().st_size
    out = sqlite_cli("delete", "--yes", "big")
    assert out.code == 0, out.stderr
    assert out.stdout == "deleted big (400 events)\n"
    assert (tmp_path / "sessions.db").stat().st_size < size / 4


def test_vacuum_prints_the_size_before_and_after(sqlite_cli, tmp_path):
    with sqlite_cli.store() as store:
        fill(store)
    out = sqlite_cli("vacuum", "--full")
    assert out.code == 0, out.stderr
    match = re.fullmatch(r"VACUUM: ([\d,]+) bytes before, ([\d,]+) after.*\n", out.stdout)
    assert match, out.stdout
    after = int(match[2].replace(",", ""))
    assert after == (tmp_path / "sessions.db").stat().st_size
    report = json.loads(sqlite_cli("vacuum", "--json").stdout)
    assert report["backend"] == "sqlite" and report["action"] == "PRAGMA incremental_vacuum"


def test_vacuum_says_what_it_did_and_what_is_left(cli, store, backend):
    fill(store, 20)
    out = cli("vacuum")
    assert out.code == 0, out.stderr
    assert out.stdout.startswith(f"{backend.expect.vacuum_action}: ")
    if backend.has("vacuum_full"):
        assert "VACUUM FULL" in out.stderr and "session-sql vacuum --full" in out.stderr
    else:
        assert out.stderr == ""


def test_export_parquet_prints_the_cursor_for_the_next_export(cli, store, tmp_path):
    fill(store, 3)
    first = cli("export", "--format", "parquet", str(tmp_path / "lake"))
    assert first.code == 0, first.stderr
    cursor = first.stdout.strip()
    assert "\n" not in cursor and cursor.startswith("pq1.")
    assert "4 events" in first.stderr
    say(store.open_session("small"), "more")
    second = cli("export", "--format", "parquet", str(tmp_path / "lake"), "--since", cursor)
    assert second.code == 0, second.stderr
    files = sorted((tmp_path / "lake" / "events").glob("*.parquet"))
    assert [pq.read_table(f).num_rows for f in files] == [4, 1]


def test_export_parquet_refuses_what_it_cannot_do(cli, store, tmp_path):
    assert cli("export", "--since", "pq1.x", "--all", str(tmp_path)).code == 2
    assert cli("export", "--format", "csv", "--all", str(tmp_path)).code == 2
    assert cli("export", "--format", "parquet").code == 2
    bad = cli("export", "--format", "parquet", str(tmp_path / "lake"), "--since", "nonsense")
    assert bad.code == 1 and "cursor" in bad.stderr
    assert not (tmp_path / "lake").exists()
