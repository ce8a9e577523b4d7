"""A large, realistic-looking session written by one INSERT ... SELECT, for plans and timings.

Appending 200k (or 1M) events one by one would take minutes, and so would building the rows in
Python; the analytics questions only need rows shaped like a real agent's log, so the database
writes them itself from a 16-event template, once per turn: turn/start, a user message, a step
with four streamed chunks, a reply and one tool call with its result, a second step with a
short reply, turn/end. Every eighth turn a pruning ``tool/result`` replaces the turn's result
(in place of the first step/end); every tenth turn's result is an error. So 200k events hold
12.5k tool calls, as in the report this data reproduces. The rows bypass the store's checks,
which is fine for reading them back with SQL: the surface table is left empty.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from sqlalchemy import Engine, insert, text

from session_sql._store.database import write_tx
from session_sql._store.schema import tables_for
from session_sql.jsonl import dumps_line

TURN = 16
PRUNE_EVERY = 8
ERROR_EVERY = 10

_WHERE = '"turn": __T__, "step": __S__'
_CHUNK = "{" + _WHERE + ', "chunk": "word "}'
_REPLY = (
    "{" + _WHERE + ', "message": {"id": "a__Q__", "role": "assistant", "content": [{"type": '
    '"text", "text": "word word word word word word word word"}], "source": {"kind": "model", '
    '"provider": "openai", "model": "gpt-test"}}, "usage": {"inputTokens": 1000, '
    '"outputTokens": 50}}'
)


def _result(body: str, error: str) -> str:
    return (
        "{" + _WHERE + ', "message": {"id": "r__Q__", "role": "user", "content": [{"type": '
        '"tool-result", "toolCallId": "call-__T__", "content": ["' + body + '"]' + error + "}], "
        '"source": {"kind": "tool", "callId": "call-__T__"}}}'
    )


# (position, when: 0 always / 1 pruning turns / 2 other turns, step, type, data, surface_op)
_TEMPLATE: list[tuple[int, int, int, str, str, str | None]] = [
    (0, 0, 0, "turn/start", '{"turn": __T__}', None),
    (
        1,
        0,
        0,
        "user/message",
        '{"id": "u__Q__", "role": "user", "content": [{"type": "text", "text": "go on"}]}',
        '"append"',
    ),
    (2, 0, 1, "step/start", "{" + _WHERE + "}", None),
    *(
        (p, 0, 1, "assistant/chunk", "{" + _WHERE + ', "chunk": "word "}', None)
        for p in range(3, 7)
    ),
    (7, 0, 1, "assistant/message", _REPLY, '"append"'),
    (
        8,
        0,
        1,
        "tool/call",
        "{" + _WHERE + ', "callId": "call-__T__", "name": "__N__", "arguments": "{}"}',
        None,
    ),
    (9, 0, 1, "tool/result", _result("output line " * 40, "__E__"), '"append"'),
    (10, 1, 1, "tool/result", _result("[pruned]", ""), "__R__"),
    (10, 2, 1, "step/end", "{" + _WHERE + "}", None),
    (11, 0, 2, "step/start", "{" + _WHERE + "}", None),
    (12, 0, 2, "assistant/chunk", "{" + _WHERE + ', "chunk": "ok"}', None),
    (13, 0, 2, "assistant/message", _REPLY, '"append"'),
    (14, 0, 2, "step/end", "{" + _WHERE + "}", None),
    (15, 0, 0, "turn/end", '{"turn": __T__, "reason": {"kind": "completed"}}', None),
]
TOOLS = ("shell", "read_file", "edit_file", "search", "web_fetch")


def _sql(dialect: str, schema: str | None) -> str:
    def lit(value: str | None) -> str:
        return "NULL" if value is None else "'" + value.replace("'", "''") + "'"

    values = ",\n".join(
        f"({pos}, {when}, {step}, {lit(type_)}, {lit(data)}, {lit(op)})"
        for pos, when, step, type_, data, op in _TEMPLATE
    )
    prefix = "" if schema is None else f'"{schema}".'
    data_type = "TEXT" if dialect == "sqlite" else "JSON"  # the column's type: text as written
    tools = (
        "CASE (k.n + 1) % 5 "
        + " ".join(f"WHEN {i} THEN '{name}'" for i, name in enumerate(TOOLS))
        + " END"
    )
    base = f"({TURN} * k.n)"
    return f"""
