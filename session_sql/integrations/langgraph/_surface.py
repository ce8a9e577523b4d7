"""The ``messages`` channel on the surface: LangChain messages as core message events, so
that ``messages()``, the SQL views and ``session-sql show`` read a LangGraph conversation."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from session_sql import Replace

from ._codec import is_json
from ._ids import SOURCE_KIND, Batch

Surfaced = list[tuple[str, int, Any]]  # what the surface shows: (message id, seq, event data)


def content_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                blocks.append({"type": "text", "text": part})
            elif (
                isinstance(part, dict)
                and type(part.get("type")) is str
                and part["type"]
                and is_json(part)
            ):
                if part["type"] == "text" and type(part.get("text")) is not str:
                    continue
                blocks.append(dict(part))
    return blocks


def core_event(message: Any, turn: int, step: int) -> dict[str, Any] | None:
    """A LangChain message as a core message event (None: not a chat message we show)."""
    kind = getattr(message, "type", None)
    mid = getattr(message, "id", None)
    if type(mid) is not str or not mid:
        return None
    if kind == "human":
        data = {
            "id": mid,
            "role": "user",
            "content": content_blocks(message.content),
            "source": {"kind": SOURCE_KIND},
        }
        return {"type": "user/message", "data": data}
    if kind == "ai":
        content = content_blocks(message.content)
        for call in getattr(message, "tool_calls", None) or []:
            if call.get("id") and call.get("name") and is_json(call.get("args")):
                content.append(
                    {
                        "type": "tool-call",
                        "id": call["id"],
                        "name": call["name"],
                        "arguments": call.get("args"),
                    }
                )
        meta = getattr(message, "response_metadata", None) or {}
        provider = meta.get("model_provider") or SOURCE_KIND
        model = meta.get("model_name") or meta.get("model") or "unknown"
        body: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "message": {
                "id": mid,
                "role": "assistant",
                "content": content,
                "source": {"kind": "model", "provider": str(provider), "model": str(model)},
            },
        }
        usage = getattr(message, "usage_metadata", None)
        if usage:
            body["usage"] = {
                "inputTokens": int(usage.get("input_tokens", 0)),
                "outputTokens": int(usage.get("output_tokens", 0)),
            }
        return {"type": "assistant/message", "data": body}
    if kind == "tool":
        call_id = getattr(message, "tool_call_id", None)
        if type(call_id) is not str or not call_id:
            return None
        result: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": content_blocks(message.content),
        }
        if getattr(message, "status", None) == "error":
            result["isError"] = True
        source: dict[str, Any] = {"kind": "tool", "callId": call_id}
        if getattr(message, "name", None):
            source["name"] = message.name
        tool: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "message": {"id": mid, "role": "user", "content": [result], "source": source},
        }
        return {"type": "tool/result", "data": tool}
    return None


Numbering = tuple[int, int]  # (the run's turn, the step of its last assistant message)


def wanted_events(messages: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The core events of ``messages`` (with their ids), not numbered yet (turn and step 0)."""
    wanted: list[tuple[str, dict[str, Any]]] = []
    for message in messages:
        event = core_event(message, 0, 0)
        if event is not None:
            wanted.append((message.id, event))
    return wanted


def numbered(events: Sequence[dict[str, Any]], numbering: Numbering) -> tuple[Batch, Numbering]:
    """``events`` numbered on from ``numbering``: each in the run's turn, an assistant message
    a step of its own, the tool results in the step of the message before them."""
    turn, step = numbering
    out: Batch = []
    for event in events:
        data = event["data"]
        if "turn" not in data:
            out.append(event)
            continue
        if event["type"] == "assistant/message":
            step += 1
        out.append({**event, "data": {**data, "turn": turn, "step": step}})
    return out, (turn, step)


def _unnumbered(data: Any) -> Any:
    if isinstance(data, Mapping) and "turn" in data:
        return {k: v for k, v in data.items() if k not in ("turn", "step")}
    return data


def surface_tail(messages: Sequence[Any], numbering: Numbering) -> Batch:
    """The events appending ``messages`` to a surface that shows the ones before them."""
    new, _ = numbered([event for _, event in wanted_events(messages)], numbering)
    return with_calls([{**event, "surface_op": "append"} for event in new])


def surface_batch(have: Surfaced, messages: list[Any], numbering: Numbering) -> Batch:
    """Events that make the surface show ``messages``: the new ones appended, or the part
    that differs replaced (a ``RemoveMessage``, a time-travel fork). The messages the surface
    shows already keep their numbers; the others are numbered on from ``numbering``."""
    wanted = wanted_events(messages)
    common = 0
    while (
        common < len(have)
        and common < len(wanted)
        and have[common][0] == wanted[common][0]
        and _unnumbered(have[common][2]) == _unnumbered(wanted[common][1]["data"])
    ):
        common += 1
    new, _ = numbered([event for _, event in wanted[common:]], numbering)
    if common == len(have):
        return with_calls([{**event, "surface_op": "append"} for event in new])
    shadowed = [seq for _, seq, _ in have[common:]]
    op = Replace(shadowed[0], shadowed[-1])
    if not new:
        removed = {"type": "surface/removed", "data": {"reason": "langgraph"}}
        return [{**removed, "surface_op": op, "source_event_seqs": shadowed}]
    first = {**new[0], "surface_op": op, "source_event_seqs": shadowed}
    batch = [first] + [{**event, "surface_op": "append"} for event in new[1:]]
    return with_calls(batch)


def with_calls(batch: Batch) -> Batch:
    """``batch`` with a log-only ``tool/call`` after each assistant message's tool calls, so
    that ``stats`` and the ``tool_calls`` view count them."""
    out: Batch = []
    for event in batch:
        out.append(event)
        if event["type"] != "assistant/message":
            continue
        data = event["data"]
        for block in data["message"]["content"]:
            if block.get("type") == "tool-call":
                call = {
                    "turn": data["turn"],
                    "step": data["step"],
                    "callId": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block["arguments"], ensure_ascii=False),
                }
                out.append({"type": "tool/call", "data": call})
    return out
