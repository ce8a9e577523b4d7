"""W13 of ``session-sql bench``: a distributed store on the coordinator beside a plain store,
each operation timed on both, at a tiny scale."""

from __future__ import annotations

from sqlalchemy import Engine, text

from session_sql.cli import bench

from .cluster import CitusCluster


def test_w13_times_a_distributed_store_beside_a_plain_one(
    citus_cluster: CitusCluster, citus_admin: Engine, postgres_server: str
) -> None:
    report = bench.run(
        postgres_server,
        quick=True,
        scale=0.03,
        only=frozenset({"W13"}),
        citus_url=citus_cluster.url,
    )
    names = [w["name"] for w in report["workloads"]]
    assert names == [f"W13 Citus {op}" for op in bench.CITUS_OPERATIONS]
    for w in report["workloads"]:
        extra = w["extra"]
        assert w["events_per_s"] > 0 and w["raw_events_per_s"] > 0, w["name"]
        assert extra["citus_ms"] > 0 and extra["plain_ms"] > 0, w["name"]
        over = extra["citus_ms"] / extra["plain_ms"]
        assert abs(extra["citus_over_plain_time"] - over) < 0.05 * over + 0.01, w["name"]
        assert extra["calls"] >= 5
        targeted = w["name"].removeprefix("W13 Citus ") in bench.CITUS_TARGETED
        assert isinstance(extra["within_target"], bool) is targeted, w["name"]
    floor = report["workloads"][-1]["extra"]  # the cheapest routed statement, each side
    assert floor["citus_over_plain_tail"] > 0
    first = report["workloads"][0]["extra"]
    assert first["distributed_tables"] >= 3  # sessions, events, surface (and the id map)
    assert 1 <= first["worker_groups"] <= 2
    with citus_admin.connect() as conn:  # the throwaway schema went, shards and all
        left = conn.execute(
            text("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench\\_%'")
        ).scalar_one()
    assert left == 0
