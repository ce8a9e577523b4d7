"""W7 (PostgreSQL) with and without the NOTIFY an append sends at commit.

    python scripts/bench_notify.py [events per writer, default 400] [rounds, default 2]

Runs ``session-sql bench``'s W7 shape (one writer; 4 writer processes on 4 sessions; 4 on one
session, re-reading the head and retrying on conflict) twice per round, with the writes of
``session-sql bench``'s raw-driver baseline (the store's own statements on a bare psycopg
connection): once with the ``pg_notify`` the store sends in each append's transaction, once
without (SPEC §8.3 requires the NOTIFY, so the store itself has no switch for it). PostgreSQL
takes a database-wide lock at the commit of a transaction that sent NOTIFY and holds it until
the commit is flushed, so notifying commits are serialised; the scaling of 4 writers on 4
sessions shows it. Prints medians per mode. Uses a throwaway schema, dropped after;
``SESSION_SQL_BENCH_URL`` overrides the server.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from session_sql import open_store
from session_sql.cli import bench

URL = os.environ.get("SESSION_SQL_BENCH_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _noop(_: int) -> None:
    return None


def contender(args: tuple[str, str, str, int, bool]) -> tuple[int, int]:
    """Append ``count`` chunks to a session, one transaction each (with the store's NOTIFY, or
    without), re-reading the head and retrying when another writer took the next seq."""
    url, schema, session_id, count, notify = args
    raw = bench.Target("postgresql", url, schema, "").raw()
    assert isinstance(raw, bench.RawPostgres)
    head_of = sql.SQL("SELECT head_seq FROM {}.sessions WHERE tenant = '' AND id = %s").format(
        sql.Identifier(schema)
    )

    def read_head() -> int:
        row = raw.conn.execute(head_of, (session_id,)).fetchone()
        raw.conn.commit()
        assert row is not None
        return int(row[0])

    conflicts = 0
    try:
        head = read_head()
        chunks = bench.chunk_events(count)
        done = 0
        while done < count:
            try:
                with raw.conn.transaction():  # raw.write's own transaction nests as a savepoint
                    if notify:
                        raw.conn.execute(
                            "SELECT pg_notify(%s, %s)", (schema, f"{session_id}:{head + 1}")
                        )
                    head = raw.write(session_id, head, [chunks[done]])
                done += 1
            except psycopg.errors.UniqueViolation:
                conflicts += 1
                head = read_head()
    finally:
        raw.close()
    return done, conflicts


def run(url: str, schema: str, per: int, notify: bool, pool: Any) -> tuple[Any, ...]:
    """(one writer ev/s, 4x4 ev/s, 4x1 ev/s, 4x1 conflicts, 4x1 verify ok)."""
    with open_store(url, schema=schema) as store:
        solo = store.create_session().id
        t0 = time.perf_counter()
        contender((url, schema, solo, per, notify))
        t_one = time.perf_counter() - t0
        ids = [store.create_session().id for _ in range(4)]
        t0 = time.perf_counter()
        pool.map(contender, [(url, schema, i, per, notify) for i in ids])
        t_four = time.perf_counter() - t0
        shared = store.create_session().id
        t0 = time.perf_counter()
        res = pool.map(contender, [(url, schema, shared, per, notify) for _ in range(4)])
        t_shared = time.perf_counter() - t0
        ok = store.verify(shared).ok
    return per / t_one, 4 * per / t_four, 4 * per / t_shared, sum(c for _, c in res), ok


def main() -> None:
    per = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    schema = "bench_notify_" + uuid.uuid4().hex[:8]
    target = bench.Target("postgresql", URL, schema, "")
    out: dict[bool, list[tuple[Any, ...]]] = {True: [], False: []}
    try:
        with mp.get_context("spawn").Pool(4) as pool:
            pool.map(_noop, range(4))  # start the workers before timing
            for _ in range(rounds):
                for notify in (True, False):
                    out[notify].append(run(URL, schema, per, notify, pool))
    finally:
        target.drop()
    for notify, rows in out.items():
        one = statistics.median(r[0] for r in rows)
        four = statistics.median(r[1] for r in rows)
        shared = statistics.median(r[2] for r in rows)
        scaling = statistics.median(r[1] / r[0] for r in rows)
        print(
            f"NOTIFY {'on ' if notify else 'off'}: one writer {one:.0f} ev/s; 4 writers x 4 "
            f"sessions {four:.0f} ev/s ({scaling:.2f}x one); 4 x 1 session {shared:.0f} ev/s, "
            f"conflicts {[r[3] for r in rows]}, verify {[r[4] for r in rows]}"
        )


if __name__ == "__main__":
    main()
