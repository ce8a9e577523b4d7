"""A distributed store copies a batch from fewer rows than a plain one: through a Citus
coordinator each row of the one query is a statement sent to the worker and waited for,
where a ``COPY`` is one stream (``appending.DISTRIBUTED_COPY_MIN_EVENTS`` and
``DISTRIBUTED_COPY_MIN_NODES``). Read from libpq's trace of the connection the appends use."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from session_sql import open_store
from session_sql._store.backends.postgresql.appending import (
    COPY_MIN_ROWS,
    DISTRIBUTED_COPY_MIN_EVENTS,
    DISTRIBUTED_COPY_MIN_NODES,
)

from ..store.store_builders import user_message
from ..store.test_store_round_trips import one_message, session_and_connection, traced
from .cluster import CitusCluster


def _batch(size: int, messages: int) -> list[dict[str, Any]]:
    """``size`` events, the first ``messages`` of them new surface nodes."""
    return [
        {"type": "user/message", "data": user_message(f"m{i}", id=f"m{i}"), "surface_op": "append"}
        if i < messages
        else {"type": "todo/write", "data": {"i": i}}
        for i in range(size)
    ]


def _copied(trace: Path, schema: str) -> list[str]:
    """The tables the traced appends copied into, in order."""
    sent = trace.read_text()
    return [t for t in ("events", "surface") if f'COPY "{schema}"."{t}"' in sent]


def test_a_distributed_store_copies_a_dozen_events_and_two_nodes(
    citus_cluster: CitusCluster, citus_schema: str, tmp_path: Path
) -> None:
    below = _batch(DISTRIBUTED_COPY_MIN_EVENTS - 1, DISTRIBUTED_COPY_MIN_NODES)
    at = _batch(DISTRIBUTED_COPY_MIN_EVENTS, DISTRIBUTED_COPY_MIN_NODES)
    one_node = _batch(DISTRIBUTED_COPY_MIN_EVENTS, 1)
    with open_store(
        citus_cluster.url, schema=citus_schema, distributed=True, pool_size=1, max_overflow=0
    ) as store:
        handle, conn = session_and_connection(store)
        with traced(conn, tmp_path / "below") as trips:
            handle.append_many(below)
        assert len(trips) == 1 and one_message(trips[0])  # the one query
        assert _copied(tmp_path / "below", citus_schema) == []
        with traced(conn, tmp_path / "at"):
            handle.append_many(at)
        assert _copied(tmp_path / "at", citus_schema) == ["events", "surface"]
        with traced(conn, tmp_path / "one node"):
            handle.append_many(one_node)
        assert _copied(tmp_path / "one node", citus_schema) == ["events"]
        assert store.verify("s").ok
        assert store.messages("s", last=5) == handle.messages(last=5)
        assert len(list(store.events("s"))) == 1 + len(below) + len(at) + len(one_node)


def test_a_plain_store_sends_the_same_batch_as_one_query(
    postgres_admin: Engine, tmp_path: Path
) -> None:
    schema = f"t_{uuid.uuid4().hex}"
    url = postgres_admin.url.render_as_string(hide_password=False)
    assert DISTRIBUTED_COPY_MIN_EVENTS < COPY_MIN_ROWS
    try:
        with open_store(url, schema=schema, pool_size=1, max_overflow=0) as store:
            handle, conn = session_and_connection(store)
            with traced(conn, tmp_path / "at") as trips:
                handle.append_many(_batch(DISTRIBUTED_COPY_MIN_EVENTS, 3))
            assert len(trips) == 1 and one_message(trips[0])
            assert _copied(tmp_path / "at", schema) == []
            assert store.verify("s").ok
    finally:
        with postgres_admin.begin() as c:
            c.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
