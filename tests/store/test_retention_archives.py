"""``prune --archive``'s files: one per session, never overwritten by another session (an id
created again after a prune, the same id in another tenant sharing the folder), rewritten by a
re-run of the same prune rather than copied, and a killed run's temporary file taken over by
the next run (never a file that is not its own, nor one a live writer holds)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from session_sql import jsonl_file_name, open_store
from session_sql._store import retention

from .store_builders import FUTURE, say, tables, wires

ROOT = Path(__file__).resolve().parents[2]


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def restored(store: Any, path: str | Path) -> list[Any]:
    """Import ``path``, read its session's events, and delete it again."""
    session_id = store.import_jsonl(path)
    assert store.verify(session_id).ok
    events = wires(store.events(session_id))
    store.delete_session(session_id)
    return events


def test_an_id_pruned_created_again_and_pruned_again_keeps_both_archives(store, archive):
    say(store.create_session("thread-1"), "the first conversation")
    first = wires(store.events("thread-1"))
    one = store.prune(updated_before=FUTURE, archive_dir=archive).sessions[0].archive
    handle = store.create_session("thread-1")  # a caller-chosen id, used again
    say(handle, "another conversation")
    say(handle, "that goes on")
    second = wires(store.events("thread-1"))
    two = store.prune(updated_before=FUTURE, archive_dir=archive).sessions[0].archive
    assert one is not None and two is not None and one != two
    assert files(archive) == sorted([Path(one).name, Path(two).name])
    for name in files(archive):  # named after the id, as 'export --all' names its file
        assert name.startswith(jsonl_file_name("thread-1").removesuffix(".jsonl") + "~")
    assert restored(store, one) == first
    assert restored(store, two) == second


def test_the_same_id_in_two_tenants_sharing_one_folder_keeps_both_archives(backend, archive):
    stores = [open_store(backend.url, schema=backend.schema, tenant=t) for t in ("", "acme")]
    try:
        for store in stores:
            say(store.create_session("s"), f"said in tenant {store.tenant!r}")
        logs = [wires(store.events("s")) for store in stores]
        paths = [
            store.prune(updated_before=FUTURE, archive_dir=archive).sessions[0].archive
            for store in stores
        ]
        assert len(set(paths)) == 2 and len(files(archive)) == 2
        for store, path, log in zip(stores, paths, logs, strict=True):
            assert path is not None and restored(store, path) == log
    finally:
        for store in stores:
            store.close()


def test_a_rerun_of_an_interrupted_prune_rewrites_the_same_files(store, archive, monkeypatch):
    for i in range(3):
        say(store.create_session(f"s{i}"), f"message {i}")
    logs = {f"s{i}": wires(store.events(f"s{i}")) for i in range(3)}
    delete_batch = retention.delete_batch

    def killed(ctx: Any, batch: Any) -> Any:
        raise KilledError  # archived, not yet deleted: as a kill there leaves it

    monkeypatch.setattr(retention, "delete_batch", killed)
    with pytest.raises(KilledError):
        store.prune(updated_before=FUTURE, archive_dir=archive)
    written = files(archive)
    assert len(written) == 3
    monkeypatch.setattr(retention, "delete_batch", delete_batch)
    report = store.prune(updated_before=FUTURE, archive_dir=archive)
    assert files(archive) == written  # the same file per session, no second copy
    assert sorted(Path(s.archive or "").name for s in report.sessions) == written
    for pruned in report.sessions:
        assert restored(store, pruned.archive or "") == logs[pruned.id]


class KilledError(Exception):
    """The run stops here, as if killed."""


def temporary(store: Any, folder: Path, session_id: str) -> Path:
    """The temporary file a prune writes ``session_id``'s archive through."""
    s = tables(store).sessions
    with store.engine.connect() as conn:
        incarnation = conn.execute(
            select(s.c.incarnation).where(s.c.tenant == store.tenant, s.c.id == session_id)
        ).scalar_one()
    return folder / f".{retention.archive_file_name(session_id, store.tenant, incarnation)}.tmp"


def test_a_killed_runs_temporary_file_is_taken_over_and_nothing_else(store, archive):
    say(store.create_session("s0"), "hello")
    log = wires(store.events("s0"))
    left = temporary(store, archive, "s0")
    left.write_text('{"half an archive', encoding="utf-8")  # what a kill mid-write leaves
    others = [archive / ".notes.tmp", archive / f".{jsonl_file_name('s0')}.0123456789abcdef.tmp"]
    for other in others:
        other.write_text("not the prune's", encoding="utf-8")
    report = store.prune(updated_before=FUTURE, archive_dir=archive)
    assert not left.exists()
    assert sorted(files(archive)) == sorted(
        [Path(report.sessions[0].archive or "").name, *(p.name for p in others)]
    )
    for other in others:
        assert other.read_text(encoding="utf-8") == "not the prune's"
    assert restored(store, report.sessions[0].archive or "") == log


def test_a_temporary_file_a_live_writer_holds_is_left_alone(store, archive):
    say(store.create_session("s0"), "hello")
    held = temporary(store, archive, "s0")
    held.write_text("being written", encoding="utf-8")
    fd = os.open(held, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another prune of the same session, still running
        report = store.prune(updated_before=FUTURE, archive_dir=archive)
        assert held.read_text(encoding="utf-8") == "being written"
    finally:
        os.close(fd)
    path = report.sessions[0].archive or ""
    assert Path(path).is_file() and [p for p in files(archive) if p.endswith(".tmp")] == [held.name]
    assert store.import_jsonl(path) == "s0"


DIES_WRITING_AN_ARCHIVE = """
import os, signal, sys
from session_sql import open_store
from session_sql._store import transfer

def dying(out, header, events):
    out.write('{"id": "half a header')
    out.flush()
    os.kill(os.getpid(), signal.SIGKILL)

transfer.write_jsonl = dying
with open_store(sys.argv[1], schema=sys.argv[2]) as store:
    store.prune(updated_before=4_000_000_000_000, archive_dir=sys.argv[3])
"""


def test_a_rerun_removes_what_a_prune_killed_while_writing_an_archive_left(backend, archive):
    with open_store(backend.url, schema=backend.schema) as store:
        for i in range(2):
            say(store.create_session(f"s{i}"), f"message {i}")
        logs = {f"s{i}": wires(store.events(f"s{i}")) for i in range(2)}
        command = [sys.executable, "-c", DIES_WRITING_AN_ARCHIVE]
        child = subprocess.run(
            [*command, backend.url, backend.schema, str(archive)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert child.returncode == -signal.SIGKILL
        assert [p for p in files(archive) if p.endswith(".tmp")]  # what the kill left
        report = store.prune(updated_before=FUTURE, archive_dir=archive)
        assert files(archive) == sorted(Path(s.archive or "").name for s in report.sessions)
        for pruned in report.sessions:
            assert restored(store, pruned.archive or "") == logs[pruned.id]
