"""W13 of ``session-sql bench``: a distributed store on a Citus coordinator beside a plain one.

The same operations run against two stores in one process, alternately, call by call: a store
created distributed (``distributed=True``) on the Citus coordinator the bench was given, and a
plain store on the PostgreSQL server of ``--url``. Each operation is timed one call at a time;
the figures are the medians of those calls and the ratio of the two (Citus time over plain
time). Both sides cycle over ``SESSIONS`` sessions of their own, so on Citus the calls reach
shards on every worker.

The operations are one session's: an append of one event per transaction, ``append_many`` of a
batch of 100 events of the agent mix, a tail read (``messages(last=20)``) and ``open_session``
of a session of ``SESSION_EVENTS`` events and ``SESSION_NODES`` surface nodes. Each is a router
query on Citus (every statement goes to the shard that holds the session), so the figure is the
coordinator's hop, not a fan-out. ``create_session`` is timed too: it writes the id's row and
the session's row, which lie on the shards of two distribution values (the id, the key); and a
compaction: one summary replacing the whole surface of a session of ``BATCH`` user messages
(a fresh session each call), which deletes the shadowed surface rows.

The last row is no operation of the store's but its floor: the cheapest statement that reaches
a worker (one table, the session's key, prepared, on an idle connection in autocommit, through
the driver alone), timed the same way. Whatever a one-session operation sends through the
coordinator costs at least that per statement, so it bounds what any form of the tail read can
reach (``docs/citus.md``, "What was measured").
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from psycopg import sql as pgsql
from sqlalchemy import select, text

from session_sql import Replace, SessionStore
from session_sql.cli._bench_events import _user, agent_events
from session_sql.cli._bench_harness import Target, Workload, _workload
from session_sql.cli._bench_reads import TAIL, _big_session
from session_sql.cli._support import CliError
from session_sql.schema import tables_for

__all__ = ["CITUS_URL_ENV", "OPERATIONS", "citus_target", "w_citus"]

CITUS_URL_ENV = "SESSION_SQL_BENCH_CITUS_URL"
"""Where ``session-sql bench`` finds a Citus coordinator's URL without ``--citus-url``."""

SESSIONS = 8
"""Sessions each side cycles over (on Citus their shards lie on every worker)."""

BATCH = 100
"""The events of one ``append_many``."""

SESSION_EVENTS = 2000
SESSION_NODES = 200
"""The sessions the tail reads and opens read: 2,000 events, a 200-node surface."""

WARM = 10
"""Untimed calls of each operation on each side before timing (psycopg prepares a
statement after five runs)."""

FLOOR = "key lookup (floor)"
"""The floor's row: one prepared one-table statement on the session's key."""

TARGET = 2.0
"""The bound W13 checks: Citus time at most twice plain PostgreSQL's."""

OPERATIONS = (
    "append",
    f"append_many x{BATCH}",
    f"messages(last={TAIL})",
    "open_session",
    "create_session",
    f"compaction of {BATCH}",
    FLOOR,
)
"""W13's operations, in the order they are reported."""

TARGETED = frozenset(OPERATIONS[:4])
"""The operations the bound applies to (``create_session`` and the floor are reported)."""


@contextmanager
def citus_target(url: str, like: Target) -> Iterator[Target]:
    """A distributed store's target on the coordinator at ``url``, in a throwaway schema named
    like ``like``'s; the schema (with its shards on the workers) is dropped afterwards."""
    target = Target("postgresql", url, f"{like.schema}_citus", like.workdir, distributed=True)
    try:
        yield target
    finally:
        target.drop()


def _shard_groups(store: SessionStore, schema: str) -> int:
    """How many worker groups hold the shards of the sessions of ``schema``'s ``sessions``."""
    table = f"{schema}.sessions"
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(DISTINCT p.groupid) FROM "
                    f'"{schema}".sessions s JOIN pg_dist_placement p ON p.shardid = '
                    "get_shard_id_for_distribution_column(CAST(:t AS regclass), s.session_key)"
                ),
                {"t": table},
            ).scalar_one()
        )


def _distributed_tables(store: SessionStore, schema: str) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_dist_partition"
                    " WHERE logicalrelid::text LIKE :s AND partmethod = 'h'"
                ),
                {"s": f"{schema}.%"},
            ).scalar_one()
        )


@dataclasses.dataclass
class _Side:
    """One store and the sessions W13 runs on in it."""

    store: SessionStore
    writers: list[Any]
    readers: list[str]


