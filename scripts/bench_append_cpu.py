"""CPU per single-event append on PostgreSQL: the client's and the server's, session_sql
against the raw driver (``session-sql bench``'s baseline: the same rows, the same durability).

    python scripts/bench_append_cpu.py [appends per run, default 2000] [rounds, default 3]
    python scripts/bench_append_cpu.py --writers 8 [appends per writer, default 400] [rounds]

One process appends ``assistant/chunk`` events one per transaction to one session: through a
sync store, an async store, and the raw psycopg baseline, in alternation, ``rounds`` times.
With ``--writers N``, W7's shape instead: N processes, each appending to a session of its
own (the sync store, or the raw driver), one writer and then N, with events per second and
the CPU per event summed over the writers.
The client's figure is this process's CPU time (``time.process_time``: user and system, so
the kernel's share of each round trip counts); the server's is the CPU time of the backends
of this run's own connections (found by their ``application_name`` in ``pg_stat_activity``
and read from ``/proc``, so the server must run on this machine). Wall-clock time is printed
too, but on a shared machine the CPU figures are the ones to compare. Prints medians per
side; uses a throwaway schema, dropped after; ``SESSION_SQL_BENCH_URL`` overrides the server.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from session_sql import open_async_store, open_store
from session_sql.cli.bench import RawPostgres, chunk_events

URL = os.environ.get("SESSION_SQL_BENCH_URL", "postgresql://postgres@127.0.0.1:5432/test")
WARM = 50
"""Appends before the timed ones (connections opened, statements prepared)."""


class Meter:
    """Client CPU, server CPU (this run's backends) and wall time of a block."""

    def __init__(self, monitor: psycopg.Connection[Any], app: str) -> None:
        self.monitor, self.app = monitor, app
        self.client = self.server = self.wall = 0.0

    def _server(self) -> float:
        rows = self.monitor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.app,)
        ).fetchall()
        ticks = 0
        for (pid,) in rows:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # ended meanwhile
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> Meter:
        self._s, self._c, self._w = self._server(), time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.client = time.process_time() - self._c
        self.wall = time.perf_counter() - self._w
        self.server = self._server() - self._s


def ours(url: str, schema: str, meter: Meter, datas: list[Any]) -> None:
    with open_store(url, schema=schema) as store:
        handle = store.create_session()
        for data in datas[:WARM]:
            handle.append("assistant/chunk", data)
        with meter:
            for data in datas[WARM:]:
                handle.append("assistant/chunk", data)


def ours_async(url: str, schema: str, meter: Meter, datas: list[Any]) -> None:
    async def run() -> None:
        async with open_async_store(url, schema=schema) as store:
            handle = await store.create_session()
            for data in datas[:WARM]:
                await handle.append("assistant/chunk", data)
            with meter:
                for data in datas[WARM:]:
                    await handle.append("assistant/chunk", data)

    asyncio.run(run())


def raw(url: str, schema: str, meter: Meter, datas: list[Any]) -> None:
    baseline = RawPostgres(url, schema)
    try:
        session_id, head = baseline.new_session(), -1
        items = [{"type": "assistant/chunk", "data": d} for d in datas]
        for item in items[:WARM]:
            head = baseline.write(session_id, head, [item])
        with meter:
            for item in items[WARM:]:
                head = baseline.write(session_id, head, [item])
    finally:
        baseline.close()


SIDES: dict[str, Callable[[str, str, Meter, list[Any]], None]] = {
    "sync store": ours,
    "async store": ours_async,
    "raw driver": raw,
}


def writer(args: tuple[str, str, int, Any]) -> tuple[float, float, float, float]:
    """One of ``--writers``' processes: ``count`` appends through ``side`` once ``start`` is
    set; its first and last wall-clock times, client CPU and server CPU."""
    side, schema, count, start = args
    app = "bench_cpu_" + uuid.uuid4().hex[:8]
    sep = "&" if "?" in URL else "?"
    datas = [item["data"] for item in chunk_events(count + WARM)]
    with psycopg.connect(URL, autocommit=True) as monitor:
        meter = Meter(monitor, app)
        began: list[float] = []

        class Started(Meter):
            def __enter__(self) -> Meter:
                start.wait()
                began.append(time.time())
                return meter.__enter__()

            def __exit__(self, *exc: object) -> None:
                meter.__exit__(*exc)

        SIDES[side](URL + sep + "application_name=" + app, schema, Started(monitor, app), datas)
        ended = time.time()
    return began[0], ended, meter.client, meter.server


def writers(n: int, count: int, rounds: int) -> None:
    """``--writers n``: W7's shape with the CPU per event."""
    schema = "bench_cpu_" + uuid.uuid4().hex[:8]
    ctx = mp.get_context("spawn")
    rows: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    with psycopg.connect(URL, autocommit=True) as admin:
        try:
            with open_store(URL, schema=schema), ctx.Manager() as manager, ctx.Pool(n) as pool:
                pool.map(abs, range(n))  # the processes started before timing
                for _ in range(rounds):
                    for many in (1, n):
                        for side in ("raw driver", "sync store"):
                            start = manager.Event()
                            pending = pool.map_async(writer, [(side, schema, count, start)] * many)
                            time.sleep(1.5)  # every writer has connected and waits
                            start.set()
                            spans = pending.get()
                            seconds = max(s[1] for s in spans) - min(s[0] for s in spans)
                            total = many * count
                            rows.setdefault((side, many), []).append(
                                (
                                    total / seconds,
                                    sum(s[2] for s in spans) / total * 1e6,
                                    sum(s[3] for s in spans) / total * 1e6,
                                )
                            )
        finally:
            admin.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
    print(f"{'medians':24} {'ev/s':>8} {'client µs':>10} {'server µs':>10}")
    for (side, many), runs in rows.items():
        rate, client, server = (statistics.median(r[i] for r in runs) for i in (0, 1, 2))
        print(f"{side + ' x' + str(many):24} {rate:8.0f} {client:10.0f} {server:10.0f}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writers":
        n = int(sys.argv[2])
        count = int(sys.argv[3]) if len(sys.argv) > 3 else 400
        writers(n, count, int(sys.argv[4]) if len(sys.argv) > 4 else 2)
        return
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    schema = "bench_cpu_" + uuid.uuid4().hex[:8]
    datas = [item["data"] for item in chunk_events(count + WARM)]
    figures: dict[str, list[tuple[float, float, float]]] = {side: [] for side in SIDES}
    with psycopg.connect(URL, autocommit=True) as monitor:
        try:
            with open_store(URL, schema=schema):
                pass  # the tables, for the raw driver too
            for _ in range(rounds):
                for side, run in SIDES.items():
                    app = "bench_cpu_" + uuid.uuid4().hex[:8]
                    sep = "&" if "?" in URL else "?"
                    meter = Meter(monitor, app)
                    run(URL + sep + "application_name=" + app, schema, meter, datas)
                    figures[side].append((meter.client, meter.server, meter.wall))
        finally:
            monitor.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
    print(f"{'µs per append (median)':24} {'client CPU':>10} {'server CPU':>10} {'wall':>8}")
    for side, runs in figures.items():
        client, server, wall = (
            statistics.median(r[i] for r in runs) / count * 1e6 for i in (0, 1, 2)
        )
        print(f"{side:24} {client:10.0f} {server:10.0f} {wall:8.0f}")


if __name__ == "__main__":
    main()
