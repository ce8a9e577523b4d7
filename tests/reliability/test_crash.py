"""Crash safety, repeated: a writer process SIGKILLed at random moments, 50 times per backend.

Each trial starts a writer (appends, ``append_many`` batches, replaces, prunes, forks, seeded
creates; it takes over two sessions the previous writers left, resuming and repairing them)
and kills it with SIGKILL after a random delay. The writer journals every call before making it
and acknowledges it after it returns, so after each kill the parent knows, per session, what
was attempted and what was acknowledged. Then, for every session the trial touched:

* the stored log is a prefix of what the writer attempted, holds every acknowledged event, and
  ends on a call boundary (a batch, a seeded create or a fork is all or nothing);
* ``verify`` passes (the fold of the log equals the ``surface`` table and the session row), and
  ``surface``/``messages`` read from the side table equal a full replay;
* the log satisfies the relational invariants, and ``repair`` closes an open turn with exactly
  ``interrupted_turn_closers`` (half of the open sessions are repaired here, the rest are left
  for the next writer, which must repair them itself before writing).

Every other session is checked cheaply after each trial (its head did not move) and fully at
the end. Writers are spawned two trials ahead, while the parent checks, so a trial costs about
as much as starting one Python process.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.schema import DropSchema

from session_sql import (
    SessionNotFoundError,
    SessionStore,
    check_invariants,
    interrupted_turn_closers,
    open_store,
)

from .reliability_builders import (
    assert_store_consistent,
    same_shapes,
    shape_of_event,
    shape_of_item,
    wires,
)
from .reliability_workers import crash_writer, first_open

SPAWN = multiprocessing.get_context("spawn")
TRIALS = 50
AHEAD = 2
MARKER = ["session/end-seed", {}, None, None, False]


@dataclass
class Model:
    """What the parent knows of one session: the attempted log and how much of it is acked."""

    expected: list[Any] = field(default_factory=list)  # shapes, in seq order
    acked: int = 0  # expected[:acked] was acknowledged (or verified by an earlier check)
    in_flight: int | None = None  # expected length if the call in flight committed
    may_be_absent: bool = False  # a create or fork in flight: the session may not exist
    fork_wires: list[Any] | None = None  # a fork made this trial: the child's first events


@dataclass
class Writer:
    process: Any
    ready: Any
    go: Any
    journal: Path
    known: Path
    trial: int


def _writer_name(trial: int) -> str:
    return f"crash-writer-{trial}-{os.getpid()}"


def _spawn_writer(backend: Any, tmp: Path, trial: int, seed: int) -> Writer:
    journal = tmp / f"journal-{trial}.jsonl"
    known = tmp / f"known-{trial}.json"
    ready, go = SPAWN.Event(), SPAWN.Event()
    url = backend.url
    if backend.has("server_sessions"):  # named, so that the parent can wait for its backends
        url += ("&" if "?" in url else "?") + f"application_name={_writer_name(trial)}"
    process = SPAWN.Process(
        target=crash_writer,
        args=(url, backend.schema, trial, seed, str(journal), str(known), ready, go),
        daemon=True,
    )
    process.start()
    return Writer(process, ready, go, journal, known, trial)


def _await_server_done(store: SessionStore, backend: Any, trial: int) -> None:
    """Wait until the server has ended the killed writer's connections (PostgreSQL).

    A client killed after sending a query does not stop the server: the query runs on, and an
    append sent as one query commits when it completes, maybe after the kill. Once the
    writer's backends are gone, each of its transactions has committed or rolled back."""
    if not backend.has("server_sessions"):
        return
    deadline = time.monotonic() + 60
    query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")
    while True:
        with store.engine.connect() as conn:
            if conn.execute(query, {"name": _writer_name(trial)}).scalar_one() == 0:
                return
        assert time.monotonic() < deadline, f"writer {trial}'s server backends did not end"
        time.sleep(0.01)


def _await_ready(writer: Writer) -> None:
    deadline = time.monotonic() + 120
    while not writer.ready.wait(0.05):
        assert writer.process.is_alive(), f"writer {writer.trial} died while starting"
        assert time.monotonic() < deadline, f"writer {writer.trial} did not start"


def _read_journal(path: Path) -> tuple[list[dict[str, Any]], set[int]]:
    ops: list[dict[str, Any]] = []
    acked: set[int] = set()
    lines = path.read_text().splitlines() if path.exists() else []
    for number, line in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            assert number == len(lines) - 1, f"torn journal line {number} is not the last"
            continue
        assert "error" not in record, f"the writer failed on its own:\n{record['error']}"
        if "ack" in record:
            acked.add(record["ack"])
        else:
            ops.append(record)
    return ops, acked


