"""SPEC §7.1–7.3: construction and seeds, the append pipeline, readers."""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from typing import Any

import pytest

from session_sql import (
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    NotJSONError,
    ReentrantAppendError,
    Replace,
    Session,
    SessionEvent,
    SessionFormatUnsupportedError,
    SurfaceError,
)

from .builders import (
    T0,
    Clock,
    WireLog,
    new_session,
    refused,
    reply,
    request_header_data,
    say,
    summarize,
    tool_turn,
    tool_turn_log,
    user_message,
    wire,
)

END_SEED = "session/end-seed"


def seeded_header(session_id: str = "child", **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": session_id, "createdAt": T0, "isSeeded": True, **extra}


# -- §7.1 construction -------------------------------------------------------------------------


def test_a_session_without_seed_starts_empty_without_marker() -> None:
    session = new_session()
    assert session.seq == 0
    assert list(session.events) == []
    assert session.first_live_seq == 0
    assert session.inherited_event_count == 0
    assert session.surface.nodes == ()
    assert session.messages() == []
    assert session.request_header() is None


def test_an_empty_seed_gets_the_end_of_seed_marker() -> None:
    session = Session(seed=[], clock=lambda: T0)
    assert [(e.type, e.seq, e.data) for e in session.events] == [(END_SEED, 0, {})]
    assert session.first_live_seq == 0  # the seed length: the marker is the first live event
    assert session.events[0].time == T0


def test_a_seed_is_replayed_and_followed_by_the_marker() -> None:
    log = tool_turn_log(2)
    original = Session(seed=log)
    assert [e.to_json() for e in original.events[: len(log)]] == log
    assert original.events[len(log)].type == END_SEED
    assert original.events[len(log)].data == {}
    assert original.seq == len(log) + 1
    assert original.first_live_seq == len(log)
    live = new_session()
    tool_turn(live, 1)
    tool_turn(live, 2)
    assert original.messages() == live.messages()
    assert original.surface.nodes == live.surface.nodes


def test_reopening_a_seed_that_ends_with_the_marker_does_not_grow_it() -> None:
    first = Session(seed=tool_turn_log())
    wire_log = [e.to_json() for e in first.events]
    second = Session(seed=wire_log)
    third = Session(seed=[e.to_json() for e in second.events])
    assert second.seq == third.seq == first.seq
    assert second.first_live_seq == third.first_live_seq == first.seq
    assert [e.to_json() for e in third.events] == wire_log


def test_a_seed_ending_with_an_inherited_marker_gets_no_second_marker() -> None:
    seed = [*tool_turn_log(), wire(END_SEED, 13, {"inherited": True})]
    session = Session(seed=seed, header=seeded_header(), inherited_event_count=13)
    assert session.seq == len(seed)
    assert session.events[-1].data == {"inherited": True}


def test_a_seeded_header_gets_the_inherited_marker() -> None:
    log = tool_turn_log()
    session = Session(seed=log, header=seeded_header(parentSession="p"), inherited_event_count=13)
    assert session.inherited_event_count == 13
    assert session.header["isSeeded"] is True
    assert session.events[13].type == END_SEED
    assert session.events[13].data == {"inherited": True}
    assert session.first_live_seq == 13


def test_a_seeded_log_that_already_holds_its_cut_gets_a_plain_marker() -> None:
    # The stored log of a fork that has lived on: prefix, cut, then its own events.
    log = WireLog()
    say(log)
    log.append(END_SEED, {"inherited": True})
    say(log)
    session = Session(seed=log.events, header=seeded_header(), inherited_event_count=1)
    assert [e.data for e in session.events if e.type == END_SEED] == [{"inherited": True}, {}]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"header": seeded_header()}, "requires a seed"),
        ({"header": seeded_header(), "seed": tool_turn_log()}, "inherited_event_count"),
        (
            {"header": seeded_header(), "seed": tool_turn_log(), "inherited_event_count": 14},
            "exceeds",
        ),
        ({"seed": tool_turn_log(), "inherited_event_count": 3}, "seeded header"),
        ({"inherited_event_count": 1}, "seeded header"),
        ({"seed": [], "inherited_event_count": -1}, ">= 0"),
        ({"seed": [], "inherited_event_count": "1"}, ">= 0"),
    ],
    ids=[
        "seeded-without-seed",
        "seeded-without-count",
        "count-beyond-seed",
        "count-without-seeded-header",
        "count-without-anything",
        "count-negative",
        "count-str",
    ],
)
def test_seed_and_header_rules_raise_invalid_header(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidHeaderError, match=match):
        Session(**kwargs)


