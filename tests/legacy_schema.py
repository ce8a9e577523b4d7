"""Stores of an earlier schema version, created from that release's rendered DDL.

``tests/fixtures/schema_v1/`` to ``schema_v5/`` hold the DDL of schema versions 1 to 5 as
those releases rendered it (default schema ``session_sql``); the gate must refuse such a store
and ``migrate`` must copy from it. ``insert_legacy_session`` writes a session into a store of
one of those versions the way its release's writer did: events and surface rows keyed by the
session id (and, from version 3, the tenant), from version 5 by the ``session_key`` the
database gave the session's row; metadata and the surface digest from version 3. The rows
are spelled here, frozen, not by this build's codec (whose columns are another version's).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, column, insert, select, table

from session_sql import DEFAULT_CATALOG, SessionEvent, thaw
from session_sql._store.database import write_tx
from session_sql.jsoncodec import dumps_compact, dumps_frozen
from session_sql.surface import Replay

FIXTURES = Path(__file__).parent / "fixtures"


def legacy_ddl(version: int, dialect: str, schema: str) -> str:
    """The DDL of an older ``version`` (1 to 5) for ``dialect``, in ``schema``."""
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


V4_EVENT_COLUMNS = (
    "tenant",
    "session_id",
    "seq",
    "type",
    "time",
    "data",
    "source_event_seqs",
    "surface_op",
    "ignorable",
)
"""The ``events`` columns the writers of versions 3 and 4 wrote (1 and 2: all but ``tenant``)."""

V5_EVENT_COLUMNS = (
    "session_key",
    "seq",
    "time",
    "ignorable",
    "tenant",
    "type",
    "surface_op",
    "source_event_seqs",
    "data",
)
"""The ``events`` columns the writer of version 5 wrote, in its order (``session_key`` first,
``tenant`` kept for the row-level security policy and the foreign key to ``sessions``)."""

KEYED = 5
"""The first version whose events and surface rows name their session by ``session_key``."""


def legacy_event_values(
    version: int, tenant: str, session_id: str, event: SessionEvent, session_key: int = 0
) -> dict[str, Any]:
    """The ``events`` row of ``event`` as the writer of schema ``version`` spelled it (from
    version 5 under ``session_key``, not ``session_id``)."""
    op = event.surface_op
    seqs = event.source_event_seqs
    surface_op = (
        None if op is None else json.dumps("append" if isinstance(op, str) else op.to_json())
    )
    source_event_seqs = None if seqs is None else "[" + ", ".join(map(str, seqs)) + "]"
    if version >= KEYED:
        v5 = (
            session_key,
            event.seq,
            event.time,
            True if event.ignorable else None,
            tenant,
            event.type,
            surface_op,
            source_event_seqs,
            dumps_frozen(event.data),
        )
        return dict(zip(V5_EVENT_COLUMNS, v5, strict=True))
    values = (
        tenant,
        session_id,
        event.seq,
        event.type,
        event.time,
        # Version 3 and 4's codec; before it, the compact spelling.
        dumps_frozen(event.data) if version >= 3 else dumps_compact(event.data),
        source_event_seqs,
        surface_op,
        True if event.ignorable else None,
    )
    row = dict(zip(V4_EVENT_COLUMNS, values, strict=True))
    if version < 3:
        del row["tenant"]
    return row


def insert_legacy_session(
    engine: Engine,
    schema: str | None,
    version: int,
    header: Any,
    events: Sequence[SessionEvent],
    *,
    tenant: str = "",
    user_id: str | None = None,
    title: str | None = None,
    labels: dict[str, str] | None = None,
    inherited_event_count: int = 0,
    updated_at: int = 1_700_000_000_000,
) -> None:
    """Write a session into a store of schema ``version`` (1 to 5) as that release did: the
    row, the events and the surface rows the fold of the log implies, in one transaction.
    ``tenant`` and the metadata exist from version 3; from version 5 the database numbers the
    row (``session_key``) and the events and surface rows carry that key."""
    if version < 3 and (tenant or user_id is not None or title is not None or labels):
        raise ValueError(f"schema version {version} has no tenants and no metadata")
    state = Replay()
    for event in events:
        state.fold(event, DEFAULT_CATALOG, events.__getitem__)
    session_id = str(header["id"])
    owner = {"tenant": tenant} if version >= 3 else {}
    row: dict[str, Any] = {
        **owner,
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
    if version >= 3:
        row["surface_digest"] = state.digest
        row["user_id"] = user_id
        row["title"] = title
        row["labels"] = json.dumps(labels or {})

    def legacy(name: str, names: Sequence[str]) -> Any:
        return table(name, *(column(n) for n in names), schema=schema)

    with write_tx(engine) as conn:
        conn.execute(insert(legacy("sessions", list(row))), [row])
        key = 0
        if version >= KEYED:
            s = legacy("sessions", ["session_key", "tenant", "id"])
            key = conn.execute(
                select(s.c.session_key).where(s.c.tenant == tenant, s.c.id == session_id)
            ).scalar_one()
        event_rows = [legacy_event_values(version, tenant, session_id, e, key) for e in events]
        if version >= KEYED:  # v5 wrote (session_key, pos, event_seq, tenant)
            surface_rows = [
                {"session_key": key, "pos": pos, "event_seq": seq, "tenant": tenant}
                for pos, seq in state.rows()
            ]
        else:
            surface_rows = [
                {**owner, "session_id": session_id, "pos": pos, "event_seq": seq}
                for pos, seq in state.rows()
            ]
        if event_rows:
            conn.execute(insert(legacy("events", list(event_rows[0]))), event_rows)
        if surface_rows:
            conn.execute(insert(legacy("surface", list(surface_rows[0]))), surface_rows)