def _apply_journal(
    store: SessionStore, models: dict[str, Model], ops: list[dict[str, Any]], acked: set[int]
) -> set[str]:
    """Fold the journal into the models; returns the sessions the trial touched."""
    touched: set[str] = set()
    for index, op in enumerate(ops):
        done = op["id"] in acked
        assert done or index == len(ops) - 1, f"op {op} has no ack but is not the last"
        sid = op["sid"]
        touched.add(sid)
        kind = op["op"]
        if kind == "create":
            model = models[sid] = Model(may_be_absent=not done)
            if op["seed"] is not None:
                model.expected = [
                    [w["type"], w["data"], w.get("surfaceOp"), w.get("sourceEventSeqs"), False]
                    for w in op["seed"]
                ]
                model.expected.append(MARKER)
        elif kind == "fork":
            model = models[sid] = Model(may_be_absent=not done)
            # The parent's prefix is committed and never changes, so the child the store must
            # have written is the in-memory fork of the stored parent.
            child = store.load_session(op["parent"]).fork(boundary=op["boundary"], child_id=sid)
            model.fork_wires = wires(child.events)
            model.expected = [shape_of_event(e) for e in child.events]
        else:
            model = models[sid]
            assert op["base"] == len(model.expected), (sid, op, len(model.expected))
            if kind == "append":
                model.expected.extend(shape_of_item(x) for x in op["items"])
            elif kind == "resume":
                if op["marker"]:
                    model.expected.append(MARKER)
            elif kind == "repair":
                prefix = list(store.events(sid, to_seq=op["base"]))
                model.expected.extend(shape_of_event(e) for e in interrupted_turn_closers(prefix))
            else:
                raise AssertionError(f"unknown op {op}")
        if done:
            model.acked = len(model.expected)
            model.may_be_absent = False
        else:
            model.in_flight = len(model.expected)
    return touched


def _check_session(
    store: SessionStore, models: dict[str, Model], sid: str, stats: Counter[str]
) -> list[Any] | None:
    """Check one touched session against its model; returns its stored log (None: absent)."""
    model = models[sid]
    try:
        stored = list(store.events(sid))
    except SessionNotFoundError:
        assert model.may_be_absent, f"session {sid} was acknowledged but is missing"
        stats["in-flight create/fork not committed"] += 1
        del models[sid]
        return None
    if model.fork_wires is not None:  # times and all: a fork copies the parent's events
        assert wires(stored[: len(model.fork_wires)]) == model.fork_wires, f"fork {sid}"
    n = len(stored)
    assert same_shapes([shape_of_event(e) for e in stored], model.expected[:n]), (
        f"session {sid}: the stored log is not a prefix of what the writer attempted"
    )
    assert n >= model.acked, f"session {sid}: lost acknowledged events ({n} < {model.acked})"
    allowed = {model.acked} if model.in_flight is None else {model.acked, model.in_flight}
    assert n in allowed, f"session {sid}: {n} events ends inside a call (allowed {allowed})"
    if model.in_flight is not None and model.in_flight != model.acked:
        stats["in-flight call committed" if n == model.in_flight else "in-flight rolled back"] += 1
    assert_store_consistent(store, sid)
    assert check_invariants(stored) == [], (sid, check_invariants(stored)[:3])
    return stored


def _repair_some(
    store: SessionStore, sid: str, stored: list[Any], rng: random.Random, stats: Counter[str]
) -> list[Any]:
    """Repair an open turn (half the time; the next writer repairs the others)."""
    closers = interrupted_turn_closers(stored)
    if not closers:
        return stored
    stats["left mid-turn"] += 1
    if rng.random() < 0.5:
        return stored
    appended = store.repair(sid)
    assert wires(appended) == wires(closers)
    stats["repaired here"] += 1
    after = assert_store_consistent(store, sid)
    assert interrupted_turn_closers(after) == []
    assert check_invariants(after) == []
    assert store.repair(sid) == []
    return after


