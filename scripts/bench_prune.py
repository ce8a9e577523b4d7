"""Time a prune of 100k sessions, beside a writer appending, and the space it gives back.

    python scripts/bench_prune.py --url sqlite:////tmp/prune_bench.db
    python scripts/bench_prune.py --url postgresql://postgres@127.0.0.1/test --sessions 100000

The sessions are copied by the database itself from one real session (its row, its five
events and its surface rows; ids and update times varied). A writer thread appends to a
session of its own, through its own store, for --baseline seconds alone and then for the
whole prune; the append latencies of both periods are printed (p50, p99, max). The prune
deletes every copied session (``updated_before`` selects them, not the writer's). Sizes: the
SQLite file (and its WAL) before and after; PostgreSQL's tables with their indexes and TOAST
(``pg_total_relation_size``) before, right after, and after a plain ``VACUUM`` (what
autovacuum does on its own). The PostgreSQL schema or the SQLite file is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from session_sql import SessionStore, open_store  # noqa: E402
from session_sql.schema import tables_for  # noqa: E402

TEMPLATE_ID = "template"
TEXT = "a sentence of an ordinary chat message, repeated " * 4


def _message(i: int) -> dict[str, Any]:
    return {
        "id": f"m{i}",
        "role": "user",
        "content": [{"type": "text", "text": f"{i}: {TEXT}"}],
        "source": {"kind": "user"},
    }


def _sql(store: SessionStore, schema: str | None, sql: str, **params: Any) -> None:
    with store.engine.begin() as conn:
        if schema is not None:
            conn.execute(text("SELECT set_config('session_sql.tenant', '', true)"))
            conn.execute(text("SELECT set_config('session_sql.default_tenant', 'on', true)"))
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{schema}"')
        conn.execute(text(sql), params)


def _fill(store: SessionStore, sessions: int, schema: str | None) -> None:
    """Copy the template session ``sessions`` times, in the database, in chunks."""
    postgres = schema is not None
    tables = tables_for(schema)
    header = "CAST(header AS TEXT)" if postgres else "header"
    new_header = f"replace({header}, '\"{TEMPLATE_ID}\"', '\"c' || CAST(n AS TEXT) || '\"')"
    varied = {
        "id": "'c' || CAST(n AS TEXT)",
        "updated_at": "1700000000000 + n",
        "incarnation": "'i' || CAST(n AS TEXT)",
        "header": f"CAST({new_header} AS JSON)" if postgres else new_header,
    }
    names = [c.name for c in tables.sessions.columns if c.name != "session_key"]
    columns = ", ".join(f'"{name}"' for name in names)
    values = ", ".join(varied.get(name, f't."{name}"') for name in names)
    event_names = [c.name for c in tables.events.columns if c.name not in ("call_id",)]
    event_columns = ", ".join(f'"{name}"' for name in event_names)
    event_values = ", ".join(
        "s.session_key" if name == "session_key" else f'e."{name}"' for name in event_names
    )
    surface_values = "s.session_key, f.pos, f.event_seq, f.tenant"
    chunk = 20_000
    for start in range(0, sessions, chunk):
        stop = min(start + chunk, sessions)
        numbers = (
            "SELECT generate_series(:start, :stop - 1) AS n"
            if postgres
            else "WITH RECURSIVE c(n) AS (SELECT :start UNION ALL SELECT n + 1 FROM c "
            "WHERE n + 1 < :stop) SELECT n FROM c"
        )
        bounds = {"start": start, "stop": stop, "template": TEMPLATE_ID}
        _sql(
            store,
            schema,
            f"INSERT INTO sessions ({columns}) SELECT {values} FROM ({numbers}) AS g, "
            "sessions AS t WHERE t.tenant = '' AND t.id = :template",
            **bounds,
        )
        for target, names, picked, alias in (
            ("events", event_columns, event_values, "e"),
            ("surface", "session_key, pos, event_seq, tenant", surface_values, "f"),
        ):
            _sql(
                store,
                schema,
                f"INSERT INTO {target} ({names}) SELECT {picked} "
                f"FROM {target} AS {alias}, sessions AS s, sessions AS t "
                f"WHERE t.tenant = '' AND t.id = :template AND {alias}.session_key = "
                "t.session_key AND s.tenant = '' AND s.incarnation LIKE 'i%' AND "
                "s.updated_at >= 1700000000000 + :start AND s.updated_at < 1700000000000 + :stop",
                **bounds,
            )


def _sizes(store: SessionStore, schema: str | None, url: str) -> dict[str, int]:
    if schema is None:
        path = url.split("///", 1)[1]
        return {
            name: os.path.getsize(path + suffix) if os.path.exists(path + suffix) else 0
            for name, suffix in (("file", ""), ("wal", "-wal"))
        }
    out: dict[str, int] = {}
    with store.engine.connect() as conn:
        for table in ("sessions", "events", "surface"):
            query = text("SELECT pg_total_relation_size(CAST(:name AS regclass))")
            out[table] = int(conn.execute(query, {"name": f'"{schema}".{table}'}).scalar_one())
        conn.rollback()
    return out


class Writer(threading.Thread):
    """Appends to its own session as fast as it can, recording each append's latency."""

    def __init__(self, store: SessionStore) -> None:
        super().__init__(daemon=True)
        self.handle = store.create_session("writer")
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            started = time.perf_counter()
            self.handle.append("user/message", _message(i), surface_op="append")
            self.latencies.append((time.perf_counter() - started) * 1000)
            i += 1
            time.sleep(0.002)  # a busy agent, not a flood


