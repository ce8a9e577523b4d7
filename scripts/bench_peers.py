"""session_sql beside the stores people use instead, through the same workloads, in one run.

    python scripts/bench_peers.py [--pg URL] [--runs 3] [--batch 5000] [--singles 500]
        [--rows singles,batch,load,last20,open]

Each implementation stores the OpenAI Agents SDK's items (a user message, a function call, its
output and an answer, over and over) for one session, and is timed on:

* ``append 1 x N``: ``--singles`` calls of one item each, in items per second;
* ``append N in one call``: one call of ``--batch`` items, in items per second;
* ``cold load``: all ``--batch`` items of a session written before, by a session object made
  for the read (its store or connection already open), in ms;
* ``last 20``: the last 20 items of that session, warm, median of 50 calls, in ms;
* ``open``: from nothing to the first answer of ``get_items(limit=1)`` on an existing store,
  in ms (what a service that opens its store per request pays before its first statement).

Implementations: the raw driver (``sqlite3`` / ``psycopg`` inserting the same
JSON rows with the same durability: WAL and ``synchronous=FULL``, one commit per call), the
SDK's ``SQLiteSession`` (SQLite only) and ``SQLAlchemySession``, eventsourcing's event
recorder (each item one stored event; when the package is installed: the dev extra), and
session_sql through its ``SessionSQLSession``. Prints the median of ``--runs`` runs and each
figure's ratio to the best peer (raw aside). Needs ``session-sql[openai-agents]`` and
aiosqlite. Uses fresh files and a fresh schema per run, dropped after; ``--pg ''`` skips
PostgreSQL. ``--rows`` times only some rows (the data a read row needs is still written,
untimed).

Where each row's time goes (sampled profiles of the client per row, the store's native API
beside the adapter): ``profile_peers.py`` in this directory; the server's side
(``pg_stat_statements``, ``EXPLAIN (ANALYZE, BUFFERS)``) is in docs/performance.md, "Against
the peers: where the time goes".
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from agents.extensions.memory import SQLAlchemySession
from agents.memory import SQLiteSession
from bench_openai_agents import item
from sqlalchemy import create_engine, make_url, text

try:  # a peer when installed (the dev extra)
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.postgres import PostgresAggregateRecorder, PostgresDatastore
    from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteDatastore
except ImportError:  # pragma: no cover
    StoredEvent = None

from session_sql.integrations.openai_agents import SessionSQLSession

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
FIGURES = (
    "append 1 x N, items/s",
    "append N in one call, items/s",
    "cold load, ms",
    "last 20, ms",
    "open, ms",
)
ROWS = ("singles", "batch", "load", "last20", "open")
"""``--rows`` names of the figures, in order."""
Factory = Callable[[str], Any]
"""Makes the implementation's session object for a session id (an OpenAI ``Session``)."""


class RawSQLite:
    """The driver alone: one table of (session, seq, item JSON), WAL, synchronous FULL."""

    def __init__(self, path: Path) -> None:
        self.path = path
        conn = self._connect()
        conn.execute(
            "CREATE TABLE IF NOT EXISTS items (session TEXT NOT NULL, seq INTEGER NOT NULL, "
            "item TEXT NOT NULL, PRIMARY KEY (session, seq))"
        )
        conn.close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def session(self, session_id: str) -> Any:
        return _RawSession(session_id, self._connect(), "?")


class RawPostgres:
    """The same on PostgreSQL through psycopg (one commit per call)."""

    def __init__(self, url: str, schema: str) -> None:
        self.dsn = url.replace("postgresql+psycopg://", "postgresql://")
        self.schema = schema
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                f'CREATE TABLE "{schema}".items (session TEXT NOT NULL, seq BIGINT NOT NULL, '
                "item TEXT NOT NULL, PRIMARY KEY (session, seq))"
            )

    def session(self, session_id: str) -> Any:
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute(f'SET search_path TO "{self.schema}"')
        return _RawSession(session_id, conn, "%s")


