"""A prune killed with SIGKILL at random points, then run again (SPEC §12.3): nothing is lost
(every deleted session has an archive file that imports back to it, identical), nothing is
half-deleted (every session still there is whole), and the second run finishes the work.

Ten trials per backend (the issue's twenty in all): each kills a child process running
``prune_worker`` after a random number of deleted sessions and a random extra delay.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from session_sql import SessionStore, jsonl_file_name, open_store

from .store_builders import say, tables, tool_turn

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 30
FUTURE = 4_000_000_000_000


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """The sessions every trial starts from, as exported JSONL files (parsed lines) by id:
    metadata, tool turns, forks of forks."""
    folder = tmp_path_factory.mktemp("originals")
    with open_store(f"sqlite:///{folder / 'template.db'}") as store:
        for i in range(SESSIONS - 6):
            handle = store.create_session(
                f"c{i:02d}", user_id=f"u{i % 3}", title=f"chat {i}", labels={"n": str(i)}
            )
            say(handle, f"hello {i}")
            if i % 2:
                tool_turn(handle, 1)
        for i in range(6):
            store.fork_session(f"c{i:02d}" if i < 3 else f"f{i - 3}", child_id=f"f{i}")
            say(store.open_session(f"f{i}"), "fork's own")
        out: dict[str, list[Any]] = {}
        for info in store.iter_sessions():
            path = folder / jsonl_file_name(info.id)
            store.export_jsonl(info.id, path)
            out[info.id] = _lines(path)
    return out


def _lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def _exported(store: SessionStore, session_id: str, scratch: Path) -> list[Any]:
    store.export_jsonl(session_id, scratch)
    return _lines(scratch)


def _load(store: SessionStore, originals: dict[str, list[Any]], folder: Path) -> None:
    for session_id, lines in originals.items():
        path = folder / jsonl_file_name(session_id)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        store.import_jsonl(path)


def _kill_mid_prune(backend: Any, archive: Path, rng: random.Random) -> int:
    """Run the worker and SIGKILL it at a random point; returns the sessions it reported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "tests.store.prune_worker"]
    child = subprocess.Popen(
        [*command, backend.url, backend.schema, str(archive)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "ready\n"
        deleted = 0
        for _ in range(rng.randrange(SESSIONS)):
            if not child.stdout.readline().strip():
                break
            deleted += 1
        time.sleep(rng.uniform(0, 0.02))
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(30)
        child.stdout.close()
    return deleted


def _archive_of(archive: Path, session_id: str) -> Path:
    """The one archive file of ``session_id`` (``<jsonl_file_name stem>~<tag>.jsonl``)."""
    found = list(archive.glob(jsonl_file_name(session_id).removesuffix(".jsonl") + "~*.jsonl"))
    assert len(found) == 1, (session_id, found)
    return found[0]


def _check_nothing_lost(
    store: SessionStore, originals: dict[str, list[Any]], archive: Path, scratch: Path
) -> set[str]:
    """Every original session is whole in the store, or gone with its archive file holding
    it whole; no row is left of a gone one. Returns the ids still in the store."""
    present = {info.id for info in store.iter_sessions()}
    for session_id, lines in originals.items():
        if session_id in present:
            assert store.verify(session_id).ok, session_id
            assert _exported(store, session_id, scratch) == lines, session_id
        else:
            assert _lines(_archive_of(archive, session_id)) == lines, session_id
    t = tables(store)
    with store.engine.connect() as conn:
        keys = set(conn.execute(select(t.sessions.c.session_key)).scalars())
        for table in (t.events, t.surface):
            assert set(conn.execute(select(table.c.session_key).distinct()).scalars()) <= keys
    return present


@pytest.mark.parametrize("trial", range(10))
def test_a_killed_prune_loses_nothing_and_a_rerun_finishes(
    backend, tmp_path, originals, trial
) -> None:
    rng = random.Random(trial)
    archive = tmp_path / "archive"
    archive.mkdir()
    staging = tmp_path / "staging"
    staging.mkdir()
    scratch = tmp_path / "scratch.jsonl"
    with open_store(backend.url, schema=backend.schema) as store:
        _load(store, originals, staging)
    reported = _kill_mid_prune(backend, archive, rng)
    with open_store(backend.url, schema=backend.schema) as store:
        left = _check_nothing_lost(store, originals, archive, scratch)
        assert len(left) <= SESSIONS - reported  # what it reported deleted is gone
        report = store.prune(updated_before=FUTURE, archive_dir=archive)
        assert report.kept == []
        assert _check_nothing_lost(store, originals, archive, scratch) == set()
        # One file per session, and nothing the killed run left (temporary files included).
        assert len(list(archive.iterdir())) == SESSIONS
        # Restore: every archive file imports back to the original session.
        for session_id, lines in originals.items():
            assert store.import_jsonl(_archive_of(archive, session_id)) == session_id
            assert store.verify(session_id).ok
            assert _exported(store, session_id, scratch) == lines
