"""Types survive the round trip through every backend (SPEC §1.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from session_sql import SessionStore

from .store_builders import user_message, wires

MAX_SAFE = 2**53 - 1

TRICKY: dict[str, Any] = {
    "float_1e16": 1e16,
    "float_one": 1.0,
    "float_neg": -2.5,
    "float_tiny": 1e-7,
    "float_huge": 1.5e300,
    "float_third": 1 / 3,
    "int_max": MAX_SAFE,
    "int_min": -MAX_SAFE,
    "int_zero": 0,
    "bools": [True, False, None],
    "unicode": "naïve café — 你好 🎉 \u200d a\u0301 \U0001f600",
    "exponent_in_text": "1e+16 stays text",
    "escapes": 'quote " backslash \\ newline \n tab \t',
    "empty": [{}, [], ""],
    "nested": {"a": [{"b": [1.0, {"c": [1e16, MAX_SAFE, "d"]}]}]},
    "deep": [[[[[[[[[[{"x": 1.0}]]]]]]]]]],
}


def assert_same_types(got: Any, want: Any, path: str = "value") -> None:
    """Equal values whose every scalar has exactly the same type (1.0 is not 1)."""
    if isinstance(want, Mapping):
        assert isinstance(got, Mapping), path
        assert set(got) == set(want), path
        for key in want:
            assert_same_types(got[key], want[key], f"{path}[{key!r}]")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_types(g, w, f"{path}[{i}]")
    else:
        assert type(got) is type(want), f"{path}: {got!r} is {type(got).__name__}"
        assert got == want, path


def _write(store: SessionStore) -> dict[str, int]:
    header = {"version": 0, "id": "t", "createdAt": 1, "isSeeded": False, "meta": TRICKY}
    handle = store.create_session(header=header)
    message = {**user_message("types", id="m"), "extra": TRICKY}
    seqs = {
        "message": handle.append("user/message", message, surface_op="append").seq,
        "plugin": handle.append("todo/write", TRICKY).seq,
    }
    for name in ("float_1e16", "float_one", "int_max", "unicode"):  # top-level scalars too
        seqs[name] = handle.append("todo/write", TRICKY[name]).seq
    return seqs


def _check(store: SessionStore, seqs: dict[str, int]) -> None:
    loaded = store.load_session("t")
    assert_same_types(loaded.header["meta"], TRICKY, "header.meta")
    streamed = list(store.events("t"))
    for events in (loaded.events, streamed):
        assert_same_types(events[seqs["message"]].data["extra"], TRICKY, "message.extra")
        assert_same_types(events[seqs["plugin"]].data, TRICKY, "plugin data")
        for name in ("float_1e16", "float_one", "int_max", "unicode"):
            assert_same_types(events[seqs[name]].data, TRICKY[name], name)
    (message,) = store.messages("t")
    assert_same_types(message["extra"], TRICKY, "messages()[0].extra")
    (followed,) = [e for e in store.follow("t", timeout=0) if e.seq == seqs["plugin"]]
    assert_same_types(followed.data, TRICKY, "followed data")


def test_types_survive_the_store(store):
    seqs = _write(store)
    _check(store, seqs)
    handle = store.open_session("t")
    assert_same_types(handle.events[seqs["plugin"]].data, TRICKY, "opened handle")


def test_types_survive_export_and_import(store, other_store, tmp_path):
    seqs = _write(store)
    store.export_jsonl("t", tmp_path / "t.jsonl")
    other_store.import_jsonl(tmp_path / "t.jsonl")
    _check(other_store, seqs)
    assert wires(other_store.events("t")) == wires(store.events("t"))
