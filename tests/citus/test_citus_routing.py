"""One session's operations on a distributed store are router queries, beside
``test_citus_distributed``: in a named tenant as in the default one, through a lost race and
the ``refresh`` after it, and ``verify``, ``repair``, ``surface``, ``events``, ``export_jsonl``,
``fork_session`` and ``delete_session`` of one session, and a batch in each of its forms (the
one query, ``COPY``). Each connection of the store runs with
``citus.multi_task_query_log_level = 'error'``, so a statement that Citus would split over
several shards fails instead of running; a listing, which must fan out, does fail under it:
the setting is in force."""

from __future__ import annotations

import io

import pytest
from sqlalchemy.exc import DBAPIError

from session_sql import ConcurrencyError, SessionStore, StoreError, open_store

from ..builders import remove, say, summarize, tool_turn, user_message
from .cluster import CitusCluster

ROUTER_ONLY = {"options": "-c citus.multi_task_query_log_level=error"}
"""libpq options: the setting on every connection the store opens."""


def _router_store(url: str, schema: str, tenant: str = "") -> SessionStore:
    return open_store(url, schema=schema, tenant=tenant, connect_args=ROUTER_ONLY)


def _one_session(store: SessionStore, session_id: str) -> None:
    handle = store.create_session(session_id)
    say(handle, "hello")
    tool_turn(handle, 1)
    nodes = store.surface(session_id)
    summarize(handle, nodes[0], nodes[2], sources=nodes[:3])  # a replace
    last = store.surface(session_id)[-1]
    remove(handle, last, last, sources=[last])
    handle.append_many([{"type": "todo/write", "data": {"i": i}} for i in range(5)])
    handle.append_many(  # copied, events and surface rows (``DISTRIBUTED_COPY_MIN_EVENTS``)
        [
            {
                "type": "user/message",
                "data": user_message(f"m{i}", id=f"m{i}"),
                "surface_op": "append",
            }
            for i in range(12)
        ]
    )
    other = store.open_session(session_id)
    say(other, "from elsewhere")
    with pytest.raises(ConcurrencyError):  # the handle is behind: the guarded write loses
        say(handle, "stale")
    assert len(handle.refresh()) == 1
    assert handle.seq == other.seq
    say(handle, "again")
    assert store.messages(session_id, last=20) == handle.messages(last=20)
    assert store.open_session(session_id).seq == handle.seq
    loaded = store.load_session(session_id)
    assert loaded.messages() == handle.messages()
    assert len(list(store.events(session_id))) == store.head_seq(session_id) + 1
    assert store.verify(session_id).ok
    assert store.repair(session_id) == []
    assert store.surface(session_id) == handle.surface.nodes
    out = io.StringIO()
    assert store.export_jsonl(session_id, out) > 0
    child = store.fork_session(session_id, child_id=f"{session_id}-fork")
    assert child.messages() == handle.messages()
    store.delete_session(child.id)


@pytest.mark.parametrize("tenant", ["", "acme"])
def test_one_sessions_operations_are_router_queries(
    citus_cluster: CitusCluster, citus_schema: str, tenant: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True):
        pass  # created (and distributed) without the setting
    with _router_store(citus_cluster.url, citus_schema, tenant) as store:
        for n in range(4):  # sessions on shards of both workers, most likely
            _one_session(store, f"s{n}")


def test_the_setting_is_in_force_listings_fan_out(
    citus_cluster: CitusCluster, citus_schema: str
) -> None:
    with open_store(citus_cluster.url, schema=citus_schema, distributed=True) as store:
        store.create_session("s")
    router = _router_store(citus_cluster.url, citus_schema)
    with router as store, pytest.raises((StoreError, DBAPIError), match="multi-task query"):
        store.list_sessions()
