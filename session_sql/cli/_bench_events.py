"""The event mix ``session-sql bench`` writes: a plausible agent session, chunk streams, and
a compaction-heavy stream (W3)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Item = dict[str, Any]

_TEXT = "The quick brown fox jumps over the lazy dog. " * 12  # ~540 bytes


def _user(i: int) -> Any:
    return {
        "id": f"u{i}",
        "role": "user",
        "content": [{"type": "text", "text": _TEXT[:480]}],
        "source": {"kind": "user"},
    }


def _assistant(i: int, turn: int, step: int, call: str | None) -> Any:
    content: list[Any] = [{"type": "text", "text": _TEXT[:400]}]
    if call is not None:
        content.append({"type": "tool-call", "id": call, "name": "shell", "arguments": '{"c":1}'})
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"a{i}",
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": "bench", "model": "bench-1"},
        },
        "usage": {"inputTokens": 1200, "outputTokens": 90},
    }


def _result(call: str, turn: int, step: int, text: str) -> Any:
    return {
        "turn": turn,
        "step": step,
        "message": {
            "id": f"r{call}",
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": call,
                    "content": [{"type": "text", "text": text}],
                }
            ],
            "source": {"kind": "tool", "callId": call},
        },
    }


def _chunk(turn: int, step: int, i: int) -> Any:
    return {
        "turn": turn,
        "step": step,
        "chunk": {"type": "text-delta", "index": 0, "text": _TEXT[i % 40 : i % 40 + 24]},
    }


def agent_events(n: int, start: int = 0) -> list[Item]:
    """``n`` append items of a plausible agent session, seqs starting at ``start``.

    Per turn: turn/start, user message, a step with chunks, an assistant message calling a
    tool, the tool call and its result, a second step with chunks and a final answer.
    """
    out: list[Item] = []
    turn = 0
    while len(out) < n:
        turn += 1
        seq = start + len(out)
        items: list[Item] = [
            {"type": "turn/start", "data": {"turn": turn}},
            {"type": "user/message", "data": _user(seq + 1), "surface_op": "append"},
        ]
        for step, call in ((1, f"c{turn}"), (2, None)):
            items.append({"type": "step/start", "data": {"turn": turn, "step": step}})
            first_chunk = seq + len(items)
            items.extend(
                {"type": "assistant/chunk", "data": _chunk(turn, step, k)} for k in range(6)
            )
            chunks = list(range(first_chunk, first_chunk + 6))
            items.append(
                {
                    "type": "assistant/message",
                    "data": _assistant(seq + len(items), turn, step, call),
                    "surface_op": "append",
                    "source_event_seqs": chunks,
                }
            )
            if call is not None:
                call_seq = seq + len(items)
                items.append(
                    {
                        "type": "tool/call",
                        "data": {
                            "turn": turn,
                            "step": step,
                            "callId": call,
                            "name": "shell",
                            "arguments": '{"c":1}',
                        },
                    }
                )
                items.append(
                    {
                        "type": "tool/result",
                        "data": _result(call, turn, step, _TEXT[:450]),
                        "surface_op": "append",
                        "source_event_seqs": [call_seq],
                    }
                )
            items.append({"type": "step/end", "data": {"turn": turn, "step": step}})
        items.append({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
        out.extend(items)
    del out[n:]
    return out


def chunk_events(n: int, turn: int = 1, step: int = 1) -> list[Item]:
    return [{"type": "assistant/chunk", "data": _chunk(turn, step, i)} for i in range(n)]


def compaction_events(n: int) -> Iterator[Item]:
    """W3's stream: messages, and every 50th event a summary replacing the last 40 nodes."""
    nodes: list[int] = []
    for seq in range(n):
        if seq % 50 == 49 and len(nodes) >= 40:
            shadowed = nodes[-40:]
            yield {
                "type": "user/message",
                "data": _user(seq),
                "surface_op": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
                "source_event_seqs": shadowed,
            }
            del nodes[-40:]
        else:
            yield {"type": "user/message", "data": _user(seq), "surface_op": "append"}
        nodes.append(seq)
