"""SPEC §7.6: ``check_invariants`` and ``invariant_validator``."""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import (
    InvalidEventError,
    Replace,
    SessionEvent,
    Violation,
    check_invariants,
    invariant_validator,
)

from .builders import (
    WireLog,
    answer,
    begin_step,
    begin_turn,
    call_tool,
    chunk,
    end_step,
    end_turn,
    new_session,
    refused,
    reply,
    request_header_data,
    say,
    tool_result_data,
    tool_turn,
    tool_turn_log,
    wire,
)


def codes(events: Any) -> list[tuple[int, str]]:
    return [(v.seq, v.code) for v in check_invariants(events)]


def open_step_log() -> WireLog:
    log = WireLog()
    begin_turn(log)  # 0
    begin_step(log)  # 1
    return log


def test_a_sound_log_has_no_violations() -> None:
    assert check_invariants(tool_turn_log(3)) == []
    assert check_invariants([]) == []


def test_violations_carry_seq_code_and_message() -> None:
    log = WireLog()
    chunk(log)
    [violation] = check_invariants(log.events)
    assert isinstance(violation, Violation)
    assert (violation.seq, violation.code) == (0, "outside-step")
    assert "assistant/chunk" in violation.message


def test_seqs_must_increase() -> None:
    events = [wire("todo/write", 0), wire("todo/write", 2), wire("todo/write", 2)]
    assert codes(events) == [(2, "seq-order")]
    assert codes([wire("todo/write", 3), wire("todo/write", 1)]) == [(1, "seq-order")]


def test_turns_are_numbered_from_1() -> None:
    log = WireLog()
    begin_turn(log, 2)
    assert codes(log.events) == [(0, "turn-number")]
    log = WireLog()
    begin_turn(log, 1)
    end_turn(log, 1)
    begin_turn(log, 3)
    assert codes(log.events) == [(2, "turn-number")]


def test_turns_do_not_nest() -> None:
    log = WireLog()
    begin_turn(log, 1)
    begin_turn(log, 2)
    assert codes(log.events) == [(1, "turn-nested")]


def test_turn_end_must_name_the_open_turn() -> None:
    log = WireLog()
    end_turn(log, 1)
    assert codes(log.events) == [(0, "turn-not-open")]
    log = WireLog()
    begin_turn(log, 1)
    end_turn(log, 2)
    assert codes(log.events) == [(1, "turn-not-open")]


def test_a_turn_cannot_end_with_an_open_step() -> None:
    log = open_step_log()
    end_turn(log)
    assert codes(log.events) == [(2, "step-open-at-turn-end")]


def test_steps_live_inside_an_open_turn() -> None:
    log = WireLog()
    begin_step(log)
    assert codes(log.events) == [(0, "step-outside-turn")]
    log = WireLog()
    begin_turn(log, 1)
    begin_step(log, 2, 1)
    assert codes(log.events) == [(1, "step-outside-turn")]


def test_steps_are_numbered_from_1_in_each_turn() -> None:
    log = WireLog()
    begin_turn(log, 1)
    begin_step(log, 1, 2)
    assert codes(log.events) == [(1, "step-number")]
    log = WireLog()
    begin_turn(log, 1)
    begin_step(log, 1, 1)
    end_step(log, 1, 1)
    begin_step(log, 1, 2)
    end_step(log, 1, 2)
    end_turn(log, 1)
    begin_turn(log, 2)
    begin_step(log, 2, 1)  # numbering restarts
    assert codes(log.events) == []


def test_steps_do_not_nest() -> None:
    log = open_step_log()
    begin_step(log, 1, 2)
    assert codes(log.events) == [(2, "step-nested")]


def test_step_end_must_name_the_open_step() -> None:
    log = WireLog()
    begin_turn(log)
    end_step(log)
    assert codes(log.events) == [(1, "step-not-open")]
    log = open_step_log()
    end_step(log, 1, 2)
    assert codes(log.events) == [(2, "step-not-open")]


