"""SPEC §11.2 in the store: a ``surface/removed`` deletes the shadowed rows and inserts none."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import insert

from session_sql import Replace, Session, SessionStore, SurfaceError

from .store_builders import (
    execute,
    key_of,
    refused,
    remove,
    say,
    session_row,
    summarize,
    surface_table,
    tables,
)


def four(store: SessionStore, sid: str = "s1") -> Session:
    handle = store.create_session(sid)
    for text in ("a", "b", "c", "d"):
        say(handle, text)
    return handle


def texts(messages: list[object]) -> list[str]:
    return [m["content"][0]["text"] for m in messages]  # type: ignore[index]


def test_a_removal_deletes_every_shadowed_row(store: SessionStore) -> None:
    handle = four(store)
    assert surface_table(store, "s1") == [(0, 0), (1, 1), (2, 2), (3, 3)]
    seq = remove(handle, 1, 2, [1, 2], reason="forget this")
    assert surface_table(store, "s1") == [(0, 0), (3, 3)]
    row = session_row(store, "s1")
    assert (row.head_seq, row.surface_next_pos, row.replace_generation) == (seq, 4, 1)
    assert store.surface("s1") == handle.surface.nodes == (0, 3)
    assert texts(store.messages("s1")) == ["a", "d"]
    assert store.verify("s1").ok
    loaded = store.load_session("s1")
    assert loaded.surface.nodes == (0, 3)
    assert loaded.messages() == handle.messages()
    say(handle, "e")  # the next append takes surface_next_pos, not a freed position
    assert surface_table(store, "s1") == [(0, 0), (3, 3), (4, seq + 1)]
    assert store.verify("s1").ok
    assert store.open_session("s1").surface.nodes == (0, 3, seq + 1)


def test_a_removal_of_a_replacement_and_a_clear(store: SessionStore) -> None:
    handle = four(store)
    summary = summarize(handle, 0, 1, [0, 1])
    remove(handle, summary, summary, [summary])
    assert surface_table(store, "s1") == [(2, 2), (3, 3)]
    remove(handle, 2, 3, [2, 3], reason="clear")
    assert surface_table(store, "s1") == []
    assert store.messages("s1") == [] and store.surface("s1") == ()
    report = store.verify("s1")
    assert report.ok, report
    assert session_row(store, "s1").replace_generation == 3


def test_a_batch_mixing_appends_replaces_and_removals(store: SessionStore) -> None:
    handle = four(store)
    op = {"type": "surface/removed", "data": {"reason": "pop"}}
    handle.append_many(
        [
            {**op, "surface_op": Replace(3, 3), "source_event_seqs": [3]},
            {"type": "user/message", "data": say_data("e"), "surface_op": "append"},
            {**op, "surface_op": Replace(1, 5), "source_event_seqs": [1, 2, 5]},
        ]
    )
    assert handle.surface.nodes == store.surface("s1") == (0,)
    assert surface_table(store, "s1") == [(0, 0)]
    assert session_row(store, "s1").surface_next_pos == 5
    assert store.verify("s1").ok
    assert store.open_session("s1").surface.nodes == (0,)


def say_data(text: str) -> dict[str, object]:
    return {
        "id": "u-" + text,
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


def test_an_appending_removal_is_refused_and_writes_nothing(store: SessionStore) -> None:
    handle = four(store)
    with refused(store, SurfaceError, handle, match="never 'append'"):
        handle.append("surface/removed", {"reason": "x"}, surface_op="append")


def test_verify_catches_a_removed_node_left_in_the_table(store: SessionStore) -> None:
    handle = four(store)
    remove(handle, 1, 1, [1])
    execute(
        store,
        insert(tables(store).surface).values(
            tenant=store.tenant,
            session_key=key_of(store, "s1", store.tenant),
            pos=1,
            event_seq=1,
        ),
    )
    report = store.verify("s1")
    assert not report.ok


def test_jsonl_round_trip_keeps_the_removal(store: SessionStore, tmp_path: Path) -> None:
    handle = four(store)
    remove(handle, 0, 2, [0, 1, 2], reason="clear")
    store.export_jsonl("s1", tmp_path / "s1.jsonl")
    store.delete_session("s1")
    assert store.import_jsonl(tmp_path / "s1.jsonl") == "s1"
    assert store.surface("s1") == (3,)
    assert surface_table(store, "s1") == [(3, 3)]
    assert store.verify("s1").ok


@pytest.mark.parametrize("how", ["seed", "fork"])
def test_seeds_and_forks_carry_removals(store: SessionStore, how: str) -> None:
    handle = four(store)
    remove(handle, 1, 2, [1, 2])
    if how == "seed":
        child = store.create_session("c", seed=[e.to_json() for e in handle.events])
    else:
        child = store.fork_session("s1", child_id="c")
    assert child.surface.nodes == store.surface("c") == (0, 3)
    assert surface_table(store, "c") == [(0, 0), (3, 3)]
    assert store.verify("c").ok
