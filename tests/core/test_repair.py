"""SPEC §7.4: ``interrupted_turn_closers`` (crash recovery)."""

from __future__ import annotations

from typing import Any

import pytest

from session_sql import Session, SessionEvent, check_invariants, interrupted_turn_closers

from .builders import (
    T0,
    WireLog,
    answer,
    begin_step,
    begin_turn,
    call_tool,
    end_step,
    end_turn,
    reply,
    say,
    tool_turn,
    tool_turn_log,
)


def closers_of(log: WireLog) -> list[SessionEvent]:
    return interrupted_turn_closers(log.events)


def summary(closers: list[SessionEvent]) -> list[tuple[Any, ...]]:
    """``(type, seq, the interesting part of data)`` per closer."""
    rows: list[tuple[Any, ...]] = []
    for event in closers:
        data = event.data
        if event.type == "tool/result":
            rows.append(
                (event.type, event.seq, data["message"]["source"]["callId"], data["error"]["code"])
            )
        elif event.type == "turn/end":
            rows.append((event.type, event.seq, data["turn"], data["reason"]["kind"]))
        else:
            rows.append((event.type, event.seq, data["turn"], data["step"]))
    return rows


@pytest.mark.parametrize(
    "log", [[], tool_turn_log(), tool_turn_log(3)], ids=["empty", "one", "three"]
)
def test_balanced_or_empty_logs_need_no_closers(log: list[dict[str, Any]]) -> None:
    assert interrupted_turn_closers(log) == []


def test_a_log_outside_any_turn_needs_no_closers() -> None:
    log = WireLog()
    say(log)
    reply(log)
    assert closers_of(log) == []


def test_an_open_turn_without_a_step_gets_turn_end() -> None:
    log = WireLog()
    begin_turn(log)
    say(log)
    assert summary(closers_of(log)) == [("turn/end", 2, 1, "interrupted")]


def test_an_open_step_gets_step_end_then_turn_end() -> None:
    log = WireLog()
    tool_turn(log, 1)
    begin_turn(log, 2)
    begin_step(log, 2, 1)
    reply(log, "thinking", turn=2, step=1)
    assert summary(closers_of(log)) == [
        ("step/end", 16, 2, 1),
        ("turn/end", 17, 2, "interrupted"),
    ]


def test_a_closed_step_in_an_open_turn_gets_only_turn_end() -> None:
    log = WireLog()
    begin_turn(log)
    begin_step(log)
    reply(log, "calling", tool_calls=[("c1", "shell")])  # never answered, but its step closed
    end_step(log)
    assert summary(closers_of(log)) == [("turn/end", 4, 1, "interrupted")]


def test_unanswered_tool_calls_get_error_results() -> None:
    log = WireLog()
    begin_turn(log)  # 0
    begin_step(log)  # 1
    reply(
        log, "calling", tool_calls=[("started", "shell"), ("answered", "read"), ("queued", "web")]
    )
    started = call_tool(log, "started")  # 3
    call = call_tool(log, "answered")  # 4
    answer(log, "answered", sources=[call])  # 5
    closers = closers_of(log)
    assert summary(closers) == [
        ("tool/result", 6, "started", "TOOL_OUTCOME_UNKNOWN"),
        ("tool/result", 7, "queued", "TOOL_NOT_STARTED"),
        ("step/end", 8, 1, 1),
        ("turn/end", 9, 1, "interrupted"),
    ]
    unknown, not_started = closers[0], closers[1]
    assert unknown.source_event_seqs == (started,)
    assert not_started.source_event_seqs is None
    for result in (unknown, not_started):
        assert result.surface_op == "append"
        message = result.data["message"]
        [block] = message["content"]
        assert (block["type"], block["isError"]) == ("tool-result", True)
        assert block["toolCallId"] == message["source"]["callId"]
        assert message["role"] == "user"
        assert message["source"]["kind"] == "tool"
        [text] = block["content"]
        assert text["type"] == "text"
        assert "interrupted" in text["text"]
        assert (result.data["turn"], result.data["step"]) == (1, 1)
    assert "unknown" in unknown.data["message"]["content"][0]["content"][0]["text"]
    assert "never started" in not_started.data["message"]["content"][0]["content"][0]["text"]


