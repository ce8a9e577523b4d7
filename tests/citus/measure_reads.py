"""How the store's one-session reads may be sent through a Citus coordinator, each form timed.

Starts a throwaway coordinator and two workers (``fsync`` on, as ``bench_citus.py`` does),
creates a store on it (``distributed=True``) and one on the plain PostgreSQL of ``--url``,
writes eight sessions of 2,000 events with a 200-node surface on each (W13's), and times,
call by call, medians in ms, the store's own compiled statements sent through the driver on
one connection in autocommit (the store's Python left out):

* ``tail``: the tail read (``Statements.surface_tail``, last 20) as the store sends it;
* ``tail, delegated function``: the same inside a PL/pgSQL function distributed by the
  session's key and co-located with ``sessions``, each row returned as a ``text[]`` (Citus
  delegates only ``SELECT f(...)``, whose set-returning result is one column);
* ``open, three statements``: ``open_session``'s reads by id before (the session row, the
  surface with its events, the head) in one transaction;
* ``open, one statement``: ``Statements.opening``, what ``open_session`` sends by a kept key;
* ``open, delegated function``: the three reads inside one delegated function;
* ``tail, on the worker`` and ``open, one statement, on the worker``: the same statements
  sent to the worker that holds the session's shard, over a connection of its own (Citus
  13 keeps its metadata on every node, so a worker plans a query on a distributed table
  itself and runs it on its local shard without another connection); on the plain side,
  the plain server again.

Inside a delegated function every statement still goes through Citus on the worker (planned
there as a distributed query and run on the local shard), so a function saves the round trips
of the coordinator, not the planning. Sent straight to the worker, a statement skips the
coordinator's hop but not Citus's planning on the worker, and Citus refuses a generic plan for
the join of the tail read ("could not create distributed plan"), so it is planned per call.

    python -m tests.citus.measure_reads [--url postgresql://postgres@127.0.0.1:5432/test]

It lives with the tests, not in ``scripts/``: it times the store's own statements, which only
the tests may reach (``tests/test_boundary.py``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import Text, cast, select
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

from session_sql import open_store
from session_sql._store.context import Compiled
from session_sql.cli._bench_reads import _big_session
from tests.citus.cluster import citus_missing, start_cluster

SESSIONS = 8
FORMS = (
    "tail",
    "tail, delegated function",
    "open, three statements",
    "open, one statement",
    "open, delegated function",
    "tail, on the worker",
    "open, one statement, on the worker",
)
TYPES = {"b_tenant": "text"}
"""The functions' parameter types by name (the rest are keys, positions, seqs, limits)."""


def _as_text_rows(stmt: Any) -> Any:
    sub = stmt.subquery()
    return select(array([cast(c, Text) for c in sub.c]))


def _numbered(sql: str, names: list[str]) -> str:
    """``sql``'s ``%(name)s`` placeholders as ``$n``, ``n`` the name's place in ``names``,
    without casts (Citus refuses a cast parameter inside a delegated function)."""

    def number(match: re.Match[str]) -> str:
        return "$" + str(names.index(match[1]) + 1)

    return re.sub(r"%\((\w+)\)s(?:::\w+)?", number, sql)


def _function(
    conn: psycopg.Connection, name: str, parts: list[Any], distributed: bool
) -> tuple[str, list[str]]:
    """A PL/pgSQL function returning the rows of ``parts`` (each a Core select) as ``text[]``,
    its parameters the parts' by name with ``b_key`` first; its call and parameter names."""
    dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
    names = ["b_key"]
    body = []
    for part in parts:
        compiled = _as_text_rows(part).compile(dialect=dialect)
        order = re.findall(r"%\((\w+)\)s", compiled.string)
        names += [n for n in order if n not in names]
        body.append(f"RETURN QUERY {_numbered(compiled.string, names)};")
    signature = f"{name}({', '.join(TYPES.get(n, 'bigint') for n in names)})"
    conn.execute(
        f"CREATE FUNCTION {signature} RETURNS SETOF text[] LANGUAGE plpgsql STABLE AS "
        f"$f$ BEGIN {' '.join(body)} END $f$"
    )
    if distributed:
        schema = name.split(".", maxsplit=1)[0]
        conn.execute(
            "SELECT create_distributed_function(%s, '$1', colocate_with => %s)",
            (signature, f"{schema}.sessions"),
        )
    return f"SELECT {name}({', '.join(['%s'] * len(names))})", names


