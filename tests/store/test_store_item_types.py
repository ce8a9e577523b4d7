"""Item types in the store: on the surface table, read by tail reads, checked by verify."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from session_sql import (
    DEFAULT_CATALOG,
    CorruptSessionError,
    Replace,
    SessionFormatUnsupportedError,
    SessionStore,
    open_store,
)

from .store_builders import say, surface_table

ITEMS = DEFAULT_CATALOG.extend(["vendor/item"], items=True)


@pytest.fixture
def item_store(backend) -> Iterator[SessionStore]:
    opened = open_store(backend.url, schema=backend.schema, catalog=ITEMS)
    yield opened
    opened.close()


def test_item_events_are_surface_rows_read_back_by_tail_reads(item_store: SessionStore) -> None:
    handle = item_store.create_session("s1")
    say(handle, "hi")
    for n in range(3):
        handle.append("vendor/item", {"n": n, "text": "ü"}, surface_op="append")
    assert surface_table(item_store, "s1") == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert item_store.messages("s1", last=2) == [{"n": 1, "text": "ü"}, {"n": 2, "text": "ü"}]
    tail = item_store.surface_messages("s1", last=1)
    assert [(m.seq, m.type, m.message) for m in tail] == [(3, "vendor/item", {"n": 2, "text": "ü"})]
    assert item_store.messages("s1")[1:] == [{"n": n, "text": "ü"} for n in range(3)]
    handle.append(
        "surface/removed", {"reason": "pop"}, surface_op=Replace(3, 3), source_event_seqs=[3]
    )
    assert item_store.messages("s1", last=1) == [{"n": 1, "text": "ü"}]
    assert item_store.verify("s1").ok
    assert item_store.load_session("s1").messages() == item_store.messages("s1")


def test_a_store_whose_catalog_lacks_the_item_type_refuses_clearly(
    item_store: SessionStore, backend
) -> None:
    handle = item_store.create_session("s1")
    handle.append("vendor/item", {"n": 0}, surface_op="append")
    with open_store(backend.url, schema=backend.schema) as plain:
        with pytest.raises(CorruptSessionError, match="no such item type"):
            plain.messages("s1")
        with pytest.raises(SessionFormatUnsupportedError, match="vendor/item"):
            plain.load_session("s1")


def test_open_session_takes_item_events_on_the_surface(item_store: SessionStore) -> None:
    """The cheap open reads the surface's events itself: item types are surface events too."""
    handle = item_store.create_session("s1")
    say(handle, "hi")
    handle.append("vendor/item", {"n": 0}, surface_op="append")
    reopened = item_store.open_session("s1")
    reopened.append("vendor/item", {"n": 1}, surface_op="append")
    assert item_store.messages("s1", last=2) == [{"n": 0}, {"n": 1}]
    assert item_store.verify("s1").ok
