"""Bytes and latency of a pydantic-ai run: ``SessionSQLStepStore`` against the harness's stores.

``python -m tests.integrations.pai_bench [--cycles 100] [--url-pg URL]`` writes one run the
way ``StepPersistence`` does, ``--cycles`` tool cycles long (per cycle: the model request's
two step events, a tool call's two step events and two tool-effect records, and a snapshot of
the history, which grows by a model response of 60 random words with a tool call and a tool
return of 60 random words), through ``SessionSQLStepStore`` and ``SqliteStepStore`` on fresh
SQLite files (both WAL, ``synchronous=FULL``) and, with a server, ``SessionSQLStepStore`` and
``PostgresStepStore`` (asyncpg) in fresh PostgreSQL schemas (dropped afterwards). It prints
the median ``append_event`` during the run, the median ``latest_snapshot`` of the finished
run (the history of ``2 * cycles + 1`` messages) read 30 times by the store that wrote it and
once by a fresh store (the two stores of a backend called in turn, operation by
operation), and the database's bytes after the run (SQLite: the ``VACUUM``ed file;
PostgreSQL: tables, TOAST and indexes of the schema) per stored entry (run record, step
event, tool-effect record, snapshot). Needs asyncpg (``pip install -e '.[test,dev]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RequestUsage,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai_harness.step_persistence import (
    ContinuableSnapshot,
    PostgresStepStore,
    RunRecord,
    SqliteStepStore,
    StepEvent,
    ToolEffectRecord,
)

from session_sql.integrations.pydantic_ai import SessionSQLStepStore

from .lg_bench import bench_arguments, pg_bytes, pg_schema, sqlite_bytes, words

RUN = "bench-run"
Opener = Callable[[], Any]


def cycle_messages(i: int) -> list[ModelMessage]:
    call = f"call-{i}"
    response = ModelResponse(
        parts=[TextPart(words(2 * i, 60)), ToolCallPart("search", {"q": words(i, 3)}, call)],
        usage=RequestUsage(input_tokens=100 + i, output_tokens=50),
        model_name="scripted",
    )
    return [response, ModelRequest(parts=[ToolReturnPart("search", words(2 * i + 1, 60), call)])]


class Timed:
    """The stores under test, called in turn for each operation (so that a machine whose
    load drifts weighs on each alike), each ``append_event`` timed per store."""

    def __init__(self, stores: dict[str, Any]) -> None:
        self.stores = stores
        self.appends: dict[str, list[float]] = {name: [] for name in stores}

    async def call(self, method: str, *args: Any, **kwargs: Any) -> None:
        for name, store in self.stores.items():
            began = time.perf_counter()
            await getattr(store, method)(*args, **kwargs)
            if method == "append_event":
                self.appends[name].append((time.perf_counter() - began) * 1000)


async def write_run(stores: Timed, cycles: int) -> int:
    """The run through each store; how many entries each stored."""
    count = 0

    async def event(kind: Any, step: int, call: str | None = None) -> None:
        nonlocal count
        count += 1
        await stores.call(
            "append_event",
            StepEvent(
                run_id=RUN,
                kind=kind,
                step_index=step,
                tool_call_id=call,
                tool_name=None if call is None else "search",
                idempotency_key=f"{count}:{step}:{kind}:{call or ''}",
            ),
        )

    await stores.call(
        "register_run", RunRecord(run_id=RUN, agent_name="bench", registration_id="r")
    )
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(words(0, 20))])]
    await event("run_started", 0)
    for i in range(1, cycles + 1):
        call = f"call-{i}"
        await event("model_request_started", i)
        await event("model_request_completed", i)
        await stores.call(
            "record_tool_effect",
            ToolEffectRecord(tool_call_id=call, tool_name="search", run_id=RUN, status="started"),
        )
        await event("tool_call_started", i, call)
        await stores.call(
            "record_tool_effect",
            ToolEffectRecord(tool_call_id=call, tool_name="search", run_id=RUN, status="completed"),
        )
        await event("tool_call_completed", i, call)
        history = [*history, *cycle_messages(i)]
        snapshot = ContinuableSnapshot(
            run_id=RUN, step_index=i, messages=history, idempotency_key=f"{i}:{i}:complete"
        )
        await stores.call("save_snapshot", snapshot)
    await event("run_completed", 0)
    return 1 + count + 3 * cycles  # the run, its events, effects, snapshots


async def read_latest(stores: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {name: [] for name in stores}
    for _ in range(rounds):
        for name, store in stores.items():
            began = time.perf_counter()
            snapshot = await store.latest_snapshot(run_id=RUN)
            found[name].append((time.perf_counter() - began) * 1000)
            assert snapshot is not None and len(snapshot.messages) > 1
    return found


async def measure(openers: dict[str, Opener], cycles: int) -> dict[str, dict[str, float]]:
    """Each store's medians: ``append_event``, ``latest_snapshot`` by the store that wrote
    the run, and the first ``latest_snapshot`` of a fresh store."""
    async with contextlib.AsyncExitStack() as stack:
        stores = {name: await stack.enter_async_context(o()) for name, o in openers.items()}
        timed = Timed(stores)
        entries = await write_run(timed, cycles)
        warm = await read_latest(stores, 30)
    async with contextlib.AsyncExitStack() as stack:
        stores = {name: await stack.enter_async_context(o()) for name, o in openers.items()}
        cold = await read_latest(stores, 1)
    return {
        name: {
            "append": statistics.median(timed.appends[name]),
            "latest": statistics.median(warm[name]),
            "cold": cold[name][0],
            "entries": entries,
        }
        for name in openers
    }


@asynccontextmanager
async def ours(url: str, **options: Any) -> AsyncIterator[SessionSQLStepStore]:
    async with SessionSQLStepStore.from_url(url, **options) as store:
        yield store


@asynccontextmanager
async def harness_sqlite(path: Path) -> AsyncIterator[SqliteStepStore]:
    yield SqliteStepStore(database=path)


@asynccontextmanager
async def harness_postgres(dsn: str) -> AsyncIterator[PostgresStepStore]:
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        yield PostgresStepStore(pool)
    finally:
        await pool.close()


async def main(cycles: int, pg_url: str | None) -> None:
    folder = Path(tempfile.mkdtemp())
    mine, theirs = folder / "ours.db", folder / "theirs.db"
    results = await measure(
        {
            "SessionSQLStepStore, SQLite": lambda: ours(f"sqlite:///{mine}"),
            "SqliteStepStore": lambda: harness_sqlite(theirs),
        },
        cycles,
    )
    results["SessionSQLStepStore, SQLite"]["bytes"] = sqlite_bytes(mine)
    results["SqliteStepStore"]["bytes"] = sqlite_bytes(theirs)
    if pg_url:
        schema = f"bench_pai_{uuid.uuid4().hex[:8]}"
        other = f"bench_paipg_{uuid.uuid4().hex[:8]}"
        pg_schema(pg_url, other, drop=False)
        dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
        dsn += ("&" if "?" in dsn else "?") + f"options=-csearch_path%3D{other}"
        try:
            results.update(
                await measure(
                    {
                        "SessionSQLStepStore, PostgreSQL": lambda: ours(pg_url, schema=schema),
                        "PostgresStepStore": lambda: harness_postgres(dsn),
                    },
                    cycles,
                )
            )
            results["SessionSQLStepStore, PostgreSQL"]["bytes"] = pg_bytes(pg_url, schema)
            results["PostgresStepStore"]["bytes"] = pg_bytes(pg_url, other)
        finally:
            pg_schema(pg_url, schema, drop=True)
            pg_schema(pg_url, other, drop=True)
    for name, found in results.items():
        print(
            f"{name:32s} append_event p50 {found['append']:6.2f} ms   latest_snapshot p50 "
            f"{found['latest']:6.2f} ms (fresh store {found['cold']:6.2f} ms)   "
            f"{found['bytes'] / found['entries']:7.0f} B per entry"
        )


if __name__ == "__main__":
    args = bench_arguments(__doc__, "cycles", 100).parse_args()
    asyncio.run(main(args.cycles, args.url_pg or None))