@pytest.mark.slow
def test_sigkill_at_random_moments_never_loses_or_tears_an_event(
    backend, tmp_path, record_property
):
    rng = random.Random(f"crash-{backend.name}")
    stats: Counter[str] = Counter()
    models: dict[str, Model] = {}
    started = time.monotonic()
    with open_store(backend.url, schema=backend.schema) as store:
        # Writers are spawned AHEAD trials early: starting Python and importing the library is
        # most of a trial's cost, and it overlaps with checking the previous trials.
        upcoming = deque(
            _spawn_writer(backend, tmp_path, t, rng.randrange(2**32)) for t in range(AHEAD)
        )
        try:
            for trial in range(TRIALS):
                writer = upcoming.popleft()
                _await_ready(writer)
                writer.known.write_text(json.dumps(sorted(models)))
                delay = rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0.05, 0.3)])
                writer.go.set()
                time.sleep(delay)
                if not writer.process.is_alive():
                    _read_journal(writer.journal)  # raises with the writer's traceback
                    pytest.fail("the writer stopped before it was killed")
                os.kill(writer.process.pid, signal.SIGKILL)
                writer.process.join(30)
                assert writer.process.exitcode == -signal.SIGKILL
                _await_server_done(store, backend, writer.trial)
                stats["kills"] += 1
                if trial + AHEAD < TRIALS:
                    upcoming.append(
                        _spawn_writer(backend, tmp_path, trial + AHEAD, rng.randrange(2**32))
                    )

                ops, acked = _read_journal(writer.journal)
                stats["calls"] += len(ops)
                for model in models.values():
                    model.in_flight = None
                    model.fork_wires = None
                touched = _apply_journal(store, models, ops, acked)
                for sid in sorted(touched):
                    stored = _check_session(store, models, sid, stats)
                    if stored is None:
                        continue
                    stored = _repair_some(store, sid, stored, rng, stats)
                    models[sid].expected = [shape_of_event(e) for e in stored]
                    models[sid].acked = len(stored)
                    models[sid].in_flight = None
                    models[sid].may_be_absent = False
                # Every other session: its head did not move.
                heads = {i.id: i.head_seq for i in store.list_sessions(limit=100_000)}
                assert heads == {sid: len(m.expected) - 1 for sid, m in models.items()}
        finally:
            for writer in upcoming:
                writer.process.kill()
                writer.process.join(30)
        for sid in sorted(models):  # the full check of every session, once more
            stored = assert_store_consistent(store, sid)
            assert check_invariants(stored) == []
            stats["events stored"] += len(stored)
    stats["sessions"] = len(models)
    elapsed = time.monotonic() - started
    figures = {"trials": TRIALS, **stats, "seconds": round(elapsed, 1)}
    print(f"\ncrash harness [{backend.name}]: {figures}")
    for name, value in figures.items():
        record_property(name, value)


INIT_TRIALS = 6


@pytest.mark.slow
def test_sigkill_during_the_first_open_leaves_an_empty_or_complete_schema(
    backend, tmp_path, request, record_property
):
    """A process killed while it initialises an empty database: the next open still works."""
    rng = random.Random(f"init-{backend.name}")
    outcomes: Counter[str] = Counter()
    for trial in range(INIT_TRIALS):
        if backend.has("file"):
            url, schema = f"sqlite:///{tmp_path / f'init-{trial}.db'}", backend.schema
        else:
            url, schema = backend.url, f"{backend.schema}_{trial}"
            admin = request.getfixturevalue("postgres_admin")
            request.addfinalizer(lambda a=admin, s=schema: _drop_pg_schema(a, s))
        imported, opened = SPAWN.Event(), SPAWN.RawValue("b", 0)  # (see ``first_open``)
        child = SPAWN.Process(target=first_open, args=(url, schema, imported, opened), daemon=True)
        child.start()
        assert imported.wait(120), "the child did not start"
        # About how long opening an empty store takes.
        time.sleep(rng.uniform(0, backend.expect.kill_within))
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        outcomes["killed after the open" if opened.value else "killed during the open"] += 1
        with open_store(url, schema=schema) as store:  # initialises, or passes the gate
            handle = store.create_session("after")
            handle.append("todo/write", {"trial": trial})
            assert_store_consistent(store, "after")
    figures = {"trials": INIT_TRIALS, **outcomes}
    print(f"\nfirst-open kills [{backend.name}]: {figures}")
    for name, value in figures.items():
        record_property(name, value)


def _drop_pg_schema(admin: Any, schema: str) -> None:
    with admin.begin() as conn:
        conn.execute(text("SET LOCAL lock_timeout = '10s'"))
        conn.execute(DropSchema(schema, cascade=True, if_exists=True))
