"""Every refused input leaves the three tables byte-for-byte and the handle's memory unchanged."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from sqlalchemy import update

from session_sql import (
    CorruptSessionError,
    ForkError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    NotJSONError,
    Replace,
    SessionExistsError,
    SessionFormatUnsupportedError,
    SessionNotFoundError,
    SurfaceError,
    open_store,
)

from .store_builders import (
    assistant_message,
    execute,
    key_of,
    refused,
    say,
    tables,
    tool_result_data,
    tool_turn,
    tool_turn_log,
    user_message,
)

# The base session: ``tool_turn_log()`` (seqs 0–12: user 2, reply 5, tool/call 6, result 7,
# final reply 10), its end-of-seed marker (13) and one live user message (14). The refused
# event would be seq 15 (16 as the middle item of a batch).
USER, REPLY, CALL, RESULT, FINAL, LIVE = 2, 5, 6, 7, 10, 14

cycle: dict[str, Any] = {}
cycle["self"] = cycle

too_deep: list[Any] = []
for _ in range(600):  # lossless JSON in memory, but more nesting than the store reads back
    too_deep = [too_deep]


def _um(**kwargs: Any) -> dict[str, Any]:
    return {"type": "user/message", "data": user_message(id="m"), **kwargs}


def _todo(value: Any) -> dict[str, Any]:
    return {"type": "todo/write", "data": {"items": [1, {"v": value}]}}


def _result(**kwargs: Any) -> dict[str, Any]:
    return {"type": "tool/result", "data": tool_result_data("c1", "[pruned]"), **kwargs}


def _error_result() -> dict[str, Any]:
    data = tool_result_data("c1")
    data["error"] = {"name": "Failed", "code": "X"}
    return {"type": "tool/result", "data": data, "surface_op": "append"}


def _wrong_source_reply() -> dict[str, Any]:
    message = assistant_message()
    message["source"] = {"kind": "user"}
    data = {"turn": 1, "step": 1, "message": message}
    return {"type": "assistant/message", "data": data, "surface_op": "append"}


REFUSED_ITEMS: list[tuple[str, Any, type[Exception]]] = [
    # envelope and vocabulary
    ("empty-type", {"type": "", "data": {}}, InvalidEventError),
    ("bad-type-name", {"type": "has space", "data": {}}, InvalidEventError),
    ("unknown-type", {"type": "x/unknown", "data": {}}, InvalidEventError),
    (
        "ignorable-not-bool",
        {"type": "todo/write", "data": {}, "ignorable": "yes"},
        InvalidEventError,
    ),
    # data rules
    (
        "malformed-message",
        {"type": "user/message", "data": {"id": "u", "role": "user"}, "surface_op": "append"},
        InvalidEventError,
    ),
    ("assistant-not-from-model", _wrong_source_reply(), InvalidEventError),
    ("error-without-isError", _error_result(), InvalidEventError),
    (
        "request-header-not-object",
        {"type": "request/header", "data": {"header": "x"}},
        InvalidEventError,
    ),
    ("bad-marker", {"type": "session/end-seed", "data": {"x": 1}}, InvalidEventError),
    # surface metadata and provenance
    ("missing-surface-op", _um(), SurfaceError),
    ("unknown-surface-op", _um(surface_op="prepend"), InvalidEventError),
    (
        "replace-extra-key",
        _um(surface_op={"op": "replace", "start": USER, "end": USER, "x": 1}),
        InvalidEventError,
    ),
    (
        "surface-op-on-log-only-type",
        {"type": "turn/start", "data": {"turn": 2}, "surface_op": "append"},
        SurfaceError,
    ),
    (
        "sources-on-log-only-type",
        {"type": "todo/write", "data": {}, "source_event_seqs": [1]},
        SurfaceError,
    ),
    ("empty-sources", _um(surface_op="append", source_event_seqs=[]), InvalidEventError),
    ("duplicate-sources", _um(surface_op="append", source_event_seqs=[1, 1]), InvalidEventError),
    ("future-source", _um(surface_op="append", source_event_seqs=[99]), InvalidEventError),
    # replaces
    (
        "replace-endpoint-not-on-surface",
        _um(surface_op=Replace(3, 3), source_event_seqs=[3]),
        SurfaceError,
    ),
    (
        "replace-endpoint-not-before-event",
        _um(surface_op=Replace(USER, 50), source_event_seqs=[USER]),
        SurfaceError,
    ),
    (
        "replace-reversed",
        _um(surface_op=Replace(FINAL, USER), source_event_seqs=[USER, REPLY, RESULT, FINAL]),
        SurfaceError,
    ),
    (
        "replace-missing-coverage",
        _um(surface_op=Replace(USER, REPLY), source_event_seqs=[USER]),
        SurfaceError,
    ),
    (
        "result-replaces-user-message",
        _result(surface_op=Replace(USER, USER), source_event_seqs=[USER]),
        SurfaceError,
    ),
    (
        "result-replaces-two-nodes",
        _result(surface_op=Replace(REPLY, RESULT), source_event_seqs=[REPLY, RESULT]),
        SurfaceError,
    ),
    (
        "pruning-changes-step",
        {
            "type": "tool/result",
            "data": tool_result_data("c1", "[pruned]", step=2),
            "surface_op": Replace(RESULT, RESULT),
            "source_event_seqs": [RESULT],
        },
        SurfaceError,
    ),
    # values outside lossless JSON
    ("nan", _todo(float("nan")), NotJSONError),
    ("inf", _todo(float("inf")), NotJSONError),
    ("negative-zero", _todo(-0.0), NotJSONError),
    ("unsafe-int", _todo(2**53), NotJSONError),
    ("tuple", _todo((1, 2)), NotJSONError),
    ("set", _todo({1, 2}), NotJSONError),
    ("bytes", _todo(b"x"), NotJSONError),
    ("int-key", _todo({1: "x"}), NotJSONError),
    ("nul-char", _todo("a\x00b"), NotJSONError),
    ("lone-surrogate", _todo("\ud800"), NotJSONError),
    ("cycle", _todo(cycle), NotJSONError),
    ("dict-subclass", _todo(collections.OrderedDict(a=1)), NotJSONError),
    ("object", _todo(object()), NotJSONError),
    ("nesting-too-deep", _todo(too_deep), InvalidEventError),
]


@pytest.fixture
def handle(store):
    session = store.create_session("s1", seed=tool_turn_log())
    assert say(session, "live") == LIVE
    return session


def _each(check: Any) -> None:
    """Run ``check(item, error)`` for every refused item; report every case that failed."""
    failures = []
    for name, item, error in REFUSED_ITEMS:
        try:
            check(item, error)
        except (Exception, pytest.fail.Exception) as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


def test_refused_appends_change_nothing(store, handle):
    other = store.open_session("s1")  # a second handle must not notice anything either

    def check(item: dict[str, Any], error: type[Exception]) -> None:
        with refused(store, error, handle, other):
            handle.append(**item)

    _each(check)
    say(handle, "still usable")
    assert store.verify("s1").ok


def test_a_refused_item_in_a_batch_writes_nothing(store, handle):
    valid = _um(surface_op="append")

    def check(item: dict[str, Any], error: type[Exception]) -> None:
        with refused(store, error, handle):
            handle.append_many([valid, item, valid])

    _each(check)
    handle.append_many([valid, valid])
    assert store.verify("s1").ok


@pytest.mark.parametrize(
    "item",
    [
        pytest.param("user/message", id="not-a-dict"),
        pytest.param({"data": {}}, id="no-type"),
        pytest.param({"type": "todo/write", "surfaceOp": "append"}, id="wire-key"),
    ],
)
def test_malformed_batch_items_are_refused(store, handle, item):
    with refused(store, InvalidEventError, handle):
        handle.append_many([_um(surface_op="append"), item])


# -- store-level refusals ---------------------------------------------------------------------


def test_an_event_above_the_size_limit_is_refused(backend):
    with open_store(backend.url, schema=backend.schema, max_event_bytes=2000) as store:
        handle = store.create_session("s1", seed=tool_turn_log())
        big = {"type": "todo/write", "data": {"text": "x" * 3000}}
        with refused(store, InvalidEventError, handle, match="limit"):
            handle.append(**big)
        with refused(store, InvalidEventError, handle, match="limit"):
            handle.append_many([_um(surface_op="append"), big])
        seed = [*tool_turn_log(), {**big, "seq": 13, "time": 1}]
        with refused(store, InvalidEventError, handle, match="limit"):
            store.create_session("s2", seed=seed)
        say(handle, "small is fine")
        assert store.verify("s1").ok


def test_create_refusals(store, handle):
    with refused(store, SessionExistsError, handle) as info:
        store.create_session("s1")
    assert info.value.session_id == "s1"
    with refused(store, SessionExistsError, handle):
        store.create_session("s1", seed=tool_turn_log())
    with refused(store, InvalidHeaderError, handle):
        store.create_session("bad id\n")
    with refused(store, InvalidHeaderError, handle):
        store.create_session(header={"version": 0, "id": "h", "createdAt": -1, "isSeeded": False})
    with refused(store, SessionFormatUnsupportedError, handle, match="newer"):
        store.create_session(header={"version": 1, "id": "h", "createdAt": 1, "isSeeded": False})
    seed = tool_turn_log()
    seed[4] = {**seed[4], "seq": 9}
    with refused(store, InvalidSeedError, handle) as info:
        store.create_session("s2", seed=seed)
    assert info.value.index == 4
    unknown = tool_turn_log()
    unknown.append({"type": "x/unknown", "seq": len(unknown), "time": 1, "data": {}})
    with refused(store, SessionFormatUnsupportedError, handle, match="x/unknown"):
        store.create_session("s2", seed=unknown)


def test_missing_session_refusals(store, handle):
    for call in (
        lambda: store.open_session("nope"),
        lambda: store.open_session("nope", resume=True),
        lambda: store.load_session("nope"),
        lambda: store.messages("nope"),
        lambda: store.surface("nope"),
        lambda: store.events("nope"),
        lambda: store.follow("nope", timeout=0),
        lambda: store.verify("nope"),
        lambda: store.repair("nope"),
        lambda: store.delete_session("nope"),
        lambda: store.fork_session("nope"),
        lambda: store.export_jsonl("nope", "/dev/null"),
        lambda: store.list_sessions(after="nope"),
    ):
        with refused(store, SessionNotFoundError, handle) as info:
            call()
        assert "nope" in str(info.value)


def test_fork_refusals(store, handle):
    store.create_session("empty")
    with refused(store, ForkError, handle) as info:
        store.fork_session("s1", boundary=handle.seq)
    assert info.value.code == "out_of_range"
    with refused(store, ForkError, handle):
        store.fork_session("s1", boundary=-1)
    with refused(store, ForkError, handle) as info:
        store.fork_session("empty")
    assert info.value.code == "empty"
    with refused(store, ForkError, handle) as info:
        store.fork_session("s1", child_id="s1")
    assert info.value.code == "same_id"
    with refused(store, SessionExistsError, handle):
        store.fork_session("s1", child_id="empty")


def test_open_refuses_a_session_that_does_not_replay(store, handle):
    """A stored log this build refuses is never written on top of, even with ``resume``."""
    tool_turn(store.create_session("s2"), close=False)
    e = tables(store).events
    s2 = e.c.session_key == key_of(store, "s2", store.tenant)
    execute(store, update(e).where(s2, e.c.seq == 2).values(data={"x": 1}))
    for resume in (False, True):
        with refused(store, CorruptSessionError, handle) as info:
            store.open_session("s2", resume=resume)
        assert (info.value.session_id, info.value.seq) == ("s2", 2)
    with refused(store, CorruptSessionError, handle):
        store.repair("s2")
    with refused(store, CorruptSessionError, handle):
        store.fork_session("s2")
