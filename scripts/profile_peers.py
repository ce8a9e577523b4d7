"""Where the time of each ``bench_peers.py`` row goes: sampled profiles, split into phases.

    cd scripts && ../.venv/bin/python profile_peers.py [--url URL] [--impls adapter,store,raw]
        [--rows singles,batch,load,last20,open] [--batch 5000] [--singles 500] [--native]
        [--out DIR]
    ../.venv/bin/python profile_peers.py --report DIR    # the summary again, from saved stacks

Each (implementation, row) runs in a process of its own under ``py-spy record --threads``
(on-CPU samples, so the shares hold on a busy machine; ``--native`` adds the C frames: the
driver, the JSON codecs, the commit). The data a read row reads is written first by another,
unprofiled process. Kept: the samples whose stack passes through the row's own function
(``_row_<name>``), and those that do not start at the script (the store's worker threads,
SQLAlchemy's asyncio greenlets); a blocked thread and a native stack with no Python frame
are counted apart. Implementations: ``adapter`` (``SessionSQLSession``, the OpenAI Agents
SDK adapter, as ``bench_peers.py`` times it), ``store`` (the native API:
``create_session().append_many``, ``messages``, ``messages(last=20)`` and ``load_session``,
``open_store`` + ``messages(last=1)``) and ``raw`` (``bench_peers.py``'s driver baseline).
Prints, per row, the child's CPU time of the row (``time.process_time``, all threads), the
share of samples per phase (``PHASES``: the innermost frame that matches a rule names the
phase) and the top functions by own time. ``--out`` keeps the collapsed stacks, one file
per row (for a flame graph). PostgreSQL runs use a throwaway schema, dropped after. The
server's side (``pg_stat_statements``, ``EXPLAIN (ANALYZE, BUFFERS)``) is described in
docs/performance.md, "Against the peers: where the time goes".
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from bench_openai_agents import item
from bench_peers import RawPostgres, RawSQLite

from session_sql import open_store
from session_sql.integrations.openai_agents import SessionSQLSession

ROWS = ("singles", "batch", "load", "last20", "open")
PY_SPY = Path(sys.executable).with_name("py-spy")
if not PY_SPY.exists():  # installed elsewhere (on the PATH)
    PY_SPY = Path(shutil.which("py-spy") or PY_SPY)

# (phase, regex on "function (file:line)"), tried on each frame from the innermost outwards;
# the first frame that matches any rule names the sample's phase (rules in order per frame).
PHASES: list[tuple[str, str]] = [
    ("open: schema gate / reflection", r"_store/gate\.py|reflection|Inspector|_store/schema\.py"),
    ("commit / fsync", r"commit|COMMIT|fsync|fdatasync|WalSync|pwrite"),
    ("connect / pool", r"sqlalchemy/pool/|\bconnect \(|_connect \(|make_engine|create_engine"),
    ("JSON (orjson / json, C)", r"orjson|json/|_json\.c"),
    ("SQL execution (driver)", r"psycopg|libpq|sqlite3|pysqlite|stmt_|aiosqlite|\(cursor\.c"),
    ("SQLAlchemy compile / execute", r"sqlalchemy/"),
    ("validation / snapshot_json", r"jsonvalue\.py|jsoncodec\.py|snapshot_json|messages\.py"),
    ("surface rules / planning", r"surface\.py|rules\.py|_store/plan|catalog"),
    ("row encoding (append)", r"_store/appends/|_store/rows|pending\.py"),
    ("decode / projection (read)", r"_store/reader\.py|_store/views\.py|_store/quick\.py|thaw"),
    ("adapter mapping (items <-> events)", r"_openai_agents_mapping\.py|openai_agents\.py"),
    ("thread hop / event loop", r"running\.py|asyncio/|threading\.py|concurrent/|loopsafe"),
    ("session handle / store", r"session_sql/"),
    ("the bench itself", r"profile_peers\.py|bench_peers\.py|bench_openai_agents\.py"),
]
WAIT = re.compile(
    r"SimpleQueue_get|lock_PyThread_acquire|acquire_timed|PyCOND_|epoll_wait|select \(|"
    r"poll \(|sock_call_ex|sock_recv|_wait_for|pq_wait|libpq.*wait|pthread_cond"
)
"""Innermost frames of a thread that is blocked (a queue, a lock, a socket): py-spy with
``--native`` cannot always tell them from running ones, so they are counted apart."""
FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>.*?):(?P<line>\d+)\)$")


# -- the child: one row, its data already written -------------------------------------------


def _impl(name: str, url: str, schema: str) -> Any:
    """A factory of session objects (``adapter``/``raw``) or an opener (``store``)."""
    pg = url.startswith("postgresql")
    opts = {"schema": f"{schema}_ours"} if pg else {}  # the store's tables apart from raw's
    if name == "adapter":
        return lambda sid: SessionSQLSession.from_url(sid, url, **opts)
    if name == "raw":
        if pg:
            raw = RawPostgres.__new__(RawPostgres)
            raw.dsn, raw.schema = url.replace("postgresql+psycopg://", "postgresql://"), schema
            return raw.session
        return RawSQLite(Path(url.removeprefix("sqlite:///") + "-raw")).session  # a file apart
    return lambda: open_store(url, **opts)


def _events(n: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "user/message",
            "data": {
                "id": f"m{i}",
                "role": "user",
                "content": [{"type": "text", "text": f"question {i}: the weather in city {i}?"}],
                "source": {"kind": "user"},
            },
            "surface_op": "append",
        }
        for i in range(n)
    ]


async def _close(s: Any) -> None:
    result = s.close()
    if asyncio.iscoroutine(result):
        await result


async def _prepare(impl: str, url: str, schema: str, batch: int) -> str:
    """Writes the session the read rows read; returns its id."""
    if impl == "store":
        store = _impl(impl, url, schema)()
        with store:
            handle = store.create_session()
            handle.append_many(_events(batch))
            return str(handle.id)
    sid = f"read-{uuid.uuid4().hex[:8]}"
    s = _impl(impl, url, schema)(sid)
    await s.add_items([item(n) for n in range(batch)])
    await _close(s)
    return sid


async def _row(
    impl: str, row: str, url: str, schema: str, sid: str, a: argparse.Namespace
) -> float:
    """Runs the row (setup outside ``_row_*``); returns its CPU seconds."""
    make = _impl(impl, url, schema)
    if impl == "store":
        return _store_row(make, row, sid, a)
    if row in ("singles", "batch"):
        s = make(f"w-{uuid.uuid4().hex[:8]}")
        await s.add_items([item(0)])  # open, statements ready
        if row == "singles":
            return await _row_singles([[item(n)] for n in range(1, a.singles + 1)], s)
        cpu = await _row_batch([item(n) for n in range(a.batch)], s)
        await _close(s)
        return cpu
    if row == "open":
        return await _row_open(make, sid)
    s = make(sid)
    await s.get_items(limit=1)
    return await (_row_load(s) if row == "load" else _row_last20(s))


async def _row_singles(batches: list[list[Any]], s: Any) -> float:
    c = time.process_time()
    for b in batches:
        await s.add_items(b)
    return time.process_time() - c


async def _row_batch(items: list[Any], s: Any) -> float:
    c = time.process_time()
    for _ in range(3):
        await s.add_items(items)
    return time.process_time() - c


async def _row_load(s: Any) -> float:
    c = time.process_time()
    for _ in range(10):
        await s.get_items()
    return time.process_time() - c


async def _row_last20(s: Any) -> float:
    c = time.process_time()
    for _ in range(1000):
        await s.get_items(limit=20)
    return time.process_time() - c


async def _row_open(make: Any, sid: str) -> float:
    c = time.process_time()
    for _ in range(30):
        s = make(sid)
        await s.get_items(limit=1)
        await _close(s)
    return time.process_time() - c


def _store_row(open_: Any, row: str, sid: str, a: argparse.Namespace) -> float:
    if row == "open":
        return _row_store_open(open_, sid)
    with open_() as store:
        if row == "singles":
            h = store.create_session()
            h.append_many(_events(1))
            return _row_store_singles(h, _events(a.singles))
        if row == "batch":
            return _row_store_batch(store, _events(a.batch))
        store.messages(sid, last=1)
        return _row_store_load(store, sid) if row == "load" else _row_store_last20(store, sid)


def _row_store_singles(h: Any, events: list[dict[str, Any]]) -> float:
    c = time.process_time()
    for e in events:
        h.append_many([e])
    return time.process_time() - c


def _row_store_batch(store: Any, events: list[dict[str, Any]]) -> float:
    handles = [store.create_session() for _ in range(3)]
    c = time.process_time()
    for h in handles:
        h.append_many(events)
    return time.process_time() - c


def _row_store_load(store: Any, sid: str) -> float:
    c = time.process_time()
    for _ in range(10):
        store.messages(sid)
    for _ in range(10):
        store.load_session(sid)
    return time.process_time() - c


def _row_store_last20(store: Any, sid: str) -> float:
    c = time.process_time()
    for _ in range(1000):
        store.messages(sid, last=20)
    return time.process_time() - c


def _row_store_open(open_: Any, sid: str) -> float:
    c = time.process_time()
    for _ in range(30):
        with open_() as store:
            store.messages(sid, last=1)
    return time.process_time() - c


# -- the parent: py-spy around each child, the samples classified --------------------------


def _phase(stack: list[str]) -> str:
    for frame in reversed(stack):  # innermost first
        for phase, pattern in PHASES:
            if re.search(pattern, frame):
                return phase
    return "other"


def _summarise(raw: str) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Samples per phase and per innermost frame; blocked samples under ``waiting``."""
    phases: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        frames = stack_text.split(";")
        count = int(count_text)
        in_row = any(f.startswith(("_row_", "_row_store_")) and "_row (" not in f for f in frames)
        if not in_row and any(f.startswith("<module> (") for f in frames):
            continue  # the main thread outside the row: imports, setup
        # Kept besides the row's own stacks: those that do not start at the script (the
        # store's worker threads, and the greenlets of SQLAlchemy's asyncio bridge, whose
        # native stacks begin afresh).
        frames = [f for f in frames if FRAME.match(f)]
        if frames and WAIT.search(frames[-1]):
            phases["(apart) waiting: blocked on a queue, lock, socket"] += count
            continue
        if not any(".py:" in f for f in frames):
            phases["(apart) no Python frame: native stack py-spy could not tie to one"] += count
            continue
        total += count
        phases[_phase(frames)] += count
        if frames:
            m = FRAME.match(frames[-1])
            assert m is not None
            where = "/".join(Path(m["file"]).parts[-2:])
            own[f"{m['fn']} ({where}:{m['line']})"] += count
    return phases, own, total


