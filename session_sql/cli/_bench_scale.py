"""W12 of ``session-sql bench``: what each operation costs as the store grows.

The store is filled in steps (by default to 100k, 1M and 10M events, about nine events a
session), and after each step the everyday operations are timed on it: an append, a tail read,
``open_session``, ``list_sessions`` by user and by label, ``follow``'s wake-up, ``verify`` of
one session, and the bytes per event. An operation that stays as cheap at the last step as at
the first scales; ``growth`` is the ratio of the two medians.

The fill copies five template sessions, written through the store, inside the database: one
``INSERT ... SELECT`` per table and chunk (new ids, users, labels and update times; the keys
come from ``sessions``' own sequence). The templates hold the shapes a store is made of: a
turn streamed in chunks with a tool call and its result, two short openings, a compaction
(a summary replacing six messages) and a fork. Every copy is a session the store can read and
``verify``.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Integer, Text, case, cast, func, insert, literal, select, true
from sqlalchemy.exc import DBAPIError

from session_sql import SessionStore
from session_sql.cli._bench_events import _chunk, _user, agent_events
from session_sql.cli._bench_harness import Target, Workload
from session_sql.schema import tables_for

__all__ = ["SCALE_LEVELS", "w_scale"]

SCALE_LEVELS = (100_000, 1_000_000, 10_000_000)
"""The events W12 measures at."""

USERS = 100
"""Users the copies belong to: a hundred sessions each at the first size, so every page of
``list_sessions(user_id=..., limit=50)`` is full at every size."""
TEAMS = 50
CHUNK_COPIES = 20_000
"""Copies of the templates per statement (about 900k event rows at most)."""
SAMPLES = {"append": 200, "tail": 200, "open": 100, "list": 50, "follow": 30, "verify": 20}

PREFIX = "w12"
TEMPLATES = ("full", "short-a", "short-b", "compacted", "fork")


def _tables(target: Target) -> Any:
    return tables_for(target.schema if target.backend == "postgresql" else None)


def _write_templates(store: SessionStore, target: Target) -> int:
    """The template sessions; returns how many event rows one copy of them all adds."""
    full = store.create_session(f"{PREFIX}-full", user_id="user0")
    full.append_many(agent_events(23))
    for name in ("short-a", "short-b"):
        store.create_session(f"{PREFIX}-{name}", user_id="user0").append_many(agent_events(4))
    compacted = store.create_session(f"{PREFIX}-compacted", user_id="user0")
    compacted.append_many(
        [{"type": "user/message", "data": _user(i), "surface_op": "append"} for i in range(8)]
    )
    first = compacted.seq - 8
    compacted.append(
        "user/message",
        {**_user(8), "id": "summary"},
        surface_op={"op": "replace", "start": first, "end": first + 5},
        source_event_seqs=list(range(first, first + 6)),
    )
    forked = store.fork_session(f"{PREFIX}-short-a", child_id=f"{PREFIX}-fork")
    forked.append_many([{"type": "assistant/chunk", "data": _chunk(1, 1, i)} for i in range(2)])
    s = _tables(target).sessions
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(s.c.head_seq).where(s.c.id.in_([f"{PREFIX}-{n}" for n in TEMPLATES]))
        ).scalars()
        return sum(int(head) + 1 for head in rows)


def _numbers(start: int, stop: int) -> Any:
    """``n`` from ``start`` to ``stop - 1``, as a recursive CTE (both dialects have them)."""
    nums = select(literal(start, Integer).label("n")).cte("nums", recursive=True)
    return nums.union_all(select(nums.c.n + 1).where(nums.c.n + 1 < stop))


def _copy(conn: Connection, target: Target, start: int, stop: int) -> None:
    """Copies ``start`` to ``stop - 1`` of the templates: sessions, then their events and
    surface rows under the new keys, each table in a transaction of its own.

    The session rows go in ordered by copy and template, so the keys their sequence gives
    them are consecutive; the events then compute their key instead of looking their copy
    up by id (checked against what the insert returned).
    """
    t = _tables(target)
    s, e, sf = t.sessions, t.events, t.surface
    nums = _numbers(start, stop)
    n = cast(nums.c.n, Text)
    tpl = s.alias("tpl")
    keys = [
        int(key)
        for key in conn.execute(
            select(s.c.session_key)
            .where(s.c.id.in_([f"{PREFIX}-{name}" for name in TEMPLATES]))
            .order_by(s.c.session_key)
        ).scalars()
    ]
    templates = tpl.c.session_key.in_(keys)
    rank = case({key: j for j, key in enumerate(keys)}, value=tpl.c.session_key)

    def quoted(value: Any) -> Any:
        return '"' + value + '"'

    # The header names the session (and a fork's parent): the same ids, copied.
    header = func.replace(cast(tpl.c.header, Text), quoted(tpl.c.id), quoted(tpl.c.id + "-" + n))
    header = func.replace(
        header,
        func.coalesce(quoted(tpl.c.parent_session), quoted(tpl.c.id)),
        func.coalesce(quoted(tpl.c.parent_session + "-" + n), quoted(tpl.c.id + "-" + n)),
    )
    varied: dict[str, Any] = {
        "id": tpl.c.id + "-" + n,
        "header": cast(header, s.c.header.type),
        "parent_session": tpl.c.parent_session + "-" + n,
        "updated_at": tpl.c.updated_at + nums.c.n,
        "incarnation": tpl.c.incarnation + "-" + n,
        "user_id": "user" + cast(nums.c.n % USERS, Text),
        "labels": cast('{"team": "t' + cast(nums.c.n % TEAMS, Text) + '"}', s.c.labels.type),
    }
    columns = [c for c in s.columns if c.name != "session_key"]
    rows = (
        select(*(varied.get(c.name, tpl.c[c.name]) for c in columns))
        .select_from(tpl.join(nums, true()))
        .where(templates)
        .order_by(nums.c.n, tpl.c.session_key)
    )
    given = conn.execute(
        insert(s).from_select(columns, rows).returning(s.c.session_key, s.c.id, s.c.tenant)
    ).all()
    ids = t.session_ids
    conn.execute(
        insert(ids),
        [{"id": sid, "tenant": tenant, "session_key": key} for key, sid, tenant in given],
    )
    _analyze(conn, [s, ids])
    first = min(int(row[0]) for row in given)
    order = (
        conn.execute(select(s.c.id).where(s.c.session_key.in_(keys)).order_by(s.c.session_key))
        .scalars()
        .all()
    )
    for key, sid, _ in given:
        template, _, copy = str(sid).rpartition("-")
        if int(key) != first + (int(copy) - start) * len(keys) + order.index(template):
            raise RuntimeError(f"W12: the copies' keys are not consecutive ({sid}: {key})")
    new_key = first + (nums.c.n - start) * len(keys) + rank
    for table in (e, sf):
        written = [c for c in table.columns if c.computed is None]
        picked = [new_key if c.name == "session_key" else table.c[c.name] for c in written]
        source = (
            select(*picked)
            .select_from(tpl)
            .join(table, table.c.session_key == tpl.c.session_key)
            .join(nums, true())
            .where(templates)
        )
        conn.execute(insert(table).from_select(written, source))
        _analyze(conn, [table])


def _analyze(conn: Connection, tables: Sequence[Any]) -> None:
    """Commit what ``conn`` wrote, then refresh the planner's statistics of ``tables``.

    Between the tables of a chunk: the foreign-key checks of the next table's rows are
    planned from these statistics, and planned on a table of a few rows (the templates) they
    scan it, once per inserted row (a 100k-event chunk took minutes on PostgreSQL).
    """
    conn.commit()
    preparer = conn.dialect.identifier_preparer
    for table in tables:
        conn.exec_driver_sql("ANALYZE " + preparer.format_table(table))
    conn.commit()


def _fill(store: SessionStore, target: Target, copies: range) -> None:
    """Add ``copies`` of the templates in chunks, each table of a chunk in a transaction of
    its own followed by ANALYZE (as docs/sql.md says to after a bulk load)."""
    for start in range(copies.start, copies.stop, CHUNK_COPIES):
        with store.engine.connect() as conn:
            _copy(conn, target, start, min(start + CHUNK_COPIES, copies.stop))


def _settle(store: SessionStore, target: Target) -> None:
    """Write the fill's pages out before timing: a checkpoint in progress (PostgreSQL) or a
    long WAL (SQLite) after millions of rows would be timed with the appends. PostgreSQL
    checkpoints on request for superusers and ``pg_checkpoint`` members only; without that
    right the figures include the server's own checkpoint."""
    statement = (
        "CHECKPOINT" if target.backend == "postgresql" else "PRAGMA wal_checkpoint(TRUNCATE)"
    )
    with contextlib.suppress(DBAPIError), store.engine.connect() as conn:
        conn.exec_driver_sql(statement)
        conn.commit()


