"""``session-sql bench``: session_sql against the raw driver doing the same rows, in one run.

Every workload runs the store and a raw-driver baseline (stdlib ``sqlite3`` or raw psycopg) on
the same database, the same tables and the same durability settings. The baseline writes the
same event rows and the same conditional session-row update, without validation and without
surface upkeep. Figures are medians over repetitions; ratios are ours / raw (higher is better
for throughput, lower is better for times).

The baseline's SQL comes from the store: Core statements over ``tables_for(schema)``, compiled
once per dialect and run on the raw driver connection; its SQLite connection runs the engine's
``sqlite_pragmas``. W8 measures on a fresh database of its own; W9 reads W4's big session, and
W10 opens W4's sessions (compacted) and appends to them.
W11 (PostgreSQL) compares the async API with the sync one, both session_sql. W12 grows the
store to 10M events and times the everyday operations at each size (``_bench_scale``). W13,
given a Citus coordinator, times one session's operations on a distributed store there beside
a plain store on the PostgreSQL of ``url`` (``_bench_citus``).

This module holds the writes (W1-W3), the multi-process workloads (W6, W7), W8, W11 and
``run``; the event mix is in ``_bench_events``, the harness (``Target``, timing, the temporary
databases) in ``_bench_harness``, the reads (W4, W5, W9, W10) in ``_bench_reads`` and the
baseline in ``_bench_raw``. Every workload uses the public API only: W9 and W10's cold
figures read rows the store has not read before (new rows, a session it never opened).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing as mp
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    MetaData,
    Table,
    Text,
    func,
    literal,
    make_url,
    select,
)
from sqlalchemy.dialects.postgresql import REGCLASS

from session_sql import (
    RetryPolicy,
    SessionEvent,
    SessionStore,
    StoredSession,
    open_async_store,
    open_store,
    retry_on_conflict,
)
from session_sql.cli._bench_citus import OPERATIONS as CITUS_OPERATIONS
from session_sql.cli._bench_citus import TARGETED as CITUS_TARGETED
from session_sql.cli._bench_citus import citus_target, w_citus
from session_sql.cli._bench_events import (
    Item,
    _chunk,
    agent_events,
    chunk_events,
    compaction_events,
)
from session_sql.cli._bench_harness import (
    Target,
    Workload,
    _closing,
    _timed,
    _workload,
    bench_targets,
)
from session_sql.cli._bench_raw import Raw, RawPostgres, RawSQLite
from session_sql.cli._bench_reads import _big_session, w_open, w_read  # noqa: F401 (tests)
from session_sql.cli._bench_scale import OPERATIONS as SCALE_OPERATIONS
from session_sql.cli._bench_scale import SCALE_LEVELS, w_scale
from session_sql.cli._support import CliError
from session_sql.errors import ConcurrencyError
from session_sql.schema import tables_for

__all__ = [
    "ASYNC_WORKERS",
    "CITUS_OPERATIONS",
    "CITUS_TARGETED",
    "Raw",
    "RawPostgres",
    "RawSQLite",
    "SCALE_OPERATIONS",
    "Target",
    "Workload",
    "agent_events",
    "bench_targets",
    "chunk_events",
    "compaction_events",
    "run",
    "w_append",
    "w_append_many",
    "w_async_appends",
    "w_citus",
    "w_compaction",
    "w_contention",
    "w_follow",
    "w_open",
    "w_read",
    "w_scale",
    "w_storage",
]


def _paired_writes(
    target: Target,
    reps: int,
    batches: list[list[Item]],
    append: Callable[[Any, list[Item]], object],
) -> tuple[list[float], list[float]]:
    """Time ``append(handle, batch)`` over ``batches`` into a new session, and the raw driver
    writing the same batches (one transaction each), ``reps`` times: the two lists of times."""
    ours, raws = [], []
    with target.store() as store, _closing(target.raw()) as raw:
        for _ in range(reps):
            handle = store.create_session()

            def run_ours(h: Any = handle) -> None:
                for batch in batches:
                    append(h, batch)

            ours.append(_timed(run_ours))
            sid = raw.new_session()

            def run_raw(s: str = sid) -> None:
                head = -1
                for batch in batches:
                    head = raw.write(s, head, batch)

            raws.append(_timed(run_raw))
    return ours, raws


def _append_one(handle: Any, batch: list[Item]) -> None:
    (it,) = batch
    handle.append(
        it["type"],
        it["data"],
        surface_op=it.get("surface_op"),
        source_event_seqs=it.get("source_event_seqs"),
    )


def _one_per_transaction(
    target: Target, items: list[Item], reps: int, name: str, extra: dict[str, Any]
) -> Workload:
    """Append ``items`` one transaction each, through the store and through the raw driver."""
    ours, raws = _paired_writes(target, reps, [[it] for it in items], _append_one)
    return _workload(name, len(items), ours, raws, extra)


def w_append(target: Target, n: int, reps: int, label: str) -> Workload:
    """W1: one event per transaction (the interactive path)."""
    return _one_per_transaction(target, agent_events(n), reps, label, {"events": n})


def w_append_many(
    target: Target, batches: int, reps: int, size: int = 100, label: str = "x100"
) -> Workload:
    """W2: append_many of ``size`` events per transaction vs raw ``executemany``.

    ``x100``: streamed chunk events. ``x5000``: the agent mix (messages, chunks, tool calls),
    a batch such as a seeded session or a big tool output writes.
    """
    if label == "x100":
        batch_list = [chunk_events(100)] * batches
    else:
        items = agent_events(batches * size)
        batch_list = [items[i : i + size] for i in range(0, len(items), size)]
    ours, raws = _paired_writes(target, reps, batch_list, lambda h, batch: h.append_many(batch))
    name = f"W2 append_many {label}"
    return _workload(name, batches * size, ours, raws, {"batch": size})


def w_compaction(target: Target, n: int, reps: int) -> Workload:
    """W3: a replace covering 40 surface nodes every 50 events, one event per transaction."""
    items = list(compaction_events(n))
    extra = {"replace_every": 50, "covers": 40}
    return _one_per_transaction(target, items, reps, "W3 compaction-heavy", extra)


# -- multi-process workloads ---------------------------------------------------------------


def _follow_writer(url: str, schema: str, session_id: str, count: int, interval: float) -> None:
    with open_store(url, schema=schema) as store:
        handle = store.open_session(session_id)
        for i in range(count):
            handle.append("assistant/chunk", {**_chunk(1, 1, i), "sent": time.time()})
            time.sleep(interval)


def w_follow(target: Target, count: int) -> Workload:
    """W6: a writer process appends every 20 ms; this process follows; delay percentiles."""
    ctx = mp.get_context("spawn")
    with target.store() as store:
        sid = store.create_session().id
        writer = ctx.Process(
            target=_follow_writer, args=(target.url, target.schema, sid, count, 0.02)
        )
        delays = []
        writer.start()
        try:
            for event in store.follow(sid, timeout=10):
                delays.append(time.time() - event.data["sent"])
                if len(delays) == count:
                    break
        finally:
            writer.join(30)
    delays.sort()
    p50 = delays[len(delays) // 2] * 1000
    p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))] * 1000
    return Workload(
        name="W6 follow latency",
        events_per_s=0.0,
        raw_events_per_s=0.0,
        ratio=0.0,
        reps=1,
        extra={"p50_ms": round(p50, 2), "p99_ms": round(p99, 2), "events": len(delays)},
    )


W7_WRITERS = 8
"""W7's writer processes (each on a session of its own, then all on one session)."""

