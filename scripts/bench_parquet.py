"""Parquet writers compared on one SQLite store: rows/s and peak memory (docs/performance.md).

    python scripts/bench_parquet.py [events]

Builds a temporary SQLite store holding one session of N events (default 200,000) of the
bench's agent mix, then runs each way of writing its ``events`` as Parquet in a child process
(so ``ru_maxrss`` is that way's alone):

* ``export_parquet``: the store's export (pyarrow), all five tables, from one snapshot;
* ``export_jsonl``: the JSONL export of the same session, for comparison;
* ``pyarrow``, ``polars``: the events read by the same SQL in pages of 50,000 rows, then
  written by pyarrow's ``ParquetWriter`` a row group per page, or by polars (which has no
  writer to append row groups to: the pages are concatenated and written at the end);
* ``duckdb COPY``: DuckDB attaches the file (its sqlite extension) and copies the events
  joined with their sessions to Parquet, entirely in DuckDB.

Prints one line per way: wall seconds and events/s, CPU seconds and events per CPU second
(steadier on a busy machine), peak RSS in MiB, and the file's size.
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing as mp
import os
import resource
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_import import write_file

from session_sql import open_store

QUERY = (
    "SELECT s.tenant, s.id, e.seq, e.time, e.type, e.ignorable, e.surface_op,"
    " e.source_event_seqs, e.data FROM events e JOIN sessions s USING (session_key)"
    " ORDER BY e.session_key, e.seq"
)
COLUMNS = [
    "tenant",
    "gen_ai.conversation.id",
    "seq",
    "time",
    "type",
    "ignorable",
    "surface_op",
    "source_event_seqs",
    "data",
]
PAGE = 50_000


def pages(db: str) -> Iterator[list[tuple[Any, ...]]]:
    conn = sqlite3.connect(db)
    try:
        cursor = conn.execute(QUERY)
        while rows := cursor.fetchmany(PAGE):
            yield rows
    finally:
        conn.close()


def way_export_parquet(db: str, out: str) -> str:
    with open_store(f"sqlite:///{db}") as store:
        return store.export_parquet(out).files["events"]


def way_export_jsonl(db: str, out: str) -> str:
    path = os.path.join(out, "session.jsonl")
    with open_store(f"sqlite:///{db}") as store:
        store.export_jsonl("import-bench", path)
    return path


def way_pyarrow(db: str, out: str) -> str:
    pa = importlib.import_module("pyarrow")
    pq = importlib.import_module("pyarrow.parquet")
    path = os.path.join(out, "events.parquet")
    writer = None
    for rows in pages(db):
        table = pa.table(dict(zip(COLUMNS, map(list, zip(*rows, strict=True)), strict=True)))
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="zstd")
        writer.write_table(table)
    assert writer is not None
    writer.close()
    return path


def way_polars(db: str, out: str) -> str:
    pl = importlib.import_module("polars")  # not a dependency: pip install polars
    path = os.path.join(out, "events.parquet")
    frames = [pl.DataFrame(rows, schema=COLUMNS, orient="row") for rows in pages(db)]
    pl.concat(frames).write_parquet(path, compression="zstd")
    return path


def way_duckdb(db: str, out: str) -> str:
    duckdb = importlib.import_module("duckdb")
    path = os.path.join(out, "events.parquet")
    config: dict[str, Any] = {}
    spec = importlib.util.find_spec("duckdb_ext")  # the extension's wheel (duckdb-ext-sqlite)
    if spec is not None and spec.submodule_search_locations:
        config["extension_directory"] = os.path.join(
            next(iter(spec.submodule_search_locations)), "extensions"
        )
    con = duckdb.connect(config=config)
    con.execute("INSTALL sqlite")
    con.execute("LOAD sqlite")
    con.execute(f"ATTACH '{db}' AS store (TYPE sqlite, READ_ONLY)")
    con.execute(
        'COPY (SELECT s.tenant, s.id AS "gen_ai.conversation.id", e.seq, e.time, e.type,'
        " e.ignorable, e.surface_op, e.source_event_seqs, e.data FROM store.events e"
        f" JOIN store.sessions s USING (session_key)) TO '{path}' (FORMAT parquet,"
        " COMPRESSION zstd)"
    )
    return path


WAYS: dict[str, Callable[[str, str], str]] = {
    "export_parquet (pyarrow, 5 tables)": way_export_parquet,
    "export_jsonl": way_export_jsonl,
    "pyarrow ParquetWriter": way_pyarrow,
    "polars write_parquet": way_polars,
    "duckdb COPY (sqlite extension)": way_duckdb,
}


def _run(name: str, db: str, out: str, result: mp.Queue) -> None:  # type: ignore[type-arg]
    begun = resource.getrusage(resource.RUSAGE_SELF)
    started = begun.ru_utime + begun.ru_stime
    t0 = time.perf_counter()
    try:
        path = WAYS[name](db, out)
    except Exception as exc:
        result.put(exc)
        return
    seconds = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - started
    result.put((seconds, cpu, usage.ru_maxrss / 1024, os.path.getsize(path)))


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "session.jsonl")
        write_file(source, count)
        db = os.path.join(tmp, "sessions.db")
        with open_store(f"sqlite:///{db}") as store:
            store.import_jsonl(source)
        os.unlink(source)
        print(f"{count:,} events; SQLite file {os.path.getsize(db) / 2**20:.0f} MiB")
        for name in WAYS:
            out = tempfile.mkdtemp(dir=tmp)
            queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            child = mp.get_context("fork").Process(target=_run, args=(name, db, out, queue))
            child.start()
            got = queue.get()
            child.join()
            if isinstance(got, Exception):
                print(f"{name:38} failed: {got}")
                continue
            seconds, cpu, peak, size = got
            print(
                f"{name:38} {seconds:6.2f} s {count / seconds:>10,.0f} events/s"
                f"  CPU {cpu:6.2f} s {count / cpu:>10,.0f} events/CPU-s"
                f"  peak RSS {peak:5.0f} MiB  file {size / 2**20:5.1f} MiB"
            )


if __name__ == "__main__":
    main()
