"""Stores of an earlier schema version, created from that release's rendered DDL.

``tests/fixtures/schema_v1/``, ``schema_v2/`` and ``schema_v3/`` hold the DDL of schema
versions 1 to 3 as those releases rendered it (default schema ``session_sql``); the gate must
refuse such a store and ``migrate`` must copy from it. ``insert_legacy_session`` writes a
session into a version 1 or 2 store the way those releases' writer did.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, column, insert, table

from session_sql import DEFAULT_CATALOG, SessionEvent, thaw
from session_sql._store.backends import write_tx
from session_sql._store.rows import EVENT_VALUE_COLUMNS, event_values
from session_sql.jsoncodec import dumps_compact
from session_sql.surface import Replay

FIXTURES = Path(__file__).parent / "fixtures"


def legacy_ddl(version: int, dialect: str, schema: str) -> str:
    """The DDL of an older ``version`` (1, 2 or 3) for ``dialect``, in ``schema``."""
    text = (FIXTURES / f"schema_v{version}" / f"{dialect}.sql").read_text(encoding="utf-8")
    if dialect == "postgresql":
        text = text.replace("SCHEMA IF NOT EXISTS session_sql;", f"SCHEMA IF NOT EXISTS {schema};")
        text = re.sub(r"\bsession_sql\.", f"{schema}.", text)
    return text


def run_ddl(engine: Engine, ddl: str) -> None:
    """Run ``;``-terminated statements (comment lines skipped) in one transaction."""
    body = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    with write_tx(engine) as conn:
        for statement in (s.strip() for s in body.split(";\n")):
            if statement:
                conn.exec_driver_sql(statement)


def create_legacy_store(
    engine: Engine, schema: str, version: int = 2, mutate: Callable[[str], str] = lambda s: s
) -> None:
    """Create an empty store of schema ``version`` (edited by ``mutate``) on ``engine``."""
    run_ddl(engine, mutate(legacy_ddl(version, engine.dialect.name, schema)))


def insert_legacy_session(
    engine: Engine,
    schema: str | None,
    version: int,
    header: Any,
    events: Sequence[SessionEvent],
    *,
    inherited_event_count: int = 0,
    updated_at: int = 1_700_000_000_000,
) -> None:
    """Write a session into a store of schema ``version`` (1 or 2) as that release did: the
    row, the events and the surface rows the fold of the log implies, in one transaction."""
    state = Replay()
    for event in events:
        state.fold(event, DEFAULT_CATALOG, events.__getitem__)
    session_id = str(header["id"])
    row: dict[str, Any] = {
        "id": session_id,
        "format_version": header["version"],
        "created_at": header["createdAt"],
        "parent_session": header.get("parentSession"),
        "inherited_event_count": inherited_event_count,
        "header": json.dumps(thaw(header)),
        "head_seq": len(events) - 1,
        "surface_next_pos": state.next_pos,
        "replace_generation": state.replace_generation,
        "updated_at": updated_at,
    }
    if version >= 2:
        row["incarnation"] = uuid.uuid4().hex
    event_rows = []
    for event in events:
        values = dict(
            zip(EVENT_VALUE_COLUMNS, event_values("", session_id, event, None), strict=True)
        )
        del values["tenant"]
        values["data"] = dumps_compact(event.data)  # that release's spelling
        event_rows.append(values)
    surface_rows = [
        {"session_id": session_id, "pos": pos, "event_seq": seq} for pos, seq in state.rows()
    ]

    def legacy(name: str, names: Sequence[str]) -> Any:
        return table(name, *(column(n) for n in names), schema=schema)

    with write_tx(engine) as conn:
        conn.execute(insert(legacy("sessions", list(row))), [row])
        if event_rows:
            conn.execute(insert(legacy("events", list(event_rows[0]))), event_rows)
        if surface_rows:
            conn.execute(insert(legacy("surface", list(surface_rows[0]))), surface_rows)
