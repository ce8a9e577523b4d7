"""Time stats, every docs/sql.md recipe and every analytics view on one large session.

    python scripts/bench_analytics.py --events 1000000 --url sqlite:////tmp/analytics.db
    python scripts/bench_analytics.py --events 1000000 \\
        --url postgresql://postgres@127.0.0.1/test --schema analytics_bench

The store is filled through its own bulk path: the session (tests/store/analytics_data.py:
16-event turns, one tool call each, a pruning every eighth turn, an error every tenth) is
written as JSONL and imported with ``import_jsonl``, which checks every line, folds the
surface and runs ANALYZE, as ``session-sql import`` does. A second, 512-event session sits
beside it, so a question about one session shows whether it reads only that session.

Each query runs --repeat times; the medians of its wall-clock and of this process's CPU time
are printed, in seconds, as a Markdown table with the machine's load average before and after
(on a shared machine the wall clock follows the load; SQLite's CPU time does not). Each view is
asked for every column of one session's rows (``SELECT COUNT(*), COUNT(col), ... WHERE
session_id = ...``); the recipes run as written. The
target is every figure under 5 s at a million events. The SQLite file or PostgreSQL schema is
dropped at the end unless --keep is given; with --keep, a later run with the same --url and
--schema reuses the store and skips the import.

``--fill appends`` grows the store as agents do instead: one ``append_many`` (one transaction)
per 16-event turn, with the planner statistics the store keeps by itself (on SQLite,
``_store.statistics``); ``--drop-statistics`` deletes SQLite's before the queries run, as a
store grown by appends had none before the store kept them (docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import Engine, create_engine  # noqa: E402

from session_sql import SessionNotFoundError, SessionStore, open_store  # noqa: E402
from session_sql.schema import views_for  # noqa: E402
from tests.docs.test_docs_sql import recipes  # noqa: E402
from tests.store.analytics_data import TURN, append_session, write_jsonl  # noqa: E402

BIG, SMALL = "bench", "bench-small"


def _median(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of this process (SQLite's work runs in it;
    PostgreSQL's runs in the server, so there it is the client's share only)."""
    walls, cpus = [], []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _query(engine: Engine, schema: str | None, sql: str, params: dict[str, str]) -> None:
    with engine.begin() as conn:
        if schema is not None:
            conn.exec_driver_sql(f'SET LOCAL search_path TO "{schema}"')
        if not params:
            conn.exec_driver_sql(sql).all()
        else:
            conn.exec_driver_sql(sql, params if schema is not None else (params["s"],)).all()


def _import(store: SessionStore, session_id: str, events: int) -> float:
    """Write the session's JSONL to a temporary file and import it; the import's seconds."""
    with tempfile.TemporaryDirectory(prefix="session-sql-analytics-") as workdir:
        path = os.path.join(workdir, "session.jsonl")
        write_jsonl(path, session_id, events)
        start = time.perf_counter()
        store.import_jsonl(path)
        return time.perf_counter() - start


def _append(store: SessionStore, session_id: str, events: int) -> float:
    """Grow the session one turn (one transaction) at a time; the seconds it took."""
    start = time.perf_counter()
    append_session(store, session_id, events)
    return time.perf_counter() - start


def _drop_statistics(engine: Engine) -> None:
    """Delete SQLite's planner statistics (a store grown by appends had none)."""
    with engine.begin() as conn:
        if conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").all():
            conn.exec_driver_sql("DROP TABLE sqlite_stat1")
            conn.exec_driver_sql("ANALYZE sqlite_master")


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--url", required=True)
    parser.add_argument("--schema", default="analytics_bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the store for a later run")
    parser.add_argument("--fill", choices=("import", "appends"), default="import")
    parser.add_argument("--drop-statistics", action="store_true", help="SQLite only")
    parser.add_argument("--skip", action="append", default=[], help="a query name to skip")
    args = parser.parse_args()
    url = args.url.replace("postgresql://", "postgresql+psycopg://", 1)
    sqlite = url.startswith("sqlite")
    schema = None if sqlite else args.schema
    events = args.events - args.events % TURN
    store = open_store(url, schema=args.schema, create=True)
    engine = store.engine  # the store's own: the queries run on its connections' settings
    dialect = engine.dialect.name
    try:
        try:
            store.head_seq(BIG)
            print(f"{dialect}: reusing the stored session {BIG!r}")
        except SessionNotFoundError:
            fill = _import if args.fill == "import" else _append
            seconds = fill(store, BIG, events)
            fill(store, SMALL, 32 * TURN)
            how = "imported" if args.fill == "import" else "appended, a turn per transaction,"
            print(
                f"{dialect}: {events:,} events {how} in {seconds:.1f} s "
                f"({events / seconds:,.0f} events/s, ANALYZE included)"
            )
        if args.drop_statistics and sqlite:
            store.close()  # (closing may refresh them: drop them after)
            store = open_store(url, schema=args.schema)
            engine = store.engine
            _drop_statistics(engine)
        print(f"before: {_load()}; medians of {args.repeat} runs, seconds")
        big = f"the {store.head_seq(BIG) + 1:,}-event session"
        small = f"the {store.head_seq(SMALL) + 1:,}-event session"
        results: dict[str, tuple[float, float]] = {
            "stats (whole store)": _median(store.stats, args.repeat),
            f"stats ({big})": _median(lambda: store.stats(BIG), args.repeat),
            f"stats ({small})": _median(lambda: store.stats(SMALL), args.repeat),
        }
        for view in views_for():
            # Every column of every row of the session, aggregated into one row: the database
            # computes them all (a view's subqueries run only for the columns asked for) and
            # the figure is its work, not the client's building of 62,500 rows.
            columns = ", ".join("COUNT(" + c + ")" for c in view.columns[2:])
            sql = "SELECT COUNT(*), " + columns + " FROM " + view.name + " WHERE session_id = "
            sql += "?" if sqlite else "%(s)s"
            for label, sid in ((big, BIG), (small, SMALL)):
                results[f"view {view.name} ({label})"] = _median(
                    lambda sql=sql, sid=sid: _query(engine, schema, sql, {"s": sid}),
                    args.repeat,
                )
        for name, recipe_dialect, sql in recipes():
            if recipe_dialect in (None, dialect) and name not in args.skip:
                results[f"recipe {name}"] = _median(
                    lambda sql=sql: _query(engine, schema, sql, {}), args.repeat
                )
        print(f"after: {_load()}\n")
        print(f"| query | {dialect} wall | CPU (this process) |\n|---|---:|---:|")
        for name, (wall, cpu) in results.items():
            flag = "" if wall < 5 else " (over 5 s)"
            print(f"| {name} | {wall:.2f}{flag} | {cpu:.2f} |")
    finally:
        store.close()
        if args.keep:
            pass
        elif sqlite:
            path = Path(url.removeprefix("sqlite:///"))
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        else:
            admin = create_engine(url)
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
            admin.dispose()


if __name__ == "__main__":
    main()
