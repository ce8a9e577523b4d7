"""SPEC §7.5: ``Session.fork``."""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import (
    DEFAULT_CATALOG,
    ForkError,
    InvalidEventError,
    InvalidHeaderError,
    InvalidSeedError,
    Session,
    check_invariants,
)

from .builders import (
    Clock,
    begin_step,
    begin_turn,
    new_session,
    refused,
    reply,
    say,
    tool_turn,
)

END_SEED = "session/end-seed"


def closed_parent() -> Session:
    parent = new_session("parent")
    tool_turn(parent, 1)
    tool_turn(parent, 2)
    return parent


def test_a_fork_of_a_closed_log_is_the_parent_log_plus_the_marker() -> None:
    parent = closed_parent()
    child = parent.fork(child_id="child")
    assert list(child.events[: parent.seq]) == list(parent.events)
    marker = child.events[parent.seq]
    assert (marker.type, marker.seq, marker.data) == (END_SEED, parent.seq, {"inherited": True})
    assert marker.time == parent.events[-1].time
    assert child.seq == parent.seq + 1
    assert child.surface.nodes == parent.surface.nodes
    assert child.messages() == parent.messages()


def test_the_child_header_and_counters() -> None:
    parent = closed_parent()
    child = parent.fork(child_id="child")
    assert child.id == "child"
    assert child.header["parentSession"] == "parent"
    assert child.header["isSeeded"] is True
    assert child.header["version"] == 0
    assert child.inherited_event_count == parent.seq
    assert child.first_live_seq == child.seq


def test_the_default_boundary_is_the_last_event_and_the_id_is_generated() -> None:
    parent = closed_parent()
    child = parent.fork()
    assert child.id != parent.id
    assert child.inherited_event_count == parent.seq


def test_a_boundary_between_turns_inherits_a_prefix() -> None:
    parent = closed_parent()
    child = parent.fork(12, "child")  # the turn/end of turn 1
    assert [e.seq for e in child.events] == list(range(14))
    assert list(child.events[:13]) == list(parent.events[:13])
    assert child.events[13].type == END_SEED
    assert child.inherited_event_count == 13
    assert len(child.messages()) == 4  # user, tool-calling reply, result, final reply


def test_a_boundary_inside_an_open_turn_gets_forked_closers() -> None:
    parent = closed_parent()
    # Turn 1, seq 6 is the tool/call: the call was started but its result lies beyond the cut.
    child = parent.fork(6, "child")
    types = [e.type for e in child.events[7:]]
    assert types == [END_SEED, "tool/result", "step/end", "turn/end"]
    result = child.events[8]
    assert result.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert result.source_event_seqs == (6,)
    assert "forked" in result.data["message"]["content"][0]["content"][0]["text"]
    assert child.events[-1].data == {"turn": 1, "reason": {"kind": "forked"}}
    assert child.events[-1].time == parent.events[6].time
    assert child.inherited_event_count == 7
    assert child.first_live_seq == child.seq == 11
    assert child.surface.nodes == (2, 5, 8)
    assert check_invariants(child.events) == []


def test_a_boundary_before_the_tool_call_gives_not_started() -> None:
    parent = closed_parent()
    child = parent.fork(5, "child")  # the assistant/message with the call; no tool/call yet
    result = child.events[7]
    assert result.type == "tool/result"
    assert result.data["error"]["code"] == "TOOL_NOT_STARTED"
    assert result.source_event_seqs is None


def test_a_boundary_inside_an_open_step_without_calls() -> None:
    parent = new_session("parent")
    begin_turn(parent)
    begin_step(parent)
    reply(parent, "thinking")
    child = parent.fork(child_id="child")
    assert [e.type for e in child.events[3:]] == [END_SEED, "step/end", "turn/end"]


def test_the_child_can_be_reloaded_from_its_log() -> None:
    parent = closed_parent()
    child = parent.fork(6, "child")
    reloaded = Session(
        seed=[e.to_json() for e in child.events],
        header=child.header,
        inherited_event_count=child.inherited_event_count,
    )
    assert reloaded.messages() == child.messages()
    assert reloaded.surface.nodes == child.surface.nodes
    assert reloaded.events[-1].data == {}  # a resume marker, not a second cut


