"""Bytes and latency of a LangGraph chat thread: session_sql's async saver against LangGraph's.

``python -m tests.integrations.lg_bench [--steps 200] [--url-pg URL]`` runs a one-node
``MessagesState`` chat of ``--steps`` turns (a 20-word question, a 60-word answer of random
words, so that compression does not flatter anyone) through ``ainvoke`` with, in the same
run, ``AsyncSessionSQLSaver`` and ``AsyncSqliteSaver`` on fresh SQLite files and
``AsyncSessionSQLSaver`` and ``AsyncPostgresSaver`` in fresh PostgreSQL schemas (dropped
afterwards). It prints the median ``aput`` and ``aget_tuple`` as the graph calls them and the
database's bytes after the run (SQLite: the ``VACUUM``ed file; PostgreSQL: tables, TOAST and
indexes of the schema) per checkpoint. Needs langgraph-checkpoint-sqlite and
langgraph-checkpoint-postgres (``pip install -e '.[test,dev]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from sqlalchemy import create_engine, text

from session_sql.integrations.langgraph import AsyncSessionSQLSaver

_RNG = random.Random(7)
WORDS = [
    "".join(_RNG.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_RNG.randint(2, 9)))
    for _ in range(2000)
]


def words(seed: int, count: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def reply(state: MessagesState) -> dict[str, Any]:
    n = len(state["messages"])
    answer = AIMessage(
        f"answer {n}: " + words(n, 60),
        id=f"a{n}",
        usage_metadata={"input_tokens": 100, "output_tokens": 50, "total_tokens": 150},
        response_metadata={"model_name": "scripted"},
    )
    return {"messages": [answer]}


async def drive(saver: Any, steps: int) -> dict[str, float]:
    """The chat through ``saver``; the medians of its timed calls, in ms."""
    times: dict[str, list[float]] = {"aput": [], "aget_tuple": []}
    for name in times:
        method = getattr(saver, name)

        async def timed(*args: Any, _method: Any = method, _name: str = name, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return await _method(*args, **kw)
            finally:
                times[_name].append(time.perf_counter() - start)

        setattr(saver, name, timed)
    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    app = graph.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "chat"}}
    for i in range(steps):
        question = HumanMessage(f"question {i}: " + words(-i - 1, 20), id=f"h{i}")
        await app.ainvoke({"messages": [question]}, config)
    return {name: statistics.median(found) * 1000 for name, found in times.items()}


def sqlite_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("VACUUM")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def pg_bytes(url: str, schema: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text(
                    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = :s AND c.relkind IN ('r', 'm')"
                ),
                {"s": schema},
            ).scalar()
        return int(found or 0)
    finally:
        engine.dispose()


def pg_schema(url: str, schema: str, *, drop: bool) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if drop:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            else:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    finally:
        engine.dispose()


async def main(steps: int, pg_url: str | None) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    results: dict[str, dict[str, float]] = {}
    folder = Path(tempfile.mkdtemp())
    ours = folder / "ours.db"
    async with AsyncSessionSQLSaver.from_url(f"sqlite:///{ours}") as saver:
        results["AsyncSessionSQLSaver, SQLite"] = await drive(saver, steps)
    results["AsyncSessionSQLSaver, SQLite"]["bytes"] = sqlite_bytes(ours)
    theirs = folder / "theirs.db"
    async with AsyncSqliteSaver.from_conn_string(str(theirs)) as saver:
        results["AsyncSqliteSaver"] = await drive(saver, steps)
    results["AsyncSqliteSaver"]["bytes"] = sqlite_bytes(theirs)
    if pg_url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        schema = f"bench_lg_{uuid.uuid4().hex[:8]}"
        try:
            async with AsyncSessionSQLSaver.from_url(pg_url, schema=schema) as saver:
                results["AsyncSessionSQLSaver, PostgreSQL"] = await drive(saver, steps)
            results["AsyncSessionSQLSaver, PostgreSQL"]["bytes"] = pg_bytes(pg_url, schema)
        finally:
            pg_schema(pg_url, schema, drop=True)
        schema = f"bench_lgpg_{uuid.uuid4().hex[:8]}"
        pg_schema(pg_url, schema, drop=False)
        dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
        dsn += ("&" if "?" in dsn else "?") + f"options=-csearch_path%3D{schema}"
        try:
            async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
                await saver.setup()
                results["AsyncPostgresSaver"] = await drive(saver, steps)
            results["AsyncPostgresSaver"]["bytes"] = pg_bytes(pg_url, schema)
        finally:
            pg_schema(pg_url, schema, drop=True)
    checkpoints = 3 * steps  # input, __start__, reply
    for name, found in results.items():
        print(
            f"{name:34s} aput p50 {found['aput']:6.2f} ms   aget_tuple p50 "
            f"{found['aget_tuple']:6.2f} ms   {found['bytes'] / checkpoints / 1000:7.1f} KB "
            "per checkpoint"
        )


def bench_arguments(doc: str, count: str, default: int) -> argparse.ArgumentParser:
    """A bench's command line: how many rounds (``--<count>``) and ``--url-pg``."""
    parser = argparse.ArgumentParser(description=doc.split("\n", maxsplit=1)[0])
    parser.add_argument(f"--{count}", type=int, default=default)
    parser.add_argument(
        "--url-pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
        help="a PostgreSQL server to create (and drop) two schemas in; '' to skip",
    )
    return parser


if __name__ == "__main__":
    options = bench_arguments(__doc__, "steps", 200).parse_args()
    asyncio.run(main(options.steps, options.url_pg or None))