def _child_cmd(a: argparse.Namespace, impl: str, row: str, sid: str, mode: str) -> list[str]:
    return [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--url",
        a.url,
        "--schema",
        a.schema,
        "--impls",
        impl,
        "--rows",
        row,
        "--sid",
        sid,
        "--batch",
        str(a.batch),
        "--singles",
        str(a.singles),
    ]


def _parent(a: argparse.Namespace) -> None:
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="profile-peers-"))
    out.mkdir(parents=True, exist_ok=True)
    for impl in a.impls.split(","):
        sid = ""
        for row in a.rows.split(","):
            if row in ("load", "last20", "open") and not sid:
                done = subprocess.run(
                    _child_cmd(a, impl, row, "", "prepare"),
                    check=True,
                    capture_output=True,
                    text=True,
                )
                sid = done.stdout.strip().splitlines()[-1]
            path = out / f"{impl}-{row}.txt"
            cmd = [
                str(PY_SPY),
                "record",
                "--threads",
                "--full-filenames",
                *a.spy,
                "-r",
                str(a.rate),
                "-f",
                "raw",
                "-o",
            ]
            cmd += [str(path), "--", *_child_cmd(a, impl, row, sid, "row")]
            done = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if done.returncode:
                print(done.stdout, done.stderr, file=sys.stderr)
                continue
            cpu = float(re.findall(r"CPU=([0-9.e-]+)", done.stdout)[-1])
            print(f"\n## {impl} / {row}: row CPU {cpu * 1000:.1f} ms")
            _report(path, a.top)


