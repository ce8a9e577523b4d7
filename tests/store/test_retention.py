"""Retention (SPEC §12.3): ``prune`` selects by last update, user, labels and tenant, deletes
whole sessions oldest first, archives each before deleting it, keeps a session written to
after it was selected, and changes nothing on a dry run or on bad input."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from session_sql import (
    ConcurrencyError,
    InvalidArgumentError,
    PruneReport,
    SessionNotFoundError,
    open_store,
)
from session_sql._store import retention

from .store_builders import FUTURE, dump_tables, execute, refused, say, surface_table, tables, wires
from .test_store_jsonl_metadata import NEW_AT_CREATION, fill, row_of

SYNC_ONLY = {
    "test_a_session_appended_to_after_its_selection_is_kept": (
        "appends through the store from inside the selection's read, which runs on the event loop"
    ),
}
DAY = 86_400_000
NOW = 1_700_000_000_000
"""Before any real clock reading of these tests: what a writer appends now is newer."""


def age(store: Any, session_id: str, updated_at: int) -> None:
    """Set a session's last-update time (as if its last append was then)."""
    s = tables(store).sessions
    execute(
        store,
        update(s)
        .where(s.c.tenant == store.tenant, s.c.id == session_id)
        .values(updated_at=updated_at),
    )


def population(store: Any) -> dict[str, int]:
    """Six sessions of two users with labels, last updated 1..6 days before ``NOW``."""
    when: dict[str, int] = {}
    for i in range(6):
        sid = f"s{i}"
        handle = store.create_session(
            sid, user_id=f"user-{i % 2}", labels={"app": "a" if i < 3 else "b", "n": str(i)}
        )
        for text in range(i + 1):
            say(handle, f"message {text}")
        when[sid] = NOW - (6 - i) * DAY
        age(store, sid, when[sid])
    return when


def ids(store: Any) -> set[str]:
    return {info.id for info in store.list_sessions(limit=1000)}


def test_prune_by_last_update_deletes_the_older_sessions_oldest_first(store):
    when = population(store)
    report = store.prune(updated_before=NOW - 3 * DAY)
    assert isinstance(report, PruneReport)
    assert [s.id for s in report.sessions] == ["s0", "s1", "s2"]
    assert [s.updated_at for s in report.sessions] == [when["s0"], when["s1"], when["s2"]]
    assert [s.events for s in report.sessions] == [1, 2, 3]
    assert all(s.bytes > 0 and s.archive is None for s in report.sessions)
    assert report.events == 6 and report.bytes == sum(s.bytes for s in report.sessions)
    assert report.tenant == store.tenant and not report.dry_run and report.kept == []
    assert report.started_at <= report.finished_at
    assert ids(store) == {"s3", "s4", "s5"}
    # Nothing left of them in any table (rows by key: session_key, tenant, id, ...).
    dump = dump_tables(store)
    assert {row[2] for row in dump["sessions"]} == {"s3", "s4", "s5"}
    keys = {row[0] for row in dump["sessions"]}
    assert {row[0] for row in dump["events"]} == keys
    assert {row[0] for row in dump["surface"]} == keys


def test_prune_by_user_erases_every_session_of_that_user(store):
    population(store)
    report = store.prune(user_id="user-1")
    assert [s.id for s in report.sessions] == ["s1", "s3", "s5"]
    assert {s.user_id for s in report.sessions} == {"user-1"}
    assert ids(store) == {"s0", "s2", "s4"}


def test_prune_by_labels_needs_every_pair(store):
    population(store)
    assert [s.id for s in store.prune(labels={"app": "b", "n": "4"}).sessions] == ["s4"]
    assert [s.id for s in store.prune(labels={"app": "a"}).sessions] == ["s0", "s1", "s2"]
    assert ids(store) == {"s3", "s5"}


def test_the_selectors_combine(store):
    population(store)
    report = store.prune(updated_before=NOW - 2 * DAY, user_id="user-0", labels={"app": "a"})
    assert [s.id for s in report.sessions] == ["s0", "s2"]