def test_the_whole_seed_may_be_inherited() -> None:
    log = tool_turn_log()
    session = Session(seed=log, header=seeded_header(), inherited_event_count=len(log))
    assert session.inherited_event_count == len(log)


def test_a_seed_is_copied_and_frozen() -> None:
    log = tool_turn_log()
    session = Session(seed=log)
    log[2]["data"]["content"][0]["text"] = "edited afterwards"
    log.append(wire("todo/write", 13, {}))
    assert session.messages()[0]["content"][0]["text"] == "question 1"
    with pytest.raises(TypeError):
        session.events[2].data["id"] = "x"


def test_seed_events_may_be_session_events_or_wire_dicts() -> None:
    events = Session(seed=tool_turn_log()).events
    mixed: list[Any] = [e if e.seq % 2 else e.to_json() for e in events]
    session = Session(seed=mixed)
    assert list(session.events) == list(events)


def test_a_seed_may_be_any_iterable() -> None:
    log = tool_turn_log()
    assert Session(seed=iter(log)).seq == len(log) + 1


BAD_SEEDS = [
    pytest.param(lambda log: log.__setitem__(5, {**log[5], "seq": 6}), "seq", id="seq-skips"),
    pytest.param(lambda log: log.__setitem__(5, {**log[5], "seq": 4}), "seq", id="seq-repeats"),
    pytest.param(lambda log: log[5].__setitem__("extra", 1), "envelope", id="envelope-key"),
    pytest.param(lambda log: log[5].__setitem__("time", "now"), "time", id="envelope-type"),
    pytest.param(lambda log: log[5].__setitem__("data", {"turn": 1}), "data.step", id="data-rule"),
    pytest.param(
        lambda log: log[5]["data"].__setitem__("x", float("nan")), "finite", id="not-json"
    ),
    pytest.param(lambda log: log.__setitem__(5, "event"), "object", id="not-an-object"),
]


@pytest.mark.parametrize(("corrupt", "match"), BAD_SEEDS)
def test_a_bad_seed_event_raises_invalid_seed_with_its_index(corrupt: Any, match: str) -> None:
    log = tool_turn_log()
    corrupt(log)
    with pytest.raises(InvalidSeedError, match=match) as info:
        Session(seed=log)
    assert info.value.index == 5
    assert "seed event 5" in str(info.value)


def test_a_seed_surface_error_is_both_invalid_seed_and_surface_error() -> None:
    log = tool_turn_log()
    log.append(wire("user/message", 13, user_message(), surface_op=Replace(5, 5)))
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=log)
    assert isinstance(info.value, SurfaceError)
    assert info.value.index == 13


def test_a_seed_value_that_is_not_json_keeps_its_cause() -> None:
    log = tool_turn_log()
    log[0]["data"]["when"] = float("inf")
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=log)
    assert isinstance(info.value.__cause__, NotJSONError)
    assert info.value.index == 0


def test_an_unknown_type_in_a_seed_is_not_an_invalid_seed() -> None:
    log = tool_turn_log()
    log[4] = {**log[4], "type": "vendor/new"}
    with pytest.raises(SessionFormatUnsupportedError, match="seq 4"):
        Session(seed=log)