def _report(path: Path, top: int) -> None:
    phases, own, total = _summarise(path.read_text())
    print(f"  {total} busy samples (shares of them; blocked ones apart)")
    for phase, n in phases.most_common():
        if phase.startswith("(apart)"):
            print(f"  {n:6d}  samples {phase}")
        else:
            print(f"  {100 * n / max(total, 1):5.1f}%  {phase}")
    print("  top own time:")
    for fn, n in own.most_common(top):
        print(f"  {100 * n / max(total, 1):5.1f}%  {fn}")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="")
    p.add_argument("--schema", default="")
    p.add_argument("--impls", default="adapter,store,raw")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--batch", type=int, default=5000)
    p.add_argument("--singles", type=int, default=500)
    p.add_argument("--rate", type=int, default=250, help="samples per second")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--out", default="")
    p.add_argument("--report", default="", help="summarise the stacks saved in this --out")
    p.add_argument("--native", action="store_true", help="py-spy --native: C frames too")
    p.add_argument("--sid", default="")
    p.add_argument("--child", choices=("prepare", "row"), default=None)
    a = p.parse_args()
    a.spy = ["--native"] if a.native else []
    if a.report:
        for path in sorted(Path(a.report).glob("*.txt")):
            print(f"\n## {path.stem}")
            _report(path, a.top)
        return
    if a.child:
        if a.child == "prepare":
            print(asyncio.run(_prepare(a.impls, a.url, a.schema, a.batch)))
        else:
            print(f"CPU={asyncio.run(_row(a.impls, a.rows, a.url, a.schema, a.sid, a))}")
        return
    tmp = tempfile.TemporaryDirectory()
    if not a.url:
        a.url = f"sqlite:///{tmp.name}/peers.db"
    schema = dsn = ""
    if a.url.startswith("postgresql"):
        schema = a.schema or f"prof_{uuid.uuid4().hex[:8]}"
        dsn = a.url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{schema}".items (session TEXT NOT NULL, '
                "seq BIGINT NOT NULL, item TEXT NOT NULL, PRIMARY KEY (session, seq))"
            )
    a.schema = schema
    try:
        _parent(a)
    finally:
        if schema:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}_ours" CASCADE')
        tmp.cleanup()


if __name__ == "__main__":
    main()
