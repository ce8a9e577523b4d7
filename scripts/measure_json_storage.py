"""Measure the storage options for ``events.data`` and the events key layout (schema version 5).

    python scripts/measure_json_storage.py --events 100000 \\
        --url postgresql://postgres@127.0.0.1:5432/test

Input for choosing how the next schema version keeps every JSON value byte for byte; it
changes nothing in a store. Each option gets a throwaway PostgreSQL schema (named
``json_storage_<pid>_<option>``, dropped at the end) holding a minimal ``sessions`` table and an
``events`` table with the store's columns, primary key, foreign key, generated ``call_id`` and
indexes, differing only in the type of ``data`` (or, for the key-layout rows, in the key).
SQLite runs the same on a temporary file. The events are the store's 16-event turn (a user
message, streamed chunks, replies, a tool call and its result, an occasional pruning), 10 turns
per session, compact JSON whose object keys are *not* in sorted order.

For each option it prints, as Markdown tables: bytes per event on disk (heap, TOAST, each
index), COPY and multi-row INSERT rates, a fetch + ``json.loads`` of 20k rows and how many of
them come back byte-identical, whether the analytics views and docs/sql.md recipes run
unchanged, the time of three of them, and what happens to a ``\\u0000`` in a string. Only
plain psycopg and sqlite3 are used, plus the public view texts of ``session_sql.schema``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from session_sql.schema import views_for  # noqa: E402

TURN_EVENTS = 16
TURNS_PER_SESSION = 10
RECIPE = re.compile(
    r"```sql\n-- recipe: (?P<name>[a-z0-9-]+)(?: \((?P<dialect>sqlite|postgresql)\))?\n"
    r"(?P<body>.*?)```",
    re.S,
)
Row = tuple[str, str, int, str, int, str, str | None, str | None, None]
"""(tenant, session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable)."""


@dataclass(frozen=True)
class Option:
    """One way to store ``data`` on PostgreSQL: its column DDL and how queries read it."""

    name: str
    columns: str
    """The DDL of ``data`` (and any column kept beside it)."""
    json_expr: str
    """How a query gets a JSON value from the row aliased ``{a}``."""
    text_back: str
    """What a reader selects to get the JSON text back."""


PG_OPTIONS = (
    Option("jsonb (today)", "data JSONB NOT NULL", "{a}.data", "data::text"),
    Option("json", "data JSON NOT NULL", "{a}.data", "data::text"),
    Option("text, cast to json", "data TEXT NOT NULL", "CAST({a}.data AS JSON)", "data"),
    Option("text, cast to jsonb", "data TEXT NOT NULL", "CAST({a}.data AS JSONB)", "data"),
    Option(
        "text + generated jsonb",
        "data TEXT NOT NULL, data_b JSONB GENERATED ALWAYS AS (CAST(data AS JSONB)) STORED",
        "{a}.data_b",
        "data",
    ),
)


def _turn(session: str, turn: int, base: int, at: int) -> Iterator[Row]:
    """The 16 events of one turn, as the store writes them (keys in the writer's order)."""
    call = f"call-{turn}"
    tool = ("shell", "read_file", "edit_file", "search", "web_fetch")[turn % 5]

    def dumps(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def where(step: int) -> dict[str, int]:
        return {"turn": turn, "step": step}

    def reply(seq: int, step: int) -> dict[str, Any]:
        return {
            **where(step),
            "message": {
                "id": f"a{seq}",
                "role": "assistant",
                "content": [{"type": "text", "text": "word " * 8}],
                "source": {"kind": "model", "provider": "openai", "model": "gpt-test"},
            },
            "usage": {"inputTokens": 1000, "outputTokens": 50},
        }

    def result(seq: int, body: str, error: bool) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "tool-result", "toolCallId": call, "content": [body]}
        if error:
            block["isError"] = True
        return {
            **where(1),
            "message": {
                "id": f"r{seq}",
                "role": "user",
                "content": [block],
                "source": {"kind": "tool", "callId": call},
            },
        }

    prune = turn % 8 == 0
    rows: list[tuple[str, Any, str | None, str | None]] = [
        ("turn/start", {"turn": turn}, None, None),
        (
            "user/message",
            {"id": f"u{base + 1}", "role": "user", "content": [{"type": "text", "text": "go on"}]},
            None,
            '"append"',
        ),
        ("step/start", where(1), None, None),
        *(("assistant/chunk", {**where(1), "chunk": "word "}, None, None) for _ in range(4)),
        (
            "assistant/message",
            reply(base + 7, 1),
            f"[{base + 3},{base + 4},{base + 5}]",
            '"append"',
        ),
        ("tool/call", {**where(1), "callId": call, "name": tool, "arguments": "{}"}, None, None),
        (
            "tool/result",
            result(base + 9, "output line " * 40, turn % 10 == 0),
            f"[{base + 8}]",
            '"append"',
        ),
        (
            ("tool/result", result(base + 10, "[pruned]", False), f"[{base + 9}]", "__R__")
            if prune
            else ("step/end", where(1), None, None)
        ),
        ("step/start", where(2), None, None),
        ("assistant/chunk", {**where(2), "chunk": "ok"}, None, None),
        ("assistant/message", reply(base + 13, 2), f"[{base + 12}]", '"append"'),
        ("step/end", where(2), None, None),
        ("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None, None),
    ]
    replace = dumps({"op": "replace", "start": base + 9, "end": base + 9})
    for offset, (type_, data, sources, marker) in enumerate(rows):
        op = replace if marker == "__R__" else marker
        seq = base + offset
        yield ("", session, seq, type_, at + 10 * seq, dumps(data), sources, op, None)


def generate(events: int) -> tuple[list[str], list[Row]]:
    """``events`` rows (rounded up to whole sessions) and the sessions' 32-character ids."""
    per_session = TURN_EVENTS * TURNS_PER_SESSION
    sessions = [uuid.UUID(int=i + 1).hex for i in range(-(-events // per_session))]
    rows: list[Row] = []
    at = 1_700_000_000_000
    for sid in sessions:
        for t in range(TURNS_PER_SESSION):
            rows.extend(_turn(sid, t + 1, TURN_EVENTS * t, at))
    return sessions, rows


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _median(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# --- PostgreSQL -------------------------------------------------------------------------------

_CALL_ID = (
    "call_id TEXT GENERATED ALWAYS AS (CASE WHEN type = 'tool/call' THEN {j} ->> 'callId' "
    "WHEN type = 'tool/result' THEN {j} #>> '{{message,source,callId}}' END) STORED"
)


def _pg_ddl(option: Option) -> list[str]:
    """sessions + events as in schema version 4, ``data`` declared as ``option`` says."""
    j = option.json_expr.format(a="events")
    if "data_b" in j:  # a generated column cannot read another one
        j = "CAST(data AS JSONB)"
    return [
        "CREATE TABLE sessions (tenant TEXT DEFAULT '' NOT NULL, id TEXT NOT NULL, "
        "head_seq BIGINT NOT NULL, inherited_event_count BIGINT NOT NULL, "
        "PRIMARY KEY (tenant, id))",
        "CREATE TABLE events (tenant TEXT DEFAULT '' NOT NULL, session_id TEXT NOT NULL, "
        f"seq BIGINT NOT NULL, type TEXT NOT NULL, time BIGINT NOT NULL, {option.columns}, "
        "source_event_seqs TEXT, surface_op TEXT, ignorable BOOLEAN, "
        + _CALL_ID.format(j=j.replace("events.", ""))
        + ", CONSTRAINT pk_events PRIMARY KEY (tenant, session_id, seq), "
        "FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE)",
        "CREATE INDEX ix_events_call_id ON events (tenant, session_id, call_id, type) "
        "WHERE call_id IS NOT NULL",
        "CREATE INDEX ix_events_type ON events (type, tenant, session_id, seq)",
    ]


_COLS = "tenant, session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable"


def _sizes(conn: psycopg.Connection[Any], table: str, events: int) -> dict[str, float]:
    """Bytes per event of the heap, TOAST (+ its index) and each index of ``table``."""
    out: dict[str, float] = {}
    row = conn.execute(
        "SELECT pg_relation_size(c.oid), COALESCE(pg_total_relation_size(c.reltoastrelid), 0), "
        "pg_total_relation_size(c.oid) FROM pg_class c WHERE c.oid = %s::regclass",
        (table,),
    ).fetchone()
    assert row is not None
    out["heap"], out["toast"], out["total"] = (v / events for v in row)
    for name, size in conn.execute(
        "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid) FROM pg_index i "
        "WHERE i.indrelid = %s::regclass ORDER BY 1",
        (table,),
    ):
        out[name.rsplit(".", 1)[-1]] = size / events
    return out


def _multirow_insert(conn: psycopg.Connection[Any], rows: Sequence[Row], batch: int) -> float:
    """Rows/s of ``INSERT ... VALUES (...), (...)`` in batches of ``batch``, one transaction."""
    one = "(" + ", ".join(["%s"] * 9) + ")"
    start = time.perf_counter()
    with conn.cursor() as cur:
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            sql = f"INSERT INTO events ({_COLS}) VALUES " + ", ".join([one] * len(chunk))
            cur.execute(sql, [v for r in chunk for v in r])
    conn.commit()
    return len(rows) / (time.perf_counter() - start)


def _copy(conn: psycopg.Connection[Any], rows: Sequence[Row]) -> float:
    start = time.perf_counter()
    with conn.cursor() as cur, cur.copy(f"COPY events ({_COLS}) FROM STDIN") as copy:
        for r in rows:
            copy.write_row(r)
    conn.commit()
    return len(rows) / (time.perf_counter() - start)


def _port(sql: str, option: Option) -> str:
    """``sql`` with every ``x.data`` read through ``option.json_expr``."""
    if option.json_expr == "{a}.data":
        return sql
    out = re.sub(r"\b([a-z])\.data\b", lambda m: option.json_expr.format(a=m[1]), sql)
    # A subquery that passes ``data`` on (turns) passes the column the option reads.
    return out.replace(" AS data,", " AS data_b,") if "data_b" in option.json_expr else out


def _documented_sql() -> list[tuple[str, str]]:
    """(name, PostgreSQL SQL) of every analytics view and docs/sql.md recipe."""
    out = [
        (f"view {v.name}", f"SELECT COUNT(*) FROM ({v.selects['postgresql'].format(p='')}) q")
        for v in views_for()
    ]
    text = (ROOT / "docs" / "sql.md").read_text(encoding="utf-8")
    for m in RECIPE.finditer(text):
        if m["dialect"] in (None, "postgresql"):
            body = m["body"].strip().rstrip(";")
            out.append((f"recipe {m['name']}", f"SELECT COUNT(*) FROM ({body}) q"))
    return out


TIMED = ("view tool_calls", "view turns", "recipe tokens-per-session-and-model")
"""The queries timed, in the order ``_documented_sql`` yields them (views, then recipes)."""


def _runs(conn: psycopg.Connection[Any], sql: str) -> bool:
    try:
        conn.execute(sql).fetchall()
        return True
    except psycopg.Error:
        return False
    finally:
        conn.rollback()


def _nul_check_pg(conn: psycopg.Connection[Any], option: Option) -> str:
    """What the column does with ``{"s": "a\\u0000b"}``: stored? read back? ``->>``?"""
    doc = '{"s":"a\\u0000b"}'
    try:
        conn.execute(
            f"INSERT INTO events ({_COLS}) VALUES ('', %s, -1, 'x', 0, %s, NULL, NULL, NULL)",
            (conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0], doc),  # type: ignore[index]
        )
    except psycopg.Error as exc:
        conn.rollback()
        return f"refused ({type(exc).__name__}: {str(exc).splitlines()[0]})"
    back = conn.execute(f"SELECT {option.text_back} FROM events WHERE seq = -1").fetchone()
    same = back is not None and back[0] == doc
    j = option.json_expr.format(a="events")
    try:
        got = conn.execute(f"SELECT {j} ->> 's' FROM events WHERE seq = -1").fetchone()
        arrow = f"`->>` gives {got[0]!r}" if got else "?"
    except psycopg.Error as exc:
        conn.rollback()
        arrow = f"`->>` fails ({str(exc).splitlines()[0]})"
    conn.rollback()
    return f"stored, text back {'identical' if same else 'differs'}; {arrow}"


def measure_pg(url: str, rows: Sequence[Row], sessions: Sequence[str], args: Any) -> None:
    prefix = f"json_storage_{os.getpid()}"
    documented = _documented_sql()
    size_rows, speed_rows, compat_rows, nul_rows = [], [], [], []
    timing_rows: list[list[object]] = []
    all_sizes: dict[str, dict[str, float]] = {}
    n = len(rows)
    compact = sum(len(r[5].encode()) for r in rows) / n
    read_rows = rows[: args.read]
    with psycopg.connect(url) as conn:
        try:
            for i, option in enumerate(PG_OPTIONS):
                schema = f"{prefix}_{i}"
                conn.execute(f"CREATE SCHEMA {schema}")
                conn.execute(f"SET search_path TO {schema}")
                for stmt in _pg_ddl(option):
                    conn.execute(stmt)
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO sessions VALUES ('', %s, %s, 0)",
                        [(s, TURN_EVENTS * TURNS_PER_SESSION - 1) for s in sessions],
                    )
                conn.commit()
                copy_rate = _copy(conn, rows)
                conn.autocommit = True
                conn.execute("VACUUM ANALYZE events")
                conn.autocommit = False
                sz = _sizes(conn, "events", n)
                all_sizes[option.name] = sz
                col = conn.execute(
                    "SELECT AVG(pg_column_size(data)) FROM events"
                    + (" " if "data_b" not in option.columns else "")
                ).fetchone()
                colb = (
                    conn.execute("SELECT AVG(pg_column_size(data_b)) FROM events").fetchone()
                    if "data_b" in option.columns
                    else None
                )
                conn.commit()
                size_rows.append(
                    [
                        option.name,
                        f"{float(col[0]):.0f}" if col else "?",
                        f"{float(colb[0]):.0f}" if colb else "",
                        f"{sz['heap']:.0f}",
                        f"{sz['toast']:.0f}",
                        f"{sz['pk_events']:.0f}",
                        f"{sz['ix_events_type']:.0f}",
                        f"{sz['ix_events_call_id']:.1f}",
                        f"{sz['total']:.0f}",
                        f"{sz['total'] / compact:.2f}×",
                    ]
                )
                # Read: the first sessions in log order, data as the reader gets it, parsed.
                limit = len(read_rows)
                sql = (
                    f"SELECT seq, type, time, {option.text_back} FROM events "
                    "ORDER BY tenant, session_id, seq LIMIT %s"
                )

                def read(sql: str = sql, limit: int = limit) -> list[Any]:
                    got = conn.execute(sql, (limit,)).fetchall()
                    conn.commit()
                    return [json.loads(r[3]) for r in got]

                read_s = _median(read, args.repeat)
                back = conn.execute(sql, (limit,)).fetchall()
                conn.commit()
                same = sum(1 for b, r in zip(back, read_rows, strict=True) if b[3] == r[5])
                # Analytics: unchanged text first, then read through the option's expression.
                works = []
                if i == 0:  # only what the two tables here can answer
                    documented = [(nm, q) for nm, q in documented if _runs(conn, q)]
                for name, q in documented:
                    try:
                        conn.execute(q).fetchall()
                        works.append((name, "as is"))
                    except psycopg.Error as exc:
                        conn.rollback()
                        try:
                            conn.execute(_port(q, option)).fetchall()
                            works.append((name, "needs a cast (" + str(exc).splitlines()[0] + ")"))
                        except psycopg.Error as exc2:
                            conn.rollback()
                            works.append((name, "FAILS: " + str(exc2).splitlines()[0]))
                    conn.commit()
                compat_rows.append([option.name, "; ".join(f"{a}: {b}" for a, b in works)])
                timed = []
                for name, q in documented:
                    if name in TIMED:
                        q2 = _port(q, option)
                        q2 = q2.replace("-> 'isError' = 'true'", "->> 'isError' = 'true'")

                        def run(q2: str = q2) -> None:
                            conn.execute(q2).fetchall()
                            conn.commit()

                        timed.append(f"{_median(run, args.repeat):.3f}")
                timing_rows.append([option.name, *timed])
                nul_rows.append([option.name, _nul_check_pg(conn, option)])
                # Multi-row INSERT of the first --insert rows into an empty table.
                conn.execute("TRUNCATE events")
                conn.commit()
                ins_rate = _multirow_insert(conn, rows[: args.insert], args.batch)
                speed_rows.append(
                    [
                        option.name,
                        f"{copy_rate:,.0f}",
                        f"{ins_rate:,.0f}",
                        f"{read_s * 1000:.0f}",
                        f"{same}/{limit}",
                    ]
                )
                print(f"  {option.name}: done (load {_load()})", file=sys.stderr)
            key_rows = _pg_keys(conn, prefix, rows, sessions, compact, all_sizes["json"])
        finally:
            conn.rollback()
            for (s,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (prefix + "%",)
            ).fetchall():
                conn.execute(f"DROP SCHEMA {s} CASCADE")
            conn.commit()
    print(f"\n### PostgreSQL: bytes per event ({n:,} events, compact JSON {compact:.0f} B)\n")
    print(
        _table(
            (
                "option",
                "pg_column_size(data)",
                "… (data_b)",
                "heap",
                "TOAST",
                "pk_events",
                "ix_events_type",
                "ix call_id",
                "total",
                "total / compact JSON",
            ),
            size_rows,
        )
    )
    print(f"\n### PostgreSQL: write and read ({args.insert:,} rows by INSERT, {args.batch}/stmt)\n")
    print(
        _table(
            (
                "option",
                "COPY rows/s",
                "multi-row INSERT rows/s",
                f"fetch + json.loads {len(read_rows):,} rows, ms",
                "rows read back byte-identical",
            ),
            speed_rows,
        )
    )
    print(f"\n### PostgreSQL: analytics, median of {args.repeat}, seconds\n")
    print(_table(("option", *TIMED), timing_rows))
    print("\n### PostgreSQL: the documented SQL unchanged\n")
    print(_table(("option", "result"), compat_rows))
    print('\n### PostgreSQL: `{"s":"a\\u0000b"}`\n')
    print(_table(("option", "result"), nul_rows))
    print("\n### PostgreSQL: key layout (data json)\n")
    print(_table(("layout", "heap", "primary key", "ix type", "ix call_id", "total"), key_rows))


def _pg_keys(
    conn: psycopg.Connection[Any],
    prefix: str,
    rows: Sequence[Row],
    sessions: Sequence[str],
    compact: float,
    today: dict[str, float],
) -> list[list[object]]:
    """Bytes per event with today's text keys vs a bigint session key (tenant out of indexes),
    and without ``ix_events_type``."""
    n = len(rows)
    out: list[list[object]] = []
    schema = f"{prefix}_keys"
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"SET search_path TO {schema}")
    conn.execute(
        "CREATE TABLE events (session_key BIGINT NOT NULL, seq BIGINT NOT NULL, "
        "type TEXT NOT NULL, time BIGINT NOT NULL, data JSON NOT NULL, source_event_seqs TEXT, "
        "surface_op TEXT, ignorable BOOLEAN, "
        + _CALL_ID.format(j="data")
        + ", CONSTRAINT pk_events PRIMARY KEY (session_key, seq))"
    )
    conn.execute(
        "CREATE INDEX ix_events_call_id ON events (session_key, call_id, type) "
        "WHERE call_id IS NOT NULL"
    )
    conn.execute("CREATE INDEX ix_events_type ON events (type, session_key, seq)")
    key = {s: i + 1 for i, s in enumerate(sessions)}
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY events (session_key, seq, type, time, data, source_event_seqs, surface_op, "
            "ignorable) FROM STDIN"
        ) as copy,
    ):
        for r in rows:
            copy.write_row((key[r[1]], *r[2:]))
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE events")
    conn.autocommit = False
    sz = _sizes(conn, "events", n)
    conn.commit()
    for name, s in (("tenant + 32-char text id (today)", today), ("bigint session key", sz)):
        out.append(
            [
                name,
                f"{s['heap']:.0f}",
                f"{s['pk_events']:.1f}",
                f"{s['ix_events_type']:.1f}",
                f"{s['ix_events_call_id']:.1f}",
                f"{s['total']:.0f} ({s['total'] / compact:.2f}×)",
            ]
        )
    no_type = sz["total"] - sz["ix_events_type"]
    out.append(
        [
            "bigint key, no ix_events_type",
            "",
            "",
            "",
            "",
            f"{no_type:.0f} ({no_type / compact:.2f}×)",
        ]
    )
    return out


# --- SQLite -----------------------------------------------------------------------------------

_SQLITE_CALL_ID = (
    "call_id TEXT GENERATED ALWAYS AS (CASE WHEN type = 'tool/call' THEN data ->> '$.callId' "
    "WHEN type = 'tool/result' THEN data ->> '$.message.source.callId' END) STORED"
)


def _sqlite_layout(path: str, rows: Sequence[Row], sessions: Sequence[str], intkey: bool) -> Any:
    if os.path.exists(path):
        os.remove(path)
    db = sqlite3.connect(path)
    key = (
        "session_key INTEGER NOT NULL"
        if intkey
        else "tenant TEXT DEFAULT '' NOT NULL, session_id TEXT NOT NULL"
    )
    pk = "session_key, seq" if intkey else "tenant, session_id, seq"
    db.execute(
        f"CREATE TABLE events ({key}, seq INTEGER NOT NULL, type TEXT NOT NULL, "
        "time INTEGER NOT NULL, data TEXT NOT NULL, source_event_seqs TEXT, surface_op TEXT, "
        f"ignorable BOOLEAN, {_SQLITE_CALL_ID}, CONSTRAINT pk_events PRIMARY KEY ({pk}))"
    )
    short = "session_key" if intkey else "tenant, session_id"
    db.execute(
        f"CREATE INDEX ix_events_call_id ON events ({short}, call_id, type) "
        "WHERE call_id IS NOT NULL"
    )
    db.execute(f"CREATE INDEX ix_events_type ON events (type, {short}, seq)")
    ids = {s: i + 1 for i, s in enumerate(sessions)}
    cols = ("session_key, " if intkey else "tenant, session_id, ") + _COLS.split(", ", 2)[2]
    start = time.perf_counter()
    with db:
        db.executemany(
            f"INSERT INTO events ({cols}) VALUES ({', '.join(['?'] * (8 if intkey else 9))})",
            [((ids[r[1]], *r[2:]) if intkey else r) for r in rows],
        )
    rate = len(rows) / (time.perf_counter() - start)
    db.execute("ANALYZE")
    return db, rate


def _dbstat(db: sqlite3.Connection, n: int) -> dict[str, float]:
    try:
        got = db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.Error:
        return {}
    return {name: size / n for name, size in got}


def measure_sqlite(rows: Sequence[Row], sessions: Sequence[str], args: Any) -> None:
    n = len(rows)
    compact = sum(len(r[5].encode()) for r in rows) / n
    out: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="json-storage-") as tmp:
        for intkey in (False, True):
            db, rate = _sqlite_layout(os.path.join(tmp, "e.db"), rows, sessions, intkey)
            st = _dbstat(db, n)
            total = os.path.getsize(os.path.join(tmp, "e.db")) / n
            pk = st.get("sqlite_autoindex_events_1", 0.0)

            def read(db: sqlite3.Connection = db) -> list[Any]:
                got = db.execute(
                    "SELECT seq, type, time, data FROM events ORDER BY rowid LIMIT ?",
                    (args.read,),
                ).fetchall()
                return [json.loads(r[3]) for r in got]

            read_s = _median(read, args.repeat)
            timed = []
            if not intkey:
                for name, q in (
                    (
                        "tool_calls",
                        "SELECT COUNT(*), SUM(c.data ->> 'turn') FROM events c LEFT "
                        "JOIN events r ON r.tenant = c.tenant AND r.session_id = c.session_id "
                        "AND r.call_id = c.call_id AND r.type = 'tool/result' "
                        "WHERE c.type = 'tool/call'",
                    ),
                    (
                        "tokens",
                        "SELECT SUM(data -> 'usage' ->> 'inputTokens') FROM events "
                        "WHERE type = 'assistant/message'",
                    ),
                ):

                    def ask(q: str = q, db: sqlite3.Connection = db) -> None:
                        db.execute(q).fetchall()

                    timed.append(f"{name} {_median(ask, args.repeat):.3f} s")
            doc = '{"s":"a\\u0000b"}'
            db.execute(
                "INSERT INTO events ("
                + ("session_key" if intkey else "tenant, session_id")
                + ", seq, type, time, data) VALUES ("
                + ("1" if intkey else "'', 'x'")
                + ", -1, 'x', 0, ?)",
                (doc,),
            )
            back, arrow = db.execute(
                "SELECT data, data ->> 's' FROM events WHERE seq = -1"
            ).fetchone()
            nul = f"stored, text back {'identical' if back == doc else 'differs'}; ->> {arrow!r}"
            db.close()
            out.append(
                [
                    "integer session key" if intkey else "tenant + 32-char text id (today)",
                    f"{st.get('events', 0):.0f}",
                    f"{pk:.1f}",
                    f"{st.get('ix_events_type', 0):.1f}",
                    f"{st.get('ix_events_call_id', 0):.1f}",
                    f"{total:.0f} ({total / compact:.2f}×)",
                    f"{rate:,.0f}",
                    f"{read_s * 1000:.0f}",
                    ", ".join(timed),
                    nul,
                ]
            )
    print(
        f"\n### SQLite {sqlite3.sqlite_version}: data TEXT "
        f"({n:,} events, compact JSON {compact:.0f} B)\n"
    )
    print(
        _table(
            (
                "layout",
                "table",
                "pk autoindex",
                "ix_events_type",
                "ix call_id",
                "file",
                "executemany INSERT rows/s",
                f"fetch + json.loads {args.read:,} rows, ms",
                "analytics",
                '`{"s":"a\\u0000b"}`',
            ),
            out,
        )
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="postgresql://... (omit to measure SQLite only)")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--read", type=int, default=20_000, help="rows fetched and parsed")
    parser.add_argument("--insert", type=int, default=20_000, help="rows by multi-row INSERT")
    parser.add_argument("--batch", type=int, default=500, help="rows per INSERT statement")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sessions, rows = generate(args.events)
    print(f"{len(rows):,} events in {len(sessions):,} sessions; load average before {_load()}")
    measure_sqlite(rows, sessions, args)
    if args.url:
        measure_pg(args.url.replace("postgresql+psycopg://", "postgresql://"), rows, sessions, args)
    print(f"\nload average after {_load()}")


if __name__ == "__main__":
    main()
