"""Many writers on one session: retries per append with and without jittered backoff.

Starts ``--writers`` processes that each append ``--appends`` user messages to one shared
session. ``naive`` refreshes and retries at once after a lost race; ``backoff`` uses
``retry_on_conflict`` (full-jitter exponential backoff). Reports lost races per append,
events per second, and checks that every message is in the log exactly once, in seq order
without gaps. Prints JSON.

    python scripts/bench_hot_session.py --url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from session_sql import ConcurrencyError, RetryPolicy, open_store, retry_on_conflict


def _message(writer: int, n: int) -> dict[str, Any]:
    text = f"w{writer} #{n}"
    return {
        "id": text,
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


def _writer(args: tuple[str, str | None, str, int, int, str, float, Any]) -> int:
    url, schema, session_id, writer, appends, mode, first_delay, start = args
    policy = RetryPolicy(first_delay=first_delay)
    lost = 0
    with open_store(url, **({"schema": schema} if schema else {})) as store:
        handle = store.open_session(session_id)
        start.wait()
        for n in range(appends):
            data = _message(writer, n)
            if mode == "backoff":

                def count(_: ConcurrencyError) -> None:
                    nonlocal lost
                    lost += 1

                retry_on_conflict(
                    handle,
                    lambda h, d=data: h.append("user/message", d, surface_op="append"),
                    policy=policy,
                    on_conflict=count,
                )
                continue
            while True:
                try:
                    handle.append("user/message", data, surface_op="append")
                    break
                except ConcurrencyError:
                    lost += 1
                    handle.refresh()
    return lost


def run(
    url: str, schema: str | None, writers: int, appends: int, mode: str, first_delay: float
) -> dict[str, Any]:
    options = {"schema": schema} if schema else {}
    with open_store(url, **options) as store:
        session_id = store.create_session().id
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Event()
        jobs = [
            (url, schema, session_id, w, appends, mode, first_delay, start) for w in range(writers)
        ]
        with ctx.Pool(writers) as pool:
            pending = pool.map_async(_writer, jobs)
            time.sleep(2.0)  # every writer has opened its store and handle
            began = time.perf_counter()
            start.set()
            lost = sum(pending.get())
            elapsed = time.perf_counter() - began
    with open_store(url, **options) as store:
        events = list(store.events(session_id))
        texts = [e.data["content"][0]["text"] for e in events if e.type == "user/message"]
        ok = store.verify(session_id).ok
    expected = {
        _message(w, n)["content"][0]["text"] for w in range(writers) for n in range(appends)
    }
    total = writers * appends
    return {
        "mode": mode,
        "first_delay_s": first_delay if mode == "backoff" else None,
        "writers": writers,
        "appends": total,
        "lost_races": lost,
        "lost_races_per_append": round(lost / total, 3),
        "events_per_s": round(total / elapsed),
        "every_event_once": len(texts) == total and set(texts) == expected,
        "seqs_without_gaps": [e.seq for e in events] == list(range(len(events))),
        "verify_ok": ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="postgresql://... (default: a temporary SQLite file)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--appends", type=int, default=100)
    parser.add_argument("--mode", choices=["naive", "backoff", "both"], default="both")
    parser.add_argument("--first-delay", type=float, default=RetryPolicy().first_delay)
    args = parser.parse_args()
    modes = ["naive", "backoff"] if args.mode == "both" else [args.mode]
    results = []
    for mode in modes:
        if args.url:
            schema = f"hot_{uuid.uuid4().hex[:8]}"
            try:
                results.append(
                    run(args.url, schema, args.writers, args.appends, mode, args.first_delay)
                )
            finally:
                engine = create_engine(args.url.replace("postgresql://", "postgresql+psycopg://"))
                with engine.begin() as conn:
                    conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
                engine.dispose()
        else:
            with tempfile.TemporaryDirectory() as folder:
                url = f"sqlite:///{Path(folder) / 'hot.db'}"
                results.append(run(url, None, args.writers, args.appends, mode, args.first_delay))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