def test_prune_keeps_to_the_tenant(backend, tenant):
    other = "globex" if tenant else "acme"
    with (
        open_store(backend.url, schema=backend.schema, tenant=tenant) as mine,
        open_store(backend.url, schema=backend.schema, tenant=other) as theirs,
    ):
        population(mine)
        population(theirs)
        assert len(mine.prune(updated_before=NOW).sessions) == 6
        assert ids(mine) == set()
        assert ids(theirs) == {f"s{i}" for i in range(6)}
        assert all(theirs.verify(sid).ok for sid in ids(theirs))


def test_a_dry_run_lists_the_sessions_and_changes_nothing(store, archive):
    population(store)
    before = dump_tables(store)
    report = store.prune(updated_before=NOW - 3 * DAY, dry_run=True, archive_dir=archive)
    assert report.dry_run
    assert [(s.id, s.events) for s in report.sessions] == [("s0", 1), ("s1", 2), ("s2", 3)]
    assert all(s.bytes > 0 for s in report.sessions)
    assert dump_tables(store) == before
    assert list(archive.iterdir()) == []  # nothing archived either
    real = store.prune(updated_before=NOW - 3 * DAY)
    assert [s.model_dump() for s in real.sessions] == [s.model_dump() for s in report.sessions]


def test_nothing_to_do_is_a_cheap_empty_report(store):
    population(store)
    before = dump_tables(store)
    assert store.prune(updated_before=NOW - 30 * DAY).sessions == []
    assert store.prune(user_id="nobody").sessions == []
    assert dump_tables(store) == before


def test_many_pages_and_batches(store, monkeypatch):
    monkeypatch.setattr(retention, "PAGE_SESSIONS", 7)
    monkeypatch.setattr(retention, "BATCH_SESSIONS", 3)
    monkeypatch.setattr(retention, "BATCH_EVENTS", 4)
    for i in range(40):
        handle = store.create_session(f"p{i:02d}")
        say(handle, "x")
        say(handle, "y")
        age(store, f"p{i:02d}", NOW - (100 - i) * DAY)
    keep = store.create_session("recent")
    say(keep, "z")
    report = store.prune(updated_before=NOW)
    assert [s.id for s in report.sessions] == [f"p{i:02d}" for i in range(40)]
    assert ids(store) == {"recent"}


def test_deleting_a_parent_leaves_its_forks_whole(store):
    parent = store.create_session("parent", user_id="gone")
    for text in ("a", "b", "c"):
        say(parent, text)
    child = store.fork_session("parent", boundary=2, child_id="child")
    say(child, "own")
    store.update_session("child", labels={"kept": "yes"})
    events, surface = wires(store.events("child")), surface_table(store, "child")
    age(store, "parent", NOW - DAY)
    report = store.prune(updated_before=NOW)
    assert [s.id for s in report.sessions] == ["parent"]
    assert wires(store.events("child")) == events
    assert surface_table(store, "child") == surface
    assert store.verify("child").ok
    assert store.session_info("child").parent_session == "parent"


def test_the_archive_imports_back_to_identical_sessions(store, archive):
    fill(store)
    rows = {sid: row_of(store, sid) for sid in ids(store)}
    events = {sid: wires(store.events(sid)) for sid in rows}
    surfaces = {sid: surface_table(store, sid) for sid in rows}
    infos = {sid: store.session_info(sid) for sid in rows}
    report = store.prune(updated_before=FUTURE, archive_dir=archive)
    assert sorted(s.id for s in report.sessions) == sorted(rows)
    assert ids(store) == set()
    for pruned in report.sessions:
        name = retention.archive_file_name(pruned.id, store.tenant, rows[pruned.id]["incarnation"])
        assert pruned.archive == str(archive / name)
    assert sorted(p.name for p in archive.iterdir()) == sorted(
        Path(s.archive or "").name for s in report.sessions
    )
    for pruned in report.sessions:
        assert store.import_jsonl(pruned.archive) == pruned.id
    for sid, before in rows.items():
        after = row_of(store, sid)
        kept = set(before) - NEW_AT_CREATION
        assert {c: after[c] for c in kept} == {c: before[c] for c in kept}, sid
        assert store.session_info(sid) == infos[sid]
        assert wires(store.events(sid)) == events[sid]
        assert surface_table(store, sid) == surfaces[sid]
        assert store.verify(sid).ok


