"""Builders and comparisons shared by the reliability harnesses.

The module has a unique name (the test directories are not packages, so two ``builders``
modules would shadow each other). Everything here is plain data: child processes started with
the 'spawn' context import it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from session_sql import Replace, SessionEvent, SessionStore
from session_sql.jsonvalue import json_equal, thaw

PROVIDER = {"kind": "model", "provider": "prov", "model": "mod"}


def user_message(text: str, *, id: str = "u") -> dict[str, Any]:
    return {
        "id": id,
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


def assistant_data(
    turn: int, step: int, text: str, tool_calls: Sequence[str] = (), *, id: str = "a"
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool-call", "id": call, "name": "shell", "arguments": {"cmd": "ls"}}
        for call in tool_calls
    ]
    return {
        "turn": turn,
        "step": step,
        "message": {"id": id, "role": "assistant", "content": content, "source": PROVIDER},
        "usage": {"inputTokens": 3, "outputTokens": 5},
    }


def tool_result_data(turn: int, step: int, call: str, output: str) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"r-{call}",
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call,
                    "content": [{"type": "text", "text": output}],
                }
            ],
            "source": {"kind": "tool", "callId": call},
        },
    }


def item(
    type_: str,
    data: Any,
    surface_op: Any = None,
    sources: Sequence[int] | None = None,
    *,
    ignorable: bool = False,
) -> dict[str, Any]:
    """One ``append_many`` item (``append``'s keyword names), as plain JSON-able data."""
    out: dict[str, Any] = {"type": type_, "data": data}
    if surface_op is not None:
        out["surface_op"] = surface_op
    if sources is not None:
        out["source_event_seqs"] = list(sources)
    if ignorable:
        out["ignorable"] = True
    return out


def op_json(op: Any) -> Any:
    """A surface op as JSON (``Replace`` becomes its wire object)."""
    return op.to_json() if isinstance(op, Replace) else op


def shape_of_item(entry: dict[str, Any]) -> list[Any]:
    """What an attempted item must look like once stored: type, data, op, sources, ignorable."""
    sources = entry.get("source_event_seqs")
    return [
        entry["type"],
        entry.get("data"),
        op_json(entry.get("surface_op")),
        None if sources is None else list(sources),
        bool(entry.get("ignorable", False)),
    ]


def shape_of_event(event: SessionEvent) -> list[Any]:
    """The same shape for a stored event (``time`` and ``seq`` left out)."""
    return [
        event.type,
        thaw(event.data),
        op_json(event.surface_op),
        None if event.source_event_seqs is None else list(event.source_event_seqs),
        event.ignorable,
    ]


def same_shapes(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Type-sensitive equality (``1``, ``1.0`` and ``True`` differ), through a JSON round trip."""
    return json_equal(json.loads(json.dumps(list(a))), json.loads(json.dumps(list(b))))


def wires(events: Iterable[SessionEvent]) -> list[dict[str, Any]]:
    return [thaw(e.to_json()) for e in events]


def assert_store_consistent(store: SessionStore, session_id: str) -> list[SessionEvent]:
    """live == replay == stored for one session; returns its stored log.

    ``verify`` compares the fold with the side table and the row; the read paths that never
    replay (``surface``, ``messages``) must agree with a full replay.
    """
    report = store.verify(session_id)
    assert report.ok, (session_id, report.problems)
    stored = list(store.events(session_id))
    assert [e.seq for e in stored] == list(range(len(stored)))
    replay = store.load_session(session_id)
    assert replay.events[: len(stored)] == tuple(stored)
    assert store.surface(session_id) == tuple(replay.surface.nodes)
    assert json_equal(thaw(store.messages(session_id)), thaw(replay.messages()))
    return stored