INSERT INTO {prefix}events
    (session_key, seq, type, time, data, source_event_seqs, surface_op, ignorable)
WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n < :turns - 1)
SELECT :session_key, {base} + t.column1, t.column4, :at + 10 * ({base} + t.column1),
       CAST(replace(replace(replace(replace(replace(t.column5,
            '__T__', CAST(k.n + 1 AS TEXT)), '__S__', CAST(t.column3 AS TEXT)),
            '__Q__', CAST({base} + t.column1 AS TEXT)), '__N__', {tools}),
            '__E__', CASE WHEN (k.n + 1) % {ERROR_EVERY} = 0 THEN ', "isError": true' ELSE '' END)
            AS {data_type}),
       CASE t.column1
            WHEN 7 THEN '[' || ({base} + 3) || ', ' || ({base} + 4) || ', ' || ({base} + 5)
                        || ', ' || ({base} + 6) || ']'
            WHEN 13 THEN '[' || ({base} + 12) || ']'
            WHEN 9 THEN '[' || ({base} + 8) || ']'
            WHEN 10 THEN CASE WHEN t.column4 = 'tool/result' THEN '[' || ({base} + 9) || ']' END
       END,
       CASE WHEN t.column6 = '__R__'
            THEN '{{"op": "replace", "start": ' || ({base} + 9)
                 || ', "end": ' || ({base} + 9) || '}}'
            ELSE t.column6 END,
       NULL
FROM k JOIN (VALUES {values}) AS t
  ON t.column2 = 0
  OR (t.column2 = 1 AND (k.n + 1) % {PRUNE_EVERY} = 0)
  OR (t.column2 = 2 AND (k.n + 1) % {PRUNE_EVERY} <> 0)
