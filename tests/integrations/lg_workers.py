"""A small LangGraph thread, and child-process bodies ('spawn') that race on one.

Each body opens its own store from ``(url, schema)``; the two sides of a round meet at a
file barrier (``tests/store/store_workers.arrive_and_wait``) so that they start together.
"""

from __future__ import annotations

from typing import Any

from session_sql import open_store
from session_sql.integrations.langgraph import SessionSQLSaver

from ..store.store_workers import arrive_and_wait


def checkpoint(cp_id: str) -> Any:
    return {
        "v": 4,
        "id": cp_id,
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"n": cp_id},
        "channel_versions": {"n": cp_id},
        "versions_seen": {},
        "updated_channels": None,
    }


def fill(saver: SessionSQLSaver, thread: str) -> None:
    """Three checkpoints of runs ``r0``, ``r1``, ``r2``, each with a pending write."""
    parent = None
    for i in range(3):
        conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
        if parent is not None:
            conf["checkpoint_id"] = parent
        metadata: Any = {"run_id": f"r{i}", "source": "update", "step": i}
        stored = saver.put({"configurable": conf}, checkpoint(f"{i}"), metadata, {"n": f"{i}"})
        saver.put_writes(stored, [("n", f"w{i}")], f"task{i}")
        parent = stored["configurable"]["checkpoint_id"]


def move(url: str, schema: str, thread: str, sync_dir: str, round: int, how: str) -> None:
    """``prune(keep_latest)`` or ``delete_for_runs`` of the thread, as the round starts."""
    with open_store(url, schema=schema) as store:
        saver = SessionSQLSaver(store)
        arrive_and_wait(sync_dir, f"round{round}", 2)
        if how == "keep_latest":
            saver.prune([thread])
        else:
            saver.delete_for_runs(["r0"])


def delete(url: str, schema: str, thread: str, sync_dir: str, round: int) -> None:
    """``delete_thread`` of the thread, as the round starts."""
    with open_store(url, schema=schema) as store:
        saver = SessionSQLSaver(store)
        arrive_and_wait(sync_dir, f"round{round}", 2)
        saver.delete_thread(thread)
