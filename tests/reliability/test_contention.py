"""Contention: 8 processes on one session, and 8 processes on 8 sessions, on both backends.

Each worker performs marked operations — single appends, two-event ``append_many`` batches and
replaces of two surface nodes — refreshing and retrying whenever another writer won. Afterwards
the log has no gap and no duplicate, every operation a worker saw commit is in it exactly once
and in that worker's order, nothing was committed that no worker saw commit, and ``verify``
passes. Conflicts are counted and reported. Workers keep SQLite's default busy timeout, and no
worker may see any error but ``ConcurrencyError``: in particular SQLite never reports 'database
is locked' while writers wait for each other within the timeout.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from session_sql import open_store

from .reliability_builders import assert_store_consistent
from .reliability_workers import contender, create_racer

SPAWN = multiprocessing.get_context("spawn")
WORKERS = 8
PER_WORKER = 30


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    """Eight spawned workers shared by the module: starting them is most of the cost."""
    with ProcessPoolExecutor(max_workers=WORKERS, mp_context=SPAWN) as executor:
        yield executor


def _marks_in(events) -> list[str]:
    """The operation marks in a log: each operation writes exactly one user/message."""
    return [e.data["id"] for e in events if e.type == "user/message" and e.data["id"][0] == "w"]


def _run(pool, backend, sessions: list[str], tmp_path) -> list[dict]:
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    futures = [
        pool.submit(
            contender,
            backend.url,
            backend.schema,
            sessions[w % len(sessions)],
            w,
            PER_WORKER,
            str(rendezvous),
            WORKERS,
            1000 + w,
        )
        for w in range(WORKERS)
    ]
    results = [f.result(timeout=300) for f in futures]
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], errors
    return results


@pytest.mark.slow
def test_eight_writers_on_one_session(backend, pool, tmp_path, record_property):
    started = time.monotonic()
    with open_store(backend.url, schema=backend.schema) as store:
        store.create_session("shared")
        results = _run(pool, backend, ["shared"], tmp_path)
        log = assert_store_consistent(store, "shared")

    marks = _marks_in(log)
    assert len(marks) == len(set(marks)), "an operation was committed twice"
    for r in results:
        assert len(r["committed"]) == PER_WORKER
        mine = [m for m in marks if m.startswith(f"w{r['worker']}-")]
        assert mine == r["committed"], f"worker {r['worker']}: lost or reordered operations"
    assert sorted(marks) == sorted(m for r in results for m in r["committed"])
    batches = Counter(e.type for e in log)["todo/write"]
    assert len(log) == WORKERS * PER_WORKER + batches  # no event without its operation

    conflicts = sum(r["conflicts"] for r in results)
    figures = {
        "workers": WORKERS,
        "operations": WORKERS * PER_WORKER,
        "events": len(log),
        "replaces": sum(r["replaces"] for r in results),
        "conflicts": conflicts,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(f"\ncontention, one session [{backend.name}]: {figures}")
    for name, value in figures.items():
        record_property(name, value)
    assert conflicts > 0, "eight writers on one session never collided: the test proves nothing"


@pytest.mark.slow
def test_eight_writers_on_eight_sessions(backend, pool, tmp_path, record_property):
    started = time.monotonic()
    sessions = [f"own-{w}" for w in range(WORKERS)]
    with open_store(backend.url, schema=backend.schema) as store:
        for sid in sessions:
            store.create_session(sid)
        results = _run(pool, backend, sessions, tmp_path)
        for r in results:
            assert r["conflicts"] == 0, "a writer alone on its session saw a conflict"
            log = assert_store_consistent(store, sessions[r["worker"]])
            assert _marks_in(log) == r["committed"]
            assert len(r["committed"]) == PER_WORKER
    figures = {
        "workers": WORKERS,
        "operations": WORKERS * PER_WORKER,
        "conflicts": 0,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(f"\ncontention, own sessions [{backend.name}]: {figures}")
    for name, value in figures.items():
        record_property(name, value)


@pytest.mark.slow
def test_eight_processes_racing_to_create_one_session_id(backend, pool, tmp_path):
    """Creates and forks racing for one id: exactly one wins, the others are told it exists."""
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    with open_store(backend.url, schema=backend.schema) as store:
        parent = store.create_session("parent")
        parent.append(
            "user/message",
            {"id": "m", "role": "user", "content": [], "source": {"kind": "u"}},
            surface_op="append",
        )
        futures = [
            pool.submit(
                create_racer,
                backend.url,
                backend.schema,
                "contested",
                "parent",
                str(rendezvous),
                w,
                WORKERS,
            )
            for w in range(WORKERS)
        ]
        outcomes = Counter(f.result(timeout=300) for f in futures)
        assert outcomes == {"created": 1, "SessionExistsError": WORKERS - 1}, outcomes
        assert_store_consistent(store, "contested")
        assert sorted(s.id for s in store.list_sessions()) == ["contested", "parent"]
