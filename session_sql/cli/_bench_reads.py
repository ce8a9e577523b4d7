"""The read workloads of ``session-sql bench``: W4 (messages and surface), W5 (load_session and
events), W9 (tail reads) and W10 (open_session + append), on one shared setup."""

from __future__ import annotations

import functools
import itertools
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from session_sql import SessionStore, open_store
from session_sql.cli._bench_events import Item, _user, chunk_events
from session_sql.cli._bench_harness import Target, Workload, _closing, _timed, _workload
from session_sql.cli._bench_raw import Raw
from session_sql.cli._support import CliError
from session_sql.schema import DEFAULT_SCHEMA


def _big_session(store: SessionStore, total: int, surface_nodes: int) -> str:
    """A session of ``total`` events whose surface holds ``surface_nodes`` user messages."""
    handle = store.create_session()
    per_message = total // surface_nodes
    batch: list[Item] = []
    for k in range(surface_nodes):
        batch.append({"type": "user/message", "data": _user(k), "surface_op": "append"})
        batch.extend(chunk_events(per_message - 1))
        if len(batch) >= 5000:
            handle.append_many(batch)
            batch = []
    if batch:
        handle.append_many(batch)
    return handle.id


TAIL = 20
"""W9's ``last``: the final messages an agent loop or a UI shows."""

TAIL_CALLS = 20
"""W9 times this many tail reads per sample: one is well under a millisecond."""


def _new_tails(store: SessionStore, count: itertools.count[int]) -> list[str]:
    """``TAIL_CALLS`` sessions of ``TAIL`` user messages that no other session holds (ids below
    zero): tails whose rows this store has never read."""
    ids = []
    for _ in range(TAIL_CALLS):
        handle = store.create_session()
        handle.append_many(
            [
                {"type": "user/message", "data": _user(-1 - next(count)), "surface_op": "append"}
                for _ in range(TAIL)
            ]
        )
        ids.append(handle.id)
    return ids


WARM_RUNS = 6
"""How often a fresh store opens and appends to a session of its own before a cold figure is
taken: psycopg prepares a statement once it has run five times."""


@contextmanager
def _fresh_store(store: SessionStore, session_id: str, warm_id: str) -> Iterator[SessionStore]:
    """Another store on ``store``'s database, tenant and durability, warmed as ``store`` is but
    for the surface events of ``session_id`` it checked on open: its connection, its
    statements (open and append, on ``warm_id``) and the messages of ``session_id`` (read;
    that read checks nothing an open keeps)."""
    options: dict[str, Any] = {}
    if store.backend == "sqlite":
        with store.engine.connect() as conn:
            mode = conn.exec_driver_sql("PRAGMA synchronous").scalar_one()
        options["synchronous"] = {1: "NORMAL", 2: "FULL"}[mode]
    schema = store.schema or DEFAULT_SCHEMA
    with open_store(store.engine.url, schema=schema, tenant=store.tenant, **options) as fresh:
        chunk = chunk_events(1)[0]
        for _ in range(WARM_RUNS):
            fresh.open_session(warm_id).append(chunk["type"], chunk["data"])
        fresh.messages(session_id)
        yield fresh


