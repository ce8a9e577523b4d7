"""The store distributed on Citus (SPEC §13.1): created distributed and co-located, checked by
the gate, and every statement of one session's work routed to one shard.

The routing proof is Citus's own: a connection with ``citus.multi_task_query_log_level =
'error'`` fails any statement that Citus would run on more than one shard ("multi-task
query about to be executed"). The store of the routing tests opens its connections so, and
does one session's whole work through them; the calls that fan out run on a second, plain
store of the same database.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import Engine, text

from session_sql import (
    ConfigurationError,
    SchemaMismatchError,
    open_async_store,
    open_store,
)
from session_sql.cli import app

from ..builders import summarize, tool_turn, user_message, wires
from .cluster import CitusCluster

ROUTED = {"connect_args": {"options": "-c citus.multi_task_query_log_level=error"}}
"""Store options under which any statement run on more than one shard fails."""


def _placements(admin: Engine, schema: str) -> dict[str, tuple[str, str | None, int]]:
    with admin.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT c.relname, p.partmethod, "
                "CASE WHEN p.partkey IS NULL OR p.partkey = '' THEN NULL "
                "ELSE column_to_column_name(p.logicalrelid, p.partkey) END, p.colocationid "
                "FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s"
            ),
            {"s": schema},
        ).all()
    return {name: (method, column, group) for name, method, column, group in rows}


def _items(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"type": "user/message", "data": user_message(f"m{i}", id=f"u{i}"), "surface_op": "append"}
        for i in range(start, start + n)
    ]


def test_a_store_on_a_citus_coordinator_is_created_distributed_and_co_located(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema) as store:
        assert store.distributed is True
    placed = _placements(citus_admin, citus_schema)
    assert placed["session_sql_meta"][:2] == ("n", None)  # a reference table
    assert placed["session_ids"][:2] == ("h", "id")
    group = {placed[t][2] for t in ("sessions", "events", "surface")}
    assert {placed[t][:2] for t in ("sessions", "events", "surface")} == {("h", "session_key")}
    assert len(group) == 1  # co-located
    # Opened again: the gate accepts the complete distribution, as asked or not.
    for wanted in (None, True):
        with open_store(citus_cluster.url, schema=citus_schema, distributed=wanted) as store:
            assert store.distributed is True
    with pytest.raises(ConfigurationError, match="distributed=False"):
        open_store(citus_cluster.url, schema=citus_schema, distributed=False)


def test_a_single_tenant_spreads_over_the_workers(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema) as store:
        for i in range(24):
            store.create_session(f"s{i}").append_many(_items(1))
    with citus_admin.connect() as conn:
        nodes = conn.execute(
            text(
                "SELECT DISTINCT s.nodeport FROM citus_shards s "
                "WHERE s.table_name = CAST(:t AS regclass) AND s.shard_size >= 0 "
                "AND EXISTS (SELECT 1 FROM pg_dist_shard d WHERE d.shardid = s.shardid)"
            ),
            {"t": f"{citus_schema}.events"},
        ).scalars()
        ports = set(nodes)
        keys = conn.execute(text(f"SELECT session_key FROM {citus_schema}.sessions")).scalars()
        holders = {
            conn.execute(
                text(
                    "SELECT nodeport FROM citus_shards WHERE shardid = "
                    "get_shard_id_for_distribution_column(CAST(:t AS regclass), :k)"
                ),
                {"t": f"{citus_schema}.events", "k": key},
            ).scalar_one()
            for key in keys
        }
    assert len(ports) == 2
    assert len(holders) == 2  # one tenant's sessions on both workers


def test_a_half_distributed_store_is_refused_saying_what_is_missing(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    open_store(citus_cluster.url, schema=citus_schema, distributed=False).close()
    with citus_admin.begin() as conn:
        conn.execute(
            text("SELECT create_reference_table(:t)"), {"t": f"{citus_schema}.session_sql_meta"}
        )
        conn.execute(
            text("SELECT create_distributed_table(:t, 'session_key')"),
            {"t": f"{citus_schema}.sessions"},
        )
    with pytest.raises(SchemaMismatchError) as info:
        open_store(citus_cluster.url, schema=citus_schema)
    message = str(info.value)
    assert "distributed only in part" in message
    assert "events: not distributed by session_key" in message
    assert "session_ids: not distributed by id" in message
    assert "sessions:" not in message


def test_distributed_true_without_citus_is_a_configuration_error(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="citus"):
        open_store(f"sqlite:///{tmp_path / 's.db'}", distributed=True)
    assert not (tmp_path / "s.db").exists()  # refused before anything was created


def test_init_distributed_creates_a_distributed_store(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    from typer.testing import CliRunner

    url = citus_cluster.url
    result = CliRunner().invoke(
        app, ["init", "--distributed", "--url", url, "--schema", citus_schema]
    )
    assert result.exit_code == 0, result.output
    assert "distributed" in result.output
    assert _placements(citus_admin, citus_schema)["events"][:2] == ("h", "session_key")


def test_one_sessions_work_is_routed_to_one_shard(
    citus_cluster: CitusCluster, citus_schema: str
) -> None:
    url = citus_cluster.url
    open_store(url, schema=citus_schema).close()  # created by a store allowed to fan out
    with open_store(url, schema=citus_schema, **ROUTED) as store:
        handle = store.create_session("s", seed=[])
        handle.append("user/message", user_message("one"), surface_op="append")  # one query
        handle.append_many(_items(3, 1))  # a pipeline
        handle.append_many(_items(40, 4))  # COPY
        tool_turn(handle, 1)
        nodes = store.surface("s")[:2]
        summarize(handle, nodes[0], nodes[-1], sources=nodes)  # a replace
        other = store.create_session("t")
        store.append_together([(handle, _items(1, 50)), (other, _items(2))])
        reader = store.open_session("s")
        handle.append_many(_items(2, 60))
        assert [e.seq for e in reader.refresh()] == [handle.seq - 2, handle.seq - 1]
        assert len(store.messages("s", last=20)) == 20  # the tail read
        assert store.surface_messages("s", last=5)[-1].seq == handle.seq - 1
        loaded = store.load_session("s")
        assert wires(loaded.events[: handle.seq]) == wires(handle.events)
        assert store.open_session("s", resume=True).seq == handle.seq + 1
        assert store.head_seq("s") == handle.seq
        assert wires(store.events("s")) == wires(store.open_session("s").events)
    with open_store(url, schema=citus_schema) as plain:
        assert plain.verify("s").ok


def test_the_async_stores_session_work_is_routed_to_one_shard(
    citus_cluster: CitusCluster, citus_schema: str
) -> None:
    url = citus_cluster.url
    open_store(url, schema=citus_schema).close()

    async def work() -> None:
        async with open_async_store(url, schema=citus_schema, **ROUTED) as store:
            handle = await store.create_session("a")
            await handle.append("user/message", user_message("one"), surface_op="append")
            await handle.append_many(_items(3, 1))
            await handle.append_many(_items(40, 4))
            reader = await store.open_session("a")
            await handle.append_many(_items(2, 60))
            assert len(await reader.refresh()) == 2
            assert len(await store.messages("a", last=20)) == 20
            loaded = await store.load_session("a")
            assert wires(loaded.events[: handle.seq]) == wires(handle.events)

    asyncio.run(work())


def test_the_calls_that_fan_out_stay_correct(
    citus_cluster: CitusCluster, citus_schema: str, tmp_path: Any
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema) as store:
        for i in range(6):
            tool_turn(store.create_session(f"s{i}", user_id="u" if i % 2 else None), 1)
        assert sorted(s.id for s in store.list_sessions(limit=100)) == [f"s{i}" for i in range(6)]
        assert store.count_sessions() == 6
        assert [s.id for s in store.list_sessions(user_id="u")] != []
        assert store.stats().sessions == 6
        assert all(store.verify(s.id).ok for s in store.iter_sessions())
        store.update_session("s0", title="first")
        assert store.session_info("s0").title == "first"
        with store.engine.connect() as conn:
            count = conn.execute(
                text(f'SELECT count(*) FROM "{citus_schema}".surface_messages')
            ).scalar_one()
        assert count == sum(len(store.surface(f"s{i}")) for i in range(6))
        store.delete_session("s5")
        assert store.count_sessions() == 5
        store.create_session("s5")  # the id is free again
        export = tmp_path / "s1.jsonl"
        store.export_jsonl("s1", export)
        assert json.loads(export.read_text().splitlines()[0])["id"] == "s1"
        report = store.prune(user_id="u")  # a row lock per session: one shard each
        assert sorted(s.id for s in report.sessions) == ["s1", "s3"]
        assert sorted(s.id for s in store.list_sessions()) == ["s0", "s2", "s4", "s5"]


def test_row_level_security_holds_on_the_workers(
    citus_cluster: CitusCluster, citus_admin: Engine, citus_schema: str
) -> None:
    """A role kept to its tenant by row-level security reads and writes its tenant's rows on
    the workers (the tenant setting reaches them), and no other tenant's."""
    url = citus_cluster.url
    with open_store(url, schema=citus_schema, tenant="other") as owner:
        owner.create_session("theirs")
    role = "tenant_" + citus_schema[-8:]
    with citus_admin.begin() as conn:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(f'GRANT USAGE ON SCHEMA "{citus_schema}" TO "{role}"'))
        rights = "SELECT, INSERT, UPDATE, DELETE"
        conn.execute(text(f'GRANT {rights} ON ALL TABLES IN SCHEMA "{citus_schema}" TO "{role}"'))
    confined = url.replace("postgres@", f"{role}@")
    try:
        with open_store(confined, schema=citus_schema, tenant="acme") as store:
            handle = store.create_session("mine")
            handle.append_many(_items(3))
            handle.append_many(_items(40, 3))
            handle.append_many(_items(12, 43))  # the batch's form from 10 events on Citus
            assert store.verify("mine").ok
            assert len(store.messages("mine", last=5)) == 5
            assert [s.id for s in store.list_sessions()] == ["mine"]
            assert store.load_session("mine").seq == handle.seq + 1
            with store.engine.connect() as conn:  # even without the store's tenant filter
                conn.execute(text("SET citus.propagate_set_commands = 'local'"))
                seen = conn.execute(text(f'SELECT DISTINCT tenant FROM "{citus_schema}".sessions'))
                assert set(seen.scalars()) <= {"acme"}
    finally:
        with citus_admin.begin() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))