@pytest.mark.parametrize(
    "append",
    [
        lambda log, turn, step: chunk(log, turn=turn, step=step),
        lambda log, turn, step: reply(log, turn=turn, step=step),
        lambda log, turn, step: log.append("assistant/attempt", {"turn": turn, "step": step}),
        lambda log, turn, step: call_tool(log, "c1", turn=turn, step=step),
        lambda log, turn, step: answer(log, "c1", turn=turn, step=step, is_error=False),
    ],
    ids=["chunk", "message", "attempt", "tool/call", "tool/result"],
)
def test_turn_scoped_events_name_the_open_turn_and_step(append: Any) -> None:
    outside = WireLog()
    append(outside, 1, 1)
    assert "outside-step" in [code for _, code in codes(outside.events)]
    wrong = open_step_log()
    append(wrong, 1, 2)
    assert (2, "outside-step") in codes(wrong.events)
    right = open_step_log()
    call_tool(right, "c1")
    append(right, 1, 1)
    assert codes(right.events) == []


def test_a_tool_result_answers_a_tool_call_of_the_same_step() -> None:
    log = open_step_log()
    answer(log, "c1")
    assert codes(log.events) == [(2, "result-without-call")]
    log = open_step_log()
    call_tool(log, "c1")
    end_step(log)
    begin_step(log, 1, 2)
    answer(log, "c1", step=2)  # the call was in step 1
    assert codes(log.events) == [(5, "result-without-call")]


def test_a_synthetic_not_started_result_needs_no_call() -> None:
    log = open_step_log()
    data = tool_result_data(
        "c1", is_error=True, error={"name": "Interrupted", "code": "TOOL_NOT_STARTED"}
    )
    log.append("tool/result", data, surface_op="append")
    assert codes(log.events) == []


def test_a_pruning_tool_result_replace_is_not_turn_scoped() -> None:
    log = WireLog()
    tool_turn(log)
    result = 7
    assert log.events[result]["type"] == "tool/result"
    answer(log, "c1", "[pruned]", surface_op=Replace(result, result), sources=[result])
    assert codes(log.events) == []


@pytest.mark.parametrize("type_", ["request/header", "request/context"])
def test_request_events_belong_inside_an_open_turn(type_: str) -> None:
    data = request_header_data() if type_ == "request/header" else {"provider": "p", "model": "m"}
    log = WireLog()
    log.append(type_, data)
    assert codes(log.events) == [(0, "request-outside-turn")]
    log = WireLog()
    begin_turn(log)
    log.append(type_, data)
    assert codes(log.events) == []


def test_message_and_plugin_events_may_sit_outside_turns() -> None:
    log = WireLog()
    say(log)
    log.append("todo/write", {})
    log.append("session/end-seed", {})
    assert codes(log.events) == []


def test_check_invariants_accepts_events_and_wire_dicts() -> None:
    log = WireLog()
    chunk(log)
    tool_turn(log)
    as_events = [SessionEvent.from_json(e) for e in log.events]
    assert check_invariants(as_events) == check_invariants(log.events)
    assert check_invariants(iter(log.events)) == check_invariants(log.events)


# -- invariant_validator -----------------------------------------------------------------------


def test_the_validator_accepts_a_sound_session_and_refuses_violations() -> None:
    session = new_session()
    session.add_validator(invariant_validator())
    tool_turn(session, 1)
    tool_turn(session, 2)
    with refused(session, InvalidEventError, match="turn-number") as info:
        begin_turn(session, 7)
    assert info.value.code == "turn-number"
    assert info.value.seq == session.seq


def test_the_validator_folds_events_logged_before_it_was_added() -> None:
    session = new_session()
    begin_turn(session, 1)
    session.add_validator(invariant_validator())
    with refused(session, InvalidEventError, match="turn-nested"):
        begin_turn(session, 2)
    end_turn(session, 1)


def test_a_veto_by_a_later_validator_does_not_advance_the_state() -> None:
    session = new_session()
    session.add_validator(invariant_validator())
    vetoes = {"next": True}

    def later(s: Any, e: SessionEvent) -> None:
        if vetoes["next"]:
            vetoes["next"] = False
            raise PermissionError("not now")

    session.add_validator(later)
    with refused(session, PermissionError):
        begin_turn(session, 1)
    begin_turn(session, 1)  # if the veto had advanced the state: "turn-nested"/"turn-number"
    vetoes["next"] = True
    with refused(session, PermissionError):
        begin_step(session, 1, 1)
    begin_step(session, 1, 1)  # not "step-nested"
    end_step(session)
    end_turn(session)
    assert check_invariants(session.events) == []


def test_a_refused_event_does_not_advance_the_state() -> None:
    session = new_session()
    session.add_validator(invariant_validator())
    begin_turn(session, 1)
    with refused(session, InvalidEventError, match="step-number"):
        begin_step(session, 1, 2)
    begin_step(session, 1, 1)