def test_construction_is_atomic() -> None:
    log = tool_turn_log()
    log.append(wire("user/message", 13, user_message()))  # no surfaceOp
    snapshot = [dict(e) for e in log]
    built: list[Session] = []
    with pytest.raises(InvalidSeedError):
        built.append(Session(seed=log))
    assert built == []
    assert log == snapshot  # the caller's seed is untouched


# -- §7.2 append -------------------------------------------------------------------------------


def test_append_stamps_seq_and_time_and_freezes() -> None:
    session = Session("s", clock=lambda: T0 + 100)
    data = user_message()
    event = session.append("user/message", data, surface_op="append")
    assert (event.type, event.seq, event.time) == ("user/message", 0, T0 + 100)
    assert event.data == data
    assert event is session.events[0]
    data["id"] = "edited afterwards"
    assert event.data["id"] == "u1"
    with pytest.raises(TypeError):
        event.data["id"] = "x"
    assert session.append("todo/write").seq == 1
    assert session.events[1].data is None


def test_append_snapshots_metadata() -> None:
    session = new_session()
    for _ in range(3):
        say(session)
    sources = [0, 1]
    event = session.append(
        "user/message", user_message(), surface_op=Replace(0, 1), source_event_seqs=sources
    )
    sources.append(2)
    assert event.source_event_seqs == (0, 1)
    assert type(event.surface_op) is Replace


def test_validators_see_the_candidate_before_commit() -> None:
    session = new_session()
    seen: list[tuple[int, int, SessionEvent]] = []
    session.add_validator(lambda s, e: seen.append((s.seq, len(s.events), e)))
    event = say(session)
    assert seen == [(0, 0, session.events[event])]
    assert seen[0][2] is session.events[event]  # the same frozen candidate is committed


def test_a_validator_veto_propagates_unchanged_and_changes_nothing() -> None:
    session = new_session()
    tool_turn(session)
    observed: list[int] = []
    session.subscribe(lambda s, e: observed.append(e.seq))
    veto = KeyError("vetoed")

    def validator(s: Session, e: SessionEvent) -> None:
        if e.type == "user/message":
            raise veto

    session.add_validator(validator)
    with refused(session, KeyError) as info:
        say(session)
    assert info.value is veto
    assert observed == []
    session.append("todo/write", {})
    assert observed == [13]


def test_a_veto_stops_later_validators() -> None:
    session = new_session()
    calls: list[str] = []

    def first(s: Session, e: SessionEvent) -> None:
        calls.append("first")
        raise RuntimeError("no")

    session.add_validator(first)
    session.add_validator(lambda s, e: calls.append("second"))
    with refused(session, RuntimeError):
        say(session)
    assert calls == ["first"]


def test_a_refused_event_never_reaches_validators() -> None:
    session = new_session()
    calls: list[SessionEvent] = []
    session.add_validator(lambda s, e: calls.append(e))
    with refused(session, SurfaceError):
        session.append("user/message", user_message())
    with refused(session, NotJSONError):
        session.append("todo/write", {"x": float("nan")})
    assert calls == []


def test_validators_run_in_order_and_can_be_removed() -> None:
    session = new_session()
    calls: list[str] = []
    remove_a = session.add_validator(lambda s, e: calls.append("a"))
    session.add_validator(lambda s, e: calls.append("b"))
    say(session)
    remove_a()
    remove_a()  # removing twice is harmless
    say(session)
    assert calls == ["a", "b", "b"]


def test_observers_run_in_registration_order_after_commit() -> None:
    session = new_session()
    calls: list[tuple[str, int, int]] = []
    session.subscribe(lambda s, e: calls.append(("a", e.seq, s.seq)))
    session.subscribe(lambda s, e: calls.append(("b", e.seq, s.seq)))
    event = session.append("todo/write", {})
    assert calls == [("a", 0, 1), ("b", 0, 1)]
    calls.clear()
    session.append_many([{"type": "todo/write"}, {"type": "todo/write"}])
    assert calls == [("a", 1, 3), ("b", 1, 3), ("a", 2, 3), ("b", 2, 3)]
    assert event is session.events[0]


