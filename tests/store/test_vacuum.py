"""``delete_session`` gives a SQLite file's space back as ``prune`` does, and ``vacuum``
reclaims what it can on each database, measuring the store before and after."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from session_sql import open_store

from .store_builders import say


def fill(store: Any, prefix: str, sessions: int = 20) -> None:
    for i in range(sessions):
        handle = store.create_session(f"{prefix}{i}")
        for _ in range(20):
            say(handle, "x" * 4000)


def pragma(store: Any, statement: str) -> Any:
    raw = store.engine.raw_connection()
    try:
        return raw.driver_connection.execute(statement).fetchone()[0]
    finally:
        raw.close()


def size(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def test_delete_session_gives_the_space_back_on_sqlite(tmp_path):
    path = tmp_path / "space.db"
    with open_store(f"sqlite:///{path}") as store:
        fill(store, "big", sessions=1)
        handle = store.create_session("huge")
        for _ in range(400):
            say(handle, "x" * 4000)
        say(store.create_session("small"), "kept")
        pragma(store, "PRAGMA wal_checkpoint(TRUNCATE)")
        full = path.stat().st_size
        store.delete_session("huge")
        assert path.stat().st_size < full / 4
        assert pragma(store, "PRAGMA freelist_count") == 0
        assert store.verify("small").ok and store.verify("big0").ok
        assert pragma(store, "PRAGMA integrity_check") == "ok"


def test_vacuum_on_sqlite_measures_the_file_before_and_after(tmp_path):
    path = tmp_path / "old.db"
    open_store(f"sqlite:///{path}").close()
    db = sqlite3.connect(path, isolation_level=None)  # a file made before incremental vacuum
    db.execute("PRAGMA auto_vacuum = NONE")
    db.execute("VACUUM")
    db.close()
    with open_store(f"sqlite:///{path}") as store:
        fill(store, "s")
        for i in range(20):
            store.delete_session(f"s{i}")  # no incremental vacuum: the file keeps its size
        pragma(store, "PRAGMA wal_checkpoint(TRUNCATE)")
        before = size(path)
        plain = store.vacuum()
        assert plain.action == "none" and "--full" in plain.notes[0]
        assert plain.bytes_before == plain.bytes_after == before
        full = store.vacuum(full=True)
        assert (full.backend, full.action, full.bytes_before) == ("sqlite", "VACUUM", before)
        assert full.bytes_after == size(path) < before / 4
        assert pragma(store, "PRAGMA auto_vacuum") == 2  # later deletes give space back
        again = store.vacuum()
        assert again.action == "PRAGMA incremental_vacuum" and again.notes == ()


def test_vacuum_on_either_database(store, backend):
    fill(store, "s", sessions=10)
    for i in range(10):
        store.delete_session(f"s{i}")
    say(store.create_session("kept"), "still here")
    report = store.vacuum()
    assert report.backend == backend.name
    assert report.bytes_before > 0 and report.bytes_after > 0
    if backend.has("vacuum_full"):
        assert report.action == "VACUUM (ANALYZE)"
        assert "VACUUM FULL" in report.notes[0]
        full = store.vacuum(full=True)
        assert full.action == "VACUUM (FULL, ANALYZE)" and full.notes == ()
        assert full.bytes_after < report.bytes_after
    assert store.verify("kept").ok
    assert [e.data["content"][0]["text"] for e in store.events("kept")] == ["still here"]


def test_a_small_delete_leaves_its_pages_to_the_next_rows_until_a_vacuum(tmp_path):
    path = tmp_path / "small.db"
    with open_store(f"sqlite:///{path}") as store:
        fill(store, "s", sessions=2)  # each about 80 KiB: less than a vacuum step
        store.delete_session("s0")
        assert 0 < pragma(store, "PRAGMA freelist_count") < 256
        report = store.vacuum()
        assert pragma(store, "PRAGMA freelist_count") == 0
        assert report.bytes_after < report.bytes_before
