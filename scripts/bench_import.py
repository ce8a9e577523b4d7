"""Import speed and peak memory: a JSONL session of N events (default 1,000,000) into a store.

    python scripts/bench_import.py [URL] [events]

URL defaults to a temporary SQLite file; a postgresql:// URL imports into a throwaway schema
(dropped afterwards). The file is the bench's agent mix (messages, chunks, tool calls and
results), written once to a temporary directory. The import runs in a child process, so its
peak resident memory (``ru_maxrss``) is the import's alone. Prints events/s and the peak.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
import uuid

from sqlalchemy import create_engine, make_url, text

from session_sql import open_store
from session_sql.cli.bench import agent_events
from session_sql.jsonl import dumps_line
from session_sql.session import Session


def write_file(path: str, count: int) -> None:
    """The JSONL export of a session of ``count`` events of the agent mix, streamed."""
    header = Session("import-bench").header
    with open(path, "w", encoding="utf-8") as out:
        out.write(dumps_line(header))
        seq = 0
        while seq < count:
            block = agent_events(min(10_000, count - seq), start=seq)
            for item in block:
                wire: dict[str, object] = {
                    "type": item["type"],
                    "seq": seq,
                    "time": 1_700_000_000_000 + seq,
                    "data": item["data"],
                }
                op = item.get("surface_op")
                if op is not None:
                    wire["surfaceOp"] = op
                sources = item.get("source_event_seqs")
                if sources is not None:
                    wire["sourceEventSeqs"] = sources
                out.write(dumps_line(wire))
                seq += 1


def _import(url: str, schema: str, path: str, result: mp.Queue) -> None:  # type: ignore[type-arg]
    with open_store(url, schema=schema) as store:
        t0 = time.perf_counter()
        store.import_jsonl(path)
        seconds = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.put((seconds, peak_kib))


def main() -> None:
    url = (sys.argv[1] or None) if len(sys.argv) > 1 else None
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    workdir = tempfile.mkdtemp(prefix="session-sql-import-")
    path = os.path.join(workdir, "session.jsonl")
    schema = f"import_{uuid.uuid4().hex[:8]}"
    if url is None:
        url = f"sqlite:///{workdir}/store.db"
    try:
        write_file(path, count)
        size = os.path.getsize(path)
        ctx = mp.get_context("spawn")
        result = ctx.Queue()
        child = ctx.Process(target=_import, args=(url, schema, path, result))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise SystemExit(f"the import failed (exit code {child.exitcode})")
        seconds, peak_kib = result.get(timeout=10)
        print(
            f"{count:,} events ({size / 1e6:.0f} MB of JSONL) in {seconds:.1f} s: "
            f"{count / seconds:,.0f} events/s, peak RSS {peak_kib / 1024:.0f} MB"
        )
    finally:
        if make_url(url).get_backend_name() == "postgresql":
            engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
            with engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            engine.dispose()
        for name in os.listdir(workdir):
            os.remove(os.path.join(workdir, name))
        os.rmdir(workdir)


if __name__ == "__main__":
    main()
