"""Builders and comparisons shared by the reliability harnesses.

The message builders come from ``tests/builders.py``; ``assistant_data`` and
``tool_result_data`` here take the positional ``(turn, step, ...)`` order the generated
workloads use. Everything here is plain data: child processes started with the 'spawn' context
import it too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from session_sql import Replace, SessionEvent, SessionStore
from session_sql.jsonvalue import json_equal, thaw

from .. import builders as shared
from ..builders import user_message, wires

__all__ = [
    "USAGE",
    "assert_store_consistent",
    "assistant_data",
    "item",
    "op_json",
    "same_shapes",
    "shape_of_event",
    "shape_of_item",
    "tool_result_data",
    "user_message",
    "wires",
]

USAGE = {"inputTokens": 3, "outputTokens": 5}


def assistant_data(
    turn: int, step: int, text: str, tool_calls: Sequence[str] = (), *, id: str = "a"
) -> dict[str, Any]:
    """An ``assistant/message``'s data with usage; ``text=""`` without calls: empty content."""
    message = shared.assistant_message(text or None, id=id, tool_calls=tool_calls)
    return shared.assistant_data(message, turn=turn, step=step, usage=USAGE)


def tool_result_data(turn: int, step: int, call: str, output: str) -> dict[str, Any]:
    """A ``tool/result``'s data, positional in the order the generated workloads use."""
    return shared.tool_result_data(call, output, turn=turn, step=step)


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
