"""Streams stay on the session they started on: ``events()``, ``follow()`` (sync and async)
and the quick reader's ``events()`` read one session's log, pinned by its key at the first
page. A session deleted mid-stream ends the stream with ``SessionNotFoundError``; one created
again under the same id is another session, never spliced into the stream."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from session_sql import SessionNotFoundError, open_async_store, open_store
from session_sql._store import reader
from session_sql._store.backends.sqlite import quick
from session_sql._store.backends.sqlite.quick import open_quick

SYNC_ONLY = {
    "test_events_mid_stream_end_when_the_session_is_deleted": (
        "the facade reads an async stream to its end at once, so nothing happens mid-stream; "
        "test_async_streams_end_when_their_session_is_deleted drives the async stream itself"
    ),
}


def seed(life: str, count: int = 8) -> list[dict[str, Any]]:
    """``count`` events whose data names the session's ``life`` (old or new)."""
    return [
        {"type": "todo/write", "seq": i, "time": i, "data": {"life": life, "i": i}}
        for i in range(count)
    ]


def lives(events: Any) -> set[str]:
    return {e.data["life"] for e in events if e.type == "todo/write"}


def rest_after_deletion(store: Any, stream: Iterator[Any], recreated: bool) -> list[Any]:
    """Delete ``s1`` (and create it again when ``recreated``), then read the rest of
    ``stream``: the events it still gives before it ends with ``SessionNotFoundError``."""
    store.delete_session("s1")
    if recreated:
        store.create_session("s1", seed=seed("new", 12))
    got: list[Any] = []
    with pytest.raises(SessionNotFoundError, match="deleted while it was read"):
        for event in stream:
            got.append(event)
    return got


@pytest.mark.parametrize("recreated", [False, True], ids=["deleted", "recreated"])
def test_events_mid_stream_end_when_the_session_is_deleted(store, monkeypatch, recreated):
    monkeypatch.setattr(reader, "STREAM_BATCH", 3)
    store.create_session("s1", seed=seed("old"))
    stream = store.events("s1")
    first = [next(stream) for _ in range(3)]  # the first page
    got = rest_after_deletion(store, stream, recreated)
    assert lives(first + got) == {"old"}  # nothing of the new session spliced in


def test_events_read_to_the_end_and_a_new_stream_reads_the_new_session(store, monkeypatch):
    monkeypatch.setattr(reader, "STREAM_BATCH", 3)
    store.create_session("s1", seed=seed("old", 5))  # 6 events: two full pages, then none
    assert [e.seq for e in store.events("s1")] == list(range(6))
    store.delete_session("s1")
    store.create_session("s1", seed=seed("new", 4))
    assert lives(store.events("s1")) == {"new"}
    assert [e.seq for e in store.events("s1", from_seq=2, to_seq=4)] == [2, 3]


@pytest.mark.parametrize("recreated", [False, True], ids=["deleted", "recreated"])
def test_a_follower_ends_when_its_session_is_deleted(store, recreated):
    store.create_session("s1", seed=seed("old", 3))  # seqs 0..3 with the marker
    follower = store.follow("s1", timeout=10)
    try:
        assert [next(follower).seq for _ in range(4)] == [0, 1, 2, 3]
        store.delete_session("s1")
        if recreated:
            store.create_session("s1", seed=seed("new", 8))
        with pytest.raises(SessionNotFoundError, match="deleted while it was read"):
            next(follower)
    finally:
        follower.close()


@pytest.mark.parametrize("recreated", [False, True], ids=["deleted", "recreated"])
def test_async_streams_end_when_their_session_is_deleted(backend, monkeypatch, recreated):
    monkeypatch.setattr(reader, "STREAM_BATCH", 3)

    async def main() -> None:
        async with open_async_store(backend.url, schema=backend.schema) as store:
            await store.create_session("s1", seed=seed("old"))
            stream = await store.events("s1")
            first = [await anext(stream) for _ in range(3)]
            follower = store.follow("s1", timeout=10)
            followed = [(await anext(follower)).seq for _ in range(9)]
            await store.delete_session("s1")
            if recreated:
                await store.create_session("s1", seed=seed("new", 12))
            got: list[Any] = []
            with pytest.raises(SessionNotFoundError, match="deleted while it was read"):
                async for event in stream:
                    got.append(event)
            assert lives(first + got) == {"old"}
            assert followed == list(range(9))
            with pytest.raises(SessionNotFoundError, match="deleted while it was read"):
                await anext(follower)
            await follower.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("recreated", [False, True], ids=["deleted", "recreated"])
def test_the_quick_reader_stream_ends_when_its_session_is_deleted(tmp_path, monkeypatch, recreated):
    monkeypatch.setattr(quick, "STREAM_BATCH", 3)
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with open_store(url) as store:
        store.create_session("s1", seed=seed("old"))
        quick_reader = open_quick(url)
        assert quick_reader is not None
        try:
            stream = quick_reader.events("s1")
            first = [next(stream) for _ in range(3)]
            got = rest_after_deletion(store, stream, recreated)
            assert lives(first + got) == {"old"}
            if recreated:
                assert lives(quick_reader.events("s1")) == {"new"}
        finally:
            quick_reader.close()
