"""How a one-session write and read may be sent through a Citus coordinator, each form timed.

Starts a throwaway coordinator and two workers (``fsync`` on, as ``bench_citus.py`` does),
creates a two-table toy of the store's layout (a session row with a head, its events, both
distributed by the session's key and co-located) there and on the plain PostgreSQL of
``--url``, and times, call by call alternately, medians in ms:

* ``statements``: the append as the store sends it on one server: one query of
  ``BEGIN; <guarded head update>; INSERT ...; COMMIT``. Citus sends each statement, and the
  ``BEGIN`` and ``COMMIT``, to the worker as a round trip of its own;
* ``modifying CTE``: the same as one statement (``WITH adv AS (UPDATE ...), ins AS (INSERT
  ...) SELECT 1/count(*) FROM adv``). Citus does not route a CTE that modifies two tables as
  one task: it runs each part as a task of its own and the rest over an intermediate result;
* ``delegated function``: the same in a PL/pgSQL function distributed by the key
  (``create_distributed_function``), called in autocommit: Citus sends the call to the worker
  that holds the key, which runs it and commits there, one round trip;
* ``tail select``: the last 20 events by key, one table (Citus's fast path);
* ``tail function``: the same read inside a delegated function.

    python scripts/measure_citus_forms.py [--url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.citus.cluster import citus_missing, start_cluster  # noqa: E402

SCHEMA = "measure_citus_forms"
DATA = '{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"The quick brown fox"}}'
KEYS = 8
UPDATE = f"UPDATE {SCHEMA}.s SET head = %s WHERE k = %s AND head = %s RETURNING head"
FORMS = {
    "statements": f"BEGIN; WITH adv AS ({UPDATE}) SELECT 1 / count(*) FROM adv;"
    f" INSERT INTO {SCHEMA}.e VALUES (%s, %s, %s); COMMIT",
    "modifying CTE": f"WITH adv AS ({UPDATE}), ins AS (INSERT INTO {SCHEMA}.e"
    " VALUES (%s, %s, %s)) SELECT 1 / count(*) FROM adv",
    "delegated function": f"SELECT {SCHEMA}.append(%s, %s, %s, %s, %s, %s)",
}
READS = {
    "tail select": f"SELECT data::text FROM {SCHEMA}.e WHERE k = %s ORDER BY seq DESC LIMIT 20",
    "tail function": f"SELECT {SCHEMA}.tail(%s)",
}


def _create(conn: psycopg.Connection, distributed: bool) -> None:
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    conn.execute(f"CREATE TABLE {SCHEMA}.s (k bigint PRIMARY KEY, head bigint NOT NULL)")
    conn.execute(f"CREATE TABLE {SCHEMA}.e (k bigint, seq bigint, data json, PRIMARY KEY (k, seq))")
    conn.execute(
        f"CREATE FUNCTION {SCHEMA}.append(k bigint, head bigint, key bigint, was bigint,"
        " seq bigint, data json) RETURNS int LANGUAGE plpgsql AS $$ BEGIN"
        f" UPDATE {SCHEMA}.s SET head = append.head WHERE s.k = append.k AND s.head = was;"
        " IF NOT FOUND THEN RAISE division_by_zero; END IF;"
        f" INSERT INTO {SCHEMA}.e VALUES (key, seq, data); RETURN 1; END $$"
    )
    conn.execute(
        f"CREATE FUNCTION {SCHEMA}.tail(k bigint) RETURNS SETOF text LANGUAGE plpgsql AS $$"
        f" BEGIN RETURN QUERY SELECT data::text FROM {SCHEMA}.e WHERE e.k = tail.k"
        " ORDER BY seq DESC LIMIT 20; END $$"
    )
    if distributed:
        conn.execute(f"SELECT create_distributed_table('{SCHEMA}.s', 'k')")
        conn.execute(
            f"SELECT create_distributed_table('{SCHEMA}.e', 'k', colocate_with => '{SCHEMA}.s')"
        )
        for fn in ("append(bigint,bigint,bigint,bigint,bigint,json)", "tail(bigint)"):
            conn.execute(
                f"SELECT create_distributed_function('{SCHEMA}.{fn}', 'k',"
                f" colocate_with => '{SCHEMA}.s')"
            )
    conn.execute(f"INSERT INTO {SCHEMA}.s SELECT g, 0 FROM generate_series(1, {KEYS}) g")


def _timed(conn: psycopg.Connection, query: bytes) -> float:
    t0 = time.perf_counter()
    cur = conn.execute(query)
    if cur.description is not None:
        cur.fetchall()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)
    missing = citus_missing()
    if missing is not None:
        sys.stderr.write(f"measure_citus_forms: {missing}\n")
        return 1
    cluster = start_cluster(workers=2, durable=True)
    try:
        urls = {"plain": args.url, "citus": cluster.url.replace("+psycopg", "")}
        conns = {side: psycopg.connect(url, autocommit=True) for side, url in urls.items()}
        for side, conn in conns.items():
            _create(conn, distributed=side == "citus")
        heads = {side: dict.fromkeys(range(1, KEYS + 1), 0) for side in conns}
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.calls):
            k = i % KEYS + 1
            for form, sql in FORMS.items():
                for side, conn in conns.items():
                    h = heads[side][k]
                    if form == "delegated function":
                        values: tuple[object, ...] = (k, h + 1, k, h, h + 1, DATA)
                    else:
                        values = (h + 1, k, h, k, h + 1, DATA)
                    query = psycopg.ClientCursor(conn).mogrify(sql, values).encode()
                    times.setdefault((form, side), []).append(_timed(conn, query))
                    heads[side][k] = h + 1
            for form, sql in READS.items():
                for side, conn in conns.items():
                    query = psycopg.ClientCursor(conn).mogrify(sql, (k,)).encode()
                    times.setdefault((form, side), []).append(_timed(conn, query))
        print("| form | plain ms | Citus ms | Citus / plain |")
        print("|---|---:|---:|---:|")
        for form in [*FORMS, *READS]:
            plain = statistics.median(times[form, "plain"]) * 1000
            citus = statistics.median(times[form, "citus"]) * 1000
            print(f"| {form} | {plain:.3f} | {citus:.3f} | {citus / plain:.2f}× |")
        for conn in conns.values():
            conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
            conn.close()
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