def w_read(target: Target, big: int, small: int, nodes: int, reps: int) -> list[Workload]:
    """W4 (messages + surface, flat in log length), W5 (load_session vs raw fetch+parse),
    W9 (``messages(last=20)`` vs the raw ``ORDER BY pos DESC LIMIT 20`` + fetch + parse) and
    W10 (``open_session`` + one append, flat in log length; it compacts the sessions last)."""
    out = []
    with target.store() as store, _closing(target.raw()) as raw:
        big_id = _big_session(store, big, nodes)
        small_id = _big_session(store, small, nodes)

        def read(sid: str) -> None:
            store.messages(sid)
            store.surface(sid)

        read(big_id)  # warm both caches before timing
        read(small_id)
        t_big, t_small, t_msgs, t_raw = [], [], [], []
        for _ in range(max(reps, 7)):  # interleaved, so drift hits both sides alike
            t_big.append(_timed(lambda: read(big_id)))
            t_small.append(_timed(lambda: read(small_id)))
            t_msgs.append(_timed(lambda: store.messages(big_id)))
            t_raw.append(_timed(lambda: raw.fetch_surface(big_id)))
        growth = statistics.median(t_big) / statistics.median(t_small)
        w4 = _workload("W4 messages() of 2k nodes", nodes, t_msgs, t_raw, {})
        w4.extra = {
            "log_growth_100k_over_10k": round(growth, 3),
            "messages_over_raw_time": round(1 / w4.ratio, 3) if w4.ratio else None,
            "big_log": big,
            "small_log": small,
            "surface_nodes": nodes,
        }
        out.append(w4)
        out.extend(_w5(store, raw, big_id, big, "", max(2, reps // 2)))
        small_log = min(LOAD_SMALL, big)
        out.extend(
            _w5(store, raw, _big_session(store, small_log, 100), small_log, " 5k", max(reps, 7))
        )
        if store.messages(big_id, last=TAIL) != raw.fetch_tail(big_id, TAIL):
            raise CliError("W9: the store's tail read and the raw one disagree")

        def tail_reads(read: Callable[[], Any]) -> None:
            for _ in range(TAIL_CALLS):
                read()

        def cold_reads(ids: list[str]) -> None:
            for sid in ids:
                store.messages(sid, last=TAIL)

        # Cold: every row new, as when all of an agent's last messages were written since its
        # previous read; each sample reads the tails of sessions written (untimed) for it.
        fresh = itertools.count()
        t_tail, t_raw_tail, t_cold = [], [], []
        for _ in range(max(reps, 7)):
            t_tail.append(_timed(lambda: tail_reads(lambda: store.messages(big_id, last=TAIL))))
            t_raw_tail.append(_timed(lambda: tail_reads(lambda: raw.fetch_tail(big_id, TAIL))))
            t_cold.append(_timed(functools.partial(cold_reads, _new_tails(store, fresh))))
        w9 = _workload(f"W9 messages(last={TAIL})", TAIL * TAIL_CALLS, t_tail, t_raw_tail, {})
        cold_ratio = statistics.median(t_cold) / statistics.median(t_raw_tail)
        w9.extra = {
            "tail_over_raw_time": round(1 / w9.ratio, 3) if w9.ratio else None,
            "cold_tail_over_raw_time": round(cold_ratio, 3),
            "log": big,
            "surface_nodes": nodes,
            "last": TAIL,
        }
        out.append(w9)
        out.append(w_open(store, raw, big_id, small_id, nodes, reps))
    return out


KEPT = 10
"""W10 compacts W4's sessions to keep every ``KEPT``-th node: a long session whose context
was summarised (the cost of an open follows the surface, the ratio the log's length)."""


def _compact(store: SessionStore, session_id: str) -> int:
    """Replace the surface's first 90% with one summary; returns the surface size left."""
    handle = store.open_session(session_id)
    nodes = handle.surface.nodes
    covered = nodes[: len(nodes) - len(nodes) // KEPT]
    handle.append(
        "user/message",
        _user(handle.seq),
        surface_op={"op": "replace", "start": covered[0], "end": covered[-1]},
        source_event_seqs=list(covered),
    )
    return len(handle.surface.nodes)


def w_open(
    store: SessionStore, raw: Raw, big_id: str, small_id: str, nodes: int, reps: int
) -> Workload:
    """W10: ``open_session`` + one append, on W4's 100k-event and 10k-event sessions (after a
    compaction), vs the raw driver reading the same surface rows (fetch + parse) and writing
    one event; the figure is per open-and-append, the growth is 100k over 10k."""
    surface = _compact(store, big_id)
    _compact(store, small_id)
    chunk = chunk_events(1)[0]
    raw_sid = raw.new_session()
    raw_head = -1

    def open_and_append(sid: str) -> None:
        handle = store.open_session(sid)
        handle.append(chunk["type"], chunk["data"])

    def raw_open_and_append() -> None:
        nonlocal raw_head
        raw.fetch_surface(big_id)
        raw_head = raw.write(raw_sid, raw_head, [chunk])

    def cold_open_and_append() -> float:
        """Seconds of a first open-and-append of the big session by a fresh store, as in a new
        process: every surface event checked."""
        with _fresh_store(store, big_id, warm_id) as fresh:
            return _timed(lambda: fresh.open_session(big_id).append(chunk["type"], chunk["data"]))

    warm_id = store.create_session().id
    open_and_append(big_id)  # warm both sides
    raw_open_and_append()
    t_big, t_small, t_raw, t_open_big, t_open_small, t_cold = [], [], [], [], [], []
    for _ in range(max(reps, 9)):  # interleaved, so drift hits them all alike
        t_big.append(_timed(lambda: open_and_append(big_id)))
        t_small.append(_timed(lambda: open_and_append(small_id)))
        t_raw.append(_timed(raw_open_and_append))
        t_open_big.append(_timed(lambda: store.open_session(big_id)))
        t_open_small.append(_timed(lambda: store.open_session(small_id)))
        t_cold.append(cold_open_and_append())
    w10 = _workload("W10 open_session + append", 1, t_big, t_raw, {})

    def ms(samples: list[float]) -> float:
        return round(statistics.median(samples) * 1000, 2)

    w10.extra = {
        "open_append_ms": ms(t_big),
        "open_ms": ms(t_open_big),
        # The figures above are for a process that opened the session before (the store keeps
        # the surface events it checked); a first open checks every one of them.
        "cold_open_append_ms": ms(t_cold),
        "cold_over_raw_time": round(statistics.median(t_cold) / statistics.median(t_raw), 3),
        "log_growth_100k_over_10k": round(statistics.median(t_big) / statistics.median(t_small), 3),
        "open_growth_100k_over_10k": round(
            statistics.median(t_open_big) / statistics.median(t_open_small), 3
        ),
        "open_over_raw_time": round(1 / w10.ratio, 3) if w10.ratio else None,
        "log": store.head_seq(big_id) + 1,
        "small_log": store.head_seq(small_id) + 1,
        "surface_nodes": surface,
    }
    return w10


LOAD_SMALL = 5000
"""W5's small session: ``load_session`` and ``events()`` of a 5,000-event log."""


def _w5(
    store: SessionStore, raw: Raw, sid: str, count: int, label: str, reps: int
) -> list[Workload]:
    """W5: ``load_session`` and ``list(events())`` vs raw fetch + ``json.loads`` of the log,
    interleaved so that drift hits both sides alike."""
    t_load, t_events, t_raw = [], [], []
    for _ in range(reps):
        t_load.append(_timed(lambda: store.load_session(sid)))
        t_events.append(_timed(lambda: list(store.events(sid))))
        t_raw.append(_timed(lambda: raw.fetch_log(sid)))
    out = []
    for name, times in (("load_session", t_load), ("events()", t_events)):
        w = _workload(f"W5 {name}{label}", count, times, t_raw, {})
        w.extra = {"over_raw_time": round(1 / w.ratio, 3) if w.ratio else None, "log": count}
        out.append(w)
    return out