def _holders(
    conn: psycopg.Connection, schema: str, keys: list[int]
) -> dict[int, psycopg.Connection]:
    """A connection (autocommit) to the worker holding each key's shard of ``sessions``."""
    nodes: dict[tuple[str, int], psycopg.Connection] = {}
    holders = {}
    for key in keys:
        row = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_shard_placement WHERE shardid = "
            "get_shard_id_for_distribution_column(%s, %s)",
            (f"{schema}.sessions", key),
        ).fetchone()
        assert row is not None
        host, port = row
        if (host, port) not in nodes:
            url = f"postgresql://postgres@{host}:{port}/postgres"
            nodes[host, port] = psycopg.connect(url, autocommit=True)
        holders[key] = nodes[host, port]
    return holders


def _side(url: str, schema: str, distributed: bool) -> dict[str, Callable[[int], int]]:
    """The forms' calls on a store created in ``schema`` at ``url``, by call number."""
    store = open_store(url, schema=schema, distributed=distributed, create=True)
    ids = [_big_session(store, 2000, 200) for _ in range(SESSIONS)]
    for session_id in ids:
        store.open_session(session_id)
    ctx = store._ctx
    keys = [ctx.keys[i] for i in ids]
    st, compiled = ctx.statements, ctx.compiled
    store.close()
    conn = psycopg.connect(url.replace("+psycopg", ""), autocommit=True)
    tenant = {"b_tenant": ""}
    ends = {"b_after": 1998, "b_to": 2**62, "b_limit": 2}
    tail_values = {"b_before": 2**62, "b_limit": 20}
    tail_call, tail_names = _function(conn, f"{schema}.tail", [st.surface_tail], distributed)
    open_parts = [st.session_row, st.surface_events, st.events_page]
    open_call, open_names = _function(conn, f"{schema}.open", open_parts, distributed)
    defaults = {
        "param_1": 1,
        **compiled.surface_tail.defaults,
        **compiled.surface_events.defaults,
    }

    holders = _holders(conn, schema, keys) if distributed else dict.fromkeys(keys, conn)

    def run(sql: str, params: Any, on: psycopg.Connection = conn) -> int:
        return len(on.execute(sql, params).fetchall())

    def bound(c: Any, key: int, values: dict[str, Any]) -> Any:
        return c.bind({**c.defaults, **tenant, "b_key": key, **values})

    def tail(i: int) -> int:
        return run(compiled.surface_tail.sql, bound(compiled.surface_tail, keys[i], tail_values))

    def call(sql: str, names: list[str], key: int, values: dict[str, Any]) -> int:
        given = {**defaults, **tenant, "b_key": key, **values}
        return run(sql, [given[n] for n in names])

    row = Compiled(st.session_row, PGDialect_psycopg())  # type: ignore[no-untyped-call]

    def three(i: int) -> int:
        with conn.transaction():
            k = keys[i]
            n = run(row.sql, bound(row, k, {}))
            n += run(compiled.surface_events.sql, bound(compiled.surface_events, k, {}))
            return n + run(compiled.events_page.sql, bound(compiled.events_page, k, ends))

    def one(i: int, on: psycopg.Connection = conn) -> int:
        return run(compiled.opening.sql, bound(compiled.opening, keys[i], {}), on)

    def tail_there(i: int) -> int:
        c, k = compiled.surface_tail, keys[i]
        return run(c.sql, bound(c, k, tail_values), holders[k])

    return {
        "tail": tail,
        "tail, delegated function": lambda i: call(tail_call, tail_names, keys[i], tail_values),
        "open, three statements": three,
        "open, one statement": one,
        "open, delegated function": lambda i: call(open_call, open_names, keys[i], ends),
        "tail, on the worker": tail_there,
        "open, one statement, on the worker": lambda i: one(i, holders[keys[i]]),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)
    missing = citus_missing()
    if missing is not None:
        sys.stderr.write(f"measure_reads: {missing}\n")
        return 1
    cluster = start_cluster(workers=2, durable=True)
    schema = "measure_citus_reads"
    plain_url = args.url if "+psycopg" in args.url else args.url.replace("://", "+psycopg://", 1)
    try:
        sides = {
            "plain": _side(plain_url, schema, distributed=False),
            "citus": _side(cluster.url, schema, distributed=True),
        }
        times: dict[tuple[str, str], list[float]] = {}
        for i in range(args.calls):
            for form in FORMS:
                for side, calls in sides.items():
                    t0 = time.perf_counter()
                    calls[form](i % SESSIONS)
                    times.setdefault((form, side), []).append(time.perf_counter() - t0)
        print("| form | plain ms | Citus ms | Citus / plain |")
        print("|---|---:|---:|---:|")
        for form in FORMS:
            plain = statistics.median(times[form, "plain"][10:]) * 1000
            citus = statistics.median(times[form, "citus"][10:]) * 1000
            print(f"| {form} | {plain:.3f} | {citus:.3f} | {citus / plain:.2f}× |")
    finally:
        with psycopg.connect(plain_url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