def test_parent_and_child_are_independent() -> None:
    parent = closed_parent()
    child = parent.fork(child_id="child")
    parent_log, child_log = list(parent.events), list(child.events)
    say(child, "child only")
    assert list(parent.events) == parent_log
    say(parent, "parent only")
    assert list(child.events[: len(child_log)]) == child_log
    assert child.messages()[-1]["content"][0]["text"] == "child only"
    assert parent.messages()[-1]["content"][0]["text"] == "parent only"


def test_a_fork_of_a_fork_names_its_own_parent() -> None:
    grandchild = closed_parent().fork(child_id="child").fork(child_id="grandchild")
    assert grandchild.header["parentSession"] == "child"
    assert [e.data for e in grandchild.events if e.type == END_SEED] == [
        {"inherited": True},
        {"inherited": True},
    ]


def test_the_child_keeps_the_parent_catalog_and_clock() -> None:
    catalog = DEFAULT_CATALOG.extend(["vendor/x"])
    parent = Session("parent", catalog=catalog, clock=Clock())
    parent.append("vendor/x", {})
    child = parent.fork(child_id="child")
    assert child.catalog is catalog
    child.append("vendor/x", {})


@pytest.mark.parametrize(
    ("boundary", "code"),
    [(-1, "out_of_range"), (26, "out_of_range"), (100, "out_of_range"), (True, "out_of_range")],
)
def test_an_invalid_boundary_is_a_fork_error_with_a_code(boundary: Any, code: str) -> None:
    parent = closed_parent()
    with refused(parent, ForkError) as info:
        parent.fork(boundary, "child")
    assert info.value.code == code
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("boundary", [1.0, "3", [3]])
def test_a_non_int_boundary_is_a_fork_error(boundary: Any) -> None:
    parent = closed_parent()
    with refused(parent, ForkError):
        parent.fork(boundary, "child")


def test_an_empty_session_cannot_be_forked() -> None:
    parent = new_session("parent")
    with refused(parent, ForkError) as info:
        parent.fork()
    assert info.value.code == "empty"


def test_a_child_cannot_reuse_the_parent_id() -> None:
    parent = closed_parent()
    with refused(parent, ForkError) as info:
        parent.fork(child_id="parent")
    assert info.value.code == "same_id"


def test_a_bad_child_id_is_a_header_error() -> None:
    parent = closed_parent()
    with refused(parent, InvalidHeaderError):
        parent.fork(child_id="")


# -- the inherited-marker rule: a cut lies inside a seeded session's inherited prefix ---------


def test_an_inherited_marker_cannot_be_appended_after_the_cut() -> None:
    child = closed_parent().fork(child_id="child")
    say(child, "live")
    for append in (
        lambda: child.append(END_SEED, {"inherited": True}),
        lambda: child.append_many([{"type": END_SEED, "data": {"inherited": True}}]),
    ):
        with refused(child, InvalidEventError, match="inherited-marker rule") as info:
            append()
        assert info.value.seq == child.seq
    assert child.append(END_SEED, {}).data == {}  # a plain marker stays allowed


def test_an_unseeded_session_cannot_hold_an_inherited_marker() -> None:
    session = closed_parent()
    with refused(session, InvalidEventError, match="not seeded"):
        session.append(END_SEED, {"inherited": True})
    seed = [e.to_json() for e in closed_parent().fork(child_id="c").events]
    with pytest.raises(InvalidSeedError, match="inherited-marker rule") as info:
        Session(seed=seed)
    assert info.value.index == closed_parent().seq


def test_a_seed_may_not_hold_a_marker_after_its_inherited_prefix() -> None:
    child = closed_parent().fork(child_id="child")
    cut = child.inherited_event_count
    say(child, "live")
    seed = [*(e.to_json() for e in child.events), _wire_marker(child.seq)]
    with pytest.raises(InvalidSeedError, match="after the inherited prefix") as info:
        Session(seed=seed, header=child.header, inherited_event_count=cut)
    assert info.value.index == child.seq
    # A fork of a fork keeps its parent's cut, inside its own inherited prefix.
    grandchild = child.fork(child_id="grandchild")
    again = Session(
        seed=[e.to_json() for e in grandchild.events],
        header=grandchild.header,
        inherited_event_count=grandchild.inherited_event_count,
    )
    assert [e.seq for e in again.events if e.data == {"inherited": True}] == [
        cut,
        grandchild.inherited_event_count,
    ]


def _wire_marker(seq: int) -> dict[str, Any]:
    return {"type": END_SEED, "seq": seq, "time": 0, "data": {"inherited": True}}