W7_POLICY = RetryPolicy(attempts=1_000_000)
"""W7 counts lost races; it does not give up on a writer that keeps losing them."""


def _timed_writer(args: tuple[str, str, str | None, int, Any]) -> tuple[float, float, int]:
    """One of W7's writers: ``count`` chunks, one per transaction, through the store
    ("ours": on a session of its own, or on ``shared``, retrying lost races with
    ``retry_on_conflict``) or through the raw driver ("raw"). Waits for ``start``; returns its
    first and last wall-clock times and the races it lost."""
    kind, where, shared, count, start = args
    url, schema = where.split("\n")
    if kind.startswith("fleet"):
        return _fleet_writer(kind, url, schema, count, start)
    if kind == "raw":
        raw = Target("postgresql", url, schema, "").raw()
        try:
            sid = raw.new_session()
            items = chunk_events(count)
            head = -1
            start.wait()
            began = time.time()
            for item in items:
                head = raw.write(sid, head, [item])
            return began, time.time(), 0
        finally:
            raw.close()
    lost = 0

    def count_lost(_: ConcurrencyError) -> None:
        nonlocal lost
        lost += 1

    with open_store(url, schema=schema) as store:
        handle = store.open_session(shared) if shared else store.create_session()
        start.wait()
        began = time.time()
        for i in range(count):
            data = {**_chunk(1, 1, i), "sent": time.time()}

            def append(h: StoredSession, d: Any = data) -> SessionEvent:
                return h.append("assistant/chunk", d)

            retry_on_conflict(handle, append, policy=W7_POLICY, on_conflict=count_lost)
        return began, time.time(), lost


