"""Times ``SessionSQLSessionStore`` against the SDK's ``InMemorySessionStore`` (the SDK ships no
SQL adapter, so memory is the floor): ``append`` of a 100-entry batch and ``load`` of a
2,000-entry transcript, and the database's bytes per stored entry.

    python -m tests.integrations.claude_bench [--postgres URL] [--rounds N]

Entries repeat the realistic transcript of ``claude_transcript`` (one line per content block,
thinking, tool calls and results, system lines) with fresh uuids. Prints one row per store:
median ``append`` and ``load`` in ms (wall clock / process CPU), and for SQL stores the bytes
per entry (SQLite: the ``VACUUM``ed file; PostgreSQL: the schema's tables, TOAST and indexes)
beside the JSONL bytes of the entries themselves. Public API only; SQL only to measure sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from claude_agent_sdk import InMemorySessionStore, SessionKey, SessionStore
from sqlalchemy import create_engine, text

from session_sql.integrations.claude_agent_sdk import SessionSQLSessionStore

from .claude_transcript import main_entries

BATCH = 100
TRANSCRIPT = 2000


def entries(count: int) -> list[dict[str, Any]]:
    """``count`` realistic entries: the sample transcript repeated, each line a fresh uuid."""
    sample = [e for e in main_entries() if "uuid" in e]
    out: list[dict[str, Any]] = []
    while len(out) < count:
        for entry in sample:
            copy = json.loads(json.dumps(entry))
            copy["uuid"] = str(uuid.uuid4())
            out.append(copy)
    return out[:count]


async def measure(store: SessionStore, rounds: int) -> tuple[str, str]:
    """Median ms of ``append`` (100 entries, onto a growing transcript) and of ``load``
    (2,000 entries), wall clock / process CPU (worker threads included)."""
    key: SessionKey = {"project_key": "bench", "session_id": str(uuid.uuid4())}
    await store.append(key, entries(BATCH))  # the session exists: later appends continue it
    appends = []
    for _ in range(rounds):
        batch = entries(BATCH)
        start, cpu = time.perf_counter(), time.process_time()
        await store.append(key, batch)
        appends.append((time.perf_counter() - start, time.process_time() - cpu))
    full: SessionKey = {"project_key": "bench", "session_id": str(uuid.uuid4())}
    for i in range(0, TRANSCRIPT, 500):
        await store.append(full, entries(500))
        del i
    loads = []
    for _ in range(rounds):
        start, cpu = time.perf_counter(), time.process_time()
        loaded = await store.load(full)
        loads.append((time.perf_counter() - start, time.process_time() - cpu))
        assert loaded is not None and len(loaded) == TRANSCRIPT
    return _medians(appends), _medians(loads)


def _medians(times: list[tuple[float, float]]) -> str:
    wall = statistics.median(t[0] for t in times) * 1000
    cpu = statistics.median(t[1] for t in times) * 1000
    return f"{wall:.2f} / {cpu:.2f} ms"


async def stored_bytes(url: str, schema: str, count: int) -> tuple[int, int]:
    """Database bytes of ``count`` entries in one transcript, and their JSONL bytes."""
    batch = entries(count)
    raw = sum(len(json.dumps(e)) + 1 for e in batch)
    key: SessionKey = {"project_key": "size", "session_id": str(uuid.uuid4())}
    async with SessionSQLSessionStore.from_url(url, schema=schema) as store:
        for i in range(0, count, 500):
            await store.append(key, batch[i : i + 500])
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute("VACUUM")
        return Path(path).stat().st_size, raw
    engine = create_engine(url)
    with engine.connect() as conn:
        size = conn.execute(
            text(
                "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relkind = 'r'"
            ),
            {"s": schema},
        ).scalar_one()
    engine.dispose()
    return int(size), raw


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (a new schema)")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    columns = ["append(100) p50, wall / CPU", "load(2,000) p50, wall / CPU", "bytes per entry"]
    print(f"| store | {' | '.join(columns)} (JSONL) |")
    print("|---|---|---|---|")
    append, load = await measure(InMemorySessionStore(), args.rounds)
    print(f"| InMemorySessionStore | {append} | {load} | |")
    with tempfile.TemporaryDirectory() as tmp:
        places = [("SQLite", f"sqlite:///{tmp}/bench.db", "session_sql")]
        if args.postgres:
            places.append(("PostgreSQL", args.postgres, f"bench_{uuid.uuid4().hex[:8]}"))
        for name, url, schema in places:
            async with SessionSQLSessionStore.from_url(url, schema=schema) as store:
                append, load = await measure(store, args.rounds)
            # The bytes on a store of their own (a new file, a new schema).
            size_url = f"sqlite:///{tmp}/size.db" if name == "SQLite" else url
            size, raw = await stored_bytes(size_url, f"{schema}_size", TRANSCRIPT)
            per, per_raw = size / TRANSCRIPT, raw / TRANSCRIPT
            print(
                f"| SessionSQLSessionStore, {name} | {append} | {load} "
                f"| {per:,.0f} ({per_raw:,.0f}) |"
            )
            if name == "PostgreSQL":
                engine = create_engine(url)
                with engine.begin() as conn:
                    for dropped in (schema, f"{schema}_size"):
                        conn.execute(text(f'DROP SCHEMA "{dropped}" CASCADE'))
                engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
