"""Closing a turn that a crash (or a fork) left open (SPEC §7.4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from session_sql.events import SessionEvent
from session_sql.jsonvalue import snapshot_json

OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
NOT_STARTED = "TOOL_NOT_STARTED"


def _as_event(raw: SessionEvent | dict[str, Any]) -> SessionEvent:
    return raw if isinstance(raw, SessionEvent) else SessionEvent.from_json(raw)


def _int(data: Any, key: str) -> int | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if type(value) is int else None


def interrupted_turn_closers(
    events: Iterable[SessionEvent | dict[str, Any]], *, reason: str = "interrupted"
) -> list[SessionEvent]:
    """The events that close the open turn at the end of ``events`` (``[]`` when none is open).

    For each tool call of an ``assistant/message`` in the open step without a ``tool/result``:
    an error result (``TOOL_OUTCOME_UNKNOWN`` citing the logged ``tool/call``, else
    ``TOOL_NOT_STARTED``); then ``step/end`` if a step is open; then ``turn/end`` with
    ``reason={"kind": reason}``. Seqs continue the log; times repeat the last event's.
    """
    log = [_as_event(e) for e in events]
    if not log:
        return []
    open_turn: int | None = None
    open_step: int | None = None
    # Only the tool calls of an assistant/message get a result: a result for a call the model
    # never sent would be an orphan in the transcript. A tool/call event only supplies the seq.
    calls: dict[str, Any] = {}  # callId -> tool name, from the open step's assistant messages
    call_seqs: dict[str, int] = {}  # callId -> seq of its tool/call in the open step
    answered: set[str] = set()
    for event in log:
        data = event.data
        if event.type == "turn/start":
            open_turn, open_step = _int(data, "turn"), None
            calls.clear()
            call_seqs.clear()
            answered.clear()
        elif event.type == "turn/end":
            open_turn = open_step = None
        elif event.type == "step/start" and open_turn is not None:
            open_step = _int(data, "step")
            calls.clear()
            call_seqs.clear()
            answered.clear()
        elif event.type == "step/end":
            open_step = None
        elif event.type == "assistant/message" and open_step is not None:
            for block in data["message"]["content"]:
                if isinstance(block, dict) and block.get("type") == "tool-call":
                    calls.setdefault(block["id"], block["name"])
        elif event.type == "tool/call" and open_step is not None and isinstance(data, dict):
            call_id = data.get("callId")
            if type(call_id) is str:
                call_seqs[call_id] = event.seq
        elif event.type == "tool/result" and isinstance(data, dict):
            answered.add(data["message"]["source"]["callId"])
    if open_turn is None:
        return []
    last = log[-1]
    seq, time = last.seq + 1, last.time
    closers: list[SessionEvent] = []
    if open_step is not None:
        for call_id, name in calls.items():
            if call_id in answered:
                continue
            call_seq = call_seqs.get(call_id)
            closers.append(
                _error_result(seq, time, open_turn, open_step, call_id, name, call_seq, reason)
            )
            seq += 1
        closers.append(
            SessionEvent(
                "step/end", seq, time, snapshot_json({"turn": open_turn, "step": open_step})
            )
        )
        seq += 1
    closers.append(
        SessionEvent(
            "turn/end", seq, time, snapshot_json({"turn": open_turn, "reason": {"kind": reason}})
        )
    )
    return closers


def _error_result(
    seq: int,
    time: int,
    turn: int,
    step: int,
    call_id: str,
    name: Any,
    call_seq: int | None,
    reason: str,
) -> SessionEvent:
    cause = "the session was forked" if reason == "forked" else "the session was interrupted"
    if call_seq is not None:
        code = OUTCOME_UNKNOWN
        text = (
            f"Tool call {name!r} (id {call_id}) was started, but {cause} before its result "
            "was recorded. Its outcome is unknown: it may or may not have taken effect."
        )
    else:
        code = NOT_STARTED
        text = f"Tool call {name!r} (id {call_id}) was never started because {cause}."
    data = {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"closer-{seq}-{call_id}",
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call_id,
                    "content": [{"type": "text", "text": text}],
                    "isError": True,
                }
            ],
            "source": {"kind": "tool", "callId": call_id},
        },
        "error": {"name": "Interrupted", "code": code},
    }
    return SessionEvent(
        "tool/result",
        seq,
        time,
        snapshot_json(data),
        "append",
        (call_seq,) if call_seq is not None else None,
    )
