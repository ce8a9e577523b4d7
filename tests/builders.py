"""The message and event builders every suite shares: messages, wire events, whole turns.

The append helpers (``say``, ``reply``, ``call_tool``, ...) work on a live ``Session`` (a
``StoredSession`` too) and on a ``WireLog`` alike, so one scenario can be appended live, stored,
or handed to ``Session(seed=...)``. Each returns the seq of the event it appended.

Each suite's own module (``core/builders.py``, ``store/store_builders.py``,
``reliability/reliability_builders.py``) re-exports these next to what is specific to it.
Everything here is plain data: child processes started with the 'spawn' context import it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

from session_sql import Replace, Session, SessionEvent

__all__ = [
    "T0",
    "Target",
    "WireLog",
    "answer",
    "assistant_data",
    "assistant_message",
    "begin_step",
    "begin_turn",
    "call_tool",
    "chunk",
    "chunk_data",
    "end_step",
    "end_turn",
    "remove",
    "reply",
    "request_header_data",
    "say",
    "summarize",
    "text_block",
    "tool_call_data",
    "tool_result_data",
    "tool_turn",
    "tool_turn_log",
    "user_message",
    "wire",
    "wires",
]

T0 = 1_700_000_000_000
"""The first timestamp of a ``WireLog`` (and of the core suite's ``Clock``)."""


# -- messages and data -------------------------------------------------------------------------


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def user_message(text: str = "hello", *, id: str = "u1", kind: str = "user") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": [text_block(text)], "source": {"kind": kind}}


def assistant_message(
    text: str | None = "ok",
    *,
    id: str = "a1",
    tool_calls: Sequence[str | tuple[str, str]] = (),
    provider: str = "prov",
    model: str = "mod",
) -> dict[str, Any]:
    """An assistant message; ``text=None`` and no tool calls gives empty content.

    A tool call is ``(call_id, name)``, or a bare ``call_id`` for the ``shell`` tool.
    """
    content: list[dict[str, Any]] = [] if text is None else [text_block(text)]
    for call in tool_calls:
        call_id, name = (call, "shell") if isinstance(call, str) else call
        content.append(
            {"type": "tool-call", "id": call_id, "name": name, "arguments": {"cmd": "ls"}}
        )
    return {
        "id": id,
        "role": "assistant",
        "content": content,
        "source": {"kind": "model", "provider": provider, "model": model},
    }


def assistant_data(
    message: dict[str, Any] | None = None, *, turn: int = 1, step: int = 1, **extra: Any
) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": assistant_message() if message is None else message,
        **extra,
    }


def tool_result_data(
    call_id: str = "c1",
    output: str = "done",
    *,
    turn: int = 1,
    step: int = 1,
    id: str | None = None,
    is_error: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": [text_block(output)],
    }
    if is_error is not None:
        block["isError"] = is_error
    message = {
        "id": f"r-{call_id}" if id is None else id,
        "role": "user",
        "content": [block],
        "source": {"kind": "tool", "callId": call_id},
    }
    return {"turn": turn, "step": step, "message": message, **extra}


def tool_call_data(
    call_id: str = "c1", name: str = "shell", *, turn: int = 1, step: int = 1
) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "callId": call_id,
        "name": name,
        "arguments": '{"cmd":"ls"}',
    }


def chunk_data(text: str = "x", *, turn: int = 1, step: int = 1, index: int = 0) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "chunk": {"type": "text-delta", "index": index, "text": text},
    }


def request_header_data(reason: str = "initial", *, model: str = "mod") -> dict[str, Any]:
    return {"header": {"config": {"provider": "prov", "model": model}}, "reason": reason}


# -- wire events and logs ----------------------------------------------------------------------


def wire(
    type: str,
    seq: int,
    data: Any = None,
    *,
    time: int = T0,
    surface_op: Any = None,
    source_event_seqs: Any = None,
    ignorable: bool = False,
) -> dict[str, Any]:
    """A wire event; optional keys are present only when given."""
    event: dict[str, Any] = {"type": type, "seq": seq, "time": time, "data": data}
    if surface_op is not None:
        event["surfaceOp"] = surface_op.to_json() if isinstance(surface_op, Replace) else surface_op
    if source_event_seqs is not None:
        event["sourceEventSeqs"] = list(source_event_seqs)
    if ignorable:
        event["ignorable"] = True
    return event


def wires(events: Iterable[SessionEvent]) -> list[dict[str, Any]]:
    """Events as plain wire dicts, for comparing logs."""
    return [e.to_json() for e in events]


