"""Time filtered ``list_sessions`` pages on a store holding a million sessions.

    python scripts/bench_list_sessions.py --url postgresql://postgres@127.0.0.1/test
    python scripts/bench_list_sessions.py --url sqlite:////tmp/list_bench.db --sessions 1000000

The sessions are written by the database itself from one real session row (ids, users,
update times and labels varied; 1,000 users, two tenants), then ANALYZE runs. Each page is read
--repeat times through the store's API; the median is printed in milliseconds. The target is
``list_sessions(user_id=..., limit=50)`` within 5 ms on PostgreSQL. The PostgreSQL schema or the
SQLite file is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from session_sql import SessionStore, open_store  # noqa: E402
from session_sql.schema import tables_for  # noqa: E402

USERS = 1_000
TEMPLATE_ID = "template"


def _fill(store: SessionStore, sessions: int, schema: str | None) -> None:
    """Copy the template session row ``sessions`` times, in the database, in chunks."""
    postgres = schema is not None
    tables = tables_for(schema)
    names = [c.name for c in tables.sessions.columns]
    varied = {
        "tenant": "CASE WHEN n % 10 = 0 THEN 'other' ELSE '' END",
        "id": "'s' || CAST(n AS TEXT)",
        "user_id": "'user' || CAST(n % :users AS TEXT)",
        "updated_at": "1700000000000 + n",
        "created_at": "1700000000000 + n",
        "incarnation": "'i' || CAST(n AS TEXT)",
        "title": "'Session ' || CAST(n AS TEXT)",
        "labels": (
            'CAST(\'{"team": "t\' || CAST(n % 50 AS TEXT) || \'", "tier": "\' || '
            "CASE WHEN n % 997 = 0 THEN 'gold' ELSE 'basic' END || '\"}' AS JSONB)"
            if postgres
            else '\'{"team": "t\' || CAST(n % 50 AS TEXT) || \'", "tier": "\' || '
            "CASE WHEN n % 997 = 0 THEN 'gold' ELSE 'basic' END || '\"}'"
        ),
    }
    columns = ", ".join(f'"{name}"' for name in names)
    values = ", ".join(varied.get(name, f'"{name}"') for name in names)
    chunk = 100_000
    for start in range(0, sessions, chunk):
        stop = min(start + chunk, sessions)
        numbers = (
            "SELECT generate_series(:start, :stop - 1) AS n"
            if postgres
            else "WITH RECURSIVE c(n) AS (SELECT :start UNION ALL SELECT n + 1 FROM c "
            "WHERE n + 1 < :stop) SELECT n FROM c"
        )
        sql = (
            f"INSERT INTO sessions ({columns}) SELECT {values} FROM ({numbers}) AS g, "
            "sessions AS t WHERE t.tenant = '' AND t.id = :template"
        )
        with store.engine.begin() as conn:
            if postgres:
                conn.execute(text("SELECT set_config('session_sql.tenant', '', true)"))
                conn.exec_driver_sql(f'SET LOCAL search_path TO "{schema}"')
            conn.execute(
                text(sql),
                {"start": start, "stop": stop, "users": USERS, "template": TEMPLATE_ID},
            )
    with store.engine.begin() as conn:  # ANALYZE, as docs/sql.md says after a bulk load
        preparer = conn.dialect.identifier_preparer
        analyzed = [
            preparer.format_table(t) for t in (tables.sessions, tables.events, tables.surface)
        ]
        if postgres:
            conn.exec_driver_sql("ANALYZE " + ", ".join(analyzed))
        else:
            conn.exec_driver_sql("PRAGMA analysis_limit = 1000")
            for name in analyzed:
                conn.exec_driver_sql("ANALYZE " + name)


def _median_ms(call: Callable[[], Any], repeat: int) -> tuple[float, int]:
    runs = []
    rows = 0
    for _ in range(repeat):
        start = time.perf_counter()
        rows = len(call())
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--schema", default="list_sessions_bench")
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--keep", action="store_true", help="keep the filled schema or file")
    args = parser.parse_args()
    postgres = args.url.startswith("postgresql")
    options: dict[str, Any] = {"schema": args.schema} if postgres else {}
    store = open_store(args.url, **options)
    try:
        store.create_session(TEMPLATE_ID)
        print(f"filling {args.sessions:,} sessions ...", file=sys.stderr)
        started = time.perf_counter()
        _fill(store, args.sessions, args.schema if postgres else None)
        print(f"filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        cursor = store.list_sessions(user_id="user417", limit=100)[-1]  # page 3 starts after it
        cases: dict[str, Callable[[], Any]] = {
            "list_sessions(limit=50)": lambda: store.list_sessions(limit=50),
            "list_sessions(user_id=..., limit=50)": lambda: store.list_sessions(
                user_id="user417", limit=50
            ),
            "list_sessions(user_id=..., limit=50), page 3": lambda: store.list_sessions(
                user_id="user417", limit=50, after=cursor
            ),
            "list_sessions(labels={team}, limit=50)": lambda: store.list_sessions(
                labels={"team": "t7"}, limit=50
            ),
            "list_sessions(labels={tier: gold}, limit=50) (0.1%)": lambda: store.list_sessions(
                labels={"tier": "gold"}, limit=50
            ),
        }
        print(f"{'call':<55} {'median ms':>10} {'rows':>5}")
        for name, call in cases.items():
            call()  # warm: statement cache, pool
            ms, rows = _median_ms(call, args.repeat)
            print(f"{name:<55} {ms:>10.2f} {rows:>5}")
    finally:
        store.close()
        if args.keep:
            pass
        elif postgres:
            engine = create_engine(args.url.replace("postgresql:", "postgresql+psycopg:", 1))
            with engine.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{args.schema}" CASCADE')
            engine.dispose()
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(args.url.split("///", 1)[1] + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