"""


def bulk_session(engine: Engine, schema: str | None, session_id: str, count: int) -> None:
    """Insert one session of ``count`` generated events (a multiple of 16) in one transaction."""
    assert count % TURN == 0
    sqlite = engine.dialect.name == "sqlite"
    t = tables_for(None if sqlite else schema)
    at = int(time.time() * 1000)
    header = {"version": 0, "id": session_id, "createdAt": at, "isSeeded": False}
    with write_tx(engine) as conn:
        # The events name the session by the key its row is given (the default tenant's).
        key = conn.execute(
            insert(t.sessions).returning(t.sessions.c.session_key),
            {
                "id": session_id,
                "format_version": 0,
                "created_at": at,
                "parent_session": None,
                "inherited_event_count": 0,
                "header": header,
                "head_seq": count - 1,
                "surface_next_pos": 0,
                "replace_generation": count // (TURN * PRUNE_EVERY),
                "updated_at": at,
                "incarnation": "0" * 32,
            },
        ).scalar_one()
        conn.execute(insert(t.session_ids), {"id": session_id, "session_key": key})
        conn.execute(
            text(_sql(engine.dialect.name, None if sqlite else schema)),
            {"turns": count // TURN, "session_key": key, "at": at},
        )


def expected_tool_calls(count: int) -> int:
    return count // TURN


def _turn_events(turn: int, base: int) -> list[dict[str, Any]]:
    """The 16 wire events of turn ``turn`` (1-based) from seq ``base``: the template above, as
    the library writes them (messages in the shapes SPEC §3 gives)."""
    call_id = f"call-{turn}"
    tool = TOOLS[turn % len(TOOLS)]
    at = 1_700_000_000_000 + 10 * base

    def event(offset: int, type_: str, data: Any, **extra: Any) -> dict[str, Any]:
        return {
            "type": type_,
            "seq": base + offset,
            "time": at + 10 * offset,
            "data": data,
            **extra,
        }

    def where(step: int) -> dict[str, int]:
        return {"turn": turn, "step": step}

    def reply(offset: int, step: int, sources: list[int], calls: bool) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": "word " * 8}]
        if calls:
            content.append({"type": "tool-call", "id": call_id, "name": tool, "arguments": {}})
        message = {
            "id": f"a{base + offset}",
            "role": "assistant",
            "content": content,
            "source": {"kind": "model", "provider": "openai", "model": "gpt-test"},
        }
        data = {
            **where(step),
            "message": message,
            "usage": {"inputTokens": 1000, "outputTokens": 50},
        }
        return event(offset, "assistant/message", data, surfaceOp="append", sourceEventSeqs=sources)

    def result(offset: int, body: str, error: bool) -> dict[str, Any]:
        block: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": call_id,
            "content": [{"type": "text", "text": body}],
        }
        if error:
            block["isError"] = True
        message = {
            "id": f"r{turn}",
            "role": "user",
            "content": [block],
            "source": {"kind": "tool", "callId": call_id},
        }
        return event(offset, "tool/result", {**where(1), "message": message})

    chunk = {"type": "text-delta", "index": 0, "text": "word "}
    error = turn % ERROR_EVERY == 0
    out = [
        event(0, "turn/start", {"turn": turn}),
        event(
            1,
            "user/message",
            {
                "id": f"u{base + 1}",
                "role": "user",
                "content": [{"type": "text", "text": "go on"}],
                "source": {"kind": "user"},
            },
            surfaceOp="append",
        ),
        event(2, "step/start", where(1)),
        *(event(k, "assistant/chunk", {**where(1), "chunk": chunk}) for k in range(3, 7)),
        reply(7, 1, [base + k for k in range(3, 7)], True),
        event(8, "tool/call", {**where(1), "callId": call_id, "name": tool, "arguments": "{}"}),
        {
            **result(9, "output line " * 40, error),
            "surfaceOp": "append",
            "sourceEventSeqs": [base + 8],
        },
    ]
    if turn % PRUNE_EVERY == 0:  # the pruning takes the first step/end's place, as above
        replace = {"op": "replace", "start": base + 9, "end": base + 9}
        pruned = result(10, "[pruned]", error)
        out.append({**pruned, "surfaceOp": replace, "sourceEventSeqs": [base + 9]})
    else:
        out.append(event(10, "step/end", where(1)))
    out += [
        event(11, "step/start", where(2)),
        event(12, "assistant/chunk", {**where(2), "chunk": chunk}),
        reply(13, 2, [base + 12], False),
        event(14, "step/end", where(2)),
        event(15, "turn/end", {"turn": turn, "reason": {"kind": "completed"}}),
    ]
    return out


def write_jsonl(path: str | os.PathLike[str], session_id: str, count: int) -> None:
    """The same session as ``bulk_session``, as a JSONL export for ``import_jsonl`` (the
    store's own bulk path, every line checked), streamed to ``path``."""
    assert count % TURN == 0
    header = {"version": 0, "id": session_id, "createdAt": 1_700_000_000_000, "isSeeded": False}
    with open(path, "w", encoding="utf-8") as out:
        out.write(dumps_line(header))
        for n in range(count // TURN):
            for wire in _turn_events(n + 1, n * TURN):
                out.write(dumps_line(wire))


def append_session(store: Any, session_id: str, count: int) -> None:
    """The same session as ``bulk_session``, grown as an agent grows it: one ``append_many``
    (one transaction) per turn, through ``store``'s ordinary append path."""
    assert count % TURN == 0
    handle = store.create_session(session_id)
    for n in range(count // TURN):
        handle.append_many([_append_item(wire) for wire in _turn_events(n + 1, n * TURN)])


def _append_item(wire: dict[str, Any]) -> dict[str, Any]:
    """A wire event as ``append_many`` takes it (append's argument names; seq and time are
    the store's)."""
    item = {"type": wire["type"], "data": wire["data"]}
    if "surfaceOp" in wire:
        item["surface_op"] = wire["surfaceOp"]
    if "sourceEventSeqs" in wire:
        item["source_event_seqs"] = wire["sourceEventSeqs"]
    return item


__all__ = [
    "TURN",
    "append_session",
    "bulk_session",
    "expected_tool_calls",
    "json",
    "write_jsonl",
]
