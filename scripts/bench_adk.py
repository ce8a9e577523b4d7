"""Per-call latency of Google ADK's session service: SQLSessionService vs ADK's own SQL services.

    python scripts/bench_adk.py [--pg URL] [--events 1000] [--calls 200] [--runs 3]

Each run fills one session of ``--events`` events per implementation (user and model text,
every fourth event with a session and a ``user:`` state change), then times, call by call and
interleaved, ``append_event`` of one model event with a state change and
``get_session(num_recent_events=10)``:

* SQLite: ``SQLSessionService`` (a sqlite:/// file, the store's defaults) vs ADK's
  ``DatabaseSessionService`` (``sqlite+aiosqlite``) and ``SqliteSessionService``.
* PostgreSQL: ``SQLSessionService`` vs ``DatabaseSessionService`` on ``postgresql+psycopg://``
  (psycopg's async driver under SQLAlchemy's asyncio engine).

It prints the median per-call latency of each and the ratio to ours, the median over
``--runs`` runs. Every run uses fresh files and a fresh schema, dropped after. Needs
``session-sql[adk]`` and ``aiosqlite``; PostgreSQL is skipped when ``--pg`` is ``""``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from sqlalchemy import create_engine, text

from session_sql.integrations.adk import SQLSessionService

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
RECENT = GetSessionConfig(num_recent_events=10)


def event(n: int) -> Event:
    """The n-th event of a conversation; every fourth one changes state."""
    role = "user" if n % 2 == 0 else "model"
    delta = {"turns": n, "user:seen": n} if n % 4 == 3 else {}
    return Event(
        author="user" if role == "user" else "helper",
        invocation_id=f"inv-{n // 2}",
        content=types.Content(role=role, parts=[types.Part(text=f"message {n} " * 8)]),
        actions=EventActions(state_delta=delta),
    )


async def measure(
    services: dict[str, BaseSessionService], events: int, calls: int
) -> dict[str, dict[str, float]]:
    """Median seconds per call, by operation and implementation (calls interleaved)."""
    sessions = {}
    for name, service in services.items():
        session = await service.create_session(app_name="bench", user_id="u", session_id="s")
        for n in range(events):
            await service.append_event(session, event(n))
        sessions[name] = session
    samples: dict[str, dict[str, list[float]]] = {
        "append_event": {name: [] for name in services},
        "get_session(recent=10)": {name: [] for name in services},
    }
    for i in range(calls):
        for name, service in services.items():
            start = time.perf_counter()
            await service.append_event(sessions[name], event(events + 2 * i + 1))
            samples["append_event"][name].append(time.perf_counter() - start)
        for name, service in services.items():
            start = time.perf_counter()
            got = await service.get_session(
                app_name="bench", user_id="u", session_id="s", config=RECENT
            )
            samples["get_session(recent=10)"][name].append(time.perf_counter() - start)
            assert got is not None and len(got.events) == 10
    return {op: {k: statistics.median(v) for k, v in by.items()} for op, by in samples.items()}


async def sqlite_run(events: int, calls: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        ours = SQLSessionService.from_url(f"sqlite:///{Path(tmp) / 'ours.db'}")
        database = DatabaseSessionService(f"sqlite+aiosqlite:///{Path(tmp) / 'adk.db'}")
        sqlite = SqliteSessionService(str(Path(tmp) / "adk-sqlite.db"))
        services: dict[str, Any] = {
            "ours": ours,
            "DatabaseSessionService": database,
            "SqliteSessionService": sqlite,
        }
        try:
            return await measure(services, events, calls)
        finally:
            await ours.close()
            await database.close()
            await sqlite.close()


async def postgres_run(url: str, events: int, calls: int) -> dict[str, dict[str, float]]:
    tag = uuid.uuid4().hex[:12]
    ours_schema, theirs_schema = f"bench_adk_{tag}", f"bench_adkdb_{tag}"
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{theirs_schema}"'))
    ours = SQLSessionService.from_url(url, schema=ours_schema, pool_size=2)
    theirs = DatabaseSessionService(
        url,
        pool_size=2,
        max_overflow=0,
        connect_args={"options": f"-c search_path={theirs_schema}"},
    )
    try:
        return await measure({"ours": ours, "DatabaseSessionService": theirs}, events, calls)
    finally:
        await ours.close()
        await theirs.close()
        with admin.begin() as conn:
            for schema in (ours_schema, theirs_schema):
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def report(backend: str, runs: list[dict[str, dict[str, float]]]) -> None:
    print(f"\n{backend}: SQLSessionService vs ADK's services, median of {len(runs)} runs")
    names = list(runs[0]["append_event"])
    print(f"  {'operation':<24}" + "".join(f"{n[:22]:>24}" for n in names))
    for op in runs[0]:
        cells = []
        for name in names:
            micros = statistics.median(r[op][name] for r in runs) * 1e6
            ratio = statistics.median(r[op]["ours"] / r[op][name] for r in runs)
            cells.append(f"{micros:>10.0f} µs" + ("" if name == "ours" else f" ({ratio:.2f}x)"))
        print(f"  {op:<24}" + "".join(f"{c:>24}" for c in cells))
    print("  (x): ours / theirs, per run; below 1 is faster")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default=PG_URL, help='PostgreSQL URL ("" to skip)')
    parser.add_argument("--events", type=int, default=1000, help="events in the session first")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per operation")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["sqlite", "postgresql"], default=None)
    args = parser.parse_args()
    if args.only != "postgresql":
        runs = [asyncio.run(sqlite_run(args.events, args.calls)) for _ in range(args.runs)]
        report("sqlite", runs)
    if args.pg and args.only != "sqlite":
        runs = [
            asyncio.run(postgres_run(args.pg, args.events, args.calls)) for _ in range(args.runs)
        ]
        report("postgresql", runs)


if __name__ == "__main__":
    main()