class WireLog:
    """A list of wire events with contiguous seqs, built with ``Session.append``'s signature."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    @property
    def seq(self) -> int:
        return len(self.events)

    def append(
        self,
        type: str,
        data: Any = None,
        *,
        surface_op: Any = None,
        source_event_seqs: Any = None,
        ignorable: bool = False,
    ) -> int:
        seq = self.seq
        self.events.append(
            wire(
                type,
                seq,
                data,
                time=T0 + seq,
                surface_op=surface_op,
                source_event_seqs=source_event_seqs,
                ignorable=ignorable,
            )
        )
        return seq


Target: TypeAlias = "Session | WireLog"
"""Where the append helpers append: a live (or stored) session, or a wire log."""


def _seq(appended: SessionEvent | int) -> int:
    return appended.seq if isinstance(appended, SessionEvent) else appended


def say(
    target: Target,
    text: str = "hello",
    *,
    id: str | None = None,
    surface_op: Any = "append",
    sources: Sequence[int] | None = None,
) -> int:
    """Append a ``user/message``."""
    message = user_message(text, id=f"u{target.seq}" if id is None else id)
    return _seq(
        target.append("user/message", message, surface_op=surface_op, source_event_seqs=sources)
    )


def reply(
    target: Target,
    text: str | None = "ok",
    *,
    turn: int = 1,
    step: int = 1,
    tool_calls: Sequence[str | tuple[str, str]] = (),
    sources: Sequence[int] | None = None,
    surface_op: Any = "append",
) -> int:
    """Append an ``assistant/message`` (``text=None``, no calls: empty content)."""
    message = assistant_message(text, id=f"a{target.seq}", tool_calls=tool_calls)
    data = assistant_data(message, turn=turn, step=step)
    return _seq(
        target.append("assistant/message", data, surface_op=surface_op, source_event_seqs=sources)
    )


def call_tool(
    target: Target, call_id: str, name: str = "shell", *, turn: int = 1, step: int = 1
) -> int:
    return _seq(target.append("tool/call", tool_call_data(call_id, name, turn=turn, step=step)))


def answer(
    target: Target,
    call_id: str,
    output: str = "done",
    *,
    turn: int = 1,
    step: int = 1,
    sources: Sequence[int] | None = None,
    surface_op: Any = "append",
    **extra: Any,
) -> int:
    """Append a ``tool/result`` for ``call_id``."""
    data = tool_result_data(call_id, output, turn=turn, step=step, **extra)
    return _seq(
        target.append("tool/result", data, surface_op=surface_op, source_event_seqs=sources)
    )


def chunk(target: Target, text: str = "x", *, turn: int = 1, step: int = 1, index: int = 0) -> int:
    data = chunk_data(text, turn=turn, step=step, index=index)
    return _seq(target.append("assistant/chunk", data))


def begin_turn(target: Target, turn: int = 1) -> int:
    return _seq(target.append("turn/start", {"turn": turn}))


def end_turn(target: Target, turn: int = 1, kind: str = "completed") -> int:
    return _seq(target.append("turn/end", {"turn": turn, "reason": {"kind": kind}}))


def begin_step(target: Target, turn: int = 1, step: int = 1) -> int:
    return _seq(target.append("step/start", {"turn": turn, "step": step}))


def end_step(target: Target, turn: int = 1, step: int = 1) -> int:
    return _seq(target.append("step/end", {"turn": turn, "step": step}))


def summarize(target: Target, start: int, end: int, sources: Sequence[int]) -> int:
    """Append a summary ``user/message`` replacing surface nodes ``start..end``."""
    return say(target, "summary", surface_op=Replace(start, end), sources=sources)


def remove(
    target: Target, start: int, end: int, sources: Sequence[int], reason: str = "pop"
) -> int:
    """Append a ``surface/removed`` taking surface nodes ``start..end`` off the surface."""
    op = Replace(start, end)
    return _seq(
        target.append(
            "surface/removed", {"reason": reason}, surface_op=op, source_event_seqs=sources
        )
    )


def tool_turn(target: Target, turn: int = 1, *, close: bool = True) -> dict[str, int]:
    """A whole turn: request, user message, chunk, a tool-calling reply, its call and result,
    then a final reply in step 2. Returns the seqs by role. ``close=False`` stops after the
    tool/call of step 1 (a crash mid-step)."""
    seqs = {"turn/start": begin_turn(target, turn)}
    seqs["request/header"] = _seq(target.append("request/header", request_header_data()))
    seqs["user"] = say(target, f"question {turn}")
    seqs["step/start"] = begin_step(target, turn, 1)
    seqs["chunk"] = chunk(target, turn=turn, step=1)
    seqs["reply"] = reply(
        target,
        "let me look",
        turn=turn,
        step=1,
        tool_calls=[(f"c{turn}", "shell")],
        sources=[seqs["chunk"]],
    )
    seqs["tool/call"] = call_tool(target, f"c{turn}", turn=turn, step=1)
    if not close:
        return seqs
    seqs["tool/result"] = answer(
        target, f"c{turn}", "file.txt", turn=turn, step=1, sources=[seqs["tool/call"]]
    )
    seqs["step/end"] = end_step(target, turn, 1)
    begin_step(target, turn, 2)
    seqs["final"] = reply(target, "done", turn=turn, step=2)
    end_step(target, turn, 2)
    seqs["turn/end"] = end_turn(target, turn)
    return seqs


def tool_turn_log(turns: int = 1) -> list[dict[str, Any]]:
    """The wire log of ``turns`` closed ``tool_turn``s."""
    log = WireLog()
    for turn in range(1, turns + 1):
        tool_turn(log, turn)
    return log.events
