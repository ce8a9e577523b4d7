"""Per-type data rules (SPEC §3).

One rule set serves appends, seeds and loads. SPEC §3 lets ``append`` trust its typed producer
and check only the always-on rules; this build checks the seed/load shapes on append as well, so
that nothing is ever written that a reader of the same catalog would refuse on load (the same
reasoning SPEC §2.2 applies to unknown types). The extra cost is a few dict lookups per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from session_sql.errors import InvalidEventError
from session_sql.events import SessionEvent
from session_sql.messages import check_message, result_block

REQUEST_REASONS = frozenset({"initial", "resume", "change", "series"})


def _object(event: SessionEvent) -> dict[str, Any]:
    data = event.data
    if not isinstance(data, dict):
        raise InvalidEventError(
            f"{event.type} data must be an object, got {type(data).__name__}", seq=event.seq
        )
    return data


def _turn_step(event: SessionEvent, data: dict[str, Any]) -> None:
    turn, step = data.get("turn"), data.get("step")
    if type(turn) is int and type(step) is int and turn >= 0 and step >= 0:
        return  # every event of a step passes here: the common case first
    for key in ("turn", "step"):
        value = data.get(key)
        if type(value) is not int or value < 0:
            raise InvalidEventError(
                f"{event.type} data.{key} must be an int >= 0, got {value!r}", seq=event.seq
            )


def _user_message(event: SessionEvent) -> None:
    check_message(event.data, "user", "data", event.seq)


def _step_message(event: SessionEvent, role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An event of a step that carries a message of ``role``: its data and the message's
    source, both checked."""
    data = _object(event)
    _turn_step(event, data)
    message: Any = data.get("message")
    check_message(message, role, "data.message", event.seq)
    return data, message["source"]


def _assistant_message(event: SessionEvent) -> None:
    data, source = _step_message(event, "assistant")
    if source["kind"] != "model" or not all(
        type(source.get(k)) is str and source.get(k) for k in ("provider", "model")
    ):
        raise InvalidEventError(
            "data.message.source must be {kind: 'model', provider, model} (non-empty)",
            seq=event.seq,
        )
    if "interrupted" in data and data["interrupted"] is not True:
        raise InvalidEventError("data.interrupted must be exactly true when present", seq=event.seq)


def _assistant_other(event: SessionEvent) -> None:
    # Once per chunk of every load: the common case without the two calls below.
    data = event.data
    if isinstance(data, dict):
        turn, step = data.get("turn"), data.get("step")
        if type(turn) is int and type(step) is int and turn >= 0 and step >= 0:
            return
    _turn_step(event, _object(event))


def _tool_result(event: SessionEvent) -> None:
    data, source = _step_message(event, "user")
    block = result_block(data)
    if source["kind"] != "tool" or type(source.get("callId")) is not str:
        raise InvalidEventError("data.message.source must be {kind: 'tool', callId}", seq=event.seq)
    if block is None:
        raise InvalidEventError(
            "a tool/result message holds exactly one tool-result block", seq=event.seq
        )
    if block["toolCallId"] != source["callId"]:
        raise InvalidEventError(
            f"tool-result block toolCallId {block['toolCallId']!r} != source.callId "
            f"{source['callId']!r}",
            seq=event.seq,
        )
    if "error" in data and block.get("isError") is not True:
        raise InvalidEventError(
            "data.error is allowed only when the tool-result block has isError: true",
            seq=event.seq,
        )


def _request_header(event: SessionEvent) -> None:
    data = _object(event)
    header = data.get("header")
    if not isinstance(header, dict):
        raise InvalidEventError("request/header data.header must be an object", seq=event.seq)
    config = header.get("config")
    if not isinstance(config, dict) or not all(
        type(config.get(k)) is str and config.get(k) for k in ("provider", "model")
    ):
        raise InvalidEventError(
            "request/header data.header.config needs non-empty str provider and model",
            seq=event.seq,
        )
    if data.get("reason") not in REQUEST_REASONS:
        raise InvalidEventError(
            f"request/header data.reason must be one of {sorted(REQUEST_REASONS)}, "
            f"got {data.get('reason')!r}",
            seq=event.seq,
        )


def _end_seed(event: SessionEvent) -> None:
    data = _object(event)
    if data and dict(data) != {"inherited": True}:
        raise InvalidEventError(
            'session/end-seed data must be {} or {"inherited": true}', seq=event.seq
        )


def is_inherited_marker(event: SessionEvent) -> bool:
    """Whether ``event`` is a fork's cut: ``session/end-seed {"inherited": true}``."""
    return event.type == "session/end-seed" and event.data == {"inherited": True}


def check_inherited_marker(event: SessionEvent, seeded: bool, inherited_event_count: int) -> None:
    """The inherited-marker rule: a fork's cut lies inside a seeded session's inherited prefix.

    ``session/end-seed {"inherited": true}`` is written by a fork right after the prefix it
    inherits (at seq ``inherited_event_count``); a fork of a fork inherits its parent's cut
    too, earlier in the log. Anywhere else — in an unseeded session, or after the cut — it
    would make the inherited prefix of an exported log ambiguous, so it is refused.
    """
    if is_inherited_marker(event) and (not seeded or event.seq > inherited_event_count):
        where = (
            f"after the inherited prefix (inherited_event_count {inherited_event_count})"
            if seeded
            else "in a session that is not seeded (isSeeded is false)"
        )
        raise InvalidEventError(
            'inherited-marker rule: session/end-seed {"inherited": true} marks the end of a '
            f"fork's inherited prefix and may not appear {where}, at seq {event.seq}; use "
            "session/end-seed {}",
            seq=event.seq,
        )


def _surface_removed(event: SessionEvent) -> None:
    if type(_object(event).get("reason")) is not str:
        raise InvalidEventError("surface/removed data.reason must be a str", seq=event.seq)


RULES: dict[str, Callable[[SessionEvent], None]] = {
    "user/message": _user_message,
    "assistant/message": _assistant_message,
    "assistant/chunk": _assistant_other,
    "assistant/attempt": _assistant_other,
    "tool/result": _tool_result,
    "request/header": _request_header,
    "session/end-seed": _end_seed,
    "surface/removed": _surface_removed,
}


def check_data(event: SessionEvent) -> None:
    """Apply the data rules of the event's type (types without rules carry opaque JSON)."""
    rule = RULES.get(event.type)
    if rule is not None:
        rule(event)