def test_a_tool_call_event_without_an_assistant_message_gets_no_result() -> None:
    # Only the tool calls of an assistant/message are closed: a result for a call the model
    # never sent would be an orphan in the transcript.
    log = WireLog()
    begin_turn(log)
    begin_step(log)
    call_tool(log, "orphan")
    assert summary(closers_of(log)) == [("step/end", 3, 1, 1), ("turn/end", 4, 1, "interrupted")]


def test_a_tool_call_logged_before_its_assistant_message_is_still_cited() -> None:
    log = WireLog()
    begin_turn(log)
    begin_step(log)
    call = call_tool(log, "c1")
    reply(log, "calling", tool_calls=[("c1", "shell")])
    [result, _, _] = closers_of(log)
    assert result.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert result.source_event_seqs == (call,)


def test_calls_of_an_earlier_step_are_not_closed() -> None:
    log = WireLog()
    begin_turn(log)
    begin_step(log, 1, 1)
    reply(log, "calling", step=1, tool_calls=[("old", "shell")])
    end_step(log, 1, 1)
    begin_step(log, 1, 2)
    reply(log, "calling", step=2, tool_calls=[("new", "shell")])
    assert [
        e.data["message"]["source"]["callId"] for e in closers_of(log) if e.type == "tool/result"
    ] == ["new"]


def test_closers_continue_seqs_and_repeat_the_last_time() -> None:
    log = WireLog()
    tool_turn(log, 1, close=False)
    closers = closers_of(log)
    last = log.events[-1]
    assert [e.seq for e in closers] == list(range(last["seq"] + 1, last["seq"] + 1 + len(closers)))
    assert {e.time for e in closers} == {last["time"]}
    assert last["time"] != T0


def test_closers_make_a_sound_log_that_needs_no_more_closers() -> None:
    log = WireLog()
    tool_turn(log, 1)
    tool_turn(log, 2, close=False)
    closers = closers_of(log)
    repaired = [*log.events, *[e.to_json() for e in closers]]
    assert check_invariants(repaired) == []
    assert interrupted_turn_closers(repaired) == []
    session = Session(seed=repaired)
    assert session.messages()[-1]["content"][0]["isError"] is True


def test_closers_of_a_live_session_can_be_appended() -> None:
    session = Session()
    tool_turn(session, 1, close=False)
    for closer in interrupted_turn_closers(session.events):
        appended = session.append(
            closer.type,
            closer.data,
            surface_op=closer.surface_op,
            source_event_seqs=closer.source_event_seqs,
        )
        assert appended.seq == closer.seq
    assert interrupted_turn_closers(session.events) == []


def test_wire_dicts_and_events_give_the_same_closers() -> None:
    log = WireLog()
    tool_turn(log, 1, close=False)
    as_events = [SessionEvent.from_json(e) for e in log.events]
    assert interrupted_turn_closers(log.events) == interrupted_turn_closers(as_events)
    assert interrupted_turn_closers(iter(log.events)) == interrupted_turn_closers(log.events)


def test_the_function_is_pure() -> None:
    log = WireLog()
    tool_turn(log, 1, close=False)
    before = [dict(e) for e in log.events]
    first = interrupted_turn_closers(log.events)
    assert interrupted_turn_closers(log.events) == first
    assert log.events == before


def test_a_turn_ended_after_a_crash_marker_is_balanced() -> None:
    log = WireLog()
    tool_turn(log, 1, close=False)
    log.append("session/end-seed", {})
    for closer in interrupted_turn_closers(log.events):
        log.events.append(closer.to_json())
    end_turn_seq = log.seq - 1
    assert log.events[end_turn_seq]["type"] == "turn/end"
    begin_turn(log, 2)
    end_turn(log, 2)
    assert closers_of(log) == []
