"""Migration speed and peak memory: a store holding one large session and many small ones.

    python scripts/bench_migrate.py [events] [runs]

The source is a temporary SQLite store: one session of ``events`` events of the bench's agent
mix (default 100,000), compacted every 5,000 events, and 200 sessions of 50 events. Each
measurement runs in a child process (its peak RSS, ``VmHWM``, is its own) into a fresh SQLite file,
and reports the median of ``runs`` (default 3) of:

- ``migrate``: ``session_sql.migrate`` (checks every event, verifies every copy);
- ``export+import``: the JSONL way (export every session, import every file), what ``migrate``
  replaces;
- ``raw copy``: the raw driver's floor, ``INSERT INTO ... SELECT`` of the three tables through
  an ``ATTACH`` (no checks at all).

Then ``migrate`` at ``events`` and at twice as many, with its peak RSS and (in a second run,
under ``tracemalloc``) the peak of the Python heap, to show that memory does not follow the
length of a log (it follows a session's surface, as import and verify do: the compactions keep
that short).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from session_sql import Replace, jsonl_file_name, migrate, open_store
from session_sql.cli.bench import agent_events

SMALL_SESSIONS = 200
SMALL_EVENTS = 50
COPY_EVENTS = (
    "INSERT INTO main.events (tenant, session_id, seq, type, time, data, source_event_seqs, "
    "surface_op, ignorable) SELECT tenant, session_id, seq, type, time, data, "
    "source_event_seqs, surface_op, ignorable FROM src.events"
)  # call_id is computed by the database, never copied


def build(path: str, count: int) -> None:
    """The source store: one session of ``count`` events and the small ones."""
    with open_store(f"sqlite:///{path}", synchronous="NORMAL") as store:
        big = store.create_session("big")
        seq = 0
        while seq < count:
            big.append_many(agent_events(min(5_000, count - seq - 1), start=seq))
            # A compaction every 5,000 events: the surface stays short however long the log
            # grows, so what the peak follows (the surface) stays the same size.
            nodes = big.surface.nodes
            summary = {
                "id": f"summary-{big.seq}",
                "role": "user",
                "content": [{"type": "text", "text": "summary of the conversation so far"}],
                "source": {"kind": "user"},
            }
            big.append(
                "user/message",
                summary,
                surface_op=Replace(nodes[0], nodes[-1]),
                source_event_seqs=list(nodes),
            )
            seq = big.seq
        for n in range(SMALL_SESSIONS):
            store.create_session(f"small-{n:04d}").append_many(agent_events(SMALL_EVENTS))


def _migrate(source: str, target: str) -> None:
    report = migrate(f"sqlite:///{source}", f"sqlite:///{target}", synchronous="NORMAL")
    assert report.ok and report.copied == SMALL_SESSIONS + 1, report.summary()


def _dance(source: str, target: str) -> None:
    folder = Path(target).with_suffix(".export")
    folder.mkdir()
    with open_store(f"sqlite:///{source}", create=False) as old:
        for info in old.iter_sessions():
            old.export_jsonl(info.id, folder / jsonl_file_name(info.id))
    with open_store(f"sqlite:///{target}", synchronous="NORMAL") as new:
        for path in sorted(folder.glob("*.jsonl")):
            new.import_jsonl(path)


def _raw(source: str, target: str) -> None:
    with open_store(f"sqlite:///{target}"):
        pass  # the empty tables
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("ATTACH DATABASE ? AS src", (source,))
    conn.execute("BEGIN")
    conn.execute("INSERT INTO main.sessions SELECT * FROM src.sessions")
    conn.execute(COPY_EVENTS)
    conn.execute("INSERT INTO main.surface SELECT * FROM src.surface")
    conn.execute("COMMIT")
    conn.close()


def _child(kind: str, source: str, target: str, result: mp.Queue) -> None:  # type: ignore[type-arg]
    traced = kind.endswith("(traced)")
    work = {"migrate": _migrate, "export+import": _dance, "raw copy": _raw}[
        kind.removesuffix(" (traced)")
    ]
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    work(source, target)
    seconds = time.perf_counter() - t0
    if traced:  # the Python heap's peak, in KiB like ru_maxrss
        result.put((seconds, tracemalloc.get_traced_memory()[1] // 1024))
        return
    result.put((seconds, _peak_rss_kib()))


def _peak_rss_kib() -> int:
    """This process's peak resident memory. Not ``ru_maxrss``: Linux carries it across the
    ``exec`` of a spawned child, so it would report the parent's peak (the store builder's)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(kind: str, source: str, workdir: str, n: int) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    target = os.path.join(workdir, f"{kind.replace('+', '-').replace(' ', '-')}-{n}.db")
    child = ctx.Process(target=_child, args=(kind, source, target, result))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"{kind} failed (exit code {child.exitcode})")
    seconds, peak_kib = result.get()
    return seconds, peak_kib


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    workdir = tempfile.mkdtemp(prefix="session-sql-migrate-")
    source = os.path.join(workdir, "source.db")
    build(source, count)
    total = count + SMALL_SESSIONS * SMALL_EVENTS
    print(
        f"source: 1 session of {count} events + {SMALL_SESSIONS} of {SMALL_EVENTS} "
        f"({total} events), SQLite to SQLite, {runs} runs each"
    )
    medians: dict[str, float] = {}
    for kind in ("raw copy", "export+import", "migrate"):
        results = [measure(kind, source, workdir, n) for n in range(runs)]
        medians[kind] = statistics.median(s for s, _ in results)
        peak = max(p for _, p in results) / 1024
        print(
            f"{kind:>14}: median {medians[kind]:7.2f} s  {total / medians[kind]:9.0f} events/s"
            f"  peak {peak:6.1f} MiB  runs {[round(s, 2) for s, _ in results]}"
        )
    print(
        f"migrate / raw copy: {medians['migrate'] / medians['raw copy']:.1f}x; "
        f"migrate / export+import: {medians['migrate'] / medians['export+import']:.2f}x"
    )
    double = os.path.join(workdir, "source2.db")
    build(double, 2 * count)
    for events, store in ((count, source), (2 * count, double)):
        seconds, rss = measure("migrate", store, workdir, 100 + events)
        _, heap = measure("migrate (traced)", store, workdir, 200 + events)
        print(
            f"migrate, {events} events in the large session: {seconds:.2f} s, peak RSS "
            f"{rss / 1024:.1f} MiB, peak Python heap {heap / 1024:.1f} MiB"
        )


if __name__ == "__main__":
    main()
