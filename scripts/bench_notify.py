"""W7 (PostgreSQL) with and without the NOTIFY an append sends at commit.

    python scripts/bench_notify.py [events per writer, default 400] [rounds, default 2]

Runs ``session-sql bench``'s W7 (one writer; 4 writer processes on 4 sessions; 4 on one
session with refresh-and-retry) twice per round: as the store writes, and with the store's
NOTIFY channel switched off in every writer (a private switch, for this measurement only:
SPEC §8.3 requires the NOTIFY). PostgreSQL takes a database-wide lock at the commit of a
transaction that sent NOTIFY and holds it until the commit is flushed, so notifying commits
are serialised; the scaling of 4 writers on 4 sessions shows it. Prints medians per mode.
Uses a throwaway schema, dropped after; ``SESSION_SQL_BENCH_URL`` overrides the server.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from typing import Any

from session_sql import open_store
from session_sql.cli import bench
from session_sql.errors import ConcurrencyError

URL = os.environ.get("SESSION_SQL_BENCH_URL", "postgresql://postgres@127.0.0.1:5432/test")


def contender(args: tuple[str, str, str, int, bool]) -> tuple[int, int]:
    """Append ``count`` chunks to a session, refreshing and retrying on conflict."""
    url, schema, session_id, count, notify = args
    conflicts = 0
    with open_store(url, schema=schema) as store:
        if not notify:
            store._ctx.channel = None  # no NOTIFY at commit
        handle = store.open_session(session_id)
        done = 0
        while done < count:
            try:
                handle.append("assistant/chunk", bench._chunk(1, 1, done))
                done += 1
            except ConcurrencyError:
                conflicts += 1
                handle.refresh()
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
            pool.map(bench._noop, range(4))  # start the workers before timing
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
