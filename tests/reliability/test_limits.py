"""Limits, with clear errors, on both backends; and the hostile inputs that once escaped raw.

* event size: ``max_event_bytes`` (default 16 MiB of JSON) — exactly the limit is stored, one
  byte more is refused naming the limit, on every write path (append, batch, seed, import) and
  for the session header; the limit is configurable;
* nesting: 512 levels are stored, 513 refused (decoders recurse; the store must read back
  what it wrote), for event data and for the header;
* session ids: 1–128 printable characters; type names: 1–128 characters of ``/``-separated
  segments;
* lookups of ids no session can have, non-iterable seeds and batches, and seq bounds beyond
  BIGINT are refused or answered cleanly (each once raised a raw exception).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from session_sql import (
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    SessionEvent,
    SessionNotFoundError,
    open_store,
)
from session_sql._store.rows import MAX_STORED_DEPTH
from session_sql.jsonvalue import json_equal

from .reliability_builders import assert_store_consistent, user_message

MIB = 1024 * 1024
DEFAULT_LIMIT = 16 * MIB


def _text_of_json_size(size: int, char: str = "x") -> str:
    """A str whose JSON text (with its two quotes) is exactly ``size`` bytes of UTF-8."""
    width = len(char.encode())
    assert (size - 2) % width == 0
    return char * ((size - 2) // width)


@pytest.fixture
def store(backend):
    opened = open_store(backend.url, schema=backend.schema)
    yield opened
    opened.close()


@pytest.mark.slow
def test_the_default_event_limit_is_16_mib_of_json_on_every_write_path(store, tmp_path):
    at_limit = _text_of_json_size(DEFAULT_LIMIT, "é")
    over = at_limit + "x"
    handle = store.create_session("big")
    event = handle.append("todo/write", at_limit)
    assert len(json.dumps(event.data, ensure_ascii=False).encode()) == DEFAULT_LIMIT
    assert next(iter(store.events("big"))).data == at_limit

    with pytest.raises(InvalidEventError, match=f"above the limit of {DEFAULT_LIMIT} bytes"):
        handle.append("todo/write", over)
    with pytest.raises(InvalidEventError, match="above the limit"):
        handle.append_many(
            [{"type": "todo/write", "data": 1}, {"type": "todo/write", "data": over}]
        )
    with pytest.raises(InvalidEventError, match="above the limit"):
        store.create_session(
            "seeded", seed=[{"type": "todo/write", "seq": 0, "time": 1, "data": over}]
        )
    with pytest.raises(InvalidHeaderError, match="above the limit"):
        store.create_session(
            header={"version": 0, "id": "h", "createdAt": 1, "isSeeded": False, "blob": over}
        )
    path = tmp_path / "big.jsonl"
    header = {"version": 0, "id": "imported", "createdAt": 1, "isSeeded": False}
    event_line = {"type": "todo/write", "seq": 0, "time": 1, "data": over}
    path.write_text(json.dumps(header) + "\n" + json.dumps(event_line) + "\n")
    with pytest.raises(InvalidEventError, match="above the limit"):
        store.import_jsonl(path)

    # Nothing of any refusal was written.
    assert [s.id for s in store.list_sessions()] == ["big"]
    assert handle.seq == 1
    assert_store_consistent(store, "big")


def test_the_event_limit_is_configurable(backend):
    with open_store(backend.url, schema=backend.schema, max_event_bytes=1000) as store:
        handle = store.create_session("small")
        handle.append("todo/write", _text_of_json_size(1000))
        with pytest.raises(InvalidEventError, match="above the limit of 1000 bytes"):
            handle.append("todo/write", _text_of_json_size(1001))
        assert handle.seq == 1
    with open_store(backend.url, schema=backend.schema, max_event_bytes=None) as store:
        store.open_session("small").append("todo/write", _text_of_json_size(2 * MIB))


def _nested(depth: int, inner: Any = 0) -> Any:
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_is_stored_up_to_the_limit_and_refused_beyond(store):
    handle = store.create_session("deep")
    handle.append("todo/write", _nested(MAX_STORED_DEPTH))
    with pytest.raises(InvalidEventError, match=f"at most {MAX_STORED_DEPTH}"):
        handle.append("todo/write", _nested(MAX_STORED_DEPTH + 1))
    with pytest.raises(InvalidEventError, match=f"at most {MAX_STORED_DEPTH}"):
        handle.append("todo/write", {"k": _nested(100_000)})
    # json_equal, not ==: comparing 512 nested lists recurses (in Python, for FrozenList).
    assert json_equal(store.load_session("deep").events[0].data, _nested(MAX_STORED_DEPTH))
    assert_store_consistent(store, "deep")

    # The header too: the session would otherwise be written and never read back.
    def header(depth: int) -> dict[str, Any]:
        return {
            "version": 0,
            "id": f"h{depth}",
            "createdAt": 1,
            "isSeeded": False,
            "x": _nested(depth),
        }

    store.create_session(header=header(MAX_STORED_DEPTH - 1))  # the header object is a level
    assert json_equal(
        store.load_session(f"h{MAX_STORED_DEPTH - 1}").header["x"], _nested(MAX_STORED_DEPTH - 1)
    )
    for depth in (MAX_STORED_DEPTH, 5000):
        with pytest.raises(InvalidHeaderError, match=f"at most {MAX_STORED_DEPTH}"):
            store.create_session(header=header(depth))
    assert sorted(s.id for s in store.list_sessions()) == ["deep", f"h{MAX_STORED_DEPTH - 1}"]


@pytest.mark.parametrize(
    ("session_id", "ok"),
    [
        ("s" * 128, True),
        ("s" * 129, False),
        ("", False),
        ("a\nb", False),
        ("tab\there", False),
        ("\u200b", False),  # format character: not printable
        ("spaces are fine", True),
        ("ünïcødé 🙂", True),
        ("x'); DROP TABLE events; --", True),
        (None, True),  # a generated id
        (7, False),
    ],
)
def test_session_id_format(store, session_id, ok):
    if ok:
        handle = store.create_session(session_id)
        assert session_id is None or handle.id == session_id
        assert store.open_session(handle.id).id == handle.id
    else:
        with pytest.raises(InvalidHeaderError, match="1–128 printable characters"):
            store.create_session(session_id)
        assert store.list_sessions() == []


@pytest.mark.parametrize(
    ("type_name", "ok"),
    [
        ("a" * 128, True),
        ("a" * 129, False),
        ("plugin/v1.2/thing_x-y", True),
        ("", False),
        ("/leading", False),
        ("trailing/", False),
        ("double//slash", False),
        ("white space", False),
        ("ünicode", False),
        ("nul\x00", False),
    ],
)
def test_type_name_format(store, type_name, ok):
    handle = store.create_session("types")
    if ok:
        handle.append(type_name, {}, ignorable=True)
        assert [e.type for e in store.events("types")] == [type_name]
    else:
        with pytest.raises(InvalidEventError, match="type"):
            handle.append(type_name, {}, ignorable=True)
        assert handle.seq == 0


@pytest.mark.parametrize(
    "bad_id", ["\ud800", "a\udfffb", 123, b"bytes", None, "", "x" * 129, "\x00"], ids=repr
)
def test_a_lookup_of_an_id_no_session_can_have_is_not_found(store, bad_id):
    store.create_session("real").append("todo/write", {})
    lookups = {
        "open_session": lambda: store.open_session(bad_id),
        "load_session": lambda: store.load_session(bad_id),
        "messages": lambda: store.messages(bad_id),
        "surface": lambda: store.surface(bad_id),
        "events": lambda: store.events(bad_id),
        "follow": lambda: store.follow(bad_id, timeout=0),
        "verify": lambda: store.verify(bad_id),
        "repair": lambda: store.repair(bad_id),
        "delete_session": lambda: store.delete_session(bad_id),
        "fork_session": lambda: store.fork_session(bad_id),
        "export_jsonl": lambda: store.export_jsonl(bad_id, "/dev/null"),
        "head_seq": lambda: store.head_seq(bad_id),
    }
    if bad_id is not None:  # stats(None) is the whole store
        lookups["stats"] = lambda: store.stats(bad_id)
    if bad_id is not None:  # after=None and parent=None filter nothing
        lookups["list_sessions(after=)"] = lambda: store.list_sessions(after=bad_id)
        assert store.list_sessions(parent=bad_id) == []
    for name, lookup in lookups.items():
        with pytest.raises(SessionNotFoundError):
            lookup()
            pytest.fail(f"{name} found {bad_id!r}")


def test_non_iterable_seeds_and_batches_are_refused_cleanly(store):
    for seed in (5, 1.5, object()):
        with pytest.raises(InvalidSeedError, match="a seed must be a list"):
            store.create_session(seed=seed)
    handle = store.create_session("batches")
    for items in (5, None, "todo/write", {"type": "todo/write"}):
        with pytest.raises(InvalidEventError, match="append_many"):
            handle.append_many(items)
    assert handle.seq == 0
    assert [s.id for s in store.list_sessions()] == ["batches"]


@pytest.mark.parametrize(
    "fields",
    [
        {"source_event_seqs": 5},
        {"source_event_seqs": "12"},
        {"ignorable": "yes"},
        {"surface_op": "bogus"},
        {"time": 1.5},
    ],
    ids=repr,
)
def test_a_hand_built_session_event_in_a_seed_is_checked_like_a_wire_dict(store, fields):
    event = SessionEvent(**{"type": "todo/write", "seq": 0, "time": 1, "data": {}, **fields})
    with pytest.raises(InvalidSeedError, match="seed event 0"):
        store.create_session(seed=[event])
    assert store.list_sessions() == []


def test_seq_bounds_beyond_bigint_are_answered(store):
    handle = store.create_session("bounds")
    handle.append("user/message", user_message("hi"), surface_op="append")
    assert list(store.events("bounds", from_seq=2**70)) == []
    assert len(list(store.events("bounds", to_seq=2**70))) == 1
    assert len(list(store.events("bounds", from_seq=-(2**70)))) == 1
    assert list(store.follow("bounds", after_seq=2**70, timeout=0.05)) == []
