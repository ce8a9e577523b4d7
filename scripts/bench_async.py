"""Append throughput: 16 asyncio tasks on 16 sessions (async API) vs 16 threads (sync API).

    python scripts/bench_async.py [postgresql+psycopg://postgres@127.0.0.1:5432/test] [appends]

Each worker appends ``appends`` user messages one by one to its own session; the figure is
appends per second over all workers, the median of 3 runs, each in a fresh schema (dropped).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
import uuid

from sqlalchemy import create_engine, text

from session_sql import open_async_store, open_store

WORKERS = 16


def message(i: int) -> dict[str, object]:
    return {
        "id": f"u{i}",
        "role": "user",
        "content": [{"type": "text", "text": f"message {i}"}],
        "source": {"kind": "user"},
    }


def run_threads(url: str, schema: str, appends: int) -> float:
    with open_store(url, schema=schema, pool_size=WORKERS) as store:
        handles = [store.create_session() for _ in range(WORKERS)]
        barrier = threading.Barrier(WORKERS + 1)

        def work(handle) -> None:  # type: ignore[no-untyped-def]
            barrier.wait()
            for i in range(appends):
                handle.append("user/message", message(i), surface_op="append")

        threads = [threading.Thread(target=work, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        return WORKERS * appends / (time.perf_counter() - start)


def run_tasks(url: str, schema: str, appends: int) -> float:
    async def main() -> float:
        async with open_async_store(url, schema=schema, pool_size=WORKERS) as store:
            handles = [await store.create_session() for _ in range(WORKERS)]

            async def work(handle) -> None:  # type: ignore[no-untyped-def]
                for i in range(appends):
                    await handle.append("user/message", message(i), surface_op="append")

            start = time.perf_counter()
            await asyncio.gather(*(work(h) for h in handles))
            return WORKERS * appends / (time.perf_counter() - start)

    return asyncio.run(main())


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    appends = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    admin = create_engine(url)
    results: dict[str, list[float]] = {"threads (sync API)": [], "tasks (async API)": []}
    try:
        for _ in range(3):
            for name, fn in (("threads (sync API)", run_threads), ("tasks (async API)", run_tasks)):
                schema = f"bench_{uuid.uuid4().hex[:12]}"
                try:
                    results[name].append(fn(url, schema, appends))
                finally:
                    with admin.begin() as conn:
                        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        admin.dispose()
    for name, rates in results.items():
        runs = ", ".join(f"{r:.0f}" for r in rates)
        print(f"{name:20} median {statistics.median(rates):6.0f} appends/s  (runs: {runs})")


if __name__ == "__main__":
    main()
