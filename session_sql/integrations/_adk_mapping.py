"""How an ADK session lies in a session_sql store: its ids, labels and header, and its events.

The conversion both ways, without I/O: ``message_of`` renders an ADK event as the core event
that holds it (when one does), ``record_of`` takes the event back out of the log, and
``Tracked`` folds a session's log into ADK's view of it (events, session state, turn and step
numbers). ``adk.SQLSessionService`` does the storing; the module docstring there describes the
mapping.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.adk.sessions.state import State

from session_sql import AsyncStoredSession
from session_sql.events import SessionEvent, make_header
from session_sql.integrations import ADK_EVENT
from session_sql.session import now_ms

# The labels that name an ADK session's scope in the store (what listing filters on).
KIND = "adk_kind"
APP = "adk_app"
SESSION = "adk_session"
PROVIDER = "google-adk"
"""``source.provider`` of the assistant messages the mapping writes."""


def store_id(kind: str, *names: str) -> str:
    """The store id of an ADK session or state session: a digest of its scope."""
    digest = hashlib.sha256(json.dumps([kind, *names]).encode()).hexdigest()[:32]
    return f"adk-{kind}-{digest}"


def record_of(event: SessionEvent) -> Any:
    """The ADK event JSON an event of the log holds, or None for other events."""
    if event.type == ADK_EVENT:
        return event.data
    if event.type == "user/message":
        return event.data.get("adk")
    if event.type in ("assistant/message", "tool/result"):
        return event.data["message"].get("adk")
    return None


def _text_only(parts: list[Any]) -> bool:
    return all(isinstance(p, dict) and set(p) == {"text"} for p in parts)


def _tool_call(part: Any) -> dict[str, Any] | None:
    """A ``function_call`` part as a tool-call block, when that says all the part says."""
    if not (isinstance(part, dict) and set(part) == {"function_call"}):
        return None
    call = part["function_call"]
    if not (isinstance(call, dict) and set(call) <= {"id", "name", "args"}):
        return None
    if not (call.get("id") and call.get("name")):
        return None
    return {
        "type": "tool-call",
        "id": call["id"],
        "name": call["name"],
        "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False),
    }


def message_of(record: dict[str, Any], turn: int, step: int) -> tuple[str, Any] | None:
    """The core event (type, data) that holds ``record``, or None when no core message does.

    The message is a faithful rendering of the event's content (text, function calls, one
    function response) and carries the event itself under ``"adk"``.
    """
    content = record.get("content")
    if not isinstance(content, dict) or set(content) - {"role", "parts"}:
        return None
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        return None
    role, event_id, author = content.get("role"), record["id"], record.get("author", "")
    if role == "user" and _text_only(parts):
        texts = [{"type": "text", "text": p["text"]} for p in parts]
        source = {"kind": "adk", "author": author}
        message = {"id": event_id, "role": "user", "content": texts, "source": source}
        return "user/message", {**message, "adk": record}
    if role == "model":
        blocks: list[Any] = []
        for p in parts:
            call = _tool_call(p)
            if call is None and not _text_only([p]):
                return None
            blocks.append(call or {"type": "text", "text": p["text"]})
        model = record.get("model_version") or "unknown"
        source = {"kind": "model", "provider": PROVIDER, "model": model, "author": author}
        message = {"id": event_id, "role": "assistant", "content": blocks, "source": source}
        data: dict[str, Any] = {"turn": turn, "step": step, "message": {**message, "adk": record}}
        usage = record.get("usage_metadata") or {}
        tokens_in, tokens_out = usage.get("prompt_token_count"), usage.get("candidates_token_count")
        if isinstance(tokens_in, int) and isinstance(tokens_out, int):
            data["usage"] = {"inputTokens": tokens_in, "outputTokens": tokens_out}
        return "assistant/message", data
    if role == "user" and len(parts) == 1 and set(parts[0]) == {"function_response"}:
        response = parts[0]["function_response"]
        if not (isinstance(response, dict) and set(response) <= {"id", "name", "response"}):
            return None
        call_id = response.get("id")
        if not call_id:
            return None
        text = json.dumps(response.get("response"), ensure_ascii=False)
        block = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [{"type": "text", "text": text}],
        }
        source = {"kind": "tool", "callId": call_id, "name": response.get("name", "")}
        message = {"id": event_id, "role": "user", "content": [block], "source": source}
        return "tool/result", {"turn": turn, "step": step, "message": {**message, "adk": record}}
    return None


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` deltas of an ADK state mapping; ``temp:`` keys are dropped."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def adk_header(key: str, identity: dict[str, Any]) -> dict[str, Any]:
    """A session header that also names the ADK scope (immutable, like the scope)."""
    return {**make_header(key, now_ms()), "adk": identity}


def merged_state(
    session: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]
) -> Any:
    merged = dict(session)
    merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return merged


def boundaries(
    record: dict[str, Any], final: bool, turn: int, step: int, starts: bool, open_turn: int | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The log-only events before and after the core event that holds ``record``.

    Before: the ``turn/end`` of a turn left open (``interrupted``) and the ``turn/start`` of a
    new one. After: a ``tool/call`` per function call of a model message (what the analytics
    count), and the ``turn/end`` after a final response (``completed``).
    """
    before: list[dict[str, Any]] = []
    if starts:
        if open_turn is not None:
            before.append(turn_end(open_turn, "interrupted"))
        before.append({"type": "turn/start", "data": {"turn": turn}})
    after: list[dict[str, Any]] = []
    if (record.get("content") or {}).get("role") == "model":
        for part in record["content"].get("parts") or ():
            call = _tool_call(part)
            if call is not None:
                data = {
                    "turn": turn,
                    "step": step,
                    "callId": call["id"],
                    "name": call["name"],
                    "arguments": call["arguments"],
                }
                after.append({"type": "tool/call", "data": data})
    if final:
        after.append(turn_end(turn, "completed"))
    return before, after