FLEET_TABLE = "w7_fleet_items"
"""The fleet round's raw table: one narrow row per event (session, seq, JSON text), no
session row, no foreign key: what a service writing its own log table does."""


def _fleet_table(schema: str | None) -> Table:
    """``FLEET_TABLE`` in ``schema``: one narrow row per event."""
    return Table(
        FLEET_TABLE,
        MetaData(schema=schema),
        Column("session", Text, primary_key=True),
        Column("seq", BigInteger, primary_key=True),
        Column("item", Text, nullable=False),
    )


def _fleet_writer(
    kind: str, url: str, schema: str, count: int, start: Any
) -> tuple[float, float, int]:
    """One process of W7's fleet round, timed from the start to its store closed, the open
    included: ``fleet``: ``open_store``, a new session, ``count`` chunks one per
    transaction, ``close``; ``fleet-raw``: a psycopg connection, ``count`` rows of
    ``FLEET_TABLE`` one per transaction (``BEGIN``, ``INSERT``, ``COMMIT``), close."""
    start.wait()
    began = time.time()
    if kind == "fleet":
        with open_store(url, schema=schema) as store:
            handle = store.create_session()
            for i in range(count):
                handle.append("assistant/chunk", _chunk(1, 1, i))
        return began, time.time(), 0
    import psycopg  # PostgreSQL only: imported by this round alone

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    session = uuid.uuid4().hex
    insert = psycopg.sql.SQL("INSERT INTO {}.{} VALUES (%s, %s, %s)").format(
        psycopg.sql.Identifier(schema), psycopg.sql.Identifier(FLEET_TABLE)
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for i in range(count):
            text = json.dumps({"type": "assistant/chunk", "data": _chunk(1, 1, i)})
            with conn.transaction():
                conn.execute(insert, (session, i, text))
    return began, time.time(), 0


def _w7_round(pool: Any, manager: Any, jobs: list[tuple[str, str, str | None, int]]) -> Any:
    """Run ``jobs`` (kind, where, shared, count) in the pool, all starting at once; returns
    (events per second from the first start to the last end, lost races)."""
    start = manager.Event()
    pending = pool.map_async(_timed_writer, [(*job, start) for job in jobs])
    time.sleep(1.5)  # every writer has connected and waits for the start
    start.set()
    spans = pending.get()
    seconds = max(end for _, end, _ in spans) - min(began for began, _, _ in spans)
    return sum(job[3] for job in jobs) / seconds, sum(lost for _, _, lost in spans)


def _follow_delays(store: SessionStore, session_id: str, count: int) -> list[float]:
    delays: list[float] = []
    for event in store.follow(session_id, timeout=30):
        delays.append(time.time() - event.data["sent"])
        if len(delays) == count:
            break
    return delays


def w_contention(target: Target, per_process: int) -> list[Workload]:
    """W7: 8 processes on 8 sessions against the raw driver's 8 (and one writer of each),
    with this process following one of the sessions meanwhile; then 8 processes on one
    session, retrying lost races with ``retry_on_conflict``."""
    ctx = mp.get_context("spawn")
    n = W7_WRITERS
    where = f"{target.url}\n{target.schema}"
    with ctx.Manager() as manager, ctx.Pool(n) as pool, target.store() as store:
        pool.map(_noop, range(n))  # start the workers before timing
        raw_one, _ = _w7_round(pool, manager, [("raw", where, None, per_process)])
        ours_one, _ = _w7_round(pool, manager, [("ours", where, None, per_process)])
        raw_many, _ = _w7_round(pool, manager, [("raw", where, None, per_process)] * n)
        followed = store.create_session().id
        delays: list[float] = []
        follower = threading.Thread(
            target=lambda: delays.extend(_follow_delays(store, followed, per_process))
        )
        follower.start()
        jobs: list[tuple[str, str, str | None, int]] = [("ours", where, followed, per_process)]
        jobs += [("ours", where, None, per_process)] * (n - 1)
        ours_many, _ = _w7_round(pool, manager, jobs)
        follower.join(30)
        with store.engine.begin() as conn:
            _fleet_table(target.schema).create(conn)
        fleet_raw, _ = _w7_round(pool, manager, [("fleet-raw", where, None, per_process)] * n)
        fleet, _ = _w7_round(pool, manager, [("fleet", where, None, per_process)] * n)
        shared = store.create_session().id
        shared_rate, lost = _w7_round(pool, manager, [("ours", where, shared, per_process)] * n)
        report = store.verify(shared)
        seqs = [e.seq for e in store.events(shared)]
    total = n * per_process
    delays.sort()
    follow = {}
    if delays:
        p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
        follow = {
            "follow_p50_ms": round(delays[len(delays) // 2] * 1000, 2),
            "follow_p99_ms": round(p99 * 1000, 2),
        }
    return [
        Workload.once(
            f"W7 {n} writers x {n} sessions",
            ours_many,
            raw_many,
            {
                "over_one_writer": round(ours_many / ours_one, 3),
                "raw_over_one_writer": round(raw_many / raw_one, 3),
                "one_writer_events_per_s": round(ours_one, 1),
                "raw_one_writer_events_per_s": round(raw_one, 1),
                **follow,
            },
        ),
        Workload.once(
            f"W7 fleet {n} processes",
            fleet,
            fleet_raw,
            {
                "store_shaped_ratio": round(ours_many / raw_many, 3),
                "events_per_process": per_process,
            },
        ),
        Workload.once(
            f"W7 {n} writers x 1 session",
            shared_rate,
            ours_one,
            {
                "conflicts": lost,
                "conflicts_per_event": round(lost / total, 3),
                "no_gaps_no_duplicates": seqs == list(range(total)),
                "verify_ok": report.ok,
            },
        ),
    ]


ASYNC_WORKERS = 16
"""W11's concurrency: tasks on the async API, and threads on the sync API."""


def _w11_message(i: int) -> Any:
    return {
        "id": f"u{i}",
        "role": "user",
        "content": [{"type": "text", "text": f"message {i}"}],
        "source": {"kind": "user"},
    }


def _threads_run(target: Target, appends: int) -> tuple[float, float]:
    """Seconds (wall, and this process's CPU) for ``ASYNC_WORKERS`` threads to append one by
    one to a session each (sync API)."""
    with target.store(pool_size=ASYNC_WORKERS) as store:
        handles = [store.create_session() for _ in range(ASYNC_WORKERS)]
        barrier = threading.Barrier(ASYNC_WORKERS + 1)

        def work(handle: Any) -> None:
            barrier.wait()
            for i in range(appends):
                handle.append("user/message", _w11_message(i), surface_op="append")

        threads = [threading.Thread(target=work, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        barrier.wait()
        t0, c0 = time.perf_counter(), time.process_time()
        for t in threads:
            t.join()
        return time.perf_counter() - t0, time.process_time() - c0


def _tasks_run(target: Target, appends: int) -> tuple[float, float]:
    """Seconds (wall, CPU) for ``ASYNC_WORKERS`` asyncio tasks to do the same (async API)."""

    async def main() -> tuple[float, float]:
        opening = open_async_store(target.url, schema=target.schema, pool_size=ASYNC_WORKERS)
        async with opening as store:
            handles = [await store.create_session() for _ in range(ASYNC_WORKERS)]

            async def work(handle: Any) -> None:
                for i in range(appends):
                    await handle.append("user/message", _w11_message(i), surface_op="append")

            t0, c0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(work(h) for h in handles))
            return time.perf_counter() - t0, time.process_time() - c0

    return asyncio.run(main())


def w_async_appends(target: Target, appends: int, reps: int) -> Workload:
    """W11: 16 asyncio tasks on 16 sessions (async API) vs 16 threads (sync API), PostgreSQL.

    Both sides are session_sql; runs alternate, so drift hits both alike. The client's CPU
    time per append is reported too: on a machine that other work keeps busy, the scheduler
    gives 16 threads more time slices than one event loop, which the wall clock shows and
    the CPU time does not.
    """
    tasks, threads = [], []
    for _ in range(reps):
        threads.append(_threads_run(target, appends))
        tasks.append(_tasks_run(target, appends))
    count = ASYNC_WORKERS * appends
    w = _workload(
        "W11 async appends x16", count, [t[0] for t in tasks], [t[0] for t in threads], {}
    )
    cpu_tasks = statistics.median([t[1] for t in tasks]) / count * 1e6
    cpu_threads = statistics.median([t[1] for t in threads]) / count * 1e6
    w.extra = {
        "workers": ASYNC_WORKERS,
        "appends_per_worker": appends,
        "baseline": "16 threads through the sync API",
        "tasks_over_threads": round(w.ratio, 3),
        "cpu_us_per_append_tasks": round(cpu_tasks, 1),
        "cpu_us_per_append_threads": round(cpu_threads, 1),
    }
    return w


def _noop(_: int) -> None:
    return None


def w_storage(target: Target, n: int) -> Workload:
    """W8: bytes on disk per event versus the raw JSON bytes of the events.

    Measured on a fresh database (a new file, or a new schema) holding only this session, so
    the new rows cannot land in space that earlier workloads left free in existing pages.
    """
    items = agent_events(n)
    json_bytes = sum(
        len(json.dumps(it["data"], separators=(",", ":"), ensure_ascii=False).encode())
        for it in items
    )
    fresh = target.fresh(f"w8_{uuid.uuid4().hex[:6]}")
    try:
        with fresh.store() as store:
            before = _store_bytes(store, fresh)
            handle = store.create_session()
            for i in range(0, n, 500):
                handle.append_many(items[i : i + 500])
            after = _store_bytes(store, fresh)
    finally:
        fresh.drop()
    per_event = (after - before) / n
    return Workload(
        name="W8 storage",
        events_per_s=0.0,
        raw_events_per_s=0.0,
        ratio=per_event / (json_bytes / n),
        reps=1,
        extra={
            "bytes_per_event": round(per_event, 1),
            "json_bytes_per_event": round(json_bytes / n, 1),
        },
    )


def _store_bytes(store: SessionStore, target: Target) -> int:
    """Bytes in use by the store's tables and indexes (SQLite: pages not on the freelist)."""
    if target.backend == "sqlite":
        with store.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
            size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
            free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
        return int((pages - free) * size)
    t = tables_for(target.schema)
    sizes = [
        func.pg_total_relation_size(literal(table.fullname).cast(REGCLASS))
        for table in (t.sessions, t.session_ids, t.events, t.surface)
    ]
    with store.engine.connect() as conn:
        return int(sum(conn.execute(select(*sizes)).one()))


def run(
    url: str | None,
    *,
    quick: bool,
    progress: Callable[[str], None] = lambda _: None,
    scale: float = 1.0,
    only: frozenset[str] | None = None,
    citus_url: str | None = None,
) -> dict[str, Any]:
    """Run every workload for the backend of ``url`` (or those named in ``only``, e.g.
    ``{"W1", "W11"}``) and return the JSON report. W12 (the store grown to 10M events) runs
    only when named. W13 runs when ``citus_url`` names a Citus coordinator (``url`` must then
    be a plain PostgreSQL, the baseline); naming W13 without one is a ``CliError``.

    ``scale`` shrinks every size (the tests run the real workloads at a tiny scale). W4, W5,
    W9 and W10 share one setup: naming any of them runs all four.
    """

    def size(full: int, fast: int, floor: int = 1) -> int:
        return max(floor, int((fast if quick else full) * scale))

    def wanted(*names: str) -> bool:
        return only is None or any(name in only for name in names)

    if citus_url is not None or (only is not None and "W13" in only):
        if citus_url is None:
            raise CliError("W13 needs a Citus coordinator: give --citus-url (or set it)")
        if url is None or make_url(url).get_backend_name() != "postgresql":
            raise CliError("W13 compares Citus with plain PostgreSQL: give --url postgresql://...")
    reps = 3 if quick else 5
    n1 = size(1500, 300, 60)
    workloads: list[Workload] = []
    with bench_targets(url) as targets:
        main = targets[0]
        for target in targets if wanted("W1") else []:
            label = "W1 append"
            if target.backend == "sqlite":
                label = f"W1 append ({target.synchronous})"
            progress(label)
            workloads.append(w_append(target, n1, reps, label))
        if wanted("W2"):
            progress("W2 append_many")
            workloads.append(w_append_many(main, size(100, 20), reps))
        # W1 and W2 again in a named tenant (both sides write its rows): the tenant costs
        # nothing beyond the key column, so these ratios should match the two above.
        acme = dataclasses.replace(main, tenant="acme")
        if wanted("W1"):
            progress("W1 in a tenant")
            label = "W1 append" + (f" ({main.synchronous})" if main.backend == "sqlite" else "")
            workloads.append(w_append(acme, n1, reps, label + " tenant acme"))
        if wanted("W2"):
            progress("W2 in a tenant")
            w2_acme = w_append_many(acme, size(100, 20), reps)
            workloads.append(dataclasses.replace(w2_acme, name=w2_acme.name + " tenant acme"))
            big_batch = size(5000, 5000, 100)
            workloads.append(w_append_many(main, size(4, 1), reps, big_batch, "x5000"))
        if wanted("W3"):
            progress("W3 compaction")
            workloads.append(w_compaction(main, n1, reps))
        reads: list[Workload] = []
        if wanted("W4", "W5", "W9", "W10"):
            progress("W4/W5/W9/W10 reads and opens")
            nodes = size(2000, 400, 10)
            big, small = size(100_000, 20_000, nodes * 10), size(10_000, 2_000, nodes * 2)
            reads = w_read(main, big, small, nodes, reps)
            workloads.extend(reads[:-2])  # W4 and W5; W9 and W10 are reported after W8
        if wanted("W6"):
            progress("W6 follow")
            workloads.append(w_follow(main, size(200, 50, 10)))
        if main.backend == "postgresql" and wanted("W7"):
            progress("W7 contention")
            workloads.extend(w_contention(main, size(400, 100, 10)))
        if wanted("W8"):
            progress("W8 storage")
            workloads.append(w_storage(main, size(10_000, 2000, 100)))
        workloads.extend(reads[-2:])  # W9 on W4/W5's 100k-event session, W10 on the same
        if main.backend == "postgresql" and wanted("W11"):
            progress("W11 async appends")
            workloads.append(w_async_appends(main, size(200, 50, 5), reps))
        if only is not None and "W12" in only:  # minutes to hours: only when named
            levels = [size(level, level // 10, 1000) for level in SCALE_LEVELS]
            workloads.extend(w_scale(main, _store_bytes, levels, progress))
        if citus_url is not None and wanted("W13"):
            progress("W13 Citus beside plain PostgreSQL")
            with citus_target(citus_url, main) as citus:
                calls, events = size(400, 200, 20), size(2000, 2000, 200)
                workloads.extend(w_citus(main, citus, calls, events))
    return {
        "backend": targets[0].backend,
        "quick": quick,
        "workloads": [
            {
                "name": w.name,
                "events_per_s": round(w.events_per_s, 1),
                "raw_events_per_s": round(w.raw_events_per_s, 1),
                "ratio": round(w.ratio, 3),
                "reps": w.reps,
                "min_max_events_per_s": [round(w.spread[0], 1), round(w.spread[1], 1)],
                "extra": w.extra,
            }
            for w in workloads
        ],
    }