class _RawSession:
    """The Session calls the workloads make, as plain statements."""

    def __init__(self, session_id: str, conn: Any, mark: str) -> None:
        self.session_id, self.conn, self.mark = session_id, conn, mark
        self.seq = 0

    async def add_items(self, items: list[Any]) -> None:
        m = self.mark
        rows = [(self.session_id, self.seq + i, json.dumps(x)) for i, x in enumerate(items)]
        self.seq += len(items)
        cur = self.conn.cursor()
        cur.execute("BEGIN")
        cur.executemany(f"INSERT INTO items VALUES ({m}, {m}, {m})", rows)
        cur.execute("COMMIT")

    async def get_items(self, limit: int | None = None) -> list[Any]:
        m = self.mark
        if limit is None:
            sql = f"SELECT item FROM items WHERE session = {m} ORDER BY seq"
            rows = self.conn.execute(sql, (self.session_id,)).fetchall()
        else:
            sql = f"SELECT item FROM items WHERE session = {m} ORDER BY seq DESC LIMIT {m}"
            rows = self.conn.execute(sql, (self.session_id, limit)).fetchall()[::-1]
        return [json.loads(r[0]) for r in rows]

    def close(self) -> None:
        self.conn.close()


class _EventsourcingSession:
    """eventsourcing's event recorder alone: each item one stored event of the session's
    originator (its version the item's place, its state the item's JSON), read back newest
    first with a limit, as that library's aggregates are read."""

    def __init__(self, session_id: str, datastore: Any, recorder: Any) -> None:
        self.originator = uuid.uuid5(uuid.NAMESPACE_URL, session_id)
        self.datastore, self.recorder = datastore, recorder
        self.version: int | None = None

    async def add_items(self, items: list[Any]) -> None:
        if self.version is None:
            last = self.recorder.select_events(self.originator, desc=True, limit=1)
            self.version = last[0].originator_version if last else 0
        first = self.version + 1
        events = [
            StoredEvent(self.originator, first + i, "item", json.dumps(x).encode())
            for i, x in enumerate(items)
        ]
        self.recorder.insert_events(events)
        self.version += len(items)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if limit is None:
            rows = self.recorder.select_events(self.originator)
        else:
            rows = self.recorder.select_events(self.originator, desc=True, limit=limit)[::-1]
        return [json.loads(r.state) for r in rows]

    def close(self) -> None:
        self.datastore.close()


def _eventsourcing_sqlite(path: Path) -> Factory | None:
    """A factory of eventsourcing sessions on the SQLite file ``path`` (each with a datastore
    of its own, as each raw session has its connection), or None when it is not installed."""
    if StoredEvent is None:
        return None

    def make(session_id: str) -> Any:
        datastore = SQLiteDatastore(str(path))
        recorder = SQLiteAggregateRecorder(datastore)
        recorder.create_table()
        return _EventsourcingSession(session_id, datastore, recorder)

    return make


def _eventsourcing_pg(url: str, schema: str) -> Factory | None:
    """The same on PostgreSQL, in ``schema``."""
    if StoredEvent is None:
        return None

    u = make_url(url)
    options = {"host": u.host or "127.0.0.1", "port": u.port or 5432, "user": u.username or ""}

    def make(session_id: str) -> Any:
        datastore = PostgresDatastore(
            u.database or "", password=u.password or "", schema=schema, **options
        )
        recorder = PostgresAggregateRecorder(datastore)
        recorder.create_table()
        return _EventsourcingSession(session_id, datastore, recorder)

    return make


async def _close(session: Any) -> None:
    closing = getattr(session, "close", None)
    if closing is not None:
        result = closing()
        if asyncio.iscoroutine(result):
            await result


async def _one_run(
    make: Factory, singles: int, batch: int, rows: tuple[str, ...] = ROWS
) -> dict[str, float]:
    items = [item(n) for n in range(batch)]
    out: dict[str, float] = {}
    if "singles" in rows:
        s = make(f"singles-{uuid.uuid4().hex[:8]}")
        await s.add_items(items[:1])  # warm: the store is open, its statements ready
        started = time.perf_counter()
        for x in items[1 : singles + 1]:
            await s.add_items([x])
        out[FIGURES[0]] = singles / (time.perf_counter() - started)
        await _close(s)

    sid = f"batch-{uuid.uuid4().hex[:8]}"
    s = make(sid)
    await s.get_items(limit=1)
    started = time.perf_counter()
    await s.add_items(items)
    out[FIGURES[1]] = batch / (time.perf_counter() - started)
    await _close(s)

    if "load" in rows or "last20" in rows:
        s = make(sid)
        await s.get_items(limit=1)  # opened (the open is its own figure)
        started = time.perf_counter()
        got = await s.get_items()
        out[FIGURES[2]] = (time.perf_counter() - started) * 1000
        assert len(got) == batch, (len(got), batch)
        laps = []
        for _ in range(50):
            started = time.perf_counter()
            await s.get_items(limit=20)
            laps.append(time.perf_counter() - started)
        out[FIGURES[3]] = statistics.median(laps) * 1000
        await _close(s)

    if "open" in rows:
        laps = []
        for _ in range(10):
            started = time.perf_counter()
            s = make(sid)
            await s.get_items(limit=1)
            laps.append(time.perf_counter() - started)
            await _close(s)
        out[FIGURES[4]] = statistics.median(laps) * 1000
    return {f: v for f, v in out.items() if ROWS[FIGURES.index(f)] in rows}