def test_an_archive_file_left_by_an_interrupted_run_is_rewritten_whole(store, archive):
    population(store)
    incarnation = row_of(store, "s0")["incarnation"]
    stale = archive / retention.archive_file_name("s0", store.tenant, incarnation)
    stale.write_text("half a line", encoding="utf-8")
    report = store.prune(updated_before=NOW - 5 * DAY, archive_dir=archive)
    assert [s.id for s in report.sessions] == ["s0"]
    assert not [p for p in archive.iterdir() if p.name.startswith(".")]  # no temporaries
    assert store.import_jsonl(stale) == "s0"
    assert store.verify("s0").ok


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({}, "updated_before"),
        ({"updated_before": -1}, "updated_before"),
        ({"updated_before": "30d"}, "updated_before"),
        ({"updated_before": True}, "updated_before"),
        ({"updated_before": 1.5}, "updated_before"),
        ({"user_id": ""}, "user_id"),
        ({"user_id": 7}, "user_id"),
        ({"labels": {"bad name!": "v"}}, "labels"),
        ({"labels": "app=a"}, "labels"),
        ({"updated_before": NOW, "dry_run": "yes"}, "dry_run"),
        ({"updated_before": NOW, "archive_dir": 3}, "archive_dir"),
        ({"updated_before": NOW, "archive_dir": "/nonexistent/archive"}, "archive_dir"),
    ],
)
def test_bad_arguments_change_nothing(store, arguments, argument):
    population(store)
    with refused(store, InvalidArgumentError) as info:
        store.prune(**arguments)
    assert info.value.argument == argument


def test_an_archive_dir_that_is_a_file_or_not_writable_changes_nothing(store, tmp_path):
    population(store)
    a_file = tmp_path / "file"
    a_file.write_text("x", encoding="utf-8")
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    unwritable = Path("/proc/self") if os.geteuid() == 0 else read_only  # root writes anywhere
    for target, why in ((a_file, "not a directory"), (unwritable, "not writable")):
        with refused(store, InvalidArgumentError, match=why) as info:
            store.prune(updated_before=NOW, archive_dir=target)
        assert info.value.argument == "archive_dir"


def test_a_session_appended_to_after_its_selection_is_kept(store, archive, monkeypatch):
    population(store)
    read_page = retention.read_page
    writer = store.open_session("s1")

    def then_append(ctx: Any, request: Any, after: Any) -> Any:
        page = read_page(ctx, request, after)
        if after is None:
            say(writer, "just in time")  # between the selection and the delete
        return page

    monkeypatch.setattr(retention, "read_page", then_append)
    for folder in (None, archive):
        report = store.prune(updated_before=NOW - 3 * DAY, archive_dir=folder)
        assert "s1" in report.kept and "s1" not in [s.id for s in report.sessions]
        assert "s1" in ids(store) and store.verify("s1").ok
        assert wires(store.events("s1"))[-1]["data"]["content"][0]["text"] == "just in time"
        age(store, "s1", NOW - 5 * DAY)  # old again, for the second round
        for sid in ("s0", "s2"):
            store.create_session(sid)
            age(store, sid, NOW - 6 * DAY)


def test_a_session_whose_metadata_is_edited_after_its_selection_is_kept(
    backend, tenant, store, archive, monkeypatch
):
    """A metadata edit moves no ``updated_at``: the delete compares the metadata too, so an
    archive written before the edit never stands in for the edited session."""
    population(store)
    read_page = retention.read_page
    edits = iter([{"title": "renamed"}, {"labels": {"team": "b"}}, {"title": None}])
    editor = open_store(backend.url, schema=backend.schema, tenant=tenant)

    def then_edit(ctx: Any, request: Any, after: Any) -> Any:
        page = read_page(ctx, request, after)
        if after is None:  # between the selection and the delete, from another thread
            edit = threading.Thread(target=editor.update_session, args=("s1",), kwargs=next(edits))
            edit.start()
            edit.join()
        return page

    monkeypatch.setattr(retention, "read_page", then_edit)
    for folder in (archive, None, archive):
        report = store.prune(updated_before=NOW - 3 * DAY, archive_dir=folder)
        assert "s1" in report.kept and "s1" not in [s.id for s in report.sessions]
        assert "s1" in ids(store) and store.verify("s1").ok
        for sid in ("s0", "s2"):
            store.create_session(sid)
            age(store, sid, NOW - 6 * DAY)
    editor.close()
    info = store.session_info("s1")
    assert (info.title, info.labels) == (None, {"team": "b"})


