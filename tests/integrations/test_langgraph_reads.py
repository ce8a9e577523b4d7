"""A saver's reads of a thread, warm or cold, give the same tuples (SPEC §12.4).

The saver keeps the serde bytes of the pieces its last read of a channel decoded, so that the
next version's read decodes base64 only for its new pieces; reads in any order, on a saver
that has read and written the thread before, equal those of a fresh saver over the store.
"""

from __future__ import annotations

from typing import Any

from session_sql import open_store
from session_sql.integrations.langgraph import SessionSQLSaver

from ..conftest import Backend
from .test_langgraph import _chat


def _cfg(cp_id: str) -> Any:
    return {"configurable": {"thread_id": "chat", "checkpoint_ns": "", "checkpoint_id": cp_id}}


def test_reads_in_any_order_equal_a_fresh_savers(backend: Backend) -> None:
    with open_store(backend.url, schema=backend.schema) as store:
        warm = SessionSQLSaver(store)
        _chat(warm, "chat", 20)
        ids = [t.config["configurable"]["checkpoint_id"] for t in warm.list(_cfg_thread())]
        assert len(ids) == 60
        # newest, oldest, then from both ends inwards: chains that share pieces and not
        order = [ids[i // 2] if i % 2 == 0 else ids[-1 - i // 2] for i in range(len(ids))]
        for cp_id in order:
            got, cold = warm.get_tuple(_cfg(cp_id)), SessionSQLSaver(store).get_tuple(_cfg(cp_id))
            assert got is not None and cold is not None
            assert got.checkpoint == cold.checkpoint
            assert got.checkpoint["channel_values"].get("messages") == cold.checkpoint[
                "channel_values"
            ].get("messages")
        # what a read hands out is the caller's: changing it changes no later read
        first = warm.get_tuple(_cfg_thread())
        assert first is not None
        first.checkpoint["channel_values"]["messages"][0].content = "changed"
        again = warm.get_tuple(_cfg_thread())
        assert again is not None
        assert again.checkpoint["channel_values"]["messages"][0].content.startswith("question 0 ")
        _chat(warm, "chat", 1)  # the cache does not leak into what a put stores
        latest = SessionSQLSaver(store).get_tuple(_cfg_thread())
        assert latest is not None
        said = [m.content.split()[:2] for m in latest.checkpoint["channel_values"]["messages"]]
        assert said[:2] == [["question", "0"], ["answer", "1"]]
        assert len(said) == 41  # the question asked again has the first one's id: one answer more


def _cfg_thread() -> Any:
    return {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