def _sqlite_peers(tmp: Path) -> dict[str, Factory]:
    tmp.mkdir()
    peers: dict[str, Factory] = {"raw sqlite3": RawSQLite(tmp / "raw.db").session}
    peers["OpenAI SQLiteSession"] = lambda s: SQLiteSession(s, tmp / "openai.db")
    url = f"sqlite+aiosqlite:///{tmp / 'openai-sa.db'}"
    peers["OpenAI SQLAlchemySession"] = lambda s: SQLAlchemySession.from_url(
        s, url=url, create_tables=True
    )
    eventsourcing = _eventsourcing_sqlite(tmp / "eventsourcing.db")
    if eventsourcing is not None:
        peers["eventsourcing"] = eventsourcing
    ours = f"sqlite:///{tmp / 'ours.db'}"
    peers["session_sql"] = lambda s: SessionSQLSession.from_url(s, ours)
    return peers


def _pg_peers(url: str, schema: str) -> dict[str, Factory]:
    peers: dict[str, Factory] = {"raw psycopg": RawPostgres(url, schema).session}
    peers["OpenAI SQLAlchemySession"] = lambda s: SQLAlchemySession.from_url(
        s,
        url=url,
        create_tables=True,
        engine_kwargs={"connect_args": {"options": f"-c search_path={schema}"}},
    )
    eventsourcing = _eventsourcing_pg(url, schema)
    if eventsourcing is not None:
        peers["eventsourcing"] = eventsourcing
    peers["session_sql"] = lambda s: SessionSQLSession.from_url(s, url, schema=f"{schema}_ours")
    return peers


def _table(backend: str, results: dict[str, list[dict[str, float]]]) -> None:
    shown = [f for f in FIGURES if f in next(iter(results.values()))[0]]
    medians = {
        name: {f: statistics.median(r[f] for r in runs) for f in shown}
        for name, runs in results.items()
    }
    peers = [n for n in medians if not n.startswith("raw") and n != "session_sql"]
    names = list(medians)
    print(f"\n{backend}: medians of {len(next(iter(results.values())))} runs")
    print("| figure | " + " | ".join(names) + " | session_sql / best peer |")
    print("|---" * (len(names) + 2) + "|")
    for f in shown:
        higher = f.endswith("items/s")
        cells = [f"{medians[n][f]:,.0f}" if higher else f"{medians[n][f]:,.3f}" for n in names]
        ratio = ""
        if peers:
            pick = max if higher else min
            best = pick(medians[p][f] for p in peers)
            ratio = f"{medians['session_sql'][f] / best:.2f}x"
        print(f"| {f} | " + " | ".join(cells) + f" | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default=PG_URL, help="PostgreSQL URL ('' skips it)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--singles", type=int, default=500)
    parser.add_argument("--rows", default=",".join(ROWS), help="the rows to time")
    args = parser.parse_args()
    rows = tuple(r for r in ROWS if r in args.rows.split(","))

    def run_all(peers_for: Callable[[], dict[str, Factory]]) -> dict[str, list[dict[str, float]]]:
        results: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.runs):
            for name, make in peers_for().items():  # interleaved: each run, each peer
                results.setdefault(name, []).append(
                    asyncio.run(_one_run(make, args.singles, args.batch, rows))
                )
        return results

    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1_000_000))
        _table(
            "SQLite",
            run_all(lambda: _sqlite_peers(Path(tmp) / f"run{next(counter)}")),
        )
    if args.pg:
        admin = create_engine(args.pg, isolation_level="AUTOCOMMIT")
        made: list[str] = []

        def pg_peers() -> dict[str, Factory]:
            schema = f"peers_{uuid.uuid4().hex[:8]}"
            made.extend([schema, f"{schema}_ours"])
            with admin.connect() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            return _pg_peers(args.pg, schema)

        try:
            _table("PostgreSQL", run_all(pg_peers))
        finally:
            with admin.connect() as conn:
                for schema in made:
                    conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            admin.dispose()


if __name__ == "__main__":
    main()
