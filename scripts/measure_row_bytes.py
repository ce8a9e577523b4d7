"""Bytes per event of W8's session, relation by relation, on SQLite and PostgreSQL.

W8 (``session-sql bench``) reports one total; this splits it: a fresh store per backend, one
session of 10,000 events of the bench's agent mix appended in batches of 500, then the size of
every table and index (PostgreSQL: ``pg_relation_size``; SQLite: the ``dbstat`` pages of each
b-tree) divided by the events. Prints JSON.

    python scripts/measure_row_bytes.py --url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from session_sql import open_store
from session_sql.cli.bench import agent_events

_SQLITE_INTERNAL = ("sqlite_schema", "sqlite_master", "sqlite_sequence", "sqlite_stat1")


def _fill(url: str, items: list[Any], **options: Any) -> None:
    with open_store(url, **options) as store:
        handle = store.create_session()
        for i in range(0, len(items), 500):
            handle.append_many(items[i : i + 500])


def _sqlite(items: list[Any]) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w8.db"
        _fill(f"sqlite:///{path}", items)
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    return {name: int(size) for name, size in rows if name not in _SQLITE_INTERNAL}


def _postgresql(url: str, items: list[Any]) -> dict[str, int]:
    schema = f"row_bytes_{uuid.uuid4().hex[:8]}"
    _fill(url, items, schema=schema)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = :schema AND c.relkind IN ('r', 'i')"
                ),
                {"schema": schema},
            ).all()
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        engine.dispose()
    return {name: int(size) for name, size in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL server to measure on as well")
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    items = agent_events(args.events)
    compact = sum(
        len(json.dumps(it["data"], separators=(",", ":"), ensure_ascii=False).encode())
        for it in items
    )
    sizes = {"sqlite": _sqlite(items)}
    if args.url:
        sizes["postgresql"] = _postgresql(args.url, items)
    report: dict[str, Any] = {"events": args.events, "json_bytes_per_event": compact / args.events}
    for backend, relations in sizes.items():
        per_event = {k: round(v / args.events, 1) for k, v in sorted(relations.items())}
        total = sum(relations.values()) / args.events
        report[backend] = {"relations": per_event, "total": round(total, 1)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
