"""Per-call latency of the OpenAI Agents SDK Session protocol: SessionSQLSession vs the SDK's own.

    python scripts/bench_openai_agents.py [--pg URL] [--items 2000] [--calls 200] [--runs 3]

Each run fills one 2,000-item session per implementation (a mix of user messages, function
calls, their outputs and assistant messages), then times, call by call and interleaved,
``add_items`` with 2 items and ``get_items(limit=10)``:

* SQLite: ``SessionSQLSession`` (sqlite:/// file, the store's defaults) vs ``SQLiteSession``
  (a file); both WAL with synchronous FULL.
* PostgreSQL: ``SessionSQLSession`` vs ``SQLAlchemySession`` on ``postgresql+psycopg://``
  (psycopg's async driver under SQLAlchemy's asyncio engine).

It prints the median per-call latency (wall clock) of each and the ratios (ours / theirs), the
median over ``--runs`` runs, and the same for the process CPU time per call (worker threads
included), which a loaded machine disturbs less. Every run uses fresh files, a fresh schema and
fresh tables, dropped after.
``--no-pre-ping`` opens the PostgreSQL store without the pool's liveness ping (the store's
default pings each connection it checks out: one round trip more per call).
Needs ``session-sql[openai-agents]``; PostgreSQL is skipped when ``--pg`` is ``""``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents.extensions.memory import SQLAlchemySession
from agents.memory import SQLiteSession
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from session_sql.integrations.openai_agents import SessionSQLSession

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TARGETS = {
    ("sqlite", "get_items(limit=10)"): ("<=", 1.5),
    ("sqlite", "add_items(2)"): ("<=", 1.2),
    ("postgresql", "add_items(2)"): ("<=", 0.5),
}


def item(n: int) -> dict[str, Any]:
    """The n-th item of an agent's history: user, call, output, answer, over and over."""
    kind = n % 4
    if kind == 0:
        return {"role": "user", "content": f"question {n}: what is the weather in city {n}?"}
    if kind == 1:
        return {
            "id": f"fc_{n}",
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "get_weather",
            "arguments": f'{{"city": "city {n}"}}',
        }
    if kind == 2:
        return {"type": "function_call_output", "call_id": f"call_{n - 1}", "output": "sunny"}
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": f"It is sunny ({n}).", "annotations": []}],
    }


async def fill(session: Any, count: int) -> None:
    for start in range(0, count, 100):
        await session.add_items([item(n) for n in range(start, min(start + 100, count))])


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (the whole process: worker threads count too) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    await call()
    return time.perf_counter() - start, time.process_time() - cpu


Result = dict[str, dict[str, tuple[float, float]]]


async def measure(sessions: dict[str, Any], items: int, calls: int) -> Result:
    """Median (wall, CPU) seconds per call, by operation and implementation (interleaved)."""
    for session in sessions.values():
        await fill(session, items)
        await session.get_items(limit=10)  # warm: the write handle and caches are open
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        "add_items(2)": {name: [] for name in sessions},
        "get_items(limit=10)": {name: [] for name in sessions},
    }
    for i in range(calls):
        n = items + 2 * i
        for name, session in sessions.items():
            pair = [item(n), item(n + 1)]
            add = await timed(lambda s=session, p=pair: s.add_items(p))
            samples["add_items(2)"][name].append(add)
        for name, session in sessions.items():
            got = await timed(lambda s=session: s.get_items(limit=10))
            samples["get_items(limit=10)"][name].append(got)
    for session in sessions.values():
        assert len(await session.get_items(limit=10)) == 10
    return {
        op: {
            name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
            for name, v in by.items()
        }
        for op, by in samples.items()
    }


async def sqlite_run(items: int, calls: int) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        ours = SessionSQLSession.from_url("bench", f"sqlite:///{Path(tmp) / 'ours.db'}")
        theirs = SQLiteSession("bench", Path(tmp) / "sdk.db")
        try:
            return await measure({"ours": ours, "theirs": theirs}, items, calls)
        finally:
            await ours.close()
            theirs.close()


async def postgres_run(url: str, items: int, calls: int, pre_ping: bool = True) -> Result:
    tag = uuid.uuid4().hex[:12]
    schema, sessions_table, messages_table = f"bench_oa_{tag}", f"oa_s_{tag}", f"oa_m_{tag}"
    ours = SessionSQLSession.from_url(
        "bench", url, schema=schema, pool_size=2, pool_pre_ping=pre_ping
    )
    engine = create_async_engine(url, pool_size=2, max_overflow=0)
    theirs = SQLAlchemySession(
        "bench",
        engine=engine,
        create_tables=True,
        sessions_table=sessions_table,
        messages_table=messages_table,
    )
    try:
        return await measure({"ours": ours, "theirs": theirs}, items, calls)
    finally:
        await ours.close()
        await engine.dispose()
        admin = create_engine(url)
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            conn.execute(text(f'DROP TABLE IF EXISTS "{messages_table}", "{sessions_table}"'))
        admin.dispose()


def report(backend: str, runs: list[Result]) -> None:
    theirs = "SQLiteSession" if backend == "sqlite" else "SQLAlchemySession"
    print(f"\n{backend}: SessionSQLSession vs {theirs}, median of {len(runs)} runs")
    print(
        f"  {'operation':<21}{'ours µs':>9}{'theirs µs':>11}{'ratio':>7}"
        f"{'ours cpu':>10}{'theirs cpu':>11}{'ratio':>7}  target (wall)"
    )
    for op in runs[0]:
        cols = []
        for k in (0, 1):  # wall, CPU
            ours = statistics.median(r[op]["ours"][k] for r in runs) * 1e6
            other = statistics.median(r[op]["theirs"][k] for r in runs) * 1e6
            ratio = statistics.median(r[op]["ours"][k] / r[op]["theirs"][k] for r in runs)
            cols.append((ours, other, ratio))
        target = TARGETS.get((backend, op))
        verdict = ""
        if target is not None:
            ok = cols[0][2] <= target[1]
            verdict = f"{target[0]} {target[1]:.2f}x {'met' if ok else 'MISSED'}"
        (w_ours, w_other, w_ratio), (c_ours, c_other, c_ratio) = cols
        print(
            f"  {op:<21}{w_ours:>9.0f}{w_other:>11.0f}{w_ratio:>6.2f}x"
            f"{c_ours:>10.0f}{c_other:>11.0f}{c_ratio:>6.2f}x  {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=PG_URL, help='PostgreSQL URL ("" to skip)')
    parser.add_argument("--items", type=int, default=2000, help="items in the session first")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per operation")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["sqlite", "postgresql"], default=None)
    parser.add_argument(
        "--no-pre-ping",
        action="store_true",
        help="open the PostgreSQL store with pool_pre_ping=False (one round trip less a call)",
    )
    args = parser.parse_args()
    if args.only != "postgresql":
        report(
            "sqlite", [asyncio.run(sqlite_run(args.items, args.calls)) for _ in range(args.runs)]
        )
    if args.pg and args.only != "sqlite":
        pre_ping = not args.no_pre_ping
        runs = [
            asyncio.run(postgres_run(args.pg, args.items, args.calls, pre_ping))
            for _ in range(args.runs)
        ]
        report("postgresql", runs)


if __name__ == "__main__":
    main()