def test_append_many_batches_are_validated_as_a_chain() -> None:
    session = new_session()
    session.add_validator(invariant_validator())
    events = session.append_many(
        [
            {"type": "turn/start", "data": {"turn": 1}},
            {"type": "step/start", "data": {"turn": 1, "step": 1}},
            {"type": "step/end", "data": {"turn": 1, "step": 1}},
        ]
    )
    assert len(events) == 3
    with refused(session, InvalidEventError, match="step-nested"):
        session.append_many(
            [
                {"type": "step/start", "data": {"turn": 1, "step": 2}},
                {"type": "step/start", "data": {"turn": 1, "step": 3}},
            ]
        )
    session.append_many(
        [
            {"type": "step/start", "data": {"turn": 1, "step": 2}},
            {"type": "step/end", "data": {"turn": 1, "step": 2}},
            {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
        ]
    )
    assert check_invariants(session.events) == []


def test_a_batch_vetoed_by_a_later_validator_does_not_advance_the_state() -> None:
    session = new_session()
    session.add_validator(invariant_validator())

    def no_turn_end(s: Any, e: SessionEvent) -> None:
        if e.type == "turn/end":
            raise PermissionError("keep the turn open")

    remove = session.add_validator(no_turn_end)
    batch = [
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    with refused(session, PermissionError):
        session.append_many(batch)
    remove()
    session.append_many(batch)  # turn 1 again: the vetoed batch left no trace
    begin_turn(session, 2)
    assert check_invariants(session.events) == []


# -- a framework adapter's log: turns without step events ------------------------------------


def _fw_user(seq: int, kind: str = "langgraph") -> dict[str, Any]:
    message = {"id": f"u{seq}", "role": "user", "content": [], "source": {"kind": kind}}
    return {"type": "user/message", "seq": seq, "time": 0, "data": message, "surfaceOp": "append"}


def _fw(seq: int, kind: str, turn: int, step: int, **data: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 0, "data": {"turn": turn, "step": step, **data}}


def _fw_turn(seq: int, kind: str, turn: int) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 0, "data": {"turn": turn}}


def _fw_result(seq: int, turn: int, step: int, call_id: str) -> dict[str, Any]:
    message = {"id": f"r{seq}", "role": "user", "content": [], "source": {"callId": call_id}}
    event = _fw(seq, "tool/result", turn, step, message=message)
    return {**event, "surfaceOp": "append"}


def _framework_log(kind: str) -> list[dict[str, Any]]:
    """A LangGraph-like log: messages numbered by turn and step, no step events, a run left
    open, a resume answering its interrupted run's call in a new turn, a rewritten prefix."""
    return [
        _fw(0, "assistant/message", 0, 0, message={"id": "old"}),  # kept by a rewrite
        _fw_turn(1, "turn/start", 1),
        _fw_user(2, kind),
        _fw(3, "assistant/message", 1, 1, message={"id": "a1"}),
        _fw(4, "tool/call", 1, 1, callId="c1"),
        _fw_turn(5, "turn/start", 2),  # turn 1 never ended: a run that finished
        _fw_result(6, 2, 0, "c1"),
        _fw(7, "assistant/message", 2, 1, message={"id": "a2"}),
        _fw_turn(8, "turn/end", 2),
    ]


@pytest.mark.parametrize("kind", ["langgraph", "adk", "openai-agents"])
def test_a_framework_log_is_checked_for_what_its_adapter_guarantees(kind: str) -> None:
    assert codes(_framework_log(kind)) == []


def test_the_same_log_from_no_framework_breaks_the_step_invariants() -> None:
    found = codes(_framework_log("user"))
    assert (5, "turn-nested") in found and (3, "outside-step") in found
    assert (6, "result-without-call") in found


def test_a_framework_log_still_has_its_turns_checked() -> None:
    log = [
        _fw_turn(0, "turn/start", 1),
        _fw_user(1),
        _fw(2, "assistant/message", 2, 1, message={"id": "a"}),  # not the open turn
        _fw_turn(3, "turn/start", 3),  # skips turn 2
        _fw_result(4, 3, 1, "never-called"),
        _fw_turn(5, "turn/end", 1),  # not the open turn
    ]
    assert codes(log) == [
        (2, "outside-turn"),
        (3, "turn-number"),
        (4, "result-without-call"),
        (5, "turn-not-open"),
    ]
