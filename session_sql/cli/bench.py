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
W11 (PostgreSQL) compares the async API with the sync one, both session_sql.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import func, literal, make_url, select
from sqlalchemy.dialects.postgresql import REGCLASS

from session_sql._store.async_store import open_async_store
from session_sql._store.schema import tables_for
from session_sql._store.store import SessionStore, open_store
from session_sql.cli._bench_raw import Raw, RawPostgres, RawSQLite
from session_sql.cli._support import CliError
from session_sql.errors import ConcurrencyError

Item = dict[str, Any]


# -- a realistic event mix ---------------------------------------------------------------------

_TEXT = "The quick brown fox jumps over the lazy dog. " * 12  # ~540 bytes


def _user(i: int) -> Any:
    return {
        "id": f"u{i}",
        "role": "user",
        "content": [{"type": "text", "text": _TEXT[:480]}],
        "source": {"kind": "user"},
    }


def _assistant(i: int, turn: int, step: int, call: str | None) -> Any:
    content: list[Any] = [{"type": "text", "text": _TEXT[:400]}]
    if call is not None:
        content.append({"type": "tool-call", "id": call, "name": "shell", "arguments": '{"c":1}'})
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"a{i}",
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": "bench", "model": "bench-1"},
        },
        "usage": {"inputTokens": 1200, "outputTokens": 90},
    }


def _result(call: str, turn: int, step: int, text: str) -> Any:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"r{call}",
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call,
                    "content": [{"type": "text", "text": text}],
                }
            ],
            "source": {"kind": "tool", "callId": call},
        },
    }


def _chunk(turn: int, step: int, i: int) -> Any:
    return {
        "turn": turn,
        "step": step,
        "chunk": {"type": "text-delta", "index": 0, "text": _TEXT[i % 40 : i % 40 + 24]},
    }