def test_an_observer_receives_the_committed_event_object() -> None:
    session = new_session()
    received: list[SessionEvent] = []
    session.subscribe(lambda s, e: received.append(e))
    event = say(session)
    assert received[0] is session.events[event]


def test_a_failing_observer_is_logged_and_later_observers_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = new_session("obs")
    later: list[int] = []

    def failing(s: Session, e: SessionEvent) -> None:
        raise ValueError("observer broke")

    session.subscribe(failing)
    session.subscribe(lambda s, e: later.append(e.seq))
    with caplog.at_level(logging.WARNING, logger="session_sql"):
        event = session.append("todo/write", {})
    assert event.seq == 0
    assert session.seq == 1  # the commit stands
    assert later == [0]
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.name.startswith("session_sql")
    assert "obs" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)


def test_an_append_from_an_observer_is_reentrant_and_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = new_session()
    errors: list[BaseException] = []

    def appending(s: Session, e: SessionEvent) -> None:
        try:
            s.append("todo/write", {"nested": True})
        except ReentrantAppendError as exc:
            errors.append(exc)
            raise

    later: list[int] = []
    session.subscribe(appending)
    session.subscribe(lambda s, e: later.append(e.seq))
    with caplog.at_level(logging.WARNING, logger="session_sql"):
        session.append("todo/write", {})
    assert len(errors) == 1
    assert session.seq == 1
    assert later == [0]
    assert any(
        r.exc_info and isinstance(r.exc_info[1], ReentrantAppendError) for r in caplog.records
    )
    session.append("todo/write", {})  # the session is usable afterwards
    assert session.seq == 2


def test_an_append_from_a_validator_is_reentrant_and_vetoes() -> None:
    session = new_session()
    say(session)

    def appending(s: Session, e: SessionEvent) -> None:
        s.append("todo/write", {})

    remove = session.add_validator(appending)
    with refused(session, ReentrantAppendError):
        say(session)
    remove()
    say(session)


def test_observers_can_be_unsubscribed() -> None:
    session = new_session()
    calls: list[str] = []

    def observer(s: Session, e: SessionEvent) -> None:
        calls.append("x")

    first = session.subscribe(observer)
    session.subscribe(observer)  # registered twice: called twice
    session.append("todo/write")
    first()
    session.append("todo/write")
    assert calls == ["x", "x", "x"]


def test_an_observer_may_unsubscribe_itself_while_being_notified() -> None:
    session = new_session()
    calls: list[str] = []
    handle: dict[str, Any] = {}

    def once(s: Session, e: SessionEvent) -> None:
        calls.append("once")
        handle["remove"]()

    handle["remove"] = session.subscribe(once)
    session.subscribe(lambda s, e: calls.append("other"))
    session.append("todo/write")
    session.append("todo/write")
    assert calls == ["once", "other", "other"]


def test_append_many_commits_all_or_nothing() -> None:
    session = new_session()
    say(session)
    batch: list[dict[str, Any]] = [
        {"type": "user/message", "data": user_message("b", id="b"), "surface_op": "append"},
        {
            "type": "user/message",
            "data": user_message("sum", id="s"),
            "surface_op": Replace(0, 1),
            "source_event_seqs": [0, 1],
        },
        {"type": "user/message", "data": user_message("bad", id="x")},  # no surfaceOp
    ]
    with refused(session, SurfaceError):
        session.append_many(batch)
    events = session.append_many(batch[:2])
    assert [e.seq for e in events] == [1, 2]
    assert events == list(session.events[1:])
    assert session.surface.nodes == (2,)
    assert session.append_many([]) == []


