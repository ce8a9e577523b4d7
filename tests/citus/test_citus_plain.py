"""A store opened on a Citus coordinator with ``distributed=False`` is a plain store: its tables
are the coordinator's own, and a session round-trips."""

from __future__ import annotations

from sqlalchemy import Engine, text

from session_sql import open_store

from ..builders import summarize, tool_turn, wires
from .cluster import CitusCluster


def test_a_store_on_a_coordinator_is_local_and_round_trips(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=False) as store:
        assert store.distributed is False
        handle = store.create_session("s")
        tool_turn(handle, 1)
        tool_turn(handle, 2)
        nodes = store.surface("s")[:4]  # turn 1's messages: replaced by a summary (updates)
        summarize(handle, nodes[0], nodes[-1], sources=nodes)
        handle.append_many([{"type": "todo/write", "data": {"i": i}} for i in range(3)])
        assert wires(store.events("s")) == wires(handle.events)
        assert store.load_session("s").messages() == handle.messages()
        assert store.open_session("s").seq == handle.seq
        report = store.verify("s")
        assert report.ok, report.problems
        assert report.events == len(handle.events)

    with citus_admin.connect() as conn:
        distributed = conn.execute(
            text("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE :s"),
            {"s": f"{citus_schema}.%"},
        ).scalar_one()
        tables = conn.execute(
            text("SELECT count(*) FROM pg_tables WHERE schemaname = :s"), {"s": citus_schema}
        ).scalar_one()
    assert distributed == 0
    assert tables == 5
