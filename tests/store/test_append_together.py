"""``append_together``: batches of several sessions in one transaction (all or none)."""

from __future__ import annotations

import pytest

from session_sql import ConcurrencyError, InvalidEventError
from session_sql.errors import InvalidArgumentError, SessionNotFoundError

from .store_builders import capture, dump_tables, refused, user_message


def said(text: str) -> dict[str, object]:
    return {"type": "user/message", "data": user_message(text), "surface_op": "append"}


def test_every_batch_commits_in_one_call(store) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    done = store.append_together([(a, [said("one"), said("two")]), (b, [said("three")])])
    assert [[e.seq for e in events] for events in done] == [[0, 1], [0]]
    assert [m["content"][0]["text"] for m in store.messages("a")] == ["one", "two"]
    assert [m["content"][0]["text"] for m in store.messages("b")] == ["three"]
    assert (a.seq, b.seq) == (2, 1)
    assert store.verify("a").ok and store.verify("b").ok
    # the handles go on appending from where the joint write left them
    assert a.append("user/message", user_message("four"), surface_op="append").seq == 2


def test_a_lost_race_on_any_session_writes_nothing_anywhere(store) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    other = store.open_session("b")
    other.append("user/message", user_message("first"), surface_op="append")
    with refused(store, ConcurrencyError, a, b) as info:
        store.append_together([(a, [said("one")]), (b, [said("two")])])
    assert info.value.session_id == "b"
    b.refresh()
    done = store.append_together([(a, [said("one")]), (b, [said("two")])])
    assert [e.seq for e in done[1]] == [1]


def test_a_deleted_session_is_named(store) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    store.delete_session("b")
    with refused(store, SessionNotFoundError, a) as info:
        store.append_together([(a, [said("one")]), (b, [said("two")])])
    assert info.value.session_id == "b"


def test_a_refused_event_in_any_batch_writes_nothing(store) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    bad = {"type": "user/message", "data": user_message("no surface op")}
    with refused(store, InvalidEventError, a, b):
        store.append_together([(a, [said("one")]), (b, [bad])])
    # neither handle is left busy
    assert a.append("user/message", user_message("ok"), surface_op="append").seq == 0
    assert b.append("user/message", user_message("ok"), surface_op="append").seq == 0


def test_empty_batches_and_no_writes(store) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    assert store.append_together([]) == []
    before = dump_tables(store)
    assert store.append_together([(a, []), (b, [])]) == [[], []]
    assert dump_tables(store) == before
    assert store.append_together([(a, []), (b, [said("x")])])[0] == []


@pytest.mark.parametrize(
    "writes",
    [
        "not a list",
        [("a",)],
        [("not a handle", [])],
        [(None, [])],
    ],
)
def test_bad_arguments_are_refused_before_anything_happens(store, writes) -> None:
    store.create_session("a")
    with refused(store, InvalidArgumentError):
        store.append_together(writes)


def test_one_session_twice_and_a_foreign_handle_are_refused(store, other_store) -> None:
    a = store.create_session("a")
    again = store.open_session("a")
    with refused(store, InvalidArgumentError, a, match="twice"):
        store.append_together([(a, [said("x")]), (again, [said("y")])])
    foreign = other_store.create_session("f")
    before = capture(foreign)
    with refused(store, InvalidArgumentError, a, match="not a write handle"):
        store.append_together([(a, [said("x")]), (foreign, [said("y")])])
    assert capture(foreign) == before


def test_bad_items_are_refused(store) -> None:
    a = store.create_session("a")
    with refused(store, InvalidEventError, a):
        store.append_together([(a, [{"data": 1}])])