def test_append_many_validators_see_every_candidate_and_may_veto_the_batch() -> None:
    session = new_session()
    seen: list[int] = []

    def validator(s: Session, e: SessionEvent) -> None:
        seen.append(e.seq)
        if e.data == {"veto": True}:
            raise PermissionError("no")

    session.add_validator(validator)
    batch: list[dict[str, Any]] = [{"type": "todo/write", "data": {}}] * 2
    with refused(session, PermissionError):
        session.append_many([*batch, {"type": "todo/write", "data": {"veto": True}}])
    assert seen == [0, 1, 2]
    assert len(session.append_many(batch)) == 2


@pytest.mark.parametrize(
    "items",
    [
        [{"data": {}}],
        [{"type": "todo/write", "surfaceOp": "append"}],
        ["todo/write"],
    ],
    ids=["missing-type", "wire-key", "not-a-dict"],
)
def test_append_many_items_use_appends_keyword_names(items: list[Any]) -> None:
    session = new_session()
    with refused(session, InvalidEventError):
        session.append_many(items)


def test_append_refuses_a_bad_type_name() -> None:
    session = new_session()
    for bad in ("", "has space", 3):
        with refused(session, InvalidEventError):
            session.append(bad, {})  # type: ignore[arg-type]


# -- §7.3 readers ------------------------------------------------------------------------------


def test_readers() -> None:
    session = Session(seed=tool_turn_log(), clock=Clock())
    assert session.seq == len(session.events) == 14
    assert isinstance(session.id, str)
    assert session.first_live_seq == 13
    assert session.inherited_event_count == 0
    assert session.surface.nodes == (2, 5, 7, 10)


def test_an_events_view_never_grows() -> None:
    session = new_session()
    say(session)
    view = session.events
    say(session)
    assert len(view) == 1
    assert list(view) == [session.events[0]]
    assert view[-1] is session.events[0]
    with pytest.raises(IndexError):
        view[1]
    assert view[0:5] == (session.events[0],)
    assert len(session.events) == 2


def test_the_events_view_is_immutable() -> None:
    session = new_session()
    say(session)
    view: Any = session.events
    with pytest.raises(TypeError):
        operator.setitem(view, 0, None)
    with pytest.raises(TypeError):
        operator.delitem(view, 0)
    assert not hasattr(view, "append")
    assert isinstance(view, Sequence)


def test_surface_nodes_is_an_immutable_snapshot() -> None:
    session = new_session()
    say(session)
    nodes = session.surface.nodes
    say(session)
    assert nodes == (0,)
    assert session.surface.nodes == (0, 1)
    with pytest.raises(TypeError):
        operator.setitem(nodes, 0, 5)  # type: ignore[call-overload]


def test_request_header_is_the_latest_request_header_data() -> None:
    session = new_session()
    assert session.request_header() is None
    session.append("turn/start", {"turn": 1})
    first = session.append("request/header", request_header_data("initial"))
    assert session.request_header() is first.data
    say(session)
    assert session.request_header() is first.data
    second = session.append("request/header", request_header_data("change", model="other"))
    say(session)
    assert session.request_header() is second.data
    assert session.request_header()["header"]["config"]["model"] == "other"
    reloaded = Session(seed=[e.to_json() for e in session.events])
    assert reloaded.request_header() == second.data


def test_message_for_an_unknown_ignorable_event_is_none() -> None:
    session = new_session()
    event = session.append("vendor/x", user_message(), surface_op="append", ignorable=True)
    assert session.message_for(event) is None


def test_a_replace_batch_after_a_summary_matches_a_replay() -> None:
    session = new_session()
    for _ in range(3):
        say(session)
    summarize(session, 0, 1, [0, 1])
    reply(session)
    replayed = Session(seed=[e.to_json() for e in session.events])
    assert replayed.surface.nodes == session.surface.nodes
    assert replayed.surface.replace_generation == session.surface.replace_generation == 1