def _side(store: SessionStore, events: int) -> _Side:
    writers = [store.create_session() for _ in range(SESSIONS)]
    nodes = max(1, events * SESSION_NODES // SESSION_EVENTS)
    readers = [_big_session(store, events, nodes) for _ in range(SESSIONS)]
    return _Side(store, writers, readers)


def _alternate(
    calls: int, plain: Callable[[int], object], citus: Callable[[int], object]
) -> tuple[list[float], list[float]]:
    """Time ``calls`` calls of each, alternately (plain, Citus, plain, ...) after ``WARM``
    untimed ones: the two lists of seconds per call."""
    for i in range(WARM):
        plain(i)
        citus(i)
    t_plain, t_citus = [], []
    for i in range(WARM, WARM + calls):
        t0 = time.perf_counter()
        plain(i)
        t1 = time.perf_counter()
        citus(i)
        t2 = time.perf_counter()
        t_plain.append(t1 - t0)
        t_citus.append(t2 - t1)
    return t_plain, t_citus


def _mix(n: int) -> list[Any]:
    """``n`` items of the agent mix without their source seqs, which name absolute seqs: the
    items go to sessions at any head."""
    return [{k: v for k, v in it.items() if k != "source_event_seqs"} for it in agent_events(n)]


def _append(side: _Side, items: list[Any]) -> Callable[[int], object]:
    def call(i: int) -> object:
        it = items[i % len(items)]
        handle = side.writers[i % SESSIONS]
        return handle.append(it["type"], it["data"], surface_op=it.get("surface_op"))

    return call


def _append_many(side: _Side, batches: list[list[Any]]) -> Callable[[int], object]:
    def call(i: int) -> object:
        return side.writers[i % SESSIONS].append_many(batches[i % len(batches)])

    return call


def _tail(side: _Side) -> Callable[[int], object]:
    return lambda i: side.store.messages(side.readers[i % SESSIONS], last=TAIL)


def _open(side: _Side) -> Callable[[int], object]:
    return lambda i: side.store.open_session(side.readers[i % SESSIONS])


def _create(side: _Side) -> Callable[[int], object]:
    return lambda _: side.store.create_session()


def _compaction(side: _Side, calls: int) -> Callable[[int], object]:
    """Call ``i`` appends a summary over the whole surface of the ``i``-th of ``WARM + calls``
    sessions of ``BATCH`` user messages, written before."""
    messages = [
        {"type": "user/message", "data": _user(k), "surface_op": "append"} for k in range(BATCH)
    ]
    handles = []
    for _ in range(WARM + calls):
        handle = side.store.create_session()
        handle.append_many(messages)
        handles.append(handle)

    def call(i: int) -> object:
        handle = handles[i]
        nodes = handle.surface.nodes
        return handle.append(
            "user/message",
            _user(-1),
            surface_op=Replace(nodes[0], nodes[-1]),
            source_event_seqs=list(nodes),
        )

    return call


@contextmanager
def _floor(side: _Side, schema: str) -> Iterator[Callable[[int], object]]:
    """The floor's call on ``side``: the session row's head by its key, prepared, through a
    pooled connection's driver in autocommit (no ``BEGIN`` round trip)."""
    sessions = tables_for(schema).sessions
    with side.store.engine.connect() as conn:
        chosen = select(sessions.c.session_key).where(sessions.c.id.in_(side.readers))
        keys = [int(k) for k in conn.execute(chosen).scalars()]
    raw = side.store.engine.raw_connection()
    try:
        driver: Any = raw.driver_connection
        driver.autocommit = True
        sql = pgsql.SQL("SELECT head_seq FROM {}.sessions WHERE session_key = %s").format(
            pgsql.Identifier(schema)
        )

        def call(i: int) -> object:
            return driver.execute(sql, (keys[i % len(keys)],), prepare=True).fetchall()

        yield call
    finally:
        raw.invalidate()  # not back to the pool in autocommit
        raw.close()


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def _p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


def w_citus(
    plain: Target, citus: Target, calls: int, events: int = SESSION_EVENTS
) -> list[Workload]:
    """W13: each of ``OPERATIONS`` ``calls`` times on a distributed store on the Citus
    coordinator and on a plain store, alternately; one workload each, Citus against plain
    (events/s, the ratio of rates, and the medians in milliseconds with their ratio). The
    sessions read hold ``events`` events (a surface of a tenth as many nodes)."""
    with plain.store() as p_store, citus.store() as c_store:
        distributed = _distributed_tables(c_store, citus.schema)
        if distributed == 0:
            raise CliError(f"W13: the store on {citus.url} is not distributed (is it Citus?)")
        p, c = _side(p_store, events), _side(c_store, events)
        if p_store.messages(p.readers[0], last=TAIL) != c_store.messages(c.readers[0], last=TAIL):
            raise CliError("W13: the two stores' tail reads disagree")
        groups = _shard_groups(c_store, citus.schema)
        items = _mix(calls + WARM)
        mix = _mix(BATCH * 8)
        batches = [mix[i : i + BATCH] for i in range(0, len(mix), BATCH)]
        with _floor(p, plain.schema) as p_floor, _floor(c, citus.schema) as c_floor:
            runs = {
                "append": (1, _append(p, items), _append(c, items), calls),
                f"append_many x{BATCH}": (
                    BATCH,
                    _append_many(p, batches),
                    _append_many(c, batches),
                    max(5, calls // 4),
                ),
                f"messages(last={TAIL})": (TAIL, _tail(p), _tail(c), calls),
                "open_session": (1, _open(p), _open(c), calls),
                "create_session": (1, _create(p), _create(c), calls),
                f"compaction of {BATCH}": (
                    1,
                    _compaction(p, max(5, calls // 4)),
                    _compaction(c, max(5, calls // 4)),
                    max(5, calls // 4),
                ),
                FLOOR: (1, p_floor, c_floor, calls),
            }
            timed = {op: _alternate(n, on_p, on_c) for op, (_, on_p, on_c, n) in runs.items()}
        out = []
        for op, (count, _, _, n) in runs.items():
            t_plain, t_citus = timed[op]
            w = _workload(f"W13 Citus {op}", count, t_citus, t_plain, {})
            over = statistics.median(t_citus) / statistics.median(t_plain)
            w.extra = {
                "citus_ms": _ms(t_citus),
                "plain_ms": _ms(t_plain),
                "citus_over_plain_time": round(over, 3),
                "citus_p99_ms": _p99_ms(t_citus),
                "plain_p99_ms": _p99_ms(t_plain),
                "within_target": over <= TARGET if op in TARGETED else None,
                "calls": n,
            }
            out.append(w)
        tail_plain = statistics.median(timed[f"messages(last={TAIL})"][0])
        out[-1].extra["citus_over_plain_tail"] = round(
            statistics.median(timed[FLOOR][1]) / tail_plain, 3
        )
        out[0].extra.update(
            {
                "sessions": SESSIONS,
                "session_events": events,
                "worker_groups": groups,
                "distributed_tables": distributed,
            }
        )
    return out