def test_a_session_written_to_while_pruning_survives(backend, monkeypatch):
    """A writer appends to old sessions while a prune deletes them: every session it wrote
    to is still there with every event it wrote, and every deleted one refused its writes."""
    monkeypatch.setattr(retention, "PAGE_SESSIONS", 5)
    monkeypatch.setattr(retention, "BATCH_SESSIONS", 2)
    with (
        open_store(backend.url, schema=backend.schema) as pruner,
        open_store(backend.url, schema=backend.schema) as writing,
    ):
        for i in range(60):
            say(pruner.create_session(f"w{i:02d}"), "old")
            age(pruner, f"w{i:02d}", NOW - (100 - i) * DAY)
        handles = [writing.open_session(f"w{i:02d}") for i in range(60)]
        written: dict[str, int] = {}
        started = threading.Event()

        def write() -> None:
            for handle in reversed(handles):  # from the newest: the prune starts at the oldest
                try:
                    say(handle, "new")
                    written[handle.id] = handle.seq
                except (ConcurrencyError, SessionNotFoundError):
                    pass
                started.set()

        thread = threading.Thread(target=write)
        thread.start()
        started.wait(10)
        report = pruner.prune(updated_before=NOW)
        thread.join()
        deleted = {s.id for s in report.sessions}
        assert deleted.isdisjoint(written)
        assert written, "the writer wrote nothing"
        for sid, seq in written.items():
            assert pruner.head_seq(sid) == seq - 1 and pruner.verify(sid).ok
        assert ids(pruner) == {f"w{i:02d}" for i in range(60)} - deleted


def test_the_async_store_prunes_with_the_same_steps(store, archive):
    population(store)
    report = store.prune(updated_before=NOW - 4 * DAY, archive_dir=archive)
    assert [s.id for s in report.sessions] == ["s0", "s1"]
    assert [p.name.split("~")[0] for p in sorted(archive.iterdir())] == ["s0", "s1"]


def test_sqlite_gives_the_space_back(tmp_path):
    path = tmp_path / "space.db"
    with open_store(f"sqlite:///{path}") as store:
        for i in range(40):
            handle = store.create_session(f"big{i}", labels={"size": "big"})
            for _ in range(20):
                say(handle, "x" * 4000)
        say(store.create_session("small"), "kept")
        pragma(store, "PRAGMA wal_checkpoint(TRUNCATE)")
        full = path.stat().st_size
        store.prune(labels={"size": "big"})
        assert ids(store) == {"small"} and store.verify("small").ok
        assert path.stat().st_size < full / 4
        assert pragma(store, "PRAGMA freelist_count") == 0
        assert pragma(store, "PRAGMA auto_vacuum") == 2
        assert pragma(store, "PRAGMA integrity_check") == "ok"


def test_a_store_made_without_incremental_vacuum_is_pruned_all_the_same(tmp_path):
    path = tmp_path / "old.db"
    open_store(f"sqlite:///{path}").close()
    db = sqlite3.connect(path, isolation_level=None)  # as a store made before it was set
    db.execute("PRAGMA auto_vacuum = NONE")
    db.execute("VACUUM")
    db.close()
    with open_store(f"sqlite:///{path}") as store:
        assert pragma(store, "PRAGMA auto_vacuum") == 0
        for i in range(5):
            say(store.create_session(f"s{i}"), "x" * 4000)
        assert len(store.prune(updated_before=FUTURE).sessions) == 5
        assert ids(store) == set()
        assert pragma(store, "PRAGMA integrity_check") == "ok"


def test_a_new_sqlite_store_has_incremental_vacuum(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'new.db'}") as store:
        assert pragma(store, "PRAGMA auto_vacuum") == 2


def pragma(store: Any, statement: str) -> Any:
    """Run an SQLite pragma outside any transaction; its first value."""
    raw = store.engine.raw_connection()
    try:
        row = raw.driver_connection.execute(statement).fetchone()
    finally:
        raw.close()
    return None if row is None else row[0]