def _ms(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p99_ms": round(p99 * 1000, 3)}


def _each(count: int, run: Callable[[int], Any]) -> list[float]:
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        run(i)
        times.append(time.perf_counter() - t0)
    return times


def _follow_wakeups(store: SessionStore, count: int) -> list[float]:
    """How long after an append returns its follower has the event (a writer thread)."""
    sid = store.create_session().id
    sent: dict[int, float] = {}
    delays: list[float] = []

    def write() -> None:
        handle = store.open_session(sid)
        for i in range(count):
            time.sleep(0.02)
            event = handle.append("assistant/chunk", _chunk(1, 1, i))
            sent[event.seq] = time.perf_counter()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        for event in store.follow(sid, timeout=30):
            if event.type == "assistant/chunk":
                now = time.perf_counter()
                delays.append(now - sent.get(event.seq, now))
                if len(delays) == count:
                    break
    finally:
        writer.join(30)
    return delays


def _measure(
    store: SessionStore, target: Target, copies: int, rng: random.Random
) -> dict[str, Any]:
    """Every operation's p50 and p99 on the store as it is now."""

    def some(name: str) -> str:
        return f"{PREFIX}-{name}-{rng.randrange(copies)}"

    out: dict[str, Any] = {}
    handle = store.create_session(user_id="user1")
    items = agent_events(SAMPLES["append"], start=handle.seq)
    out["append"] = _ms(
        _each(
            len(items),
            lambda i: handle.append(
                items[i]["type"],
                items[i]["data"],
                surface_op=items[i].get("surface_op"),
                source_event_seqs=items[i].get("source_event_seqs"),
            ),
        )
    )
    out["tail read"] = _ms(_each(SAMPLES["tail"], lambda _: store.messages(some("full"), last=20)))
    out["open_session"] = _ms(_each(SAMPLES["open"], lambda _: store.open_session(some("full"))))
    out["list_sessions by user"] = _ms(
        _each(
            SAMPLES["list"],
            lambda i: store.list_sessions(user_id=f"user{rng.randrange(USERS)}", limit=50),
        )
    )
    out["list_sessions by label"] = _ms(
        _each(
            SAMPLES["list"],
            lambda i: store.list_sessions(labels={"team": f"t{rng.randrange(TEAMS)}"}, limit=50),
        )
    )
    out["follow"] = _ms(_follow_wakeups(store, SAMPLES["follow"]))
    out["verify"] = _ms(_each(SAMPLES["verify"], lambda _: store.verify(some("full"))))
    return out


def _counts(store: SessionStore, target: Target) -> tuple[int, int]:
    """``(sessions, event rows)`` in the store."""
    t = _tables(target)
    with store.engine.connect() as conn:
        sessions = conn.execute(select(func.count()).select_from(t.sessions)).scalar_one()
        events = conn.execute(select(func.count()).select_from(t.events)).scalar_one()
    return int(sessions), int(events)


def w_scale(
    target: Target,
    store_bytes: Callable[[SessionStore, Target], int],
    levels: Sequence[int] = SCALE_LEVELS,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Workload]:
    """W12: fill the store to each of ``levels`` events and time every operation there.

    One workload per operation: its p50 and p99 at each level (milliseconds) and ``growth``,
    its p50 at the last level over its p50 at the first.
    """
    rng = random.Random(12)
    steps: list[dict[str, Any]] = []
    with target.store() as store:
        per_copy = _write_templates(store, target)
        copies = 0
        for level in levels:
            wanted = max(copies + 1, level // per_copy)
            progress(f"W12 fill to {level:,} events")
            started = time.perf_counter()
            _fill(store, target, range(copies, wanted))
            filled = time.perf_counter() - started
            added = (wanted - copies) * per_copy
            copies = wanted
            progress(f"W12 measure at {level:,} events")
            _settle(store, target)
            step = _measure(store, target, copies, rng)
            sessions, events = _counts(store, target)
            step["bytes per event"] = store_bytes(store, target) / events
            steps.append(
                {
                    "sessions": sessions,
                    "events": events,
                    "fill_events_per_s": added / filled,
                    **step,
                }
            )
    sizes = [step["events"] for step in steps]
    workloads = [
        Workload(
            name="W12 fill",
            events_per_s=statistics.median(step["fill_events_per_s"] for step in steps),
            raw_events_per_s=0.0,
            ratio=0.0,
            reps=len(steps),
            extra={"events": sizes, "sessions": [step["sessions"] for step in steps]},
        )
    ]
    for op in OPERATIONS:
        p50 = [step[op]["p50_ms"] for step in steps]
        workloads.append(
            Workload(
                name=f"W12 {op}",
                events_per_s=1000 / p50[-1] if p50[-1] else 0.0,
                raw_events_per_s=0.0,
                ratio=0.0,
                reps=len(steps),
                extra={
                    "events": sizes,
                    "p50_ms": p50,
                    "p99_ms": [step[op]["p99_ms"] for step in steps],
                    "growth": round(p50[-1] / p50[0], 3) if p50[0] else 0.0,
                },
            )
        )
    per_event = [round(step["bytes per event"], 1) for step in steps]
    workloads.append(
        Workload(
            name="W12 bytes per event",
            events_per_s=0.0,
            raw_events_per_s=0.0,
            ratio=0.0,
            reps=len(steps),
            extra={"events": sizes, "bytes_per_event": per_event},
        )
    )
    return workloads


OPERATIONS = (
    "append",
    "tail read",
    "open_session",
    "list_sessions by user",
    "list_sessions by label",
    "follow",
    "verify",
)