def _summary(latencies: list[float]) -> str:
    if len(latencies) < 2:
        return "n/a"
    p99 = statistics.quantiles(latencies, n=100, method="inclusive")[98]
    return (
        f"{len(latencies)} appends, p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {p99:.1f} ms, max {max(latencies):.1f} ms"
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--schema", default="prune_bench")
    parser.add_argument("--baseline", type=float, default=5.0)
    args = parser.parse_args()
    postgres = args.url.startswith("postgresql")
    schema = args.schema if postgres else None
    options: dict[str, Any] = {"schema": args.schema} if postgres else {}
    store = open_store(args.url, **options)
    writing = open_store(args.url, **options)
    try:
        template = store.create_session(TEMPLATE_ID)
        for i in range(4):
            template.append("user/message", _message(i), surface_op="append")
        print(f"filling {args.sessions:,} sessions ...", file=sys.stderr)
        started = time.perf_counter()
        _fill(store, args.sessions, schema)
        print(f"filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        if postgres:
            _sql(store, schema, "ANALYZE sessions")
        else:
            with store.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                conn.commit()
        before = _sizes(store, schema, args.url)
        writer = Writer(writing)
        writer.start()
        time.sleep(args.baseline)
        baseline = list(writer.latencies)
        started = time.perf_counter()
        report = store.prune(updated_before=1_700_000_000_000 + args.sessions)
        elapsed = time.perf_counter() - started
        writer.stop.set()
        writer.join()
        during = writer.latencies[len(baseline) :]
        after = _sizes(store, schema, args.url)
        print(f"backend: {store.backend}, sessions pruned: {len(report.sessions):,}")
        print(f"events deleted: {report.events:,}, bytes of event data: {_mib(report.bytes)}")
        print(f"prune: {elapsed:.1f} s ({len(report.sessions) / elapsed:,.0f} sessions/s)")
        print(f"writer alone:        {_summary(baseline)}")
        print(f"writer during prune: {_summary(during)}")
        print("sizes before: " + ", ".join(f"{k} {_mib(v)}" for k, v in before.items()))
        print("sizes after:  " + ", ".join(f"{k} {_mib(v)}" for k, v in after.items()))
        if postgres:
            with store.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                for table in ("sessions", "events", "surface"):
                    conn.exec_driver_sql(f'VACUUM "{schema}".{table}')
            vacuumed = _sizes(store, schema, args.url)
            print("after VACUUM: " + ", ".join(f"{k} {_mib(v)}" for k, v in vacuumed.items()))
    finally:
        writing.close()
        store.close()
        if postgres:
            engine = create_engine(args.url.replace("postgresql:", "postgresql+psycopg:", 1))
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{args.schema}" CASCADE')
            engine.dispose()
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(args.url.split("///", 1)[1] + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
