"""Several processes on one store: contention, following, and a writer killed mid-stream.

The contention and following tests run in a pool of 'spawn' worker processes shared by the
module (starting a Python process and importing the library is most of the cost); the crash
test starts its own process, since it kills it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from session_sql import interrupted_turn_closers

from .store_builders import tool_turn_log, wires
from .store_workers import (
    append_alone,
    append_with_retry,
    crashing_writer,
    follow_session,
    write_session,
)

# Worker processes open their own stores for the default tenant; tenants are covered by
# tests/store/test_tenants.py.
DEFAULT_TENANT_ONLY = True

SPAWN = multiprocessing.get_context("spawn")
WORKERS = 4
PER_WORKER = 25
TIMEOUT = 60


@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(max_workers=WORKERS, mp_context=SPAWN) as executor:
        yield executor


@pytest.mark.slow
def test_writers_on_one_session_retry_into_one_gapless_log(store, backend, pool, tmp_path):
    seed = tool_turn_log()
    initial = store.create_session("shared", seed=seed).seq
    futures = [
        pool.submit(
            append_with_retry,
            *(backend.url, backend.schema, "shared", w, PER_WORKER, str(tmp_path), WORKERS),
        )
        for w in range(WORKERS)
    ]
    outcomes = [f.result(timeout=TIMEOUT) for f in futures]
    assert len({pid for pid, _ in outcomes}) == WORKERS  # four processes, writing at once

    events = list(store.events("shared"))
    assert [e.seq for e in events] == list(range(initial + WORKERS * PER_WORKER))
    assert wires(events[: len(seed)]) == seed
    texts = [e.data["id"] for e in events[initial:]]
    assert sorted(texts) == sorted(f"w{w}-{i}" for w in range(WORKERS) for i in range(PER_WORKER))
    for w in range(WORKERS):  # each worker's own appends keep their order
        mine = [t for t in texts if t.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(PER_WORKER)]
    report = store.verify("shared")
    assert report.ok, report.problems
    assert store.surface("shared") == store.load_session("shared").surface.nodes
    assert len(store.messages("shared")) == 4 + WORKERS * PER_WORKER


@pytest.mark.slow
def test_writers_on_their_own_sessions_never_conflict(store, backend, pool, tmp_path):
    futures = [
        pool.submit(
            append_alone,
            *(backend.url, backend.schema, f"own-{w}", PER_WORKER, str(tmp_path), WORKERS),
        )
        for w in range(WORKERS)
    ]
    outcomes = [f.result(timeout=TIMEOUT) for f in futures]  # a ConcurrencyError would raise
    assert len({pid for pid, _, _ in outcomes}) == WORKERS
    assert sorted(o[1:] for o in outcomes) == [(f"own-{w}", PER_WORKER) for w in range(WORKERS)]
    for w in range(WORKERS):
        events = list(store.events(f"own-{w}"))
        assert [(e.seq, e.data["i"]) for e in events] == [(i, i) for i in range(PER_WORKER)]
        assert store.verify(f"own-{w}").ok


def test_a_follower_process_sees_exactly_the_writers_events(store, backend, pool, tmp_path):
    head = store.create_session("live", seed=tool_turn_log()).seq - 1
    count = 40
    where = (backend.url, backend.schema, "live")
    follower = pool.submit(follow_session, *where, head, count, str(tmp_path))
    writer = pool.submit(write_session, *where, count, str(tmp_path))
    assert writer.result(timeout=TIMEOUT) == head + 1 + count
    seen = follower.result(timeout=TIMEOUT)
    assert [seq for seq, _ in seen] == list(range(head + 1, head + 1 + count))
    assert [data["i"] for _, data in seen] == list(range(count))
    assert all(type(data["f"]) is float for _, data in seen)
    assert seen == [(e.seq, e.data) for e in store.events("live", from_seq=head + 1)]


@pytest.mark.slow
def test_a_writer_killed_mid_stream_leaves_a_verifiable_prefix(store, backend, tmp_path: Path):
    sessions = ["crash-a", "crash-b", "crash-c"]
    attempts_path = tmp_path / "attempts.txt"
    attempts_path.touch()
    writer = SPAWN.Process(
        target=crashing_writer, args=(backend.url, backend.schema, sessions, str(attempts_path))
    )
    writer.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(attempts_path.read_text(encoding="utf-8").splitlines()) < 150:
            assert writer.is_alive(), "the writer died on its own"
            assert time.monotonic() < deadline, "the writer made too little progress"
            time.sleep(0.01)
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.join(timeout=TIMEOUT)
    assert writer.exitcode == -signal.SIGKILL

    attempted: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in attempts_path.read_text(encoding="utf-8").splitlines():
        sid, seq, type_ = line.split()
        attempted[sid].append((int(seq), type_))
    assert sorted(attempted) == sessions

    for sid in sessions:
        tried = attempted[sid]
        assert [seq for seq, _ in tried] == list(range(len(tried)))
        stored = list(store.events(sid))
        # The log is a prefix of what was attempted, missing at most the append in flight.
        assert [(e.seq, e.type) for e in stored] == tried[: len(stored)]
        assert len(tried) - 1 <= len(stored) <= len(tried)
        report = store.verify(sid)
        assert report.ok, (sid, report.problems)

        closers = store.repair(sid)
        assert closers, "the writer never closes its turn, so there is always one to close"
        assert closers[-1].type == "turn/end"
        assert closers[-1].data["reason"] == {"kind": "interrupted"}
        assert [e.seq for e in closers] == list(range(len(stored), len(stored) + len(closers)))
        report = store.verify(sid)
        assert report.ok, (sid, report.problems)
        assert interrupted_turn_closers(list(store.events(sid))) == []
        assert store.repair(sid) == []
