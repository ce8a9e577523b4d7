"""Item types: catalog types that live on the surface and project to their own data."""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import (
    DEFAULT_CATALOG,
    Catalog,
    InvalidSeedError,
    Replace,
    Session,
    SessionFormatUnsupportedError,
    SurfaceError,
    fold_surface,
)

from .builders import new_session, refused, say

ITEMS = DEFAULT_CATALOG.extend(["vendor/item"], items=True)
ITEM = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"}


def item_session(**kwargs: Any) -> Session:
    return new_session(catalog=ITEMS, **kwargs)


def test_an_item_type_is_known_and_listed_as_an_item_type() -> None:
    assert "vendor/item" in ITEMS
    assert ITEMS.item_types == frozenset({"vendor/item"})
    assert DEFAULT_CATALOG.item_types == frozenset()
    assert len(ITEMS) == len(DEFAULT_CATALOG) + 1
    assert DEFAULT_CATALOG.extend(["vendor/item"]) != ITEMS  # same names, another kind
    assert DEFAULT_CATALOG.extend("vendor/item", items=True) == ITEMS
    assert hash(ITEMS) == hash(DEFAULT_CATALOG.extend(["vendor/item"], items=True))
    assert "1 item types" in repr(ITEMS)


def test_a_name_keeps_its_kind() -> None:
    with pytest.raises(ValueError, match="already log-only"):
        DEFAULT_CATALOG.extend(["todo/write"], items=True)
    with pytest.raises(ValueError, match="already log-only"):
        DEFAULT_CATALOG.extend(["user/message"], items=True)
    with pytest.raises(ValueError, match="already item"):
        ITEMS.extend(["vendor/item"])
    with pytest.raises(ValueError, match="core types cannot be item types"):
        Catalog(items=["tool/result"])
    assert ITEMS.extend(["vendor/item"], items=True) == ITEMS  # adding it again is a no-op


def test_an_item_event_is_a_surface_node_whose_message_is_its_data() -> None:
    session = item_session()
    say(session, "hi")
    event = session.append("vendor/item", ITEM, surface_op="append")
    assert session.surface.nodes == (0, 1)
    assert session.messages()[1] == ITEM
    assert session.messages(last=1) == [ITEM]
    assert session.message_for(event) == ITEM
    last = session.surface_messages(last=1)[0]
    assert (last.seq, last.type, last.message) == (1, "vendor/item", ITEM)


def test_an_item_event_must_carry_a_surface_op() -> None:
    session = item_session()
    with refused(session, SurfaceError, match="must carry a surfaceOp"):
        session.append("vendor/item", ITEM)


def test_a_log_only_type_still_may_not_carry_one() -> None:
    session = new_session(catalog=DEFAULT_CATALOG.extend(["vendor/log"]))
    with refused(session, SurfaceError, match="not surface-eligible"):
        session.append("vendor/log", ITEM, surface_op="append")


def test_item_events_are_replaced_and_removed_with_provenance() -> None:
    session = item_session()
    for i in range(4):
        session.append("vendor/item", {"n": i}, surface_op="append")
    with refused(session, SurfaceError, match="cover every shadowed node"):
        session.append(
            "vendor/item", {"summary": True}, surface_op=Replace(0, 2), source_event_seqs=[0]
        )
    summary = session.append(
        "vendor/item", {"summary": True}, surface_op=Replace(0, 2), source_event_seqs=[0, 1, 2]
    )
    assert session.messages() == [{"summary": True}, {"n": 3}]
    session.append(
        "surface/removed", {"reason": "pop"}, surface_op=Replace(3, 3), source_event_seqs=[3]
    )
    assert session.messages() == [{"summary": True}]
    assert session.surface.nodes == (summary.seq,)
    assert fold_surface(session.events, catalog=ITEMS).nodes == session.surface.nodes


def test_a_null_item_projects_to_no_message() -> None:
    session = item_session()
    session.append("vendor/item", None, surface_op="append")
    assert session.messages() == []
    assert session.surface_messages()[0].message is None


def test_a_seed_with_item_events_replays_and_a_catalog_without_them_refuses_it() -> None:
    session = item_session()
    session.append("vendor/item", ITEM, surface_op="append")
    wire = [e.to_json() for e in session.events]
    resumed = Session("s1", seed=wire, catalog=ITEMS)
    assert resumed.messages() == [ITEM]
    with pytest.raises(SessionFormatUnsupportedError, match="vendor/item"):
        Session("s1", seed=wire)
    bad = [{**wire[0], "surfaceOp": None}]
    del bad[0]["surfaceOp"]
    with pytest.raises(InvalidSeedError):
        Session("s1", seed=bad, catalog=ITEMS)


def test_an_entry_point_may_contribute_a_catalog_with_item_types(monkeypatch: Any) -> None:
    from session_sql import catalog as catalog_module

    class FakeEntryPoint:
        name = "vendor"

        def load(self) -> Any:
            return Catalog(["vendor/log"], items=["vendor/item"])

    monkeypatch.setattr(catalog_module, "entry_points", lambda *, group: [FakeEntryPoint()])
    found = DEFAULT_CATALOG.with_entry_points()
    assert found.item_types == frozenset({"vendor/item"})
    assert "vendor/log" in found
    assert "vendor/log" not in found.item_types