def agent_events(n: int, start: int = 0) -> list[Item]:
    """``n`` append items of a plausible agent session, seqs starting at ``start``.

    Per turn: turn/start, user message, a step with chunks, an assistant message calling a
    tool, the tool call and its result, a second step with chunks and a final answer.
    """
    out: list[Item] = []
    turn = 0
    while len(out) < n:
        turn += 1
        seq = start + len(out)
        items: list[Item] = [
            {"type": "turn/start", "data": {"turn": turn}},
            {"type": "user/message", "data": _user(seq + 1), "surface_op": "append"},
        ]
        for step, call in ((1, f"c{turn}"), (2, None)):
            items.append({"type": "step/start", "data": {"turn": turn, "step": step}})
            first_chunk = seq + len(items)
            items.extend(
                {"type": "assistant/chunk", "data": _chunk(turn, step, k)} for k in range(6)
            )
            chunks = list(range(first_chunk, first_chunk + 6))
            items.append(
                {
                    "type": "assistant/message",
                    "data": _assistant(seq + len(items), turn, step, call),
                    "surface_op": "append",
                    "source_event_seqs": chunks,
                }
            )
            if call is not None:
                call_seq = seq + len(items)
                items.append(
                    {
                        "type": "tool/call",
                        "data": {
                            "turn": turn,
                            "step": step,
                            "callId": call,
                            "name": "shell",
                            "arguments": '{"c":1}',
                        },
                    }
                )
                items.append(
                    {
                        "type": "tool/result",
                        "data": _result(call, turn, step, _TEXT[:450]),
                        "surface_op": "append",
                        "source_event_seqs": [call_seq],
                    }
                )
            items.append({"type": "step/end", "data": {"turn": turn, "step": step}})
        items.append({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
        out.extend(items)
    del out[n:]
    return out


def chunk_events(n: int, turn: int = 1, step: int = 1) -> list[Item]:
    return [{"type": "assistant/chunk", "data": _chunk(turn, step, i)} for i in range(n)]


# -- the harness ----------------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    events_per_s: float
    raw_events_per_s: float
    ratio: float
    reps: int
    extra: dict[str, Any] = field(default_factory=dict)
    spread: tuple[float, float] = (0.0, 0.0)  # min-max of our events/s


@dataclass
class Target:
    """Where the bench runs: a store factory and a matching raw baseline."""

    backend: str
    url: str
    schema: str
    workdir: str
    synchronous: str = "FULL"
    tenant: str = ""
    """The tenant both sides write (the store's ``tenant=``, the raw rows' tenant column)."""

    def store(self, **options: Any) -> SessionStore:
        if self.backend == "sqlite":
            options.setdefault("synchronous", self.synchronous)
        return open_store(self.url, schema=self.schema, tenant=self.tenant, **options)

    def fresh(self, name: str) -> Target:
        """The same backend and settings on an empty database: a new file, or a new schema."""
        if self.backend == "sqlite":
            url = f"sqlite:///{os.path.join(self.workdir, name + '.db')}"
            return Target("sqlite", url, self.schema, self.workdir, self.synchronous)
        return Target(self.backend, self.url, f"{self.schema}_{name}", self.workdir)

    def drop(self) -> None:
        """Remove this target's database: its files, or its schema."""
        if self.backend == "sqlite":
            path = str(make_url(self.url).database)
            for name in (path, path + "-wal", path + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(name)
        else:
            _drop_schema(self.url, self.schema)

    def raw(self) -> Raw:
        if self.backend == "sqlite":
            return RawSQLite(str(make_url(self.url).database), self.synchronous, self.tenant)
        conninfo = make_url(self.url).set(drivername="postgresql")
        return RawPostgres(conninfo.render_as_string(hide_password=False), self.schema, self.tenant)


def _median_rate(samples: list[float]) -> float:
    return statistics.median(samples)


def _rates(count: int, seconds: list[float]) -> list[float]:
    return [count / s for s in seconds if s > 0]


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _workload(
    name: str, count: int, ours: list[float], raw: list[float], extra: dict[str, Any]
) -> Workload:
    mine, base = _rates(count, ours), _rates(count, raw)
    m, b = _median_rate(mine), _median_rate(base)
    return Workload(
        name=name,
        events_per_s=m,
        raw_events_per_s=b,
        ratio=m / b if b else 0.0,
        reps=len(ours),
        extra=extra,
        spread=(min(mine), max(mine)),
    )


def _one_per_transaction(
    target: Target, items: list[Item], reps: int, name: str, extra: dict[str, Any]
) -> Workload:
    """Append ``items`` one transaction each, through the store and through the raw driver."""
    ours, raws = [], []
    with target.store() as store, _closing(target.raw()) as raw:
        for _ in range(reps):
            handle = store.create_session()

            def run_ours(h: Any = handle) -> None:
                for it in items:
                    h.append(
                        it["type"],
                        it["data"],
                        surface_op=it.get("surface_op"),
                        source_event_seqs=it.get("source_event_seqs"),
                    )

            ours.append(_timed(run_ours))
            sid = raw.new_session()

            def run_raw(s: str = sid) -> None:
                head = -1
                for it in items:
                    head = raw.write(s, head, [it])

            raws.append(_timed(run_raw))
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
    ours, raws = [], []
    with target.store() as store, _closing(target.raw()) as raw:
        for _ in range(reps):
            handle = store.create_session()

            def run_ours(h: Any = handle) -> None:
                for batch in batch_list:
                    h.append_many(batch)

            ours.append(_timed(run_ours))
            sid = raw.new_session()

            def run_raw(s: str = sid) -> None:
                head = -1
                for batch in batch_list:
                    head = raw.write(s, head, batch)

            raws.append(_timed(run_raw))
    name = f"W2 append_many {label}"
    return _workload(name, batches * size, ours, raws, {"batch": size})


def compaction_events(n: int) -> Iterator[Item]:
    """W3's stream: messages, and every 50th event a summary replacing the last 40 nodes."""
    nodes: list[int] = []
    for seq in range(n):
        if seq % 50 == 49 and len(nodes) >= 40:
            shadowed = nodes[-40:]
            yield {
                "type": "user/message",
                "data": _user(seq),
                "surface_op": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
                "source_event_seqs": shadowed,
            }
            del nodes[-40:]
        else:
            yield {"type": "user/message", "data": _user(seq), "surface_op": "append"}
        nodes.append(seq)


def w_compaction(target: Target, n: int, reps: int) -> Workload:
    """W3: a replace covering 40 surface nodes every 50 events, one event per transaction."""
    items = list(compaction_events(n))
    extra = {"replace_every": 50, "covers": 40}
    return _one_per_transaction(target, items, reps, "W3 compaction-heavy", extra)


def _big_session(store: SessionStore, total: int, surface_nodes: int) -> str:
    """A session of ``total`` events whose surface holds ``surface_nodes`` user messages."""
    handle = store.create_session()
    per_message = total // surface_nodes
    batch: list[Item] = []
    for k in range(surface_nodes):
        batch.append({"type": "user/message", "data": _user(k), "surface_op": "append"})
        batch.extend(chunk_events(per_message - 1))
        if len(batch) >= 5000:
            handle.append_many(batch)
            batch = []
    if batch:
        handle.append_many(batch)
    return handle.id


TAIL = 20
"""W9's ``last``: the final messages an agent loop or a UI shows."""

TAIL_CALLS = 20
"""W9 times this many tail reads per sample: one is well under a millisecond."""


def w_read(target: Target, big: int, small: int, nodes: int, reps: int) -> list[Workload]:
    """W4 (messages + surface, flat in log length), W5 (load_session vs raw fetch+parse),
    W9 (``messages(last=20)`` vs the raw ``ORDER BY pos DESC LIMIT 20`` + fetch + parse) and
    W10 (``open_session`` + one append, flat in log length; it compacts the sessions last)."""
    out = []
    with target.store() as store, _closing(target.raw()) as raw:
        big_id = _big_session(store, big, nodes)
        small_id = _big_session(store, small, nodes)

        def read(sid: str) -> None:
            store.messages(sid)
            store.surface(sid)

        read(big_id)  # warm both caches before timing
        read(small_id)
        t_big, t_small, t_msgs, t_raw = [], [], [], []
        for _ in range(max(reps, 7)):  # interleaved, so drift hits both sides alike
            t_big.append(_timed(lambda: read(big_id)))
            t_small.append(_timed(lambda: read(small_id)))
            t_msgs.append(_timed(lambda: store.messages(big_id)))
            t_raw.append(_timed(lambda: raw.fetch_surface(big_id)))
        growth = statistics.median(t_big) / statistics.median(t_small)
        w4 = _workload("W4 messages() of 2k nodes", nodes, t_msgs, t_raw, {})
        w4.extra = {
            "log_growth_100k_over_10k": round(growth, 3),
            "messages_over_raw_time": round(1 / w4.ratio, 3) if w4.ratio else None,
            "big_log": big,
            "small_log": small,
            "surface_nodes": nodes,
        }
        out.append(w4)
        out.extend(_w5(store, raw, big_id, big, "", max(2, reps // 2)))
        small_log = min(LOAD_SMALL, big)
        out.extend(
            _w5(store, raw, _big_session(store, small_log, 100), small_log, " 5k", max(reps, 7))
        )
        if store.messages(big_id, last=TAIL) != raw.fetch_tail(big_id, TAIL):
            raise CliError("W9: the store's tail read and the raw one disagree")

        def tail_reads(read: Callable[[], Any]) -> None:
            for _ in range(TAIL_CALLS):
                read()

        def cold_read() -> None:
            store._ctx.parsed.clear()  # every row parsed and checked again, as when all are new
            store.messages(big_id, last=TAIL)

        t_tail, t_raw_tail, t_cold = [], [], []
        for _ in range(max(reps, 7)):
            t_tail.append(_timed(lambda: tail_reads(lambda: store.messages(big_id, last=TAIL))))
            t_raw_tail.append(_timed(lambda: tail_reads(lambda: raw.fetch_tail(big_id, TAIL))))
            t_cold.append(_timed(lambda: tail_reads(cold_read)))
        w9 = _workload(f"W9 messages(last={TAIL})", TAIL * TAIL_CALLS, t_tail, t_raw_tail, {})
        cold = statistics.median(t_cold) / statistics.median(t_raw_tail)
        w9.extra = {
            "tail_over_raw_time": round(1 / w9.ratio, 3) if w9.ratio else None,
            "cold_tail_over_raw_time": round(cold, 3),
            "log": big,
            "surface_nodes": nodes,
            "last": TAIL,
        }
        out.append(w9)
        out.append(w_open(store, raw, big_id, small_id, nodes, reps))
    return out


KEPT = 10
"""W10 compacts W4's sessions to keep every ``KEPT``-th node: a long session whose context
was summarised (the cost of an open follows the surface, the ratio the log's length)."""


def _compact(store: SessionStore, session_id: str) -> int:
    """Replace the surface's first 90% with one summary; returns the surface size left."""
    handle = store.open_session(session_id)
    nodes = handle.surface.nodes
    covered = nodes[: len(nodes) - len(nodes) // KEPT]
    handle.append(
        "user/message",
        _user(handle.seq),
        surface_op={"op": "replace", "start": covered[0], "end": covered[-1]},
        source_event_seqs=list(covered),
    )
    return len(handle.surface.nodes)


def w_open(
    store: SessionStore, raw: Raw, big_id: str, small_id: str, nodes: int, reps: int
) -> Workload:
    """W10: ``open_session`` + one append, on W4's 100k-event and 10k-event sessions (after a
    compaction), vs the raw driver reading the same surface rows (fetch + parse) and writing
    one event; the figure is per open-and-append, the growth is 100k over 10k."""
    surface = _compact(store, big_id)
    _compact(store, small_id)
    chunk = chunk_events(1)[0]
    raw_sid = raw.new_session()
    raw_head = -1

    def open_and_append(sid: str) -> None:
        handle = store.open_session(sid)
        handle.append(chunk["type"], chunk["data"])

    def raw_open_and_append() -> None:
        nonlocal raw_head
        raw.fetch_surface(big_id)
        raw_head = raw.write(raw_sid, raw_head, [chunk])

    def cold_open_and_append() -> None:
        store._ctx.checked.clear()  # every surface event checked again, as in a new process
        open_and_append(big_id)

    open_and_append(big_id)  # warm both sides
    raw_open_and_append()
    t_big, t_small, t_raw, t_open_big, t_open_small, t_cold = [], [], [], [], [], []
    for _ in range(max(reps, 9)):  # interleaved, so drift hits them all alike
        t_big.append(_timed(lambda: open_and_append(big_id)))
        t_small.append(_timed(lambda: open_and_append(small_id)))
        t_raw.append(_timed(raw_open_and_append))
        t_open_big.append(_timed(lambda: store.open_session(big_id)))
        t_open_small.append(_timed(lambda: store.open_session(small_id)))
        t_cold.append(_timed(cold_open_and_append))
    w10 = _workload("W10 open_session + append", 1, t_big, t_raw, {})

    def ms(samples: list[float]) -> float:
        return round(statistics.median(samples) * 1000, 2)

    w10.extra = {
        "open_append_ms": ms(t_big),
        "open_ms": ms(t_open_big),
        # The figures above are for a process that opened the session before (the store keeps
        # the surface events it checked); a first open checks every one of them.
        "cold_open_append_ms": ms(t_cold),
        "cold_over_raw_time": round(statistics.median(t_cold) / statistics.median(t_raw), 3),
        "log_growth_100k_over_10k": round(statistics.median(t_big) / statistics.median(t_small), 3),
        "open_growth_100k_over_10k": round(
            statistics.median(t_open_big) / statistics.median(t_open_small), 3
        ),
        "open_over_raw_time": round(1 / w10.ratio, 3) if w10.ratio else None,
        "log": store.head_seq(big_id) + 1,
        "small_log": store.head_seq(small_id) + 1,
        "surface_nodes": surface,
    }
    return w10


LOAD_SMALL = 5000
"""W5's small session: ``load_session`` and ``events()`` of a 5,000-event log."""


def _w5(
    store: SessionStore, raw: Raw, sid: str, count: int, label: str, reps: int
) -> list[Workload]:
    """W5: ``load_session`` and ``list(events())`` vs raw fetch + ``json.loads`` of the log,
    interleaved so that drift hits both sides alike."""
    t_load, t_events, t_raw = [], [], []
    for _ in range(reps):
        t_load.append(_timed(lambda: store.load_session(sid)))
        t_events.append(_timed(lambda: list(store.events(sid))))
        t_raw.append(_timed(lambda: raw.fetch_log(sid)))
    out = []
    for name, times in (("load_session", t_load), ("events()", t_events)):
        w = _workload(f"W5 {name}{label}", count, times, t_raw, {})
        w.extra = {"over_raw_time": round(1 / w.ratio, 3) if w.ratio else None, "log": count}
        out.append(w)
    return out


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


def _contender(args: tuple[str, str, str, int]) -> tuple[int, int]:
    """Append ``count`` events to a session, refreshing and retrying on conflict."""
    url, schema, session_id, count = args
    conflicts = 0
    with open_store(url, schema=schema) as store:
        handle = store.open_session(session_id)
        done = 0
        while done < count:
            try:
                handle.append("assistant/chunk", _chunk(1, 1, done))
                done += 1
            except ConcurrencyError:
                conflicts += 1
                handle.refresh()
    return done, conflicts


def w_contention(target: Target, per_process: int) -> list[Workload]:
    """W7: 4 processes on 4 sessions vs one writer, and 4 processes on one session."""
    ctx = mp.get_context("spawn")
    with target.store() as store:
        solo = store.create_session().id
        t_one = _timed(lambda: _contender((target.url, target.schema, solo, per_process)))
        ids = [store.create_session().id for _ in range(4)]
        with ctx.Pool(4) as pool:
            pool.map(_noop, range(4))  # start the workers before timing
            t0 = time.perf_counter()
            pool.map(_contender, [(target.url, target.schema, i, per_process) for i in ids])
            t_four = time.perf_counter() - t0
            shared = store.create_session().id
            t0 = time.perf_counter()
            results = pool.map(
                _contender, [(target.url, target.schema, shared, per_process) for _ in range(4)]
            )
            t_shared = time.perf_counter() - t0
        report = store.verify(shared)
        seqs = [e.seq for e in store.events(shared)]
    total = 4 * per_process
    conflicts = sum(c for _, c in results)
    scaling = (total / t_four) / (per_process / t_one)
    return [
        Workload(
            name="W7 4 writers x 4 sessions",
            events_per_s=total / t_four,
            raw_events_per_s=per_process / t_one,
            ratio=scaling,
            reps=1,
            extra={"aggregate_over_one_writer": round(scaling, 3)},
        ),
        Workload(
            name="W7 4 writers x 1 session",
            events_per_s=total / t_shared,
            raw_events_per_s=per_process / t_one,
            ratio=(total / t_shared) / (per_process / t_one),
            reps=1,
            extra={
                "conflicts": conflicts,
                "conflicts_per_event": round(conflicts / total, 3),
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
        for table in (t.sessions, t.events, t.surface)
    ]
    with store.engine.connect() as conn:
        return int(sum(conn.execute(select(*sizes)).one()))


# -- running -------------------------------------------------------------------------------


@contextmanager
def _closing(raw: Raw) -> Iterator[Raw]:
    try:
        yield raw
    finally:
        raw.close()


def _sqlite_workdir(url: str | None) -> str | None:
    """Where the SQLite temp files go: beside the file ``url`` names, else the system temp."""
    if url is None:
        return None
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    directory = os.path.dirname(os.path.abspath(database))
    if not os.path.isdir(directory):
        raise CliError(f"bench: the directory of {database!r} does not exist")
    return directory


@contextmanager
def bench_targets(url: str | None) -> Iterator[list[Target]]:
    """Temp SQLite files (FULL and NORMAL), or throwaway schemas on the given PostgreSQL.

    A ``sqlite:///path`` URL puts the temp files in a temporary directory beside ``path`` (on
    the same file system) and never opens ``path`` itself; without a URL they go to the system
    temp directory. Everything is removed afterwards.
    """
    sqlite = url is None or make_url(url).get_backend_name() == "sqlite"
    workdir = tempfile.mkdtemp(
        prefix="session-sql-bench-", dir=_sqlite_workdir(url) if sqlite else None
    )
    schema = f"bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        if sqlite:
            yield [
                Target("sqlite", f"sqlite:///{workdir}/full.db", "session_sql", workdir, "FULL"),
                Target(
                    "sqlite", f"sqlite:///{workdir}/normal.db", "session_sql", workdir, "NORMAL"
                ),
            ]
        else:
            assert url is not None
            main = Target("postgresql", url, schema, workdir)
            try:
                yield [main]
            finally:
                main.drop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _drop_schema(url: str, schema: str) -> None:
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(
    url: str | None,
    *,
    quick: bool,
    progress: Callable[[str], None] = lambda _: None,
    scale: float = 1.0,
    only: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Run every workload for the backend of ``url`` (or those named in ``only``, e.g.
    ``{"W1", "W11"}``) and return the JSON report.

    ``scale`` shrinks every size (the tests run the real workloads at a tiny scale). W4, W5,
    W9 and W10 share one setup: naming any of them runs all four.
    """

    def size(full: int, fast: int, floor: int = 1) -> int:
        return max(floor, int((fast if quick else full) * scale))

    def wanted(*names: str) -> bool:
        return only is None or any(name in only for name in names)

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
