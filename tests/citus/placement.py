"""Where a distributed store's rows live on the cluster, and moving them: the operations
tests' view of Citus's metadata (``citus_shards``, ``get_shard_id_for_distribution_column``).

A session's rows live on two shards: its ``sessions``/``events``/``surface`` rows on the shard
of its ``session_key`` (one co-located group), its ``session_ids`` row on the shard of its
public id (a group of its own), which may sit on another worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Engine, text

from session_sql import SessionStore, open_store

from .cluster import CitusCluster, Node

SHARDS = 4
"""Shards per distributed table of a test store (Citus's default is 32): few enough that a
rebalance moves a handful in seconds, enough that both workers hold some."""


def open_distributed(cluster: CitusCluster, schema: str, **options: object) -> SessionStore:
    """A distributed store in ``schema`` on the cluster, its tables in ``SHARDS`` shards each.

    The shard count is the session's ``citus.shard_count``, which ``create_distributed_table``
    reads when the store creates its tables.
    """
    connect_args = {"options": f"-c citus.shard_count={SHARDS}"}
    return open_store(
        cluster.url, schema=schema, distributed=True, connect_args=connect_args, **options
    )


@dataclass(frozen=True)
class Placement:
    """The workers (their ports) holding one session's two shards."""

    key: int
    key_node: int
    """The port of the node holding the session's ``sessions``/``events``/``surface`` rows."""
    id_node: int
    """The port of the node holding its ``session_ids`` row."""


def session_placement(admin: Engine, schema: str, session_id: str, tenant: str = "") -> Placement:
    """Where ``session_id``'s rows are now."""
    with admin.connect() as conn:
        key = conn.execute(
            text(f'SELECT session_key FROM "{schema}".session_ids WHERE id = :i AND tenant = :t'),
            {"i": session_id, "t": tenant},
        ).scalar_one()
        key_node = _node_of(conn, f'"{schema}".sessions', "CAST(:v AS bigint)", key)
        id_node = _node_of(conn, f'"{schema}".session_ids', "CAST(:v AS text)", session_id)
    return Placement(int(key), key_node, id_node)


def _node_of(conn: object, table: str, value_sql: str, value: object) -> int:
    query = text(
        "SELECT nodeport FROM citus_shards WHERE shardid = "
        f"get_shard_id_for_distribution_column(CAST(:t AS regclass), {value_sql})"
    )
    return int(conn.execute(query, {"t": table, "v": value}).scalar_one())  # type: ignore[attr-defined]


def shard_nodes(admin: Engine, schema: str) -> dict[str, dict[int, int]]:
    """Every distributed table of ``schema``: its shards' ids and the ports holding them."""
    query = text(
        "SELECT p.logicalrelid::regclass::text, s.shardid, s.nodeport "
        "FROM pg_dist_partition p JOIN citus_shards s ON s.table_name = p.logicalrelid "
        "JOIN pg_namespace n ON n.oid = (SELECT relnamespace FROM pg_class "
        "WHERE oid = p.logicalrelid) WHERE n.nspname = :s AND p.partmethod = 'h'"
    )
    placed: dict[str, dict[int, int]] = {}
    with admin.connect() as conn:
        for table, shard, port in conn.execute(query, {"s": schema}):
            name = table.rsplit(".", 1)[-1].strip('"')
            placed.setdefault(name, {})[int(shard)] = int(port)
    return placed


def layout(admin: Engine, schema: str) -> dict[str, tuple[str, str]]:
    """Each table of ``schema`` known to Citus: (partition method, distribution column);
    co-location is checked apart (``colocated``)."""
    query = text(
        "SELECT c.relname, p.partmethod, coalesce(column_to_column_name(p.logicalrelid, "
        "p.partkey), '') FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s"
    )
    with admin.connect() as conn:
        return {r[0]: (r[1], r[2]) for r in conn.execute(query, {"s": schema})}


def colocation(admin: Engine, schema: str) -> dict[str, int]:
    query = text(
        "SELECT c.relname, p.colocationid FROM pg_dist_partition p "
        "JOIN pg_class c ON c.oid = p.logicalrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s"
    )
    with admin.connect() as conn:
        return {r[0]: int(r[1]) for r in conn.execute(query, {"s": schema})}


def autocommit(admin: Engine, statement: str, **params: object) -> None:
    """Run one statement outside a transaction (the rebalancer's functions refuse one)."""
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(statement), params)


@contextmanager
def without_shards(admin: Engine, node: Node) -> Iterator[None]:
    """``node`` takes no new shards inside the block (``shouldhaveshards`` false); it takes
    them again after it, whatever happened (the cluster serves the whole test session)."""
    statement = "SELECT citus_set_node_property('127.0.0.1', :port, 'shouldhaveshards', :on)"
    autocommit(admin, statement, port=node.port, on=False)
    try:
        yield
    finally:
        autocommit(admin, statement, port=node.port, on=True)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)
