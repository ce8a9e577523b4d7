"""A store reads a session by the key it last read for its id (``StoreContext.keys``), so a
tail read is one statement; a kept key goes stale when another store deletes the session, or
deletes it and creates it again under its id (a new key: keys are never reused). Every read
then answers for the session that is there now, never for the one the key named."""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import SessionNotFoundError, open_store

from ..builders import say


def texts(messages: list[Any]) -> list[str]:
    return [m["content"][0]["text"] for m in messages]


def _reads(store: Any) -> dict[str, Any]:
    """What each store-level read of ``s`` gives (the keyed reads, every form)."""
    return {
        "messages": texts(store.messages("s")),
        "last": texts(store.messages("s", last=2)),
        "surface": tuple(store.surface("s")),
        "surface_last": tuple(store.surface("s", last=1)),
        "nodes": [n.seq for n in store.surface_messages("s")],
        "nodes_last": [n.seq for n in store.surface_messages("s", last=1)],
        "loaded": texts(store.load_session("s").messages()),
        "opened": texts(store.open_session("s").messages()),
        "head": store.head_seq("s"),
        "verified": store.verify("s").ok,
    }


@pytest.mark.parametrize("again", [True, False], ids=["recreated", "deleted"])
def test_a_kept_key_of_a_session_another_store_replaced_reads_the_session_there_now(
    store, backend, tenant, again
):
    first = store.create_session("s")
    for text in ("old one", "old two", "old three"):
        say(first, text)
    assert _reads(store)["last"] == ["old two", "old three"]  # the key is kept now
    with open_store(backend.url, schema=backend.schema, tenant=tenant) as other:
        other.delete_session("s")
        if again:
            say(other.create_session("s"), "new one")
            expected = _reads(other)
    if again:
        assert _reads(store) == expected
        assert expected["last"] == ["new one"]
    else:
        for read in (
            lambda: store.messages("s", last=2),
            lambda: store.messages("s"),
            lambda: store.surface("s", last=1),
            lambda: store.surface_messages("s", last=1),
            lambda: store.load_session("s"),
            lambda: store.open_session("s"),
        ):
            with pytest.raises(SessionNotFoundError):
                read()


@pytest.mark.parametrize("again", [True, False], ids=["recreated", "deleted"])
def test_open_session_by_a_stale_kept_key_opens_the_session_there_now(
    store, backend, tenant, again
):
    """``open_session`` reads by the kept key first (one statement); a stale key finds no
    row, and the session is read by its id: the one there now, or none."""
    say(store.create_session("s"), "old one")
    store.open_session("s")  # by the kept key
    with open_store(backend.url, schema=backend.schema, tenant=tenant) as other:
        other.delete_session("s")
        if again:
            say(other.create_session("s"), "new one")
    if not again:
        with pytest.raises(SessionNotFoundError):
            store.open_session("s")
        return
    opened = store.open_session("s")
    assert texts(opened.messages()) == ["new one"]
    say(opened, "new two")
    assert texts(store.messages("s")) == ["new one", "new two"]
    assert store.verify("s").ok


@pytest.mark.parametrize("again", [True, False], ids=["recreated", "deleted"])
def test_head_seq_by_a_stale_kept_key_reads_the_session_there_now(store, backend, tenant, again):
    """``head_seq`` reads by the kept key first (one statement), then by the id."""
    handle = store.create_session("s")
    for text in ("old one", "old two"):
        say(handle, text)
    assert store.head_seq("s") == 1  # by the kept key
    with open_store(backend.url, schema=backend.schema, tenant=tenant) as other:
        other.delete_session("s")
        if again:
            say(other.create_session("s"), "new one")
    if again:
        assert store.head_seq("s") == 0
    else:
        with pytest.raises(SessionNotFoundError):
            store.head_seq("s")
