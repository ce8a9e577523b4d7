"""``follow`` on a distributed store: writers and followers on the coordinator, woken by its
``LISTEN``/``NOTIFY`` (the store notifies after the commit, on the coordinator's connection)."""

from __future__ import annotations

import threading

from session_sql import open_store

from ..builders import say
from .cluster import CitusCluster


def test_a_follower_on_the_coordinator_gets_every_event(
    citus_cluster: CitusCluster, citus_schema: str
) -> None:
    url = citus_cluster.url
    with (
        open_store(url, schema=citus_schema, distributed=True) as reader,
        open_store(url, schema=citus_schema) as writer,
    ):
        handle = writer.create_session("followed")
        seen: list[int] = []
        started = threading.Event()

        def follow() -> None:
            started.set()
            for event in reader.follow("followed", timeout=10):
                seen.append(event.seq)
                if len(seen) == 3:
                    return

        follower = threading.Thread(target=follow)
        follower.start()
        started.wait(5)
        for i in range(3):
            say(handle, f"m{i}")
        follower.join(15)
    assert seen == [0, 1, 2]