def turn_end(turn: int, reason: str) -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": reason}}}


@dataclass
class Tracked:
    """A cached write handle on an ADK session and what its log folds to so far."""

    handle: AsyncStoredSession
    state: dict[str, Any]
    records: list[Any] = field(default_factory=list)  # the ADK events' JSON, in log order
    folded: int = 0  # how many events of the log are folded
    turn: int = 0  # one per ADK invocation (and per part of one after a final response)
    step: int = 0  # one per model message inside the turn
    invocation: Any = None
    open: bool = False  # a turn/start without its turn/end yet
    fresh: bool = False  # the next event starts a turn (after a turn/start or a turn/end)

    def fold(self) -> None:
        """Fold the events the handle has and this has not seen yet."""
        events = self.handle.events
        for event in events[self.folded :]:
            if event.type in ("turn/start", "turn/end"):
                self.open, self.fresh = event.type == "turn/start", True
                continue
            record = record_of(event)
            if record is not None:
                self.turn, self.step = self.numbers(record)
                self.fresh = False
                self.invocation = record.get("invocation_id")
                self.records.append(record)
                delta = (record.get("actions") or {}).get("state_delta") or {}
                self.state.update(split_state(delta)[2])
        self.folded = len(events)

    def numbers(self, record: Any) -> tuple[int, int]:
        """The (turn, step) of ``record`` after this log: a turn per ADK invocation (and a
        new one when an invocation goes on after a final response), a step per model
        message in it."""
        turn, step = self.turn, self.step
        if turn == 0 or self.fresh or record.get("invocation_id") != self.invocation:
            turn, step = turn + 1, 0
        if (record.get("content") or {}).get("role") == "model":
            step += 1
        return turn, step

    @property
    def head(self) -> int:
        return self.handle.seq - 1

    def updated(self) -> float:
        """ADK's ``last_update_time``: the last event's timestamp (ADK sets it from
        ``event.timestamp``), the creation time for a session without events."""
        if self.records:
            stamp = self.records[-1].get("timestamp")
            if isinstance(stamp, int | float) and not isinstance(stamp, bool):
                return float(stamp)
        return float(self.handle.header["createdAt"]) / 1000
